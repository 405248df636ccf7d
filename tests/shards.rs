//! Several event loops (`--io-threads`, issue 17): connections spread over the loops and stay
//! there, replies and WebSocket messages reach a connection whatever loop it is on, and a
//! publish reaches subscribers on every loop in one order.

use std::io::{BufReader, Write};
use std::net::TcpStream;

use crate::harness::{Options, TestServer, plugins, read_response};
use crate::metrics::{admin_addr, scrape, value};
use crate::ws::{Client, probe_client, send, text};

fn server(loops: usize) -> TestServer {
    Options::default()
        .plugin(plugins::WSPROBE)
        .plugin(plugins::PROBE)
        .flag("--io-threads", loops)
        .flag("--workers", 4)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start()
}

fn get_on(c: &mut TcpStream, body: &str) -> String {
    write!(
        c,
        "GET /probe/status/200?body={body} HTTP/1.1\r\nHost: a\r\n\r\n"
    )
    .unwrap();
    read_response(&mut BufReader::new(c.try_clone().unwrap()), false).text()
}

/// Each loop's open connections, by loop.
fn per_loop(s: &TestServer) -> Vec<f64> {
    let scrape = scrape(admin_addr(s));
    let mut loops: Vec<(usize, f64)> = scrape
        .samples
        .iter()
        .filter(|m| m.metric == "ankh_io_loop_connections")
        .map(|m| {
            let shard = m.labels.get("loop").unwrap().parse().unwrap();
            (
                shard,
                value(
                    &scrape,
                    &m.metric,
                    &[("loop", m.labels.get("loop").unwrap())],
                ),
            )
        })
        .collect();
    loops.sort_by_key(|(shard, _)| *shard);
    loops.into_iter().map(|(_, n)| n).collect()
}

