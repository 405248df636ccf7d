//! One WebSocket connection after its upgrade: the socket, its buffers, and the protocol state
//! of [`super::ws`]. It takes over the parts of the HTTP connection that upgraded (the stream,
//! bytes the client sent right behind its handshake, and the queued `101`).

use std::net::SocketAddr;
use std::time::Instant;

use super::conn::{Liveness, Transport};
use super::http::Upgraded;
use super::input::Input;
use super::io::Step as Io;
use super::outbuf::OutBuf;
use super::timers::Check;
use super::ws::WsConn;
use crate::hub::Hub;
use crate::limits::Limits;
use crate::message::{ConnId, Outbound, WsEvent, WsId};
use crate::net::Undelivered;
use crate::proto::frame::close_code;
use crate::proto::ws_deflate::Codec;
use crate::proto::ws_extension::Deflate;

/// Hands a WebSocket's events to its plugin (the dispatcher, in the server).
pub(crate) trait Events {
    /// Queues `event` of WebSocket `ws` (on connection `conn`) for the current version of
    /// plugin `plugin`.
    fn event(
        &mut self,
        conn: ConnId,
        ws: WsId,
        plugin: &str,
        event: WsEvent,
    ) -> Result<(), Undelivered>;
}

/// What a WebSocket connection needs while it advances.
pub(crate) struct WsCtx<'a> {
    pub limits: &'a Limits,
    pub hub: &'a Hub,
    pub events: &'a mut dyn Events,
    /// The I/O thread's permessage-deflate compressors and inflater.
    pub codec: &'a mut Codec,
}

/// One upgraded connection.
pub(crate) struct WsConnection<S> {
    pub id: ConnId,
    pub stream: S,
    peer: SocketAddr,
    input: Input,
    out: OutBuf,
    ws: WsConn,
    /// Bytes written since the event loop last collected them for `/metrics`.
    pub bytes_out: u64,
}

impl<S: Transport> WsConnection<S> {
    /// Takes over an upgraded HTTP connection as WebSocket `ws` of `plugin`, whose open event
    /// is already running on a worker, with the permessage-deflate terms its handshake agreed.
    /// While draining, it starts closing at once (1001).
    pub(crate) fn new(
        parts: Upgraded<S>,
        ws: WsId,
        plugin: std::sync::Arc<str>,
        limits: &Limits,
        deflate: Option<Deflate>,
        draining: bool,
    ) -> Self {
        let now = Instant::now();
        let mut conn = WsConnection {
            id: parts.id,
            stream: parts.stream,
            peer: parts.peer,
            input: parts.input,
            out: parts.out,
            ws: WsConn::new(ws, plugin, limits, now, deflate),
            bytes_out: 0,
        };
        if draining {
            conn.close(close_code::GOING_AWAY, "server shutting down");
        }
        conn
    }

    /// The WebSocket's id.
    pub(crate) fn ws_id(&self) -> WsId {
        self.ws.id
    }

    /// Bytes read since last asked (for `/metrics`).
    pub(crate) fn take_bytes_in(&mut self) -> u64 {
        std::mem::take(&mut self.input.bytes_in)
    }

    /// The socket is readable, writable, or both.
    pub(crate) fn on_ready(&mut self, read_closed: bool, ctx: &mut WsCtx<'_>) -> Liveness {
        self.input.ready(read_closed);
        self.advance(ctx)
    }

    /// The event handed out for this WebSocket finished; for a compressed message, with what
    /// inflating it came to.
    pub(crate) fn on_event_done(
        &mut self,
        inflated: Option<crate::pool::reply::Inflated>,
        ctx: &mut WsCtx<'_>,
    ) -> Liveness {
        match inflated {
            Some(inflated) => {
                if inflated.result.is_ok() {
                    ctx.codec.counts.inflated += 1;
                }
                self.ws.event_done_with(inflated.window, inflated.result);
            }
            None => self.ws.event_done(),
        }
        self.advance(ctx)
    }

    /// A plugin sends a message. A client whose backlog is over the limit is not reading: it
    /// is closed with 1008 (and not waited for).
    pub(crate) fn on_send(&mut self, message: &Outbound, ctx: &mut WsCtx<'_>) -> Liveness {
        if self.ws.finished() {
            // Closing already: messages still in flight to it are dropped, quietly.
            return Liveness::Open;
        }
        let backlog = self.out.backlog();
        if backlog > ctx.limits.max_send_buffer_bytes {
            warn_limited!(ws = self.ws.id, peer = %self.peer, backlog, "closing a WebSocket that does not read (1008)");
            self.close(close_code::POLICY, "not reading");
            self.ws.peer_gone();
            ctx.hub.closed(self.ws.id);
        } else {
            let (ws, codec) = (&mut self.ws, &mut *ctx.codec);
            self.out.append(|buf| ws.send(message, buf, codec));
        }
        self.advance(ctx)
    }

