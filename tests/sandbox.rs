//! Fault containment: traps, runaway loops, memory bombs and stack overflows stay inside their
//! instance (A61-A64), bad plugin files are refused (A67), and a full queue answers 503 (A72).

use std::io::Write;
use std::time::Duration;

use crate::harness::{Options, TestServer, plugins, read_response};

fn one_worker(extra: &[&str]) -> TestServer {
    let mut o = Options::default()
        .plugin(plugins::TRAP)
        .plugin(plugins::SPIN)
        .plugin(plugins::ALLOC)
        .plugin(plugins::STACK)
        .plugin(plugins::HELLO)
        .arg("--workers")
        .arg("1");
    for a in extra {
        o = o.arg(a);
    }
    o.start()
}

#[test]
fn a61_a_trap_answers_500_and_the_next_request_gets_a_fresh_instance() {
    let s = one_worker(&[]);
    assert_eq!(s.get("/trap/ok").1, "ok 1");
    assert_eq!(s.get("/trap/ok").1, "ok 2");
    let resp = s.request(b"GET /trap/panic HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 500);
    let body = resp.text();
    assert!(body.contains("plugin `trap`"), "{body}");
    let id = body
        .split("request ")
        .nth(1)
        .and_then(|r| r.get(..16))
        .expect("the body names the request id");
    let log = s.wait_for_log("instance discarded");
    // The log line names the plugin and the request, and carries the symbolized backtrace.
    let line = log
        .lines()
        .find(|l| l.contains("instance discarded"))
        .unwrap();
    assert!(
        line.contains("plugin `trap`") && line.contains(id),
        "{line}"
    );
    assert!(
        log.contains("boom: trap plugin panicked on purpose"),
        "{log}"
    );
    assert!(
        log.contains("trap.wasm!"),
        "no symbolized wasm frames:\n{log}"
    );
    // A fresh instance: its request counter starts again.
    assert_eq!(s.get("/trap/ok").1, "ok 1");
    let resp = s.request(b"GET /trap/unreachable HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 500);
    assert_eq!(s.get("/trap/ok").1, "ok 1");
}

#[test]
fn a62_a_runaway_loop_is_stopped_at_its_deadline() {
    let s = Options::default()
        .plugin(plugins::SPIN)
        .plugin(plugins::HELLO)
        .arg("--workers")
        .arg("2")
        .arg("--cpu-deadline-ms")
        .arg("300")
        .start();
    let addr = s.addr;
    let looping = std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(crate::harness::PATIENCE))
            .unwrap();
        stream
            .write_all(b"GET /spin/loop HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        read_response(&mut std::io::BufReader::new(stream), false)
    });
    // Meanwhile the other worker keeps serving.
    for _ in 0..20 {
        assert_eq!(s.get("/hello").1, "Hello, World!");
    }
    let resp = looping.join().unwrap();
    assert_eq!(resp.status, 504);
    assert!(resp.text().contains("CPU deadline"), "{}", resp.text());
    // Both workers are free again.
    assert_eq!(s.get("/spin/ok").1, "ok 1");
    assert_eq!(s.get("/spin/ok").0, 200);
    assert_eq!(s.get("/hello").0, 200);
}

