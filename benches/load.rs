//! HTTP load: ankh serving the `bench` plugin against a native hyper server on tokio serving
//! the same three endpoints, in the same run, under the same load generator (`cargo bench -p
//! benches --bench load`, after `cargo build --release -p ankh`; needs `wrk`, from Debian's
//! `wrk` package).
//!
//! - `/`: hello world over keep-alive connections: the cost of the server itself.
//! - `/busy?us=100`: 100 µs of CPU per request: a handler that computes.
//! - `/sleep?ms=10`: 10 ms of waiting per request, Mummy's benchmark: a handler blocked on a
//!   slow backend, with 100 connections and again with 1,000. The ceiling is connections ×
//!   1000 / 10 requests per second. ankh runs at its default worker count: a waiting call
//!   holds no thread.
//!
//! The baseline is what a Rust developer would write without a sandbox: hyper 1 on a tokio
//! multi-threaded runtime, with as many runtime threads as ankh has workers, the same
//! response headers, `tokio::time::sleep` for the sleep and a spin for the CPU work. It is
//! also run with one thread per core, its best configuration for the first two endpoints.
//! Each (server, endpoint) pair is measured `ROUNDS` times, alternating (odd rounds in
//! reverse order), and the best round is kept; the ratios are also given round by round
//! (median and range), which the machine drifting between rounds does not move. Results go
//! to stdout and to `target/bench-results/load.json`, which `benches/report.sh` turns into a
//! report with charts.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use benches::{Ratios, Run, wrk};
use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;

