//! The guest SDK for [ankh] plugins: write a request handler in Rust, build it for
//! `wasm32-wasip2`, and the host serves it.
//!
//! A plugin is a WebAssembly component that targets the `plugin` world of `wit/plugin.wit`.
//! This crate generates the bindings for that world (as `sdk-plugin`: the same world plus
//! `packed-handler`, the entry point that takes the request as two buffers and returns the
//! answer as one, which is cheaper to call) and puts a small, axum-like layer on top:
//! a [`Router`] with path patterns, a [`Request`] with decoded accessors, a [`Response`]
//! builder, and thin wrappers over the host's [`kv`] store, [`log`] and [`ws`] (WebSocket)
//! imports. One macro, [`export_plugin!`], exports the whole thing, and [`testing`] runs the
//! router in a plain `cargo test`.
//!
//! # A complete plugin
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [package]
//! name = "hello"
//! edition = "2024"
//!
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! ankh-guest = { path = "../guest-sdk" }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```
//! use ankh_guest::prelude::*;
//!
//! /// Routes are relative to where the host mounts the plugin (`/hello` for `hello.wasm`).
//! fn router() -> Router {
//!     Router::new()
//!         .get("/", |_req| "Hello, World!")
//!         .get("/{name}", |req| {
//!             format!("Hello, {}!", req.param("name").unwrap_or("stranger"))
//!         })
//! }
//!
//! ankh_guest::export_plugin!(router);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` (after
//! `rustup target add wasm32-wasip2`); `target/wasm32-wasip2/release/hello.wasm` is the
//! component to drop into the host's plugin directory. A plain `cargo test` runs the router
//! without a host: see [`testing`].
//!
//! # How a request reaches a handler
//!
//! The host buffers the whole request and calls the plugin on one of its workers. The
//! instance builds the router once (on its first request) and keeps it; the router matches
//! [`Request::route_path`], the decoded path below the mount point, and runs the first route
//! whose pattern and method match. The handler returns anything that is [`IntoOutcome`]: a
//! [`Response`], a `String`, a `Result` of those (so `?` works), or an [`Outcome`], which can
//! also accept a WebSocket upgrade or say that [`Request::respond`] or [`Request::stream`]
//! already answered. A handler that streams its response ([`BodyWriter`], or [`sse`] for
//! Server-Sent Events) writes the body piece by piece, each leaving as it is written.
//!
//! Instances share no memory and the host may replace one at any time (after a trap, for
//! instance), so state that must outlive a request goes in the [`kv`] store.
//!
//! [ankh]: https://example.invalid/ankh

#![warn(missing_docs, missing_debug_implementations)]

/// The raw bindings generated from `wit/plugin.wit`; [`wit`] re-exports its data types.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "sdk-plugin",
        // The export macro is invoked from plugin crates through `export_plugin!`, which
        // names the types' path itself; `pub_export_macro` makes it visible to them.
        pub_export_macro: true,
        export_macro_name: "__export_plugin_world",
        default_bindings_module: "::ankh_guest::bindings",
        additional_derives: [PartialEq, Eq],
        generate_all,
    });
}

pub mod config;
mod exchange;
mod export;
pub mod http;
pub mod kv;
pub mod log;
mod packed;
mod pattern;
mod percent;
mod router;
pub mod schedule;
pub mod sse;
#[cfg(test)]
mod test_support;
pub mod testing;
pub mod ws;

pub use bindings::ankh::plugin::types as wit;
pub use exchange::{BodyWriter, IntoOutcome, JsonError, Outcome, Request, Response, StreamError};
pub use pattern::{PatternError, PatternErrorKind};
pub use router::Router;
pub use wit::{HttpVersion, RespondError};

/// Everything a typical plugin uses: `use ankh_guest::prelude::*;`.
pub mod prelude {
    pub use crate::ws::{self, WebSocketHandler};
    pub use crate::{
        BodyWriter, IntoOutcome, JsonError, Outcome, Request, Response, Router, StreamError,
        config, http, kv, log, schedule, sse,
    };
}

