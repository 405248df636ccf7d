//! Build: `cd plugins && cargo build --release --target wasm32-wasip2`, then `wrk -c100 -d10s localhost:8080/bench`.
//!
//! Load-test targets: a minimal response, a CPU-bound one and a blocking one.
//!
//! - `GET /bench` (or `/bench/`): `Hello, World!`
//! - `GET /bench/busy?us=N`: spins the CPU for N microseconds, then `ok`
//! - `GET /bench/sleep?ms=N`: blocks N milliseconds, then `ok`

use std::time::{Duration, Instant};

use ankh_guest::prelude::*;

/// Parses the query parameter `name` as a `u64`, or explains why not as a `400`.
fn number(req: &Request, name: &str) -> Result<u64, Response> {
    let raw = req
        .query_param(name)
        .ok_or_else(|| Response::bad_request(format!("missing query parameter `{name}`")))?;
    raw.parse()
        .map_err(|_| Response::bad_request(format!("`{name}` must be a non-negative integer")))
}

/// Busy-waits on the monotonic clock (WASI `monotonic-clock`), so the time is spent in wasm.
fn busy(req: &Request) -> Result<&'static str, Response> {
    let budget = Duration::from_micros(number(req, "us")?);
    let start = Instant::now();
    while start.elapsed() < budget {
        std::hint::spin_loop();
    }
    Ok("ok")
}

/// Blocks the worker without using the CPU, like a handler waiting on a slow backend.
fn sleep(req: &Request) -> Result<&'static str, Response> {
    std::thread::sleep(Duration::from_millis(number(req, "ms")?));
    Ok("ok")
}

fn router() -> Router {
    Router::new()
        .get("/", |_req: &Request| "Hello, World!")
        .get("/busy", busy)
        .get("/sleep", sleep)
}

ankh_guest::export_plugin!(router);
