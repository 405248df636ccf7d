//! Build: `cd plugins && cargo build --release --target wasm32-wasip2`, then `wrk -c100 -d10s localhost:8080/bench`.
//!
//! Load-test targets: a minimal response, a CPU-bound one and a blocking one.
//!
//! - `GET /bench` (or `/bench/`): `Hello, World!`
//! - `GET /bench/busy?us=N`: spins the CPU for N microseconds (at most 1 s), then `ok`
//! - `GET /bench/sleep?ms=N`: blocks N milliseconds (at most 10 s), then `ok`
//! - `GET /bench/ws`: a WebSocket that echoes every message, except `publish:TEXT`, which
//!   publishes TEXT to the topic `bench`; every connection is subscribed to it on open.
//! - `GET /bench/incr?key=K`: `kv::increment(K, 1)`, the new value (a durable write per request)
//! - `GET /bench/fill?n=N`: stores N keys `fill/00000000`.. in batches of 1000 (at most 100,000,
//!   the per-plugin key limit), for restart benchmarks

use std::time::{Duration, Instant};

use ankh_guest::prelude::*;

/// The longest `/bench/busy` spin, in microseconds: a load test needs no more, and a public
/// example should not hand out a CPU-second per request.
const MAX_BUSY_US: u64 = 1_000_000;

/// The longest `/bench/sleep`, in milliseconds.
const MAX_SLEEP_MS: u64 = 10_000;

/// Parses the query parameter `name` as a `u64` of at most `max`, or explains why not as a
/// `400`.
fn number(req: &Request, name: &str, max: u64) -> Result<u64, Response> {
    let raw = req
        .query_param(name)
        .ok_or_else(|| Response::bad_request(format!("missing query parameter `{name}`")))?;
    raw.parse().ok().filter(|n| *n <= max).ok_or_else(|| {
        Response::bad_request(format!("`{name}` must be an integer from 0 to {max}"))
    })
}

/// Busy-waits on the monotonic clock (WASI `monotonic-clock`), so the time is spent in wasm.
fn busy(req: &Request) -> Result<&'static str, Response> {
    let budget = Duration::from_micros(number(req, "us", MAX_BUSY_US)?);
    let start = Instant::now();
    while start.elapsed() < budget {
        std::hint::spin_loop();
    }
    Ok("ok")
}

/// Blocks the worker without using the CPU, like a handler waiting on a slow backend.
fn sleep(req: &Request) -> Result<&'static str, Response> {
    std::thread::sleep(Duration::from_millis(number(req, "ms", MAX_SLEEP_MS)?));
    Ok("ok")
}

/// One durable write per request: the cost of the key-value store on the request path.
fn incr(req: &Request) -> Result<String, Response> {
    let key = req
        .query_param("key")
        .unwrap_or_else(|| "counter".to_owned());
    Ok(kv::increment(&key, 1)?.to_string())
}

/// Fills the namespace with `n` small keys, a batch of 1000 per store call.
fn fill(req: &Request) -> Result<String, Response> {
    let n = number(req, "n", 100_000)?;
    for start in (0..n).step_by(1000) {
        let batch: Vec<(String, String)> = (start..n.min(start + 1000))
            .map(|i| (format!("fill/{i:08}"), i.to_string()))
            .collect();
        let entries: Vec<(&str, &[u8])> = batch
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_bytes()))
            .collect();
        kv::set_many(&entries)?;
    }
    Ok(n.to_string())
}

/// The WebSocket benchmark endpoint: echo, and a broadcast topic every connection is on.
struct Bench;

impl WebSocketHandler for Bench {
    fn on_open(conn: ws::ConnectionId, _request: &Request) {
        let _ = ws::subscribe(conn, "bench");
    }

    fn on_message(conn: ws::ConnectionId, message: ws::Message) {
        if let ws::Message::Text(text) = &message
            && let Some(body) = text.strip_prefix("publish:")
        {
            let _ = ws::publish("bench", &ws::Message::Text(body.to_owned()));
            return;
        }
        let _ = ws::send(conn, &message);
    }
}

fn router() -> Router {
    Router::new()
        .get("/", |_req| "Hello, World!")
        .get("/busy", busy)
        .get("/sleep", sleep)
        .get("/incr", incr)
        .get("/fill", fill)
        .get("/ws", |_req| Outcome::upgrade())
}

ankh_guest::export_plugin!(router, websocket = Bench);
