//! The request as `packed-handler.handle-request` receives it: every field but the body in one
//! buffer (the layout is documented on the interface in `wit/plugin.wit`), decoded here into
//! the same [`wit::Request`] that `handler.handle-request` would have been given.
//!
//! Two buffers cross the sandbox instead of a record of a dozen strings and lists, each of
//! which the host would copy in with its own call of the guest's allocator.

use std::fmt;

use crate::wit;

/// The head buffer does not follow the layout (a host bug: the host writes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(&'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed packed request head: {}", self.0)
    }
}

/// Decodes `head`, with `body` as the request's body.
pub(crate) fn decode(head: &[u8], body: Vec<u8>) -> Result<wit::Request, Malformed> {
    let mut r = Reader(head);
    let version = match r.byte()? {
        0 => wit::HttpVersion::Http10,
        1 => wit::HttpVersion::Http11,
        _ => return Err(Malformed("unknown version")),
    };
    let id = r.text()?;
    let method = r.text()?;
    let path = r.text()?;
    let mount = r.text()?;
    let query = r.text()?;
    let remote_addr = r.text()?;
    let count = r.length()?;
    // Each header takes at least its two lengths, so a count beyond that is a lie: checked
    // before it sizes an allocation.
    if count > r.0.len() / 8 {
        return Err(Malformed("header count past the end"));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.text()?;
        let value = r.bytes()?.to_vec();
        headers.push(wit::Header { name, value });
    }
    if !r.0.is_empty() {
        return Err(Malformed("bytes after the last header"));
    }
    Ok(wit::Request {
        id,
        method,
        path,
        mount,
        query,
        headers,
        body,
        remote_addr,
        version,
    })
}

/// What is left of the head.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, Malformed> {
        let (&first, rest) = self.0.split_first().ok_or(Malformed("truncated"))?;
        self.0 = rest;
        Ok(first)
    }

    fn length(&mut self) -> Result<usize, Malformed> {
        let (le, rest) = self
            .0
            .split_first_chunk::<4>()
            .ok_or(Malformed("truncated"))?;
        self.0 = rest;
        usize::try_from(u32::from_le_bytes(*le)).map_err(|_| Malformed("length too large"))
    }

    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.length()?;
        if len > self.0.len() {
            return Err(Malformed("a field runs past the end"));
        }
        let (field, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(field)
    }

    fn text(&mut self) -> Result<String, Malformed> {
        let bytes = self.bytes()?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| Malformed("a text field is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::request;

    /// The host's encoding (`host/src/runtime/packed.rs`), written again from the layout.
    fn encode(r: &wit::Request) -> Vec<u8> {
        fn field(out: &mut Vec<u8>, bytes: &[u8]) {
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        let mut out = vec![match r.version {
            wit::HttpVersion::Http10 => 0,
            wit::HttpVersion::Http11 => 1,
        }];
        for text in [
            &r.id,
            &r.method,
            &r.path,
            &r.mount,
            &r.query,
            &r.remote_addr,
        ] {
            field(&mut out, text.as_bytes());
        }
        out.extend_from_slice(&(r.headers.len() as u32).to_le_bytes());
        for h in &r.headers {
            field(&mut out, h.name.as_bytes());
            field(&mut out, &h.value);
        }
        out
    }

    fn sample() -> wit::Request {
        let mut raw = request("POST", "/todo", "/todo/items%20x").into_raw();
        raw.query = "a=1&b=%20".to_owned();
        raw.headers = vec![
            wit::Header {
                name: "Host".to_owned(),
                value: b"example.test".to_vec(),
            },
            wit::Header {
                name: "x-raw".to_owned(),
                value: vec![0xff, 0x00, b'a'],
            },
            wit::Header {
                name: "empty".to_owned(),
                value: Vec::new(),
            },
        ];
        raw.version = wit::HttpVersion::Http10;
        raw.body = b"payload".to_vec();
        raw
    }

    #[test]
    fn decodes_what_the_layout_encodes() {
        let raw = sample();
        let decoded = decode(&encode(&raw), raw.body.clone()).unwrap();
        assert_eq!(decoded, raw);
    }

    #[test]
    fn every_truncation_and_any_trailing_byte_is_refused() {
        let head = encode(&sample());
        for len in 0..head.len() {
            assert!(decode(&head[..len], Vec::new()).is_err(), "{len} bytes");
        }
        let mut longer = head.clone();
        longer.push(0);
        assert_eq!(
            decode(&longer, Vec::new()),
            Err(Malformed("bytes after the last header"))
        );
    }

    #[test]
    fn lies_in_the_head_are_refused_without_allocating_for_them() {
        let mut head = encode(&request("GET", "", "/").into_raw());
        // The header count is the last four bytes of a request without headers.
        let at = head.len() - 4;
        head[at..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&head, Vec::new()),
            Err(Malformed("header count past the end"))
        );
        let mut bad_version = encode(&sample());
        bad_version[0] = 7;
        assert_eq!(
            decode(&bad_version, Vec::new()),
            Err(Malformed("unknown version"))
        );
        let mut raw = sample();
        raw.method = "G\u{e9}T".to_owned();
        let mut bad_text = encode(&raw);
        // The method follows the version byte and the id; its second byte starts `é`.
        let at = 1 + 4 + raw.id.len() + 4 + 1;
        bad_text[at] = 0xff;
        assert_eq!(
            decode(&bad_text, Vec::new()),
            Err(Malformed("a text field is not UTF-8"))
        );
    }
}
