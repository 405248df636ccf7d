//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then `curl localhost:8080/trap/panic`.
//!
//! A plugin that traps on request (acceptance 61): the host must answer 500 naming the plugin
//! and the request id, log a symbolized backtrace, and serve the next request on a fresh
//! instance, which `/trap/ok` shows by its count starting again at 1.
//!
//! - `GET /trap/ok`: `ok <n>`, n = requests this instance has served, this one included
//! - `GET /trap/panic`: a Rust panic
//! - `GET /trap/unreachable`: the wasm `unreachable` instruction

use std::sync::atomic::{AtomicU64, Ordering};

use ankh_guest::prelude::*;

/// Requests served by this instance; a fresh instance starts from zero.
static SERVED: AtomicU64 = AtomicU64::new(0);

fn count() -> u64 {
    SERVED.fetch_add(1, Ordering::Relaxed) + 1
}

fn router() -> Router {
    Router::new()
        .get("/ok", |_req| format!("ok {}", count()))
        .get("/panic", |_req| -> Response {
            count();
            panic!("boom: trap plugin panicked on purpose")
        })
        .get("/unreachable", |_req| -> Response {
            count();
            #[cfg(target_arch = "wasm32")]
            core::arch::wasm32::unreachable();
            #[cfg(not(target_arch = "wasm32"))]
            std::process::abort();
        })
}

ankh_guest::export_plugin!(router);
