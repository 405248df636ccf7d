//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then `curl localhost:8080/stack/overflow`.
//!
//! A plugin whose stack overflows (acceptance 64): the trap must be contained like a panic,
//! and `/stack/ok` then answers on a fresh instance.
//!
//! - `GET /stack/ok`: `ok <n>`, n = requests this instance has served, this one included
//! - `GET /stack/overflow`: recurses without bound with 1 KiB of locals per frame, so Rust's
//!   shadow stack in linear memory runs out (wasmtime reports an out-of-bounds access)
//! - `GET /stack/deep`: recurses without bound with tiny frames, so the wasm call stack itself
//!   runs out (wasmtime reports call stack exhaustion)

use std::sync::atomic::{AtomicU64, Ordering};

use ankh_guest::prelude::*;

/// Requests served by this instance; a fresh instance starts from zero.
static SERVED: AtomicU64 = AtomicU64::new(0);

/// Bytes of locals each frame keeps alive across its recursive call.
const FRAME_BYTES: usize = 1024;

fn count() -> u64 {
    SERVED.fetch_add(1, Ordering::Relaxed) + 1
}

/// The frame's array is used after the recursive call, so the call cannot become a tail call
/// or a loop; `black_box` hides the (unreachable) base case from the optimiser.
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let mut frame = [0u8; FRAME_BYTES];
    frame[depth as usize % FRAME_BYTES] = depth as u8;
    let frame = std::hint::black_box(frame);
    if std::hint::black_box(depth) == u64::MAX {
        return 0;
    }
    recurse(depth + 1).wrapping_add(u64::from(frame[(depth as usize * 7) % FRAME_BYTES]))
}

/// Frames with no locals in linear memory: the wasm call stack is what runs out. The work
/// after the call (two different operations) keeps it from becoming a loop.
#[inline(never)]
fn deep(depth: u64) -> u64 {
    if depth == u64::MAX {
        return 0;
    }
    (deep(std::hint::black_box(depth + 1)).wrapping_mul(depth)) ^ depth
}

fn router() -> Router {
    Router::new()
        .get("/ok", |_req| format!("ok {}", count()))
        .get("/overflow", |_req| {
            count();
            format!("depth {}", recurse(0))
        })
        .get("/deep", |_req| {
            count();
            format!("depth {}", deep(0))
        })
}

ankh_guest::export_plugin!(router);
