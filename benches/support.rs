//! Shared measurement helpers for the benchmarks: time a closure over many iterations, and
//! report a candidate against a baseline measured in the same run as a ratio, because absolute
//! numbers on a shared machine mean little.

use std::hint::black_box;
use std::time::{Duration, Instant};

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
