//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`; never served by
//! default.
//!
//! A plugin whose start code is slow: its exported `_initialize`, which every instantiation
//! runs before anything else, sleeps `SLOW_START_MS` milliseconds (the policy may grant that
//! variable; 20000 without it). Once started it answers `GET /slowstart` with `started`.

use std::time::Duration;

use ankh_guest::prelude::*;

/// The component's start function. Exporting it by hand replaces the (empty) one the
/// toolchain provides, which needs an unmangled name, an `unsafe` attribute.
#[allow(unsafe_code)]
// SAFETY: `_initialize` is the reactor start symbol; nothing else in this module defines it,
// and it takes and returns nothing, so its C ABI signature is the one the runtime calls.
#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    let ms = std::env::var("SLOW_START_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    std::thread::sleep(Duration::from_millis(ms));
}

fn router() -> Router {
    Router::new().get("/", |_req| "started")
}

ankh_guest::export_plugin!(router);