/// The glue `export_plugin!` expands to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::export::{
        handle_packed, handle_packed_answer, handle_request, on_close, on_message, on_open,
    };
}

impl HttpVersion {
    /// The version as written in a request line: `HTTP/1.0` or `HTTP/1.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http10 => "HTTP/1.0",
            Self::Http11 => "HTTP/1.1",
        }
    }
}

impl std::fmt::Display for HttpVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Exports a plugin: `export_plugin!(router_fn)`, with `websocket = MyHandler` and
/// `jobs = jobs_fn` after it as the plugin needs (in that order).
///
/// `router_fn` is a `fn() -> Router` (a path to a function, or a closure that captures
/// nothing); each instance calls it once, on its first request, and keeps the router.
/// `MyHandler` is a type that implements [`ws::WebSocketHandler`]; its functions receive the
/// WebSocket events. Without it, WebSocket events are ignored. `jobs_fn` is a
/// `fn() -> schedule::Jobs`: the functions run on the schedules the policy declares (see
/// [`schedule`]).
///
/// Use the macro once per plugin crate, at module level. The plugin needs no dependency
/// besides `ankh-guest`.
///
/// ```
/// use ankh_guest::prelude::*;
///
/// struct Echo;
///
/// impl WebSocketHandler for Echo {
///     fn on_message(conn: ws::ConnectionId, message: ws::Message) {
///         let _ = ws::send(conn, &message);
///     }
/// }
///
/// fn router() -> Router {
///     Router::new().get("/", |_req| Outcome::upgrade())
/// }
///
/// ankh_guest::export_plugin!(router, websocket = Echo);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($router:expr $(,)?) => {
        $crate::export_plugin!($router, websocket = $crate::ws::NoWebSocket);
    };
    ($router:expr, jobs = $jobs:expr $(,)?) => {
        $crate::export_plugin!($router, websocket = $crate::ws::NoWebSocket, jobs = $jobs);
    };
    ($router:expr, websocket = $websocket:ty $(,)?) => {
        $crate::export_plugin!(
            $router,
            websocket = $websocket,
            jobs = $crate::schedule::Jobs::new
        );
    };
    ($router:expr, websocket = $websocket:ty, jobs = $jobs:expr $(,)?) => {
        const _: () = {
            struct AnkhPlugin;

            impl $crate::bindings::exports::ankh::plugin::handler::Guest for AnkhPlugin {
                fn handle_request(request: $crate::wit::Request) -> $crate::wit::Outcome {
                    $crate::__private::handle_request($router, request)
                }
            }

            impl $crate::bindings::exports::ankh::plugin::packed_handler::Guest for AnkhPlugin {
                fn handle_request(
                    head: ::std::vec::Vec<u8>,
                    body: ::std::vec::Vec<u8>,
                ) -> $crate::wit::Outcome {
                    $crate::__private::handle_packed($router, head, body)
                }

                fn handle(
                    head: ::std::vec::Vec<u8>,
                    body: ::std::vec::Vec<u8>,
                ) -> ::std::vec::Vec<u8> {
                    $crate::__private::handle_packed_answer($router, head, body)
                }
            }

            impl $crate::bindings::exports::ankh::plugin::scheduled::Guest for AnkhPlugin {
                fn run(
                    job: $crate::bindings::exports::ankh::plugin::scheduled::Job,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::schedule::run_export($jobs, job)
                }
            }

            impl $crate::bindings::exports::ankh::plugin::websocket_handler::Guest for AnkhPlugin {
                fn on_open(conn: $crate::wit::ConnectionId, request: $crate::wit::Request) {
                    $crate::__private::on_open::<$websocket>(conn, request)
                }

                fn on_message(conn: $crate::wit::ConnectionId, message: $crate::wit::Message) {
                    $crate::__private::on_message::<$websocket>(conn, message)
                }

                fn on_close(conn: $crate::wit::ConnectionId, info: $crate::wit::CloseInfo) {
                    $crate::__private::on_close::<$websocket>(conn, info)
                }
            }

    $crate::bindings::__export_plugin_world!(AnkhPlugin with_types_in $crate::bindings);
        };
    };
}
