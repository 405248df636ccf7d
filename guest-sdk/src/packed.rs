//! The two buffers of `packed-handler` (their layouts are documented on the interface in
//! `wit/plugin.wit`). The request comes in as one: [`Head`] checks the buffer once and then
//! reads its fields in place, so a request costs the guest no allocation per field;
//! [`Head::to_raw`] builds the [`wit::Request`] record when a plugin asks for it. The answer
//! goes out as one: [`encode_outcome`] writes it in a single allocation.
//!
//! Buffers cross the sandbox instead of records of a dozen strings and lists, each of which
//! the host would copy with its own call of the guest's allocator (and free afterwards with
//! another).

use std::fmt;

use crate::{Outcome, wit};

/// The head buffer does not follow the layout (a host bug: the host writes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(&'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed packed request head: {}", self.0)
    }
}

/// The text fields, in their order in the head.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Text {
    Id,
    Method,
    Path,
    Mount,
    Query,
    RemoteAddr,
}

/// A checked head: every length within the buffer, every text field UTF-8, nothing after the
/// last header.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    buf: Vec<u8>,
    version: wit::HttpVersion,
    /// Where each [`Text`] field lies in `buf`.
    texts: [(usize, usize); 6],
    /// Where the first header's name length starts, and how many headers follow.
    headers_at: usize,
    header_count: usize,
}

impl Head {
    /// Checks `buf` against the layout.
    pub(crate) fn decode(buf: Vec<u8>) -> Result<Head, Malformed> {
        let mut r = Reader { buf: &buf, at: 0 };
        let version = match r.byte()? {
            0 => wit::HttpVersion::Http10,
            1 => wit::HttpVersion::Http11,
            _ => return Err(Malformed("unknown version")),
        };
        let mut texts = [(0, 0); 6];
        for text in &mut texts {
            *text = r.text()?;
        }
        let header_count = r.length()?;
        // Each header takes at least its two lengths, so a count beyond that is a lie.
        if header_count > (buf.len() - r.at) / 8 {
            return Err(Malformed("header count past the end"));
        }
        let headers_at = r.at;
        for _ in 0..header_count {
            r.text()?;
            r.bytes()?;
        }
        if r.at != buf.len() {
            return Err(Malformed("bytes after the last header"));
        }
        Ok(Head {
            version,
            texts,
            headers_at,
            header_count,
            buf,
        })
    }

    pub(crate) fn version(&self) -> wit::HttpVersion {
        self.version
    }

    /// A text field. Checked to be UTF-8 by [`Head::decode`], so the fallback never shows.
    pub(crate) fn text(&self, field: Text) -> &str {
        let (start, end) = self.texts[field as usize];
        std::str::from_utf8(&self.buf[start..end]).unwrap_or_default()
    }

    /// The header fields as `(name, value)`, in order, read in place.
    pub(crate) fn headers(&self) -> Headers<'_> {
        Headers {
            reader: Reader {
                buf: &self.buf,
                at: self.headers_at,
            },
            left: self.header_count,
        }
    }

    /// The WIT record, with `body` as its body.
    pub(crate) fn to_raw(&self, body: Vec<u8>) -> wit::Request {
        wit::Request {
            id: self.text(Text::Id).to_owned(),
            method: self.text(Text::Method).to_owned(),
            path: self.text(Text::Path).to_owned(),
            mount: self.text(Text::Mount).to_owned(),
            query: self.text(Text::Query).to_owned(),
            headers: self
                .headers()
                .map(|(name, value)| wit::Header {
                    name: name.to_owned(),
                    value: value.to_vec(),
                })
                .collect(),
            body,
            remote_addr: self.text(Text::RemoteAddr).to_owned(),
            version: self.version,
        }
    }
}

