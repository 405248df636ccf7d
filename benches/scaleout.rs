//! Scale-out through Redis (issue 19), each figure beside its baseline in the same run
//! (`cargo bench -p benches --bench scaleout`, after `cargo build --release -p ankh`; needs
//! `redis-server`):
//!
//! 1. 100,000 idle WebSockets on one machine: `ankh serve --processes 6` (six processes on one
//!    port through SO_REUSEPORT, sharing a Redis), every connection subscribed to one topic by
//!    the `bench` plugin. The clients live in separate processes of this benchmark (one
//!    process may hold at most 20,000 descriptors here) and connect from several loopback
//!    source addresses (127.0.0.2, ...), so that ephemeral ports do not run out. Reported: the
//!    time to connect them, the ankh processes' RSS per connection, the CPU they use while
//!    idle, and the time from one publish until the last of the 100,000 has it.
//! 2. Redis's cost: publish latency (p50/p99) at 1,000 messages/s to a subscriber on another
//!    process, beside the same to a subscriber on the publisher's own process; and kv
//!    `increment` req/s through Redis beside the embedded file store.
//!
//! `ANKH_SCALEOUT_CONNECTIONS` changes the 100,000 (e.g. 20000 for a quick run).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ankh_test_support::harness::{cpu_ticks, rss_kib};
use ankh_test_support::services::Redis;

const PROCESSES: usize = 6;
/// Publishes to all, one after another: the first also sets up every connection's send
/// buffer; the others are the steady state.
const PUBLISHES: usize = 3;
const CLIENT_PROCESSES: usize = 8;
/// Connections per loopback source address (each has ~28,000 ephemeral ports per server
/// port).
const PER_SOURCE: usize = 10_000;
/// The first source address: 127.0.0.20 (the other benches use the low ones).
const FIRST_SOURCE: usize = 20;

fn connections() -> usize {
    std::env::var("ANKH_SCALEOUT_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn main() {
    // A client process of part 1 (see `client_main`).
    if let Ok(spec) = std::env::var("ANKH_SCALEOUT_CLIENT") {
        client_main(&spec);
        return;
    }
    if Command::new("redis-server").arg("-v").output().is_err() {
        eprintln!("scaleout: redis-server is missing (apt-get install redis-server)");
        std::process::exit(1);
    }
    let plugin = std::path::Path::new(ankh_test_support::harness::plugins::BENCH);
    println!("{}", benches::machine());
    redis_overhead(plugin);
    hundred_thousand(plugin);
}

/// A `redis-server` on a free port without an append-only file, killed when dropped.
fn redis() -> Redis {
    Redis::start_volatile("scaleout").expect("redis-server (checked in main)")
}

/// A WebSocket handshake on `stream` to `/bench/ws`.
fn upgrade(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /bench/ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        .unwrap();
    // The 101's head, byte by byte: nothing after it may be taken from the socket.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
}

fn masked_text(payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x81, 0x80 | payload.len() as u8, 1, 2, 3, 4];
    frame.extend(
        payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ [1, 2, 3, 4][i % 4]),
    );
    frame
}

/// Reads unmasked server frames (under 126 bytes) until a data frame, and returns its
/// payload; control frames (a ping of the server's liveness check) are skipped.
fn read_text(r: &mut impl Read) -> Vec<u8> {
    loop {
        let mut head = [0u8; 2];
        r.read_exact(&mut head).unwrap();
        let mut payload = vec![0u8; usize::from(head[1] & 0x7f)];
        r.read_exact(&mut payload).unwrap();
        if head[0] & 0x08 == 0 {
            return payload;
        }
    }
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A client process: `ADDR,COUNT,FIRST_SOURCE_INDEX`. Opens COUNT WebSockets, prints
/// `ready`, then for each of [`PUBLISHES`] rounds reads one message from each connection and
/// prints `done N LAST_NS` (wall clock of the last arrival); then waits for its stdin to
/// close.
fn client_main(spec: &str) {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let parts: Vec<&str> = spec.split(',').collect();
    let addr: SocketAddr = parts[0].parse().unwrap();
    let count: usize = parts[1].parse().unwrap();
    let first: usize = parts[2].parse().unwrap();
    let mut clients: Vec<TcpStream> = (0..count)
        .map(|i| {
            let n = first + i;
            let source = FIRST_SOURCE + n / PER_SOURCE;
            let socket =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            let local: SocketAddr = format!("127.0.0.{source}:0").parse().unwrap();
            socket.bind(&local.into()).unwrap();
            socket.connect(&addr.into()).unwrap();
            let mut stream: TcpStream = socket.into();
            upgrade(&mut stream);
            stream
        })
        .collect();
    println!("ready");
    std::io::stdout().flush().unwrap();
    for c in &mut clients {
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    }
    for round in 0..PUBLISHES {
        let expected = format!("hello-all-{round}");
        let mut received = 0;
        let mut last = 0;
        // The clients are read in turn: a read returns at once when its message is already
        // there, so the time taken after each read bounds that message's arrival from above.
        for c in &mut clients {
            if read_text(c) == expected.as_bytes() {
                received += 1;
                last = last.max(wall_ns());
            }
        }
        println!("done {received} {last}");
        std::io::stdout().flush().unwrap();
    }
    let mut rest = String::new();
    let _ = std::io::stdin().read_to_string(&mut rest);
}

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// CPU ticks of the threads of `pids`, summed by thread name.
fn thread_ticks(pids: &[u32]) -> std::collections::HashMap<String, u64> {
    let mut by_name = std::collections::HashMap::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let path = task.path();
            let (Ok(name), Ok(stat)) = (
                std::fs::read_to_string(path.join("comm")),
                std::fs::read_to_string(path.join("stat")),
            ) else {
                continue;
            };
            // Fields after the parenthesised name; utime and stime are the 12th and 13th.
            let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
                continue;
            };
            let fields: Vec<&str> = rest.split(' ').collect();
            let field = |k: usize| fields.get(k).and_then(|f| f.parse::<u64>().ok());
            let ticks = field(11).unwrap_or(0) + field(12).unwrap_or(0);
            *by_name.entry(name.trim().to_owned()).or_insert(0) += ticks;
        }
    }
    by_name
}

