//! Responses whose body comes in pieces: the head, written before the body is known, and a
//! [`BodyEncoder`] that frames (and compresses) each piece as it comes.
//!
//! The framing follows from what is known when the head leaves (RFC 9112 §6):
//! - a length the plugin declared, when the body goes out as it is: `Content-Length`;
//! - else, for HTTP/1.1: `Transfer-Encoding: chunked`, which also carries trailers;
//! - else (HTTP/1.0): the body ends when the connection closes;
//! - HEAD, 204 and 304 have no body: pieces are dropped, and 205 says `Content-Length: 0`.
//!
//! Content coding is negotiated as for a whole response, but a stream's size is unknown, so
//! any compressible type is compressed; each piece is flushed through the compressor (a sync
//! flush), so the client can decode everything sent so far: an event or a line is readable
//! as soon as it is written, at some cost in ratio for very small pieces.

use std::io::Write;

use flate2::Compression;
use flate2::write::{GzEncoder, ZlibEncoder};

use super::encoding::{self, Coding};
use super::response::{
    EncodeError, RequestMeta, check_headers, connection_header, host_owned, parse_length, trim_ows,
    write_head_fields,
};
use super::{Field, Version, has_token, header};
use crate::limits::GZIP_LEVEL;

/// How a streamed body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes, as the plugin declared.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// The body ends with the connection (an HTTP/1.0 client).
    Close,
    /// No body at all (HEAD, 204, 205, 304): pieces are dropped.
    Bodiless,
}

/// Why a piece or the end of a stream cannot be sent as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("the body is longer than its declared content-length of {0} bytes")]
    TooLong(u64),
    #[error("the body ended {missing} bytes short of its declared content-length")]
    TooShort { missing: u64 },
}

/// Appends the head of a streamed response to `out`, and returns how its body is to be
/// encoded and whether the connection stays open after it.
pub fn encode_head<F: Field>(
    status: u16,
    headers: &[F],
    req: &RequestMeta<'_>,
    out: &mut Vec<u8>,
) -> Result<(BodyEncoder, bool), EncodeError> {
    if !(200..=599).contains(&status) {
        return Err(EncodeError::Status(status));
    }
    check_headers(headers)?;
    let plugin_closes = header(headers, "connection").is_some_and(|v| has_token(v, "close"));
    let bodiless = status == 204 || status == 304;
    let empty = bodiless || status == 205;
    let declared = header(headers, "content-length")
        .and_then(parse_length)
        .map(|n| n as u64);
    let content_type = header(headers, "content-type");

    let mut vary = false;
    let mut coding = None;
    if !empty
        && header(headers, "content-encoding").is_none()
        && encoding::compressible(content_type, usize::MAX)
    {
        vary = true;
        coding = encoding::negotiate(req.accept_encoding);
    }
    let framing = if empty || req.head {
        Framing::Bodiless
    } else if let (Some(length), None) = (declared, coding) {
        Framing::Length(length)
    } else if req.version == Version::Http11 {
        Framing::Chunked
    } else {
        Framing::Close
    };
    let keep_alive = req.keep_alive && !plugin_closes && framing != Framing::Close;
    let event_stream = content_type.is_some_and(|ct| {
        trim_ows(ct.split(|&b| b == b';').next().unwrap_or_default())
            .eq_ignore_ascii_case(b"text/event-stream")
    });

    // A trailer announcement means nothing without chunks to carry the trailers.
    let chunked = framing == Framing::Chunked;
    write_head_fields(
        status,
        headers,
        vary,
        coding.filter(|_| !bodiless),
        |name| !chunked && name.eq_ignore_ascii_case(b"trailer"),
        out,
    );
    // nginx buffers what it proxies unless told not to: events must not wait there.
    if event_stream && header(headers, "x-accel-buffering").is_none() {
        out.extend_from_slice(b"x-accel-buffering: no\r\n");
    }
    match framing {
        Framing::Length(length) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::Bodiless if status == 205 => out.extend_from_slice(b"content-length: 0\r\n"),
        // HEAD: the length GET would send, where the plugin declared it and no coding
        // changes it (RFC 9110 §8.6).
        Framing::Bodiless if req.head && !bodiless && coding.is_none() => {
            if let Some(length) = declared {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        Framing::Bodiless | Framing::Close => {}
    }
    connection_header(req.version, keep_alive, out);
    out.extend_from_slice(b"\r\n");
    let coder = match (coding, framing) {
        (Some(coding), Framing::Chunked | Framing::Close) => Some(Coder::new(coding)),
        _ => None,
    };
    let remaining = match framing {
        Framing::Length(length) => Some(length),
        _ => None,
    };
    Ok((
        BodyEncoder {
            framing,
            coder,
            remaining,
            sent: 0,
            event_stream,
        },
        keep_alive,
    ))
}

/// A compressor that keeps no more than what it has not yet handed out.
enum Coder {
    Gzip(GzEncoder<Vec<u8>>),
    Deflate(ZlibEncoder<Vec<u8>>),
}

impl std::fmt::Debug for Coder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Coder::Gzip(_) => "Coder::Gzip",
            Coder::Deflate(_) => "Coder::Deflate",
        })
    }
}

