//! The buffers of `packed-handler` (their layouts are documented on the interface in
//! `wit/plugin.wit`). The request head goes in as one: every field but the body, so a call
//! lowers two lists into the guest instead of a record of a dozen strings and lists, each
//! copied in through its own call of the guest's allocator. The answer of `handle` comes out
//! as one, read in place ([`Answer::decode`]) instead of lifted field by field.

use crate::proto::Version;
use crate::runtime::bindings::types;
use crate::runtime::engine::incoming::Incoming;

/// The interface a component exports to be called this way, in each world that has it
/// (0.3.0 and 0.2.0: the same functions).
pub(crate) const INTERFACE: [&str; 2] = [
    "ankh:plugin/packed-handler@0.3.0",
    "ankh:plugin/packed-handler@0.2.0",
];

/// The function in it that returns an `outcome` record.
pub(crate) const FUNCTION: &str = "handle-request";

/// The function in it that returns the outcome packed ([`Answer`]); called instead of
/// [`FUNCTION`] when a component exports it.
pub(crate) const ANSWER_FUNCTION: &str = "handle";

/// What a request handler returned: a record, or the packed form of one.
#[derive(Debug)]
pub enum Returned {
    Record(types::Outcome),
    Packed(Vec<u8>),
}

impl Returned {
    /// What the handler decided, read in place; a packed answer that breaks the layout is
    /// refused with the reason.
    pub fn answer(&self) -> Result<Answer<'_>, Malformed> {
        match self {
            Returned::Packed(buf) => Answer::decode(buf),
            Returned::Record(types::Outcome::Respond(response)) => Ok(Answer::Respond {
                status: response.status,
                headers: response
                    .headers
                    .iter()
                    .map(|h| (h.name.as_bytes(), h.value.as_slice()))
                    .collect(),
                body: &response.body,
            }),
            Returned::Record(types::Outcome::Upgrade(upgrade)) => {
                Ok(Answer::Upgrade(upgrade.clone()))
            }
            Returned::Record(types::Outcome::Done) => Ok(Answer::Done),
        }
    }
}

/// A handler's outcome with the response's fields borrowed from where they lie. An upgrade,
/// once per WebSocket, is made into its record.
#[derive(Debug)]
pub enum Answer<'a> {
    Respond {
        status: u16,
        headers: Vec<RawField<'a>>,
        body: &'a [u8],
    },
    Upgrade(types::Upgrade),
    Done,
}

/// A header field read in place: its name and its value, as bytes.
pub(crate) type RawField<'a> = (&'a [u8], &'a [u8]);

/// A packed answer that breaks the layout: a fault of the plugin (or of its SDK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("returned a malformed packed answer ({0})")]
pub struct Malformed(&'static str);

impl<'a> Answer<'a> {
    /// Reads `buf` as the layout says, checking every length against the buffer before it
    /// sizes anything by it.
    pub(crate) fn decode(buf: &'a [u8]) -> Result<Answer<'a>, Malformed> {
        let mut r = Reader { buf, at: 0 };
        match r.take(1)?[0] {
            0 => {
                let status = u16::from_le_bytes([r.take(1)?[0], r.take(1)?[0]]);
                let headers = r.headers()?;
                Ok(Answer::Respond {
                    status,
                    headers,
                    body: &buf[r.at..],
                })
            }
            1 => {
                let protocol = match r.take(1)?[0] {
                    0 => None,
                    1 => Some(r.text()?.to_owned()),
                    _ => return Err(Malformed("an unknown protocol marker")),
                };
                let headers = r
                    .headers()?
                    .into_iter()
                    .map(|(name, value)| {
                        let name = std::str::from_utf8(name)
                            .map_err(|_| Malformed("a name is not UTF-8"))?;
                        Ok(types::Header {
                            name: name.to_owned(),
                            value: value.to_vec(),
                        })
                    })
                    .collect::<Result<_, _>>()?;
                r.end()?;
                Ok(Answer::Upgrade(types::Upgrade { protocol, headers }))
            }
            2 => {
                r.end()?;
                Ok(Answer::Done)
            }
            _ => Err(Malformed("an unknown kind")),
        }
    }
}

/// A position in a packed answer.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let bytes = self
            .buf
            .get(self.at..)
            .and_then(|rest| rest.get(..n))
            .ok_or(Malformed("truncated"))?;
        self.at += n;
        Ok(bytes)
    }

    fn length(&mut self) -> Result<usize, Malformed> {
        let le = self.take(4)?;
        Ok(u32::from_le_bytes([le[0], le[1], le[2], le[3]]) as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.length()?;
        self.take(len)
    }

    fn text(&mut self) -> Result<&'a str, Malformed> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Malformed("a name is not UTF-8"))
    }

    /// A count of header fields, then the fields. Their names are bytes: the response
    /// encoder checks each is a token (and an upgrade's are made text, checked).
    fn headers(&mut self) -> Result<Vec<RawField<'a>>, Malformed> {
        let count = self.length()?;
        // Each field takes at least its two lengths, so a count beyond that is a lie.
        if count > (self.buf.len() - self.at) / 8 {
            return Err(Malformed("a header count past the end"));
        }
        let mut headers = Vec::with_capacity(count);
        for _ in 0..count {
            let name = self.bytes()?;
            headers.push((name, self.bytes()?));
        }
        Ok(headers)
    }

    fn end(&self) -> Result<(), Malformed> {
        if self.at == self.buf.len() {
            Ok(())
        } else {
            Err(Malformed("bytes after the end"))
        }
    }
}

