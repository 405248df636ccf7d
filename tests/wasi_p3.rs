//! WASI 0.3 components (`wasi:http/handler@0.3`, the `service` world) served by ankh
//! (issue 35), none written with the ankh SDK, each built from source by its toolchain:
//! - `p3spin`: Rust with the Spin SDK's `#[http_service]` (spin-sdk 7, as Spin 4's template);
//! - `p3raw`: Rust with the `wasip3` bindings crate alone (wit-bindgen's async exports), built
//!   against WASI 0.3.2's WIT: a later patch version than the host's 0.3.0;
//! - `pyp3`: Python with componentize-py (`tests/components/py-p3`, its asyncio bindings).
//!
//! Each answers a corpus as it does under `wasmtime serve` 49, side by side in the same run;
//! their instances serve many requests, several at once; a trap retires one; the server
//! setting `wasi_p3` turns them off.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;

use crate::harness::{Options, TestServer, plugins};
use crate::metrics::{admin_addr, scrape, value, wait_metric};
use crate::upstream::{Mode, Upstream};
use crate::wasi_http::{Answer, Case, KIB, MIB, bytes, case, repeated, send, wasmtime_49};
use crate::wasmtime_serve::WasmtimeServe;

/// The 0.3 components: name and file.
fn components() -> Vec<(&'static str, String)> {
    let mut all = vec![
        ("p3spin", plugins::P3SPIN.to_owned()),
        ("p3raw", plugins::P3RAW.to_owned()),
    ];
    if let Some(python) = crate::wasi_http::pyp3() {
        all.push(("pyp3", python.display().to_string()));
    }
    all
}

/// What every 0.3 component is asked: its root, HEAD, 404s, repeated headers, bodies of 0 B
/// to 16 MiB, statuses, a large body, trailers, a body streamed over time, an outbound call.
fn corpus(upstream: &str) -> Vec<Case> {
    let mut cases = vec![
        case("root", "GET", "/"),
        case("head-root", "HEAD", "/"),
        case("not-found", "GET", "/no/such/path"),
        case("head-not-found", "HEAD", "/no/such/path"),
        repeated(case("headers-repeated", "GET", "/headers")),
        case("headers-latin1", "GET", "/headers").header("x-latin", b"caf\xe9"),
    ];
    for (label, len) in [("0", 0), ("1k", KIB), ("1m", MIB), ("16m", 16 * MIB)] {
        cases.push(case(&format!("post-{label}"), "POST", "/echo?x=1").body(bytes(len)));
    }
    cases.extend([
        case("put-text", "PUT", "/echo")
            .header("content-type", b"text/plain")
            .body(b"put".to_vec()),
        case("echo-delete", "DELETE", "/echo"),
        case("status-201", "GET", "/status?code=201"),
        case("status-204", "GET", "/status?code=204"),
        case("status-418", "GET", "/status?code=418"),
        case("big-1m", "GET", &format!("/big?bytes={MIB}")),
        case("big-16m", "GET", &format!("/big?bytes={}", 16 * MIB)),
        case("head-big", "HEAD", "/big?bytes=1024"),
        // hyper sends trailers only to a client that asks for them; ankh to every HTTP/1.1
        // client: this one asks.
        case("trailers", "GET", "/trailers").header("te", b"trailers"),
        case("stream", "GET", "/stream?n=5&ms=5"),
        case("fetch", "GET", &format!("/fetch?url={upstream}/from-p3")),
    ]);
    cases
}

/// A 0.3 component answers as under `wasmtime serve` 49, case by case.
#[test]
fn components_answer_as_they_do_under_wasmtime_serve() {
    let Some(wasmtime) = wasmtime_49() else {
        return;
    };
    let upstream = Upstream::start(Mode::Hello);
    let mut compared = 0;
    for (name, wasm) in components() {
        let s = Options::default()
            .flag("--max-body-bytes", 32 * MIB)
            .plugin_as(name, &wasm)
            .file(
                &format!("{name}.toml"),
                format!("[capabilities]\nhttp = [\"{}\"]\n", upstream.origin()).as_bytes(),
            )
            .start();
        let serve = WasmtimeServe::start(&wasmtime, Path::new(&wasm));
        let cases = corpus(&upstream.origin());
        assert!(cases.len() >= 20, "{name}: {} cases", cases.len());
        for case in &cases {
            let under_ankh = send(s.addr, &format!("/{name}"), case);
            let under_serve = send(serve.addr, "", case);
            assert!(
                under_ankh == under_serve,
                "{name}: {} answers otherwise under ankh than under wasmtime serve\nankh:  {}\nserve: {}\n{}",
                case.name,
                summary(&under_ankh),
                summary(&under_serve),
                s.log()
            );
            compared += 1;
            if case.name == "fetch" {
                // Equal under both servers is not enough: the upstream's body came through.
                let body = String::from_utf8_lossy(&under_ankh.body);
                assert!(
                    body.starts_with("fetched 200: ") && body.len() > "fetched 200: ".len(),
                    "{name}: {body:?}"
                );
            }
        }
        // Through ankh's pipeline: the access log has its lines.
        s.wait_for_log(&format!("plugin={name}"));
    }
    eprintln!("{compared} answers of 0.3 components compared with wasmtime serve");
}

