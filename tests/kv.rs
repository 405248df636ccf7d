//! Plugin state that survives (issue 14): the durable key-value store, its richer interface,
//! `wasi:keyvalue`, plugins built against 0.1.0, and what happens on a crash, a full disk, a
//! locked or corrupt database. Every test runs the real binary on real files.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::harness::{Options, PATIENCE, TempDir, TestServer, ankh_bin, plugins};

/// One request on a fresh connection: `(status, body)`.
fn call(s: &TestServer, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    head.extend_from_slice(body);
    let resp = s.request(&head);
    (resp.status, resp.text())
}

fn kvprobe(data: &Path) -> TestServer {
    Options::default()
        .plugin(plugins::KVPROBE)
        .data_dir(data)
        .start()
}

// See: issue 14, "The examples": todo keeps its items across a restart.
#[test]
fn todo_keeps_its_items_across_a_restart() {
    let data = TempDir::new("todo-data");
    let mut s = Options::default()
        .plugin(plugins::TODO)
        .data_dir(data.path())
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = crate::metrics::admin_addr(&s);
    for title in ["milk", "eggs", "bread"] {
        let (status, _) = call(
            &s,
            "POST",
            "/todo/items",
            format!("{{\"title\":\"{title}\"}}").as_bytes(),
        );
        assert_eq!(status, 201);
    }
    assert_eq!(call(&s, "DELETE", "/todo/items/2", b"").0, 204);
    // Three ids, three items, one delete: seven writes, each committed before its answer.
    let scrape = crate::metrics::scrape(admin);
    let value = |name| crate::metrics::value(&scrape, name, &[]);
    assert_eq!(value("ankh_kv_writes_total"), 7.0);
    assert!((1.0..=7.0).contains(&value("ankh_kv_commits_total")));
    assert_eq!(value("ankh_kv_unavailable_total"), 0.0);
    s.signal("TERM");
    assert!(s.wait_exit().success());
    let s = Options::default()
        .plugin(plugins::TODO)
        .data_dir(data.path())
        .start();
    let (status, body) = call(&s, "GET", "/todo/items", b"");
    assert_eq!(status, 200);
    let items: serde_json::Value = serde_json::from_str(&body).unwrap();
    let titles: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["milk", "bread"]);
    // Ids carry on from the counter, which survived too.
    let (_, body) = call(&s, "POST", "/todo/items", b"{\"title\":\"jam\"}");
    assert!(body.contains("\"id\":4"), "{body}");
}

// See: issue 14: `--kv memory` keeps today's behaviour, and file is the default.
#[test]
fn the_memory_store_forgets_and_the_file_store_is_the_default() {
    let data = TempDir::new("memory-data");
    for (backend, kept) in [("memory", false), ("file", true)] {
        let start = || {
            let mut o = Options::default()
                .plugin(plugins::KVPROBE)
                .data_dir(data.path());
            if backend == "memory" {
                o = o.flag("--kv", "memory");
            }
            o.start()
        };
        let mut s = start();
        assert_eq!(
            call(&s, "PUT", "/kvprobe/set?key=k", backend.as_bytes()).0,
            204
        );
        s.signal("TERM");
        assert!(s.wait_exit().success());
        let s = start();
        let expected = if kept {
            (200, backend.to_owned())
        } else {
            (404, "absent".to_owned())
        };
        assert_eq!(
            call(&s, "GET", "/kvprobe/get?key=k", b""),
            expected,
            "{backend}"
        );
    }
    assert!(data.path().join("kv.redb").is_file());
}

