//! The clocks of an HTTP connection: how long it may sit idle, take to send a head or a body,
//! leave its output unread, or linger after a closing answer.

use std::time::Instant;

use super::{HttpConn, HttpCtx, State, Step, Transport};
use crate::limits::{LINGER_IDLE_TIMEOUT, LINGER_TIMEOUT};
use crate::net::conn::Liveness;
use crate::proto::ProtoError;

impl<S: Transport> HttpConn<S> {
    /// Enforces the connection's deadlines; called periodically by the event loop.
    pub fn on_timer(&mut self, now: Instant, ctx: &HttpCtx<'_>) -> Step {
        let limits = ctx.limits;
        let elapsed = |since: Option<Instant>| since.map(|t| now.saturating_duration_since(t));
        let closed = Step {
            liveness: Liveness::Closed,
            dispatch: None,
        };
        if self
            .out
            .stalled(now)
            .is_some_and(|d| d >= limits.send_timeout)
        {
            tracing::debug!(conn = ?self.id, peer = %self.peer, "send timeout");
            return closed;
        }
        match self.state {
            State::Lingering {
                since, last_read, ..
            } => {
                if now.saturating_duration_since(since) >= LINGER_TIMEOUT
                    || now.saturating_duration_since(last_read) >= LINGER_IDLE_TIMEOUT
                {
                    return closed;
                }
            }
            State::Head if self.input.buf.is_empty() => {
                if elapsed(self.idle_since).is_some_and(|d| d >= limits.idle_timeout) {
                    tracing::debug!(conn = ?self.id, peer = %self.peer, "idle timeout");
                    return closed;
                }
            }
            State::Head => {
                if elapsed(self.request_since).is_some_and(|d| d >= limits.head_timeout) {
                    tracing::debug!(conn = ?self.id, peer = %self.peer, "request head timeout");
                    self.fail(ProtoError::Timeout);
                    return self.advance(ctx);
                }
            }
            State::Body { .. } => {
                if elapsed(self.request_since).is_some_and(|d| d >= limits.request_timeout) {
                    tracing::debug!(conn = ?self.id, peer = %self.peer, "request body timeout");
                    self.fail(ProtoError::Timeout);
                    return self.advance(ctx);
                }
            }
            State::Waiting | State::Closing => {}
        }
        self.stay()
    }

    /// Starts and stops the idle and request clocks as the state changes; the clock is read
    /// only when one starts.
    pub(super) fn update_clocks(&mut self) {
        match self.state {
            // Idle only once the last answer is out: a client slow to read it is the send
            // timeout's business.
            State::Head if self.input.buf.is_empty() && self.out.pending() => {
                self.request_since = None;
                self.idle_since = None;
            }
            State::Head if self.input.buf.is_empty() => {
                self.request_since = None;
                self.idle_since.get_or_insert_with(Instant::now);
            }
            State::Head | State::Body { .. } => {
                self.idle_since = None;
                self.request_since.get_or_insert_with(Instant::now);
            }
            State::Waiting | State::Closing | State::Lingering { .. } => {
                self.idle_since = None;
                self.request_since = None;
            }
        }
    }
}
