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
//!
//! The loops hand complete requests and WebSocket events to a [`Handler`], declared here and
//! implemented by the server's dispatcher (`crate::dispatch`): the loops know no plugin and
//! no worker, and the arrow runs from the dispatcher to them, never back.

mod alarm;
pub mod conn;
mod deliver;
pub mod event_loop;
pub mod http;
pub(crate) mod input;
pub(crate) mod io;
pub(crate) mod outbuf;
pub(crate) mod shards;
pub(crate) mod timers;
pub mod ws;
pub(crate) mod ws_conn;

use crate::message::{ConnId, WsEvent};

/// What the event loops hand complete requests and WebSocket events to: the server's
/// dispatcher, which finds their plugins and queues their calls.
pub(crate) trait Handler: http::Router + ws_conn::Events + Send {
    /// Hands on a complete request of connection `conn`, or says what to answer instead.
    fn dispatch(&mut self, conn: ConnId, request: http::Dispatch) -> Result<(), Immediate>;
    /// The server is draining: takes back every request no call has started (their
    /// connections are answered 503), whichever loop queued it.
    fn take_unstarted_requests(&mut self) -> Vec<(ConnId, u64)>;
    /// Makes this thread, event loop `shard` of `loops`, run calls itself.
    fn run_calls_here(&self, shard: usize, loops: usize);
    /// Requests waiting for a call to start them.
    fn queued(&self) -> usize;
    /// Another handle to the same dispatcher, for another loop.
    fn another(&self) -> Box<dyn Handler>;
}

/// An answer written by the host itself, without a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Immediate {
    pub status: u16,
    pub message: String,
    pub retry_after: Option<u32>,
}

/// Why an event was not handed to its plugin.
#[derive(Debug)]
pub(crate) enum Undelivered {
    /// No room to queue it; here is the event back, try again later.
    Busy(WsEvent),
    /// The plugin is no longer mounted; the event was dropped.
    Gone,
}
