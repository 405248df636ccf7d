//! The plugin's configuration values and secrets, as its policy declares them.
//!
//! A plugin declares each value in its `NAME.toml` and the operator gives it (an environment
//! variable, the secrets file, the server's config file, or the declared default):
//!
//! ```toml
//! [[config]]
//! name = "api_key"
//! secret = true       # never logged by the host; masked in this plugin's own log lines
//! required = true     # without it the plugin is not served
//!
//! [[config]]
//! name = "greeting"
//! default = "hello"
//! ```
//!
//! ```no_run
//! use ankh_guest::prelude::*;
//!
//! fn hello(_req: &Request) -> Response {
//!     let greeting = config::get("greeting").unwrap_or_else(|| "hi".into());
//!     Response::text(format!("{greeting}, world"))
//! }
//! # let _ = hello;
//! ```
//!
//! Values are read through the standard `wasi:config/store` interface, so the same calls work
//! under other hosts that give it (`wasmtime serve`, Spin). A plugin sees only the values its
//! own policy declares; a name it did not declare reads as absent.

use crate::bindings::wasi::config::store;

/// The value `name`, or `None` when the plugin did not declare it or nothing gives it (and it
/// has no default).
pub fn get(name: &str) -> Option<String> {
    store::get(name).ok().flatten()
}

/// Every value the plugin has, as `(name, value)` pairs in no particular order.
pub fn all() -> Vec<(String, String)> {
    store::get_all().unwrap_or_default()
}