impl Coder {
    fn new(coding: Coding) -> Self {
        let level = Compression::new(GZIP_LEVEL);
        match coding {
            Coding::Gzip => Coder::Gzip(GzEncoder::new(Vec::new(), level)),
            Coding::Deflate => Coder::Deflate(ZlibEncoder::new(Vec::new(), level)),
        }
    }

    /// Compresses `data` and flushes: everything written so far can be decoded from what
    /// this returns and what it returned before.
    fn piece(&mut self, data: &[u8]) -> Vec<u8> {
        // Writing into a Vec cannot fail.
        match self {
            Coder::Gzip(e) => {
                let _ = e.write_all(data).and_then(|()| e.flush());
                std::mem::take(e.get_mut())
            }
            Coder::Deflate(e) => {
                let _ = e.write_all(data).and_then(|()| e.flush());
                std::mem::take(e.get_mut())
            }
        }
    }

    /// The end of the compressed stream.
    fn finish(&mut self) -> Vec<u8> {
        match self {
            Coder::Gzip(e) => {
                let _ = e.try_finish();
                std::mem::take(e.get_mut())
            }
            Coder::Deflate(e) => {
                let _ = e.try_finish();
                std::mem::take(e.get_mut())
            }
        }
    }
}

/// Frames the pieces of one streamed body.
#[derive(Debug)]
pub struct BodyEncoder {
    framing: Framing,
    coder: Option<Coder>,
    /// For a declared length: the bytes still due.
    remaining: Option<u64>,
    /// Bytes put on the wire for the body, framing included.
    sent: usize,
    /// Server-Sent Events (`text/event-stream`): a stream a client resumes on its own.
    event_stream: bool,
}

impl BodyEncoder {
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Whether the body is Server-Sent Events, which a client resumes after the last event it
    /// saw when the stream ends (so a draining server may end it at any event).
    pub fn is_event_stream(&self) -> bool {
        self.event_stream
    }

    /// Bytes of the body written so far, framing and coding included.
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// Appends one piece of the body to `out`. A piece past a declared length is refused
    /// whole (what fits of it is not sent either).
    pub fn piece(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), BodyError> {
        if let Some(remaining) = self.remaining.as_mut() {
            if data.len() as u64 > *remaining {
                return Err(BodyError::TooLong(
                    self.sent as u64 + *remaining, // the declared length
                ));
            }
            *remaining -= data.len() as u64;
        }
        if data.is_empty() {
            return Ok(());
        }
        let before = out.len();
        match self.framing {
            Framing::Bodiless => return Ok(()),
            Framing::Length(_) => out.extend_from_slice(data),
            Framing::Close => match self.coder.as_mut() {
                Some(coder) => out.extend_from_slice(&coder.piece(data)),
                None => out.extend_from_slice(data),
            },
            Framing::Chunked => match self.coder.as_mut() {
                Some(coder) => chunk(&coder.piece(data), out),
                None => chunk(data, out),
            },
        }
        self.sent += out.len() - before;
        Ok(())
    }

