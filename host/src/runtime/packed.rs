//! The request head as `packed-handler.handle-request` takes it (the layout is documented on
//! the interface in `wit/plugin.wit`): every field but the body in one buffer, so a call
//! lowers two lists into the guest instead of a record of a dozen strings and lists, each
//! copied in through its own call of the guest's allocator.

use super::bindings::types;

/// The interface a component exports to be called this way.
pub const INTERFACE: &str = "ankh:plugin/packed-handler@0.2.0";

/// The function in it.
pub const FUNCTION: &str = "handle-request";

/// Appends `request`'s head (everything but its body) to `out`.
pub fn encode_head(request: &types::Request, out: &mut Vec<u8>) {
    let texts = [
        &request.id,
        &request.method,
        &request.path,
        &request.mount,
        &request.query,
        &request.remote_addr,
    ];
    let headers: usize = request
        .headers
        .iter()
        .map(|h| 8 + h.name.len() + h.value.len())
        .sum();
    out.reserve(1 + texts.iter().map(|t| 4 + t.len()).sum::<usize>() + 4 + headers);
    out.push(match request.version {
        types::HttpVersion::Http10 => 0,
        types::HttpVersion::Http11 => 1,
    });
    for text in texts {
        field(out, text.as_bytes());
    }
    out.extend_from_slice(&length(request.headers.len()));
    for header in &request.headers {
        field(out, header.name.as_bytes());
        field(out, &header.value);
    }
}

fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&length(bytes.len()));
    out.extend_from_slice(bytes);
}

/// A length as the layout writes it. Every field is bounded by the request head limit, far
/// below 4 GiB.
fn length(len: usize) -> [u8; 4] {
    u32::try_from(len)
        .expect("a request field is under 4 GiB")
        .to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_follows_the_documented_layout() {
        let request = types::Request {
            id: "0a".into(),
            method: "GET".into(),
            path: "/m/x".into(),
            mount: "/m".into(),
            query: String::new(),
            headers: vec![types::Header {
                name: "Host".into(),
                value: vec![0xff, b'h'],
            }],
            body: b"not in the head".to_vec(),
            remote_addr: "1.2.3.4:5".into(),
            version: types::HttpVersion::Http11,
        };
        let mut out = vec![9];
        encode_head(&request, &mut out);
        let mut expected = vec![9, 1];
        for text in ["0a", "GET", "/m/x", "/m", "", "1.2.3.4:5"] {
            expected.extend_from_slice(&(text.len() as u32).to_le_bytes());
            expected.extend_from_slice(text.as_bytes());
        }
        expected.extend_from_slice(&[1, 0, 0, 0, 4, 0, 0, 0]);
        expected.extend_from_slice(b"Host");
        expected.extend_from_slice(&[2, 0, 0, 0, 0xff, b'h']);
        assert_eq!(out, expected);
    }
}
