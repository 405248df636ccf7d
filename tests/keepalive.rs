//! Keep-alive, pipelining and connection lifetime (A17-A21).

use std::io::{BufReader, Write};

use crate::harness::{TestServer, is_closed, plugins, read_response};

fn server() -> TestServer {
    TestServer::start(&[plugins::PROBE])
}

#[test]
fn a17_http11_keeps_the_connection_open() {
    let s = server();
    let mut stream = s.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    for i in 0..3 {
        write!(
            stream,
            "GET /probe/status/200?body=r{i} HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        .unwrap();
        let resp = read_response(&mut reader, false);
        assert_eq!(resp.text(), format!("r{i}"));
        assert_eq!(resp.header("connection"), None);
    }
}

#[test]
fn a18_connection_close_from_client_or_handler() {
    let s = server();
    let mut stream = s.connect();
    stream
        .write_all(b"GET /probe/status/200?body=x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let resp = read_response(&mut BufReader::new(stream.try_clone().unwrap()), false);
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(is_closed(&mut stream));

    let mut stream = s.connect();
    stream
        .write_all(b"GET /probe/close HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let resp = read_response(&mut BufReader::new(stream.try_clone().unwrap()), false);
    assert_eq!(resp.text(), "ok");
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(is_closed(&mut stream));
}

#[test]
fn a19_http10_closes_unless_keep_alive() {
    let s = server();
    let mut stream = s.connect();
    stream
        .write_all(b"GET /probe/status/200?body=x HTTP/1.0\r\n\r\n")
        .unwrap();
    let resp = read_response(&mut BufReader::new(stream.try_clone().unwrap()), false);
    assert_eq!(resp.text(), "x");
    assert!(is_closed(&mut stream));

    let mut stream = s.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    for _ in 0..2 {
        stream
            .write_all(b"GET /probe/status/200?body=y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let resp = read_response(&mut reader, false);
        assert_eq!(resp.header("connection"), Some("keep-alive"));
        assert_eq!(resp.text(), "y");
    }
}

#[test]
fn a20_pipelined_requests_are_answered_in_order() {
    let s = with_workers(4);
    let mut stream = s.connect();
    // The first handler is much slower than the second; order must still hold.
    stream
        .write_all(
            b"GET /probe/sleep?ms=300 HTTP/1.1\r\nHost: a\r\n\r\nGET /probe/status/200?body=second HTTP/1.1\r\nHost: a\r\n\r\nGET /probe/status/200?body=third HTTP/1.1\r\nHost: a\r\n\r\n",
        )
        .unwrap();
    let mut reader = BufReader::new(stream);
    assert_eq!(read_response(&mut reader, false).text(), "slept 300");
    assert_eq!(read_response(&mut reader, false).text(), "second");
    assert_eq!(read_response(&mut reader, false).text(), "third");
}

fn with_workers(n: usize) -> TestServer {
    crate::harness::Options::default()
        .plugin(plugins::PROBE)
        .arg("--workers")
        .arg(&n.to_string())
        .start()
}

#[test]
fn a21_connection_tokens_are_case_insensitive_lists() {
    let s = server();
    for value in ["keep-alive, CLOSE", "Upgrade ,close", "  Close  "] {
        let mut stream = s.connect();
        write!(
            stream,
            "GET /probe/status/200?body=x HTTP/1.1\r\nHost: a\r\nConnection: {value}\r\n\r\n"
        )
        .unwrap();
        let resp = read_response(&mut BufReader::new(stream.try_clone().unwrap()), false);
        assert_eq!(resp.header("connection"), Some("close"), "{value}");
        assert!(is_closed(&mut stream), "{value}");
    }
    // `keep-alive, Upgrade` on 1.1 and `KEEP-ALIVE` on 1.0 keep it open.
    let mut stream = s.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    stream
        .write_all(b"GET /probe/status/200?body=1 HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader, false).text(), "1");
    stream
        .write_all(b"GET /probe/status/200?body=2 HTTP/1.0\r\nConnection: KEEP-ALIVE\r\n\r\n")
        .unwrap();
    let resp = read_response(&mut reader, false);
    assert_eq!(resp.text(), "2");
    assert_eq!(resp.header("connection"), Some("keep-alive"));
}
