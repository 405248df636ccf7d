//! One HTTP/1.1 connection: bytes in, a complete request out, its response in, bytes out.
//!
//! ```text
//! Head ──head──▶ Body ──body──▶ Waiting ──reply──▶ Head (keep-alive) or Closing
//!   └──────────── no body ───────▲   └─stream head─▶ Streaming ──end──▲
//!                                                      (pieces)
//! any protocol error or timeout ─▶ error response ─▶ Closing ─▶ Lingering ─▶ closed
//! ```
//!
//! The connection never calls the rest of the host: it returns a [`Dispatch`] (a complete
//! request) for the event loop to hand on, and is told what came of it. So it is unit-tested
//! and fuzzed without a pool. At a WebSocket upgrade it is consumed ([`HttpConn::upgrade`]):
//! its stream, unread input and pending output go on to the WebSocket connection.
//!
//! One request per connection is with a worker at a time, so pipelined requests are answered
//! in order by construction; the bytes of the next ones wait in the read buffer. A reply is
//! accepted only for the request in flight (`seq`), so a late or duplicate reply never reaches
//! the wire. Every state has a clock (see [`HttpConn::on_timer`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::conn::{Liveness, Transport};
use super::input::Input;
use super::io::Step as Io;
use super::outbuf::OutBuf;
use crate::limits::Limits;
use crate::message::{Cancel, ConnId, Flow, Inflow};
use crate::net::Immediate;
use crate::proto::Version;
use crate::proto::body::BodyDecoder;
use crate::proto::request::RequestHead;
use crate::runtime::engine::registry::Mount;

/// Where a path goes, and the largest body it takes.
#[derive(Debug, Clone)]
pub struct Route {
    pub mount: Option<Mount>,
    /// The mounted plugin's body limit (at most the server's); `None`: the server's.
    pub max_body: Option<u64>,
    /// The mounted plugin reads its request bodies as they arrive (a wasi:http component):
    /// a request with a body is handed out at its head, and the body follows through an
    /// [`Inflow`].
    pub streams_body: bool,
}

/// Finds the plugin for a path (the dispatcher, in the server).
pub trait Router {
    fn route(&self, path: &str) -> Route;
}

/// A complete request, for the event loop to hand to a plugin; it reports back with
/// [`HttpConn::refused`] if it could not.
#[derive(Debug)]
pub struct Dispatch {
    pub seq: u64,
    pub head: RequestHead,
    pub mount: Option<Mount>,
    pub body: Vec<u8>,
    /// The body, arriving, when the request was handed out at its head.
    pub inflow: Option<Inflow>,
    pub peer: SocketAddr,
    /// Fired by the connection if its client leaves: the call ends at once.
    pub cancel: Cancel,
}

/// What the connection needs while it advances.
pub struct HttpCtx<'a> {
    pub limits: &'a Limits,
    pub router: &'a dyn Router,
    /// The server is draining: no new request is dispatched, and connections close after
    /// their in-flight response.
    pub draining: bool,
}

/// The outcome of an event: whether the connection lives on, and a request to dispatch.
#[derive(Debug)]
pub struct Step {
    pub liveness: Liveness,
    pub dispatch: Option<Dispatch>,
}

enum State {
    /// Reading a request head (or idle before one).
    Head,
    /// Reading the body of `head`.
    Body {
        head: RequestHead,
        route: Route,
        decoder: BodyDecoder,
        body: Vec<u8>,
    },
    /// A worker has the request; waiting for its reply.
    Waiting,
    /// The head of a streamed response is out; its pieces come until its end. Every byte
    /// written after the first `foreign` (an earlier response's, still queued when the head
    /// came) is released to the writer's `flow`.
    Streaming {
        flow: Flow,
        foreign: usize,
        /// When the head came.
        started: Instant,
        /// Pieces received, and the count and time the timer last saw it change: the idle
        /// clock is sampled on the timer, so that no piece reads the clock.
        pieces: u64,
        progress: (u64, Instant),
    },
    /// The last response is queued; close once it is written.
    Closing,
    /// Our side is shut down; reading and discarding until the client closes, so that the
    /// response is not destroyed by a reset (bounded by the `LINGER_*` limits).
    Lingering {
        since: Instant,
        last_read: Instant,
        discarded: usize,
    },
}

/// The parts of a connection that go on after an upgrade.
#[derive(Debug)]
pub(crate) struct Upgraded<S> {
    pub id: ConnId,
    pub stream: S,
    pub peer: SocketAddr,
    /// Bytes already read after the handshake (the client's first frames).
    pub input: Input,
    /// The `101`, and anything else not yet written.
    pub out: OutBuf,
}

