//! The floor under a server of WASI 0.3 components on wasmtime 48 (see `benches/floor.rs`):
//! `cargo bench -p benches --bench p3floor` prints the requests per second it reaches, in
//! process, by round. `benches/wasi_http.rs` runs it beside ankh and `wasmtime serve`.
//!
//! `ANKH_CALLS=N` runs N requests one after another on one thread and exits, for an
//! instruction count (`valgrind --tool=callgrind`, N and 10 requests, subtract).

use std::time::Duration;

use benches::floor;

fn main() {
    if let Some(n) = std::env::var("ANKH_CALLS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let handler = floor::handler();
            for _ in 0..n {
                assert_eq!(floor::one(&handler).await.0, 200);
            }
        });
        std::process::exit(0);
    }
    let rt = floor::runtime();
    let handler = floor::handler();
    let (status, len) = rt.block_on(floor::one(&handler));
    assert_eq!(status, 200, "p3spin answers 200");
    let round = Duration::from_secs(3);
    println!(
        "WASI 0.3 hello (p3spin, {len} B) through wasmtime-wasi-http's ProxyHandler, in process, \
         {} in flight, rounds of {}s:",
        floor::CONCURRENT,
        round.as_secs()
    );
    let mut rates: Vec<f64> = (1..=5)
        .map(|i| {
            let rate = floor::rate(&rt, &handler, round);
            println!("  round {i}: {rate:.0} req/s");
            rate
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "  median {:.0} req/s (range {:.0}-{:.0}); {} instances made",
        rates[2],
        rates[0],
        rates[4],
        handler
            .state()
            .made
            .load(std::sync::atomic::Ordering::Relaxed)
    );
}