    /// Appends the end of the body to `out`: the rest of the compressed stream, and for a
    /// chunked body the last chunk with `trailers` (host-owned names and ones that frame the
    /// message are dropped; a plugin's trailer fields must be valid like its headers).
    /// Fails if a declared length is not met: the connection must then close.
    pub fn finish<F: Field>(&mut self, trailers: &[F], out: &mut Vec<u8>) -> Result<(), BodyError> {
        if let Some(missing) = self.remaining.filter(|&r| r > 0) {
            return Err(BodyError::TooShort { missing });
        }
        let before = out.len();
        let rest = self.coder.as_mut().map(Coder::finish).unwrap_or_default();
        match self.framing {
            Framing::Chunked => {
                chunk(&rest, out);
                out.extend_from_slice(b"0\r\n");
                if check_headers(trailers).is_ok() {
                    for field in trailers {
                        let name = field.name();
                        if host_owned(name)
                            || NOT_TRAILERS.iter().any(|n| name.eq_ignore_ascii_case(n))
                        {
                            continue;
                        }
                        out.extend_from_slice(name);
                        out.extend_from_slice(b": ");
                        out.extend_from_slice(trim_ows(field.value()));
                        out.extend_from_slice(b"\r\n");
                    }
                }
                out.extend_from_slice(b"\r\n");
            }
            Framing::Close => out.extend_from_slice(&rest),
            Framing::Length(_) | Framing::Bodiless => {}
        }
        self.sent += out.len() - before;
        Ok(())
    }
}

/// Fields a trailer section must not carry (RFC 9110 §6.5.1): ones that frame, route or
/// authenticate the message, or that the head alone decides.
const NOT_TRAILERS: [&[u8]; 8] = [
    b"trailer",
    b"host",
    b"content-encoding",
    b"content-type",
    b"content-range",
    b"authorization",
    b"set-cookie",
    b"cache-control",
];