/// A request body still arriving after its request was handed out (see
/// [`Route::streams_body`]): decoded into the call's [`Inflow`] as it comes, before anything
/// after it is parsed.
#[derive(Debug)]
struct Feed {
    decoder: BodyDecoder,
    inflow: Inflow,
    /// The plugin's body limit, for the reader's error when the body passes it.
    max_body: u64,
    /// Body bytes decoded so far.
    received: u64,
    /// `received` at the last timer tick that saw it grow, and when.
    progress: Option<(u64, Instant)>,
}

/// One HTTP/1.1 connection.
pub struct HttpConn<S> {
    pub id: ConnId,
    pub stream: S,
    peer: SocketAddr,
    input: Input,
    out: OutBuf,
    state: State,
    /// The position of the current request on this connection.
    seq: u64,
    /// Cancels the call handling the current request, should the client leave.
    in_flight: Option<Cancel>,
    /// How to answer the request in flight ourselves: version, HEAD, keep-alive.
    answering: Option<(Version, bool, bool)>,
    /// The method and path of the current request, once its head is parsed: for the access
    /// log of an answer the host makes itself.
    current: Option<(Arc<str>, Arc<str>)>,
    /// A request ready to be dispatched, handed out with the step that made it.
    ready: Option<Dispatch>,
    /// Bytes written since the event loop last collected them for `/metrics`.
    pub bytes_out: u64,
    /// When the connection last became idle (no request in progress), while it is.
    idle_since: Option<Instant>,
    /// When the first byte of the current request arrived, until it is complete.
    request_since: Option<Instant>,
    /// While a body is read: its bytes at the last timer tick that saw them grow, and when.
    body_progress: Option<(usize, Instant)>,
    /// The body of the request in flight, while it still arrives (boxed: most connections
    /// never have one).
    feed: Option<Box<Feed>>,
    /// A body broke its framing or its limit after its request was handed out: the
    /// connection closes after the answer.
    close_after: bool,
}

impl<S: Transport> HttpConn<S> {
    pub fn new(id: ConnId, stream: S, peer: SocketAddr, now: Instant) -> Self {
        HttpConn {
            id,
            stream,
            peer,
            input: Input::default(),
            out: OutBuf::new(),
            state: State::Head,
            seq: 0,
            in_flight: None,
            answering: None,
            current: None,
            ready: None,
            bytes_out: 0,
            idle_since: Some(now),
            request_since: None,
            body_progress: None,
            feed: None,
            close_after: false,
        }
    }

    /// Bytes read since last asked (for `/metrics`).
    pub(crate) fn take_bytes_in(&mut self) -> u64 {
        std::mem::take(&mut self.input.bytes_in)
    }

    /// The connection is going away: a call still working on its request is cancelled, since
    /// nobody will read the answer.
    pub(crate) fn abandon(&mut self) {
        if let State::Streaming { flow, .. } = &self.state {
            flow.close();
        }
        self.cut_feed();
        if let Some(cancel) = self.in_flight.take() {
            cancel.cancel();
        }
    }

    /// The socket is readable, writable, or both: make all the progress possible.
    pub fn on_ready(&mut self, read_closed: bool, ctx: &HttpCtx<'_>) -> Step {
        self.input.ready(read_closed);
        self.advance(ctx)
    }

    /// The request handed out could not be queued: answer as the dispatcher says.
    pub fn refused(&mut self, immediate: &Immediate, ctx: &HttpCtx<'_>) -> Step {
        self.in_flight = None;
        if let Some(feed) = &self.feed {
            // Nobody will read the body: it is drained as it comes, and dropped.
            feed.inflow.abandon();
        }
        if let Some((version, head, keep_alive)) = self.answering.take() {
            self.answer(immediate, version, head, keep_alive);
        }
        self.advance(ctx)
    }

    /// A worker answered request `seq` of this connection.
    pub(crate) fn on_reply(
        &mut self,
        seq: u64,
        bytes: Vec<u8>,
        close: bool,
        ctx: &HttpCtx<'_>,
    ) -> Step {
        if !matches!(self.state, State::Waiting) || seq != self.seq {
            tracing::debug!(conn = ?self.id, seq, "stale reply dropped");
            return self.stay();
        }
        let backlog = self.out.backlog();
        if backlog > 0 && backlog + bytes.len() > ctx.limits.max_send_buffer_bytes {
            warn_limited!(
                conn = ?self.id,
                peer = %self.peer,
                backlog,
                "closing a connection that does not read its responses"
            );
            return Step {
                liveness: Liveness::Closed,
                dispatch: None,
            };
        }
        self.answered(bytes, close, ctx)
    }

