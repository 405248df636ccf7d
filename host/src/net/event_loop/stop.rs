//! Ending: the commands a [`StopHandle`] gives every loop from any thread, the graceful drain
//! (stop accepting, let in-flight requests finish, answer 503 to those never started), and how
//! a run ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use mio::Waker;

use super::EventLoop;
use crate::pool::reply::Reply;

/// What the loops have been asked to do, set from any thread.
pub(crate) const RUN: u8 = 0;
pub(crate) const DRAIN: u8 = 1;
pub(crate) const STOP: u8 = 2;

/// Drains or stops every running [`EventLoop`] from any thread.
#[derive(Clone)]
pub struct StopHandle {
    pub(crate) command: Arc<AtomicU8>,
    pub(crate) wakers: Vec<Arc<Waker>>,
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopHandle").finish_non_exhaustive()
    }
}

impl StopHandle {
    /// Graceful: stop accepting, let in-flight requests finish, then return from `run`.
    pub fn drain(&self) {
        let _ = self
            .command
            .compare_exchange(RUN, DRAIN, Ordering::AcqRel, Ordering::Acquire);
        self.wake();
    }

    fn wake(&self) {
        for waker in &self.wakers {
            let _ = waker.wake();
        }
    }

    /// Whether a drain or a stop was asked for.
    pub(crate) fn draining(&self) -> bool {
        self.command.load(Ordering::Acquire) != RUN
    }

    /// Immediate: return from `run` at the next wake-up, closing every connection.
    pub fn stop(&self) {
        self.command.store(STOP, Ordering::Release);
        self.wake();
    }
}

/// How a run ended (of one loop, or of all of them together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every connection finished before the drain deadline.
    Drained,
    /// The drain deadline passed with this many connections still open; they were closed.
    ForceClosed(usize),
    /// Stopped without draining.
    Stopped,
}

impl EventLoop {
    /// Stops accepting at once and closes idle connections; busy ones close after their
    /// in-flight response. Queued requests still run while the drain deadline allows: only
    /// those no worker has started by then get 503 (see [`EventLoop::refuse_unstarted`]).
    ///
    /// A request a client sent before the drain began is served, not reset: the listener's
    /// backlog is accepted before it closes, and an idle connection is read once more before
    /// it is closed (its readiness event may not have been handled yet).
    pub(super) fn begin_drain(&mut self) {
        if self.listener.is_some() {
            self.accept();
        }
        for slot in self.slots() {
            self.on_last_look(slot);
        }
        self.drain_deadline = Some(Instant::now() + self.limits.drain_timeout);
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
            // Closed before it is said, so that a client that reads the line finds the port
            // closed.
            drop(listener);
            self.lanes.close();
            // The loop that accepted says it once, for all of them.
            tracing::info!(
                connections = self.metrics.connections_open.load(Ordering::Relaxed),
                queued = self.dispatcher.queued(),
                deadline_ms = self.limits.drain_timeout.as_millis() as u64,
                "draining: no longer accepting"
            );
        }
        for slot in self.slots() {
            self.on_drain(slot);
        }
    }

    /// Answers 503 to every request no worker has started: this loop's own at once, another
    /// loop's through that loop's reply queue. Under the drain lock, so that a request
    /// another loop took off the queue and forwarded here is in the reply queue before this
    /// loop reads it for the last time.
    pub(super) fn refuse_unstarted(&mut self) {
        let lock = self.drain_lock.clone();
        let _taking = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let unstarted = self.dispatcher.take_unstarted_requests();
        if !unstarted.is_empty() {
            tracing::warn!(
                requests = unstarted.len(),
                "drain deadline reached: answering 503 to requests no worker started"
            );
        }
        for (id, seq) in unstarted {
            if id.shard == self.shard {
                self.with_http(id, |conn, ctx| conn.on_unstarted(seq, ctx));
            } else {
                self.forward
                    .to(id.shard)
                    .send(Reply::Unstarted { conn: id, seq });
            }
        }
        self.deliver_replies();
    }
}
