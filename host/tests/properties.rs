//! Property tests of the sans-IO protocol layer:
//! - a valid request stream parses the same whether it arrives whole or split anywhere (A16);
//! - gzip and deflate output always decompresses to the input;
//! - every response the encoder writes is accepted by a strict HTTP parser, with the headers,
//!   length and body it was given.

use std::io::Read;

use ankh::limits::Limits;
use ankh::proto::body::BodyDecoder;
use ankh::proto::encoding::{Coding, compress};
use ankh::proto::request::{Framing, RequestHead, parse};
use ankh::proto::response::{RequestMeta, encode};
use ankh::proto::{Status, Version};
use proptest::prelude::*;

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
}

fn field_value() -> impl Strategy<Value = String> {
    // Visible ASCII and inner spaces, no leading or trailing whitespace.
    "[!-~]([ -~]{0,30}[!-~])?"
}

fn path() -> impl Strategy<Value = String> {
    // Dot segments (`.`, `..`, `%2e`...) are resolved by the parser, so the path it returns
    // differs from the one sent; they have tests of their own.
    let segment = "[a-zA-Z0-9._~%-]{1,8}".prop_filter("not a dot segment", |s| {
        !matches!(
            s.to_ascii_lowercase().as_str(),
            "." | ".." | "%2e" | ".%2e" | "%2e." | "%2e%2e"
        )
    });
    prop::collection::vec(segment, 0..5).prop_map(|s| format!("/{}", s.join("/")))
}

/// A valid request: head fields, and a body sent with Content-Length or chunked.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    chunked: Option<Vec<usize>>,
}

fn request() -> impl Strategy<Value = Req> {
    (
        prop::sample::select(vec![
            "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "X-CUSTOM",
        ]),
        path(),
        "([a-z]{1,5}=[a-z0-9+%]{0,5}(&[a-z]{1,5}=[a-z0-9]{0,5}){0,3})?",
        prop::collection::vec((token(), field_value()), 0..8),
        prop::collection::vec(any::<u8>(), 0..300),
        prop::option::of(prop::collection::vec(1usize..50, 1..8)),
    )
        .prop_map(|(method, path, query, headers, body, chunked)| {
            // Framing and host headers are the generator's own business.
            let reserved = [
                "host",
                "content-length",
                "transfer-encoding",
                "expect",
                "connection",
            ];
            let headers = headers
                .into_iter()
                .filter(|(n, _)| !reserved.contains(&n.to_ascii_lowercase().as_str()))
                .collect();
            Req {
                method: method.to_owned(),
                path,
                query,
                headers,
                body,
                chunked,
            }
        })
}

impl Req {
    fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {}", self.method, self.path);
        if !self.query.is_empty() {
            out.push('?');
            out.push_str(&self.query);
        }
        out.push_str(" HTTP/1.1\r\nHost: example\r\n");
        for (n, v) in &self.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        let mut out = out.into_bytes();
        match &self.chunked {
            None => {
                out.extend_from_slice(
                    format!("Content-Length: {}\r\n\r\n", self.body.len()).as_bytes(),
                );
                out.extend_from_slice(&self.body);
            }
            Some(sizes) => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                let mut rest = &self.body[..];
                let mut sizes = sizes.iter().cycle();
                while !rest.is_empty() {
                    let n = (*sizes.next().unwrap()).min(rest.len());
                    out.extend_from_slice(format!("{n:x};ext=1\r\n").as_bytes());
                    out.extend_from_slice(&rest[..n]);
                    out.extend_from_slice(b"\r\n");
                    rest = &rest[n..];
                }
                out.extend_from_slice(b"0\r\nTrailer: x\r\n\r\n");
            }
        }
        out
    }
}

