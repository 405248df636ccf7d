//! Every bound a plugin instance runs under, decided in one place: [`GuestLimits::for_plugin`]
//! takes the plugin's policy (itself the server's limits, lowered or raised by `NAME.toml`)
//! and the constants of [`crate::limits`], and [`configure_store`] arms a store with them
//! (wasmtime's `store_limits()`/`configure_store` are the model). The rest of the runtime reads
//! its bounds from here, so `ankh check` can print them and nothing else hard-codes one.

use std::time::Duration;

use wasmtime::Store;

use crate::limits::{self, Limits};
use crate::runtime::sandbox::store::HostState;

/// The bounds of one plugin's instances and calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLimits {
    /// Linear memory per instance (all its memories together).
    pub memory_bytes: usize,
    /// Entries of an instance's resource table (streams, pollables, sockets).
    pub table_entries: usize,
    /// Wasm stack per call; engine-wide (every plugin's is the same), shown here for
    /// completeness.
    pub stack_bytes: usize,
    /// CPU time per call, charged on each epoch tick that finds the guest running.
    pub cpu_deadline: Duration,
    /// How often the epoch ticks: the precision of the CPU deadline.
    pub epoch_tick: Duration,
    /// Wall-clock time per call (and per instantiation), waits included.
    pub handler_timeout: Duration,
    /// Key-value: the namespace's quota (bytes of keys plus values, keys), one key, one
    /// value, one batch, one page.
    pub kv: crate::kv::Bounds,
    /// WebSocket: one message a plugin sends, a topic name, topics per connection.
    pub ws_max_message_bytes: usize,
    pub ws_max_topic_bytes: usize,
    pub ws_max_topics_per_connection: usize,
    /// The response body a `wasi:http/proxy` instance may give.
    pub max_response_bytes: u64,
    /// One `log` message (longer ones are cut).
    pub log_message_bytes: usize,
    /// The steps the clocks move in.
    pub clock_resolution: Duration,
}

impl GuestLimits {
    /// The bounds of a plugin whose limits are `l` (the server's, as its policy may override
    /// them), with clocks at full resolution if `precise_clocks`.
    pub(crate) fn for_plugin(l: &Limits, precise_clocks: bool) -> Self {
        GuestLimits {
            memory_bytes: l.guest_memory_bytes,
            table_entries: limits::GUEST_TABLE_ENTRIES,
            stack_bytes: limits::GUEST_STACK_BYTES,
            cpu_deadline: l.guest_cpu_deadline,
            epoch_tick: limits::EPOCH_TICK,
            handler_timeout: l.handler_timeout,
            kv: crate::kv::Bounds::with_quota(l.kv_max_bytes),
            ws_max_message_bytes: l.ws_max_message_bytes,
            max_response_bytes: l.max_response_bytes,
            ws_max_topic_bytes: limits::WS_MAX_TOPIC_BYTES,
            ws_max_topics_per_connection: limits::WS_MAX_TOPICS_PER_CONNECTION,
            log_message_bytes: limits::GUEST_LOG_MESSAGE_BYTES,
            clock_resolution: if precise_clocks {
                Duration::from_nanos(1)
            } else {
                limits::GUEST_CLOCK_RESOLUTION
            },
        }
    }
}

/// Arms a fresh store: its memory limiter, and the epoch callback that charges the guest's CPU
/// on every tick that finds it running, and stops it when its call ran out of CPU or of
/// wall-clock time, or its client left. (The resource-table cap, the clocks and the wall-clock
/// watch are set when the store's [`HostState`] is built, from the same [`GuestLimits`].)
pub(crate) fn configure_store(store: &mut Store<HostState>) {
    store.limiter(|s| &mut s.memory);
    store.epoch_deadline_callback(|mut ctx| {
        let state = ctx.data_mut();
        let tick = state.limits.epoch_tick;
        let within_budget = state.budget.tick(tick);
        if within_budget && state.watch.check(std::time::Instant::now()).is_none() {
            if crate::runtime::sandbox::exec::others_ready() {
                // A guest that computes gives its thread, once a tick, to calls of the same
                // worker that are ready to resume and to jobs waiting to start, rather than
                // holding it until it is done.
                state.budget.yielded();
                crate::runtime::sandbox::exec::note_yield();
                Ok(wasmtime::UpdateDeadline::Yield(1))
            } else {
                Ok(wasmtime::UpdateDeadline::Continue(1))
            }
        } else {
            Ok(wasmtime::UpdateDeadline::Interrupt)
        }
    });
}
