//! The only layer that owns sockets: one thread, one `mio` loop, every connection.
//!
//! - [`io`]: the non-blocking idioms (would-block, interrupted) named once;
//! - [`conn`]: one connection's state machine, from bytes read to bytes written;
//! - [`ws`]: the WebSocket side of a connection after its upgrade;
//! - [`event_loop`]: accept, readiness, replies from workers, timers.

pub mod conn;
pub mod event_loop;
pub mod io;
pub mod ws;