/// An answer, short enough for a failure message.
fn summary(a: &Answer) -> String {
    let shown = &a.body[..a.body.len().min(200)];
    format!(
        "{} {:?} {} bytes: {:?}",
        a.status,
        a.headers,
        a.body.len(),
        String::from_utf8_lossy(shown)
    )
}

/// `name`'s figure `metric` on `s`'s admin endpoint.
fn figure(s: &TestServer, metric: &str, name: &str) -> f64 {
    value(&scrape(admin_addr(s)), metric, &[("plugin", name)])
}

/// Reuse as the peers do it: 1,000 requests make at most 8 instances (128 each), each
/// instance counts the requests it served; a trap retires its instance (its request gets a
/// 500) and the next request gets a new one.
#[test]
fn instances_serve_many_requests_and_a_trap_retires_one() {
    let s = Options::default()
        .plugin(plugins::P3SPIN)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let mut last = 0;
    let mut restarts = 0;
    let mut conn = BufReader::new(s.connect());
    for _ in 0..1000 {
        conn.get_mut()
            .write_all(b"GET /p3spin/count HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let r = crate::harness::read_response(&mut conn, false);
        assert_eq!(r.status, 200, "{}", r.text());
        let n: u64 = r.text().trim().parse().unwrap();
        if n <= last {
            restarts += 1;
        }
        last = n;
    }
    let created = figure(&s, "ankh_plugin_instances_created_total", "p3spin");
    // The trial instantiation at load is not one of its serving instances.
    assert!(
        created <= 8.0,
        "{created} instances for 1,000 requests ({restarts} restarts seen)"
    );
    assert!(restarts <= 8, "{restarts}");

    assert_eq!(s.get("/p3spin/trap").0, 500);
    s.wait_for_log("instance retired");
    let (status, count) = s.get("/p3spin/count");
    assert_eq!((status, count.as_str()), (200, "1\n"), "a new instance");
    assert_eq!(
        figure(&s, "ankh_plugin_instances_created_total", "p3spin"),
        created + 1.0
    );
}

/// Several requests at once on one instance, and `instances.concurrent` bounds how many.
///
/// wasmtime-wasi-http hands a request to an instance only while its guest waits (one that
/// computes takes none, so CPU-bound requests spread over instances), so the test sends each
/// request once the ones before it wait: 16 streams, each sent once the one before has
/// written its first line and sleeps, share one instance (a few, if one arrives in the moment
/// its guest computes). Then 8 requests that each sleep 5 s, with 4 at once per instance,
/// need a second instance.
#[test]
fn an_instance_serves_requests_at_once() {
    let s = Options::default()
        .plugin(plugins::P3SPIN)
        .file("p3spin.toml", b"[instances]\nconcurrent = 16\n")
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let mut open = Vec::new();
    for _ in 0..16 {
        let mut c = s.connect();
        c.write_all(b"GET /p3spin/stream?n=2&ms=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(c);
        let mut line = String::new();
        while line != "tick 1\n" {
            line.clear();
            assert_ne!(
                r.read_line(&mut line).unwrap(),
                0,
                "closed before its first line"
            );
        }
        open.push(r);
    }
    let created = figure(&s, "ankh_plugin_instances_created_total", "p3spin");
    assert!(
        (1.0..=4.0).contains(&created),
        "{created} instances for 16 streams open at once"
    );
    drop(open);

    let s = Options::default()
        .plugin(plugins::P3SPIN)
        .file("p3spin.toml", b"[instances]\nconcurrent = 4\n")
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let conns: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(b"GET /p3spin/sleep?ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            c
        })
        .collect();
    // The first instance takes 4; the others wait for no more than another instance.
    wait_metric(
        admin_addr(&s),
        "ankh_plugin_instances_created_total",
        &[("plugin", "p3spin")],
        |n| n >= 2.0,
    );
    for c in conns {
        let answer = crate::harness::read_response(&mut BufReader::new(c), false);
        assert_eq!(answer.status, 200);
    }
}

/// `ankh check` names the world and its version; with `wasi_p3` off a 0.3 component is refused
/// with a message that names the setting, and the others are served.
#[test]
fn check_names_the_world_and_the_setting_turns_it_off() {
    let out = std::process::Command::new(crate::harness::ankh_bin())
        .args(["check", plugins::P3SPIN])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("world:    wasi:http/service@0.3.0"), "{text}");
    // Its interfaces, as the engine that runs it reads them.
    assert!(text.contains("  wasi:http/handler@0.3.0\n"), "{text}");
    assert!(text.contains("  wasi:http/types@0.3.0\n"), "{text}");

    let s = Options::default()
        .plugin(plugins::P3SPIN)
        .plugin(plugins::HTTPECHO)
        .arg("--no-wasi-p3")
        .start();
    let log = s.wait_for_log("WASI 0.3 support is off");
    assert!(log.contains("--no-wasi-p3"), "{log}");
    assert_eq!(s.get("/p3spin/").0, 404);
    assert_eq!(s.get("/httpecho/").0, 200);
}