// See: issue 14: a plugin built against 0.1.0 still loads and works (a fixture bound to the
// frozen 0.1.0 WIT, with wit-bindgen and no SDK).
#[test]
fn a_plugin_built_against_0_1_0_runs_unchanged() {
    let data = TempDir::new("legacy-data");
    let s = Options::default()
        .plugin(plugins::LEGACY010)
        .data_dir(data.path())
        .start();
    assert_eq!(s.get("/legacy010/set?key=a&value=1"), (200, "ok".into()));
    assert_eq!(s.get("/legacy010/set?key=b&value=2"), (200, "ok".into()));
    assert_eq!(s.get("/legacy010/get?key=a"), (200, "1".into()));
    assert_eq!(s.get("/legacy010/incr?key=a").1, "2");
    assert_eq!(s.get("/legacy010/incr?key=b").1, "3");
    assert_eq!(s.get("/legacy010/list?prefix="), (200, "a,b".into()));
    assert_eq!(s.get("/legacy010/del?key=a").1, "true");
    assert_eq!(s.get("/legacy010/del?key=a").1, "false");
    assert_eq!(s.get("/legacy010/get?key=a").0, 404);
    // http.respond and log, through their 0.1.0 names.
    assert_eq!(s.get("/legacy010/early"), (200, "early".into()));
    s.wait_for_log("after respond");
    // A WebSocket through the 0.1.0 exports and imports.
    let (mut ws, _) = tungstenite::connect(format!("ws://{}/legacy010/ws", s.addr)).unwrap();
    ws.send(tungstenite::Message::text("echo me")).unwrap();
    assert_eq!(ws.read().unwrap().into_text().unwrap().as_str(), "echo me");
    // The same namespace a 0.2.0 plugin of that name would see, on disk.
    assert!(data.path().join("kv.redb").is_file());
    // `ankh check` says which world it targets.
    let out = Command::new(ankh_bin())
        .args(["check", plugins::LEGACY010, "--no-cache"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("world:    ankh:plugin@0.1.0"), "{report}");
}

// See: issue 34: a plugin built against 0.2.0 (the frozen WIT, with wit-bindgen and no SDK)
// still loads on the 0.3.0 host, is called through its packed entry point, and reaches every
// 0.2.0 import.
#[test]
fn a_plugin_built_against_0_2_0_runs_unchanged() {
    let s = Options::default().plugin(plugins::LEGACY020).start();
    assert_eq!(s.get("/legacy020/how"), (200, "packed".into()));
    assert_eq!(s.get("/legacy020/set?key=a&value=1"), (200, "ok".into()));
    assert_eq!(s.get("/legacy020/set?key=b&value=2"), (200, "ok".into()));
    assert_eq!(s.get("/legacy020/get?key=a"), (200, "1".into()));
    assert_eq!(s.get("/legacy020/get?key=z").0, 404);
    assert_eq!(s.get("/legacy020/page?limit=1"), (200, "a|more".into()));
    assert_eq!(s.get("/legacy020/page?limit=5"), (200, "a,b".into()));
    // 0.2.0's own error type, converted from the current one.
    let (status, body) = s.get("/legacy020/bad-ttl");
    assert_eq!(status, 400);
    assert!(body.starts_with("Error::Invalid("), "{body}");
    assert_eq!(s.get("/legacy020/early"), (200, "early".into()));
    s.wait_for_log("after respond");
    let (mut ws, _) = tungstenite::connect(format!("ws://{}/legacy020/ws", s.addr)).unwrap();
    ws.send(tungstenite::Message::text("echo me")).unwrap();
    assert_eq!(ws.read().unwrap().into_text().unwrap().as_str(), "echo me");
    let out = Command::new(ankh_bin())
        .args(["check", plugins::LEGACY020, "--no-cache"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains(
            "world:    ankh:plugin@0.2.0 (requests as two buffers, answers as one: packed-handler)"
        ),
        "{report}"
    );
}

// See: issue 14: a component written against wasi:keyvalue (store, atomics, batch), built with
// wit-bindgen directly, runs unmodified on the plugin's own store.
#[test]
fn a_wasi_keyvalue_component_runs_on_its_own_store() {
    let data = TempDir::new("wasikv-data");
    let start = || {
        Options::default()
            .plugin(plugins::WASIKV)
            .plugin(plugins::KVPROBE)
            .data_dir(data.path())
            .start()
    };
    let mut s = start();
    assert_eq!(s.get("/wasikv/set?key=x&value=hello"), (200, "ok".into()));
    assert_eq!(s.get("/wasikv/get?key=x"), (200, "hello".into()));
    assert_eq!(s.get("/wasikv/exists?key=x").1, "true");
    assert_eq!(s.get("/wasikv/incr?key=n&delta=5").1, "5");
    assert_eq!(s.get("/wasikv/incr?key=n&delta=2").1, "7");
    assert_eq!(s.get("/wasikv/batch"), (200, "a=1,b=2,c=-,a:false".into()));
    assert_eq!(s.get("/wasikv/del?key=x").1, "ok");
    assert_eq!(s.get("/wasikv/exists?key=x").1, "false");
    // Only its own store: another plugin's name opens a bucket of wasikv's own, and a name
    // no bucket can have is no store at all.
    assert_eq!(s.get("/wasikv/open?name=kvprobe"), (200, "ok".into()));
    let (status, body) = s.get(&format!("/wasikv/open?name={}", "x".repeat(65)));
    assert_eq!(status, 500);
    assert!(body.contains("NoSuchStore"), "{body}");
    assert_eq!(
        s.get("/kvprobe/get?key=n").0,
        404,
        "another plugin saw the key"
    );
    // Cursor paging over more than a page (1000 keys).
    assert_eq!(s.get("/wasikv/fill?n=2500"), (200, "ok".into()));
    let (status, body) = s.get("/wasikv/keys");
    assert_eq!(status, 200);
    let mut lines = body.lines();
    // 2500 filled, plus `b` and `n`.
    assert_eq!(lines.next(), Some("3 2502"));
    let keys: Vec<&str> = lines.collect();
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(keys, sorted, "keys in order, none twice");
    // Durable like the rest.
    s.signal("TERM");
    assert!(s.wait_exit().success());
    let s = start();
    assert_eq!(s.get("/wasikv/incr?key=n&delta=1").1, "8");
}

// See: issue 14: expired keys are invisible at once and reclaimed in the background.
#[test]
fn expired_keys_vanish_and_their_space_is_reclaimed() {
    let data = TempDir::new("ttl-data");
    let s = Options::default()
        .plugin(plugins::KVPROBE)
        .file("kvprobe.toml", b"[limits]\nkv_max_bytes = 10000\n")
        .data_dir(data.path())
        .start();
    assert_eq!(
        call(&s, "PUT", "/kvprobe/set?key=long&ttl_ms=600000", b"kept").0,
        204
    );
    assert_eq!(
        call(&s, "PUT", "/kvprobe/set?key=short&ttl_ms=50", b"gone").0,
        204
    );
    let started = Instant::now();
    while call(&s, "GET", "/kvprobe/get?key=short", b"").0 != 404 {
        assert!(started.elapsed() < PATIENCE, "the key never expired");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(call(&s, "GET", "/kvprobe/exists?key=short", b"").1, "false");
    assert_eq!(
        call(&s, "GET", "/kvprobe/list?prefix=", b"").1,
        "{\"cursor\":null,\"keys\":[\"long\"]}"
    );
    // Fill the quota with short-lived keys: the next write is refused, until the sweeper has
    // reclaimed the expired ones.
    let value = vec![b'v'; 4000];
    assert_eq!(
        call(&s, "PUT", "/kvprobe/set?key=f1&ttl_ms=300", &value).0,
        204
    );
    assert_eq!(
        call(&s, "PUT", "/kvprobe/set?key=f2&ttl_ms=300", &value).0,
        204
    );
    let (status, body) = call(&s, "PUT", "/kvprobe/set?key=f3", &value);
    assert_eq!((status, body.as_str()), (507, "kv error: Full"));
    let started = Instant::now();
    while call(&s, "PUT", "/kvprobe/set?key=f3", &value).0 != 204 {
        assert!(
            started.elapsed() < PATIENCE,
            "expired keys were never reclaimed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        call(&s, "GET", "/kvprobe/get?key=long", b""),
        (200, "kept".into())
    );
}

// See: issue 14: N clients racing compare-and-swap on one key: exactly one wins per round.
#[test]
fn compare_and_swap_races_have_exactly_one_winner_per_round() {
    let data = TempDir::new("cas-data");
    let s = Arc::new(kvprobe(data.path()));
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 25;
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let s = s.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut wins = Vec::new();
                for round in 0..ROUNDS {
                    // Round 0 claims an absent key; every later round swaps from the value
                    // round r - 1 wrote, which every client knows.
                    let path = match round {
                        0 => "/kvprobe/cas?key=race".to_owned(),
                        r => format!("/kvprobe/cas?key=race&expected=round{}", r - 1),
                    };
                    barrier.wait();
                    let (status, body) =
                        call(&s, "POST", &path, format!("round{round}").as_bytes());
                    assert_eq!(status, 200, "{body}");
                    if body == "true" {
                        wins.push(round);
                    }
                    barrier.wait();
                }
                (c, wins)
            })
        })
        .collect();
    let mut winners = [0usize; ROUNDS];
    for t in threads {
        let (_, wins) = t.join().unwrap();
        for round in wins {
            winners[round] += 1;
        }
    }
    assert_eq!(winners, [1; ROUNDS]);
    assert_eq!(
        call(&s, "GET", "/kvprobe/get?key=race", b""),
        (200, format!("round{}", ROUNDS - 1))
    );
}

