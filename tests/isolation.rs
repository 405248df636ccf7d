//! Plugins isolated from each other, and every resource a plugin or a client can grow bounded
//! (issue 11). A hostile plugin (`tests/plugins/hostile`) attacks from inside the sandbox; raw
//! clients attack from outside. Each test is named after the item of the issue it covers.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::harness::{Options, PATIENCE, TestServer, plugins, read_response};
use crate::metrics::{admin_addr, scrape, value};
use crate::ws::{FIN, PING, client, close_code, frame, probe_client, raw, send, text};

fn hostile_beside(victim: &str) -> Options {
    Options::default().plugin(victim).plugin(plugins::HOSTILE)
}

// See: issue 11, item 1.
#[test]
fn issue11_1_a_plugin_cannot_reach_another_plugins_websockets() {
    let s = hostile_beside(plugins::WSPROBE)
        .flag("--workers", 4)
        .start();
    let (mut victim, id) = probe_client(&s);
    send(&mut victim, "sub:lobby");
    assert_eq!(text(&mut victim), "subscribed true");

    // Everything the hostile plugin tries on the victim's connection answers `closed`, the
    // same as for a connection that never existed: no oracle.
    let never = id.wrapping_add(1);
    for (path, expected) in [
        (
            format!("/hostile/send?conn={id}&text=injected"),
            "error WsError::Closed",
        ),
        (
            format!("/hostile/send?conn={never}&text=x"),
            "error WsError::Closed",
        ),
        (
            format!("/hostile/close?conn={id}&code=1000"),
            "error WsError::Closed",
        ),
        (
            format!("/hostile/subscribe?conn={id}&topic=x"),
            "error WsError::Closed",
        ),
        (
            format!("/hostile/unsubscribe?conn={id}&topic=lobby"),
            "error WsError::Closed",
        ),
        // Topics are per plugin: nobody listens to this one's `lobby`.
        (
            "/hostile/publish?topic=lobby&text=faked".to_owned(),
            "published 0",
        ),
    ] {
        assert_eq!(s.get(&path), (200, expected.to_owned()), "{path}");
    }

    // The victim is still subscribed, still open, and got none of it: the first thing it
    // receives is its own room's message.
    send(&mut victim, "pub:lobby:real");
    assert_eq!(text(&mut victim), "real");
    assert_eq!(text(&mut victim), "published 1");

    // Ids are not a sequence another plugin could walk.
    let ids: Vec<u64> = (0..4).map(|_| probe_client(&s).1).collect();
    assert!(
        ids.windows(2).all(|w| w[1].abs_diff(w[0]) > 1),
        "consecutive ids: {ids:?}"
    );
}

// See: issue 11, item 2.
#[test]
fn issue11_2_a_ping_flood_that_never_reads_is_held_back() {
    let s = Options::default()
        .plugin(plugins::WSPROBE)
        .flag("--max-send-buffer-bytes", 1 << 20)
        .start();
    let baseline = s.rss_kib();
    let (mut stream, _reader) = raw(&s, "/wsprobe/");
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let ping = frame(FIN | PING, &[b'p'; 125], true);
    let batch: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 1000)
        .collect();
    let limit = 256 << 20;
    let mut sent = 0usize;
    let blocked = loop {
        if sent >= limit {
            break false;
        }
        match stream.write_all(&batch) {
            Ok(()) => sent += batch.len(),
            Err(_) => break true,
        }
    };
    let rss = s.rss_kib();
    assert!(
        blocked,
        "the server read {sent} bytes of Pings from a client that reads nothing"
    );
    assert!(
        rss < baseline + 64 * 1024,
        "RSS {baseline} -> {rss} KiB after {sent} bytes of Pings"
    );
    // The server itself is fine.
    assert_eq!(s.get("/wsprobe/log?conn=0").0, 200);
}