/// The epoch ticker rests on an idle server; a runaway loop that starts then is stopped at
/// its deadline all the same (the call's start wakes the ticker), and the deadline is longer
/// than the ticker's quiet second, so it also shows that the ticker does not rest under a
/// guest that computes.
#[test]
fn a62_a_runaway_loop_is_stopped_after_the_server_was_idle() {
    let s = Options::default()
        .plugin(plugins::SPIN)
        .arg("--cpu-deadline-ms")
        .arg("2500")
        .rust_log(Some("info,ankh::runtime::engine::ticker=debug"))
        .start();
    s.wait_for_log("epoch ticker: no guest ran for");
    let resp = s.request(b"GET /spin/loop HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 504);
    assert!(resp.text().contains("CPU deadline"), "{}", resp.text());
    assert_eq!(s.get("/spin/ok").1, "ok 1");
}

#[test]
fn a63_a_memory_bomb_is_stopped_at_its_cap() {
    let s = one_worker(&["--memory-limit-mib", "32"]);
    for _ in 0..5 {
        let resp = s.request(b"GET /alloc/bomb HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(resp.status, 500);
        assert!(resp.text().contains("memory cap"), "{}", resp.text());
        assert_eq!(s.get("/hello").1, "Hello, World!");
        assert_eq!(s.get("/alloc/ok").1, "ok 1");
    }
    // Five bombs of 32 MiB each did not accumulate in the host.
    let rss = s.rss_kib();
    assert!(rss < 400 * 1024, "host RSS grew to {rss} KiB");
}

#[test]
fn a64_stack_overflow_is_contained() {
    let s = one_worker(&[]);
    assert_eq!(s.get("/stack/ok").1, "ok 1");
    let resp = s.request(b"GET /stack/overflow HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 500);
    assert!(resp.text().contains("plugin `stack`"), "{}", resp.text());
    assert_eq!(s.get("/stack/ok").1, "ok 1");
}

#[test]
fn a65_faults_mixed_into_normal_traffic_never_hurt_it() {
    let s = Options::default()
        .plugin(plugins::TRAP)
        .plugin(plugins::ALLOC)
        .plugin(plugins::STACK)
        .plugin(plugins::HELLO)
        .arg("--workers")
        .arg("4")
        .arg("--memory-limit-mib")
        .arg("32")
        .start();
    let bad = ["/trap/panic", "/alloc/bomb", "/stack/overflow"];
    for i in 0..300 {
        if i % 10 == 9 {
            let target = bad[(i / 10) % bad.len()];
            assert_eq!(s.get(target).0, 500, "{target}");
        } else {
            assert_eq!(
                s.get("/hello"),
                (200, "Hello, World!".to_owned()),
                "request {i}"
            );
        }
    }
}

#[test]
fn a67_bad_plugin_files_are_refused_and_the_rest_served() {
    let hello = std::fs::read(plugins::HELLO).unwrap();
    let s = Options::default()
        .plugin(plugins::HELLO)
        .file("junk.wasm", b"this is not wasm at all")
        .file("core.wasm", b"\0asm\x01\0\0\0")
        .file("truncated.wasm", &hello[..hello.len() / 2])
        .plugin(plugins::NOWORLD)
        .start();
    let log = s.log();
    assert!(log.contains("junk.wasm is not a WebAssembly file"), "{log}");
    assert!(
        log.contains("core.wasm is a core WebAssembly module, not a component"),
        "{log}"
    );
    assert!(log.contains("truncated.wasm does not compile"), "{log}");
    assert!(
        log.contains("noworld.wasm does not match the ankh:plugin@0.3.0 world")
            && log.contains("ankh:plugin/handler@0.3.0"),
        "{log}"
    );
    assert_eq!(s.get("/hello").1, "Hello, World!");
    assert_eq!(s.get("/junk").0, 404);
}

#[test]
fn a72_a_full_queue_answers_503_with_retry_after_and_recovers() {
    // A sleeping call holds no thread, so what fills the queue is the cap on calls in flight.
    let s = Options::default()
        .plugin(plugins::PROBE)
        .arg("--workers")
        .arg("1")
        .arg("--max-calls")
        .arg("1")
        // The plugin's share above the total, so that the total and the queue are what bind.
        .arg("--max-concurrency")
        .arg("64")
        .arg("--queue-depth")
        .arg("1")
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = crate::metrics::admin_addr(&s);
    let send = || {
        let mut stream = s.connect();
        stream
            .write_all(b"GET /probe/sleep?ms=1500 HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        stream
    };
    // One request takes the one call slot (observed), one fills the queue (observed); the
    // rest are turned away at once.
    let mut streams = vec![send()];
    s.wait_for_log("sleeping 1500");
    streams.push(send());
    let started = std::time::Instant::now();
    while crate::metrics::value(&crate::metrics::scrape(admin), "ankh_queue_depth", &[]) < 1.0 {
        assert!(
            started.elapsed() < crate::harness::PATIENCE,
            "nothing queued"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    streams.push(send());
    streams.push(send());
    let responses: Vec<_> = streams
        .into_iter()
        .map(|s| read_response(&mut std::io::BufReader::new(s), false))
        .collect();
    let busy: Vec<_> = responses.iter().filter(|r| r.status == 503).collect();
    let served = responses.iter().filter(|r| r.status == 200).count();
    assert_eq!((busy.len(), served), (2, 2), "{responses:?}");
    for r in busy {
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    // Load is gone: served again.
    assert_eq!(s.get("/probe/status/200?body=back").1, "back");
}

#[test]
fn plugins_get_no_filesystem_network_or_environment_by_default() {
    let s = Options::default().plugin(plugins::PROBE).start();
    // The host has PATH and HOME; the plugin sees neither.
    assert_eq!(s.get("/probe/env?name=PATH").1, "absent");
    assert_eq!(s.get("/probe/env?name=HOME").1, "absent");
    let (status, body) = s.get("/probe/file?path=/etc/passwd");
    assert_eq!(status, 200);
    assert!(body.starts_with("error"), "{body}");
    let (_, body) = s.get("/probe/file?path=Cargo.toml");
    assert!(body.starts_with("error"), "{body}");
    // Not even loopback, where this very server listens.
    let (_, body) = s.get(&format!("/probe/connect?addr={}", s.addr));
    assert!(body.starts_with("error"), "{body}");
    assert_eq!(s.get("/probe/status/200?body=fine").1, "fine");
}

// See: issue 12, item 11. Before: after large requests every worker's instance kept its peak
// memory for the life of the process.
#[test]
fn issue12_11_an_instance_whose_memory_grew_is_replaced_after_its_call() {
    use crate::metrics::{admin_addr, scrape, value};
    let s = Options::default()
        .plugin(plugins::ECHO)
        .flag("--workers", 1)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let memory = || {
        value(
            &scrape(admin),
            "ankh_plugin_instance_memory_bytes",
            &[("plugin", "echo")],
        )
    };
    assert_eq!(s.get("/echo/small").0, 200);
    let start = memory();
    assert!(start > 0.0);
    // A 12 MiB body, copied into the guest, grows its memory past the 8 MiB recycle bound
    // (echo shows only the body's first 64 KiB, so the body alone must do it).
    let body = vec![b'x'; 12 << 20];
    let mut c = s.connect();
    c.write_all(
        format!(
            "POST /echo/big HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(&body).unwrap();
    let resp = read_response(&mut std::io::BufReader::new(c), false);
    assert_eq!(resp.status, 200);
    let recycled = value(
        &scrape(admin),
        "ankh_plugin_memory_recycles_total",
        &[("plugin", "echo")],
    );
    assert_eq!(recycled, 1.0);
    assert!(memory() <= start, "{} > {start}", memory());
    // The next request gets a fresh, small instance.
    assert_eq!(s.get("/echo/small").0, 200);
    assert!(memory() <= start + 1_048_576.0, "{} vs {start}", memory());
}
