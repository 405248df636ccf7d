//! Request parsing and framing over raw sockets (A1-A8, A11-A13, A16).

use std::io::{BufReader, Write};

use crate::harness::{TestServer, is_closed, plugins, read_response};

fn server() -> TestServer {
    TestServer::start(&[plugins::ECHO, plugins::PROBE])
}

/// Asserts that `raw` gets `status` and the server closes the connection.
fn refused(server: &TestServer, raw: &[u8], status: u16) {
    let reply = server.raw(raw);
    let expected = format!("HTTP/1.1 {status} ");
    assert!(
        reply.starts_with(&expected),
        "{:?} got {:?}, expected {status}",
        String::from_utf8_lossy(raw),
        reply.lines().next()
    );
    assert!(reply.contains("connection: close\r\n"), "{reply}");
}

#[test]
fn a01_header_block_over_8k_gets_431_and_close() {
    let s = server();
    let mut raw = b"GET /echo HTTP/1.1\r\nHost: a\r\nX-Big: ".to_vec();
    raw.resize(raw.len() + 9000, b'x');
    raw.extend_from_slice(b"\r\n\r\n");
    refused(&s, &raw, 431);
}

#[test]
fn a02_too_many_header_lines_get_431() {
    let s = server();
    let mut raw = b"GET /echo HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..101 {
        raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    refused(&s, &raw, 431);
    // 99 headers plus Host is exactly the limit, and is served.
    let mut raw = b"GET /echo HTTP/1.1\r\nHost: a\r\nConnection: close\r\n".to_vec();
    for i in 0..98 {
        raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    assert!(s.raw(&raw).starts_with("HTTP/1.1 200 OK\r\n"));
}

#[test]
fn a03_malformed_request_lines_and_versions() {
    let s = server();
    refused(&s, b"GET /echoHTTP/1.1\r\nHost: a\r\n\r\n", 400);
    refused(&s, b"GET /echo  HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    refused(&s, b"GET  /echo HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    refused(&s, b" /echo HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    refused(&s, b"GET /echo HTTP/2.0\r\nHost: a\r\n\r\n", 505);
    refused(&s, b"GET /echo HTTP/1.2x\r\nHost: a\r\n\r\n", 400);
    refused(&s, b"GET echo HTTP/1.1\r\nHost: a\r\n\r\n", 400);
}

#[test]
fn a04_cl_te_smuggling_is_refused_and_never_dispatched() {
    let s = server();
    for framing in [
        "Content-Length: 64\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 64",
    ] {
        let smuggled = "GET /probe/log?marker=SMUGGLED HTTP/1.1\r\nHost: a\r\n\r\n";
        let raw =
            format!("POST /probe/inc HTTP/1.1\r\nHost: a\r\n{framing}\r\n\r\n0\r\n\r\n{smuggled}");
        refused(&s, raw.as_bytes(), 400);
    }
    // A request after the refused ones is served, and the smuggled one never ran.
    assert_eq!(s.get("/probe/status/200?body=after").1, "after");
    assert!(!s.log().contains("SMUGGLED"), "{}", s.log());
}

#[test]
fn a05_bad_content_length_and_duplicate_framing_headers() {
    let s = server();
    for cl in [
        "Content-Length: 3\r\nContent-Length: 3",
        "Content-Length: 3a",
        "Content-Length: -1",
        "Content-Length: +3",
        "Content-Length: 99999999999999999999999999",
        "Content-Length: ",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
    ] {
        let raw = format!("POST /echo HTTP/1.1\r\nHost: a\r\n{cl}\r\n\r\nabc");
        refused(&s, raw.as_bytes(), 400);
    }
}

#[test]
fn a06_transfer_encoding_not_ending_in_chunked() {
    let s = server();
    refused(
        &s,
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nabc",
        400,
    );
    refused(
        &s,
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        400,
    );
    refused(
        &s,
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
    );
}

#[test]
fn a07_host_header_required_once() {
    let s = server();
    refused(&s, b"GET /echo HTTP/1.1\r\n\r\n", 400);
    refused(&s, b"GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    // HTTP/1.0 needs none.
    assert!(
        s.raw(b"GET /echo HTTP/1.0\r\n\r\n")
            .starts_with("HTTP/1.1 200 OK\r\n")
    );
}

#[test]
fn a08_malformed_header_lines() {
    let s = server();
    for line in [
        &b"Host : a"[..],
        b"X-A: b\r\n folded",
        b"NoColonHere",
        b"X-A: b\0c",
        b"X-A: b\rc",
        b"X A: b",
    ] {
        let mut raw = b"GET /echo HTTP/1.1\r\nHost: a\r\n".to_vec();
        raw.extend_from_slice(line);
        raw.extend_from_slice(b"\r\n\r\n");
        refused(&s, &raw, 400);
    }
}

/// A tiny deterministic generator, so failures replay.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

fn echoed_body(resp: &crate::harness::Response) -> String {
    let v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
    v["body"].as_str().unwrap().to_owned()
}

#[test]
fn a11_chunked_body_in_random_chunks_and_splits_is_exact() {
    let s = server();
    let mut rng = Lcg(11);
    for round in 0..5 {
        let body: String = (0..20_000)
            .map(|_| (b'a' + rng.next(26) as u8) as char)
            .collect();
        let mut raw =
            b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut at = 0;
        while at < body.len() {
            let n = (1 + rng.next(4095) as usize).min(body.len() - at);
            raw.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            raw.extend_from_slice(&body.as_bytes()[at..at + n]);
            raw.extend_from_slice(b"\r\n");
            at += n;
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        let mut stream = s.connect();
        let mut at = 0;
        while at < raw.len() {
            let n = (1 + rng.next(3000) as usize).min(raw.len() - at);
            stream.write_all(&raw[at..at + n]).unwrap();
            at += n;
        }
        // Trailing junk after the body must not close the connection.
        stream.write_all(&b"JUNKJUNK"[..round]).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let resp = read_response(&mut reader, false);
        assert_eq!(resp.status, 200);
        assert_eq!(echoed_body(&resp), body, "round {round}");
        stream
            .set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 1];
        match std::io::Read::read(&mut stream, &mut buf) {
            Ok(0) => panic!("server closed the connection after trailing junk"),
            Ok(_) => panic!("unexpected bytes after the response"),
            Err(e) => assert!(matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )),
        }
    }
}

#[test]
fn a12_chunk_extensions_and_oversized_sizes() {
    let s = server();
    let resp = s.request(
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y;z\r\nhello\r\n6 ; name=\"v\"\r\n world\r\n0\r\n\r\n",
    );
    assert_eq!(resp.status, 200);
    assert_eq!(echoed_body(&resp), "hello world");
    let mut long =
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5".to_vec();
    for i in 0..400 {
        long.extend_from_slice(format!(";ext{i}=value").as_bytes());
    }
    long.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
    refused(&s, &long, 400);
    refused(
        &s,
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\n",
        400,
    );
}

#[test]
fn a13_trailers_are_discarded_and_pipelining_continues() {
    let s = server();
    let mut stream = s.connect();
    stream
        .write_all(
            b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\nGET /probe/status/200?body=next HTTP/1.1\r\nHost: a\r\n\r\n",
        )
        .unwrap();
    let mut reader = BufReader::new(stream);
    let first = read_response(&mut reader, false);
    assert_eq!(echoed_body(&first), "abc");
    assert!(!first.text().contains("X-Trailer"));
    let second = read_response(&mut reader, false);
    assert_eq!(second.text(), "next");
}

#[test]
fn a14_chunk_data_without_crlf_is_refused() {
    let s = server();
    refused(
        &s,
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n",
        400,
    );
}

#[test]
fn a16_headers_one_byte_per_write_parse_the_same() {
    let s = server();
    let raw = b"POST /echo/x?a=1&b=%20 HTTP/1.1\r\nHost: example\r\nX-One: 1\r\nx-two: two words\r\nContent-Length: 4\r\n\r\nbody";
    let whole = s.request(raw);
    let mut stream = s.connect();
    for b in raw {
        stream.write_all(&[*b]).unwrap();
    }
    let split = read_response(&mut BufReader::new(stream), false);
    let strip = |r: &crate::harness::Response| {
        let mut v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        v.as_object_mut().unwrap().remove("id");
        v.as_object_mut().unwrap().remove("remote_addr");
        v
    };
    assert_eq!(whole.status, 200);
    assert_eq!(strip(&whole), strip(&split));
    assert_eq!(strip(&whole)["headers"][2][1], "two words");
}

#[test]
fn a09_declared_body_over_the_limit_gets_413_unread() {
    let s = crate::harness::Options::default()
        .plugin(plugins::ECHO)
        .arg("--max-body-bytes")
        .arg("1000")
        .start();
    let mut stream = s.connect();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n")
        .unwrap();
    // No body byte was sent: the answer comes anyway, then the close.
    let resp = read_response(&mut BufReader::new(stream.try_clone().unwrap()), false);
    assert_eq!(resp.status, 413);
    assert!(is_closed(&mut stream));
    // Chunked: refused at the size line that crosses the limit.
    let reply =
        s.raw(b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n");
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
}
