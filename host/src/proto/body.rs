//! Request bodies, decoded incrementally as bytes arrive (RFC 9112 §6, §7.1).
//!
//! [`BodyDecoder::decode`] takes whatever input is buffered, appends decoded bytes to the body and
//! says how much input it used. It never needs the whole body at once, so any split of the TCP
//! stream decodes to the same bytes. The running total is checked against the limit as soon as a
//! chunk-size line is parsed, before any of that chunk's data is accepted.

use super::ProtoError;
use crate::limits::MAX_CHUNK_LINE_BYTES;

/// Progress of one [`BodyDecoder::decode`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes used.
    pub consumed: usize,
    /// The body is complete; input after `consumed` belongs to the next request.
    pub done: bool,
}

/// An incremental body decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyDecoder {
    /// `Content-Length`: this many bytes still to come.
    Length { remaining: u64 },
    /// `Transfer-Encoding: chunked`.
    Chunked {
        state: Chunked,
        total: u64,
        max: u64,
        /// The trailer fields read so far, name and value (trimmed).
        trailers: Vec<(String, Vec<u8>)>,
    },
}

/// Where the chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunked {
    /// Expecting a chunk-size line.
    Size,
    /// Inside chunk data, this many bytes left.
    Data(u64),
    /// Expecting the CRLF that ends chunk data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one, this many trailer bytes so far.
    Trailers(usize),
    /// The body is complete.
    Done,
}

impl BodyDecoder {
    /// A decoder for a body of exactly `len` bytes.
    pub fn length(len: u64) -> Self {
        BodyDecoder::Length { remaining: len }
    }

    /// A decoder for a chunked body of at most `max` decoded bytes.
    pub fn chunked(max: u64) -> Self {
        BodyDecoder::Chunked {
            state: Chunked::Size,
            total: 0,
            max,
            trailers: Vec::new(),
        }
    }

    /// The trailer fields of a chunked body that is done (none for any other).
    pub fn take_trailers(&mut self) -> Vec<(String, Vec<u8>)> {
        match self {
            BodyDecoder::Chunked { trailers, .. } => std::mem::take(trailers),
            BodyDecoder::Length { .. } => Vec::new(),
        }
    }

    /// Decodes as much of `input` as possible into `body`.
    pub fn decode(&mut self, input: &[u8], body: &mut Vec<u8>) -> Result<Progress, ProtoError> {
        match self {
            BodyDecoder::Length { remaining } => {
                let take = input
                    .len()
                    .min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                body.extend_from_slice(&input[..take]);
                *remaining -= take as u64;
                Ok(Progress {
                    consumed: take,
                    done: *remaining == 0,
                })
            }
            BodyDecoder::Chunked {
                state,
                total,
                max,
                trailers,
            } => decode_chunked(state, total, *max, input, body, trailers),
        }
    }
}

