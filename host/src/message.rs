//! Ids and messages every layer shares: which connection, which WebSocket, what a WebSocket
//! message is, and the signal that cancels a call. A leaf: it imports nothing of the host, so
//! the socket loop, the pool and the runtime can all name these without naming each other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// Identifies a connection for the lifetime of the process: the slot it occupies in the I/O
/// thread's table, and a serial number that is never reused. A reply whose serial does not
/// match the slot's current connection belongs to a connection that is gone, and is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub slot: usize,
    pub serial: u64,
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

/// A cancellation signal, shared by the I/O thread (which fires it when the client leaves) and
/// the worker running the call.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<CancelInner>);

#[derive(Debug, Default)]
struct CancelInner {
    fired: AtomicBool,
    /// The guest's current wait, if it is waiting.
    waker: Mutex<Option<Waker>>,
}

impl Cancel {
    /// Fires the signal: the call's current wait ends now, and so does every later one.
    pub fn cancel(&self) {
        self.0.fired.store(true, Ordering::Release);
        let waker = self
            .0
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.fired.load(Ordering::Acquire)
    }

    pub fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        *self.0.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        // `cancel` may have fired between the check and storing the waker.
        if self.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}