/// The headers of a [`Head`].
#[derive(Debug, Clone)]
pub(crate) struct Headers<'a> {
    reader: Reader<'a>,
    left: usize,
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a str, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        self.left = self.left.checked_sub(1)?;
        // Checked by `Head::decode`: neither read fails.
        let (start, end) = self.reader.text().ok()?;
        let name = std::str::from_utf8(&self.reader.buf[start..end]).unwrap_or_default();
        let value = self.reader.bytes().ok()?;
        Some((name, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Headers<'_> {}

/// What `packed-handler.handle` returns: the outcome in one buffer, sized before it is
/// written.
pub(crate) fn encode_outcome(outcome: &Outcome) -> Vec<u8> {
    fn fields_len<'a>(fields: impl Iterator<Item = (&'a str, &'a [u8])>) -> usize {
        4 + fields.map(|(n, v)| 8 + n.len() + v.len()).sum::<usize>()
    }
    match outcome {
        Outcome::Respond(response) => {
            let fields = response.fields();
            let as_pairs = || fields.iter().map(|(n, v)| (n.as_ref(), v.as_ref()));
            let body = response.body();
            let mut out = Vec::with_capacity(1 + 2 + fields_len(as_pairs()) + body.len());
            out.push(0);
            out.extend_from_slice(&response.status().to_le_bytes());
            put_fields(&mut out, fields.len(), as_pairs());
            out.extend_from_slice(body);
            out
        }
        Outcome::Upgrade { protocol, headers } => {
            let as_pairs = || headers.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
            let protocol = protocol.as_deref();
            let mut out = Vec::with_capacity(
                2 + protocol.map_or(0, |p| 4 + p.len()) + fields_len(as_pairs()),
            );
            out.push(1);
            match protocol {
                Some(protocol) => {
                    out.push(1);
                    put(&mut out, protocol.as_bytes());
                }
                None => out.push(0),
            }
            put_fields(&mut out, headers.len(), as_pairs());
            out
        }
        Outcome::Done => vec![2],
    }
}

fn put_fields<'a>(
    out: &mut Vec<u8>,
    count: usize,
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
) {
    out.extend_from_slice(&length(count));
    for (name, value) in fields {
        put(out, name.as_bytes());
        put(out, value);
    }
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&length(bytes.len()));
    out.extend_from_slice(bytes);
}

/// A length as the layout writes it. A field of 4 GiB or more cannot come out of a 32-bit
/// guest's memory with the rest of the answer, so the saturation never shows.
fn length(len: usize) -> [u8; 4] {
    u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes()
}

