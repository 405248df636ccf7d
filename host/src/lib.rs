//! ankh: an HTTP/1.1 application server whose request handlers are WebAssembly components.
//!
//! Data flows one way:
//!
//! ```text
//! net (mio socket loop) → proto::request / proto::body (parse) → dispatch (route, queue)
//!   → pool (worker threads) → runtime (wasm instance, under limits) → proto::response (bytes)
//!   → job::Reply + waker → net (write)
//! ```
//!
//! Handlers never run on the I/O thread, and nothing a plugin does (a trap, a runaway loop, a
//! memory bomb) leaves its instance: that request gets a 5xx, the instance is replaced, the
//! server keeps serving. Configuration, the CLI and plugin building sit at the edges.

pub mod limits;
pub mod proto;
pub mod job;
pub mod runtime;
pub mod pool;
pub mod dispatch;
pub mod net;

pub mod builder;
pub mod cli;
pub mod config;
pub mod loader;
pub mod server;
