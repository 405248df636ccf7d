//! What a worker hands back to the I/O thread: a [`Reply`] through a [`ReplyTx`], which also
//! wakes the I/O thread. The pool never names mio: the wake-up is a plain function.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender};

use crate::message::{ConnId, Outbound, WsId};

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
        /// The permessage-deflate terms the `101` accepted, if any.
        deflate: Option<crate::proto::ws_extension::Deflate>,
    },
    /// The event handed out for `ws` finished; the next one may go.
    EventDone {
        conn: ConnId,
        ws: WsId,
        /// For a compressed message: what inflating it came to.
        inflated: Option<Inflated>,
    },
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

/// Plugins' WebSocket messages go out through the reply queue, like responses.
impl crate::runtime::state::WsOut for ReplyTx {
    fn send(&self, ws: WsId, message: Outbound) {
        ReplyTx::send(self, Reply::Send { ws, message });
    }

    fn close(&self, ws: WsId, code: u16, reason: String) {
        ReplyTx::send(self, Reply::Close { ws, code, reason });
    }

    fn publish(&self, subscribers: Vec<WsId>, message: Outbound) {
        ReplyTx::send(
            self,
            Reply::Publish {
                subscribers,
                message,
            },
        );
    }
}

/// What a worker made of a compressed message: the client's window, back (grown when it
/// inflated), and whether it inflated within the rules; a violation fails the connection.
#[derive(Debug)]
pub struct Inflated {
    pub window: Option<crate::message::DeflateWindow>,
    pub result: Result<(), crate::proto::frame::Violation>,
}