fn decode_chunked(
    state: &mut Chunked,
    total: &mut u64,
    max: u64,
    input: &[u8],
    body: &mut Vec<u8>,
    trailers: &mut Vec<(String, Vec<u8>)>,
) -> Result<Progress, ProtoError> {
    let mut pos = 0;
    loop {
        let rest = &input[pos..];
        match *state {
            Chunked::Done => {
                return Ok(Progress {
                    consumed: pos,
                    done: true,
                });
            }
            Chunked::Size => {
                let Some(line) = take_line(rest, MAX_CHUNK_LINE_BYTES)? else {
                    return Ok(Progress {
                        consumed: pos,
                        done: false,
                    });
                };
                pos += line.len() + 2;
                let size = parse_chunk_size(line)?;
                *total = total.saturating_add(size);
                if *total > max {
                    return Err(ProtoError::BodyTooLarge);
                }
                *state = if size == 0 {
                    Chunked::Trailers(0)
                } else {
                    body.reserve(usize::try_from(size).unwrap_or(0).min(64 * 1024));
                    Chunked::Data(size)
                };
            }
            Chunked::Data(left) => {
                if rest.is_empty() {
                    return Ok(Progress {
                        consumed: pos,
                        done: false,
                    });
                }
                let take = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                body.extend_from_slice(&rest[..take]);
                pos += take;
                let left = left - take as u64;
                *state = if left == 0 {
                    Chunked::DataEnd
                } else {
                    Chunked::Data(left)
                };
            }
            Chunked::DataEnd => match rest {
                [b'\r', b'\n', ..] => {
                    pos += 2;
                    *state = Chunked::Size;
                }
                [] | [b'\r'] => {
                    return Ok(Progress {
                        consumed: pos,
                        done: false,
                    });
                }
                _ => return Err(ProtoError::BadRequest("chunk data not followed by CRLF")),
            },
            Chunked::Trailers(seen) => {
                let Some(line) = take_line(rest, crate::limits::MAX_HEAD_BYTES)? else {
                    return Ok(Progress {
                        consumed: pos,
                        done: false,
                    });
                };
                pos += line.len() + 2;
                let seen = seen + line.len() + 2;
                if seen > crate::limits::MAX_HEAD_BYTES {
                    return Err(ProtoError::HeadTooLarge);
                }
                if line.is_empty() {
                    *state = Chunked::Done;
                } else if !valid_trailer(line) {
                    return Err(ProtoError::BadRequest("invalid trailer field"));
                } else {
                    if let Some((name, value)) = line
                        .iter()
                        .position(|&b| b == b':')
                        .map(|colon| line.split_at(colon))
                    {
                        trailers.push((
                            String::from_utf8_lossy(name).into_owned(),
                            value[1..].trim_ascii().to_vec(),
                        ));
                    }
                    *state = Chunked::Trailers(seen);
                }
            }
        }
    }
}

/// The bytes before the next CRLF, or `None` if it has not arrived yet. A bare LF or a line
/// longer than `max` is an error.
fn take_line(input: &[u8], max: usize) -> Result<Option<&[u8]>, ProtoError> {
    match input.iter().position(|&b| b == b'\n') {
        Some(0) => Err(ProtoError::BadRequest("bare LF in chunked framing")),
        Some(lf) if input[lf - 1] != b'\r' => {
            Err(ProtoError::BadRequest("bare LF in chunked framing"))
        }
        Some(lf) if lf - 1 > max => Err(ProtoError::BadRequest("chunk line too long")),
        Some(lf) => Ok(Some(&input[..lf - 1])),
        None if input.len() > max + 1 => Err(ProtoError::BadRequest("chunk line too long")),
        None => Ok(None),
    }
}

/// `chunk-size [ chunk-ext ]`: hex digits, then optional `;name[=value]` extensions, ignored.
fn parse_chunk_size(line: &[u8]) -> Result<u64, ProtoError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ProtoError::BadRequest("invalid chunk size"));
    }
    let mut size: u64 = 0;
    for &d in &line[..digits] {
        let v = (d as char).to_digit(16).unwrap_or(0) as u64;
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(v))
            .filter(|&s| s <= i64::MAX as u64)
            .ok_or(ProtoError::BadRequest("chunk size overflows"))?;
    }
    // Whitespace is allowed only before a `;` (BWS in RFC 9112 §7.1.1): `5 \r\n` is invalid.
    let rest = &line[digits..];
    let ext = rest.trim_ascii_start();
    if !rest.is_empty()
        && (ext.first() != Some(&b';') || ext.iter().any(|&b| b.is_ascii_control() && b != b'\t'))
    {
        return Err(ProtoError::BadRequest("invalid chunk extension"));
    }
    Ok(size)
}

