//! One client connection: bytes in, requests out to the dispatcher, replies in, bytes out.
//!
//! ```text
//! Head ──head──▶ Body ──body──▶ Waiting ──reply──▶ Head (keep-alive) or Closing
//!   └──────────── no body ───────▲                    │
//! any protocol error or timeout ─▶ error response ─▶ Closing ─▶ Lingering ─▶ closed
//! ```
//!
//! One request per connection is with a worker at a time, so pipelined requests are answered
//! in order by construction; the bytes of the next ones wait in the read buffer. A reply is
//! accepted only for the request in flight (`seq`), so a late or duplicate reply never reaches
//! the wire.
//!
//! Every state has a clock (see [`Conn::on_timer`]): idle connections, heads and bodies that
//! trickle in, and output the client does not read are all cut off, so a slow client holds a
//! connection slot for a bounded time and a bounded amount of memory.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::Instant;

use super::io::{Step, read_some, write_some};
use super::ws::WsConn;
use crate::access::Access;
use crate::dispatch::{Dispatcher, Immediate, Undelivered};
use crate::hub::Hub;
use crate::limits::{
    LINGER_IDLE_TIMEOUT, LINGER_MAX_BYTES, LINGER_TIMEOUT, Limits, READ_CHUNK_BYTES,
};
use crate::message::{ConnId, Outbound, WsEvent, WsId};
use crate::proto::body::BodyDecoder;
use crate::proto::frame::close_code;
use crate::proto::request::{self, Framing, RequestHead};
use crate::proto::response::{self, RequestMeta};
use crate::proto::{ProtoError, Status, Version};
use crate::runtime::registry::Mount;
use crate::runtime::watch::Cancel;

thread_local! {
    /// Where reads land before they are appended to a connection's buffer.
    static SCRATCH: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; READ_CHUNK_BYTES].into_boxed_slice());
}

/// Buffer capacity a connection keeps once its buffers are empty.
const IDLE_BUFFER_BYTES: usize = 16 * 1024;

/// The methods `OPTIONS *` lists: what plugins may route (the router's own set, and OPTIONS).
const SERVER_METHODS: &str = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS";

/// A byte stream a connection runs on: a TCP socket in the server, memory in the fuzzer.
pub trait Transport: Read + Write {
    /// Ends our sending side (TCP FIN), keeping the receiving side open.
    fn shutdown_write(&self);
}

impl Transport for mio::net::TcpStream {
    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Whether the event loop should keep the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Open,
    Closed,
}

enum State {
    /// Reading a request head (or idle before one).
    Head,
    /// Reading the body of `head`.
    Body {
        head: RequestHead,
        mount: Option<Mount>,
        decoder: BodyDecoder,
        body: Vec<u8>,
    },
    /// A worker has the request; waiting for its reply.
    Waiting,
    /// The last response is queued; close once it is written.
    Closing,
    /// Our side is shut down; reading and discarding until the client closes, so that the
    /// response is not destroyed by a reset (bounded by the `LINGER_*` limits).
    Lingering {
        since: Instant,
        last_read: Instant,
        discarded: usize,
    },
    /// Upgraded: speaking WebSocket.
    WebSocket(Box<WsConn>),
}

/// What the connection needs from the rest of the host while it advances.
pub struct Ctx<'a> {
    pub dispatcher: &'a mut Dispatcher,
    pub limits: &'a Limits,
    pub hub: &'a Hub,
    pub metrics: &'a crate::metrics::Metrics,
    /// The server is draining: no new request is dispatched, and connections close after
    /// their in-flight response.
    pub draining: bool,
}