/// Part 1: 100,000 idle WebSockets over six processes, and one publish to all of them.
fn hundred_thousand(plugin: &std::path::Path) {
    let total = connections();
    let redis = redis();
    let per_process_cap = (total / PROCESSES * 12 / 10 + 500).min(19_500);
    let ankh = benches::start_ankh(
        plugin,
        "bench.wasm",
        &[
            "--processes",
            &PROCESSES.to_string(),
            "--kv",
            &redis.url(),
            "--max-connections",
            &per_process_cap.to_string(),
            // These clients do not answer pings: one every 10 minutes, not every 30 s, so
            // none is closed for silence during the run (and idle means idle).
            "--ws-ping-interval-ms",
            "600000",
        ],
    );
    let pids = children(ankh.pid());
    assert_eq!(pids.len(), PROCESSES, "{}", ankh.log());
    // Warm every process: a connection each way, so instances exist before the baseline.
    let mut publisher = TcpStream::connect(ankh.addr).unwrap();
    upgrade(&mut publisher);
    std::thread::sleep(Duration::from_millis(500));
    let rss = |pids: &[u32]| pids.iter().map(|p| rss_kib(*p).unwrap_or(0)).sum::<u64>();
    let before = rss(&pids);

    let started = Instant::now();
    let per_client = total.div_ceil(CLIENT_PROCESSES);
    let mut clients: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..CLIENT_PROCESSES)
        .map(|k| {
            let first = k * per_client;
            let count = per_client.min(total - first.min(total));
            let mut child = Command::new(std::env::current_exe().unwrap())
                .env(
                    "ANKH_SCALEOUT_CLIENT",
                    format!("{},{count},{first}", ankh.addr),
                )
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            (child, out)
        })
        .collect();
    for (_, out) in &mut clients {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "a client process failed");
    }
    let connect_time = started.elapsed();
    // Idle: let the roster writes and timers settle, then measure memory and CPU.
    std::thread::sleep(Duration::from_secs(2));
    let after = rss(&pids);
    let per_conn = after.saturating_sub(before) as f64 * 1024.0 / total as f64;
    let ticks_before: u64 = pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).sum();
    let threads_before = thread_ticks(&pids);
    // Long enough for the 1/100 s clock ticks to resolve a fraction of a percent.
    let idle = Duration::from_secs(20);
    std::thread::sleep(idle);
    let ticks: u64 = pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).sum::<u64>() - ticks_before;
    // Clock ticks are 1/100 s on Linux.
    let idle_cpu = ticks as f64 / 100.0 / idle.as_secs_f64() * 100.0;
    let mut idle_threads: Vec<(String, u64)> = thread_ticks(&pids)
        .into_iter()
        .map(|(name, t)| {
            let was = threads_before.get(&name).copied().unwrap_or(0);
            (name, t.saturating_sub(was))
        })
        .filter(|(_, t)| *t > 0)
        .collect();
    idle_threads.sort_by_key(|(_, t)| std::cmp::Reverse(*t));

    // Publishes, one after another; every client must get each.
    let mut rounds = Vec::new();
    for round in 0..PUBLISHES {
        let sent = wall_ns();
        publisher
            .write_all(&masked_text(
                format!("publish:hello-all-{round}").as_bytes(),
            ))
            .unwrap();
        let (mut received, mut last) = (0usize, 0u128);
        for (_, out) in &mut clients {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.first(), Some(&"done"), "{line}");
            received += fields[1].parse::<usize>().unwrap();
            last = last.max(fields[2].parse().unwrap());
        }
        rounds.push((received, (last.saturating_sub(sent)) as f64 / 1e6));
    }
    println!();
    println!(
        "| {total} idle WebSockets, {PROCESSES} processes (--processes, SO_REUSEPORT) + Redis | value |"
    );
    println!("|---|---|");
    println!(
        "| connected and upgraded in | {:.1} s ({:.0}/s) |",
        connect_time.as_secs_f64(),
        total as f64 / connect_time.as_secs_f64()
    );
    println!(
        "| per process | {} |",
        pids.iter()
            .map(|p| format!("{} MiB", rss_kib(*p).unwrap_or(0) / 1024))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("| ankh RSS before / after (all processes) | {before} KiB / {after} KiB |");
    println!(
        "| RSS per idle WebSocket | {per_conn:.0} bytes ({:.1} KiB) |",
        per_conn / 1024.0
    );
    println!(
        "| CPU while idle (all processes, {} s) | {idle_cpu:.1}% of one core ({}) |",
        idle.as_secs(),
        idle_threads
            .iter()
            .map(|(name, t)| format!("{name}: {t} ticks"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| publishes: clients that got each | {} (of {total}) |",
        rounds
            .iter()
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| publishes: until the last client has it (first, then steady) | {} |",
        rounds
            .iter()
            .map(|(_, ms)| format!("{ms:.0} ms"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (mut child, _) in clients {
        drop(child.stdin.take());
        let _ = child.wait();
    }
    ankh.terminate();
    drop(redis);
}

/// Part 2: publish latency across processes, and kv increments through Redis.
fn redis_overhead(plugin: &std::path::Path) {
    let redis = redis();
    let a = benches::start_ankh(plugin, "bench.wasm", &["--kv", &redis.url()]);
    let b = benches::start_ankh(plugin, "bench.wasm", &["--kv", &redis.url()]);
    let file = benches::start_ankh(plugin, "bench.wasm", &[]);

    // A subscriber on A (the publisher's process) and one on B; the publisher on A.
    let open = |addr: SocketAddr| {
        let mut s = TcpStream::connect(addr).unwrap();
        upgrade(&mut s);
        s.set_nodelay(true).unwrap();
        s
    };
    let mut publisher = open(a.addr);
    let local = open(a.addr);
    let remote = open(b.addr);
    std::thread::sleep(Duration::from_millis(500));
    const MESSAGES: usize = 3_000;
    let origin = Instant::now();
    let reader = |mut s: TcpStream| {
        std::thread::spawn(move || {
            let mut lat = Vec::with_capacity(MESSAGES);
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            while lat.len() < MESSAGES {
                let payload = read_text(&mut s);
                let Some(sent) = std::str::from_utf8(&payload)
                    .ok()
                    .and_then(|t| t.strip_prefix("t"))
                    .and_then(|t| t.parse::<u64>().ok())
                else {
                    continue;
                };
                let now = origin.elapsed().as_micros() as u64;
                lat.push(now.saturating_sub(sent));
            }
            lat
        })
    };
    let (local_reader, remote_reader) = (reader(local), reader(remote));
    // 1,000 messages a second, paced on the clock; the publisher's own echo of each publish
    // (it is subscribed too) is drained by a thread.
    let mut drain = publisher.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while matches!(drain.read(&mut buf), Ok(n) if n > 0) {}
    });
    for i in 0..MESSAGES {
        let due = Duration::from_millis(i as u64);
        if let Some(wait) = due.checked_sub(origin.elapsed()) {
            std::thread::sleep(wait);
        }
        let stamp = origin.elapsed().as_micros();
        publisher
            .write_all(&masked_text(format!("publish:t{stamp}").as_bytes()))
            .unwrap();
    }
    let pct = |mut v: Vec<u64>, p: f64| {
        v.sort_unstable();
        v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
    };
    let local_lat = local_reader.join().unwrap();
    let remote_lat = remote_reader.join().unwrap();
    println!();
    println!("| publish at 1,000 msg/s, {MESSAGES} messages | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| subscriber on the publisher's process | {} µs | {} µs |",
        pct(local_lat.clone(), 0.5),
        pct(local_lat, 0.99)
    );
    println!(
        "| subscriber on another process (through Redis) | {} µs | {} µs |",
        pct(remote_lat.clone(), 0.5),
        pct(remote_lat, 0.99)
    );

    // kv increments: Redis against the embedded store, alternating.
    let round = Duration::from_secs(5);
    let (mut best_redis, mut best_file) = (0f64, 0f64);
    for _ in 0..2 {
        let r = benches::wrk(&format!("http://{}/bench/incr?key=k", a.addr), 64, round);
        best_redis = best_redis.max(r.rps);
        let f = benches::wrk(&format!("http://{}/bench/incr?key=k", file.addr), 64, round);
        best_file = best_file.max(f.rps);
    }
    println!();
    println!("| kv increment, wrk 64 connections, best of 2 × 5 s | req/s |");
    println!("|---|---|");
    println!("| --kv redis:// (a Lua script per increment) | {best_redis:.0} |");
    println!("| --kv file (embedded, a durable commit per increment) | {best_file:.0} |");
    println!("| ratio redis / file | {:.2} |", best_redis / best_file);
}
