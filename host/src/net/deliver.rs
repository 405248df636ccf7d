//! How the event loop drives its connections: readiness, timers and the drain go to each
//! connection; replies from workers go to the connection they are for; a request an HTTP
//! connection completes goes to the dispatcher, and an upgrade turns the HTTP connection into
//! a WebSocket one.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mio::Token;
use mio::net::TcpStream;

use super::conn::{Conn, Liveness};
use super::event_loop::EventLoop;
use super::http::{self, HttpConn, HttpCtx};
use super::ws_conn::{WsConnection, WsCtx};
use crate::message::{ConnId, WsEvent, WsId};
use crate::pool::reply::Reply;

impl EventLoop {
    /// The connection in `slot`, if it is still connection `id` (when given); a reply for a
    /// connection that is gone finds its slot empty or reused, and is dropped.
    fn conn(&mut self, slot: usize, id: Option<ConnId>) -> Option<&mut Conn<TcpStream>> {
        self.conns
            .get_mut(slot)
            .filter(|c| id.is_none_or(|id| c.id() == id))
    }

    /// Runs `event` on HTTP connection `id`, then hands on the request it completed, if any.
    pub(super) fn with_http(
        &mut self,
        id: ConnId,
        event: impl FnOnce(&mut HttpConn<TcpStream>, &HttpCtx<'_>) -> http::Step,
    ) {
        self.drive_http(id.slot, Some(id), event);
    }

    fn drive_http(
        &mut self,
        slot: usize,
        id: Option<ConnId>,
        event: impl FnOnce(&mut HttpConn<TcpStream>, &HttpCtx<'_>) -> http::Step,
    ) {
        let draining = self.drain_deadline.is_some();
        let Some(Conn::Http(conn)) = self
            .conns
            .get_mut(slot)
            .filter(|c| id.is_none_or(|id| c.id() == id))
        else {
            return;
        };
        let ctx = HttpCtx {
            limits: &self.limits,
            router: &*self.dispatcher,
            draining,
        };
        let mut step = event(conn, &ctx);
        while let Some(request) = step.dispatch.take() {
            match self.dispatcher.dispatch(conn.id, request) {
                Ok(()) => {}
                Err(immediate) => {
                    let ctx = HttpCtx {
                        limits: &self.limits,
                        router: &*self.dispatcher,
                        draining,
                    };
                    step = conn.refused(&immediate, &ctx);
                }
            }
        }
        self.settle(slot, step.liveness);
    }

    /// Runs `event` on WebSocket connection `id`.
    fn with_ws(
        &mut self,
        id: ConnId,
        event: impl FnOnce(&mut WsConnection<TcpStream>, &mut WsCtx<'_>) -> Liveness,
    ) {
        self.drive_ws(id.slot, Some(id), event);
    }

    fn drive_ws(
        &mut self,
        slot: usize,
        id: Option<ConnId>,
        event: impl FnOnce(&mut WsConnection<TcpStream>, &mut WsCtx<'_>) -> Liveness,
    ) {
        let Some(Conn::WebSocket(conn)) = self
            .conns
            .get_mut(slot)
            .filter(|c| id.is_none_or(|id| c.id() == id))
        else {
            return;
        };
        let mut ctx = WsCtx {
            limits: &self.limits,
            hub: &self.hub,
            events: &mut *self.dispatcher,
            codec: &mut self.codec,
        };
        let liveness = event(conn, &mut ctx);
        if self.codec.counts != self.codec_reported {
            let (now, was) = (self.codec.counts, self.codec_reported);
            if now.failures > was.failures {
                tracing::error!(
                    "the deflate library panicked (a bug there); the compressor was replaced and the message handled without it"
                );
            }
            self.metrics.ws_deflate(
                now.deflated - was.deflated,
                now.inflated - was.inflated,
                now.compressed_frames - was.compressed_frames,
            );
            self.codec_reported = now;
        }
        self.settle(slot, liveness);
    }

    /// Counts the bytes the connection moved, and closes it if the event says so.
    pub(super) fn settle(&mut self, slot: usize, liveness: Liveness) {
        if let Some(conn) = self.conns.get_mut(slot) {
            let (bytes_in, bytes_out) = conn.take_bytes();
            self.metrics.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
            self.metrics
                .bytes_out
                .fetch_add(bytes_out, Ordering::Relaxed);
            if liveness == Liveness::Open {
                let check = conn.next_check(&self.limits);
                self.timers.schedule(slot, conn.id().serial, check);
            }
        }
        if liveness == Liveness::Closed {
            self.close(slot);
        }
    }

    /// A readiness event for the connection in `slot`.
    pub(super) fn on_conn_event(&mut self, slot: usize, read_closed: bool) {
        match self.conn(slot, None) {
            Some(Conn::Http(_)) => {
                self.drive_http(slot, None, |c, ctx| c.on_ready(read_closed, ctx))
            }
            Some(Conn::WebSocket(_)) => {
                self.drive_ws(slot, None, |c, ctx| c.on_ready(read_closed, ctx))
            }
            None => {}
        }
    }

    /// Its time came, for the connection in `slot` (the one with `serial`).
    pub(super) fn on_timer(&mut self, slot: usize, serial: u64, now: Instant) {
        match self.conn(slot, None).filter(|c| c.id().serial == serial) {
            Some(Conn::Http(_)) => self.drive_http(slot, None, |c, ctx| c.on_timer(now, ctx)),
            Some(Conn::WebSocket(_)) => self.drive_ws(slot, None, |c, ctx| c.on_timer(now, ctx)),
            None => {}
        }
    }

    /// Serves what an idle HTTP connection's client sent before the drain began, as it
    /// would have been served before it (not refused as arriving during the drain).
    pub(super) fn on_last_look(&mut self, slot: usize) {
        if let Some(Conn::Http(_)) = self.conn(slot, None) {
            let deadline = self.drain_deadline.take();
            self.drive_http(slot, None, |c, ctx| c.on_last_look(ctx));
            self.drain_deadline = deadline;
        }
    }

    /// The drain begins, for the connection in `slot`.
    pub(super) fn on_drain(&mut self, slot: usize) {
        match self.conn(slot, None) {
            Some(Conn::Http(_)) => self.drive_http(slot, None, |c, ctx| c.on_drain(ctx)),
            Some(Conn::WebSocket(_)) => self.drive_ws(slot, None, |c, ctx| {
                c.on_close(
                    crate::proto::frame::close_code::GOING_AWAY,
                    "server shutting down",
                    ctx,
                )
            }),
            None => {}
        }
    }

    /// Every reply the workers queued, each to the connection it is for.
    pub(super) fn deliver_replies(&mut self) {
        // Those queued now: replies their handling queues wait for the next round.
        for _ in 0..self.replies.begin_taking() {
            let Some(reply) = self.replies.take() else {
                break;
            };
            match reply {
                Reply::Response {
                    conn,
                    seq,
                    bytes,
                    close,
                } => self.with_http(conn, |c, ctx| c.on_reply(seq, bytes, close, ctx)),
                Reply::Stream {
                    conn,
                    seq,
                    head,
                    flow,
                } => {
                    if self.conn(conn.slot, Some(conn)).is_none() {
                        // The client left before the head came: the writer learns it now.
                        flow.close();
                    }
                    self.with_http(conn, |c, ctx| c.on_stream(seq, head, flow, ctx));
                }
                Reply::Piece { conn, seq, bytes } => {
                    self.with_http(conn, |c, ctx| c.on_piece(seq, bytes, ctx));
                }
                Reply::End {
                    conn,
                    seq,
                    last,
                    close,
                } => self.with_http(conn, |c, ctx| c.on_end(seq, last, close, ctx)),
                Reply::Upgrade {
                    conn,
                    seq,
                    bytes,
                    ws,
                    plugin,
                    deflate,
                } => self.upgrade(conn, seq, &bytes, ws, plugin, deflate),
                Reply::EventDone { conn, ws, inflated } => {
                    if let Some(plugin) = self.ghosts.remove(&ws) {
                        let close = WsEvent::Close {
                            code: crate::proto::frame::close_code::ABNORMAL,
                            reason: String::new(),
                            clean: false,
                        };
                        if self.dispatcher.event(conn, ws, &plugin, close).is_err() {
                            warn_limited!(ws, "close event of a departed WebSocket dropped");
                        }
                        continue;
                    }
                    self.with_ws(conn, |c, ctx| c.on_event_done(inflated, ctx));
                }
                Reply::Send { ws, message } => {
                    if let Some(&conn) = self.websockets.get(&ws) {
                        self.with_ws(conn, |c, ctx| c.on_send(&message, ctx));
                    }
                }
                Reply::Publish {
                    subscribers,
                    message,
                } => {
                    for ws in subscribers {
                        if let Some(&conn) = self.websockets.get(&ws) {
                            self.with_ws(conn, |c, ctx| c.on_send(&message, ctx));
                        }
                    }
                }
                Reply::Close { ws, code, reason } => {
                    if let Some(&conn) = self.websockets.get(&ws) {
                        self.with_ws(conn, |c, ctx| c.on_close(code, &reason, ctx));
                    }
                }
                Reply::Unstarted { conn, seq } => {
                    self.with_http(conn, |c, ctx| c.on_unstarted(seq, ctx));
                }
            }
        }
    }

    /// Request `seq` of `id` was accepted as WebSocket `ws`: the HTTP connection is consumed
    /// and its parts become a WebSocket connection in the same slot. A client that left before
    /// this still gets its close event delivered (see `ghosts`).
    fn upgrade(
        &mut self,
        id: ConnId,
        seq: u64,
        switching: &[u8],
        ws: WsId,
        plugin: Arc<str>,
        deflate: Option<crate::proto::ws_extension::Deflate>,
    ) {
        if !matches!(self.conn(id.slot, Some(id)), Some(Conn::Http(_))) {
            self.hub.closed(ws);
            self.ghosts.insert(ws, plugin);
            return;
        }
        let Conn::Http(http) = self.conns.remove(id.slot) else {
            return;
        };
        let parts = match http.upgrade(seq, switching) {
            Ok(parts) => parts,
            Err(http) => {
                // Not the request in flight: leave the connection as it was.
                tracing::debug!(conn = ?id, seq, "stale upgrade dropped");
                self.reinsert(id, Conn::Http(http));
                return;
            }
        };
        let draining = self.drain_deadline.is_some();
        let conn = WsConnection::new(parts, ws, plugin, &self.limits, deflate, draining);
        let id = self.reinsert(id, Conn::WebSocket(Box::new(conn)));
        self.websockets.insert(ws, id);
        self.with_ws(id, |c, ctx| c.on_ready(false, ctx));
    }

    /// Puts a connection taken out of the table back, in its slot: the slot just freed is the
    /// next one the table hands out. Should it ever not be, the socket is registered under
    /// its new slot and the connection's id follows it.
    fn reinsert(&mut self, id: ConnId, conn: Conn<TcpStream>) -> ConnId {
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        let conn = entry.insert(conn);
        if slot == id.slot {
            return id;
        }
        let moved = ConnId {
            shard: self.shard,
            slot,
            serial: id.serial,
        };
        conn.set_id(moved);
        let _ = self.poll.registry().reregister(
            conn.stream_mut(),
            Token(slot),
            mio::Interest::READABLE | mio::Interest::WRITABLE,
        );
        moved
    }
}
