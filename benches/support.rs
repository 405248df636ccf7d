//! Shared measurement helpers for the benchmarks: time a closure over many iterations, and
//! report a candidate against a baseline measured in the same run as a ratio, because absolute
//! numbers on a shared machine mean little.
//!
//! What the benches share with the tests comes from `ankh-test-support`, written once there:
//! the launcher (`harness::Options`/`TestServer`, started here as [`start_ankh`] and
//! [`serve`]), temporary directories, the plugins built from source (`harness::plugins`, by
//! its build script) and `wasmtime serve`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ankh_test_support::harness::{Options, TestServer};

#[path = "floor.rs"]
pub mod floor;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Writes `doc` as pretty JSON to `target/bench-results/NAME` (where `report` reads it) and
/// says where.
pub fn write_results(name: &str, doc: &serde_json::Value) {
    let dir = root().join("target/bench-results");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    println!("wrote {}", path.display());
}

/// Nanoseconds per iteration of `f`: the best of `rounds` rounds of `iters` iterations each
/// (the minimum is the least disturbed by other load on the machine).
pub fn ns_per_iter(rounds: usize, iters: u64, mut f: impl FnMut()) -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        let started = Instant::now();
        for _ in 0..iters {
            f();
            black_box(());
        }
        best = best.min(started.elapsed());
    }
    best.as_nanos() as f64 / iters as f64
}

/// Prints one line: the candidate, the baseline, and candidate/baseline.
pub fn report(name: &str, candidate_ns: f64, baseline: &str, baseline_ns: f64) {
    println!(
        "{name:<40} {candidate_ns:>9.1} ns   {baseline:<28} {baseline_ns:>9.1} ns   ratio {:.2}",
        candidate_ns / baseline_ns
    );
}

/// The median of `xs` (the upper one of an even count); NaN when empty.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Ratios taken round by round: each round runs both servers back to back, so a ratio of
/// the same round is not moved by the machine slowing down or speeding up between rounds,
/// as a ratio of each server's best round is.
#[derive(Debug, Clone, Copy)]
pub struct Ratios {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Ratios {
    /// `candidate[i] / baseline[i]` for each round `i`.
    pub fn of(candidate: &[f64], baseline: &[f64]) -> Ratios {
        let ratios: Vec<f64> = candidate.iter().zip(baseline).map(|(c, b)| c / b).collect();
        Ratios {
            median: median(ratios.clone()),
            min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            max: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

impl Ratios {
    /// `{"median": .., "min": .., "max": ..}`, for a results file.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"median": self.median, "min": self.min, "max": self.max})
    }
}

impl std::fmt::Display for Ratios {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ({:.2}-{:.2})", self.median, self.min, self.max)
    }
}

/// What wrk measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    pub rps: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// Runs wrk against `url` and reads its summary.
pub fn wrk(url: &str, connections: usize, duration: Duration) -> Run {
    wrk_on(None, url, connections, duration)
}

/// [`wrk`], on the CPUs `cpus` (a `taskset` list such as `0`), or anywhere.
pub fn wrk_on(cpus: Option<&str>, url: &str, connections: usize, duration: Duration) -> Run {
    let mut command = match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus, "wrk"]);
            c
        }
        None => Command::new("wrk"),
    };
    let out = command
        .args(["-t2", "--latency", "--timeout", "5s"])
        .arg(format!("-c{connections}"))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg(url)
        .output()
        .expect("wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wrk failed: {text}");
    assert!(
        !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "errors under load against {url}:\n{text}"
    );
    let field = |prefix: &str| -> Option<&str> {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let ms = |prefix: &str| field(prefix).map(duration_ms).unwrap_or(f64::NAN);
    Run {
        rps: field("Requests/sec:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        p50_ms: ms("50%"),
        p90_ms: ms("90%"),
        p99_ms: ms("99%"),
    }
}

/// wrk's `812.00us`, `1.20ms`, `1.01s` in milliseconds.
fn duration_ms(text: &str) -> f64 {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (text, f64::NAN)
    };
    number.parse::<f64>().map_or(f64::NAN, |n| n * scale)
}

/// A running `ankh serve` (the release binary), killed when dropped: the harness's server.
pub type Ankh = TestServer;