    /// A plugin (or the drain) closes this WebSocket.
    pub(crate) fn on_close(&mut self, code: u16, reason: &str, ctx: &mut WsCtx<'_>) -> Liveness {
        self.close(code, reason);
        self.advance(ctx)
    }

    fn close(&mut self, code: u16, reason: &str) {
        let ws = &mut self.ws;
        self.out
            .append(|buf| ws.close(code, reason, buf, Instant::now()));
    }

    /// Pings, the pong and close timeouts, the send timeout, and an event that waits for room
    /// in the queue.
    pub(crate) fn on_timer(&mut self, now: Instant, ctx: &mut WsCtx<'_>) -> Liveness {
        if self
            .out
            .stalled(now)
            .is_some_and(|d| d >= ctx.limits.send_timeout)
        {
            tracing::debug!(ws = self.ws.id, peer = %self.peer, "send timeout");
            return Liveness::Closed;
        }
        let ws = &mut self.ws;
        let mut changed = false;
        self.out.append(|buf| changed = ws.on_timer(now, buf));
        if changed || self.ws.event_waiting() {
            return self.advance(ctx);
        }
        Liveness::Open
    }

    /// When [`WsConnection::on_timer`] next has something to do, at the latest.
    pub(crate) fn next_check(&self) -> Check {
        if self.out.pending() || self.ws.event_waiting() {
            // The send timeout, or a retry for the event queue: looked at every tick.
            return Check::Soon;
        }
        self.ws.next_check()
    }

    /// Writes, reads frames, hands out events, until blocked.
    fn advance(&mut self, ctx: &mut WsCtx<'_>) -> Liveness {
        let liveness = self.advance_inner(ctx);
        // What reading produced (pongs, close echoes, failure closes) goes out now.
        if liveness == Liveness::Open && self.out.pending() {
            match self.out.flush(&mut self.stream) {
                Ok(n) => self.bytes_out += n as u64,
                Err(e) => {
                    tracing::debug!(conn = ?self.id, "write failed: {e}");
                    self.input.eof = true;
                    self.ws.peer_gone();
                    return self.advance_inner(ctx);
                }
            }
        }
        liveness
    }

    fn advance_inner(&mut self, ctx: &mut WsCtx<'_>) -> Liveness {
        let max_backlog = ctx.limits.max_send_buffer_bytes;
        loop {
            self.flush_or_drop();
            if self.ws.wants_input() {
                let (ws, input) = (&mut self.ws, &mut self.input);
                self.out
                    .append(|buf| ws.read_frames(&mut input.buf, buf, Instant::now(), max_backlog));
            }
            // Once the socket is done, or the plugin is told of the close, sending to this
            // connection reports `closed`. Until then, plugins can still answer messages that
            // arrived before a violation: their answers go out ahead of its Close.
            if self.ws.finished() {
                ctx.hub.closed(self.ws.id);
            }
            // Hand the next event to a worker, if none is running.
            if let Some(event) = self.ws.next_event() {
                if matches!(event, WsEvent::Close { .. }) {
                    ctx.hub.closed(self.ws.id);
                }
                match ctx
                    .events
                    .event(self.id, self.ws.id, &self.ws.plugin, event)
                {
                    Ok(()) => {}
                    Err(Undelivered::Busy(event)) => self.ws.undo_next(event),
                    Err(Undelivered::Gone) => self.ws.event_done(),
                }
            }
            let ws = &mut self.ws;
            self.out.append(|buf| ws.settle(buf, Instant::now()));
            if self.ws.finished() {
                if self.out.pending() && !self.input.eof {
                    // Try to write it now; come back when the socket takes more.
                    self.flush_or_drop();
                    if self.out.pending() && !self.input.eof {
                        return Liveness::Open;
                    }
                    continue;
                }
                if !self.input.eof {
                    self.stream.shutdown_write();
                    self.input.eof = true;
                }
                return if self.ws.done() {
                    Liveness::Closed
                } else {
                    Liveness::Open
                };
            }
            if self.input.eof {
                self.ws.peer_gone();
                continue;
            }
            // Not while the plugin is behind, nor while the client is not reading what we
            // answer (Pongs included): the client's own sends then back up, not our memory.
            if !self.ws.wants_input() || self.out.backlog() > max_backlog {
                return Liveness::Open;
            }
            match self.input.read(&mut self.stream) {
                Ok(Io::Moved(_)) => {}
                // What is left in the input is an incomplete frame: wait for the rest.
                Ok(Io::WouldBlock) => return Liveness::Open,
                Ok(Io::Eof) | Err(_) => self.input.eof = true,
            }
        }
    }

    /// Writes what it can; a write error means the peer is gone.
    fn flush_or_drop(&mut self) {
        match self.out.flush(&mut self.stream) {
            Ok(n) => self.bytes_out += n as u64,
            Err(e) => {
                tracing::debug!(conn = ?self.id, "write failed: {e}");
                self.ws.peer_gone();
                self.input.eof = true;
            }
        }
    }
}
