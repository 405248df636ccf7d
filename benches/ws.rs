//! WebSocket figures, each against a baseline in the same run (`cargo bench -p benches --bench
//! ws`, after `cargo build --release -p ankh`):
//!
//! 1. Echo round trips per second over 64 connections: ankh serving the `bench` plugin's
//!    `/bench/ws` against a native tokio-tungstenite echo server with as many runtime threads
//!    as the machine has cores. ankh runs at its defaults, then with as many workers as the
//!    baseline has threads (with two event loops and with one). Same client, same message,
//!    measured alternately.
//! 2. 19,000 idle WebSocket connections held open: ankh's resident memory per connection.
//!    (19,000, not 20,000: on the machine these figures come from, a process may hold at most
//!    20,000 file descriptors and cannot raise that, and the client side lives in this one.)
//! 3. One publish to a topic all of them subscribe to: time until the last client has it.
//! 4. Compression (permessage-deflate): echo round trips of a 2 KiB JSON message with and
//!    without it (same raw client, alternating; the client sends one pre-compressed frame,
//!    offering `client_no_context_takeover`, so the figure is the server's cost), bytes on the
//!    wire each way; then 19,000 idle connections that negotiated it (resident memory per
//!    connection), and one 2 KiB publish to all of them with and without compression, with the
//!    server's count of compressions (`ankh_ws_messages_deflated_total`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ankh_test_support::harness::rss_kib;
use benches::Ratios;
use futures_util::{SinkExt, StreamExt};
use tungstenite::Message;

const CONNECTIONS: usize = 64;
const ROUND: Duration = Duration::from_secs(5);
const ROUNDS: usize = 2;
const IDLE_CONNECTIONS: usize = 19_000;

/// The `bench` plugin, built from source by `ankh-test-support`.
fn bench_plugin() -> &'static Path {
    Path::new(ankh_test_support::harness::plugins::BENCH)
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
    rate(&count, &stop, threads)
}

/// Round trips per second the client `threads` count in `count` over [`ROUND`], after 300 ms
/// to connect and warm up; then stops them.
fn rate(count: &AtomicU64, stop: &AtomicBool, threads: Vec<std::thread::JoinHandle<()>>) -> f64 {
    std::thread::sleep(Duration::from_millis(300));
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

/// The first of a fresh range of source addresses (127.0.0.N) for `IDLE_CONNECTIONS`
/// connections, 10,000 per address: each phase that opens them has its own, since the
/// closed connections of an earlier phase hold their ports (TIME_WAIT) for a minute.
fn fresh_sources() -> u8 {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);
    let per_phase = IDLE_CONNECTIONS.div_ceil(10_000) as u8;
    NEXT.fetch_add(per_phase, Ordering::Relaxed)
}

/// Opens a WebSocket to ankh's `/bench/ws` from source address 127.0.0.`source`.
fn open_raw(addr: SocketAddr, source: u8) -> TcpStream {
    open_raw_offering(addr, source, None)
}