// See: issue 14: a batch is atomic: refused whole, and never seen half-written.
#[test]
fn batches_are_all_or_nothing() {
    let data = TempDir::new("batch-data");
    let s = Options::default()
        .plugin(plugins::KVPROBE)
        .file("kvprobe.toml", b"[limits]\nkv_max_bytes = 100000\n")
        .data_dir(data.path())
        .start();
    let s = Arc::new(s);
    // Over the quota as a whole: refused, and none of it stored.
    let big = "x".repeat(40_000);
    let batch = format!("{{\"one\":\"{big}\",\"two\":\"{big}\",\"three\":\"{big}\"}}");
    assert_eq!(
        call(&s, "POST", "/kvprobe/set-many", batch.as_bytes()),
        (507, "kv error: Full".into())
    );
    for key in ["one", "two", "three"] {
        assert_eq!(
            call(&s, "GET", &format!("/kvprobe/exists?key={key}"), b"").1,
            "false"
        );
    }
    // A writer sets a and b together; readers read them together and must always agree.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, done) = (s.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                    let (status, body) = call(&s, "POST", "/kvprobe/get-many", b"[\"a\",\"b\"]");
                    assert_eq!(status, 200);
                    let pair: Vec<Option<String>> = serde_json::from_str(&body).unwrap();
                    assert_eq!(pair[0], pair[1], "a batch was seen half-written");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for i in 0..200 {
        let batch = format!("{{\"a\":\"{i}\",\"b\":\"{i}\"}}");
        assert_eq!(
            call(&s, "POST", "/kvprobe/set-many", batch.as_bytes()).0,
            204
        );
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    // delete-many is atomic too, and counts what existed.
    assert_eq!(
        call(
            &s,
            "POST",
            "/kvprobe/delete-many",
            b"[\"a\",\"b\",\"nope\"]"
        )
        .1,
        "2"
    );
    assert_eq!(
        call(&s, "POST", "/kvprobe/get-many", b"[\"a\",\"b\"]").1,
        "[null,null]"
    );
}

// See: issue 14: cursor paging over 100,000 keys, and the per-plugin limits on the file
// backend (key 1 KiB, value 1 MiB, 100,000 keys), and a hostile caller's out-of-range asks.
#[test]
fn paging_over_100000_keys_and_every_limit_on_the_file_store() {
    let data = TempDir::new("paging-data");
    let s = kvprobe(data.path());
    assert_eq!(
        call(&s, "POST", "/kvprobe/fill?prefix=k&n=100000", b""),
        (200, "100000".into())
    );
    let mut keys = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/kvprobe/list?prefix=k&limit=1000&cursor={c}"),
            None => "/kvprobe/list?prefix=k&limit=1000".to_owned(),
        };
        let (status, body) = call(&s, "GET", &path, b"");
        assert_eq!(status, 200, "{body}");
        let page: serde_json::Value = serde_json::from_str(&body).unwrap();
        let page_keys = page["keys"].as_array().unwrap();
        assert!(page_keys.len() <= 1000);
        keys.extend(page_keys.iter().map(|k| k.as_str().unwrap().to_owned()));
        pages += 1;
        match page["cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 100);
    assert_eq!(keys.len(), 100_000);
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
    assert_eq!(
        (keys[0].as_str(), keys[99_999].as_str()),
        ("k00000000", "k00099999")
    );
    // A page never exceeds the host's cap, whatever the plugin asks.
    let (_, body) = call(&s, "GET", "/kvprobe/list?prefix=k&limit=4294967295", b"");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["keys"].as_array().unwrap().len(), 1000);
    // The namespace holds 100,000 keys: one more is refused, a replacement is not.
    assert_eq!(
        call(&s, "PUT", "/kvprobe/set?key=one-more", b"x"),
        (507, "kv error: Full".into())
    );
    assert_eq!(
        call(&s, "PUT", "/kvprobe/set?key=k00000007", b"replaced").0,
        204
    );
    assert_eq!(
        call(&s, "DELETE", "/kvprobe/del?key=k00000000", b"").1,
        "true"
    );
    // Key and value sizes, and a batch of too many keys.
    let long_key = "k".repeat(1025);
    assert_eq!(
        call(&s, "PUT", &format!("/kvprobe/set?key={long_key}"), b"x"),
        (413, "kv error: TooLarge".into())
    );
    let mib = vec![b'v'; 1 << 20];
    assert_eq!(call(&s, "PUT", "/kvprobe/set?key=mib", &mib).0, 204);
    let over = vec![b'v'; (1 << 20) + 1];
    assert_eq!(
        call(&s, "PUT", "/kvprobe/set?key=over", &over),
        (413, "kv error: TooLarge".into())
    );
    let many: Vec<String> = (0..1001).map(|i| format!("k{i:08}")).collect();
    assert_eq!(
        call(
            &s,
            "POST",
            "/kvprobe/get-many",
            serde_json::to_string(&many).unwrap().as_bytes()
        ),
        (413, "kv error: TooLarge".into())
    );
    assert_eq!(call(&s, "GET", "/kvprobe/count?prefix=k", b"").1, "99999");
}

