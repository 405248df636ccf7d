//! Waits that hold no thread (issue 18): a guest's sleep, socket wait or key-value commit
//! suspends its call on a fiber, and the worker runs other calls meanwhile. Every test here
//! would fail on a server whose workers block in a guest's wait: there a waiting call holds
//! one of twenty threads.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::{Options, plugins, read_response};
use crate::metrics::{admin_addr, scrape, value, wait_metric};

/// Sends `GET path` on a new connection and returns it, unanswered.
fn send(addr: SocketAddr, path: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    c
}

/// How long one `GET path` takes, on a connection of its own.
fn timed(addr: SocketAddr, path: &str) -> (Duration, u16) {
    let started = Instant::now();
    let c = send(addr, path);
    let resp = read_response(&mut BufReader::new(c), false);
    (started.elapsed(), resp.status)
}

#[test]
fn issue18_a_thousand_sleeping_calls_hold_no_thread() {
    // The defaults: 20 workers. A thousand calls sleep 5 s at once, and other requests are
    // answered meanwhile as fast as on an idle server.
    let s = Options::default()
        .plugin(plugins::PROBE)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let idle: Vec<Duration> = (0..10)
        .map(|_| timed(s.addr, "/probe/status/200").0)
        .collect();
    let usual = *idle.iter().max().unwrap();
    let sleepers: Vec<TcpStream> = (0..1000)
        .map(|_| send(s.addr, "/probe/sleep?ms=5000"))
        .collect();
    wait_metric(admin, "ankh_calls_in_flight", &[], |v| v >= 1000.0);
    let started = Instant::now();
    for _ in 0..20 {
        let (took, status) = timed(s.addr, "/probe/status/200");
        assert_eq!(status, 200);
        // A blocked pool would answer after the sleepers, 5 s from now.
        assert!(
            took < usual.max(Duration::from_millis(20)) * 10,
            "answered in {took:?} while 1000 calls sleep (idle: at most {usual:?})"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the sleepers woke first"
    );
    for c in sleepers {
        let resp = read_response(&mut BufReader::new(c), false);
        assert_eq!((resp.status, resp.text()), (200, "slept 5000".to_owned()));
    }
    wait_metric(admin, "ankh_calls_in_flight", &[], |v| v == 0.0);
}

#[test]
fn issue18_clients_that_leave_drop_their_suspended_calls() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let sleepers: Vec<TcpStream> = (0..200)
        .map(|_| send(s.addr, "/probe/sleep?ms=600000"))
        .collect();
    wait_metric(admin, "ankh_calls_in_flight", &[], |v| v >= 200.0);
    let probe = [("plugin", "probe")];
    assert_eq!(
        value(&scrape(admin), "ankh_plugin_calls_in_flight", &probe),
        200.0
    );
    drop(sleepers);
    // Each suspended call ends when its client is gone, not ten minutes later.
    wait_metric(admin, "ankh_calls_in_flight", &[], |v| v == 0.0);
    wait_metric(admin, "ankh_plugin_cancellations_total", &probe, |v| {
        v >= 200.0
    });
    let scrape = scrape(admin);
    assert_eq!(value(&scrape, "ankh_plugin_calls_in_flight", &probe), 0.0);
    assert_eq!(value(&scrape, "ankh_plugin_traps_total", &probe), 0.0);
    assert_eq!(s.get("/probe/status/200?body=after").1, "after");
}

#[test]
fn issue18_calls_in_flight_are_bounded_and_the_rest_wait_in_the_queue() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--max-calls", 8)
        // The plugin's share above the total, so that the total and the queue are what bind.
        .flag("--max-concurrency", 64)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let sleepers: Vec<TcpStream> = (0..20)
        .map(|_| send(s.addr, "/probe/sleep?ms=2000"))
        .collect();
    wait_metric(admin, "ankh_queue_depth", &[], |v| v >= 12.0);
    // A worker counts a call in flight just after it takes the job off the queue: both
    // gauges settle, then neither may pass its bound.
    wait_metric(admin, "ankh_calls_in_flight", &[], |v| v >= 8.0);
    let scrape = scrape(admin);
    assert_eq!(value(&scrape, "ankh_calls_in_flight", &[]), 8.0);
    assert_eq!(value(&scrape, "ankh_queue_depth", &[]), 12.0);
    for c in sleepers {
        let resp = read_response(&mut BufReader::new(c), false);
        assert_eq!(resp.status, 200);
    }
}

#[test]
fn issue18_a_computing_handler_shares_its_thread() {
    // One worker, a guest that computes for 3 s: it yields at every epoch tick that finds a
    // job waiting, so another request is answered long before the loop is stopped.
    let s = Options::default()
        .plugin(plugins::SPIN)
        .plugin(plugins::PROBE)
        .flag("--workers", 1)
        .flag("--cpu-deadline-ms", 3000)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let spinning = send(s.addr, "/spin/loop");
    wait_metric(
        admin,
        "ankh_plugin_calls_in_flight",
        &[("plugin", "spin")],
        |v| v >= 1.0,
    );
    let (took, status) = timed(s.addr, "/probe/status/200");
    assert_eq!(status, 200);
    assert!(took < Duration::from_millis(1500), "answered in {took:?}");
    // The spinning call is still stopped at its own CPU deadline, not earlier.
    let resp = read_response(&mut BufReader::new(spinning), false);
    assert_eq!(resp.status, 504, "{}", resp.text());
    let scrape = scrape(admin);
    assert_eq!(
        value(
            &scrape,
            "ankh_plugin_deadline_hits_total",
            &[("plugin", "spin")]
        ),
        1.0
    );
}

#[test]
fn issue18_interleaved_calls_are_charged_only_their_own_cpu() {
    // How long one call of `/probe/work?n=N` computes, alone.
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--workers", 1)
        .start();
    let (alone, status) = timed(s.addr, "/probe/work?n=20");
    assert_eq!(status, 200);
    drop(s);
    // One worker runs twelve such calls at once, taking turns at every epoch tick. Each is
    // allowed four times its own CPU: charging a call for the others' turns (twelve times its
    // own, by the end) would stop most of them.
    let deadline = (alone * 4).max(Duration::from_millis(50));
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--workers", 1)
        .flag("--cpu-deadline-ms", deadline.as_millis())
        .start();
    let callers: Vec<TcpStream> = (0..12).map(|_| send(s.addr, "/probe/work?n=20")).collect();
    for c in callers {
        let resp = read_response(&mut BufReader::new(c), false);
        assert_eq!(resp.status, 200, "{} (deadline {deadline:?})", resp.text());
        assert!(resp.text().starts_with("worked "));
    }
}

#[test]
fn issue18_a_durable_write_holds_no_thread() {
    // One worker, 64 clients incrementing at once: while one write waits for its commit, the
    // worker starts the others, so a commit carries many writes. A worker that blocked on
    // each commit would commit them one at a time.
    let data = crate::harness::TempDir::new("waits-kv");
    let s = Options::default()
        .plugin_as("bench", plugins::BENCH)
        .flag("--workers", 1)
        .data_dir(data.path())
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let addr = s.addr;
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let (_, status) = timed(addr, "/bench/incr?key=n");
                    assert_eq!(status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.get("/bench/incr?key=n").1, "1281");
    let scrape = scrape(admin);
    let writes = value(&scrape, "ankh_kv_writes_total", &[]);
    let commits = value(&scrape, "ankh_kv_commits_total", &[]);
    assert!(writes >= 1281.0);
    assert!(
        writes / commits > 2.0,
        "{writes} writes in {commits} commits: each write held the worker"
    );
}