pub struct Conn<S> {
    pub id: ConnId,
    pub stream: S,
    peer: SocketAddr,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    wpos: usize,
    state: State,
    /// The position of the current request on this connection.
    seq: u64,
    /// Cancels the call handling the current request, should the client leave.
    in_flight: Option<Cancel>,
    /// The method and path of the current request, once its head is parsed: for the access
    /// log of an answer the host makes itself.
    current: Option<(String, String)>,
    eof: bool,
    /// The socket may have unread input: set by a readiness event, cleared when a read would
    /// block or comes back short. Saves a `read` syscall per request (see [`Conn::read`]).
    readable: bool,
    /// The peer's end of the stream has closed (a readiness event said so): read to the end.
    read_closed: bool,
    /// Bytes moved since the event loop last collected them for `/metrics`.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// When the connection last became idle (no request in progress), while it is.
    idle_since: Option<Instant>,
    /// When the first byte of the current request arrived, until it is complete.
    request_since: Option<Instant>,
    /// When pending output last moved (or first appeared).
    write_progress: Instant,
}

impl<S: Transport> Conn<S> {
    pub fn new(id: ConnId, stream: S, peer: SocketAddr, now: Instant) -> Self {
        Conn {
            id,
            stream,
            peer,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            wpos: 0,
            state: State::Head,
            seq: 0,
            in_flight: None,
            current: None,
            eof: false,
            readable: true,
            read_closed: false,
            bytes_in: 0,
            bytes_out: 0,
            idle_since: Some(now),
            request_since: None,
            write_progress: now,
        }
    }

    /// The connection is going away (closed by either side, timed out, or the server
    /// stopped): a call still working on its request is cancelled, since nobody will read
    /// the answer.
    pub fn abandon(&mut self) {
        if let Some(cancel) = self.in_flight.take() {
            cancel.cancel();
        }
    }

    /// The socket is readable, writable, or both: make all the progress possible.
    pub fn on_ready(&mut self, read_closed: bool, ctx: &mut Ctx<'_>) -> Liveness {
        self.readable = true;
        self.read_closed |= read_closed;
        self.advance(ctx)
    }

    /// A worker answered request `seq` of this connection.
    pub fn on_reply(
        &mut self,
        seq: u64,
        bytes: Vec<u8>,
        close: bool,
        ctx: &mut Ctx<'_>,
    ) -> Liveness {
        if !matches!(self.state, State::Waiting) || seq != self.seq {
            tracing::debug!(conn = ?self.id, seq, "stale reply dropped");
            return Liveness::Open;
        }
        let backlog = self.wbuf.len() - self.wpos;
        if backlog > 0 && backlog + bytes.len() > ctx.limits.max_send_buffer_bytes {
            crate::warn_limited!(
                conn = ?self.id,
                peer = %self.peer,
                backlog,
                "closing a connection that does not read its responses"
            );
            return Liveness::Closed;
        }
        self.queue_owned_output(bytes);
        self.seq += 1;
        self.in_flight = None;
        self.current = None;
        self.state = if close || ctx.draining {
            State::Closing
        } else {
            State::Head
        };
        self.advance(ctx)
    }

    /// Request `seq` was accepted as WebSocket `ws`: write the 101, then speak WebSocket. The
    /// open event is already running on a worker.
    pub fn on_upgrade(
        &mut self,
        seq: u64,
        bytes: &[u8],
        ws: WsId,
        plugin: std::sync::Arc<str>,
        ctx: &mut Ctx<'_>,
    ) -> Liveness {
        debug_assert!(matches!(self.state, State::Waiting) && seq == self.seq);
        self.queue_output(bytes);
        self.seq += 1;
        self.in_flight = None;
        self.current = None;
        let mut conn = WsConn::new(ws, plugin, ctx.limits, Instant::now());
        if ctx.draining {
            self.compact();
            conn.close(
                close_code::GOING_AWAY,
                "server shutting down",
                &mut self.wbuf,
                Instant::now(),
            );
        }
        self.state = State::WebSocket(Box::new(conn));
        self.advance(ctx)
    }

    /// The WebSocket id of this connection, once upgraded.
    pub fn ws_id(&self) -> Option<WsId> {
        match &self.state {
            State::WebSocket(ws) => Some(ws.id),
            _ => None,
        }
    }

    /// The event handed out for this WebSocket finished.
    pub fn on_event_done(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
        if let State::WebSocket(ws) = &mut self.state {
            ws.event_done();
        }
        self.advance(ctx)
    }

