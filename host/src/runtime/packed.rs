//! The request head as `packed-handler.handle-request` takes it (the layout is documented on
//! the interface in `wit/plugin.wit`): every field but the body in one buffer, so a call
//! lowers two lists into the guest instead of a record of a dozen strings and lists, each
//! copied in through its own call of the guest's allocator.

use super::incoming::Incoming;
use crate::proto::Version;

/// The interface a component exports to be called this way.
pub const INTERFACE: &str = "ankh:plugin/packed-handler@0.2.0";

/// The function in it.
pub const FUNCTION: &str = "handle-request";

/// Appends `request`'s head (everything but its body) to `out`, in one allocation: the id and
/// the remote address are written as text straight into it.
pub fn encode_head(request: &Incoming, out: &mut Vec<u8>) {
    let head = &request.head;
    out.reserve(length_bound(request));
    out.push(match head.version {
        Version::Http10 => 0,
        Version::Http11 => 1,
    });
    field(out, &crate::text::hex_digits(request.id));
    field(out, head.method.as_bytes());
    field(out, head.path.as_bytes());
    field(out, request.mount.as_bytes());
    field(out, head.query.as_bytes());
    crate::text::with_address(request.remote, |text| field(out, text.as_bytes()));
    out.extend_from_slice(&length(head.headers.len()));
    for (name, value) in &head.headers {
        field(out, name.as_bytes());
        field(out, value);
    }
}

/// The most bytes [`encode_head`] writes for `request`: the version byte, six length-prefixed
/// texts (the id's 16 digits, the address at its longest), the header count and the headers.
fn length_bound(request: &Incoming) -> usize {
    let head = &request.head;
    let headers: usize = head
        .headers
        .iter()
        .map(|(name, value)| 8 + name.len() + value.len())
        .sum();
    let texts = head.method.len() + head.path.len() + request.mount.len() + head.query.len();
    1 + 6 * 4 + 16 + texts + crate::text::ADDRESS_MAX + 4 + headers
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
        let request = super::super::incoming::tests::incoming(
            b"GET /m/x HTTP/1.1\r\nHost: h\r\nX-Bin: \xffh\r\n\r\n",
            b"not in the head",
        );
        let mut out = vec![9];
        encode_head(&request, &mut out);
        let mut expected = vec![9, 1];
        let fields = ["000000000000002a", "GET", "/m/x", "/m", "", "10.0.0.7:4242"];
        for text in fields {
            expected.extend_from_slice(&(text.len() as u32).to_le_bytes());
            expected.extend_from_slice(text.as_bytes());
        }
        expected.extend_from_slice(&[2, 0, 0, 0]);
        expected.extend_from_slice(&[4, 0, 0, 0]);
        expected.extend_from_slice(b"Host");
        expected.extend_from_slice(&[1, 0, 0, 0, b'h']);
        expected.extend_from_slice(&[5, 0, 0, 0]);
        expected.extend_from_slice(b"X-Bin");
        expected.extend_from_slice(&[2, 0, 0, 0, 0xff, b'h']);
        assert_eq!(out, expected);
    }

    #[test]
    fn a_long_address_fits_the_reservation() {
        let mut request = super::super::incoming::tests::incoming(b"GET / HTTP/1.0\r\n\r\n", b"");
        request.remote = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535"
            .parse()
            .unwrap();
        let mut out = Vec::new();
        encode_head(&request, &mut out);
        // Reserved once, and the bound holds: a buffer that grew would be larger.
        assert_eq!(out.capacity(), length_bound(&request));
        assert!(out.len() <= length_bound(&request));
        let text = request.remote.to_string();
        assert!(text.len() <= crate::text::ADDRESS_MAX, "{text}");
        assert!(out.windows(text.len()).any(|w| w == text.as_bytes()));
        assert_eq!(out[0], 0, "HTTP/1.0");
    }
}