/// A client that writes as fast as it can until the server goes away, and remembers what was
/// acknowledged.
#[derive(Debug, Default)]
struct Acked {
    /// Increments of this client's counter answered 2xx.
    increments: u64,
    /// An increment was sent and not answered (it may or may not have been applied).
    unanswered_increment: bool,
    /// `(key, value)` of every set answered 2xx.
    sets: Vec<(String, String)>,
}

fn hammer(addr: std::net::SocketAddr, client: usize, trial: usize) -> Acked {
    let mut acked = Acked::default();
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return acked;
    };
    let _ = stream.set_read_timeout(Some(PATIENCE));
    let Ok(read_half) = stream.try_clone() else {
        return acked;
    };
    let mut reader = BufReader::new(read_half);
    for n in 0.. {
        let incr = n % 2 == 0;
        let (request, set) = if incr {
            (
                format!(
                    "POST /kvprobe/incr?key=counter{client} HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
                ),
                None,
            )
        } else {
            let key = format!("set-{trial}-{client}-{n}");
            let value = format!("v{n}");
            (
                format!(
                    "PUT /kvprobe/set?key={key} HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{value}",
                    value.len()
                ),
                Some((key, value)),
            )
        };
        if stream.write_all(request.as_bytes()).is_err() {
            acked.unanswered_increment = incr;
            return acked;
        }
        // A killed server resets or closes the connection: that ends this client.
        let answer = read_status(&mut reader);
        match answer {
            Ok(status) if (200..300).contains(&status) => match set {
                Some(kv) => acked.sets.push(kv),
                None => acked.increments += 1,
            },
            Ok(status) => panic!("a write was answered {status} before the kill"),
            Err(_) => {
                acked.unanswered_increment = incr;
                return acked;
            }
        }
    }
    acked
}