/// One chunk of a chunked body; nothing for no data (an empty chunk would end the body).
fn chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let mut hex = [0u8; 16];
    let mut n = data.len();
    let mut i = hex.len();
    while n > 0 || i == hex.len() {
        i -= 1;
        hex[i] = b"0123456789abcdef"[n % 16];
        n /= 16;
    }
    out.extend_from_slice(&hex[i..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Header;
    use crate::proto::body::BodyDecoder;

    const GET: RequestMeta<'static> = RequestMeta {
        version: Version::Http11,
        head: false,
        keep_alive: true,
        accept_encoding: None,
    };

    fn h(name: &str, value: &str) -> Header {
        (name.to_owned(), value.as_bytes().to_vec())
    }

    fn head(status: u16, headers: &[Header], req: RequestMeta<'_>) -> (String, BodyEncoder, bool) {
        let mut out = Vec::new();
        let (encoder, keep_alive) = encode_head(status, headers, &req, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), encoder, keep_alive)
    }

    #[test]
    fn the_framing_follows_what_is_known_when_the_head_leaves() {
        let (text, e, keep) = head(200, &[h("content-type", "text/plain")], GET);
        assert_eq!((e.framing(), keep), (Framing::Chunked, true));
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert!(!text.contains("content-length"), "{text}");

        let declared = [h("content-length", "10"), h("content-type", "image/png")];
        let (text, e, _) = head(200, &declared, GET);
        assert_eq!(e.framing(), Framing::Length(10));
        assert!(text.contains("content-length: 10\r\n"), "{text}");

        let old = RequestMeta {
            version: Version::Http10,
            ..GET
        };
        let (text, e, keep) = head(200, &[], old);
        assert_eq!((e.framing(), keep), (Framing::Close, false));
        assert!(text.contains("connection: close\r\n"), "{text}");

        let for_head = RequestMeta { head: true, ..GET };
        let (text, e, _) = head(200, &declared, for_head);
        assert_eq!(e.framing(), Framing::Bodiless);
        assert!(text.contains("content-length: 10\r\n"), "{text}");
        for status in [204, 304] {
            let (text, e, _) = head(status, &declared, GET);
            assert_eq!(e.framing(), Framing::Bodiless);
            assert!(!text.contains("content-length"), "{text}");
            assert!(!text.contains("transfer-encoding"), "{text}");
        }
        let (text, _, _) = head(205, &[], GET);
        assert!(text.contains("content-length: 0\r\n"), "{text}");
    }

    #[test]
    fn chunks_and_trailers_decode_to_the_pieces() {
        let (text, mut e, _) = head(200, &[h("trailer", "x-sum")], GET);
        assert!(text.contains("trailer: x-sum\r\n"), "{text}");
        let mut wire = Vec::new();
        for piece in [&b"one "[..], b"", &[b'x'; 300][..], b" end"] {
            e.piece(piece, &mut wire).unwrap();
        }
        e.finish(
            &[h("x-sum", "42"), h("content-length", "9"), h("bad\n", "v")],
            &mut wire,
        )
        .unwrap();
        let text = String::from_utf8_lossy(&wire);
        assert!(text.starts_with("4\r\none \r\n12c\r\n"), "{text}");
        // The invalid trailer section is dropped whole; the body still ends.
        assert!(text.ends_with(" end\r\n0\r\n\r\n"), "{text}");
        let mut body = Vec::new();
        BodyDecoder::chunked(u64::MAX)
            .decode(&wire, &mut body)
            .unwrap();
        assert_eq!(body.len(), 4 + 300 + 4);

        let (_, mut e, _) = head(200, &[], GET);
        let mut wire = Vec::new();
        e.piece(b"a", &mut wire).unwrap();
        e.finish(&[h("x-sum", "42"), h("content-length", "9")], &mut wire)
            .unwrap();
        assert_eq!(wire, b"1\r\na\r\n0\r\nx-sum: 42\r\n\r\n");
        assert_eq!(e.sent(), wire.len());
    }

    #[test]
    fn a_declared_length_is_held_to() {
        let declared = [h("content-length", "5")];
        let (_, mut e, _) = head(200, &declared, GET);
        let mut wire = Vec::new();
        e.piece(b"abc", &mut wire).unwrap();
        assert_eq!(e.piece(b"def", &mut wire), Err(BodyError::TooLong(5)));
        assert_eq!(
            e.finish::<Header>(&[], &mut wire),
            Err(BodyError::TooShort { missing: 2 })
        );
        e.piece(b"de", &mut wire).unwrap();
        e.finish::<Header>(&[], &mut wire).unwrap();
        assert_eq!(wire, b"abcde");
    }

    #[test]
    fn every_compressed_piece_is_readable_when_it_is_sent() {
        let gzip = RequestMeta {
            accept_encoding: Some(b"gzip"),
            ..GET
        };
        let (text, mut e, _) = head(200, &[h("content-type", "text/event-stream")], gzip);
        assert!(text.contains("content-encoding: gzip\r\n"), "{text}");
        assert!(text.contains("x-accel-buffering: no\r\n"), "{text}");
        let mut decoder = flate2::write::GzDecoder::new(Vec::new());
        let mut wire = Vec::new();
        for n in 0..3 {
            let event = format!("id: {n}\ndata: tick {n}\n\n");
            let mut framed = Vec::new();
            e.piece(event.as_bytes(), &mut framed).unwrap();
            let mut body = Vec::new();
            BodyDecoder::chunked(u64::MAX)
                .decode(&framed, &mut body)
                .unwrap();
            // What came out so far decodes to every event sent so far.
            decoder.write_all(&body).unwrap();
            decoder.flush().unwrap();
            assert!(
                String::from_utf8_lossy(decoder.get_ref()).ends_with(&event),
                "{:?}",
                String::from_utf8_lossy(decoder.get_ref())
            );
            wire.extend_from_slice(&framed);
        }
        e.finish::<Header>(&[], &mut wire).unwrap();
        assert!(wire.ends_with(b"0\r\n\r\n"));
    }
}