/// A position in a head.
#[derive(Debug, Clone)]
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, Malformed> {
        let byte = *self.buf.get(self.at).ok_or(Malformed("truncated"))?;
        self.at += 1;
        Ok(byte)
    }

    fn length(&mut self) -> Result<usize, Malformed> {
        let le = self
            .buf
            .get(self.at..)
            .and_then(|rest| rest.first_chunk::<4>())
            .ok_or(Malformed("truncated"))?;
        self.at += 4;
        usize::try_from(u32::from_le_bytes(*le)).map_err(|_| Malformed("length too large"))
    }

    /// The range of the next field.
    fn range(&mut self) -> Result<(usize, usize), Malformed> {
        let len = self.length()?;
        if len > self.buf.len() - self.at {
            return Err(Malformed("a field runs past the end"));
        }
        let start = self.at;
        self.at += len;
        Ok((start, self.at))
    }

    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let (start, end) = self.range()?;
        Ok(&self.buf[start..end])
    }

    /// The range of the next field, checked to be UTF-8.
    fn text(&mut self) -> Result<(usize, usize), Malformed> {
        let (start, end) = self.range()?;
        std::str::from_utf8(&self.buf[start..end])
            .map_err(|_| Malformed("a text field is not UTF-8"))?;
        Ok((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::encode_packed as encode;
    use crate::testing::request;

    fn sample() -> wit::Request {
        let mut raw = request("POST", "/items%20x?a=1&b=%20")
            .mount("/todo")
            .header("Host", "example.test")
            .header("x-raw", [0xff, 0x00, b'a'])
            .header("empty", "")
            .body("payload")
            .build()
            .into_raw();
        raw.version = wit::HttpVersion::Http10;
        raw
    }

    fn decode(head: &[u8]) -> Result<Head, Malformed> {
        Head::decode(head.to_vec())
    }

    #[test]
    fn decodes_what_the_layout_encodes() {
        let raw = sample();
        let head = decode(&encode(&raw)).unwrap();
        assert_eq!(head.to_raw(raw.body.clone()), raw);
        assert_eq!(head.text(Text::Method), "POST");
        assert_eq!(head.headers().len(), 3);
        assert_eq!(
            head.headers().nth(1),
            Some(("x-raw", &[0xff, 0x00, b'a'][..]))
        );
    }

    #[test]
    fn every_truncation_and_any_trailing_byte_is_refused() {
        let head = encode(&sample());
        for len in 0..head.len() {
            assert!(decode(&head[..len]).is_err(), "{len} bytes");
        }
        let mut longer = head.clone();
        longer.push(0);
        assert_eq!(
            decode(&longer).map(drop),
            Err(Malformed("bytes after the last header"))
        );
    }

    #[test]
    fn lies_in_the_head_are_refused_without_allocating_for_them() {
        let mut head = encode(&request("GET", "/").build().into_raw());
        // The header count is the last four bytes of a request without headers.
        let at = head.len() - 4;
        head[at..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&head).map(drop),
            Err(Malformed("header count past the end"))
        );
        let mut bad_version = encode(&sample());
        bad_version[0] = 7;
        assert_eq!(
            decode(&bad_version).map(drop),
            Err(Malformed("unknown version"))
        );
        let mut raw = sample();
        raw.method = "G\u{e9}T".to_owned();
        let mut bad_text = encode(&raw);
        // The method follows the version byte and the id; its second byte starts `é`.
        let at = 1 + 4 + raw.id.len() + 4 + 1;
        bad_text[at] = 0xff;
        assert_eq!(
            decode(&bad_text).map(drop),
            Err(Malformed("a text field is not UTF-8"))
        );
    }

    /// The answer's bytes as the layout in `wit/plugin.wit` describes them, written here by
    /// hand rather than with the encoder's helpers.
    fn expected_headers(headers: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = (headers.len() as u32).to_le_bytes().to_vec();
        for (name, value) in headers {
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    #[test]
    fn a_response_is_packed_as_the_layout_says_in_one_allocation() {
        let outcome = Outcome::Respond(
            crate::Response::text("short and stout")
                .with_status(418)
                .with_header("x-raw", vec![0xff, 0]),
        );
        let packed = encode_outcome(&outcome);
        let mut expected = vec![0, 0xa2, 0x01];
        expected.extend(expected_headers(&[
            ("Content-Type", b"text/plain; charset=utf-8"),
            ("x-raw", &[0xff, 0]),
        ]));
        expected.extend_from_slice(b"short and stout");
        assert_eq!(packed, expected);
        assert_eq!(packed.capacity(), packed.len(), "sized before writing");

        let empty = encode_outcome(&Outcome::Respond(crate::Response::new(204)));
        assert_eq!(empty, [0, 204, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn an_upgrade_and_done_are_packed_as_the_layout_says() {
        let with = encode_outcome(&Outcome::Upgrade {
            protocol: Some("chat".to_owned()),
            headers: vec![("x-a".to_owned(), b"1".to_vec())],
        });
        let mut expected = vec![1, 1, 4, 0, 0, 0];
        expected.extend_from_slice(b"chat");
        expected.extend(expected_headers(&[("x-a", b"1")]));
        assert_eq!(with, expected);
        assert_eq!(with.capacity(), with.len());

        assert_eq!(encode_outcome(&Outcome::upgrade()), [1, 0, 0, 0, 0, 0]);
        assert_eq!(encode_outcome(&Outcome::Done), [2]);
    }
}
