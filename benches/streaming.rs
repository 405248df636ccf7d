//! Streamed responses (`cargo bench -p benches --bench streaming`, after
//! `cargo build --release -p ankh`).
//!
//! 1. **Throughput.** 1 GiB streamed under ankh at its defaults by a wasi:http component
//!    (`tests/plugins/httpecho`'s `/stream`, which writes 4 KiB at a time, as wasi:http's
//!    `check-write` allows) and by an own-world plugin (`tests/plugins/probe`'s `/alphabet`,
//!    64 KiB per `BodyWriter::write`), against a native hyper 1 server streaming the same
//!    bytes in 64 KiB pieces from memory, in alternating rounds; one client reading as fast
//!    as it can. The ratios are given by round.
//! 2. **Latency of an event.** A producer writes a line every 2 ms carrying the wall-clock
//!    time it was written at; the client notes when it reads it. ankh: the same component's
//!    `/ticks` and the own-world plugin's (both with `precise_clocks`); hyper: a task feeding
//!    an mpsc channel that is the response body. Median and p99 over 2,000 events each.
//!
//! Results go to stdout and `target/bench-results/streaming.json`.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ankh_test_support::harness::plugins;
use benches::{Native, median};
use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper::{Request, Response};
use serde_json::json;

const TOTAL: u64 = 1 << 30;
const PIECE: usize = 64 * 1024;
const ROUNDS: usize = 5;
const EVENTS: usize = 2000;
const EVENT_GAP: Duration = Duration::from_millis(2);

type Body = StreamBody<
    std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + 'static>,
    >,
>;

fn alphabet(len: usize) -> Bytes {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The baseline: `/stream` sends [`TOTAL`] bytes of the repeating alphabet in 64 KiB pieces;
/// `/ticks` sends [`EVENTS`] lines, each the wall-clock time it was written at, [`EVENT_GAP`]
/// apart.
async fn native(req: Request<hyper::body::Incoming>) -> Result<Response<Body>, Infallible> {
    let body: Body = if req.uri().path() == "/ticks" {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            for i in 0..EVENTS {
                if i > 0 {
                    tokio::time::sleep(EVENT_GAP).await;
                }
                if tx
                    .send(Bytes::from(format!("{}\n", now_ns())))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok(Frame::data(b)), rx))
        });
        StreamBody::new(Box::pin(stream))
    } else {
        // 64 KiB is a multiple of 26 plus 16: the pieces are cut from a longer run so
        // that the alphabet continues across them, as the component's does.
        let run = alphabet(PIECE + 26);
        let pieces = TOTAL.div_ceil(PIECE as u64);
        let stream = futures_util::stream::iter((0..pieces).map(move |i| {
            let at = (i as usize * PIECE) % 26;
            let len = (TOTAL - i * PIECE as u64).min(PIECE as u64) as usize;
            Ok(Frame::data(run.slice(at..at + len)))
        }));
        StreamBody::new(Box::pin(stream))
    };
    Ok(Response::builder()
        .header("content-type", "text/plain")
        .body(body)
        .unwrap())
}

/// Sends `GET path` and returns a reader positioned at the body, which must be chunked.
fn open(addr: SocketAddr, path: &str) -> BufReader<TcpStream> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::with_capacity(1 << 20, c);
    let mut chunked = false;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line
            .to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
        {
            chunked = true;
        }
        if line == "\r\n" {
            break;
        }
    }
    assert!(chunked, "{path} is not chunked");
    r
}

/// Reads one chunk into `buf`; its length (0 at the last chunk).
fn chunk(r: &mut impl BufRead, buf: &mut Vec<u8>) -> usize {
    let mut size = String::new();
    r.read_line(&mut size).unwrap();
    let n = usize::from_str_radix(size.trim_end(), 16).unwrap();
    if n == 0 {
        // The trailer section, up to its empty line.
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                return 0;
            }
        }
    }
    buf.resize(n + 2, 0);
    r.read_exact(buf).unwrap();
    buf.truncate(n);
    n
}

/// Reads the whole 1 GiB body, checking every byte; returns MB/s.
fn throughput(addr: SocketAddr, path: &str) -> f64 {
    let started = Instant::now();
    let mut r = open(addr, path);
    let (mut at, mut buf) = (0u64, Vec::new());
    loop {
        let n = chunk(&mut r, &mut buf);
        if n == 0 {
            break;
        }
        assert!(
            buf.iter()
                .enumerate()
                .all(|(i, &b)| b == b'a' + ((at + i as u64) % 26) as u8),
            "{path}: wrong bytes at {at}"
        );
        at += n as u64;
    }
    assert_eq!(at, TOTAL, "{path}");
    TOTAL as f64 / 1e6 / started.elapsed().as_secs_f64()
}

