//! The durable key-value store (`cargo bench -p benches --bench kv`, after `cargo build
//! --release -p ankh`; needs `wrk`).
//!
//! 1. **A durable write per request.** wrk with 64 connections on `GET /incr` of the `bench`
//!    plugin (one `kv::increment` each), against ankh at its defaults with the file store (the
//!    default: every answer waits for its commit's fsync) and, in the same run, with `--kv
//!    memory` (the baseline: the same server without a disk). Rounds alternate between the two;
//!    medians are reported. `/metrics` tells how many writes each commit carried (group commit).
//! 2. **Restart with a million keys.** Ten plugins (copies of `bench`, each its own namespace)
//!    hold 100,000 keys each; the time from spawning the server to its first served request,
//!    after a clean stop (SIGTERM) and after `kill -9` (the database then needs its repair),
//!    against the same server over an empty data directory.
//!
//! Results go to stdout and `target/bench-results/kv.json`.

use std::path::Path;
use std::time::{Duration, Instant};

use ankh_test_support::harness::TempDir;
use benches::{Ankh, Run, get, median, metric, wrk};
use serde_json::json;

const CONNECTIONS: usize = 64;
const PLUGINS: usize = 10;
const KEYS_PER_PLUGIN: usize = 100_000;

/// One round of increments; the run and writes per commit.
fn increments(plugin: &Path, args: &[&str], round: Duration) -> (Run, f64) {
    let mut all = vec!["--admin", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let ankh = benches::start_ankh(plugin, "index.wasm", &all);
    let admin = ankh.admin_addr();
    let url = format!("http://{}/incr?key=counter", ankh.addr);
    wrk(&url, CONNECTIONS, Duration::from_secs(1));
    let before = get(admin, "/metrics");
    let run = wrk(&url, CONNECTIONS, round);
    let after = get(admin, "/metrics");
    let delta = |name| metric(&after, name) - metric(&before, name);
    let group = delta("ankh_kv_writes_total") / delta("ankh_kv_commits_total");
    (run, group)
}

/// Spawns ankh over `dir` and `data`; the time until it served a request.
fn restart(dir: &Path, data: &Path) -> (Ankh, Duration) {
    let cache = benches::root().join("target/bench-cache");
    let started = Instant::now();
    let ankh = benches::serve(
        dir,
        &cache,
        &["--data-dir", data.to_str().unwrap(), "--no-watch"],
    );
    get(ankh.addr, "/bench0/");
    (ankh, started.elapsed())
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, round) = if quick {
        (1, Duration::from_secs(2))
    } else {
        (5, Duration::from_secs(4))
    };
    let plugin = std::path::Path::new(ankh_test_support::harness::plugins::BENCH);
    println!("machine: {}", benches::machine());

    // 1. A durable write per request, file against memory.
    let contenders: [(&str, &[&str]); 4] = [
        ("file (default)", &[]),
        ("memory", &["--kv", "memory"]),
        ("file, 64 workers", &["--workers", "64"]),
        ("memory, 64 workers", &["--kv", "memory", "--workers", "64"]),
    ];
    let mut runs: Vec<Vec<(Run, f64)>> = vec![Vec::new(); contenders.len()];
    for _ in 0..rounds {
        for (i, (_, args)) in contenders.iter().enumerate() {
            runs[i].push(increments(plugin, args, round));
        }
    }
    println!(
        "{:<20} {:>10} {:>9} {:>9} {:>16}",
        "kv backend", "req/s", "p50 ms", "p99 ms", "writes / commit"
    );
    let mut summary = Vec::new();
    for ((name, _), runs) in contenders.iter().zip(&runs) {
        let rps = median(runs.iter().map(|(r, _)| r.rps).collect());
        let p50 = median(runs.iter().map(|(r, _)| r.p50_ms).collect());
        let p99 = median(runs.iter().map(|(r, _)| r.p99_ms).collect());
        let group = median(runs.iter().map(|(_, g)| *g).collect());
        println!("{name:<20} {rps:>10.0} {p50:>9.2} {p99:>9.2} {group:>16.1}");
        summary.push(json!({"backend": name, "rps": rps, "p50_ms": p50, "p99_ms": p99,
            "writes_per_commit": group, "rounds": runs.iter().map(|(r, _)| r.rps).collect::<Vec<_>>()}));
    }
    let rps = |i: usize| summary[i]["rps"].as_f64().unwrap();
    let ratio = rps(0) / rps(1);
    println!(
        "file / memory: {ratio:.2} at the defaults, {:.2} with 64 workers ({CONNECTIONS} connections, median of {rounds} alternating rounds of {}s)",
        rps(2) / rps(3),
        round.as_secs()
    );

    // 2. Restart with PLUGINS x KEYS_PER_PLUGIN keys.
    let base = TempDir::new("kv-bench");
    let dir = base.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..PLUGINS {
        std::fs::copy(plugin, dir.join(format!("bench{i}.wasm"))).unwrap();
    }
    let full = base.path().join("full");
    let empty = base.path().join("empty");
    let (ankh, _) = restart(&dir, &full);
    let filling = Instant::now();
    for i in 0..PLUGINS {
        let n = get(ankh.addr, &format!("/bench{i}/fill?n={KEYS_PER_PLUGIN}"));
        assert_eq!(n.trim(), KEYS_PER_PLUGIN.to_string());
    }
    let fill_secs = filling.elapsed().as_secs_f64();
    ankh.terminate();
    let size_mib =
        std::fs::metadata(full.join("kv.redb")).map_or(0.0, |m| m.len() as f64 / 1048576.0);
    let samples = if quick { 1 } else { 5 };
    let mut clean = Vec::new();
    let mut crashed = Vec::new();
    let mut baseline = Vec::new();
    for _ in 0..samples {
        let (ankh, t) = restart(&dir, &full);
        clean.push(t.as_secs_f64() * 1000.0);
        // Proof the data is there: a counter past the filled keys reads them back.
        assert_eq!(get(ankh.addr, "/bench9/incr?key=fill/00099999"), "100000");
        assert_eq!(get(ankh.addr, "/bench9/incr?key=fill/00099999"), "100001");
        drop(ankh); // SIGKILL: the next open repairs
        let (ankh, t) = restart(&dir, &full);
        crashed.push(t.as_secs_f64() * 1000.0);
        ankh.terminate();
        let (ankh, t) = restart(&dir, &empty);
        baseline.push(t.as_secs_f64() * 1000.0);
        ankh.terminate();
        // Undo the two increments so every sample restarts the same data.
        let (ankh, _) = restart(&dir, &full);
        get(ankh.addr, "/bench9/fill?n=100000");
        ankh.terminate();
    }
    let (clean, crashed, baseline) = (median(clean), median(crashed), median(baseline));
    println!(
        "restart with {} keys ({size_mib:.0} MiB kv.redb, filled in {fill_secs:.1}s): first request after {clean:.0} ms (clean stop), {crashed:.0} ms (after kill -9); empty store: {baseline:.0} ms; ratio {:.2}",
        PLUGINS * KEYS_PER_PLUGIN,
        clean / baseline
    );
    drop(base);

    let doc = json!({
        "machine": benches::machine(),
        "connections": CONNECTIONS,
        "round_seconds": round.as_secs(),
        "increment": summary,
        "file_over_memory": ratio,
        "file_over_memory_64_workers": rps(2) / rps(3),
        "restart": {
            "keys": PLUGINS * KEYS_PER_PLUGIN,
            "db_mib": size_mib,
            "clean_ms": clean,
            "after_kill_ms": crashed,
            "empty_ms": baseline,
        },
    });
    benches::write_results("kv.json", &doc);
}