    /// The last bytes of the answer in flight are queued: the exchange is over, and the
    /// connection reads the next request, or closes once they are written.
    fn answered(&mut self, last: Vec<u8>, close: bool, ctx: &HttpCtx<'_>) -> Step {
        self.out.push_owned(last);
        self.finish_exchange();
        self.state = if close || ctx.draining || self.close_after {
            // A body still arriving is not read to its end.
            self.cut_feed();
            State::Closing
        } else {
            // A body still arriving is read to its end (and dropped) before the next request.
            State::Head
        };
        self.advance(ctx)
    }

    /// The body still arriving will not arrive whole: its reader learns so.
    pub(super) fn cut_feed(&mut self) {
        if let Some(feed) = self.feed.take() {
            feed.inflow.end(crate::message::InflowEnd::Cut);
        }
    }

    /// The head of a streamed response to request `seq`: it goes out now, and the pieces of
    /// its body follow as the call writes them.
    pub(crate) fn on_stream(
        &mut self,
        seq: u64,
        head: Vec<u8>,
        flow: Flow,
        ctx: &HttpCtx<'_>,
    ) -> Step {
        if !matches!(self.state, State::Waiting) || seq != self.seq {
            tracing::debug!(conn = ?self.id, seq, "stale stream dropped");
            flow.close();
            return self.stay();
        }
        if ctx.draining {
            flow.drain();
        }
        let foreign = self.out.backlog();
        self.out.push_owned(head);
        let now = Instant::now();
        self.state = State::Streaming {
            flow,
            foreign,
            started: now,
            pieces: 0,
            progress: (0, now),
        };
        self.advance(ctx)
    }

    /// One piece of the streamed body of request `seq`. Its writer took room from the flow
    /// before, so the pieces queued here stay within the flow's limit.
    pub(crate) fn on_piece(&mut self, seq: u64, bytes: Vec<u8>, ctx: &HttpCtx<'_>) -> Step {
        let State::Streaming { pieces, .. } = &mut self.state else {
            return self.stay();
        };
        if seq != self.seq {
            return self.stay();
        }
        *pieces += 1;
        self.out.push_owned(bytes);
        self.advance(ctx)
    }

    /// The end of the streamed response to request `seq`: its last bytes, then the next
    /// request (or the close).
    pub(crate) fn on_end(
        &mut self,
        seq: u64,
        last: Vec<u8>,
        close: bool,
        ctx: &HttpCtx<'_>,
    ) -> Step {
        if !matches!(self.state, State::Streaming { .. }) || seq != self.seq {
            return self.stay();
        }
        self.answered(last, close, ctx)
    }

    /// Request `seq` was accepted as a WebSocket: the connection's parts go on, with the
    /// `101` queued first. Given back unchanged if `seq` is not the request in flight.
    pub(crate) fn upgrade(
        mut self: Box<Self>,
        seq: u64,
        switching: &[u8],
    ) -> Result<Upgraded<S>, Box<Self>> {
        if !matches!(self.state, State::Waiting) || seq != self.seq {
            return Err(self);
        }
        self.out.push(switching);
        let this = *self;
        Ok(Upgraded {
            id: this.id,
            stream: this.stream,
            peer: this.peer,
            input: this.input,
            out: this.out,
        })
    }

    /// The request in flight was never started (the drain deadline passed): answer 503.
    pub(crate) fn on_unstarted(&mut self, seq: u64, ctx: &HttpCtx<'_>) -> Step {
        if !matches!(self.state, State::Waiting) || seq != self.seq {
            return self.stay();
        }
        self.in_flight = None;
        let immediate = Immediate {
            status: 503,
            message: "the server is shutting down".to_owned(),
            retry_after: None,
        };
        self.answer(&immediate, Version::Http11, false, false);
        self.advance(ctx)
    }

    /// The server is about to drain: a request this idle connection's client already sent
    /// (its readiness event not yet handled) is read and handed out like any other.
    pub(crate) fn on_last_look(&mut self, ctx: &HttpCtx<'_>) -> Step {
        if matches!(self.state, State::Head) {
            self.input.look_again();
        }
        self.advance(ctx)
    }