/// A trailer line must look like a header field: `token ":" value`, no CTLs.
fn valid_trailer(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    colon > 0
        && line[..colon].iter().all(|&b| b.is_ascii_graphic())
        && line[colon + 1..]
            .iter()
            .all(|&b| b == b'\t' || !b.is_ascii_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], max: u64) -> Result<(Vec<u8>, usize), ProtoError> {
        let mut d = BodyDecoder::chunked(max);
        let mut body = Vec::new();
        let p = d.decode(input, &mut body)?;
        assert!(p.done, "body incomplete after {} bytes", p.consumed);
        Ok((body, p.consumed))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let raw = b"5;x=y\r\nhello\r\n1 ; ext\r\n \r\n6\r\nworld!\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (body, used) = decode_all(raw, 1 << 20).unwrap();
        assert_eq!(body, b"hello world!");
        assert_eq!(&raw[used..], b"NEXT");
    }

    #[test]
    fn trailer_fields_are_kept() {
        let raw = b"2\r\nhi\r\n0\r\nX-T: 1 \r\nx-sum:abc\r\n\r\n";
        let mut d = BodyDecoder::chunked(1 << 20);
        let mut body = Vec::new();
        assert!(d.decode(raw, &mut body).unwrap().done);
        assert_eq!(
            d.take_trailers(),
            [
                ("X-T".to_owned(), b"1".to_vec()),
                ("x-sum".to_owned(), b"abc".to_vec())
            ]
        );
        assert!(BodyDecoder::length(3).take_trailers().is_empty());
    }

    #[test]
    fn whitespace_after_a_chunk_size_needs_an_extension() {
        for bad in [
            &b"5 \r\nhello\r\n0\r\n\r\n"[..],
            b"5\t\r\nhello\r\n0\r\n\r\n",
        ] {
            assert_eq!(
                decode_all(bad, 1 << 20).unwrap_err(),
                ProtoError::BadRequest("invalid chunk extension")
            );
        }
    }

    #[test]
    fn any_split_decodes_the_same() {
        let raw = b"3\r\nabc\r\na\r\n0123456789\r\n0\r\n\r\n";
        for split in 0..=raw.len() {
            let mut d = BodyDecoder::chunked(1 << 20);
            let mut body = Vec::new();
            let p1 = d.decode(&raw[..split], &mut body).unwrap();
            let mut rest = raw[p1.consumed..].to_vec();
            let p2 = d.decode(&rest, &mut body).unwrap();
            rest.drain(..p2.consumed);
            assert!(p2.done, "split {split}");
            assert!(rest.is_empty());
            assert_eq!(body, b"abc0123456789", "split {split}");
        }
    }

    #[test]
    fn rejects_bad_framing() {
        let bad: &[(&[u8], u16)] = &[
            (b"5\r\nhelloXX0\r\n\r\n", 400),
            (b"zz\r\n", 400),
            (b"\r\n", 400),
            (b"5 junk\r\nhello\r\n", 400),
            (b"8000000000000000\r\n", 400),
            (b"fffffffffffffffffff\r\n", 400),
            (b"5\nhello\r\n", 400),
            (b"0\r\nbad trailer\r\n\r\n", 400),
        ];
        for (raw, status) in bad {
            let err = decode_all(raw, 1 << 20).unwrap_err();
            assert_eq!(err.status(), *status, "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn overlong_extension_is_refused() {
        let mut raw = b"5;".to_vec();
        raw.resize(MAX_CHUNK_LINE_BYTES + 10, b'x');
        let mut d = BodyDecoder::chunked(1 << 20);
        assert_eq!(d.decode(&raw, &mut Vec::new()).unwrap_err().status(), 400);
    }

    #[test]
    fn limit_is_enforced_at_the_size_line() {
        let mut d = BodyDecoder::chunked(10);
        let mut body = Vec::new();
        d.decode(b"8\r\n12345678\r\n", &mut body).unwrap();
        // The second size line alone pushes the total over: refused before its data.
        assert_eq!(d.decode(b"8\r\n", &mut body), Err(ProtoError::BodyTooLarge));
        assert_eq!(body.len(), 8);
    }

    #[test]
    fn content_length_stops_at_the_end() {
        let mut d = BodyDecoder::length(3);
        let mut body = Vec::new();
        let p = d.decode(b"ab", &mut body).unwrap();
        assert_eq!(
            p,
            Progress {
                consumed: 2,
                done: false
            }
        );
        let p = d.decode(b"cdef", &mut body).unwrap();
        assert_eq!(
            p,
            Progress {
                consumed: 1,
                done: true
            }
        );
        assert_eq!(body, b"abc");
    }
}