/// As [`open_raw`], offering `extension` in `Sec-WebSocket-Extensions`.
fn open_raw_offering(addr: SocketAddr, source: u8, extension: Option<&str>) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("127.0.0.{source}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    let offer = extension.map_or(String::new(), |e| {
        format!("Sec-WebSocket-Extensions: {e}\r\n")
    });
    stream
        .write_all(format!("GET /bench/ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{offer}\r\n").as_bytes())
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 101"), "{line}");
    let mut agreed = false;
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).unwrap();
        agreed |= line
            .to_ascii_lowercase()
            .starts_with("sec-websocket-extensions: permessage-deflate");
    }
    assert_eq!(
        agreed,
        extension.is_some(),
        "compression negotiated as offered"
    );
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

    // 1. Echo round trips, alternating so all see the same machine conditions: ankh at its
    // defaults, as a user runs it; then thread for thread with the baseline (as many workers
    // as runtime threads), with two event loops and with one.
    let workers = std::env::var("ANKH_WS_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(cores);
    let defaults = benches::start_ankh(plugin, "bench.wasm", &["--max-connections", "50000"]);
    let ankh = benches::start_ankh(
        plugin,
        "bench.wasm",
        &[
            "--workers",
            &workers.to_string(),
            "--max-connections",
            "50000",
        ],
    );
    let one_loop = benches::start_ankh(
        plugin,
        "bench.wasm",
        &[
            "--workers",
            &workers.to_string(),
            "--max-connections",
            "50000",
            "--io-threads",
            "1",
        ],
    );
    let native = start_native(cores);
    // `--rounds N`: echo rounds per server, alternating (ROUNDS by default).
    let rounds = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .map_or(ROUNDS, |n| n.parse().expect("--rounds N"));
    // Round trips per second of each round: defaults, thread for thread, one loop, native.
    let mut rates: [Vec<f64>; 4] = Default::default();
    for _ in 0..rounds {
        rates[0].push(echo_rate(defaults.addr, "/bench/ws"));
        rates[1].push(echo_rate(ankh.addr, "/bench/ws"));
        rates[2].push(echo_rate(one_loop.addr, "/bench/ws"));
        rates[3].push(echo_rate(native, "/"));
    }
    let best = rates
        .each_ref()
        .map(|r| r.iter().copied().fold(0.0, f64::max));
    let [best_defaults, best_ankh, best_one, best_native] = best;
    println!(
        "| echo round trips/s, {CONNECTIONS} connections | ankh at its defaults | ankh ({workers} workers, {cores} I/O threads) | ankh, {workers} workers, 1 I/O thread | tokio-tungstenite ({cores} threads) | ratio (defaults / {workers} workers / 1 loop) |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| best of {rounds} × {}s | {best_defaults:.0} | {best_ankh:.0} | {best_one:.0} | {best_native:.0} | {:.2} / {:.2} / {:.2} |",
        ROUND.as_secs(),
        best_defaults / best_native,
        best_ankh / best_native,
        best_one / best_native
    );
    // The same ratios round by round, which the machine drifting between rounds does not move.
    println!(
        "| round by round, median (range) of {rounds} | | | | | {} / {} / {} |",
        Ratios::of(&rates[0], &rates[3]),
        Ratios::of(&rates[1], &rates[3]),
        Ratios::of(&rates[2], &rates[3])
    );
    drop(defaults);
    drop(ankh);
    drop(one_loop);
    // `--only echo`: the echo figure alone.
    if std::env::args()
        .skip_while(|a| a != "--only")
        .nth(1)
        .as_deref()
        == Some("echo")
    {
        return;
    }

    // 2. and 3. Idle connections and one broadcast, with one event loop and with the default.
    for io_threads in [1, cores] {
        idle_and_publish(plugin, cores, io_threads);
    }

    compression(plugin, cores);
}

/// 19,000 idle WebSockets on a server with `io_threads` event loops: memory per connection,
/// then one publish to all of them.
fn idle_and_publish(plugin: &std::path::Path, cores: usize, io_threads: usize) {
    let ankh = benches::start_ankh(
        plugin,
        "bench.wasm",
        &[
            "--workers",
            &(cores * 4).to_string(),
            "--max-connections",
            "50000",
            "--io-threads",
            &io_threads.to_string(),
        ],
    );
    let pid = ankh.pid();
    // Warm: one connection, so instances and the pool exist before the baseline.
    let warm = open_raw(ankh.addr, 1);
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(pid).expect("the server runs");
    let started = Instant::now();
    let sources = fresh_sources();
    let mut clients: Vec<TcpStream> = (0..IDLE_CONNECTIONS)
        .map(|i| open_raw(ankh.addr, sources + (i / 10_000) as u8))
        .collect();
    let connect_time = started.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let after = rss_kib(pid).expect("the server runs");
    let per_conn = (after.saturating_sub(before)) as f64 * 1024.0 / IDLE_CONNECTIONS as f64;
    println!();
    println!("| {IDLE_CONNECTIONS} idle WebSockets, {io_threads} I/O thread(s) | value |");
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
}