    /// A plugin sends a message on this WebSocket.
    pub fn on_ws_send(&mut self, message: Outbound, ctx: &mut Ctx<'_>) -> Liveness {
        let backlog = self.wbuf.len() - self.wpos;
        self.compact();
        let State::WebSocket(ws) = &mut self.state else {
            return Liveness::Open;
        };
        if ws.finished() {
            // Closing already: messages still in flight to it are dropped, quietly.
            return Liveness::Open;
        }
        if backlog > ctx.limits.max_send_buffer_bytes {
            crate::warn_limited!(ws = ws.id, peer = %self.peer, backlog, "closing a WebSocket that does not read (1008)");
            ws.close(
                close_code::POLICY,
                "not reading",
                &mut self.wbuf,
                Instant::now(),
            );
            // It does not read: waiting for its Close would be waiting for nothing.
            ws.peer_gone();
            ctx.hub.closed(ws.id);
        } else {
            ws.send(&message, &mut self.wbuf);
        }
        if backlog == 0 {
            self.write_progress = Instant::now();
        }
        self.advance(ctx)
    }

    /// A plugin closes this WebSocket.
    pub fn on_ws_close(&mut self, code: u16, reason: &str, ctx: &mut Ctx<'_>) -> Liveness {
        self.compact();
        if let State::WebSocket(ws) = &mut self.state {
            ws.close(code, reason, &mut self.wbuf, Instant::now());
            self.write_progress = Instant::now();
        }
        self.advance(ctx)
    }

    /// The request in flight was never started (the server is draining): answer 503.
    pub fn on_unstarted(&mut self, seq: u64, ctx: &mut Ctx<'_>) -> Liveness {
        if !matches!(self.state, State::Waiting) || seq != self.seq {
            return Liveness::Open;
        }
        self.in_flight = None;
        let immediate = Immediate {
            status: 503,
            message: "the server is shutting down".to_owned(),
            retry_after: None,
        };
        self.answer(&immediate, Version::Http11, false, false);
        self.current = None;
        self.advance(ctx)
    }

    /// The server started draining: an idle connection closes now, a busy one after its
    /// current exchange.
    pub fn on_drain(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
        if matches!(self.state, State::Head) && self.rbuf.is_empty() && !self.pending_output() {
            return Liveness::Closed;
        }
        if matches!(self.state, State::WebSocket(_)) {
            return self.on_ws_close(close_code::GOING_AWAY, "server shutting down", ctx);
        }
        self.advance(ctx)
    }