/// Reads the lines of `path`; the latency of each, in microseconds.
fn latencies(addr: SocketAddr, path: &str) -> Vec<f64> {
    let mut r = open(addr, path);
    let (mut out, mut buf, mut partial) = (Vec::new(), Vec::new(), Vec::new());
    while chunk(&mut r, &mut buf) > 0 {
        let read = now_ns();
        partial.extend_from_slice(&buf);
        while let Some(end) = partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            let sent: u128 = std::str::from_utf8(&line[..end]).unwrap().parse().unwrap();
            out.push(read.saturating_sub(sent) as f64 / 1e3);
        }
    }
    assert_eq!(out.len(), EVENTS, "{path}");
    out
}

fn percentile(mut xs: Vec<f64>, p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let ankh = benches::ankh_options()
        .plugin(plugins::HTTPECHO)
        .file("httpecho.toml", b"[capabilities]\nprecise_clocks = true\n")
        .plugin(plugins::PROBE)
        .file("probe.toml", b"[capabilities]\nprecise_clocks = true\n")
        .start();
    let native = Native::start(2, native);
    let stream = format!("/httpecho/stream?bytes={TOTAL}");
    let own = format!("/probe/alphabet?bytes={TOTAL}");
    println!("streaming, {} ({ROUNDS} rounds)", benches::machine());

    println!("1 GiB, one client");
    let (mut ankh_mbs, mut own_mbs, mut hyper_mbs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ratios, mut own_ratios) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let a = throughput(ankh.addr, &stream);
        let o = throughput(ankh.addr, &own);
        let h = throughput(native.addr, "/stream");
        println!(
            "  round {round}: ankh wasi:http {a:>6.0} MB/s ({:.2})  own world {o:>6.0} MB/s ({:.2})  hyper {h:>6.0} MB/s",
            a / h,
            o / h
        );
        ankh_mbs.push(a);
        own_mbs.push(o);
        hyper_mbs.push(h);
        ratios.push(a / h);
        own_ratios.push(o / h);
    }
    let ratio = median(ratios.clone());
    let own_ratio = median(own_ratios.clone());
    println!(
        "  median: ankh wasi:http {:.0} MB/s (ratio by round {ratio:.2}), own world {:.0} MB/s ({own_ratio:.2}), hyper {:.0} MB/s",
        median(ankh_mbs.clone()),
        median(own_mbs.clone()),
        median(hyper_mbs.clone())
    );

    println!("an event every {EVENT_GAP:?}, {EVENTS} events: write to read");
    let ticks = format!("/httpecho/ticks?n={EVENTS}&ms={}", EVENT_GAP.as_millis());
    let own_ticks = format!("/probe/ticks?n={EVENTS}&ms={}", EVENT_GAP.as_millis());
    let a = latencies(ankh.addr, &ticks);
    let o = latencies(ankh.addr, &own_ticks);
    let h = latencies(native.addr, "/ticks");
    let (a50, a99) = (percentile(a.clone(), 0.5), percentile(a, 0.99));
    let (o50, o99) = (percentile(o.clone(), 0.5), percentile(o, 0.99));
    let (h50, h99) = (percentile(h.clone(), 0.5), percentile(h, 0.99));
    println!("  ankh wasi:http:  median {a50:>7.1} µs  p99 {a99:>7.1} µs");
    println!("  ankh own world:  median {o50:>7.1} µs  p99 {o99:>7.1} µs");
    println!("  hyper:           median {h50:>7.1} µs  p99 {h99:>7.1} µs");

    benches::write_results(
        "streaming",
        &json!({
            "machine": benches::machine(),
            "throughput": {
                "ankh_mb_s": ankh_mbs,
                "own_world_mb_s": own_mbs,
                "hyper_mb_s": hyper_mbs,
                "ratio_by_round": ratios,
                "median_ratio": ratio,
                "own_world_ratio_by_round": own_ratios,
                "own_world_median_ratio": own_ratio,
            },
            "event_latency_us": {
                "ankh": { "p50": a50, "p99": a99 },
                "ankh_own_world": { "p50": o50, "p99": o99 },
                "hyper": { "p50": h50, "p99": h99 },
            },
        }),
    );
}
