//! What crosses between the I/O thread and the workers.
//!
//! The I/O thread sends a [`Job`] (a complete request and where it came from) into the pool's
//! queue; a worker sends back a [`Reply`] (the bytes to write) through a [`ReplyTx`], which also
//! wakes the I/O thread. The pool never names mio: the wake-up is a plain function.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender};

use crate::proto::request::RequestHead;
use crate::runtime::plugin::Plugin;
use crate::runtime::watch::Cancel;

/// Identifies a connection for the lifetime of the process: the slot it occupies in the I/O
/// thread's table, and a serial number that is never reused. A reply whose serial does not
/// match the slot's current connection belongs to a connection that is gone, and is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub slot: usize,
    pub serial: u64,
}

/// Work for a worker: a request, or an event of a WebSocket connection.
#[derive(Debug)]
pub enum Job {
    Request(RequestJob),
    Event(EventJob),
}

/// One request for a worker.
#[derive(Debug)]
pub struct RequestJob {
    pub conn: ConnId,
    /// The request's position on its connection; replies for other positions are stale.
    pub seq: u64,
    /// Unique within this process; shown to the client on errors and in every log line.
    pub request_id: u64,
    pub plugin: Arc<Plugin>,
    /// The prefix the plugin was reached under (`""` for the index plugin).
    pub mount: Arc<str>,
    pub head: RequestHead,
    pub body: Vec<u8>,
    pub remote: SocketAddr,
    /// When the request was complete, for the access log's duration.
    pub received: std::time::Instant,
    /// The plugin's concurrency slot, held until the request is handled.
    pub slot: Option<crate::runtime::plugin::InFlight>,
    /// Fired by the I/O thread when the client disconnects: the call ends at once.
    pub cancel: Cancel,
}

/// One event of a WebSocket connection. The I/O thread hands a connection's events out one
/// at a time, so they reach the plugin in order and never concurrently.
#[derive(Debug)]
pub struct EventJob {
    pub conn: ConnId,
    pub ws: WsId,
    /// The plugin's current version: after a reload, events go to the new one.
    pub plugin: Arc<Plugin>,
    pub event: WsEvent,
}

/// Identifies a WebSocket connection for plugins. Never reused by a running host.
pub type WsId = u64;

/// A message a plugin sends. Its payload is reference-counted: a publish to many connections
/// holds one copy, not one per subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    /// A text message (the payload is UTF-8), else binary.
    pub text: bool,
    pub payload: bytes::Bytes,
}

impl Outbound {
    pub fn text(text: impl Into<String>) -> Self {
        Outbound {
            text: true,
            payload: bytes::Bytes::from(text.into().into_bytes()),
        }
    }

    pub fn binary(bytes: impl Into<Vec<u8>>) -> Self {
        Outbound {
            text: false,
            payload: bytes::Bytes::from(bytes.into()),
        }
    }
}

/// A complete WebSocket data message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsMessage {
    Text(String),
    Binary(Vec<u8>),
}

/// What happened on a WebSocket connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsEvent {
    Message(WsMessage),
    /// The connection ended; `clean` when the closing handshake completed.
    Close {
        code: u16,
        reason: String,
        clean: bool,
    },
}

/// What a worker hands back to the I/O thread.
#[derive(Debug)]
pub enum Reply {
    /// The response to request `seq` of `conn`.
    Response {
        conn: ConnId,
        seq: u64,
        /// A complete response, ready for the wire.
        bytes: Vec<u8>,
        /// Close the connection once `bytes` are written.
        close: bool,
    },
    /// Request `seq` of `conn` was accepted as a WebSocket: write `bytes` (the 101), then speak
    /// WebSocket. The plugin's open event is already running; `EventDone` follows it.
    Upgrade {
        conn: ConnId,
        seq: u64,
        bytes: Vec<u8>,
        ws: WsId,
        plugin: Arc<str>,
    },
    /// The event handed out for `ws` finished; the next one may go.
    EventDone { conn: ConnId, ws: WsId },
    /// A plugin sends a message on `ws`.
    Send { ws: WsId, message: Outbound },
    /// A plugin publishes a message to a topic whose subscribers were these. One reply for
    /// all of them, so every subscriber sees the topic's messages in one order.
    Publish {
        subscribers: Vec<WsId>,
        message: Outbound,
    },
    /// A plugin closes `ws`.
    Close { ws: WsId, code: u16, reason: String },
}

/// The sending half of the reply queue. Cloned into every worker.
#[derive(Clone)]
pub struct ReplyTx {
    tx: Sender<Reply>,
    /// Set while a wake-up is pending, so a burst of replies wakes the I/O thread once.
    pending: Arc<AtomicBool>,
    wake: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for ReplyTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyTx").finish_non_exhaustive()
    }
}

/// The receiving half, owned by the I/O thread.
#[derive(Debug)]
pub struct ReplyRx {
    rx: Receiver<Reply>,
    pending: Arc<AtomicBool>,
}

/// A reply queue whose sends call `wake`.
pub fn reply_channel(wake: Arc<dyn Fn() + Send + Sync>) -> (ReplyTx, ReplyRx) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let pending = Arc::new(AtomicBool::new(false));
    (
        ReplyTx {
            tx,
            pending: pending.clone(),
            wake,
        },
        ReplyRx { rx, pending },
    )
}

impl ReplyTx {
    /// Queues a reply and wakes the I/O thread unless a wake-up is already pending.
    pub fn send(&self, reply: Reply) {
        if self.tx.send(reply).is_ok() && !self.pending.swap(true, Ordering::AcqRel) {
            (self.wake)();
        }
    }
}

impl ReplyRx {
    /// Takes every queued reply. Clears the pending flag first, so a reply sent while draining
    /// triggers a new wake-up rather than being missed.
    pub fn drain(&self) -> impl Iterator<Item = Reply> + '_ {
        self.pending.store(false, Ordering::Release);
        self.rx.try_iter()
    }
}