/// A connection that sends `GET path` and leaves its response unread.
fn request_on_new_connection(s: &TestServer, path: &str) -> TcpStream {
    let mut c = s.connect();
    write!(c, "GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    c
}

/// GET `path` on a new connection, giving up (as a failure) after `within`.
fn get_within(s: &TestServer, path: &str, within: Duration) -> crate::harness::Response {
    let c = request_on_new_connection(s, path);
    c.set_read_timeout(Some(within)).unwrap();
    read_response(&mut BufReader::new(c), false)
}

// See: issue 11, item 3.
#[test]
fn issue11_3_a_call_is_stopped_at_its_handler_timeout() {
    let s = hostile_beside(plugins::HELLO)
        .flag("--workers", 1)
        .flag("--handler-timeout-ms", 1000)
        .flag("--cpu-deadline-ms", 60_000)
        .start();
    // Sleeping: the wait is ended.
    let started = Instant::now();
    let resp = get_within(&s, "/hostile/sleep?ms=60000", PATIENCE);
    assert_eq!(resp.status, 504);
    assert!(
        resp.text().contains("exceeded its handler timeout of 1s"),
        "{}",
        resp.text()
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    // Computing, with a CPU deadline far away: the epoch check ends it.
    let resp = get_within(&s, "/hostile/spin", PATIENCE);
    assert_eq!(resp.status, 504);
    assert!(resp.text().contains("handler timeout"), "{}", resp.text());
    // Working on after an early answer: bounded the same way, so the one worker is free
    // again long before the guest's 60 s sleep would end.
    let resp = get_within(&s, "/hostile/early?ms=60000", PATIENCE);
    assert_eq!(resp.text(), "early");
    let resp = get_within(&s, "/hello", Duration::from_secs(20));
    assert_eq!(resp.text(), "Hello, World!");
    let log = s.wait_for_log("exceeded its handler timeout of 1s (request");
    assert!(!log.contains("hostile woke up"), "{log}");
}

// See: issue 11, item 3.
#[test]
fn issue11_3_a_call_whose_client_left_is_cancelled_and_frees_its_worker() {
    let s = hostile_beside(plugins::HELLO)
        .flag("--workers", 2)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    // Two calls sleep on both workers, four more wait in the queue; then every client hangs up.
    let clients: Vec<TcpStream> = (0..6)
        .map(|_| request_on_new_connection(&s, "/hostile/sleep?ms=30000"))
        .collect();
    s.wait_for_log_count("hostile sleeping", 2);
    drop(clients);
    // Both workers are free at once, not after 30 s.
    let resp = get_within(&s, "/hello", Duration::from_secs(10));
    assert_eq!(resp.text(), "Hello, World!");
    let started = Instant::now();
    loop {
        let m = scrape(admin);
        let cancelled = value(
            &m,
            "ankh_plugin_cancellations_total",
            &[("plugin", "hostile")],
        );
        if cancelled == 6.0 {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "cancellations: {cancelled}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Access lines are batched: wait for it.
    s.wait_for_log("status=499");
}

// See: issue 11, item 4.
#[test]
fn issue11_4_a_plugins_host_memory_is_bounded() {
    let s = Options::default()
        .plugin(plugins::HOSTILE)
        .file("hostile.toml", b"[limits]\nkv_max_bytes = 4194304\n")
        .start();
    // Key-value: three 1 MiB values fit in 4 MiB, the fourth does not.
    assert_eq!(s.get("/hostile/kv-fill?kib=1024").1, "stored 3 then Full");
    // Messages from a plugin are capped as a client's are (64 KiB by default).
    assert_eq!(
        s.get("/hostile/publish?topic=t&bytes=16777216").1,
        "error WsError::TooLarge"
    );
    assert_eq!(
        s.get("/hostile/publish?topic=t&bytes=65536").1,
        "published 0"
    );
    // The resource table: a leak of pollables stops at the cap, reported as such.
    let resp = get_within(&s, "/hostile/pollables?n=50000", PATIENCE);
    assert_eq!(resp.status, 500);
    let body = resp.text();
    assert!(
        body.starts_with("plugin `hostile` ran out of resource table entries (limit 10000)"),
        "{body}"
    );
    assert_eq!(body.lines().count(), 1, "{body}");
    assert_eq!(s.get("/hostile/pollables?n=10").1, "leaked 10");
}

// See: issue 11, item 4: the server-wide quota.
#[test]
fn issue11_4_the_server_wide_kv_quota_applies_without_a_policy() {
    let s = Options::default()
        .plugin(plugins::HOSTILE)
        .flag("--kv-max-bytes", 2 << 20)
        .start();
    assert_eq!(s.get("/hostile/kv-fill?kib=512").1, "stored 3 then Full");
}

// See: issue 11, item 5.
#[test]
fn issue11_5_a_slow_start_delays_neither_the_server_nor_another_plugin() {
    let started = Instant::now();
    let s = Options::default()
        .plugin(plugins::SLOWSTART)
        .file(
            "slowstart.toml",
            b"[capabilities]\nenv = [\"SLOW_START_MS=10000\"]\n",
        )
        .plugin(plugins::HELLO)
        .start();
    assert_eq!(s.get("/hello").1, "Hello, World!");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "ready after {:?}",
        started.elapsed()
    );
    assert_eq!(s.get("/slowstart").0, 404);
    // Another plugin loads while slowstart is still starting, without waiting for it.
    s.install("echo", plugins::ECHO);
    s.eventually("/echo/x", |status, _| status == 200);
    // And slowstart itself is mounted once it has started: after echo.
    let log = s.wait_for_log("mount=/slowstart");
    let (echo, slow) = (
        log.find("mount=/echo").unwrap(),
        log.find("mount=/slowstart").unwrap(),
    );
    assert!(echo < slow, "echo waited for slowstart:\n{log}");
    assert_eq!(s.get("/slowstart").1, "started");
}

// See: issue 11, item 5.
#[test]
fn issue11_5_start_code_runs_under_the_handler_timeout() {
    let s = Options::default()
        .plugin(plugins::SLOWSTART)
        .file(
            "slowstart.toml",
            b"[limits]\nhandler_timeout_ms = 500\n[capabilities]\nenv = [\"SLOW_START_MS=30000\"]\n",
        )
        .plugin(plugins::HELLO)
        .start();
    let log = s.wait_for_log("slowstart.wasm fails to instantiate");
    assert!(
        log.contains("exceeded its handler timeout of 500ms"),
        "{log}"
    );
    assert_eq!(s.get("/slowstart").0, 404);
    assert_eq!(s.get("/hello").0, 200);
}

// See: issue 11, item 6.
#[test]
fn issue11_6_reserved_close_codes_are_refused() {
    let s = Options::default().plugin(plugins::HOSTILE).start();
    let mut ws = client(&s, "/hostile/ws");
    for code in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
        send(&mut ws, &format!("close:{code}"));
        assert_eq!(
            text(&mut ws),
            format!("refused {code} WsError::Unsupported")
        );
    }
    send(&mut ws, "still open");
    assert_eq!(text(&mut ws), "still open");
    let (mut stream, mut reader) = raw(&s, "/hostile/ws");
    stream
        .write_all(&frame(FIN | 0x1, b"close:4000", true))
        .unwrap();
    assert_eq!(close_code(&mut reader), 4000);
}

// See: issue 11, item 7.
#[test]
fn issue11_7_a_policy_cannot_claim_another_plugins_route() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        // `aaa` sorts first and claims /hello; `hello` keeps its own name.
        .plugin_as("aaa", plugins::ECHO)
        .file("aaa.toml", b"routes = [\"/hello\", \"/aaa\"]\n")
        // Two fallbacks: index.wasm holds "", the claimant is refused.
        .plugin_as("index", plugins::PROBE)
        .plugin_as("fallback2", plugins::ECHO)
        .file("fallback2.toml", b"routes = [\"\"]\n")
        .start();
    assert_eq!(s.get("/hello").1, "Hello, World!");
    // Refused as a whole: its other route is not mounted either (the fallback answers).
    assert!(!s.get("/aaa").1.contains("\"mount\""));
    let log = s.wait_for_log("plugin `fallback2` is refused");
    assert!(
        log.contains(
            "plugin `aaa` is refused: its route /hello is already served by plugin `hello`"
        ),
        "{log}"
    );
    assert!(
        log.contains(
            "plugin `fallback2` is refused: its route / (fallback) is already served by plugin `index`"
        ),
        "{log}"
    );
    assert!(!s.get("/anything").1.contains("\"mount\""));
    // A reload of the holder keeps it the holder; a reload of the claimant is refused again.
    s.install("hello", plugins::HELLO);
    std::fs::write(
        s.plugins_dir().join("aaa.toml"),
        "routes = [\"/hello\"]\n# touched\n",
    )
    .unwrap();
    s.wait_for_log_count("plugin `aaa` is refused", 2);
    assert_eq!(s.get("/hello").1, "Hello, World!");
}

// See: issue 11, item 8.
#[test]
fn issue11_8_an_error_page_says_what_happened_in_one_line() {
    let s = Options::default().plugin(plugins::HOSTILE).start();
    // WASI 0.2's `exit` carries success or failure only: any non-zero code is status 1.
    let resp = get_within(&s, "/hostile/exit?code=3", PATIENCE);
    assert_eq!(resp.status, 500);
    let body = resp.text();
    assert!(
        body.starts_with("plugin `hostile` exited with status 1 (request "),
        "{body}"
    );
    assert_eq!(body.lines().count(), 1, "{body}");
    assert!(!body.contains("wasm"), "{body}");
    // The backtrace is in the log.
    s.wait_for_log("hostile.wasm!");
}

// See: issue 11, item 9.
#[test]
fn issue11_9_plugin_logs_cannot_forge_lines_and_are_capped() {
    let s = Options::default().plugin(plugins::HOSTILE).start();
    assert_eq!(s.get("/hostile/log-forge").1, "logged");
    let log = s.wait_for_log("with a field");
    assert!(
        !log.lines()
            .any(|l| l.contains("INFO ankh: forged line") && !l.contains("innocent")),
        "a plugin forged a log line:\n{log}"
    );
    assert!(log.contains("innocent\\n2026-12-01"), "{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED-FIELD-LINE")),
        "{log}"
    );
    assert!(!log.contains('\u{1b}'), "a terminal escape reached the log");
    let long = log
        .lines()
        .find(|l| l.contains("yyyyyyyy"))
        .expect("the long message is logged");
    assert!(
        long.contains("(truncated: 102400 bytes in all)"),
        "{}",
        &long[..200]
    );
    assert!(long.len() < 9 * 1024, "{} bytes", long.len());
}