/// One endpoint under load.
struct Scenario {
    name: &'static str,
    path: &'static str,
    connections: usize,
    /// ankh's workers, and the baseline's runtime threads.
    threads: usize,
    /// The best possible requests per second, where one exists.
    ceiling: Option<f64>,
    /// What it stands for, for the report.
    simulates: &'static str,
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--hyper N`: only the baseline, with N threads, until killed (to measure it from
    // outside: CPU time, profiles). Prints its address.
    if let Some(threads) = std::env::args().skip_while(|a| a != "--hyper").nth(1) {
        let hyper = Hyper::start(threads.parse().expect("--hyper THREADS"));
        println!("{}", hyper.addr);
        loop {
            std::thread::park();
        }
    }
    // `--only hello`: one scenario.
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    let round = if quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    };
    // `--rounds N`: rounds per server (best kept); 2 by default, 1 with `--quick`.
    let rounds = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .map(|n| n.parse().expect("--rounds N"))
        .unwrap_or(if quick { 1 } else { 2 });
    if Command::new("wrk").arg("--version").output().is_err() {
        eprintln!("the load benchmark needs wrk: apt-get install wrk");
        std::process::exit(2);
    }
    if std::env::args().any(|a| a == "--scaling") {
        scaling(round, rounds);
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let default_workers = cores * ankh::limits::WORKERS_PER_CORE;
    let scenarios = [
        Scenario {
            name: "hello",
            path: "/",
            connections: 64,
            threads: default_workers,
            ceiling: None,
            simulates: "the server's own cost per request: parse, dispatch, one plugin call, encode",
        },
        Scenario {
            name: "busy?us=100",
            path: "/busy?us=100",
            connections: 64,
            threads: default_workers,
            ceiling: Some(cores as f64 * 10_000.0),
            simulates: "a handler that computes for 100 µs (ceiling: cores / 100 µs)",
        },
        Scenario {
            name: "sleep?ms=10",
            path: "/sleep?ms=10",
            connections: 100,
            threads: default_workers,
            ceiling: Some(100.0 * 100.0),
            simulates: "a handler blocked 10 ms on a backend (ceiling: 100 connections / 10 ms)",
        },
        Scenario {
            name: "sleep-1000",
            path: "/sleep?ms=10",
            connections: 1000,
            threads: default_workers,
            ceiling: Some(1000.0 * 100.0),
            simulates: "a thousand clients whose handlers wait 10 ms each (ceiling: 1,000 connections / 10 ms)",
        },
    ];
    let plugin = std::path::Path::new(ankh_test_support::harness::plugins::BENCH);

    println!(
        "{:<13} {:<22} {:>9} {:>8} {:>8} {:>8}",
        "endpoint", "server", "req/s", "p50 ms", "p90 ms", "p99 ms"
    );
    let mut results = Vec::new();
    for s in &scenarios {
        let threads = s.threads.to_string();
        if only.as_deref().is_some_and(|o| o != s.name) {
            continue;
        }
        let servers: [Contender<'_>; 5] = [
            (
                format!("ankh ({} workers)", s.threads),
                Box::new(|| {
                    Box::new(benches::start_ankh(
                        plugin,
                        "index.wasm",
                        &["--workers", &threads],
                    )) as Box<dyn Server>
                }),
            ),
            (
                format!("hyper ({} threads)", s.threads),
                Box::new(move || Box::new(Hyper::start(s.threads)) as Box<dyn Server>),
            ),
            (
                format!("hyper ({cores} threads)"),
                Box::new(move || Box::new(Hyper::start(cores)) as Box<dyn Server>),
            ),
            (
                "ankh, no access log".to_owned(),
                Box::new(|| {
                    Box::new(benches::start_ankh(
                        plugin,
                        "index.wasm",
                        &["--workers", &threads, "--no-access-log"],
                    )) as Box<dyn Server>
                }),
            ),
            (
                "ankh, 1 I/O thread".to_owned(),
                Box::new(|| {
                    Box::new(benches::start_ankh(
                        plugin,
                        "index.wasm",
                        &["--workers", &threads, "--io-threads", "1"],
                    )) as Box<dyn Server>
                }),
            ),
        ];
        let mut best = vec![Run::default(); servers.len()];
        // Requests per second of each round, per server.
        let mut rounds_rps = vec![Vec::with_capacity(rounds); servers.len()];
        for round_no in 0..rounds {
            // Odd rounds run the servers in reverse order, so that no server always runs first
            // or always right after the same other one (whose exit could weigh on the next).
            for k in 0..servers.len() {
                let i = if round_no % 2 == 0 {
                    k
                } else {
                    servers.len() - 1 - k
                };
                let server = (servers[i].1)();
                let url = format!("http://{}{}", server.addr(), s.path);
                // Warm up: instances, caches, TCP.
                wrk(&url, s.connections, Duration::from_secs(1));
                let run = wrk(&url, s.connections, round);
                rounds_rps[i].push(run.rps);
                if run.rps > best[i].rps {
                    best[i] = run;
                }
            }
        }
        for ((name, _), run) in servers.iter().zip(&best) {
            println!(
                "{:<13} {:<22} {:>9.0} {:>8.2} {:>8.2} {:>8.2}",
                s.name, name, run.rps, run.p50_ms, run.p90_ms, run.p99_ms
            );
        }
        let ratio_same = best[0].rps / best[1].rps;
        let ratio_best = best[0].rps / best[1].rps.max(best[2].rps);
        print!(
            "{:<13} ankh/hyper: {ratio_same:.2} same threads, {ratio_best:.2} vs its best",
            s.name
        );
        if let Some(c) = s.ceiling {
            print!(
                "; of the {c:.0} req/s ceiling: ankh {:.1}%, hyper {:.1}%",
                100.0 * best[0].rps / c,
                100.0 * best[1].rps.max(best[2].rps) / c
            );
        }
        println!();
        // The same ratios round by round: hyper's best configuration is the better of its
        // two in that round.
        let hyper_best: Vec<f64> = rounds_rps[1]
            .iter()
            .zip(&rounds_rps[2])
            .map(|(a, b)| a.max(*b))
            .collect();
        let per_round_same = Ratios::of(&rounds_rps[0], &rounds_rps[1]);
        let per_round_best = Ratios::of(&rounds_rps[0], &hyper_best);
        println!(
            "{:<13} ankh/hyper round by round, median (range) of {rounds}: {per_round_same} same threads, {per_round_best} vs its best",
            s.name
        );
        results.push(json!({
            "endpoint": s.name,
            "path": s.path,
            "connections": s.connections,
            "simulates": s.simulates,
            "ceiling": s.ceiling,
            "ratio_per_round": {
                "same_threads": per_round_same.json(),
                "best": per_round_best.json(),
            },
            "runs": servers.iter().zip(&best).zip(&rounds_rps).map(|(((name, _), r), all)| json!({
                "server": name,
                "rps": r.rps,
                "rps_per_round": all,
                "p50_ms": r.p50_ms,
                "p90_ms": r.p90_ms,
                "p99_ms": r.p99_ms,
            })).collect::<Vec<_>>(),
        }));
    }
    let doc = json!({
        "machine": benches::machine(),
        "round_seconds": round.as_secs(),
        "rounds": rounds,
        "generator": "wrk -t2 --latency",
        "scenarios": results,
    });
    benches::write_results("load.json", &doc);
}

/// `--scaling`: hello world for 1, 2 and 4 event loops (and hyper with one thread per core
/// beside them), with wrk on the same cores, then with wrk on CPU 0 and the server on the rest.
fn scaling(round: Duration, rounds: usize) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert!(cores >= 2, "the pinned half needs two CPUs");
    let plugin = std::path::Path::new(ankh_test_support::harness::plugins::BENCH);
    let server_cpus = format!("1-{}", cores - 1);
    let all_cpus = format!("0-{}", cores - 1);
    let loops = ["1", "2", "4"];
    println!(
        "{:<26} {:>10} {:>8} {:>12} {:>8}",
        "server (hello, 64 conns)", "shared", "p99 ms", "wrk on CPU 0", "p99 ms"
    );
    let mut rows = Vec::new();
    for name in loops
        .iter()
        .map(|n| format!("ankh, {n} I/O thread(s)"))
        .chain([format!("hyper ({cores} threads)")])
    {
        rows.push((name, [Run::default(), Run::default()]));
    }
    for _ in 0..rounds {
        for (placement, pinned) in [(0, false), (1, true)] {
            for (i, (_, best)) in rows.iter_mut().enumerate() {
                let wrk_cpus = pinned.then_some("0");
                let run = if let Some(n) = loops.get(i) {
                    let ankh = benches::start_ankh(plugin, "index.wasm", &["--io-threads", n]);
                    if pinned {
                        benches::pin(ankh.pid(), &server_cpus);
                    }
                    let url = format!("http://{}/", ankh.addr);
                    benches::wrk_on(wrk_cpus, &url, 64, Duration::from_secs(1));
                    benches::wrk_on(wrk_cpus, &url, 64, round)
                } else {
                    let hyper = Hyper::start(cores);
                    if pinned {
                        benches::pin(std::process::id(), &server_cpus);
                    }
                    let url = format!("http://{}/", hyper.addr);
                    benches::wrk_on(wrk_cpus, &url, 64, Duration::from_secs(1));
                    let run = benches::wrk_on(wrk_cpus, &url, 64, round);
                    drop(hyper);
                    benches::pin(std::process::id(), &all_cpus);
                    run
                };
                if run.rps > best[placement].rps {
                    best[placement] = run;
                }
            }
        }
    }
    let hyper = rows.last().map(|(_, b)| *b).unwrap_or_default();
    let mut json_rows = Vec::new();
    for (name, [shared, pinned]) in &rows {
        println!(
            "{name:<26} {:>10.0} {:>8.2} {:>12.0} {:>8.2}   ({:.2} / {:.2} of hyper)",
            shared.rps,
            shared.p99_ms,
            pinned.rps,
            pinned.p99_ms,
            shared.rps / hyper[0].rps,
            pinned.rps / hyper[1].rps
        );
        json_rows.push(json!({
            "server": name,
            "shared": {"rps": shared.rps, "p99_ms": shared.p99_ms},
            "pinned": {"rps": pinned.rps, "p99_ms": pinned.p99_ms},
        }));
    }
    let doc = json!({
        "machine": benches::machine(),
        "round_seconds": round.as_secs(),
        "rounds": rounds,
        "rows": json_rows,
    });
    benches::write_results("scaling.json", &doc);
}

/// A server under test, with how to start it.
type Contender<'a> = (String, Box<dyn Fn() -> Box<dyn Server> + 'a>);

trait Server {
    fn addr(&self) -> SocketAddr;
}

impl Server for benches::Ankh {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The baseline: hyper 1 on a tokio runtime of its own, stopped when dropped.
struct Hyper {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Server for Hyper {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Hyper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Hyper {
    fn start(threads: usize) -> Hyper {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        runtime.spawn(async move {
            while !stopped.load(Ordering::Relaxed) {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service_fn(handle))
                        .await;
                });
            }
        });
        Hyper {
            addr,
            stop,
            runtime: Some(runtime),
        }
    }
}

/// The three endpoints, natively.
async fn handle(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let number = |name: &str| -> u64 {
        req.uri()
            .query()
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let body: &'static str = match req.uri().path() {
        "/" => "Hello, World!",
        "/busy" => {
            let budget = Duration::from_micros(number("us"));
            let start = Instant::now();
            while start.elapsed() < budget {
                std::hint::spin_loop();
            }
            "ok"
        }
        "/sleep" => {
            tokio::time::sleep(Duration::from_millis(number("ms"))).await;
            "ok"
        }
        _ => "not found",
    };
    Ok(Response::builder()
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap())
}
