//! Responses (A26-A38): framing headers, HEAD, the status line, Date, handler errors, early
//! responses, compression, `Expect: 100-continue`, and concurrent clients.

use std::io::{BufReader, Read, Write};

use crate::harness::{Options, TestServer, is_closed, plugins, read_response, read_response_opts};

fn server() -> TestServer {
    TestServer::start(&[plugins::PROBE, plugins::TRAP])
}

#[test]
fn a26_content_length_is_automatic_and_absent_for_204_and_1xx() {
    let s = server();
    let resp = s.request(b"GET /probe/status/200?body=hello HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.header("content-length"), Some("5"));
    let resp = s.request(b"GET /probe/status/204?body=ignored HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 204);
    assert_eq!(resp.header("content-length"), None);
    // The interim 100 Continue carries no Content-Length either.
    let mut stream = s.connect();
    stream
        .write_all(b"POST /probe/inc HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let interim = read_response_opts(&mut reader, false, false);
    assert_eq!(interim.status, 100);
    assert!(interim.headers.is_empty(), "{:?}", interim.headers);
    stream.write_all(b"{\"val\":1}").unwrap();
    assert_eq!(read_response(&mut reader, false).text(), "{\"val\":2}");
}

#[test]
fn a27_head_gets_get_headers_and_no_body() {
    let s = server();
    let mut stream = s.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    stream
        .write_all(b"GET /probe/big?n=3000 HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let get = read_response(&mut reader, false);
    stream
        .write_all(b"HEAD /probe/big?n=3000 HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let head = read_response(&mut reader, true);
    assert_eq!(head.status, 200);
    for name in ["content-length", "content-type", "content-encoding", "vary"] {
        assert_eq!(head.header(name), get.header(name), "{name}");
    }
    assert!(head.header("content-length").is_some());
    // No body bytes followed the HEAD response: the next response parses cleanly.
    stream
        .write_all(b"GET /probe/status/200?body=after HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader, false).text(), "after");
}

#[test]
fn a28_status_line_keeps_the_space_before_an_empty_reason() {
    let s = server();
    let resp = s.request(b"GET /probe/status/299 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status_line, "HTTP/1.1 299");
    let raw = s.raw(b"GET /probe/status/299 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 299 \r\n"), "{raw:?}");
    let raw = s.raw(b"GET /probe/status/418 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 418 \r\n"), "{raw:?}");
    let raw = s.raw(b"GET /probe/status/201 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 201 Created\r\n"), "{raw:?}");
}

#[test]
fn a29_date_on_2xx_3xx_4xx() {
    let s = server();
    for target in [
        "/probe/status/200",
        "/probe/status/302",
        "/probe/status/404",
        "/nowhere",
    ] {
        let resp = s.request(format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        let date = resp
            .header("date")
            .unwrap_or_else(|| panic!("{target}: no Date"));
        assert!(
            date.ends_with(" GMT") && date.len() == 29,
            "{target}: {date:?}"
        );
    }
}

#[test]
fn a30_a_panicking_handler_gets_500_and_the_server_keeps_serving() {
    let s = server();
    let resp = s.request(b"GET /trap/panic HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 500);
    assert_eq!(s.get("/probe/status/200?body=alive").1, "alive");
    assert_eq!(s.get("/trap/ok").0, 200);
}

#[test]
fn a31_a_handler_that_never_responds_still_ends_the_exchange() {
    let s = server();
    let resp = s.request(b"GET /probe/none HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 500);
    assert!(
        resp.text().contains("returned without responding"),
        "{}",
        resp.text()
    );
    s.wait_for_log("handler returned without responding");
}

#[test]
fn a32_an_early_response_goes_out_while_the_handler_keeps_running() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .arg("--workers")
        .arg("11")
        .start();
    // Each handler responds, then sleeps 60 s and only then logs "early done". All ten answers
    // arrive while every one of the ten workers is still asleep.
    for _ in 0..10 {
        let resp = s.request(b"GET /probe/early?ms=60000 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(resp.status, 200);
        assert_eq!(resp.text(), "early");
    }
    assert!(!s.log().contains("early done"), "{}", s.log());
    // And the handlers do run on after their response: a short one finishes and logs.
    assert_eq!(s.get("/probe/early?ms=10").1, "early");
    s.wait_for_log("early done");
}

#[test]
fn a33_a_reply_for_a_departed_client_never_reaches_a_new_one() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .arg("--workers")
        .arg("4")
        .start();
    for round in 0..5 {
        {
            let mut gone = s.connect();
            gone.write_all(b"GET /probe/sleep?ms=200 HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap();
        } // dropped: the client left before its answer.
        let mut stream = s.connect();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        for i in 0..3 {
            write!(
                stream,
                "GET /probe/status/200?body=mine{round}{i} HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .unwrap();
            assert_eq!(
                read_response(&mut reader, false).text(),
                format!("mine{round}{i}")
            );
        }
        // Let the departed client's handler finish while this connection is still open.
        write!(
            stream,
            "GET /probe/sleep?ms=300 HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        .unwrap();
        assert_eq!(read_response(&mut reader, false).text(), "slept 300");
        write!(
            stream,
            "GET /probe/status/200?body=last HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        .unwrap();
        assert_eq!(read_response(&mut reader, false).text(), "last");
    }
}

#[test]
fn a34_a_second_final_response_is_refused() {
    let s = server();
    let mut stream = s.connect();
    stream
        .write_all(b"GET /probe/twice HTTP/1.1\r\nHost: a\r\n\r\nGET /probe/status/200?body=next HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream);
    assert_eq!(read_response(&mut reader, false).text(), "first");
    assert_eq!(read_response(&mut reader, false).text(), "next");
    let log = s.wait_for_log_count("second final response refused", 2);
    // Both the early second response and the returned third one were refused.
    assert_eq!(
        log.matches("second final response refused").count(),
        2,
        "{log}"
    );
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn inflate(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn get_with(s: &TestServer, target: &str, accept: Option<&str>) -> crate::harness::Response {
    let accept = accept.map_or(String::new(), |a| format!("Accept-Encoding: {a}\r\n"));
    s.request(format!("GET {target} HTTP/1.1\r\nHost: a\r\n{accept}\r\n").as_bytes())
}

#[test]
fn a35_gzip_then_deflate_then_identity() {
    let s = server();
    let plain = get_with(&s, "/probe/big?n=5000", None);
    assert_eq!(plain.body.len(), 5000);
    assert_eq!(plain.header("content-encoding"), None);

    let gz = get_with(&s, "/probe/big?n=5000", Some("gzip, deflate"));
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert!(gz.body.len() < 5000);
    assert_eq!(gunzip(&gz.body), plain.body);

    let df = get_with(&s, "/probe/big?n=5000", Some("deflate"));
    assert_eq!(df.header("content-encoding"), Some("deflate"));
    assert_eq!(inflate(&df.body), plain.body);

    // A body the plugin encoded itself is left alone.
    let pre = get_with(&s, "/probe/big?n=5000&enc=br", Some("gzip"));
    assert_eq!(pre.header("content-encoding"), Some("br"));
    assert_eq!(pre.body, plain.body);
}

#[test]
fn a36_vary_and_what_is_never_compressed() {
    let s = server();
    let gz = get_with(&s, "/probe/big?n=5000", Some("gzip"));
    assert_eq!(gz.header("vary"), Some("Accept-Encoding"));
    let plain = get_with(&s, "/probe/big?n=5000", None);
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));
    for (target, accept) in [
        ("/probe/big?n=5000&type=image/png", "gzip"),
        ("/probe/big?n=5000&type=application/zip", "gzip"),
        ("/probe/big?n=5000", "gzip;q=0"),
        ("/probe/big?n=5000", "br, identity"),
        ("/probe/big?n=800", "gzip"),
    ] {
        let resp = get_with(&s, target, Some(accept));
        assert_eq!(resp.header("content-encoding"), None, "{target} {accept}");
    }
}

#[test]
fn a37_expect_100_continue() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .arg("--max-body-bytes")
        .arg("1000")
        .start();
    let mut stream = s.connect();
    stream
        .write_all(b"POST /probe/inc HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    // The 100 arrives before any body byte is sent.
    let interim = read_response_opts(&mut reader, false, false);
    assert_eq!(interim.status_line, "HTTP/1.1 100 Continue");
    stream.write_all(b"{\"val\":41}").unwrap();
    assert_eq!(read_response(&mut reader, false).text(), "{\"val\":42}");

    let mut stream = s.connect();
    stream
        .write_all(b"POST /probe/inc HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let resp = read_response_opts(&mut reader, false, false);
    assert_eq!(resp.status, 413);
    assert!(is_closed(&mut stream));
}

#[test]
fn a38_concurrent_clients_get_their_own_answers() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .arg("--workers")
        .arg("16")
        .start();
    let addr = s.addr;
    let threads: Vec<_> = (0..100)
        .map(|client| {
            std::thread::spawn(move || {
                let stream = std::net::TcpStream::connect(addr).unwrap();
                stream
                    .set_read_timeout(Some(crate::harness::PATIENCE))
                    .unwrap();
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                for i in 0..10 {
                    let val = client * 1000 + i;
                    let body = format!("{{\"val\":{val}}}");
                    write!(
                        writer,
                        "POST /probe/inc HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .unwrap();
                    let resp = read_response(&mut reader, false);
                    assert_eq!(resp.text(), format!("{{\"val\":{}}}", val + 1));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