    /// The server started draining: an idle connection closes now, a busy one after its
    /// current exchange.
    pub(crate) fn on_drain(&mut self, ctx: &HttpCtx<'_>) -> Step {
        if let State::Streaming { flow, .. } = &self.state {
            flow.drain();
        }
        if matches!(self.state, State::Head) && self.input.buf.is_empty() && !self.out.pending() {
            return Step {
                liveness: Liveness::Closed,
                dispatch: None,
            };
        }
        self.advance(ctx)
    }

    pub(super) fn stay(&self) -> Step {
        Step {
            liveness: Liveness::Open,
            dispatch: None,
        }
    }

    /// Reads, parses and writes until nothing more can happen without an event.
    pub(super) fn advance(&mut self, ctx: &HttpCtx<'_>) -> Step {
        let liveness = self.advance_inner(ctx);
        self.update_clocks();
        Step {
            liveness,
            dispatch: self.ready.take(),
        }
    }

    fn advance_inner(&mut self, ctx: &HttpCtx<'_>) -> Liveness {
        loop {
            match self.out.flush(&mut self.stream) {
                Ok(n) => {
                    self.bytes_out += n as u64;
                    if let State::Streaming { flow, foreign, .. } = &mut self.state {
                        let theirs = n.min(*foreign);
                        *foreign -= theirs;
                        flow.release(n - theirs);
                    }
                }
                Err(e) => {
                    tracing::debug!(conn = ?self.id, "write failed: {e}");
                    return Liveness::Closed;
                }
            }
            if !self.out.pending() {
                self.input.shrink();
            }
            let progressed = match self.process(ctx) {
                Ok(p) => p,
                Err(e) => {
                    self.fail(e);
                    true
                }
            };
            if progressed {
                continue;
            }
            // Nothing to do with what is buffered: read more, if this state wants input.
            match self.state {
                State::Head if ctx.draining && self.input.buf.is_empty() && !self.out.pending() => {
                    return Liveness::Closed;
                }
                State::Head | State::Body { .. } if self.input.eof => {
                    // The client closed mid-request, or between requests.
                    self.cut_feed();
                    return Liveness::Closed;
                }
                State::Waiting | State::Streaming { .. } if self.feed.is_some() => {
                    if self.input.eof {
                        // The client left in the middle of the body the call reads.
                        self.cut_feed();
                        return Liveness::Closed;
                    }
                }
                State::Head | State::Body { .. } | State::Lingering { .. } => {}
                State::Waiting | State::Streaming { .. } => return self.check_client(),
                State::Closing => {
                    if self.out.pending() {
                        return Liveness::Open;
                    }
                    self.stream.shutdown_write();
                    if self.input.eof {
                        return Liveness::Closed;
                    }
                    let now = Instant::now();
                    self.state = State::Lingering {
                        since: now,
                        last_read: now,
                        discarded: 0,
                    };
                    continue;
                }
            }
            match self.input.read(&mut self.stream) {
                Ok(Io::Moved(_)) => {}
                Ok(Io::WouldBlock) => return Liveness::Open,
                Ok(Io::Eof) => {
                    self.input.eof = true;
                    if let State::Lingering { .. } = self.state {
                        return Liveness::Closed;
                    }
                }
                Err(e) => {
                    tracing::debug!(conn = ?self.id, "read failed: {e}");
                    return Liveness::Closed;
                }
            }
        }
    }

    /// While a worker has the request: if the client closed its side, look whether it left
    /// (end of stream with nothing pipelined behind the request). It did: the connection
    /// closes, and closing it cancels the call (see [`HttpConn::abandon`]), so a handler whose
    /// client hung up does not hold a worker until it finishes. Like nginx (499), a client
    /// that half-closes after its request is taken to have left.
    fn check_client(&mut self) -> Liveness {
        if !self.input.read_closed || !self.input.buf.is_empty() {
            return Liveness::Open;
        }
        match self.input.read(&mut self.stream) {
            Ok(Io::Eof) | Err(_) => {
                tracing::debug!(conn = ?self.id, peer = %self.peer, "client left while its request was being handled");
                Liveness::Closed
            }
            Ok(Io::Moved(_) | Io::WouldBlock) => Liveness::Open,
        }
    }

    /// The exchange in flight is over: the next request is the next position.
    pub(super) fn finish_exchange(&mut self) {
        self.seq += 1;
        self.in_flight = None;
        self.answering = None;
        self.current = None;
    }
}

mod answer;
mod clock;
mod parse;
#[cfg(test)]
mod tests;
