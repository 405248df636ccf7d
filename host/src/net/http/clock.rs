//! The clocks of an HTTP connection: how long it may sit idle, take to send a head, pause in
//! a body or send it slower than the minimum rate, leave its output unread, or linger after a
//! closing answer.

use std::time::{Duration, Instant};

use super::{HttpConn, HttpCtx, State, Step, Transport};
use crate::limits::{LINGER_IDLE_TIMEOUT, LINGER_TIMEOUT, Limits};
use crate::net::conn::Liveness;
use crate::net::timers::Check;
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
        if let Some(feed) = self.feed.as_mut() {
            // A body read by the call as it arrives: bounded by the pause between its bytes
            // (the call itself by its own deadlines).
            let progress = feed.progress.get_or_insert((feed.received, now));
            if progress.0 != feed.received {
                *progress = (feed.received, now);
            }
            if now.saturating_duration_since(progress.1) >= limits.body_idle_timeout {
                tracing::debug!(conn = ?self.id, peer = %self.peer, received = feed.received, "request body idle timeout");
                self.cut_feed();
                return closed;
            }
            if matches!(self.state, State::Head) {
                // Answered already: the rest of the body is only drained.
                return self.stay();
            }
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
            State::Body { ref body, .. } => {
                // Progress is sampled here, on the timer, so that no read has to read the
                // clock: the body's bytes (decoded, and still undecoded in the input).
                let received = body.len() + self.input.buf.len();
                let progress = self.body_progress.get_or_insert((received, now));
                if progress.0 != received {
                    *progress = (received, now);
                }
                let stalled = now.saturating_duration_since(progress.1);
                let earned = Duration::from_millis(
                    (received as u64).saturating_mul(1000) / limits.min_body_rate.max(1),
                );
                let allowed = limits.request_timeout.saturating_add(earned);
                let why = if stalled >= limits.body_idle_timeout {
                    Some("request body idle timeout")
                } else if elapsed(self.request_since).is_some_and(|d| d >= allowed) {
                    Some("request body timeout (slower than the minimum rate)")
                } else {
                    None
                };
                if let Some(why) = why {
                    tracing::debug!(conn = ?self.id, peer = %self.peer, received, "{why}");
                    self.fail(ProtoError::Timeout);
                    return self.advance(ctx);
                }
            }
            State::Streaming {
                ref flow,
                started,
                pieces,
                ref mut progress,
                ..
            } => {
                if progress.0 != pieces {
                    *progress = (pieces, now);
                }
                let times = flow.times();
                let why = if now.saturating_duration_since(progress.1) >= times.idle {
                    Some("stream idle timeout")
                } else if now.saturating_duration_since(started) >= times.total {
                    Some("stream timeout")
                } else {
                    None
                };
                if let Some(why) = why {
                    // Closing the connection closes the flow and cancels the call.
                    tracing::info!(conn = ?self.id, peer = %self.peer, pieces, "{why}: the streamed response ends");
                    return closed;
                }
            }
            State::Waiting | State::Closing => {}
        }
        self.stay()
    }

    /// When [`HttpConn::on_timer`] next has something to do, at the latest. What is sampled
    /// (a send's, a body's or a stream's progress) is looked at every tick, as before; an idle
    /// connection or a head in progress only at its deadline; a request with a worker never
    /// (the call has deadlines of its own).
    pub(crate) fn next_check(&self, limits: &Limits) -> Check {
        if self.out.pending() || self.feed.is_some() {
            return Check::Soon;
        }
        match self.state {
            State::Head if self.input.buf.is_empty() => self
                .idle_since
                .map_or(Check::Never, |t| Check::after(t, limits.idle_timeout)),
            State::Head => self
                .request_since
                .map_or(Check::Soon, |t| Check::after(t, limits.head_timeout)),
            State::Body { .. } | State::Streaming { .. } | State::Lingering { .. } => Check::Soon,
            State::Waiting | State::Closing => Check::Never,
        }
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
                self.body_progress = None;
            }
            State::Head if self.input.buf.is_empty() => {
                self.request_since = None;
                self.body_progress = None;
                self.idle_since.get_or_insert_with(Instant::now);
            }
            State::Head => {
                self.idle_since = None;
                self.body_progress = None;
                self.request_since.get_or_insert_with(Instant::now);
            }
            State::Body { .. } => {
                self.idle_since = None;
                self.request_since.get_or_insert_with(Instant::now);
            }
            State::Waiting | State::Streaming { .. } | State::Closing | State::Lingering { .. } => {
                self.idle_since = None;
                self.request_since = None;
                self.body_progress = None;
            }
        }
    }
}
