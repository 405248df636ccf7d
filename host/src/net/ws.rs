//! The WebSocket side of a connection, after the `101`: frames in, events out to the plugin
//! one at a time, messages from the plugin out as frames.
//!
//! Framing, masking, fragmentation, control frames, UTF-8 checks and the close handshake are
//! tungstenite's `WebSocketContext`, run sans-IO over the connection's own buffers (see
//! [`Pipe`]). This module decides what to do with what it reports: which close code answers
//! which violation (RFC 6455 §7.4.1), when the plugin hears of what, and when TCP closes.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use tungstenite::error::{CapacityError, ProtocolError};
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{Role, WebSocketConfig, WebSocketContext};
use tungstenite::{Error, Message};

use crate::job::{Outbound, WsEvent, WsId, WsMessage};
use crate::limits::{Limits, WS_CLOSE_TIMEOUT, WS_MAX_QUEUED_EVENTS};

/// Initial size of tungstenite's input buffer per connection; it grows as frames need.
const WS_CODEC_BUFFER_BYTES: usize = 1024;

/// The connection's read buffer as tungstenite's input and its write buffer as its output.
struct Pipe<'a> {
    rbuf: &'a mut Vec<u8>,
    wbuf: &'a mut Vec<u8>,
}

impl Read for Pipe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.rbuf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.rbuf.len());
        buf[..n].copy_from_slice(&self.rbuf[..n]);
        self.rbuf.drain(..n);
        Ok(n)
    }
}

impl Write for Pipe<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.wbuf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One WebSocket connection's state.
pub struct WsConn {
    pub id: WsId,
    /// The plugin that accepted the upgrade; its current version gets the events.
    pub plugin: std::sync::Arc<str>,
    ctx: WebSocketContext,
    events: VecDeque<WsEvent>,
    /// An event (the open event, first) is with a worker.
    in_flight: bool,
    /// The close event was queued; nothing is queued after it.
    close_queued: bool,
    /// The peer broke the protocol: the Close frame that says so waits until the plugin has
    /// handled (and answered) every message that arrived before the violation.
    pending_failure: Option<CloseFrame>,
    /// The close event was delivered.
    close_delivered: bool,
    /// TCP is to be closed once the output is written.
    finished: bool,
    /// When our Close frame went out, while we wait for the peer's.
    close_sent: Option<Instant>,
    last_heard: Instant,
    ping_sent: Option<Instant>,
    ping_interval: Duration,
    pong_timeout: Duration,
}

impl WsConn {
    /// A connection whose open event is already running on a worker.
    pub fn new(id: WsId, plugin: std::sync::Arc<str>, limits: &Limits, now: Instant) -> Self {
        // Small codec buffers: input comes from the connection's own buffer and output goes
        // straight into it, so tungstenite's 128 KiB defaults per connection would be waste.
        let config = WebSocketConfig::default()
            .read_buffer_size(WS_CODEC_BUFFER_BYTES)
            .write_buffer_size(0)
            .max_message_size(Some(limits.ws_max_message_bytes))
            .max_frame_size(Some(limits.ws_max_message_bytes));
        WsConn {
            id,
            plugin,
            ctx: WebSocketContext::new(Role::Server, Some(config)),
            events: VecDeque::new(),
            in_flight: true,
            close_queued: false,
            pending_failure: None,
            close_delivered: false,
            finished: false,
            close_sent: None,
            last_heard: now,
            ping_sent: None,
            ping_interval: limits.ws_ping_interval,
            pong_timeout: limits.ws_pong_timeout,
        }
    }

    /// Whether more input is wanted: not after the end, and not while the plugin is behind.
    pub fn wants_input(&self) -> bool {
        !self.finished && self.pending_failure.is_none() && self.events.len() < WS_MAX_QUEUED_EVENTS
    }