/// A body the component writes over time reaches the client piece by piece: the first line
/// arrives while the component still sleeps before the next.
#[test]
fn a_streamed_body_leaves_as_it_is_written() {
    let s = Options::default().plugin(plugins::P3SPIN).start();
    let mut c = s.connect();
    c.write_all(b"GET /p3spin/stream?n=3&ms=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let mut chunked = false;
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        chunked |= line.eq_ignore_ascii_case("transfer-encoding: chunked\r\n");
        if line == "\r\n" {
            break;
        }
    }
    assert!(chunked, "a body of unknown length is chunked");
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "7\r\n");
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "tick 1\n");
}

// Hostile 0.3 guests (`p3hostile`): what the component model's streams, futures and tasks
// let a guest ask the host to hold, each held by a named limit.

/// A server for `p3hostile` with the admin endpoint and room for large bodies.
fn hostile_options() -> Options {
    Options::default()
        .plugin(plugins::P3HOSTILE)
        .flag("--max-body-bytes", 128 * MIB)
        .arg("--admin")
        .arg("127.0.0.1:0")
}

/// The same, with short stream and handler limits.
fn hostile() -> TestServer {
    hostile_options()
        .flag("--stream-idle-timeout-ms", 500)
        .flag("--handler-timeout-ms", 1000)
        .start()
}

/// CPU time of a 0.3 component (issue 36, point 4): its guest runs in wasmtime's event loop,
/// not in ankh's calls, and is measured there on the thread's CPU clock. A guest that waits
/// costs next to nothing; one that computes is charged what it computed (across the epoch
/// yields of a long computation), and its policy's `cpu_ms_per_minute` refuses it with 503
/// and Retry-After once spent.
#[test]
fn a_components_cpu_time_is_measured_and_capped() {
    let s = hostile_options()
        .file("p3hostile.toml", b"[limits]\ncpu_ms_per_minute = 400\n")
        .start();
    let cpu = || figure(&s, "ankh_plugin_cpu_seconds_total", "p3hostile");
    assert_eq!(s.get("/p3hostile/sleep?ms=300").1, "slept\n");
    let slept = cpu();
    assert!(slept < 0.1, "a 300 ms wait was charged {slept} s");

    // One computation of 400 ms spans some 40 epoch ticks, at each of which it yields. What
    // it is charged is set beside what the whole server process used meanwhile (the machine
    // may be busy, so wall time says little): most of it, and not more.
    let before = s.cpu_ticks();
    let (status, body) = s.get("/p3hostile/burn?ms=400");
    assert_eq!(status, 200, "{body}");
    let process = (s.cpu_ticks() - before) as f64 / 100.0;
    let burned = cpu() - slept;
    assert!(
        burned >= 0.1 && burned >= process * 0.6 && burned <= process + 0.05,
        "400 ms of computing was charged {burned} s; the process used {process} s"
    );

    let refused = s.until_refused(
        b"GET /p3hostile/burn?ms=150 HTTP/1.1\r\nHost: a\r\n\r\n",
        20,
    );
    let used = cpu();
    assert!(
        used >= 0.4,
        "refused after {used} s of CPU; the allowance is 0.4 s"
    );
    assert!(refused.header("retry-after").is_some(), "no Retry-After");
    assert!(
        refused.text().contains("limits.cpu_ms_per_minute"),
        "{}",
        refused.text()
    );
}

