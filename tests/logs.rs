//! Logs a person can read (issue 12): plain text when stderr is not a terminal, one event per
//! line however much a failure has to say, and access lines that tell what happened to
//! answers the host made itself.

use crate::harness::{Options, plugins};

// See: issue 12, item 6. Before: colour codes unless NO_COLOR was set.
#[test]
fn issue12_6_a_log_that_is_not_a_terminal_has_no_colour_codes() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .env_remove("NO_COLOR")
        .start();
    assert_eq!(s.get("/hello").0, 200);
    let log = s.wait_for_log("GET /hello 200");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

// See: issue 12, item 7. Before: one trap was 15 lines.
#[test]
fn issue12_7_a_trap_is_one_log_event_with_its_backtrace_in_a_field() {
    for format in ["text", "json"] {
        let s = Options::default()
            .plugin(plugins::TRAP)
            .flag("--log-format", format)
            .start();
        let resp = s.request(b"GET /trap/panic HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(resp.status, 500);
        let log = s.wait_for_log("instance discarded");
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("trap.wasm!")).collect();
        assert_eq!(
            lines.len(),
            1,
            "{format}: the backtrace spans lines:\n{log}"
        );
        let line = lines[0];
        assert!(line.contains("instance discarded"), "{line}");
        assert!(line.contains("0000000000000001"), "the request id: {line}");
        if format == "json" {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            let backtrace = event["fields"]["backtrace"].as_str().unwrap();
            assert!(backtrace.lines().count() > 3, "{backtrace}");
        }
    }
}

// See: issue 12, item 8. Before: bytes=0, and method=- path=- for 413 and 400.
#[test]
fn issue12_8_answers_the_host_makes_are_logged_with_their_request_and_size() {
    let s = Options::default()
        .plugin(plugins::ECHO)
        .flag("--max-body-bytes", 10)
        .start();
    let reply = s.raw(b"GET /nowhere HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 404 "));
    let reply = s.raw(b"POST /echo/x HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 413 "));
    let reply =
        s.raw(b"POST /echo/y HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    assert!(reply.starts_with("HTTP/1.1 400 "));
    let log = s.wait_for_log("path=/echo/y");
    for (method, path, status) in [
        ("GET", "/nowhere", 404),
        ("POST", "/echo/x", 413),
        ("POST", "/echo/y", 400),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("method={method} path={path} status={status}")))
            .unwrap_or_else(|| panic!("no access line for {method} {path}:\n{log}"));
        let bytes: usize = crate::harness::log_field(line, "bytes")
            .and_then(|b| b.parse().ok())
            .unwrap();
        assert!(bytes > 100, "{line}");
    }
}

// See: issue 12, item 9.
#[test]
fn issue12_9_an_empty_plugins_directory_is_reported() {
    let s = Options::default().start();
    s.wait_for_log("no plugin is mounted: every request gets 404 until a NAME.wasm is added");
}

// Access lines are batched (written every 100 ms, or before any other line), yet every line
// keeps its place: the access lines of requests answered before a plugin's log line are
// written before it, and a lone access line still arrives without anything else logged.
#[test]
fn batched_access_lines_keep_their_order_and_arrive_on_their_own() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .plugin(plugins::PROBE)
        .start();
    for _ in 0..50 {
        assert_eq!(s.get("/hello").0, 200);
    }
    assert_eq!(s.get("/probe/log?marker=after").0, 200);
    let log = s.wait_for_log("log after");
    let marker = log.find("log after").unwrap();
    let before = log[..marker].matches("GET /hello 200").count();
    assert_eq!(
        before, 50,
        "access lines written after a later line:\n{log}"
    );
    // Nothing else is logged after this request: the flusher writes its line.
    assert_eq!(s.get("/hello").0, 200);
    s.wait_for_log_count("GET /hello 200", 51);
}
