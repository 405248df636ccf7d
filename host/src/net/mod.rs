//! The only layer that owns sockets: `--io-threads` threads, each with its own `mio` loop and
//! its own connections.
//!
//! - [`io`]: the non-blocking idioms (would-block, interrupted) named once;
//! - [`input`] and [`outbuf`]: a connection's read and write sides, shared by both kinds;
//! - [`http`]: an HTTP/1.1 connection, from bytes read to a request, and a response to bytes;
//! - [`ws`]: the WebSocket protocol state of a connection after its upgrade;
//! - [`ws_conn`]: a WebSocket connection (its socket, buffers and protocol state);
//! - [`conn`]: either kind, and the transport they run on;
//! - [`event_loop`]: accept, readiness, timers, drain; `deliver`: driving connections and
//!   routing replies from workers to them;
//! - [`shards`]: several loops: building them, handing accepted connections out, running them.

mod alarm;
pub mod conn;
mod deliver;
pub mod event_loop;
pub mod http;
pub mod input;
pub mod io;
pub mod outbuf;
pub mod shards;
pub mod ws;
pub mod ws_conn;