/// `target/release/ankh`, which the benches measure.
pub fn release_ankh() -> PathBuf {
    let bin = root().join("target/release/ankh");
    assert!(
        bin.is_file(),
        "{} is missing: cargo build --release -p ankh",
        bin.display()
    );
    bin
}

/// The harness's options as the benches start ankh: the release binary as a user runs it,
/// the access log on at the default level (`RUST_LOG` unset) into a file (so neither the load
/// generator's terminal nor a reader thread is the bottleneck), compiled plugins cached in
/// `target/bench-cache`, and the ready file polled every millisecond (so start-up can be
/// timed around [`Options::start`]).
pub fn ankh_options() -> Options {
    Options {
        rust_log: Some(None),
        ..Options::default()
    }
    .bin(&release_ankh())
    .cache_dir(&root().join("target/bench-cache"))
    .log_to_file()
    .ready_poll(Duration::from_millis(1))
}

/// Starts `target/release/ankh serve` on a free loopback port with `plugin` installed as
/// `name` (`index.wasm`, `bench.wasm`) in a fresh plugins directory, plus `args`; returns
/// once it accepts connections. The plugin's policy file in `plugins/`, if it has one (as
/// `bench.toml`), goes with it, so a benchmark runs it as `cargo ankh serve` does.
pub fn start_ankh(plugin: &Path, name: &str, args: &[&str]) -> Ankh {
    let stem = name.strip_suffix(".wasm").unwrap_or(name);
    let mut options = ankh_options().plugin_as(stem, plugin.to_str().unwrap());
    let policy = format!("{stem}.toml");
    if let Ok(contents) = std::fs::read(root().join("plugins").join(&policy)) {
        options = options.file(&policy, &contents);
    }
    args.iter().fold(options, |o, a| o.arg(a)).start()
}

/// Starts `target/release/ankh serve` on a free loopback port over the plugins directory
/// `dir`, caching compiled plugins in `cache`, plus `args`; returns once the ready file names
/// its address (polled every millisecond, so start-up can be timed around this call).
pub fn serve(dir: &Path, cache: &Path, args: &[&str]) -> Ankh {
    let options = ankh_options().plugins_dir(dir).cache_dir(cache);
    args.iter().fold(options, |o, a| o.arg(a)).start()
}

/// Moves every thread of process `pid` onto the CPUs `cpus` (a `taskset` list).
pub fn pin(pid: u32, cpus: &str) {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset (util-linux)");
    assert!(status.success(), "taskset failed");
}

/// The machine the figures come from: CPU model, cores, memory, kernel.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown CPU", str::trim)
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib >> 20);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{model}, {cores} cores, {mem_gib} GiB, Linux {}",
        kernel.trim()
    )
}

/// The body of a GET on a fresh connection; the answer must be 200.
pub fn get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "GET {path}: {text}");
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// A counter's value in the Prometheus text of `/metrics` (NaN when absent).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// A native hyper 1 server (HTTP/1.1) on a tokio runtime of its own, serving `handler` on a
/// free loopback port until dropped: the baseline the benches measure ankh against.
pub struct Native {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Native {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Native {
    /// Serves `handler` with `threads` worker threads.
    pub fn start<F, Fut, B>(threads: usize, handler: F) -> Native
    where
        F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<hyper::Response<B>, std::convert::Infallible>>
            + Send
            + 'static,
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(stream),
                            hyper::service::service_fn(handler),
                        )
                        .await;
                });
            }
        });
        Native {
            addr,
            runtime: Some(runtime),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_of_an_odd_count_and_the_upper_of_an_even_one() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn ratios_pair_each_round_with_the_same_round() {
        // Round 2 ran at half speed for both servers: its ratio is still 0.8.
        let r = Ratios::of(&[80.0, 40.0, 88.0], &[100.0, 50.0, 110.0]);
        assert!((r.median - 0.8).abs() < 1e-9);
        assert!((r.min - 0.8).abs() < 1e-9 && (r.max - 0.8).abs() < 1e-9);
        let r = Ratios::of(&[90.0, 100.0, 120.0], &[100.0, 100.0, 100.0]);
        assert_eq!((r.median, r.min, r.max), (1.0, 0.9, 1.2));
        assert_eq!(r.to_string(), "1.00 (0.90-1.20)");
    }
}