#[test]
fn connections_are_spread_over_the_loops_and_keep_their_loop() {
    let s = server(2);
    let mut conns: Vec<TcpStream> = (0..6)
        .map(|i| {
            let mut c = s.connect();
            assert_eq!(get_on(&mut c, &format!("first{i}")), format!("first{i}"));
            c
        })
        .collect();
    // The least loaded loop takes each new connection: three each.
    assert_eq!(per_loop(&s), vec![3.0, 3.0], "{}", s.log());
    // Each connection keeps being served, many times, by its own loop.
    for round in 0..20 {
        for (i, c) in conns.iter_mut().enumerate() {
            assert_eq!(get_on(c, &format!("r{round}c{i}")), format!("r{round}c{i}"));
        }
    }
    let scrape = scrape(admin_addr(&s));
    for shard in ["0", "1"] {
        assert!(
            value(
                &scrape,
                "ankh_io_loop_busy_seconds_total",
                &[("loop", shard)]
            ) > 0.0,
            "loop {shard} never worked"
        );
    }
    assert_eq!(value(&scrape, "ankh_connections_open", &[]), 6.0);
    // Connections alternate (0, 1, 0, 1...): closing loop 1's three empties it, and the
    // next two connections both go there.
    let loop_1: Vec<TcpStream> = [5, 3, 1].into_iter().map(|i| conns.remove(i)).collect();
    drop(loop_1);
    let started = std::time::Instant::now();
    while per_loop(&s) != vec![3.0, 0.0] {
        assert!(
            started.elapsed() < crate::harness::PATIENCE,
            "{:?}",
            per_loop(&s)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut more: Vec<TcpStream> = (0..2)
        .map(|i| {
            let mut c = s.connect();
            assert_eq!(get_on(&mut c, &format!("more{i}")), format!("more{i}"));
            c
        })
        .collect();
    assert_eq!(per_loop(&s), vec![3.0, 2.0]);
    for c in conns.iter_mut().chain(&mut more) {
        assert_eq!(get_on(c, "again"), "again");
    }
}

#[test]
fn one_io_thread_is_one_loop() {
    let s = server(1);
    let mut c = s.connect();
    assert_eq!(get_on(&mut c, "x"), "x");
    assert_eq!(per_loop(&s), vec![1.0]);
}

/// The sum over the loops of counter `name`.
fn loops_total(s: &TestServer, name: &str) -> f64 {
    scrape(admin_addr(s))
        .samples
        .iter()
        .filter(|m| m.metric == name)
        .map(|m| match m.value {
            prometheus_parse::Value::Counter(v) => v,
            ref other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

#[test]
fn calls_start_on_their_loop_and_computing_ones_move_to_the_workers() {
    let s = server(2);
    let mut c = s.connect();
    for i in 0..20 {
        assert_eq!(get_on(&mut c, &format!("n{i}")), format!("n{i}"));
    }
    // With permits free, every call starts on the loop that read its request.
    let started = loops_total(&s, "ankh_io_loop_calls_started_total");
    assert!(started >= 20.0, "{started} calls started on loops");
    // A guest computing for many epoch ticks leaves its loop for the workers, and finishes.
    let handed_on = loops_total(&s, "ankh_io_loop_calls_handed_on_total");
    let (status, body) = s.get("/probe/work?n=200");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("worked"), "{body}");
    let after = loops_total(&s, "ankh_io_loop_calls_handed_on_total");
    assert!(after > handed_on, "handed on: {handed_on} -> {after}");
}

#[test]
fn with_fewer_loops_than_cores_computing_calls_still_reach_every_core() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores < 2 {
        eprintln!("skipped: one core, so one loop is not fewer than the cores");
        return;
    }
    // One loop on several cores: a loop that spent its guest budget since its last poll
    // queues the round's further calls for the workers, which run on the other cores.
    let s = server(1);
    let clients = 8;
    let each = 10;
    std::thread::scope(|scope| {
        for _ in 0..clients {
            scope.spawn(|| {
                let mut c = s.connect();
                for _ in 0..each {
                    write!(c, "GET /probe/work?n=3 HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
                    let r = read_response(&mut BufReader::new(c.try_clone().unwrap()), false);
                    assert_eq!(r.status, 200, "{}", r.text());
                }
            });
        }
    });
    let started = loops_total(&s, "ankh_io_loop_calls_started_total");
    let total = (clients * each) as f64;
    assert!(
        started < total,
        "all {total} computing calls started on the one loop ({started})"
    );
}

/// Four WebSockets, alternating between the two loops.
fn four_clients(s: &TestServer) -> Vec<(Client, u64)> {
    let clients: Vec<_> = (0..4).map(|_| probe_client(s)).collect();
    assert_eq!(per_loop(s), vec![2.0, 2.0], "{}", s.log());
    clients
}

#[test]
fn sends_and_publishes_reach_websockets_on_every_loop() {
    let s = server(2);
    let mut clients = four_clients(&s);
    for (ws, _) in &mut clients {
        send(ws, "sub:room");
        assert_eq!(text(ws), "subscribed true");
    }
    // From a connection on loop 0 to one on loop 1, and back.
    let (to_1, to_0) = (clients[1].1, clients[0].1);
    send(&mut clients[0].0, &format!("sendto:{to_1}:across"));
    assert_eq!(text(&mut clients[0].0), "sent");
    assert_eq!(text(&mut clients[1].0), "across");
    send(&mut clients[1].0, &format!("sendto:{to_0}:back"));
    assert_eq!(text(&mut clients[1].0), "sent");
    assert_eq!(text(&mut clients[0].0), "back");
    // One publish reaches the subscribers of both loops.
    send(&mut clients[2].0, "pub:room:everyone");
    for (i, (ws, _)) in clients.iter_mut().enumerate() {
        let mut got = text(ws);
        if i == 2 {
            // The publisher hears its answer and its own message, in either order.
            let other = text(ws);
            let mut both = [got, other];
            both.sort();
            assert_eq!(both, ["everyone".to_owned(), "published 4".to_owned()]);
            continue;
        }
        if got.starts_with("published") {
            got = text(ws);
        }
        assert_eq!(got, "everyone", "client {i}");
    }
}

#[test]
fn concurrent_publishes_arrive_in_one_order_on_every_loop() {
    const EACH: usize = 200;
    let s = server(2);
    let mut clients = four_clients(&s);
    for (ws, _) in &mut clients {
        send(ws, "sub:room");
        assert_eq!(text(ws), "subscribed true");
    }
    // Clients 0 (loop 0) and 1 (loop 1) publish at once; 2 (loop 0) and 3 (loop 1) listen.
    let listeners = clients.split_off(2);
    let publishers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(p, (mut ws, _))| {
            std::thread::spawn(move || {
                for n in 0..EACH {
                    send(&mut ws, &format!("pub:room:p{p}-{n}"));
                }
                // Everything this publisher hears: its answers, and both publishers' messages.
                let heard: Vec<String> = (0..EACH * 3).map(|_| text(&mut ws)).collect();
                heard
                    .into_iter()
                    .filter(|m| !m.starts_with("published"))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut orders: Vec<Vec<String>> = listeners
        .into_iter()
        .map(|(mut ws, _)| (0..EACH * 2).map(|_| text(&mut ws)).collect())
        .collect();
    for p in publishers {
        orders.push(p.join().unwrap());
    }
    for (i, order) in orders.iter().enumerate() {
        assert_eq!(order.len(), EACH * 2);
        assert_eq!(order, &orders[0], "subscriber {i} saw another order");
    }
    // Each publisher's own messages keep their order.
    for p in 0..2 {
        let mine: Vec<&String> = orders[0]
            .iter()
            .filter(|m| m.starts_with(&format!("p{p}-")))
            .collect();
        let expected: Vec<String> = (0..EACH).map(|n| format!("p{p}-{n}")).collect();
        assert_eq!(mine, expected.iter().collect::<Vec<_>>());
    }
}

#[test]
fn at_the_drain_deadline_queued_requests_of_every_loop_get_503() {
    // One call slot, taken for 30 s; four requests queued behind it, two on each loop.
    // Whichever loop takes them off the queue at the deadline answers its own and hands the
    // others to their loop: all four get 503.
    let mut s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--io-threads", 2)
        .flag("--workers", 1)
        .flag("--max-calls", 1)
        // The plugin's share above the total, so that the total and the queue are what bind.
        .flag("--max-concurrency", 64)
        .flag("--drain-timeout-ms", 1000)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    let mut busy = s.connect();
    busy.write_all(b"GET /probe/sleep?ms=30000 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    // The sleeper holds the one call slot before the others arrive.
    s.wait_for_log("sleeping 30000");
    let queued: Vec<TcpStream> = (0..4)
        .map(|i| {
            let mut c = s.connect();
            write!(
                c,
                "GET /probe/status/200?body=q{i} HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            .unwrap();
            c
        })
        .collect();
    let started = std::time::Instant::now();
    while value(&scrape(admin), "ankh_queue_depth", &[]) < 4.0 {
        assert!(
            started.elapsed() < crate::harness::PATIENCE,
            "the requests never queued"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(per_loop(&s), vec![3.0, 2.0]);
    s.signal("TERM");
    for c in queued {
        let resp = read_response(&mut BufReader::new(c), false);
        assert_eq!(resp.status, 503, "{}", s.log());
    }
    assert!(crate::harness::is_closed(&mut busy));
    assert!(s.wait_exit().success());
}
