//! WebSocket figures, each against a baseline in the same run (`cargo bench -p benches --bench
//! ws`, after `cargo build --release -p ankh`):
//!
//! 1. Echo round trips per second over 64 connections: ankh serving the `bench` plugin's
//!    `/bench/ws` against a native tokio-tungstenite echo server with as many runtime threads
//!    as the machine has cores. Same client, same message, measured alternately.
//! 2. 19,000 idle WebSocket connections held open: ankh's resident memory per connection.
//!    (19,000, not 20,000: on the machine these figures come from, a process may hold at most
//!    20,000 file descriptors and cannot raise that, and the client side lives in this one.)
//! 3. One publish to a topic all of them subscribe to: time until the last client has it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tungstenite::Message;

const CONNECTIONS: usize = 64;
const ROUND: Duration = Duration::from_secs(5);
const ROUNDS: usize = 2;
const IDLE_CONNECTIONS: usize = 19_000;

/// The `bench` plugin, built for wasm32-wasip2 in the plugins workspace.
fn bench_plugin() -> PathBuf {
    benches::build_example_plugins(Some("bench")).join("bench.wasm")
}

/// A native echo server: tokio-tungstenite on a multi-threaded runtime.
fn start_native(threads: usize) -> SocketAddr {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_io()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        rt.block_on(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                        return;
                    };
                    while let Some(Ok(msg)) = ws.next().await {
                        if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
    });
    addr
}

/// Echo round trips per second over `CONNECTIONS` connections for `ROUND`.
fn echo_rate(addr: SocketAddr, path: &str) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (stop, count) = (stop.clone(), count.clone());
            let url = format!("ws://{addr}{path}");
            std::thread::spawn(move || {
                let stream = TcpStream::connect(addr).unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut ws, _) = tungstenite::client(url, stream).unwrap();
                let payload = "0123456789abcdef0123456789abcdef";
                while !stop.load(Ordering::Relaxed) {
                    ws.send(Message::text(payload)).unwrap();
                    loop {
                        match ws.read().unwrap() {
                            Message::Text(_) => break,
                            _ => continue,
                        }
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
                let _ = ws.close(None);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300)); // connect and warm up
    let before = count.load(Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(ROUND);
    let done = count.load(Ordering::Relaxed) - before;
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    done as f64 / elapsed
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Opens a WebSocket to ankh's `/bench/ws` from source address 127.0.0.`source`.
fn open_raw(addr: SocketAddr, source: u8) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("127.0.0.{source}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    stream
        .write_all(b"GET /bench/ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 101"), "{line}");
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    stream
}

fn main() {
    // One descriptor per client connection: lift the soft limit to the hard one.
    let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(1024);
    assert!(
        limit as usize > IDLE_CONNECTIONS + 100,
        "a file descriptor limit of {limit} is too low for {IDLE_CONNECTIONS} connections"
    );
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let plugin = bench_plugin();

    // 1. Echo round trips, alternating so both see the same machine conditions. As many
    // workers as runtime threads: the comparison is thread for thread.
    let workers = std::env::var("ANKH_WS_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(cores);
    let ankh = benches::start_ankh(
        &plugin,
        "bench.wasm",
        &[
            "--workers",
            &workers.to_string(),
            "--max-connections",
            "50000",
        ],
    );
    let native = start_native(cores);
    let (mut best_ankh, mut best_native) = (0f64, 0f64);
    for _ in 0..ROUNDS {
        best_ankh = best_ankh.max(echo_rate(ankh.addr, "/bench/ws"));
        best_native = best_native.max(echo_rate(native, "/"));
    }
    println!(
        "| echo round trips/s, {CONNECTIONS} connections | ankh ({workers} workers) | tokio-tungstenite ({cores} threads) | ratio |"
    );
    println!("|---|---|---|---|");
    println!(
        "| best of {ROUNDS} × {}s | {best_ankh:.0} | {best_native:.0} | {:.2} |",
        ROUND.as_secs(),
        best_ankh / best_native
    );
    drop(ankh);

    // 2. and 3. Idle connections and one broadcast.
    let ankh = benches::start_ankh(
        &plugin,
        "bench.wasm",
        &[
            "--workers",
            &(cores * 4).to_string(),
            "--max-connections",
            "50000",
        ],
    );
    let pid = ankh.pid();
    // Warm: one connection, so instances and the pool exist before the baseline.
    let warm = open_raw(ankh.addr, 1);
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(pid);
    let started = Instant::now();
    let mut clients: Vec<TcpStream> = (0..IDLE_CONNECTIONS)
        .map(|i| open_raw(ankh.addr, 2 + (i / 10_000) as u8))
        .collect();
    let connect_time = started.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let after = rss_kib(pid);
    let per_conn = (after.saturating_sub(before)) as f64 * 1024.0 / IDLE_CONNECTIONS as f64;
    println!();
    println!("| {IDLE_CONNECTIONS} idle WebSockets | value |");
    println!("|---|---|");
    println!("| opened in | {:.1} s |", connect_time.as_secs_f64());
    println!("| ankh RSS before / after | {before} KiB / {after} KiB |");
    println!(
        "| RSS per connection | {per_conn:.0} bytes ({:.1} KiB) |",
        per_conn / 1024.0
    );

    // One publish from a connection of its own; every idle client must get it.
    let mut publisher = warm;
    let frame = masked_text(b"publish:hello-all");
    let started = Instant::now();
    publisher.write_all(&frame).unwrap();
    let mut received = 0;
    for c in &mut clients {
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut head = [0u8; 2];
        c.read_exact(&mut head).unwrap();
        let mut payload = vec![0u8; usize::from(head[1] & 0x7f)];
        c.read_exact(&mut payload).unwrap();
        assert_eq!(payload, b"hello-all");
        received += 1;
    }
    let fanout = started.elapsed();
    println!(
        "| one publish to {received} subscribers, until the last has it | {:.0} ms |",
        fanout.as_secs_f64() * 1000.0
    );
    drop(ankh);
}

/// A masked client text frame.
fn masked_text(payload: &[u8]) -> Vec<u8> {
    let key = [1u8, 2, 3, 4];
    let mut out = vec![0x81, 0x80 | payload.len() as u8];
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}
