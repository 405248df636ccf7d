//! What a worker hands back to an event loop: a [`Reply`] through that loop's [`ReplyTx`],
//! which also wakes the loop. [`Replies`] holds one per loop and picks the loop a reply is
//! for. The pool never names mio: the wake-up is a plain function.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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
    /// The head of a streamed response to request `seq` of `conn`; its pieces follow, then
    /// its end. The loop releases `flow` as it writes.
    Stream {
        conn: ConnId,
        seq: u64,
        head: Vec<u8>,
        flow: crate::message::Flow,
    },
    /// One piece of a streamed body, framed.
    Piece {
        conn: ConnId,
        seq: u64,
        bytes: Vec<u8>,
    },
    /// The end of a streamed response: its last bytes; `close`: end the connection after
    /// them.
    End {
        conn: ConnId,
        seq: u64,
        last: Vec<u8>,
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
    /// Request `seq` of `conn` was still queued when the drain deadline passed, and another
    /// loop took it off the queue: answer it 503.
    Unstarted { conn: ConnId, seq: u64 },
}

thread_local! {
    /// The event loop this thread runs, if it runs one (`usize::MAX` if not).
    static THIS_LOOP: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Says that this thread runs event loop `shard`: replies it sends to itself (from calls it
/// runs, see [`super::inline`]) are queued without waking it, since it delivers its replies
/// before it next waits.
pub(crate) fn set_this_loop(shard: usize) {
    THIS_LOOP.with(|l| l.set(shard));
}

/// Whether this thread runs event loop `shard`.
pub(super) fn on_loop(shard: usize) -> bool {
    THIS_LOOP.with(Cell::get) == shard
}

/// The sending half of the reply queue. Cloned into every worker.
#[derive(Clone)]
pub struct ReplyTx {
    tx: Sender<Reply>,
    /// The loop this queue belongs to (set by [`Replies::new`]).
    shard: usize,
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
            shard: usize::MAX,
            pending: pending.clone(),
            wake,
        },
        ReplyRx { rx, pending },
    )
}

impl ReplyTx {
    /// Queues a reply and wakes the I/O thread unless a wake-up is already pending.
    pub fn send(&self, reply: Reply) {
        if self.tx.send(reply).is_ok() && !on_loop(self.shard) {
            self.wake();
        }
    }

    /// Wakes the I/O thread unless a wake-up is already pending.
    pub(super) fn wake(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            (self.wake)();
        }
    }
}

impl ReplyRx {
    /// How many replies are queued now, to be taken with [`ReplyRx::take`]. Clears the
    /// pending flag first, so a reply sent meanwhile triggers a new wake-up rather than being
    /// missed.
    pub(crate) fn begin_taking(&self) -> usize {
        self.pending.store(false, Ordering::Release);
        self.rx.len()
    }

    /// The oldest queued reply.
    pub(crate) fn take(&self) -> Option<Reply> {
        self.rx.try_recv().ok()
    }

    /// Whether replies wait to be taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// The reply queues of every event loop, indexed by shard; cloned into every worker.
#[derive(Clone, Debug)]
pub struct Replies {
    loops: Arc<[ReplyTx]>,
    /// Held while one publish is queued on several loops, so that every loop's queue has the
    /// publishes of a topic in the same order.
    publishing: Arc<Mutex<()>>,
}

impl Replies {
    pub fn new(mut loops: Vec<ReplyTx>) -> Self {
        assert!(!loops.is_empty(), "at least one event loop");
        for (shard, tx) in loops.iter_mut().enumerate() {
            tx.shard = shard;
        }
        Replies {
            loops: loops.into(),
            publishing: Arc::default(),
        }
    }

    /// The queue of event loop `shard` (connection ids name theirs).
    pub(crate) fn to(&self, shard: usize) -> &ReplyTx {
        // An id always names a loop that exists; should one not, the first loop drops the
        // reply as it does any reply for a connection it does not have.
        self.loops.get(shard).unwrap_or(&self.loops[0])
    }
}

/// Plugins' WebSocket messages go out through the reply queue of the connection's loop, like
/// responses.
impl crate::message::WsOut for Replies {
    fn send(&self, home: usize, ws: WsId, message: Outbound) {
        self.to(home).send(Reply::Send { ws, message });
    }

    fn close(&self, home: usize, ws: WsId, code: u16, reason: String) {
        self.to(home).send(Reply::Close { ws, code, reason });
    }

    /// One reply per loop that has subscribers, each with the same shared payload: a loop
    /// prepares the frame once for all of its subscribers.
    fn publish(&self, subscribers: Vec<(usize, WsId)>, message: Outbound) {
        let runs = subscribers.chunk_by(|a, b| a.0 == b.0);
        let several = runs.clone().nth(1).is_some();
        let _order = several.then(|| {
            self.publishing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        });
        for run in runs {
            // A clone shares the payload (`Bytes`): one copy for every loop.
            self.to(run[0].0).send(Reply::Publish {
                subscribers: run.iter().map(|(_, ws)| *ws).collect(),
                message: message.clone(),
            });
        }
    }
}

/// What a worker made of a compressed message: the client's window, back (grown when it
/// inflated), and whether it inflated within the rules; a violation fails the connection.
#[derive(Debug)]
pub struct Inflated {
    pub window: Option<crate::message::DeflateWindow>,
    pub result: Result<(), crate::proto::frame::Violation>,
}