/// Parses a stream of requests the way a connection does, feeding `splits`-sized pieces.
fn parse_stream(stream: &[u8], splits: &[usize]) -> Vec<(RequestHead, Vec<u8>)> {
    let limits = Limits::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut sizes = splits.iter().cycle();
    let mut out = Vec::new();
    let mut pending: Option<(RequestHead, BodyDecoder, Vec<u8>)> = None;
    loop {
        // Make progress on what is buffered.
        loop {
            if let Some((head, mut decoder, mut body)) = pending.take() {
                let p = decoder.decode(&buf, &mut body).unwrap();
                buf.drain(..p.consumed);
                if p.done {
                    out.push((head, body));
                    continue;
                }
                pending = Some((head, decoder, body));
                break;
            }
            match parse(&buf, &limits).unwrap() {
                Status::Partial => break,
                Status::Complete(head, used) => {
                    buf.drain(..used);
                    let decoder = match head.framing {
                        Framing::Empty => {
                            out.push((head, Vec::new()));
                            continue;
                        }
                        Framing::Length(n) => BodyDecoder::length(n),
                        Framing::Chunked => BodyDecoder::chunked(limits.max_body_bytes),
                    };
                    pending = Some((head, decoder, Vec::new()));
                }
            }
        }
        if fed == stream.len() {
            return out;
        }
        let n = (*sizes.next().unwrap()).max(1);
        let end = (fed + n).min(stream.len());
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a16_any_split_parses_like_one_piece(
        reqs in prop::collection::vec(request(), 1..4),
        splits in prop::collection::vec(1usize..40, 1..10),
    ) {
        let stream: Vec<u8> = reqs.iter().flat_map(Req::bytes).collect();
        let whole = parse_stream(&stream, &[stream.len()]);
        let split = parse_stream(&stream, &splits);
        let bytewise = parse_stream(&stream, &[1]);
        prop_assert_eq!(whole.len(), reqs.len());
        prop_assert_eq!(&whole, &split);
        prop_assert_eq!(&whole, &bytewise);
        for ((head, body), req) in whole.iter().zip(&reqs) {
            prop_assert_eq!(&*head.method, req.method.as_str());
            prop_assert_eq!(&*head.path, req.path.as_str());
            prop_assert_eq!(&head.query, &req.query);
            prop_assert_eq!(body, &req.body);
            for (n, v) in &req.headers {
                prop_assert!(head.headers.iter().any(|(hn, hv)| hn == n && hv == v.as_bytes()));
            }
        }
    }

    #[test]
    fn compression_round_trips(body in prop::collection::vec(any::<u8>(), 0..20_000)) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&compress(Coding::Gzip, &body)[..]).read_to_end(&mut out).unwrap();
        prop_assert_eq!(&out, &body);
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&compress(Coding::Deflate, &body)[..]).read_to_end(&mut out).unwrap();
        prop_assert_eq!(&out, &body);
    }

    #[test]
    fn encoded_responses_satisfy_a_strict_parser(
        status in 200u16..600,
        headers in prop::collection::vec((token(), field_value()), 0..10),
        body in prop::collection::vec(any::<u8>(), 0..3000),
        text in any::<bool>(),
        gzip in any::<bool>(),
        head in any::<bool>(),
        keep_alive in any::<bool>(),
    ) {
        let mut headers: Vec<(String, Vec<u8>)> = headers
            .into_iter()
            .filter(|(n, _)| !["content-encoding", "content-type", "vary", "connection"].contains(&n.to_ascii_lowercase().as_str()))
            .map(|(n, v)| (n, v.into_bytes()))
            .collect();
        if text {
            headers.push(("Content-Type".into(), b"text/plain".to_vec()));
        }
        let meta = RequestMeta {
            version: Version::Http11,
            head,
            keep_alive,
            accept_encoding: gzip.then_some(&b"gzip"[..]),
        };
        let mut out = Vec::new();
        let kept = encode(status, &headers, &body, &meta, &mut out).unwrap();
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut slots);
        let used = match resp.parse(&out).unwrap() {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("incomplete head"),
        };
        prop_assert_eq!(resp.code, Some(status));
        let get = |name: &str| resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value.to_vec());
        prop_assert!(get("date").is_some());
        let owned = ["content-length", "transfer-encoding", "connection", "keep-alive", "date", "upgrade"];
        for (n, v) in &headers {
            if !owned.contains(&n.to_ascii_lowercase().as_str()) {
                prop_assert!(resp.headers.iter().any(|h| h.name == n && h.value == v.as_slice()), "lost header {}", n);
            }
        }
        let bodiless = status == 204 || status == 304;
        let payload = &out[used..];
        if bodiless {
            prop_assert!(get("content-length").is_none());
            prop_assert!(payload.is_empty());
        } else {
            let len: usize = String::from_utf8(get("content-length").unwrap()).unwrap().parse().unwrap();
            if head {
                prop_assert!(payload.is_empty());
            } else if status == 205 {
                // Reset Content: never a body, and a length that says so.
                prop_assert_eq!(len, 0);
                prop_assert!(payload.is_empty());
            } else {
                prop_assert_eq!(payload.len(), len);
                let decoded = if get("content-encoding").is_some() {
                    let mut d = Vec::new();
                    flate2::read::GzDecoder::new(payload).read_to_end(&mut d).unwrap();
                    d
                } else {
                    payload.to_vec()
                };
                prop_assert_eq!(decoded, body);
            }
        }
        prop_assert_eq!(kept, keep_alive);
        prop_assert_eq!(get("connection").is_some(), !keep_alive);
    }
}
