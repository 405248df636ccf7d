//! What ankh's tests and benches share, written once: temporary directories, the `ankh`
//! launcher and its HTTP clients ([`harness`]), WebSocket clients and raw frames ([`ws`]),
//! `/metrics` scraped and parsed ([`metrics`]), real Redis and nginx servers ([`services`]),
//! a local HTTP service for plugins to call ([`upstream`]), an OTLP receiver ([`otlp`]), the plugins built from source
//! ([`harness::plugins`], by `build.rs` with [`build_plugins`]) and a `wasmtime serve` to
//! compare with ([`wasmtime_serve`]).
//!
//! The tests themselves are targets of the `ankh` package (`host/Cargo.toml`), so the binary
//! they start is always the one cargo has just built for them. The benches (`benches/`) start
//! the release binary through the same launcher ([`harness::Options::bin`]).

pub mod build_plugins;
pub mod harness;
pub mod metrics;
pub mod otlp;
pub mod services;
pub mod upstream;
pub mod wasmtime_serve;
pub mod ws;
