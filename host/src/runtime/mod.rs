//! The wasm side of the host: compiling plugins, instantiating them, calling them under limits.
//!
//! Knows nothing of sockets, queues or threads beyond its own epoch ticker.
//!
//! - [`engine`]: the wasmtime `Engine` and `Linker`, the pooling allocator, the epoch ticker;
//! - [`plugin`]: a compiled, pre-instantiated plugin and its load errors;
//! - [`policy`]: what one plugin may do and use (its `NAME.toml`);
//! - [`registry`]: which plugin serves which path;
//! - [`instance`]: a live instance, and one call on it (a future, on a fiber) under limits;
//! - [`instances`]: the idle instances of a plugin, shared by the workers;
//! - [`exec`]: running a call (a future on a fiber) to completion from synchronous code;
//! - [`failure`]: how a call failed, for the client and for the log;
//! - [`guest_limits`]: every bound a plugin's instances and calls run under, in one place;
//! - [`state`]: the store data and the host side of the WIT imports;
//! - [`call`]: the request a call is answering, and sending its response;
//! - [`kv_host`]: the key-value imports (`kv`, `wasi:keyvalue`) over the plugin's namespace;
//! - [`world`]: which world a plugin targets (0.2.0, 0.1.0 or `wasi:http/proxy`), and calling it;
//! - [`proxy`]: serving a `wasi:http/proxy` component from a buffered request;
//! - [`outbound`]: outbound HTTP (`wasi:http/outgoing-handler`), pooled and bounded;
//! - [`http_grants`]: which origins a plugin may call, and which addresses it may reach;
//! - [`legacy`]: the imports of 0.1.0, so older plugins run unchanged;
//! - [`stdio`]: plugin stdout/stderr, captured into the host's log;
//! - [`timer`]: precise guest sleeps (replaces WASI's millisecond-rounded monotonic-clock timer);
//! - [`watch`]: a call's wall-clock deadline and its cancellation when the client leaves;
//! - [`waits`]: every blocking wait of a guest, bounded by its call's watch;
//! - [`clocks`]: the clocks plugins read, coarsened by default.

pub mod bindings;
pub mod call;
pub mod clocks;
pub mod engine;
pub mod exec;
pub mod failure;
pub mod guest_limits;
pub mod http_grants;
pub mod incoming;
pub mod instance;
pub mod instances;
pub mod kv_host;
pub mod legacy;
pub mod outbound;
pub mod packed;
pub mod plugin;
pub mod policy;
pub mod proxy;
pub mod registry;
pub mod state;
pub mod stdio;
pub mod timer;
pub mod waits;
pub mod watch;
pub mod world;