    /// Enforces the connection's deadlines; called periodically by the event loop.
    pub fn on_timer(&mut self, now: Instant, ctx: &mut Ctx<'_>) -> Liveness {
        let limits = ctx.limits;
        let elapsed = |since: Option<Instant>| since.map(|t| now.saturating_duration_since(t));
        if self.pending_output()
            && now.saturating_duration_since(self.write_progress) >= limits.send_timeout
        {
            tracing::debug!(conn = ?self.id, peer = %self.peer, "send timeout");
            return Liveness::Closed;
        }
        match self.state {
            State::Lingering {
                since, last_read, ..
            } => {
                if now.saturating_duration_since(since) >= LINGER_TIMEOUT
                    || now.saturating_duration_since(last_read) >= LINGER_IDLE_TIMEOUT
                {
                    return Liveness::Closed;
                }
            }
            State::Head if self.rbuf.is_empty() => {
                if elapsed(self.idle_since).is_some_and(|d| d >= limits.idle_timeout) {
                    tracing::debug!(conn = ?self.id, peer = %self.peer, "idle timeout");
                    return Liveness::Closed;
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
            State::WebSocket(ref mut ws) => {
                self.wbuf.drain(..self.wpos);
                self.wpos = 0;
                // Also retry an event the worker queue had no room for.
                if ws.on_timer(now, &mut self.wbuf) || ws.event_waiting() {
                    return self.advance(ctx);
                }
            }
            State::Waiting | State::Closing => {}
        }
        Liveness::Open
    }

    /// Reads, parses, dispatches and writes until nothing more can happen without an event.
    fn advance(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
        let liveness = self.advance_inner(ctx);
        self.update_clocks(Instant::now());
        liveness
    }

    fn advance_inner(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
        if matches!(self.state, State::WebSocket(_)) {
            return self.advance_ws(ctx);
        }
        loop {
            if let Err(e) = self.flush() {
                tracing::debug!(conn = ?self.id, "write failed: {e}");
                return Liveness::Closed;
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
                State::Head if ctx.draining && self.rbuf.is_empty() && !self.pending_output() => {
                    return Liveness::Closed;
                }
                State::Head | State::Body { .. } if self.eof => {
                    // The client closed mid-request, or between requests.
                    return Liveness::Closed;
                }
                State::Head | State::Body { .. } | State::Lingering { .. } => {}
                State::Waiting => return self.check_client(),
                State::WebSocket(_) => return Liveness::Open,
                State::Closing => {
                    if self.pending_output() {
                        return Liveness::Open;
                    }
                    self.stream.shutdown_write();
                    if self.eof {
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
            match self.read() {
                Ok(Step::Moved(_)) => {}
                Ok(Step::WouldBlock) => return Liveness::Open,
                Ok(Step::Eof) => {
                    self.eof = true;
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
    /// closes, and closing it cancels the call (see [`Conn::abandon`]), so a handler whose
    /// client hung up does not hold a worker until it finishes. Like nginx (499), a client
    /// that half-closes after its request is taken to have left.
    fn check_client(&mut self) -> Liveness {
        if !self.read_closed || !self.rbuf.is_empty() {
            return Liveness::Open;
        }
        match self.read() {
            Ok(Step::Eof) | Err(_) => {
                tracing::debug!(conn = ?self.id, peer = %self.peer, "client left while its request was being handled");
                Liveness::Closed
            }
            Ok(Step::Moved(_) | Step::WouldBlock) => Liveness::Open,
        }
    }

    /// The WebSocket loop: write, read frames, hand out events, until blocked.
    fn advance_ws(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
        let liveness = self.advance_ws_inner(ctx);
        // What reading produced (pongs, close echoes, failure closes) goes out now.
        if liveness == Liveness::Open
            && self.pending_output()
            && let Err(e) = self.flush()
        {
            tracing::debug!(conn = ?self.id, "write failed: {e}");
            self.eof = true;
            if let State::WebSocket(ws) = &mut self.state {
                ws.peer_gone();
            }
            return self.advance_ws_inner(ctx);
        }
        liveness
    }

    fn advance_ws_inner(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
        loop {
            if let Err(e) = self.flush() {
                tracing::debug!(conn = ?self.id, "write failed: {e}");
                if let State::WebSocket(ws) = &mut self.state {
                    ws.peer_gone();
                }
                self.eof = true;
            }
            let State::WebSocket(ws) = &mut self.state else {
                unreachable!("advance_ws runs on WebSocket connections");
            };
            let max_backlog = ctx.limits.max_send_buffer_bytes;
            if ws.wants_input() {
                self.wbuf.drain(..self.wpos);
                self.wpos = 0;
                let had_output = !self.wbuf.is_empty();
                ws.read_frames(&mut self.rbuf, &mut self.wbuf, Instant::now(), max_backlog);
                if !had_output && !self.wbuf.is_empty() {
                    self.write_progress = Instant::now();
                }
            }
            // Once the socket is done, or the plugin is told of the close, sending to this
            // connection reports `closed`. Until then, plugins can still answer messages that
            // arrived before a violation: their answers go out ahead of its Close.
            if ws.finished() {
                ctx.hub.closed(ws.id);
            }
            // Hand the next event to a worker, if none is running.
            if let Some(event) = ws.next_event() {
                if matches!(event, WsEvent::Close { .. }) {
                    ctx.hub.closed(ws.id);
                }
                match ctx
                    .dispatcher
                    .dispatch_event(self.id, ws.id, &ws.plugin, event)
                {
                    Ok(()) => {}
                    Err(Undelivered::Busy(event)) => ws.undo_next(event),
                    Err(Undelivered::Gone) => ws.event_done(),
                }
            }
            ws.settle(&mut self.wbuf, Instant::now());
            let output_pending = self.wpos < self.wbuf.len();
            if ws.finished() {
                if output_pending && !self.eof {
                    // Try to write it now; come back when the socket takes more.
                    match self.flush() {
                        Ok(()) if self.wpos < self.wbuf.len() => return Liveness::Open,
                        Ok(()) => continue,
                        Err(_) => {
                            self.eof = true;
                            continue;
                        }
                    }
                }
                if !self.eof {
                    self.stream.shutdown_write();
                    self.eof = true;
                }
                return if ws.done() {
                    Liveness::Closed
                } else {
                    Liveness::Open
                };
            }
            if self.eof {
                ws.peer_gone();
                continue;
            }
            // Not while the plugin is behind, nor while the client is not reading what we
            // answer (Pongs included): the client's own sends then back up, not our memory.
            if !ws.wants_input() || self.wbuf.len() - self.wpos > max_backlog {
                return Liveness::Open;
            }
            match self.read() {
                Ok(Step::Moved(_)) => {}
                // What is left in `rbuf` is an incomplete frame: wait for the rest.
                Ok(Step::WouldBlock) => return Liveness::Open,
                Ok(Step::Eof) | Err(_) => self.eof = true,
            }
        }
    }

    /// Drops output that was already written, so the buffer holds only the backlog.
    fn compact(&mut self) {
        if self.wpos > 0 {
            self.wbuf.drain(..self.wpos);
            self.wpos = 0;
        }
    }

    /// Starts and stops the idle and request clocks as the state changes.
    fn update_clocks(&mut self, now: Instant) {
        match self.state {
            State::Head if self.rbuf.is_empty() => {
                self.request_since = None;
                self.idle_since.get_or_insert(now);
            }
            State::Head | State::Body { .. } => {
                self.idle_since = None;
                self.request_since.get_or_insert(now);
            }
            State::Waiting | State::Closing | State::Lingering { .. } | State::WebSocket(_) => {
                self.idle_since = None;
                self.request_since = None;
            }
        }
    }

    /// One step of protocol work on buffered input. Returns whether anything changed.
    fn process(&mut self, ctx: &mut Ctx<'_>) -> Result<bool, ProtoError> {
        match &mut self.state {
            State::Waiting | State::Closing | State::WebSocket(_) => Ok(false),
            State::Lingering {
                discarded,
                last_read,
                ..
            } => {
                if self.rbuf.is_empty() {
                    return Ok(false);
                }
                *discarded += self.rbuf.len();
                *last_read = Instant::now();
                self.rbuf.clear();
                if *discarded > LINGER_MAX_BYTES {
                    self.eof = true;
                    self.state = State::Closing;
                    return Ok(true);
                }
                Ok(false)
            }
            State::Head => {
                if self.rbuf.is_empty() {
                    return Ok(false);
                }
                // The request clock starts with its first byte, however it arrived.
                self.request_since.get_or_insert_with(Instant::now);
                let (head, used) = match request::parse(&self.rbuf, ctx.limits)? {
                    Status::Partial => return Ok(false),
                    Status::Complete(head, used) => (head, used),
                };
                self.rbuf.drain(..used);
                self.current = Some((head.method.clone(), head.path.clone()));
                if head.path == "*" {
                    // `OPTIONS *` asks about the server itself (RFC 9110 §9.3.7).
                    self.answer_server_options(&head);
                    return Ok(true);
                }
                // The plugin's own body limit, when lower than the server's.
                let mount = ctx.dispatcher.route(&head.path);
                let max_body = mount.as_ref().map_or(ctx.limits.max_body_bytes, |m| {
                    m.plugin
                        .policy
                        .max_body_bytes
                        .min(ctx.limits.max_body_bytes)
                });
                if let Framing::Length(n) = head.framing
                    && n > max_body
                {
                    return Err(ProtoError::BodyTooLarge);
                }
                match head.framing {
                    Framing::Empty => self.dispatch(head, mount, Vec::new(), ctx),
                    Framing::Length(n) => {
                        if head.expect_continue && self.rbuf.is_empty() && !ctx.draining {
                            self.queue_output(response::CONTINUE);
                        }
                        let cap = usize::try_from(n).unwrap_or(usize::MAX).min(1 << 20);
                        self.state = State::Body {
                            head,
                            mount,
                            decoder: BodyDecoder::length(n),
                            body: Vec::with_capacity(cap),
                        };
                    }
                    Framing::Chunked => {
                        if head.expect_continue && self.rbuf.is_empty() && !ctx.draining {
                            self.queue_output(response::CONTINUE);
                        }
                        self.state = State::Body {
                            head,
                            mount,
                            decoder: BodyDecoder::chunked(max_body),
                            body: Vec::new(),
                        };
                    }
                }
                Ok(true)
            }
            State::Body { decoder, body, .. } => {
                if self.rbuf.is_empty() {
                    return Ok(false);
                }
                let progress = decoder.decode(&self.rbuf, body)?;
                self.rbuf.drain(..progress.consumed);
                if progress.done {
                    let State::Body {
                        head, mount, body, ..
                    } = std::mem::replace(&mut self.state, State::Waiting)
                    else {
                        unreachable!("state was Body");
                    };
                    self.dispatch(head, mount, body, ctx);
                }
                Ok(progress.consumed > 0 || progress.done)
            }
        }
    }

    /// Hands a complete request on; answers at once when the dispatcher says so, or when the
    /// server is draining.
    fn dispatch(
        &mut self,
        head: RequestHead,
        mount: Option<Mount>,
        body: Vec<u8>,
        ctx: &mut Ctx<'_>,
    ) {
        let (version, is_head, keep_alive) = (head.version, head.is_head(), head.keep_alive);
        self.state = State::Waiting;
        if ctx.draining {
            let immediate = Immediate {
                status: 503,
                message: "the server is shutting down".to_owned(),
                retry_after: None,
            };
            self.answer(&immediate, version, is_head, false);
            return;
        }
        let cancel = Cancel::default();
        match ctx.dispatcher.dispatch(
            self.id,
            self.seq,
            mount,
            head,
            body,
            self.peer,
            cancel.clone(),
        ) {
            Ok(()) => self.in_flight = Some(cancel),
            Err(immediate) => self.answer(&immediate, version, is_head, keep_alive),
        }
    }

    /// Answers `OPTIONS *`: the methods the server accepts, no body.
    fn answer_server_options(&mut self, head: &RequestHead) {
        let req = RequestMeta {
            version: head.version,
            head: false,
            keep_alive: head.keep_alive,
            accept_encoding: None,
        };
        let mut out = Vec::new();
        let keep_alive =
            response::encode_simple(200, &[("allow", SERVER_METHODS)], "", &req, &mut out);
        self.log_answer(200, out.len());
        self.current = None;
        self.queue_output(&out);
        self.seq += 1;
        self.state = if keep_alive {
            State::Head
        } else {
            State::Closing
        };
    }

    /// Writes a host-made response for the current request.
    fn answer(&mut self, immediate: &Immediate, version: Version, head: bool, keep_alive: bool) {
        let retry;
        let extra: &[(&str, &str)] = match immediate.retry_after {
            Some(secs) => {
                retry = secs.to_string();
                &[("retry-after", retry.as_str())]
            }
            None => &[],
        };
        let req = RequestMeta {
            version,
            head,
            keep_alive,
            accept_encoding: None,
        };
        let mut out = Vec::new();
        let keep_alive =
            response::encode_simple(immediate.status, extra, &immediate.message, &req, &mut out);
        self.log_answer(immediate.status, out.len());
        self.current = None;
        self.queue_output(&out);
        self.seq += 1;
        self.state = if keep_alive {
            State::Head
        } else {
            State::Closing
        };
    }

    /// The access-log line of an answer the host made itself: the request's method and path
    /// when its head was parsed (`-` when it never was), and the bytes of the answer.
    fn log_answer(&self, status: u16, bytes: usize) {
        let (method, path) = self
            .current
            .clone()
            .unwrap_or_else(|| ("-".to_owned(), "-".to_owned()));
        Access {
            remote: self.peer,
            method,
            path,
            received: Instant::now(),
            metrics: None,
        }
        .log(status, bytes, "-", None);
    }

    /// Answers a protocol error and closes: the framing of what follows cannot be trusted.
    fn fail(&mut self, e: ProtoError) {
        tracing::debug!(conn = ?self.id, peer = %self.peer, "protocol error: {e}");
        self.rbuf.clear();
        let req = RequestMeta {
            version: Version::Http11,
            head: false,
            keep_alive: false,
            accept_encoding: None,
        };
        let mut out = Vec::new();
        response::encode_simple(e.status(), &[], &e.to_string(), &req, &mut out);
        self.log_answer(e.status(), out.len());
        self.current = None;
        self.queue_output(&out);
        self.state = State::Closing;
    }

    /// Like [`Conn::queue_output`], but a response onto an empty backlog becomes the backlog
    /// itself: the I/O thread does not copy it.
    fn queue_owned_output(&mut self, bytes: Vec<u8>) {
        if self.pending_output() {
            self.queue_output(&bytes);
        } else {
            self.write_progress = Instant::now();
            self.wbuf = bytes;
            self.wpos = 0;
        }
    }

    fn queue_output(&mut self, bytes: &[u8]) {
        if !self.pending_output() {
            self.write_progress = Instant::now();
        }
        self.compact();
        self.wbuf.extend_from_slice(bytes);
    }

    /// Reads once through the I/O thread's scratch buffer, so an idle connection holds no
    /// read buffer of its own (with thousands of idle WebSockets, that is most of the memory).
    /// The scratch buffer is zeroed once per thread, not per read: a fresh 16 KiB array on the
    /// stack cost a 16 KiB `memset` per read, 2% of a hello-world load.
    ///
    /// A short read means the socket is drained. The poller is edge-triggered and reports the
    /// next arrival, so the connection is marked unreadable without a second `read` that would
    /// only say `WouldBlock` (tokio does the same). Once the peer has closed its end, reads go
    /// on until end of stream, since no further event will come.
    fn read(&mut self) -> std::io::Result<Step> {
        if !self.readable {
            return Ok(Step::WouldBlock);
        }
        let step = SCRATCH.with_borrow_mut(|scratch| {
            let step = read_some(&mut self.stream, &mut scratch[..]);
            if let Ok(Step::Moved(n)) = step {
                self.rbuf.extend_from_slice(&scratch[..n]);
            }
            step
        });
        match step {
            Ok(Step::Moved(n)) => {
                self.bytes_in += n as u64;
                if n < READ_CHUNK_BYTES && !self.read_closed {
                    self.readable = false;
                }
            }
            Ok(Step::WouldBlock) => self.readable = false,
            _ => {}
        }
        step
    }

    fn pending_output(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// Writes buffered output until it is all written or the socket would block.
    fn flush(&mut self) -> std::io::Result<()> {
        while self.pending_output() {
            match write_some(&mut self.stream, &self.wbuf[self.wpos..])? {
                Step::Moved(n) => {
                    self.wpos += n;
                    self.bytes_out += n as u64;
                    self.write_progress = Instant::now();
                }
                Step::WouldBlock | Step::Eof => return Ok(()),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        // Keep a buffer sized for typical responses, not for the largest one ever sent.
        if self.wbuf.capacity() > IDLE_BUFFER_BYTES {
            self.wbuf = Vec::new();
        }
        if self.rbuf.is_empty() && self.rbuf.capacity() > IDLE_BUFFER_BYTES {
            self.rbuf = Vec::new();
        }
        Ok(())
    }
}