/// A masked client frame (`first`: FIN, RSV and opcode).
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let key = [1u8, 2, 3, 4];
    let mut out = vec![first];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n < 65536 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

/// A masked client text frame.
fn masked_text(payload: &[u8]) -> Vec<u8> {
    masked(0x81, payload)
}

/// Reads one server frame: (first byte, bytes on the wire, payload).
fn read_frame(r: &mut impl Read) -> (u8, usize, Vec<u8>) {
    let mut head = [0u8; 2];
    r.read_exact(&mut head).unwrap();
    let (len, extra) = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).unwrap();
            (usize::from(u16::from_be_bytes(b)), 2)
        }
        127 => {
            let mut b = [0u8; 8];
            r.read_exact(&mut b).unwrap();
            (u64::from_be_bytes(b) as usize, 8)
        }
        n => (usize::from(n), 0),
    };
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).unwrap();
    (head[0], 2 + extra + len, payload)
}

/// A JSON array of about `n` bytes, like a chat or API payload.
fn json(n: usize) -> String {
    let mut s = String::from("[");
    let mut i = 0;
    while s.len() < n {
        s.push_str(&format!(
            "{{\"id\":{i},\"user\":\"member-{i}\",\"room\":\"lobby\",\"text\":\"hello there, how is it going\",\"seen\":false}},"
        ));
        i += 1;
    }
    s.truncate(n);
    s
}

/// Raw deflate of one message with a fresh context, tail removed (RFC 7692 §7.2.1).
fn deflate(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::Compress::new(flate2::Compression::default(), false);
    let mut out = Vec::with_capacity(data.len() + 64);
    z.compress_vec(data, &mut out, flate2::FlushCompress::Sync)
        .unwrap();
    out.truncate(out.len() - 4);
    out
}

fn inflate(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::Decompress::new(false);
    let mut input = data.to_vec();
    input.extend_from_slice(&[0, 0, 0xff, 0xff]);
    let mut out = Vec::with_capacity(1 << 20);
    z.decompress_vec(&input, &mut out, flate2::FlushDecompress::Sync)
        .unwrap();
    out
}