/// Sends `GET path` on a new connection and reads until the server closes it: what came,
/// and how long it took.
fn until_closed(s: &TestServer, path: &str, extra: &str) -> (String, std::time::Duration) {
    let mut c = s.connect();
    let started = std::time::Instant::now();
    c.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let got = crate::harness::read_to_close(&mut c);
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

/// A body stream never written again and never closed, and a `trailers` future never
/// resolved: each response is cut at the stream idle limit (`stream_idle_timeout_ms`), the
/// client sees it incomplete, and no stream stays open.
#[test]
fn a_stream_or_future_the_guest_never_ends_is_cut_at_the_idle_limit() {
    let s = hostile();
    for (path, extra, seen) in [
        ("/p3hostile/hold-body", "", "first\n"),
        (
            "/p3hostile/hold-trailers",
            "TE: trailers\r\n",
            "whole body\n",
        ),
    ] {
        let (got, took) = until_closed(&s, path, extra);
        eprintln!("{path}: cut {took:?} after the request (idle limit 500 ms)");
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.contains(seen), "{got}");
        assert!(
            !got.ends_with("0\r\n\r\n"),
            "an unfinished body ends cut: {got:?}"
        );
        assert!(took >= std::time::Duration::from_millis(500), "{took:?}");
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }
    // The stream's count drops as its call ends, just after the connection closed.
    wait_metric(
        admin_addr(&s),
        "ankh_plugin_streams_open",
        &[("plugin", "p3hostile")],
        |v| v == 0.0,
    );
    assert_eq!(s.get("/p3hostile/ignore-body").1, "ignored\n");
}

/// A `handle` that never returns: 504 at the handler timeout, and the instance still serves.
#[test]
fn a_handler_future_never_resolved_gets_504_at_the_handler_timeout() {
    let s = hostile();
    let started = std::time::Instant::now();
    let (status, _) = s.get("/p3hostile/never");
    let took = started.elapsed();
    eprintln!("/never: {status} after {took:?} (handler timeout 1 s)");
    assert_eq!(status, 504);
    assert!(took >= std::time::Duration::from_secs(1), "{took:?}");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    assert_eq!(s.get("/p3hostile/ignore-body").1, "ignored\n");
}

/// Tasks without bound, each waiting in the host: 10,000 are fine; a guest that starts them
/// until something stops it is stopped by a named limit (its memory cap, or its resource
/// table's entries) with a 500, the host's memory growing by a bounded amount, and the next
/// request is served.
#[test]
fn unbounded_concurrent_tasks_end_at_a_limit() {
    let s = hostile();
    let before = s.rss_kib();
    let (status, body) = s.get("/p3hostile/tasks?n=10000");
    assert_eq!((status, body.as_str()), (200, "started 10000 tasks\n"));
    let ten_thousand = s.rss_kib().saturating_sub(before);
    let started = std::time::Instant::now();
    let (status, body) = s.get("/p3hostile/tasks?n=0");
    let grown = s.rss_kib().saturating_sub(before);
    eprintln!(
        "10,000 waiting tasks: resident memory +{ten_thousand} KiB; tasks without bound: {status} \
         after {:?}, resident memory +{grown} KiB",
        started.elapsed()
    );
    assert_eq!(status, 500, "{body}");
    let log = s.wait_for_log("instance retired");
    eprintln!("{log}");
    assert!(
        log.contains("memory") || log.contains("table") || log.contains("capacity"),
        "a named limit: {log}"
    );
    assert!(grown <= 256 * 1024, "resident memory grew by {grown} KiB");
    assert_eq!(s.get("/p3hostile/ignore-body").1, "ignored\n");
}