/// Reads one response and returns its status; any failure (a reset, a close) is an error.
fn read_status(r: &mut impl BufRead) -> std::io::Result<u16> {
    let broken = || std::io::Error::other("not a complete response");
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(broken)?;
    let mut length = 0usize;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(broken());
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().map_err(|_| broken())?;
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    Ok(status)
}

// See: issue 14, crash safety: concurrent increments and sets, `kill -9` at random moments (20
// trials), restart: every acknowledged write is there and every counter equals its
// acknowledged increments (plus at most the one increment in flight at the kill).
#[test]
fn a_kill_9_at_any_moment_loses_no_acknowledged_write() {
    const CLIENTS: usize = 4;
    const TRIALS: usize = 20;
    let data = TempDir::new("crash-data");
    let mut increments = [0u64; CLIENTS];
    let mut in_flight = [0u64; CLIENTS];
    let mut sets: Vec<(String, String)> = Vec::new();
    // A small, seeded generator for the kill moments (no clock races: the moment only varies
    // how much was written).
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for trial in 0..TRIALS {
        let mut s = kvprobe(data.path());
        // Proof the writes land before the kill: wait for the first acknowledged write.
        let addr = s.addr;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| std::thread::spawn(move || hammer(addr, c, trial)))
            .collect();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let writes_before_kill = 20 + seed % 400;
        let started = Instant::now();
        loop {
            let (_, body) = call(&s, "POST", "/kvprobe/incr?key=progress", b"");
            if body.parse::<u64>().unwrap_or(0) % writes_before_kill == 0 {
                break;
            }
            assert!(started.elapsed() < PATIENCE);
        }
        s.signal("KILL");
        let status = s.wait_exit();
        assert!(!status.success(), "SIGKILL ends the process: {status:?}");
        for (c, client) in clients.into_iter().enumerate() {
            let acked = client.join().unwrap();
            increments[c] += acked.increments;
            in_flight[c] += u64::from(acked.unanswered_increment);
            sets.extend(acked.sets);
        }
        // Restart on the same data and check everything acknowledged so far.
        let s = kvprobe(data.path());
        for c in 0..CLIENTS {
            let (status, body) = call(&s, "GET", &format!("/kvprobe/get?key=counter{c}"), b"");
            let value: u64 = if status == 404 {
                0
            } else {
                body.parse().unwrap()
            };
            assert!(
                value >= increments[c] && value <= increments[c] + in_flight[c],
                "trial {trial}: counter{c} is {value}, {} increments were acknowledged ({} in flight at kills)",
                increments[c],
                in_flight[c]
            );
            // What was in flight is now settled either way: count what the store holds.
            in_flight[c] -= value - increments[c];
            increments[c] = value;
        }
        let keys: Vec<&str> = sets.iter().map(|(k, _)| k.as_str()).collect();
        for chunk in keys.chunks(1000) {
            let (status, body) = call(
                &s,
                "POST",
                "/kvprobe/get-many",
                serde_json::to_string(chunk).unwrap().as_bytes(),
            );
            assert_eq!(status, 200);
            let values: Vec<Option<String>> = serde_json::from_str(&body).unwrap();
            for (key, value) in chunk.iter().zip(values) {
                let expected = sets.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
                assert_eq!(value, expected, "trial {trial}: acknowledged {key} lost");
            }
        }
        drop(s);
    }
    assert!(
        increments.iter().sum::<u64>() > 0 && !sets.is_empty(),
        "the clients never wrote"
    );
    eprintln!(
        "{TRIALS} kills: {} increments and {} sets acknowledged, none lost",
        increments.iter().sum::<u64>(),
        sets.len()
    );
}

