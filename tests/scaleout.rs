//! One application across several ankh processes sharing a real Redis, behind a real nginx
//! (issue 19): state, WebSocket topics and connections that span processes, and what happens
//! when a process is killed or Redis stops. A test binary of its own: it starts three servers,
//! Redis and nginx, and is the slowest group.

#![allow(unreachable_pub)] // one test binary: `pub` only shares items between its modules

use ankh_test_support::{harness, metrics, services, ws};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tungstenite::Message;

use crate::harness::{Options, PATIENCE, TestServer, agent, plugins};
use crate::services::{Nginx, Redis, signal};
use crate::ws::{Client, send, text};

/// An ankh process on `redis` serving kvprobe, todo, chat and wsprobe (and wsprobe again as
/// `other`, a second plugin).
fn process(redis: &Redis, extra: &[&str]) -> TestServer {
    let mut options = Options::default()
        .plugin(plugins::KVPROBE)
        .plugin(plugins::TODO)
        .plugin(plugins::CHAT)
        .plugin(plugins::WSPROBE)
        .plugin_as("other", plugins::WSPROBE)
        .flag("--kv", redis.url())
        .flag("--workers", 8);
    for a in extra {
        options = options.arg(a);
    }
    let s = options.start();
    s.wait_for_log("joined the cluster");
    s.wait_for_log("pub/sub subscribed");
    s
}

/// The processes a `--processes` supervisor started.
fn children(s: &TestServer) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", s.pid()))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

fn three(redis: &Redis) -> Vec<TestServer> {
    (0..3).map(|_| process(redis, &[])).collect()
}

/// A WebSocket client on `addr` (an ankh process or nginx).
fn ws_at(addr: SocketAddr, path: &str) -> Client {
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let (ws, response) = tungstenite::client(format!("ws://{addr}{path}"), stream)
        .unwrap_or_else(|e| panic!("handshake through {addr} failed: {e}"));
    assert_eq!(response.status(), 101);
    ws
}

/// A wsprobe (or `other`) client that knows its connection id.
fn probe_at(addr: SocketAddr, plugin: &str) -> (Client, u64) {
    let mut ws = ws_at(addr, &format!("/{plugin}/?id=1"));
    let id = text(&mut ws);
    (ws, id.strip_prefix("id:").unwrap().parse().unwrap())
}

/// Sends `command` and reads the answer.
fn ask(ws: &mut Client, command: &str) -> String {
    send(ws, command);
    text(ws)
}

fn node_of(id: u64) -> u64 {
    id >> 40
}

// See: issue 19, "Tests": 3 × 10,000 concurrent increments through the balancer sum to exactly
// 30,000, and the todo example shows the same list from every process.
#[test]
fn three_processes_behind_nginx_count_every_increment_once_and_share_the_todo_list() {
    let Some(redis) = Redis::start("count") else {
        return;
    };
    let servers = three(&redis);
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let Some(nginx) = Nginx::start(&addrs) else {
        return;
    };
    const CLIENTS: usize = 3 * 16;
    const EACH: usize = 30_000 / CLIENTS;
    let url = format!("http://{}/kvprobe/incr?key=hits", nginx.addr);
    let start = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, start) = (url.clone(), start.clone());
            std::thread::spawn(move || {
                let agent = agent();
                start.wait();
                let mut statuses = HashMap::<u16, usize>::new();
                for _ in 0..EACH {
                    let status = agent
                        .post(&url)
                        .send_empty()
                        .map(|r| r.status().as_u16())
                        .unwrap_or(0);
                    *statuses.entry(status).or_default() += 1;
                }
                statuses
            })
        })
        .collect();
    let mut statuses = HashMap::<u16, usize>::new();
    for t in threads {
        for (status, n) in t.join().unwrap() {
            *statuses.entry(status).or_default() += n;
        }
    }
    assert_eq!(
        statuses,
        HashMap::from([(200, 30_000)]),
        "every increment answered 200\n{}",
        nginx.error_log()
    );
    // The total, read from each process directly.
    for s in &servers {
        assert_eq!(s.get("/kvprobe/get?key=hits"), (200, "30000".to_owned()));
    }
    // The balancer used all three.
    for s in &servers {
        let served = s.log().matches("/kvprobe/incr").count();
        assert!(served > 1_000, "a process served only {served} increments");
    }

    // The todo list, written through the balancer, read from every process.
    let agent = agent();
    for title in ["milk", "eggs", "bread"] {
        let r = agent
            .post(format!("http://{}/todo/items", nginx.addr))
            .content_type("application/json")
            .send(format!("{{\"title\":\"{title}\"}}"))
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let lists: Vec<String> = servers.iter().map(|s| s.get("/todo/items").1).collect();
    for title in ["milk", "eggs", "bread"] {
        assert!(lists[0].contains(title), "{}", lists[0]);
    }
    assert!(lists.iter().all(|l| *l == lists[0]), "{lists:#?}");
}

