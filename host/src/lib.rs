//! ankh: an HTTP/1.1 application server whose request handlers are WebAssembly components.
//!
//! Data flows one way, and the modules are listed in that order:
//!
//! ```text
//! net (mio socket loop) → proto::request / proto::body (parse) → dispatch (route, queue)
//!   → pool (the loop itself, or worker threads) → runtime (wasm instance, under limits) → proto::response (bytes)
//!   → pool::reply::Reply + waker → net (write)
//! ```
//!
//! A call starts on the I/O thread that read its request and moves to a worker once its guest
//! computes past an epoch tick (waits suspend it and hold no thread), and nothing a plugin does (a trap, a runaway loop, a
//! memory bomb) leaves its instance: that request gets a 5xx, the instance is replaced, the
//! server keeps serving. Configuration, the CLI and plugin building sit at the edges.

// The library's public items are what the binary, the tests and the benches use; everything
// else is `pub(crate)`, so the compiler sees dead code. Its docs are for contributors and are
// built with `--document-private-items` (docs/testing.md): they link to private items freely.
#![allow(rustdoc::private_intra_doc_links)]

// Every bound, in one place.
pub mod limits;

// Warnings that traffic can trigger at will, rate-limited.
#[macro_use]
mod log_limit;

// Sans-IO HTTP/1.1.
pub mod proto;

// Driving one future to its end from plain code.
mod blocking;

// Per-request text without the formatting machinery.
mod text;

// Ids and messages every layer shares, and the table of open WebSockets.
pub mod hub;
pub mod message;

// Plugins' key-value data: durable by default.
pub mod kv;

// Many processes as one application: WebSocket topics and connections through Redis.
mod cluster;

// The wasm side.
pub mod runtime;

// Where plugins' WebSocket operations go: the hub, the event loops, the cluster.
pub mod ws_router;

// Worker threads.
pub mod pool;

// From request to worker.
mod dispatch;

// Sockets.
pub mod net;

// The access log, written by whoever answers.
pub mod access;
// Trace context in and out, spans, and their export over OTLP.
pub mod trace;

// The edges: configuration, loading plugins, the admin listener, assembly.
mod admin;
pub mod config;
pub mod loader;
mod metrics;
mod reload;
pub mod scheduler;
pub mod server;
pub mod settings;

// The fuzz targets' bodies: built for cargo-fuzz (`--cfg fuzzing`) and for the unit test that
// runs them on their seeds.
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
