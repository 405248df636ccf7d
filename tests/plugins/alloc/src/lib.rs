//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then `curl localhost:8080/alloc/bomb`.
//!
//! A plugin that allocates without bound (acceptance 63): the host must stop it at its memory
//! cap, answer 500, and keep its own RSS bounded. `/alloc/ok` then answers on a fresh instance.
//!
//! - `GET /alloc/ok`: `ok <n>`, n = requests this instance has served, this one included
//! - `GET /alloc/bomb`: allocates 1 MiB at a time, touching every page, and frees nothing

use std::sync::atomic::{AtomicU64, Ordering};

use ankh_guest::prelude::*;

/// Requests served by this instance; a fresh instance starts from zero.
static SERVED: AtomicU64 = AtomicU64::new(0);

/// The size of each allocation.
const CHUNK_BYTES: usize = 1 << 20;
/// Write one byte per host page so the memory is really committed, not just reserved.
const HOST_PAGE_BYTES: usize = 4096;

fn count() -> u64 {
    SERVED.fetch_add(1, Ordering::Relaxed) + 1
}

/// Ends when an allocation fails: Rust's allocation error handler aborts, which traps.
fn bomb(_req: &Request) -> Response {
    count();
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        for (i, page) in chunk.chunks_mut(HOST_PAGE_BYTES).enumerate() {
            page[0] = i as u8 | 1;
        }
        hoard.push(std::hint::black_box(chunk));
        std::hint::black_box(&hoard);
    }
}

fn router() -> Router {
    Router::new()
        .get("/ok", |_req| format!("ok {}", count()))
        .get("/bomb", bomb)
}

ankh_guest::export_plugin!(router);
