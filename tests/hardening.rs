//! Hostile and broken clients: slow heads and bodies (A22), idle connections (A23), the
//! connection cap and running out of file descriptors (A24), clients that never read (A25),
//! graceful drain (A59) and readiness (A60), plus load and fault runs: a thousand slow-loris
//! connections, ten thousand abandoned exchanges, and a hundred malformed requests.

use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::harness::{Options, PATIENCE, is_closed, plugins, read_response};

fn probe() -> Options {
    Options::default().plugin(plugins::PROBE)
}

/// Reads whatever arrives until the server closes; panics if it does not close in time.
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    crate::harness::read_to_close(stream)
}

/// Sends `bytes` one at a time, about every 100 ms, until the server answers or closes; then
/// returns everything it sent back before closing.
fn trickle(stream: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut reply = Vec::new();
    for b in bytes {
        if stream.write_all(&[*b]).is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                break;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    reply.extend(read_until_closed(stream));
    reply
}

#[test]
fn a22_a_head_sent_one_byte_at_a_time_is_cut_at_its_deadline() {
    let s = probe()
        .flag("--head-timeout-ms", 800)
        .flag("--idle-timeout-ms", 60_000)
        .start();
    let mut stream = s.connect();
    // The client never goes idle for long: a byte every 100 ms, far more often than any idle
    // timeout. The head deadline still ends it.
    let mut head = b"GET /probe/status/200 HTTP/1.1\r\nHost: a\r\nX-Slow: ".to_vec();
    head.resize(200, b'a');
    let reply = trickle(&mut stream, &head);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text:?}");
    assert!(text.contains("connection: close"));
    assert_eq!(s.get("/probe/status/200?body=fine").1, "fine");
}

#[test]
fn a22_a_body_that_trickles_is_cut_at_the_request_deadline() {
    let s = probe().flag("--request-timeout-ms", 800).start();
    let mut stream = s.connect();
    stream
        .write_all(b"POST /probe/inc HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n{")
        .unwrap();
    let reply = trickle(&mut stream, &[b' '; 999]);
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 408 "));
}

/// Sends `body` after `head` in pieces of `piece` bytes, one every `every`, until it is all
/// sent or the server answers; then reads the answer to the close. Returns the answer and
/// how long after the head it came.
fn paced(
    stream: &mut TcpStream,
    head: &[u8],
    body: &[u8],
    piece: usize,
    every: Duration,
) -> (String, Duration) {
    let started = Instant::now();
    stream.write_all(head).unwrap();
    stream.set_nonblocking(true).unwrap();
    let mut reply = Vec::new();
    'send: for chunk in body.chunks(piece) {
        std::thread::sleep(every);
        let mut buf = [0u8; 1024];
        match stream.read(&mut buf) {
            Ok(0) => break 'send,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                break 'send;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => break 'send,
        }
        if stream.write_all(chunk).is_err() {
            break;
        }
    }
    stream.set_nonblocking(false).unwrap();
    // With `Connection: close`, every answer ends with the close.
    reply.extend(read_until_closed(stream));
    (
        String::from_utf8_lossy(&reply).into_owned(),
        started.elapsed(),
    )
}

