//! Shared measurement helpers for the benchmarks: time a closure over many iterations, and
//! report a candidate against a baseline measured in the same run as a ratio, because absolute
//! numbers on a shared machine mean little.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Builds the example plugins (all, or one package) for wasm32-wasip2 in their own workspace,
/// and returns the directory the `.wasm` files are in.
pub fn build_example_plugins(package: Option<&str>) -> PathBuf {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args([
        "build",
        "--release",
        "--target",
        "wasm32-wasip2",
        "--manifest-path",
    ])
    .arg(root().join("plugins/Cargo.toml"));
    if let Some(p) = package {
        cmd.args(["-p", p]);
    }
    let status = cmd.status().expect("cargo");
    assert!(status.success(), "building the example plugins failed");
    root().join("plugins/target/wasm32-wasip2/release")
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
