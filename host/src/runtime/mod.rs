//! The wasm side of the host: compiling plugins, instantiating them, calling them under limits.
//!
//! Three rooms, and one vocabulary they share:
//!
//! - [`engine`]: how a component is compiled, linked and called. The wasmtime `Engine` and
//!   `Linker`, a loaded [`Plugin`](engine::plugin::Plugin) and its [`Policy`](engine::policy::Policy), the [`Registry`](engine::registry::Registry) of mounts, the
//!   worlds a plugin may target and their calling conventions (`packed`, `incoming`,
//!   `proxy`), and a plugin's live instances.
//! - [`sandbox`]: what bounds a call. The data of every store (`store`), the memory cap and
//!   the CPU budget (`caps`), the limits of one plugin in one place (`guest_limits`), the
//!   wall-clock watch, the waits that it bounds, the guest timer, the clocks, and how a call
//!   failed.
//! - [`host`]: what a guest may import, one file per interface (`log`, `http`, `websocket`,
//!   `kv`, `stdio`, `legacy`, outbound HTTP and its grants).
//! - [`bindings`]: the types `bindgen!` generates from the WIT, which all three use.
//!
//! The engine uses the sandbox and the host; the host side of each import works on the
//! sandbox's store data; neither reaches back into the engine. The runtime knows nothing of
//! sockets, event loops or worker queues: answers leave through [`host::http::Respond`] and
//! WebSocket messages through [`host::websocket::WebSockets`], which the pool and the server
//! implement. Its threads are its tickers: the epoch ticker (`engine`, one per engine), the
//! guest timer (`sandbox::timer`, one, for precise sleeps) and the idle-instance trimmer
//! (`engine::registry`, one per registry).

// Generated code: its visibility is bindgen's.
#[allow(unreachable_pub)]
pub mod bindings;
pub mod engine;
pub mod host;
pub mod sandbox;