/// One-call reads and writes as large as the guest's memory allows: the host moves them in
/// pieces of its own size, so its memory grows by little more than the guest's own buffer.
#[test]
fn a_huge_read_or_write_is_moved_in_bounded_pieces() {
    // Generous time limits, not `hostile`'s second: what is measured is memory, and on a
    // loaded machine (a debug build, CI with other tests beside it) the 48 MiB write ran
    // past a second of the instance's CPU deadline, and was interrupted.
    let s = hostile_options()
        .flag("--handler-timeout-ms", 30_000)
        .flag("--cpu-deadline-ms", 30_000)
        .start();
    // A 48 MiB write to a client that reads nothing yet.
    let before = s.rss_kib();
    let mut c = s.connect();
    c.write_all(b"GET /p3hostile/huge-write?mib=48 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let admin = admin_addr(&s);
    wait_metric(
        admin,
        "ankh_plugin_streams_open",
        &[("plugin", "p3hostile")],
        |v| v >= 1.0,
    );
    let mut peak = s.rss_kib();
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        peak = peak.max(s.rss_kib());
    }
    let write_grown = peak.saturating_sub(before);
    let mut r = BufReader::new(c);
    let answer = crate::harness::read_response(&mut r, false);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body.len(), 48 * MIB);
    assert!(answer.body.iter().all(|&b| b == b'w'));

    // Reads of 48 MiB each of a 4 MiB body, four requests in turn on one instance (at once
    // they would need four such buffers, past its 64 MiB memory cap).
    let before = s.rss_kib();
    for _ in 0..4 {
        let mut c = s.connect();
        let mut request = format!(
            "POST /p3hostile/huge-read?mib=48 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            4 * MIB
        )
        .into_bytes();
        request.extend(bytes(4 * MIB));
        c.write_all(&request).unwrap();
        let answer = crate::harness::read_response(&mut BufReader::new(c), false);
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.text(), format!("read {}\n", 4 * MIB));
    }
    let read_grown = s.rss_kib().saturating_sub(before);
    eprintln!(
        "one 48 MiB write, client not reading: resident memory +{write_grown} KiB; \
         4 requests reading 4 MiB in 48 MiB reads: +{read_grown} KiB"
    );
    // The guest's own 48 MiB buffer, plus pieces: not a second copy of it.
    assert!(write_grown <= 80 * 1024, "{write_grown} KiB");
    assert!(read_grown <= 96 * 1024, "{read_grown} KiB");
}

/// A component that answers without reading its request's body: the client gets the answer,
/// the host holds a bounded part of a 64 MiB upload, and the connection is closed or drained.
#[test]
fn a_request_body_never_read_is_not_buffered() {
    let s = hostile();
    let before = s.rss_kib();
    let c = s.connect();
    let mut writer = c.try_clone().unwrap();
    let upload = std::thread::spawn(move || {
        let _ = writer.write_all(
            format!(
                "POST /p3hostile/ignore-body HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                64 * MIB
            )
            .as_bytes(),
        );
        let piece = vec![b'u'; MIB];
        let mut sent = 0;
        for _ in 0..64 {
            if writer.write_all(&piece).is_err() {
                break;
            }
            sent += MIB;
        }
        sent
    });
    let answer = crate::harness::read_response(&mut BufReader::new(c), false);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), "ignored\n");
    let sent = upload.join().unwrap();
    let grown = s.rss_kib().saturating_sub(before);
    eprintln!("an unread 64 MiB upload: {sent} bytes taken, resident memory +{grown} KiB");
    assert!(grown <= 16 * 1024, "{grown} KiB");
    assert_eq!(s.get("/p3hostile/ignore-body").1, "ignored\n");
}

/// Hot reload under load: two 0.3 components swapped in turn twenty times while clients send
/// requests (some of them sleeping across a swap) lose no request; each version's requests
/// are answered by that version, and the old versions' instances go.
#[test]
fn replacing_a_component_under_load_loses_no_request() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let spin = |status: u16, body: &str| status == 200 && body.contains("(spin-sdk)");
    let raw = |status: u16, body: &str| status == 200 && body.contains("(wasip3 bindings)");
    let s = Options::default()
        .plugin_as("v", plugins::P3SPIN)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = ["/v/", "/v/sleep?ms=50"]
        .into_iter()
        .map(|path| {
            let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
            let url = s.url(path);
            std::thread::spawn(move || {
                let agent = crate::harness::agent();
                while !stop.load(Ordering::Relaxed) {
                    match agent.get(&url).call() {
                        Ok(mut resp) => {
                            let status = resp.status().as_u16();
                            let body = resp.body_mut().read_to_string().unwrap_or_default();
                            if status == 200 {
                                answered.fetch_add(1, Ordering::Relaxed);
                            } else {
                                eprintln!("unexpected answer: {status} {body}");
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            eprintln!("request failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for i in 0..20 {
        if i % 2 == 0 {
            s.install("v", plugins::P3RAW);
            s.eventually("/v/", raw);
        } else {
            s.install("v", plugins::P3SPIN);
            s.eventually("/v/", spin);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let answered = answered.load(Ordering::Relaxed);
    eprintln!("20 replacements under load: {answered} requests answered");
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert!(answered >= 40, "{answered}");
    s.wait_for_log_count("replaced in", 20);
    // The replaced versions' idle instances go at once: at most the current version's remain.
    wait_metric(
        admin_addr(&s),
        "ankh_plugin_instances",
        &[("plugin", "v")],
        |v| v <= 2.0,
    );
}