// See: issue 11, item 9.
#[test]
fn issue11_9_a_warning_that_repeats_per_message_is_rate_limited() {
    let s = Options::default()
        .plugin(plugins::WSPROBE)
        .flag("--max-send-buffer-bytes", 256 * 1024)
        .start();
    // Three subscribers that never read, and a publisher that floods their topic.
    let mut sleepers = Vec::new();
    for _ in 0..3 {
        let (mut ws, _) = probe_client(&s);
        send(&mut ws, "sub:flood");
        assert_eq!(text(&mut ws), "subscribed true");
        sleepers.push(ws);
    }
    let (mut publisher, _) = probe_client(&s);
    let message = format!("pub:flood:{}", "z".repeat(60_000));
    for _ in 0..200 {
        send(&mut publisher, &message);
        assert!(text(&mut publisher).starts_with("published "));
    }
    s.wait_for_log("closing a WebSocket that does not read (1008)");
    let count = s
        .log()
        .matches("closing a WebSocket that does not read")
        .count();
    assert!((1..=3).contains(&count), "{count} lines:\n{}", s.log());
}

// See: issue 11, item 10.
#[test]
fn issue11_10_responses_follow_the_rfcs() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .plugin(plugins::HOSTILE)
        .plugin(plugins::WSPROBE)
        .start();
    for code in [600, 999] {
        let resp =
            s.request(format!("GET /probe/status/{code} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        assert_eq!(resp.status, 500, "status {code}");
    }
    let resp = s.request(b"GET /probe/status/205?body=nope HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 205);
    assert_eq!(resp.header("content-length"), Some("0"));
    for value in ["%01", "%1f", "%7f", "a%0Db"] {
        let resp = s.request(
            format!("GET /hostile/header?value={value} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes(),
        );
        assert_eq!(resp.status, 500, "{value}: {}", resp.text());
    }
    let resp = s.request(b"GET /hostile/header?value=tab%09ok HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.header("x-hostile"), Some("tab\tok"));
    // A 101 whose plugin headers are invalid is refused like any response.
    let upgrade = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let resp = s.request(
        format!("GET /hostile/bad-upgrade HTTP/1.1\r\nHost: a\r\n{upgrade}\r\n").as_bytes(),
    );
    assert_eq!(resp.status, 500);
    // No WebSocket over HTTP/1.0.
    let reply = s.raw(format!("GET /wsprobe/ HTTP/1.0\r\n{upgrade}\r\n").as_bytes());
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
    // No `100 Continue` for an HTTP/1.0 client: it answers the final response only.
    let mut c = s.connect();
    c.write_all(b"POST /probe/inc HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n")
        .unwrap();
    c.write_all(b"{\"val\":1}").unwrap();
    let mut reply = String::new();
    c.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 "), "{reply}");
    assert!(!reply.contains("100 Continue"), "{reply}");
}

// See: issue 11, item 11.
#[test]
fn issue11_11_requests_are_checked_and_normalised_before_routing() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .plugin(plugins::ECHO)
        .plugin(plugins::PROBE)
        .start();
    for head in [
        "GET /hello HTTP/1.1\r\nHost: \r\n",
        "GET /hello HTTP/1.1\r\nHost: a b\r\n",
        "GET /hello HTTP/1.1\r\nHost: user@a\r\n",
        "GET /hello#frag HTTP/1.1\r\nHost: a\r\n",
        "GET /hell\u{f6} HTTP/1.1\r\nHost: a\r\n",
        "GET http://user@a/hello HTTP/1.1\r\nHost: a\r\n",
    ] {
        let reply = s.raw(format!("{head}\r\n").as_bytes());
        assert!(reply.starts_with("HTTP/1.1 400 "), "{head:?}: {reply}");
    }
    let reply = s.raw(
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
    // The absolute form's authority is the host the plugin sees.
    let resp = s.request(b"GET http://example.org:81/echo/x HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 200);
    assert!(resp.text().contains("example.org:81"), "{}", resp.text());
    // OPTIONS * is the server's to answer.
    let resp = s.request(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 200);
    assert!(resp.header("allow").unwrap().contains("GET"), "{resp:?}");
    assert_eq!(resp.header("content-length"), Some("0"));
    // Dot segments are resolved before routing: what a normalising proxy would route to
    // /hello is served by hello, and the plugin sees the clean path.
    for target in ["/probe/../hello", "/probe/%2e%2E/hello", "/./hello/."] {
        let resp = s.request(format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        assert_eq!(resp.text(), "Hello, World!", "{target}");
    }
    let resp = s.request(b"GET /echo/a/../b HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(
        resp.text().contains("\"path\":\"/echo/b\""),
        "{}",
        resp.text()
    );
}

// See: issue 11, item 12.
#[test]
fn issue11_12_policies_are_bounded_and_odd_files_are_reported() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .plugin_as("outside", plugins::PROBE)
        .file(
            "outside.toml",
            b"[capabilities]\ndirs = [{ host = \"../..\", guest = \"/up\" }]\n",
        )
        .start();
    let log = s.wait_for_log("outside.toml:2: capabilities.dirs");
    assert!(log.contains("outside the plugins directory"), "{log}");
    assert_eq!(s.get("/outside/ok").0, 404);
    std::fs::copy(plugins::HELLO, s.plugins_dir().join("bad name.wasm")).unwrap();
    let log = s.wait_for_log("ignored: a plugin file name may only use");
    assert!(log.contains("bad name.wasm"), "{log}");
}

// See: issue 11, item 13.
#[test]
fn issue11_13_clocks_are_coarse_unless_the_policy_asks() {
    let step = |body: &str, key: &str| -> u64 {
        body.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {body}"))
    };
    let s = Options::default().plugin(plugins::HOSTILE).start();
    let body = s.get("/hostile/clock").1;
    assert!(step(&body, "monotonic_step=") >= 100_000, "{body}");
    assert!(step(&body, "wall_step=") >= 100_000, "{body}");
    let s = Options::default()
        .plugin(plugins::HOSTILE)
        .file("hostile.toml", b"[capabilities]\nprecise_clocks = true\n")
        .start();
    let body = s.get("/hostile/clock").1;
    assert!(step(&body, "monotonic_step=") < 100_000, "{body}");
}