/// Echo round trips per second of `message` over `CONNECTIONS` raw connections, compressed
/// or not; also the bytes on the wire of one round trip (up, down).
fn echo_raw(addr: SocketAddr, message: &str, compressed: bool) -> (f64, usize, usize) {
    let offer = compressed.then_some("permessage-deflate; client_no_context_takeover");
    let request = if compressed {
        masked(0xC1, &deflate(message.as_bytes()))
    } else {
        masked(0x81, message.as_bytes())
    };
    let up = request.len();
    // One checked round trip first: the echo is the message, and compressed as agreed.
    let mut check = open_raw_offering(addr, 1, offer);
    check.write_all(&request).unwrap();
    let (first, down, payload) = read_frame(&mut check);
    assert_eq!(first & 0x40 != 0, compressed, "RSV1 as negotiated");
    let payload = if compressed {
        inflate(&payload)
    } else {
        payload
    };
    assert_eq!(payload, message.as_bytes());
    drop(check);

    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (stop, count, request) = (stop.clone(), count.clone(), request.clone());
            std::thread::spawn(move || {
                let mut stream = open_raw_offering(addr, 1, offer);
                stream.set_nodelay(true).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                while !stop.load(Ordering::Relaxed) {
                    stream.write_all(&request).unwrap();
                    read_frame(&mut reader);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    (rate(&count, &stop, threads), up, down)
}

/// `ankh_ws_messages_deflated_total` from the admin listener.
fn deflated_total(admin: SocketAddr) -> u64 {
    benches::metric(
        &benches::get(admin, "/metrics"),
        "ankh_ws_messages_deflated_total",
    ) as u64
}

/// 4. What compression costs and saves.
fn compression(plugin: &std::path::Path, cores: usize) {
    let message = json(2048);
    let ankh = benches::start_ankh(plugin, "bench.wasm", &["--max-connections", "50000"]);
    let (mut plain, mut deflated) = ((0f64, 0, 0), (0f64, 0, 0));
    for _ in 0..ROUNDS {
        let p = echo_raw(ankh.addr, &message, false);
        let d = echo_raw(ankh.addr, &message, true);
        if p.0 > plain.0 {
            plain = p;
        }
        if d.0 > deflated.0 {
            deflated = d;
        }
    }
    drop(ankh);
    println!();
    println!(
        "| echo of a {} B JSON message, {CONNECTIONS} connections, default workers | round trips/s | bytes up / down per round trip |",
        message.len()
    );
    println!("|---|---|---|");
    println!(
        "| uncompressed | {:.0} | {} / {} |",
        plain.0, plain.1, plain.2
    );
    println!(
        "| permessage-deflate | {:.0} ({:.2}× uncompressed) | {} / {} |",
        deflated.0,
        deflated.0 / plain.0,
        deflated.1,
        deflated.2
    );

    // Idle memory with compression negotiated, and one publish with and without it.
    let publish = masked_text(format!("publish:{}", json(2048)).as_bytes());
    println!();
    println!(
        "| {IDLE_CONNECTIONS} idle WebSockets, {} workers | RSS per connection | one 2 KiB publish, until the last has it | compressions |",
        cores * 4
    );
    println!("|---|---|---|---|");
    for offer in [None, Some("permessage-deflate; client_max_window_bits")] {
        let ankh = benches::start_ankh(
            plugin,
            "bench.wasm",
            &[
                "--workers",
                &(cores * 4).to_string(),
                "--max-connections",
                "50000",
                "--admin",
                "127.0.0.1:0",
            ],
        );
        let admin = ankh.admin_addr();
        let pid = ankh.pid();
        let mut publisher = open_raw(ankh.addr, 1);
        std::thread::sleep(Duration::from_millis(300));
        let before = rss_kib(pid).expect("the server runs");
        let sources = fresh_sources();
        let mut clients: Vec<BufReader<TcpStream>> = (0..IDLE_CONNECTIONS)
            .map(|i| {
                let s = open_raw_offering(ankh.addr, sources + (i / 10_000) as u8, offer);
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                BufReader::new(s)
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let after = rss_kib(pid).expect("the server runs");
        let per_conn = (after.saturating_sub(before)) as f64 * 1024.0 / IDLE_CONNECTIONS as f64;
        let compressions = deflated_total(admin);
        let started = Instant::now();
        publisher.write_all(&publish).unwrap();
        let mut wire = 0;
        for c in &mut clients {
            let (first, n, _) = read_frame(c);
            assert_eq!(first & 0x40 != 0, offer.is_some());
            wire = n;
        }
        let fanout = started.elapsed();
        let compressions = deflated_total(admin) - compressions;
        // Then every client sends one 2 KiB message (compressed when agreed, keeping its
        // context as browsers do): what the server keeps of each client's context after it.
        let sent = if offer.is_some() {
            masked(0xC1, &deflate(json(2048).as_bytes()))
        } else {
            masked_text(json(2048).as_bytes())
        };
        for c in &mut clients {
            c.get_mut().write_all(&sent).unwrap();
            read_frame(c);
        }
        std::thread::sleep(Duration::from_millis(500));
        let after_traffic = rss_kib(pid).expect("the server runs");
        let per_conn_after =
            (after_traffic.saturating_sub(before)) as f64 * 1024.0 / IDLE_CONNECTIONS as f64;
        println!(
            "| {} | {per_conn:.0} B ({:.1} KiB); {:.1} KiB after one 2 KiB message each | {:.0} ms ({wire} B frames) | {compressions} |",
            if offer.is_some() {
                "permessage-deflate"
            } else {
                "uncompressed"
            },
            per_conn / 1024.0,
            per_conn_after / 1024.0,
            fanout.as_secs_f64() * 1000.0
        );
        drop(clients);
        drop(publisher);
        drop(ankh);
    }
}