// See: issue 33, finding 5. The body's deadline follows progress: the request timeout plus a
// second per `--min-body-rate` bytes received, and a cut when no byte comes for
// `--body-idle-timeout-ms`. Scaled down: 1 s, 1000 B/s, 1.5 s.
#[test]
fn a22_a_steady_upload_outlives_the_request_timeout_and_a_stalled_one_does_not() {
    let s = probe()
        .flag("--request-timeout-ms", 1000)
        .flag("--min-body-rate", 1000)
        .flag("--body-idle-timeout-ms", 1500)
        .start();
    let json = |len: usize| {
        let mut body = vec![b'{'];
        body.resize(len - 9, b' ');
        body.extend_from_slice(b"\"val\":41}");
        body
    };
    let head = |len: usize| {
        format!("POST /probe/inc HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n")
            .into_bytes()
    };
    // 12,000 bytes at about 4,000 B/s: three times the request timeout, four times the rate.
    let (answer, took) = paced(
        &mut s.connect(),
        &head(12_000),
        &json(12_000),
        400,
        Duration::from_millis(100),
    );
    assert!(
        answer.starts_with("HTTP/1.1 200 "),
        "after {took:?}: {answer}"
    );
    assert!(answer.ends_with("{\"val\":42}"), "{answer}");
    assert!(
        took > Duration::from_millis(1000),
        "the upload was meant to outlast the timeout: {took:?}"
    );
    // 500 B/s, half the minimum rate: allowed 1 s + t/2, so cut at about 2 s, long before
    // the 10 s it would take.
    let (answer, took) = paced(
        &mut s.connect(),
        &head(5_000),
        &json(5_000),
        100,
        Duration::from_millis(200),
    );
    assert!(
        answer.starts_with("HTTP/1.1 408 "),
        "after {took:?}: {answer}"
    );
    assert!(took < Duration::from_secs(9), "{took:?}");
    // 20,000 bytes at once, then silence: the rate would allow 21 s, the idle clock cuts
    // after 1.5 s.
    let mut stream = s.connect();
    let body = json(100_000);
    let (answer, took) = paced(
        &mut stream,
        &head(100_000),
        &body[..20_000],
        20_000,
        Duration::ZERO,
    );
    assert!(
        answer.starts_with("HTTP/1.1 408 "),
        "after {took:?}: {answer}"
    );
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(15),
        "{took:?}"
    );
    assert_eq!(s.get("/probe/status/200?body=fine").1, "fine");
}