/// Mounts a tmpfs of `size` at `dir`, or says why it cannot (not root, no CAP_SYS_ADMIN).
fn tmpfs(dir: &Path, options: &str) -> Result<Mount, String> {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", options, "tmpfs"])
        .arg(dir)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(Mount(dir.to_owned()))
}

/// Unmounts on drop.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A tmpfs for the full-disk tests, or a skip outside CI when this machine cannot mount one.
fn tmpfs_or_skip(dir: &Path, options: &str) -> Option<Mount> {
    match tmpfs(dir, options) {
        Ok(m) => Some(m),
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: cannot mount a tmpfs here ({why}); run as root (CI does)");
            None
        }
        Err(why) => panic!("cannot mount a tmpfs: {why}"),
    }
}

// See: issue 14: a full disk is a clear error to the plugin and in the log, nothing already
// acknowledged is lost, and writes work again once there is room.
#[test]
fn a_full_disk_is_an_error_and_loses_nothing() {
    let base = TempDir::new("full-disk");
    let data = base.path().join("mnt");
    let Some(_mount) = tmpfs_or_skip(&data, "size=16m") else {
        return;
    };
    let mut s = kvprobe(&data);
    let value = vec![b'v'; 64 * 1024];
    for i in 0..20 {
        assert_eq!(
            call(&s, "PUT", &format!("/kvprobe/set?key=before{i}"), &value).0,
            204
        );
    }
    // Fill what is left of the disk.
    let filler = data.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", filler.display()))
        .output();
    let mut refused = None;
    for i in 0..200 {
        let (status, body) = call(&s, "PUT", &format!("/kvprobe/set?key=during{i}"), &value);
        if status != 204 {
            refused = Some((status, body));
            break;
        }
    }
    let (status, body) = refused.expect("writes kept succeeding on a full disk");
    eprintln!("a full disk answers {status} {body}");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("kv error: Unavailable(") && body.contains("space"),
        "{body}"
    );
    s.wait_for_log("the key-value store failed");
    // Room again: the store reopens and writes succeed.
    std::fs::remove_file(&filler).unwrap();
    let started = Instant::now();
    while call(&s, "PUT", "/kvprobe/set?key=after", b"ok").0 != 204 {
        assert!(
            started.elapsed() < PATIENCE,
            "the store never came back:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    s.wait_for_log("the key-value store works again");
    s.signal("TERM");
    assert!(s.wait_exit().success());
    let s = kvprobe(&data);
    for i in 0..20 {
        let (status, body) = call(&s, "GET", &format!("/kvprobe/get?key=before{i}"), b"");
        assert_eq!((status, body.len()), (200, value.len()), "before{i} lost");
    }
    assert_eq!(
        call(&s, "GET", "/kvprobe/get?key=after", b""),
        (200, "ok".into())
    );
}

fn serve_error(data: &Path) -> String {
    let plugins = TempDir::new("refused-plugins");
    let out = Command::new(ankh_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--plugins"])
        .arg(plugins.path())
        .arg("--data-dir")
        .arg(data)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        stderr
            .trim()
            .lines()
            .filter(|l| l.starts_with("error:"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

// See: issue 14: a locked database (a second ankh on the same directory), a corrupt one, and
// a read-only or unusable data directory each stop the start with one line and exit 1; none
// starts empty.
#[test]
fn a_locked_corrupt_or_read_only_store_refuses_to_start() {
    let data = TempDir::new("locked-data");
    let first = kvprobe(data.path());
    assert_eq!(call(&first, "PUT", "/kvprobe/set?key=k", b"kept").0, 204);
    let err = serve_error(data.path());
    assert!(err.contains("is in use by another ankh process"), "{err}");
    drop(first);

    let corrupt = TempDir::new("corrupt-data");
    std::fs::write(corrupt.path().join("kv.redb"), vec![0x5a; 64 * 1024]).unwrap();
    let err = serve_error(corrupt.path());
    assert!(err.contains("kv.redb"), "{err}");
    assert_eq!(
        std::fs::read(corrupt.path().join("kv.redb")).unwrap(),
        vec![0x5a; 64 * 1024],
        "the corrupt file was changed"
    );

    // A file where the directory should be.
    let file = TempDir::new("file-data");
    let not_dir = file.path().join("data");
    std::fs::write(&not_dir, b"").unwrap();
    let err = serve_error(&not_dir);
    assert!(err.contains("cannot create the data directory"), "{err}");

    // A read-only filesystem, with data already in it.
    let base = TempDir::new("ro-data");
    let mnt = base.path().join("mnt");
    let Some(_mount) = tmpfs_or_skip(&mnt, "size=16m") else {
        return;
    };
    let s = kvprobe(&mnt);
    assert_eq!(call(&s, "PUT", "/kvprobe/set?key=k", b"kept").0, 204);
    drop(s);
    let status = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(status.success());
    let err = serve_error(&mnt);
    assert!(
        err.contains("kv.redb") && err.contains("Read-only"),
        "{err}"
    );
    let status = Command::new("mount")
        .args(["-o", "remount,rw"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(status.success());
    let s = kvprobe(&mnt);
    assert_eq!(
        call(&s, "GET", "/kvprobe/get?key=k", b""),
        (200, "kept".into())
    );
}

// See: issue 14, "The examples": the URL shortener: claim a code, redirect, count hits, expire.
#[test]
fn the_shorten_example_redirects_counts_and_expires() {
    let data = TempDir::new("shorten-data");
    let start = || {
        Options::default()
            .plugin(plugins::SHORTEN)
            .data_dir(data.path())
            .start()
    };
    let mut s = start();
    let (status, body) = call(
        &s,
        "POST",
        "/shorten",
        b"{\"url\":\"https://example.com/a?b=c\"}",
    );
    assert_eq!(status, 201, "{body}");
    let link: serde_json::Value = serde_json::from_str(&body).unwrap();
    let code = link["code"].as_str().unwrap().to_owned();
    assert_eq!(link["short"], format!("/shorten/{code}"));
    for _ in 0..2 {
        let resp = s.request(format!("GET /shorten/{code} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        assert_eq!(resp.status, 302);
        assert_eq!(resp.header("location"), Some("https://example.com/a?b=c"));
    }
    let stats = |s: &TestServer| {
        let (status, body) = call(s, "GET", &format!("/shorten/{code}/stats"), b"");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["hits"].clone()
    };
    assert_eq!(stats(&s), 2);
    // Not a URL, or not http(s): refused.
    assert_eq!(call(&s, "POST", "/shorten", b"javascript:alert(1)").0, 400);
    assert_eq!(
        call(&s, "POST", "/shorten", b"{\"url\":\"ftp://x\"}").0,
        400
    );
    // Survives a restart, hits included.
    s.signal("TERM");
    assert!(s.wait_exit().success());
    let s = start();
    assert_eq!(stats(&s), 2);
    // A link with a one-second life expires, and its counter with it.
    let (status, body) = call(&s, "POST", "/shorten?ttl_s=1", b"https://example.org/");
    assert_eq!(status, 201, "{body}");
    let short: serde_json::Value = serde_json::from_str(&body).unwrap();
    let short = short["short"].as_str().unwrap().to_owned();
    assert_eq!(call(&s, "GET", &short, b"").0, 302);
    let started = Instant::now();
    while call(&s, "GET", &short, b"").0 != 404 {
        assert!(started.elapsed() < PATIENCE, "the link never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(call(&s, "GET", &format!("{short}/stats"), b"").0, 404);
    // Deleting removes the link and its counter.
    assert_eq!(call(&s, "DELETE", &format!("/shorten/{code}"), b"").0, 204);
    assert_eq!(call(&s, "GET", &format!("/shorten/{code}"), b"").0, 404);
    assert_eq!(call(&s, "DELETE", &format!("/shorten/{code}"), b"").0, 404);
}

// See: issue 14, "every new host import is per plugin and bounded, with a test from a hostile
// plugin": through the raw WIT and through wasi:keyvalue, a plugin reaches no other store and
// gets nothing past a bound.
#[test]
fn a_hostile_plugin_reaches_no_other_store_and_every_call_is_bounded() {
    let data = TempDir::new("hostile-kv");
    let s = Options::default()
        .plugin(plugins::HOSTILE)
        .plugin(plugins::WASIKV)
        .plugin(plugins::KVPROBE)
        .data_dir(data.path())
        .start();
    assert_eq!(call(&s, "PUT", "/kvprobe/set?key=secret", b"mine").0, 204);
    let (status, body) = s.get("/hostile/kv-bounds");
    assert_eq!(status, 200, "{body}");
    let results: std::collections::HashMap<&str, &str> =
        body.lines().filter_map(|l| l.split_once('=')).collect();
    assert!(results["ttl0"].contains("Invalid"), "{body}");
    assert_eq!(results["page"], "Ok(1000)", "{body}");
    assert!(results["get-many"].contains("TooLarge"), "{body}");
    assert!(results["set-many"].contains("TooLarge"), "{body}");
    assert!(results["cursor"].contains("Invalid"), "{body}");
    // wasi:keyvalue: another plugin's name (or a path to it) opens a bucket of wasikv's own,
    // where the victim's key is not; a name no bucket can have is no store.
    for name in [
        "kvprobe",
        "../kvprobe",
        "kv/kvprobe",
        "hostile",
        "%00kvprobe%00",
    ] {
        let (status, body) = s.get(&format!("/wasikv/get?key=secret&bucket={name}"));
        assert_eq!(status, 404, "{name}: {body}");
    }
    let (status, body) = s.get(&format!("/wasikv/open?name={}", "k".repeat(65)));
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("NoSuchStore"), "{body}");
    let (status, body) = s.get("/wasikv/forge?cursor=1");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("unknown or too old"), "{body}");
    // Its own keys are its own: the victim's key is untouched and unseen.
    assert_eq!(s.get("/wasikv/get?key=secret").0, 404);
    assert_eq!(
        call(&s, "GET", "/kvprobe/get?key=secret", b""),
        (200, "mine".into())
    );
    assert_eq!(
        call(&s, "GET", "/kvprobe/exists?key=key00000", b"").1,
        "false"
    );
}

// See: issue 14: unmounting a plugin keeps its data; a later plugin of the same name sees it.
#[test]
fn an_unmounted_plugins_data_waits_for_its_return() {
    let data = TempDir::new("unmount-data");
    let s = kvprobe(data.path());
    assert_eq!(call(&s, "PUT", "/kvprobe/set?key=k", b"kept").0, 204);
    std::fs::remove_file(s.plugins_dir().join("kvprobe.wasm")).unwrap();
    s.wait_for_log("unmounted: the file was removed");
    assert_eq!(
        call(&s, "GET", "/kvprobe/get?key=k", b"").0,
        404,
        "still mounted"
    );
    s.install("kvprobe", plugins::KVPROBE);
    let (status, body) = s.eventually("/kvprobe/get?key=k", |status, _| status == 200);
    assert_eq!((status, body.as_str()), (200, "kept"));
}