// See: issue 19, "Connection ids are unique across every process", "A sender on process A may
// ws::send/close a connection that lives on process B, or gets closed", and "A process does not
// deliver its own publish twice"; every import per plugin, tried by a second plugin.
#[test]
fn sends_closes_and_publishes_reach_other_processes_and_stay_within_their_plugin() {
    let Some(redis) = Redis::start("route") else {
        return;
    };
    let (p1, p2) = (process(&redis, &[]), process(&redis, &[]));
    let (mut a, a_id) = probe_at(p1.addr, "wsprobe");
    let (mut b, b_id) = probe_at(p2.addr, "wsprobe");
    let (mut evil, _) = probe_at(p1.addr, "other");
    assert_ne!(node_of(a_id), node_of(b_id), "{a_id:x} {b_id:x}");
    assert_ne!(node_of(a_id), 0);

    // A send across processes.
    assert_eq!(ask(&mut a, &format!("sendto:{b_id}:over there")), "sent");
    assert_eq!(text(&mut b), "over there");
    // An id of process 2 that is no connection, and one of a process that never was.
    let missing = (b_id & !0xff_ffff_ffff) | 12345;
    assert_eq!(
        ask(&mut a, &format!("sendto:{missing}:x")),
        "error WsError::Closed"
    );
    assert_eq!(
        ask(&mut a, &format!("sendto:{}:x", (999u64 << 40) | 1)),
        "error WsError::Closed"
    );
    // Another plugin cannot reach wsprobe's connection on another process.
    assert_eq!(
        ask(&mut evil, &format!("sendto:{b_id}:evil")),
        "error WsError::Closed"
    );
    assert_eq!(
        ask(&mut evil, &format!("closeto:{b_id}")),
        "error WsError::Closed"
    );

    // Topics: one local subscriber and one other process; each gets the message once.
    assert_eq!(ask(&mut a, "sub:news"), "subscribed true");
    assert_eq!(ask(&mut b, "sub:news"), "subscribed true");
    // `other`'s topic of the same name is its own, on every process.
    // (The publisher's own copy comes before the answer: it is delivered locally first.)
    // Its count is the other process that received it: Redis counts processes, not topics.
    assert_eq!(ask(&mut evil, "pub:news:from evil"), "published 1");
    assert_eq!(ask(&mut a, "pub:news:first"), "first");
    assert_eq!(text(&mut a), "published 2");
    assert_eq!(text(&mut b), "first", "evil's publish reached wsprobe");
    assert_eq!(ask(&mut b, "pub:news:second"), "second");
    assert_eq!(text(&mut b), "published 2");
    assert_eq!(text(&mut a), "second");
    // A topic longer than any subscription may name goes nowhere, not even to Redis.
    let long = "t".repeat(10_000);
    assert_eq!(
        ask(&mut evil, &format!("pub:{long}:x")),
        "error WsError::TooLarge"
    );
    // Nothing was delivered twice: the next thing each reads is the answer to an echo.
    assert_eq!(ask(&mut a, "ping-a"), "ping-a");
    assert_eq!(ask(&mut b, "ping-b"), "ping-b");

    // A close across processes.
    assert_eq!(ask(&mut a, &format!("closeto:{b_id}")), "closed");
    loop {
        match b.read() {
            Ok(Message::Close(Some(frame))) => {
                assert_eq!(u16::from(frame.code), 4001);
                break;
            }
            Ok(Message::Ping(_) | Message::Pong(_)) => {}
            other => panic!("expected the close, got {other:?}"),
        }
    }
    // Once closed, it answers `closed` (the roster forgets it as the close is written).
    let started = Instant::now();
    while ask(&mut a, &format!("sendto:{b_id}:late")) != "error WsError::Closed" {
        assert!(
            started.elapsed() < PATIENCE,
            "the closed connection stayed listed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads chat events until `want` messages whose text starts with `tag` have arrived;
/// returns their `(name, text)` in arrival order.
fn chat_messages(ws: &mut Client, want: usize, tag: &str) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while got.len() < want {
        let event: serde_json::Value = serde_json::from_str(&text(ws)).unwrap();
        if event["type"] == "message" && event["text"].as_str().unwrap().starts_with(tag) {
            got.push((
                event["name"].as_str().unwrap().to_owned(),
                event["text"].as_str().unwrap().to_owned(),
            ));
        }
    }
    got
}

/// Connects a chat client as `name` in `room` and waits for its own join notice (by then it
/// is subscribed).
fn chat_join(addr: SocketAddr, room: &str, name: &str) -> Client {
    let mut ws = ws_at(addr, &format!("/chat/ws?room={room}&name={name}"));
    loop {
        let event: serde_json::Value = serde_json::from_str(&text(&mut ws)).unwrap();
        if event["type"] == "join" && event["name"] == name {
            return ws;
        }
    }
}

/// Every client sends `each` numbered messages; every client must receive all of them
/// exactly once, each sender's in order.
fn chat_round(clients: &mut [(String, Client)], each: usize, tag: &str) {
    for k in 0..each {
        for (_, ws) in clients.iter_mut() {
            send(ws, &format!("{tag}{k}"));
        }
    }
    let senders = clients.len();
    let total = senders * each;
    for (me, ws) in clients.iter_mut() {
        let got = chat_messages(ws, total, tag);
        let mut next: HashMap<String, usize> = HashMap::new();
        for (name, text) in &got {
            let k = next.entry(name.clone()).or_default();
            assert_eq!(
                *text,
                format!("{tag}{k}"),
                "{me} got {name}'s messages out of order or twice: {got:?}"
            );
            *k += 1;
        }
        assert_eq!(
            next.len(),
            senders,
            "{me} heard from {} senders",
            next.len()
        );
        assert!(next.values().all(|n| *n == each), "{me}: {next:?}");
    }
}

// See: issue 19, "Tests": the chat example with clients spread over three processes; every
// message reaches every client in the room exactly once, in per-sender order.
#[test]
fn chat_across_three_processes_delivers_every_message_once_in_sender_order() {
    let Some(redis) = Redis::start("chat") else {
        return;
    };
    let servers = three(&redis);
    let mut clients: Vec<(String, Client)> = (0..6)
        .map(|i| {
            let name = format!("c{i}");
            let ws = chat_join(servers[i % 3].addr, "spread", &name);
            (name, ws)
        })
        .collect();
    chat_round(&mut clients, 25, "m");
}

// See: issue 19, "Faults": kill -9 one process under load; the balancer routes around it, no
// acknowledged write is lost, its WebSocket clients reconnect through nginx and keep chatting.
#[test]
fn killing_a_process_under_load_loses_no_acknowledged_write_and_its_clients_reconnect() {
    let Some(redis) = Redis::start("kill") else {
        return;
    };
    let mut servers = three(&redis);
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let Some(nginx) = Nginx::start(&addrs) else {
        return;
    };
    // Chat clients through nginx: spread over the processes by the balancer.
    let mut clients: Vec<(String, Client)> = (0..6)
        .map(|i| {
            let name = format!("k{i}");
            (name.clone(), chat_join(nginx.addr, "k", &name))
        })
        .collect();
    chat_round(&mut clients, 3, "before");

    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let url = format!("http://{}/kvprobe/incr?key=acked", nginx.addr);
    let load: Vec<_> = (0..8)
        .map(|_| {
            let (url, acked, failed, running) =
                (url.clone(), acked.clone(), failed.clone(), running.clone());
            std::thread::spawn(move || {
                let agent = agent();
                // Bounded: at most 20,000 requests per thread.
                for _ in 0..20_000 {
                    if !running.load(Ordering::Relaxed) {
                        break;
                    }
                    match agent.post(&url).send_empty() {
                        Ok(r) if r.status() == 200 => acked.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    let wait_acked = |n: u64| {
        let started = Instant::now();
        while acked.load(Ordering::Relaxed) < n {
            assert!(started.elapsed() < PATIENCE, "the load stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_acked(1_000);
    let victim = servers.remove(0);
    signal(victim.pid(), "KILL");
    // Routed around: the load keeps being acknowledged after the kill.
    let at_kill = acked.load(Ordering::Relaxed);
    wait_acked(at_kill + 2_000);
    running.store(false, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    let acked = acked.load(Ordering::Relaxed);
    let failed = failed.load(Ordering::Relaxed);
    let (status, total) = servers[0].get("/kvprobe/get?key=acked");
    assert_eq!(status, 200);
    let total: u64 = total.parse().unwrap();
    // Every acknowledged increment is there; one the victim applied but never answered may
    // be there too.
    assert!(
        total >= acked && total <= acked + failed,
        "stored {total}, acknowledged {acked}, failed {failed}"
    );
    assert!(
        failed < 100,
        "{failed} requests failed: nginx did not route around the victim"
    );
    drop(victim);

    // Each client asks whether it is still connected: a live one hears its own message
    // back, the victim's see their connection end (nginx closes it when the process dies)
    // and reconnect through nginx, which puts them on a survivor.
    let mut orphans = 0;
    for (name, ws) in clients.iter_mut() {
        let alive = ws.send(Message::text("still there?")).is_ok()
            && loop {
                match ws.read() {
                    Ok(Message::Text(t)) => {
                        let event: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                        if event["name"] == name.as_str() && event["text"] == "still there?" {
                            break true;
                        }
                    }
                    Ok(Message::Close(_)) | Err(_) => break false,
                    Ok(_) => {}
                }
            };
        if !alive {
            orphans += 1;
            *ws = chat_join(nginx.addr, "k", name);
        }
    }
    assert!(
        orphans > 0,
        "nginx had put no chat client on the killed process"
    );
    // Everyone hears everyone again, exactly once, in order (other messages, such as the
    // survivors' "still there?", are not counted).
    chat_round(&mut clients, 3, "after");
}

// See: issue 19, "Faults": stop Redis for 5 s under load: kv calls get `unavailable` (no hang,
// no crash), /readyz says so, and everything recovers on its own when Redis returns.
#[test]
fn a_redis_outage_answers_unavailable_and_recovers_on_its_own() {
    let Some(mut redis) = Redis::start("outage") else {
        return;
    };
    let s = process(&redis, &["--admin", "127.0.0.1:0"]);
    let admin = crate::metrics::admin_addr(&s);
    let readyz = || {
        agent()
            .get(format!("http://{admin}/readyz"))
            .call()
            .map(|mut r| (r.status().as_u16(), r.body_mut().read_to_string().unwrap()))
            .unwrap()
    };
    assert_eq!(readyz().0, 200);
    let incr = || {
        let started = Instant::now();
        let r = agent()
            .post(s.url("/kvprobe/incr?key=n"))
            .send_empty()
            .unwrap();
        let status = r.status().as_u16();
        (
            status,
            r.into_body().read_to_string().unwrap(),
            started.elapsed(),
        )
    };
    let mut acked = 0;
    for _ in 0..100 {
        assert_eq!(incr().0, 200);
        acked += 1;
    }

    redis.stop();
    let stopped = Instant::now();
    let mut unavailable = 0;
    while stopped.elapsed() < Duration::from_secs(5) {
        let (status, body, took) = incr();
        match status {
            200 => acked += 1,
            503 => {
                assert!(body.contains("Unavailable"), "{body}");
                unavailable += 1;
            }
            other => panic!("{other}: {body}"),
        }
        // Never a hang: bounded by the Redis timeouts, far below the request deadline.
        assert!(took < Duration::from_secs(4), "a kv call took {took:?}");
    }
    assert!(unavailable > 0);
    let (status, why) = readyz();
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("redis") || why.contains("pub/sub"), "{why}");
    // Other plugins keep serving.
    assert_eq!(s.get("/chat/").0, 200);

    redis.resume();
    let started = Instant::now();
    while readyz().0 != 200 {
        assert!(
            started.elapsed() < PATIENCE,
            "never ready again: {}",
            readyz().1
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    loop {
        let (status, _, _) = incr();
        if status == 200 {
            acked += 1;
            break;
        }
        assert!(started.elapsed() < PATIENCE, "kv calls never recovered");
    }
    // Every acknowledged increment survived the outage (one cut off as Redis stopped may have
    // been applied unanswered).
    let (status, stored) = s.get("/kvprobe/get?key=n");
    assert_eq!(status, 200);
    let stored: u64 = stored.parse().unwrap();
    assert!(
        stored >= acked && stored <= acked + unavailable,
        "stored {stored}, acknowledged {acked}"
    );
    // Cross-process topics work again too (the subscription was re-made).
    let (mut a, _) = probe_at(s.addr, "wsprobe");
    assert_eq!(ask(&mut a, "sub:t"), "subscribed true");
    assert_eq!(ask(&mut a, "pub:t:back"), "back");
    assert_eq!(text(&mut a), "published 1");
    assert!(s.log().contains("pub/sub subscription lost"), "{}", s.log());
}

// See: issue 19, "Several processes on one host": `--processes N` runs N processes on one port
// (SO_REUSEPORT), the kernel spreads connections over them, and a SIGTERM drains them all.
#[test]
fn processes_share_one_port_and_stop_together() {
    let Some(redis) = Redis::start("procs") else {
        return;
    };
    let mut s = Options::default()
        .plugin(plugins::WSPROBE)
        .flag("--kv", redis.url())
        .flag("--processes", 3)
        .flag("--workers", 2)
        .start();
    // Connections land on different processes: their ids carry different nodes.
    let nodes: std::collections::HashSet<u64> = (0..60)
        .map(|_| node_of(probe_at(s.addr, "wsprobe").1))
        .collect();
    assert!(
        nodes.len() >= 2,
        "every connection went to one process: {nodes:?}"
    );
    // The children's ready files went once they were read: nothing is left in the temporary
    // directory for a supervisor killed with SIGKILL to leave behind.
    let scratch = format!("ankh-processes-{}-", s.pid());
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&scratch))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A process that dies is started again (with a node number of its own), and the port
    // keeps serving meanwhile.
    let children = children(&s);
    assert_eq!(children.len(), 3, "{}", s.log());
    signal(children[0], "KILL");
    s.wait_for_log("starting it again");
    s.wait_for_log_count("joined the cluster", 4);
    for _ in 0..10 {
        let (mut ws, _) = probe_at(s.addr, "wsprobe");
        assert_eq!(ask(&mut ws, "still"), "still");
    }
    // SIGTERM drains every process, the restarted one included.
    s.signal("TERM");
    let status = s.wait_exit();
    assert!(status.success(), "{status}\n{}", s.log());
    assert!(s.log().contains("every process has ended"), "{}", s.log());
}

// See: issue 36, "Changing the values takes effect without a restart (on SIGHUP ...)": with
// `--processes`, the SIGHUP sent to the parent reaches every child, each reads its plugins'
// values again, and a changed value reaches every process.
#[test]
fn sighup_to_the_parent_rereads_every_processs_values() {
    let Some(redis) = Redis::start("hup") else {
        return;
    };
    let dir = crate::harness::TempDir::new("hup");
    let config = dir.path().join("ankh.toml");
    let values = |greeting: &str| {
        format!(
            "[[values]]\nplugin = \"configprobe\"\nname = \"greeting\"\nvalue = \"{greeting}\"\n"
        )
    };
    std::fs::write(&config, values("before")).unwrap();
    let s = Options::default()
        .plugin(plugins::CONFIGPROBE)
        .file(
            "configprobe.toml",
            b"[[config]]\nname = \"greeting\"\ndefault = \"hello\"\n",
        )
        .flag("--config", config.display())
        .flag("--kv", redis.url())
        .flag("--processes", 3)
        .flag("--workers", 2)
        .start();
    s.wait_for_log_count("joined the cluster", 3);
    // Each on a connection of its own, which the kernel gives to any of the processes.
    let greetings = || -> std::collections::BTreeSet<String> {
        (0..60)
            .map(|_| {
                let r = s.request(
                    b"GET /configprobe/get?name=greeting HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                );
                assert_eq!(r.status, 200);
                r.text()
            })
            .collect()
    };
    assert_eq!(greetings(), ["before".to_owned()].into());
    // A SIGHUP with no file changed (the files are watched too): each child says it read
    // its values again because of it.
    s.signal("HUP");
    s.wait_for_log_count("plugins' values read again (SIGHUP)", 3);
    // A changed value then reaches every process (each reloads its plugins with it, as a
    // new version, so the answers turn over as the reloads land).
    std::fs::write(&config, values("after")).unwrap();
    s.signal("HUP");
    let started = Instant::now();
    loop {
        let seen = greetings();
        if seen == ["after".to_owned()].into() {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "{seen:?}\n{}", s.log());
    }
    assert_eq!(children(&s).len(), 3, "{}", s.log());
}

// See: issue 19: `--processes` without a shared store is refused with the reason.
#[test]
fn processes_without_a_shared_store_are_refused() {
    let out = std::process::Command::new(crate::harness::ankh_bin())
        .args([
            "serve",
            "--processes",
            "2",
            "--kv",
            "memory",
            "--print-config",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--kv redis://"), "{err}");
}

/// The ticks the job probe ran, `(due_ms, times)`, and the runs it counted. Asked on a new
/// connection each time, again if it lands on a process as it is killed.
fn job_ticks(addr: SocketAddr) -> (Vec<(u64, u64)>, u64) {
    let started = Instant::now();
    let body = loop {
        let answer = agent()
            .get(&format!("http://{addr}/jobsprobe/ticks"))
            .call()
            .and_then(|r| r.into_body().read_to_string());
        match answer {
            Ok(body) => break body,
            Err(e) => assert!(started.elapsed() < PATIENCE, "{e}"),
        }
    };
    crate::harness::job_ticks(&body)
}

// See: issue 36, "Exactly one run per tick across processes": three processes on one Redis
// compute the same ticks and claim each in Redis; one killed with -9 leaves the ticks to the
// others (and to itself, started again).
#[test]
fn three_processes_run_each_tick_once_even_when_one_is_killed() {
    let Some(redis) = Redis::start("ticks") else {
        return;
    };
    let mut s = Options::default()
        .plugin(plugins::JOBSPROBE)
        .file(
            "jobsprobe.toml",
            b"[[schedule]]\nname = \"count\"\nevery = \"250ms\"\n",
        )
        .flag("--kv", redis.url())
        .flag("--processes", 3)
        .flag("--workers", 2)
        .start();
    s.wait_for_log_count("schedule count of plugin `jobsprobe`: every 250ms", 3);
    let addr = s.addr;
    let wait_runs = |n: u64| {
        let started = Instant::now();
        loop {
            let (_, runs) = job_ticks(addr);
            if runs >= n {
                return runs;
            }
            assert!(started.elapsed() < PATIENCE, "the job ran {runs} times");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_runs(8);
    let children = children(&s);
    assert_eq!(children.len(), 3, "{}", s.log());
    signal(children[0], "KILL");
    let at_kill = wait_runs(0);
    wait_runs(at_kill + 12);
    s.wait_for_log("starting it again");
    let (ticks, runs) = job_ticks(addr);
    for (due, n) in &ticks {
        assert_eq!(*n, 1, "tick {due} ran {n} times: {ticks:?}");
    }
    // The job counts its run, then its tick: the process killed with -9 may have died
    // between the two writes (CI saw it once), and a run going on as the probe reads may be
    // between them too, so up to two runs may have no tick.
    let recorded = ticks.len() as u64;
    assert!(
        (recorded..=recorded + 2).contains(&runs),
        "{runs} runs, {recorded} ticks: {ticks:?}"
    );
    // Every tick from the first to the last ran, but for the one the killed process may
    // have claimed as it died, and two a loaded machine may have let pass unclaimed.
    let (first, last) = (ticks[0].0, ticks[ticks.len() - 1].0);
    let expected = (last - first) / 250 + 1;
    let missing = expected - ticks.len() as u64;
    assert!(
        missing <= 3,
        "{missing} of {expected} ticks missing: {ticks:?}"
    );
    s.signal("TERM");
    assert!(s.wait_exit().success(), "{}", s.log());
}