#[test]
fn a23_silent_and_idle_keep_alive_connections_are_closed() {
    let s = probe().flag("--idle-timeout-ms", 300).start();
    // Never sends a byte.
    let mut silent = s.connect();
    assert!(read_until_closed(&mut silent).is_empty());
    // Idle after one exchange.
    let mut stream = s.connect();
    stream
        .write_all(b"GET /probe/status/200?body=one HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let resp = read_response(&mut BufReader::new(stream.try_clone().unwrap()), false);
    assert_eq!(resp.text(), "one");
    assert!(read_until_closed(&mut stream).is_empty());
}

#[test]
fn a24_the_connection_past_the_cap_is_closed_and_the_others_keep_working() {
    let s = probe().flag("--max-connections", 5).start();
    let mut held: Vec<TcpStream> = (0..5)
        .map(|i| {
            let mut c = s.connect();
            write!(
                c,
                "GET /probe/status/200?body=c{i} HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .unwrap();
            let resp = read_response(&mut BufReader::new(c.try_clone().unwrap()), false);
            assert_eq!(resp.text(), format!("c{i}"));
            c
        })
        .collect();
    let mut extra = s.connect();
    assert!(is_closed(&mut extra), "the sixth connection stayed open");
    for (i, c) in held.iter_mut().enumerate() {
        write!(
            c,
            "GET /probe/status/200?body=again{i} HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        .unwrap();
        let resp = read_response(&mut BufReader::new(c.try_clone().unwrap()), false);
        assert_eq!(resp.text(), format!("again{i}"));
    }
    s.wait_for_log("connection limit reached");
    // A slot freed is a slot usable again.
    drop(held.pop());
    let started = Instant::now();
    loop {
        let mut c = s.connect();
        if c.write_all(b"GET /probe/status/200?body=back HTTP/1.1\r\nHost: a\r\n\r\n")
            .is_ok()
        {
            let mut reader = BufReader::new(c.try_clone().unwrap());
            let mut first = String::new();
            if std::io::BufRead::read_line(&mut reader, &mut first).is_ok() && !first.is_empty() {
                assert!(first.starts_with("HTTP/1.1 200"), "{first}");
                break;
            }
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the freed slot was never reused"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a24_running_out_of_file_descriptors_does_not_spin_the_accept_loop() {
    let s = probe().fd_limit(64).start();
    // Far more connections than descriptors: the accept loop hits EMFILE.
    let clients: Vec<TcpStream> = (0..120).map(|_| s.connect()).collect();
    s.wait_for_log("accept failed, retrying shortly");
    let before = s.cpu_ticks();
    std::thread::sleep(Duration::from_secs(1));
    let used = s.cpu_ticks() - before;
    // A spinning loop burns ~100 ticks a second; backing off burns almost none.
    assert!(
        used < 30,
        "the server used {used} ticks of CPU in one second while out of fds"
    );
    drop(clients);
    let started = Instant::now();
    loop {
        let mut c = s.connect();
        let ok = c
            .write_all(b"GET /probe/status/200?body=alive HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .is_ok();
        let reply = if ok {
            read_until_closed(&mut c)
        } else {
            Vec::new()
        };
        if String::from_utf8_lossy(&reply).ends_with("alive\n") || reply.ends_with(b"alive") {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "the server did not recover");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a25_a_client_that_never_reads_is_closed_and_memory_stays_bounded() {
    let s = probe()
        .flag("--max-send-buffer-bytes", 1 << 20)
        .flag("--workers", 2)
        .start();
    let baseline = s.rss_kib();
    let mut stream = s.connect();
    // 200 pipelined requests for 500 KB each: 100 MB of responses if the server kept them all.
    let mut requests = Vec::new();
    for _ in 0..200 {
        requests.extend_from_slice(b"GET /probe/big?n=500000 HTTP/1.1\r\nHost: a\r\n\r\n");
    }
    stream.write_all(&requests).unwrap();
    s.wait_for_log("closing a connection that does not read its responses");
    let rss = s.rss_kib();
    assert!(
        rss < baseline + 64 * 1024,
        "RSS grew from {baseline} KiB to {rss} KiB"
    );
    // What the client can still read is what sat in kernel buffers, far less than 100 MB.
    let got = read_until_closed(&mut stream).len();
    assert!(got < 20_000_000, "read {got} bytes");
    assert_eq!(s.get("/probe/status/200?body=ok").1, "ok");
}

#[test]
fn a25_a_stalled_reader_of_one_large_response_is_closed_by_the_send_timeout() {
    let s = probe()
        .flag("--send-timeout-ms", 500)
        .rust_log(Some("info,ankh::net=debug"))
        .start();
    let mut stream = s.connect();
    stream
        .write_all(b"GET /probe/big?n=30000000 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    // Do not read until the server has given up on us.
    s.wait_for_log("send timeout");
    let got = read_until_closed(&mut stream).len();
    assert!(got < 30_000_000, "the whole response arrived: {got} bytes");
}

#[test]
fn a59_drain_finishes_in_flight_work_refuses_the_rest_and_exits_0() {
    let mut s = probe()
        .flag("--workers", 1)
        .flag("--drain-timeout-ms", 10_000)
        .start();
    let addr = s.addr;
    // Idle keep-alive: one exchange, then nothing.
    let mut idle = s.connect();
    idle.write_all(b"GET /probe/status/200 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut idle_reader = BufReader::new(idle.try_clone().unwrap());
    assert_eq!(read_response(&mut idle_reader, false).status, 200);
    // In flight on the only worker, observed to have started.
    let mut busy = s.connect();
    busy.write_all(b"GET /probe/sleep?ms=1500 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    s.wait_for_log("sleeping 1500");
    // Queued behind it.
    let mut queued = s.connect();
    queued
        .write_all(b"GET /probe/status/200?body=queued HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();

    s.signal("TERM");
    s.wait_for_log("draining: no longer accepting");
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting while draining"
    );
    assert!(is_closed(&mut idle));
    let resp = read_response(&mut BufReader::new(busy.try_clone().unwrap()), false);
    assert_eq!(resp.text(), "slept 1500");
    assert!(is_closed(&mut busy));
    // See: issue 12, item 10: queued work runs while the drain deadline allows it.
    let resp = read_response(&mut BufReader::new(queued.try_clone().unwrap()), false);
    assert_eq!((resp.status, resp.text()), (200, "queued".to_owned()));
    let status = s.wait_exit();
    assert!(status.success(), "{status}");
    assert!(
        s.log().contains("drained: every connection finished"),
        "{}",
        s.log()
    );
}

/// A request on its way when the drain begins (in the kernel's buffers, its connection perhaps
/// still in the listener's backlog) is served, not reset: the drain accepts the backlog and
/// looks at every idle connection once more before it closes them.
#[test]
fn a59_requests_sent_just_before_the_drain_are_served_not_reset() {
    let mut s = probe()
        .flag("--workers", 2)
        .flag("--drain-timeout-ms", 10_000)
        .start();
    // Stopped, so that the connections wait in the listener's backlog and their requests in
    // the kernel's buffers, then asked to drain and let go.
    s.signal("STOP");
    let clients: Vec<TcpStream> = (0..32)
        .map(|k| {
            let mut c = s.connect();
            write!(
                c,
                "GET /probe/status/200?body=c{k} HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .unwrap();
            c
        })
        .collect();
    s.signal("TERM");
    s.signal("CONT");
    for (k, c) in clients.into_iter().enumerate() {
        let resp = read_response(&mut BufReader::new(c), false);
        assert_eq!((resp.status, resp.text()), (200, format!("c{k}")));
    }
    let status = s.wait_exit();
    assert!(status.success(), "{status}");
}

// See: issue 12, item 10.
#[test]
fn issue12_10_queued_requests_run_during_a_drain_and_only_what_cannot_start_gets_503() {
    // Eight requests of 500 ms on two workers: all finish within a 10 s drain.
    let mut s = probe()
        .flag("--workers", 2)
        .flag("--drain-timeout-ms", 10_000)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = crate::metrics::admin_addr(&s);
    const REQUEST: &[u8] = b"GET /probe/sleep?ms=500 HTTP/1.1\r\nHost: a\r\n\r\n";
    let clients: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(REQUEST).unwrap();
            c
        })
        .collect();
    // Observed, not assumed: the server has read all eight requests (a connection it has not
    // accepted yet is reset when the listener closes, and one with no request yet is idle).
    let started = Instant::now();
    while crate::metrics::value(&crate::metrics::scrape(admin), "ankh_bytes_in_total", &[])
        < (8 * REQUEST.len()) as f64
    {
        assert!(started.elapsed() < PATIENCE, "the requests never arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    s.signal("TERM");
    for c in clients {
        let resp = read_response(&mut BufReader::new(c), false);
        assert_eq!((resp.status, resp.text()), (200, "slept 500".to_owned()));
    }
    assert!(s.wait_exit().success());
    // One call slot, a 1 s drain, a call of 30 s ahead of a queued request: the queued one
    // cannot start before the deadline, and gets 503 when it passes.
    let mut s = probe()
        .flag("--workers", 1)
        .flag("--max-calls", 1)
        // The plugin's share above the total, so that the total and the queue are what bind.
        .flag("--max-concurrency", 64)
        .flag("--drain-timeout-ms", 1000)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = crate::metrics::admin_addr(&s);
    let mut busy = s.connect();
    busy.write_all(b"GET /probe/sleep?ms=30000 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    // The sleeper holds the one call slot before the other request arrives (two connections
    // may reach two event loops in either order).
    s.wait_for_log("sleeping 30000");
    let mut queued = s.connect();
    queued
        .write_all(b"GET /probe/status/200?body=queued HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    // Observed, not assumed: the second request waits in the queue.
    let started = Instant::now();
    while crate::metrics::value(&crate::metrics::scrape(admin), "ankh_queue_depth", &[]) < 1.0 {
        assert!(started.elapsed() < PATIENCE, "the request never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    s.signal("TERM");
    let resp = read_response(&mut BufReader::new(queued), false);
    assert_eq!(resp.status, 503);
    assert!(is_closed(&mut busy));
    assert!(s.wait_exit().success());
    s.wait_for_log("drain deadline reached: answering 503 to requests no worker started");
}

#[test]
fn a59_drain_force_closes_at_its_deadline() {
    let mut s = probe()
        .flag("--workers", 1)
        .flag("--drain-timeout-ms", 300)
        .start();
    let mut busy = s.connect();
    busy.write_all(b"GET /probe/sleep?ms=20000 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    s.wait_for_log("sleeping 20000");
    s.signal("INT");
    let status = s.wait_exit();
    assert!(status.success(), "{status}");
    assert!(read_until_closed(&mut busy).is_empty());
    assert!(
        s.log()
            .contains("drain deadline passed: closed 1 connections"),
        "{}",
        s.log()
    );
}

#[test]
fn a60_the_ready_file_holds_the_listening_address() {
    // The harness itself waits on the ready file with a wall-clock timeout; check its content
    // against what the log says, and that the address accepts.
    let s = probe().start();
    let log = s.log();
    assert!(
        log.contains(&format!("listening on http://{}", s.addr)),
        "{log}"
    );
    assert_eq!(s.get("/probe/status/200?body=up").1, "up");
}

#[test]
fn a_thousand_slow_loris_connections_do_not_starve_a_normal_client() {
    let s = probe()
        .flag("--head-timeout-ms", 3000)
        .flag("--workers", 4)
        .start();
    let mut slow: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(b"GET /probe/status/200 HTTP/1.1\r\nHost: a\r\n")
                .unwrap();
            c
        })
        .collect();
    // A normal client is served throughout, while the slow ones keep trickling.
    for i in 0..40 {
        assert_eq!(
            s.get(&format!("/probe/status/200?body=n{i}")).1,
            format!("n{i}")
        );
        if i % 10 == 0 {
            for c in &mut slow {
                let _ = c.write_all(b"X");
            }
        }
    }
    // Every slow connection is cut by its deadline: 408 (or a reset after it), then closed.
    let mut cut = 0;
    for c in &mut slow {
        let reply = read_until_closed(c);
        if reply.is_empty() || reply.starts_with(b"HTTP/1.1 408 ") {
            cut += 1;
        }
    }
    assert_eq!(cut, 1000);
    assert_eq!(s.get("/probe/status/200?body=after").1, "after");
}

#[test]
fn ten_thousand_abandoned_exchanges_leak_nothing() {
    // Calls suspended together need instances together, and the plugin's pool keeps up to
    // `max_idle` of them for 10 s after a burst (by design, not a leak): kept to four here, so
    // that what remains after the burst is what a leak would leave.
    let s = probe()
        .plugin(plugins::WSPROBE)
        .file("probe.toml", b"[instances]\nmax_idle = 4\n")
        .file("wsprobe.toml", b"[instances]\nmax_idle = 4\n")
        .flag("--workers", 4)
        .flag("--admin", "127.0.0.1:0")
        .start();
    let admin = s.admin_addr();
    let upgrade = b"GET /wsprobe/ HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let abandon = |i: usize| {
        let mut c = s.connect();
        let _ = match i % 4 {
            // Mid-request: half a head.
            0 => c.write_all(b"GET /probe/status/200 HTTP/1.1\r\nHo"),
            // Mid-body.
            1 => c.write_all(
                b"POST /probe/inc HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{\"va",
            ),
            // Mid-response: ask for a large body and leave.
            2 => c.write_all(b"GET /probe/big?n=200000 HTTP/1.1\r\nHost: a\r\n\r\n"),
            // Mid-WebSocket-frame: upgrade, then half of a masked text frame.
            _ => {
                let mut bytes = upgrade.to_vec();
                bytes.extend_from_slice(&[0x81, 0x8a, 1, 2, 3, 4, b'h' ^ 1, b'e' ^ 2]);
                c.write_all(&bytes)
            }
        };
    };
    // The server still serves. Right after the burst its queue may still be full of the
    // abandoned requests, and a 503 ("busy, try again") is then the right answer: try again.
    let serves = || {
        s.eventually("/probe/status/200?body=x", |status, body| {
            status == 200 && body == "x"
        });
    };
    // The descriptor count once the server has noticed every departure: the same for three
    // looks in a row.
    let settled = || {
        let mut seen = Vec::new();
        let started = Instant::now();
        loop {
            serves();
            std::thread::sleep(Duration::from_millis(300));
            seen.push(s.open_fds());
            let n = seen.len();
            if (n >= 3 && seen[n - 1] == seen[n - 2] && seen[n - 2] == seen[n - 3])
                || started.elapsed() > PATIENCE
            {
                return seen[n - 1];
            }
        }
    };
    // Warm up with the same traffic: every worker has its instances, the runtime's lazily
    // created pieces (module images, WASI's I/O runtime) exist, buffers are sized.
    for i in 0..800 {
        abandon(i);
    }
    let fds_before = settled();
    let rss_before = s.rss_kib();
    // Ten thousand exchanges in batches of 500, each batch until the server has accepted
    // and closed every one of its connections (its own counters say so). A leak grows with
    // the exchanges however they arrive; what a flood of ten thousand connections at once
    // leaves behind (the allocator keeps the pages of its peak: 25-140 MiB here, with 1.6 MiB
    // of it still allocated) is not a leak, and made this test fail 3 runs in 18 when it
    // sent them unpaced. Paced, RSS moves by -15 to +6 MiB, and a leak of 4 KiB per
    // connection put in on purpose (+38 MiB) fails the bound below.
    let mut accepted = crate::metrics::value(
        &crate::metrics::scrape(admin),
        "ankh_connections_total",
        &[],
    );
    for batch in 0..20 {
        for i in 0..500 {
            abandon(batch * 500 + i);
        }
        accepted += 500.0;
        crate::metrics::wait_metric(admin, "ankh_connections_total", &[], |v| v >= accepted);
        crate::metrics::wait_metric(admin, "ankh_connections_open", &[], |v| v == 0.0);
    }
    let mut fds_after = s.open_fds();
    // Then the last batch's departures are noticed too (bounded by PATIENCE).
    let started = Instant::now();
    while fds_after > fds_before + 2 && started.elapsed() < PATIENCE {
        serves();
        std::thread::sleep(Duration::from_millis(300));
        fds_after = s.open_fds();
    }
    // The pool gives dropped instances' memory back in batches of 8 slots
    // (`DECOMMIT_BATCH_SLOTS`): the last big instances may wait in a batch until eight more
    // go. Small instances made and dropped together, as any traffic would, flush it.
    let small: Vec<_> = (0..16)
        .map(|_| {
            let addr = s.addr;
            std::thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(
                    b"GET /probe/sleep?ms=200 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                )
                .unwrap();
                let mut out = Vec::new();
                let _ = c.read_to_end(&mut out);
            })
        })
        .collect();
    for t in small {
        t.join().unwrap();
    }
    serves();
    let rss_after = s.rss_kib();
    eprintln!("RSS {rss_before} KiB -> {rss_after} KiB, fds {fds_before} -> {fds_after}");
    let kinds = || {
        let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", s.pid()))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|p| p.display().to_string())
            .collect();
        v.sort();
        v
    };
    assert!(
        fds_after <= fds_before + 2,
        "fds {fds_before} -> {fds_after}: {:?}",
        kinds()
    );
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS {rss_before} KiB -> {rss_after} KiB"
    );
    // No plugin failed along the way.
    assert!(!s.log().contains("instance discarded"));
}

/// A hundred distinct malformed requests, each with the status it must get (0: the server may
/// just close). After each, the connection is closed; after all, a good request is served.
fn malformed_cases() -> Vec<(String, Vec<u8>, u16)> {
    let mut cases: Vec<(String, Vec<u8>, u16)> = Vec::new();
    let mut add = |name: &str, bytes: &[u8], status: u16| {
        cases.push((name.to_owned(), bytes.to_vec(), status));
    };
    add("one space", b"GET /HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    add("three spaces", b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    add("empty method", b" / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    add("no version", b"GET /\r\nHost: a\r\n\r\n", 400);
    add(
        "lowercase version",
        b"GET / http/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add("http 2.0", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
    add("http 0.9", b"GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505);
    add("http 1.2", b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505);
    add("http 3.0", b"GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505);
    add("junk version", b"GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 400);
    add(
        "method with slash",
        b"G/T / HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "method with colon",
        b"GE:T / HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "relative target",
        b"GET probe HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add("star for GET", b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    add(
        "space in target",
        b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add("no host", b"GET / HTTP/1.1\r\n\r\n", 400);
    add(
        "two hosts",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        400,
    );
    add(
        "space before colon",
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        400,
    );
    add(
        "tab before colon",
        b"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n",
        400,
    );
    add(
        "obs-fold",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n",
        400,
    );
    add(
        "obs-fold tab",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n\tc\r\n\r\n",
        400,
    );
    add(
        "no colon",
        b"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n",
        400,
    );
    add(
        "empty name",
        b"GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",
        400,
    );
    add(
        "space in name",
        b"GET / HTTP/1.1\r\nHost: a\r\nX Y: v\r\n\r\n",
        400,
    );
    add(
        "bare CR in value",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        400,
    );
    add(
        "bare CR after the version",
        b"GET / HTTP/1.1\rHost: a\r\n\r\n",
        400,
    );
    add("cl and te", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400);
    add("te and cl", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400);
    add(
        "two cl equal",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        400,
    );
    add(
        "two cl different",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
        400,
    );
    add(
        "cl list",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\nx",
        400,
    );
    add(
        "cl negative",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        400,
    );
    add(
        "cl plus",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\nx",
        400,
    );
    add(
        "cl hex",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n",
        400,
    );
    add(
        "cl decimal point",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1.0\r\n\r\nx",
        400,
    );
    add(
        "cl empty",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
        400,
    );
    add(
        "cl overflow",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 184467440737095516160\r\n\r\n",
        400,
    );
    add(
        "cl too large",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999\r\n\r\n",
        413,
    );
    add("two te", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    add(
        "te gzip",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
        400,
    );
    add(
        "te identity",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
        400,
    );
    add(
        "te chunked then gzip",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        400,
    );
    add(
        "te gzip then chunked",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        501,
    );
    add(
        "te chunked twice in list",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        501,
    );
    add(
        "te empty",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n",
        400,
    );
    add(
        "te in http 1.0",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    );
    add(
        "expect other",
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx",
        417,
    );
    add(
        "chunk size junk",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        400,
    );
    add(
        "chunk size empty",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
        400,
    );
    add(
        "chunk size negative",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n",
        400,
    );
    add(
        "chunk size over i64",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\n",
        400,
    );
    add("chunk size 20 digits", b"POST / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000000000001\r\nx\r\n0\r\n\r\n", 0);
    add(
        "chunk bare LF",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
        400,
    );
    add(
        "chunk data no crlf",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX",
        400,
    );
    add(
        "chunk data lf only",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\n0\r\n\r\n",
        400,
    );
    add(
        "chunk ext junk",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3 x\r\nabc\r\n0\r\n\r\n",
        400,
    );
    add("chunk ext ctl", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;a\x01b\r\nabc\r\n0\r\n\r\n", 400);
    add("bad trailer", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot a trailer\r\n\r\n", 400);
    // A control character in a header value, one case per character (tab is allowed).
    for c in (0u8..0x20).filter(|&c| c != b'\t' && c != b'\r' && c != b'\n') {
        let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\nX-Ctl: a".to_vec();
        raw.push(c);
        raw.extend_from_slice(b"b\r\n\r\n");
        add(&format!("ctl {c:#04x} in value"), &raw, 400);
    }
    add(
        "del in value",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n",
        400,
    );
    add(
        "nul in target",
        b"GET /a\0b HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add("nul in method", b"G\0T / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    add(
        "nul in name",
        b"GET / HTTP/1.1\r\nHost: a\r\nX\0: v\r\n\r\n",
        400,
    );
    add(
        "blank header line",
        b"GET / HTTP/1.1\r\nHost: a\r\n   \r\n\r\n",
        400,
    );
    add(
        "high bit in method",
        b"G\xc3\xa9T / HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "high bit in name",
        b"GET / HTTP/1.1\r\nHost: a\r\nX\xff: v\r\n\r\n",
        400,
    );
    add(
        "ctl in target",
        b"GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "del in target",
        b"GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "cr in target",
        b"GET /a\rb HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "tab in target",
        b"GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "space after version",
        b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "two-digit major",
        b"GET / HTTP/11.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "mixed-case protocol",
        b"GET / HTTp/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "two hosts in 1.0",
        b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
        400,
    );
    add(
        "space inside cl",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\n",
        400,
    );
    add(
        "space inside te",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chun ked\r\n\r\n",
        400,
    );
    add(
        "ftp scheme",
        b"GET ftp://example/ HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "authority form",
        b"CONNECT example:443 HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "question mark only target",
        b"GET ? HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    );
    add(
        "expect on a body-less request",
        b"GET / HTTP/1.1\r\nHost: a\r\nExpect: nothing\r\n\r\n",
        417,
    );
    add(
        "te with parameters",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n",
        400,
    );
    cases
}

#[test]
fn a_hundred_malformed_requests_get_their_status_and_the_server_carries_on() {
    let s = probe()
        .flag("--max-body-bytes", 1_000_000)
        .flag("--head-timeout-ms", 2000)
        .flag("--request-timeout-ms", 2000)
        .start();
    let cases = malformed_cases();
    assert!(cases.len() >= 100, "only {} cases", cases.len());
    let mut seen = std::collections::HashSet::new();
    for (name, raw, status) in &cases {
        assert!(seen.insert(raw.clone()), "duplicate case {name}");
        let mut stream = s.connect();
        let _ = stream.write_all(raw);
        let reply = read_until_closed(&mut stream);
        let text = String::from_utf8_lossy(&reply);
        if *status == 0 {
            // Either refused or (for a syntactically odd but valid body) served; never hung.
            assert!(
                text.is_empty() || text.starts_with("HTTP/1.1 "),
                "{name}: {text:?}"
            );
        } else {
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status} ")),
                "{name}: expected {status}, got {:?}",
                text.lines().next()
            );
        }
    }
    assert_eq!(s.get("/probe/status/200?body=still").1, "still");
}

#[test]
fn the_config_file_sets_limits_and_flags_override_it() {
    let dir = crate::harness::TempDir::new("config");
    let config = dir.path().join("ankh.toml");
    std::fs::write(
        &config,
        "workers = 2\n[limits]\nmax_headers = 5\n[timeouts]\nidle_ms = 250\n",
    )
    .unwrap();
    let s = probe()
        .arg("--config")
        .arg(config.to_str().unwrap())
        .flag("--max-headers", 6)
        .start();
    // Flag wins: 6 headers pass, 7 get 431.
    let ok = s.raw(b"GET /probe/status/200 HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nConnection: close\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
    let refused = s.raw(b"GET /probe/status/200 HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nConnection: close\r\n\r\n");
    assert!(refused.starts_with("HTTP/1.1 431 "), "{refused}");
    // The file's idle timeout applies.
    let mut idle = s.connect();
    assert!(read_until_closed(&mut idle).is_empty());
    assert!(s.log().contains("configuration read"));
}