/// Appends `request`'s head (everything but its body) to `out`, in one allocation: the id and
/// the remote address are written as text straight into it.
pub(crate) fn encode_head(request: &Incoming, out: &mut Vec<u8>) {
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
        let request = crate::runtime::engine::incoming::tests::incoming(
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
        let mut request =
            crate::runtime::engine::incoming::tests::incoming(b"GET / HTTP/1.0\r\n\r\n", b"");
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

    /// Header fields as the layout writes them, by hand.
    fn fields(headers: &[(&str, &[u8])]) -> Vec<u8> {
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
    fn a_packed_response_is_read_in_place() {
        let mut buf = vec![0, 0x2d, 0x01];
        buf.extend(fields(&[
            ("Content-Type", b"text/plain"),
            ("x-raw", &[0xff]),
        ]));
        let headers_end = buf.len();
        buf.extend_from_slice(b"body");
        let Ok(Answer::Respond {
            status,
            headers,
            body,
        }) = Answer::decode(&buf)
        else {
            panic!("not a response");
        };
        assert_eq!(status, 301);
        assert_eq!(
            headers,
            [
                (&b"Content-Type"[..], &b"text/plain"[..]),
                (&b"x-raw"[..], &[0xff][..])
            ]
        );
        assert_eq!(body, b"body");
        // The body is the rest: any cut inside it is a shorter body, any cut before it a fault.
        for len in 0..headers_end {
            assert!(Answer::decode(&buf[..len]).is_err(), "{len} bytes");
        }
        assert!(matches!(
            Answer::decode(&buf[..headers_end]),
            Ok(Answer::Respond { body: b"", .. })
        ));
    }

    #[test]
    fn a_packed_upgrade_and_done_are_read_and_checked_to_their_end() {
        let mut buf = vec![1, 1, 4, 0, 0, 0];
        buf.extend_from_slice(b"chat");
        buf.extend(fields(&[("x-a", b"1")]));
        let Ok(Answer::Upgrade(upgrade)) = Answer::decode(&buf) else {
            panic!("not an upgrade");
        };
        assert_eq!(upgrade.protocol.as_deref(), Some("chat"));
        assert_eq!(upgrade.headers.len(), 1);
        assert_eq!(
            (
                upgrade.headers[0].name.as_str(),
                upgrade.headers[0].value.as_slice()
            ),
            ("x-a", &b"1"[..])
        );
        for len in 0..buf.len() {
            assert!(Answer::decode(&buf[..len]).is_err(), "{len} bytes");
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert_eq!(
            Answer::decode(&longer).map(drop),
            Err(Malformed("bytes after the end"))
        );
        assert!(matches!(
            Answer::decode(&[1, 0, 0, 0, 0, 0]),
            Ok(Answer::Upgrade(types::Upgrade { protocol: None, .. }))
        ));
        assert_eq!(
            Answer::decode(&[1, 2]).map(drop),
            Err(Malformed("an unknown protocol marker"))
        );
        assert!(matches!(Answer::decode(&[2]), Ok(Answer::Done)));
        assert_eq!(
            Answer::decode(&[2, 2]).map(drop),
            Err(Malformed("bytes after the end"))
        );
    }

    #[test]
    fn lies_in_a_packed_answer_are_refused_before_they_size_anything() {
        for kind in [3, 255] {
            assert_eq!(
                Answer::decode(&[kind]).map(drop),
                Err(Malformed("an unknown kind"))
            );
        }
        let lie = [0, 200, 0, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            Answer::decode(&lie).map(drop),
            Err(Malformed("a header count past the end"))
        );
        // A field length past the end, however large.
        let mut long = vec![0, 200, 0, 1, 0, 0, 0];
        long.extend_from_slice(&u32::MAX.to_le_bytes());
        long.extend_from_slice(&[0; 8]);
        assert_eq!(Answer::decode(&long).map(drop), Err(Malformed("truncated")));
        // A response's names are checked by the encoder (a token); an upgrade's become text.
        let mut name = vec![0, 200, 0];
        name.extend(fields(&[("ok", b"")]));
        name[7 + 4] = 0xff;
        assert!(Answer::decode(&name).is_ok());
        let mut upgrade = vec![1, 0];
        upgrade.extend(fields(&[("ok", b"")]));
        upgrade[2 + 4 + 4] = 0xff;
        assert_eq!(
            Answer::decode(&upgrade).map(drop),
            Err(Malformed("a name is not UTF-8"))
        );
    }

    #[test]
    fn a_record_reads_as_the_same_answer() {
        let record = Returned::Record(types::Outcome::Respond(types::Response {
            status: 201,
            headers: vec![types::Header {
                name: "x-a".to_owned(),
                value: b"1".to_vec(),
            }],
            body: b"made".to_vec(),
        }));
        let mut packed = vec![0, 201, 0];
        packed.extend(fields(&[("x-a", b"1")]));
        packed.extend_from_slice(b"made");
        let packed = Returned::Packed(packed);
        for returned in [&record, &packed] {
            let Ok(Answer::Respond {
                status,
                headers,
                body,
            }) = returned.answer()
            else {
                panic!("not a response");
            };
            assert_eq!(
                (status, headers, body),
                (201, vec![(&b"x-a"[..], &b"1"[..])], &b"made"[..])
            );
        }
        assert!(matches!(
            Returned::Record(types::Outcome::Done).answer(),
            Ok(Answer::Done)
        ));
    }
}
