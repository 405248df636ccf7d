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

/// Identifies a connection for the lifetime of the process: the slot it occupies in the I/O
/// thread's table, and a serial number that is never reused. A reply whose serial does not
/// match the slot's current connection belongs to a connection that is gone, and is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub slot: usize,
    pub serial: u64,
}

/// One request for a worker.
#[derive(Debug)]
pub struct Job {
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
}

/// The answer to one [`Job`].
#[derive(Debug)]
pub struct Reply {
    pub conn: ConnId,
    pub seq: u64,
    /// A complete response, ready for the wire.
    pub bytes: Vec<u8>,
    /// Close the connection once `bytes` are written.
    pub close: bool,
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
