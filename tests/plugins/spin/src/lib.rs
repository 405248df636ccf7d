//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then `curl localhost:8080/spin/loop`.
//!
//! A plugin that never returns (acceptance 62): the host must interrupt it at its deadline,
//! answer 504 (or 503), and free the worker. `/spin/ok` then answers on a fresh instance.
//!
//! - `GET /spin/ok`: `ok <n>`, n = requests this instance has served, this one included
//! - `GET /spin/loop`: loops forever without calling the host
//! - `GET /spin/burn?ms=N`: computes for N ms by its clock, then answers `burned`

use std::sync::atomic::{AtomicU64, Ordering};

use ankh_guest::prelude::*;

/// Requests served by this instance; a fresh instance starts from zero.
static SERVED: AtomicU64 = AtomicU64::new(0);

fn count() -> u64 {
    SERVED.fetch_add(1, Ordering::Relaxed) + 1
}

/// `black_box` makes every iteration observable, so the optimiser cannot drop the loop.
fn spin(_req: &Request) -> Response {
    let mut x = count();
    loop {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
}

fn burn(req: &Request) -> Response {
    let ms: u64 = req
        .query_param("ms")
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
    let mut x = count();
    while std::time::Instant::now() < until {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
    Response::text("burned")
}

fn router() -> Router {
    Router::new()
        .get("/ok", |_req| format!("ok {}", count()))
        .get("/loop", spin)
        .get("/burn", burn)
}

ankh_guest::export_plugin!(router);