    /// TCP should close once pending output is written.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Everything is over: TCP is done and the plugin heard the close.
    pub fn done(&self) -> bool {
        self.finished && self.close_delivered && !self.in_flight
    }

    /// Parses buffered input into events. Control frames are answered by tungstenite (a Ping
    /// gets its Pong; a Close gets its echo).
    ///
    /// Those answers count against the send backlog like any output: once `wbuf` holds more
    /// than `max_backlog` unsent bytes, reading stops until the peer reads, so a client that
    /// floods Pings and never reads fills its own socket buffers, not the host's memory.
    pub fn read_frames(
        &mut self,
        rbuf: &mut Vec<u8>,
        wbuf: &mut Vec<u8>,
        now: Instant,
        max_backlog: usize,
    ) {
        // Until tungstenite says it needs more input: it buffers what it reads, so an empty
        // `rbuf` does not mean every frame was seen.
        while self.wants_input() && wbuf.len() <= max_backlog {
            let mut pipe = Pipe { rbuf, wbuf };
            let result = self.ctx.read(&mut pipe);
            match result {
                Ok(message) => {
                    self.last_heard = now;
                    self.ping_sent = None;
                    match message {
                        Message::Text(text) => {
                            self.push(WsEvent::Message(WsMessage::Text(text.as_str().to_owned())))
                        }
                        Message::Binary(bytes) => {
                            self.push(WsEvent::Message(WsMessage::Binary(bytes.to_vec())))
                        }
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                        Message::Close(frame) => {
                            let (code, reason) = match frame {
                                Some(f) => (u16::from(f.code), f.reason.as_str().to_owned()),
                                None => (1005, String::new()),
                            };
                            self.queue_close(code, reason, true);
                            // Write the echo (or, if we started the close, just finish).
                            let _ = self.ctx.flush(&mut Pipe { rbuf, wbuf });
                            self.finished = true;
                        }
                    }
                }
                Err(Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(Error::ConnectionClosed | Error::AlreadyClosed) => {
                    self.queue_close(1006, String::new(), false);
                    self.finished = true;
                }
                Err(e) => self.fail(e, rbuf),
            }
        }
        // Pongs (and the echo of a Close) are queued by tungstenite while reading; write them
        // now rather than with the next frame that happens to arrive.
        if self.ctx.can_write() {
            let _ = self.ctx.flush(&mut Pipe { rbuf, wbuf });
        }
    }

    /// The peer closed TCP (or reset it).
    pub fn peer_gone(&mut self) {
        if !self.close_queued {
            tracing::debug!(
                ws = self.id,
                "WebSocket dropped without a closing handshake"
            );
        }
        self.queue_close(1006, String::new(), false);
        self.finished = true;
    }

    /// Fails the connection: Close with the code the violation calls for (once the plugin has
    /// handled what came before; see [`WsConn::settle_failure`]), then TCP close.
    fn fail(&mut self, error: Error, rbuf: &mut Vec<u8>) {
        let (code, reason) = match &error {
            Error::Capacity(CapacityError::MessageTooLong { .. }) => {
                (CloseCode::Size, "message too big")
            }
            Error::Capacity(_) => (CloseCode::Size, "frame too big"),
            Error::Utf8(_) => (CloseCode::Invalid, "invalid UTF-8"),
            Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => {
                self.peer_gone();
                return;
            }
            Error::Protocol(_) => (CloseCode::Protocol, "protocol error"),
            _ => (CloseCode::Error, "internal error"),
        };
        tracing::debug!(ws = self.id, "failing WebSocket: {error}");
        rbuf.clear();
        self.queue_close(u16::from(code), reason.to_owned(), false);
        self.pending_failure = Some(CloseFrame {
            code,
            reason: reason.into(),
        });
    }

    /// Sends the Close of a protocol failure once the plugin reached the close event, that is,
    /// once every earlier message was handled and its answers queued ahead of the Close.
    pub fn settle_failure(&mut self, rbuf: &mut Vec<u8>, wbuf: &mut Vec<u8>) {
        let close_reached = self.close_queued && self.events.is_empty();
        if close_reached && let Some(frame) = self.pending_failure.take() {
            let _ = self.ctx.close(&mut Pipe { rbuf, wbuf }, Some(frame));
            self.finished = true;
        }
    }

    /// A message from the plugin. Dropped once the connection is closing.
    pub fn send(&mut self, message: Outbound, rbuf: &mut Vec<u8>, wbuf: &mut Vec<u8>) {
        if !self.ctx.can_write() {
            return;
        }
        let mut pipe = Pipe { rbuf, wbuf };
        if self.ctx.write(&mut pipe, message).is_ok() {
            let _ = self.ctx.flush(&mut pipe);
        }
    }

    /// Starts the closing handshake: what is queued goes first, then Close; the peer has
    /// [`WS_CLOSE_TIMEOUT`] to answer.
    pub fn close(
        &mut self,
        code: u16,
        reason: &str,
        rbuf: &mut Vec<u8>,
        wbuf: &mut Vec<u8>,
        now: Instant,
    ) {
        if !self.ctx.can_write() {
            return;
        }
        let frame = CloseFrame {
            code: CloseCode::from(code),
            reason: reason.to_owned().into(),
        };
        let _ = self.ctx.close(&mut Pipe { rbuf, wbuf }, Some(frame));
        self.close_sent = Some(now);
    }

    /// Pings a quiet peer, and gives up on one that stopped answering or never completed the
    /// closing handshake. Returns whether anything changed.
    pub fn on_timer(&mut self, now: Instant, rbuf: &mut Vec<u8>, wbuf: &mut Vec<u8>) -> bool {
        if self.finished {
            return false;
        }
        if self
            .close_sent
            .is_some_and(|t| now.duration_since(t) >= WS_CLOSE_TIMEOUT)
        {
            self.queue_close(1006, String::new(), false);
            self.finished = true;
            return true;
        }
        match self.ping_sent {
            Some(t) if now.duration_since(t) >= self.pong_timeout => {
                tracing::debug!(ws = self.id, "WebSocket peer stopped answering pings");
                self.queue_close(1006, String::new(), false);
                self.finished = true;
                true
            }
            None if now.duration_since(self.last_heard) >= self.ping_interval
                && self.ctx.can_write() =>
            {
                let mut pipe = Pipe { rbuf, wbuf };
                if self
                    .ctx
                    .write(&mut pipe, Message::Ping(Vec::new().into()))
                    .is_ok()
                {
                    let _ = self.ctx.flush(&mut pipe);
                }
                self.ping_sent = Some(now);
                true
            }
            _ => false,
        }
    }

    /// An event is queued and none is with a worker: it is waiting for room in the queue.
    pub fn event_waiting(&self) -> bool {
        !self.in_flight && !self.events.is_empty()
    }

    /// The next event for the plugin, if none is in flight.
    pub fn next_event(&mut self) -> Option<WsEvent> {
        if self.in_flight {
            return None;
        }
        let event = self.events.pop_front()?;
        self.in_flight = true;
        Some(event)
    }

    /// An event could not be handed out (the queue was full): it goes back to the front.
    pub fn undo_next(&mut self, event: WsEvent) {
        self.in_flight = false;
        self.events.push_front(event);
    }

    /// The event in flight finished.
    pub fn event_done(&mut self) {
        self.in_flight = false;
        if self.close_queued && self.events.is_empty() {
            self.close_delivered = true;
        }
    }

    fn push(&mut self, event: WsEvent) {
        if !self.close_queued {
            self.events.push_back(event);
        }
    }

    fn queue_close(&mut self, code: u16, reason: String, clean: bool) {
        if !self.close_queued {
            self.close_queued = true;
            self.events.push_back(WsEvent::Close {
                code,
                reason,
                clean,
            });
        }
    }
}
