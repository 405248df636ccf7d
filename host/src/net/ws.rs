//! The WebSocket side of a connection, after the `101`: frames in, events out to the plugin
//! one at a time, messages from the plugin out as frames, and the closing handshake.
//!
//! Framing and its rules are [`crate::proto::frame`]'s; this module decides what to do with
//! what it reports: when the plugin hears of what, which Close answers what, and when TCP
//! closes. The closing handshake follows RFC 6455 §7.1: whoever closes, the server stops
//! delivering data, keeps reading (and discarding, unbuffered) until the peer's Close or
//! [`WS_CLOSE_TIMEOUT`], and only then closes TCP, so the peer reads our Close instead of a
//! reset.
//!
//! ```text
//! Open ──peer Close──────────────▶ CloseDue{echo} ──plugin caught up──▶ Ended
//!   ├──violation─────────────────▶ CloseDue{code} ──plugin caught up──▶ CloseSent ─▶ Ended
//!   └──plugin close / drain──────────────────────────────────────────▶ CloseSent ─▶ Ended
//!                                        (peer's Close, or the close timeout) ──┘
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::timers::Check;
use crate::limits::{Limits, WS_CLOSE_TIMEOUT, WS_MAX_QUEUED_EVENTS};
use crate::message::{Compressed, DeflateWindow, Outbound, WsEvent, WsId};
use crate::proto::frame::{self, Event, FrameReader, Violation, close_code, opcode};
use crate::proto::ws_deflate::Codec;
use crate::proto::ws_extension::Deflate;

/// Where the protocol is.
#[derive(Debug)]
enum Phase {
    /// Messages flow both ways.
    Open,
    /// A Close goes out once the plugin has handled every message that arrived before it, so
    /// its answers precede the Close: the echo of the peer's Close (`echo`), or the Close that
    /// fails a connection whose peer broke the protocol. `peer_closed`: the peer's own Close
    /// arrived meanwhile, so ours ends the handshake.
    CloseDue {
        code: Option<u16>,
        reason: String,
        echo: bool,
        peer_closed: bool,
    },
    /// Our Close is out; reading on until the peer's Close or the close timeout.
    CloseSent { at: Instant },
    /// The handshake is over or the connection dropped: TCP closes once output is written.
    Ended,
}

/// The close event, as the plugin sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CloseEvent {
    NotQueued,
    Queued,
    Delivered,
}

/// One WebSocket connection's state.
pub struct WsConn {
    pub id: WsId,
    /// The plugin that accepted the upgrade; its current version gets the events.
    pub plugin: std::sync::Arc<str>,
    reader: FrameReader,
    /// permessage-deflate's terms, when agreed.
    deflate: Option<Deflate>,
    /// What the client's next compressed message may refer back to (only when it keeps its
    /// compression context; created with its first compressed message). Away with the worker
    /// while a compressed message is being inflated.
    window: Option<DeflateWindow>,
    max_message: usize,
    phase: Phase,
    events: VecDeque<WsEvent>,
    /// An event (the open event, first) is with a worker.
    in_flight: bool,
    close_event: CloseEvent,
    last_heard: Instant,
    ping_sent: Option<Instant>,
    ping_interval: Duration,
    pong_timeout: Duration,
}

impl WsConn {
    /// A connection whose open event is already running on a worker; `deflate`: the
    /// permessage-deflate terms its handshake agreed, if any.
    pub fn new(
        id: WsId,
        plugin: std::sync::Arc<str>,
        limits: &Limits,
        now: Instant,
        deflate: Option<Deflate>,
    ) -> Self {
        WsConn {
            id,
            plugin,
            reader: FrameReader::new(limits.ws_max_message_bytes)
                .with_compression(deflate.is_some()),
            deflate,
            window: None,
            max_message: limits.ws_max_message_bytes,
            phase: Phase::Open,
            events: VecDeque::new(),
            in_flight: true,
            close_event: CloseEvent::NotQueued,
            last_heard: now,
            ping_sent: None,
            ping_interval: limits.ws_ping_interval,
            pong_timeout: limits.ws_pong_timeout,
        }
    }

    /// Whether more input is wanted: not after the end, and not while the plugin is behind.
    /// While closing, input is only followed (discarded), so it is always wanted.
    pub(crate) fn wants_input(&self) -> bool {
        match self.phase {
            Phase::Open => self.events.len() < WS_MAX_QUEUED_EVENTS,
            Phase::CloseDue { .. } | Phase::CloseSent { .. } => true,
            Phase::Ended => false,
        }
    }

    /// TCP should close once pending output is written.
    pub fn finished(&self) -> bool {
        matches!(self.phase, Phase::Ended)
    }

    /// Whether messages still arrive from the peer.
    fn open(&self) -> bool {
        matches!(self.phase, Phase::Open)
    }

    /// Whether messages from the plugin still go out: until our Close has.
    pub(crate) fn can_send(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::CloseDue { .. })
    }

    /// Everything is over: TCP is done and the plugin heard the close.
    pub(crate) fn done(&self) -> bool {
        self.finished() && self.close_event == CloseEvent::Delivered && !self.in_flight
    }

    /// Reads buffered input into events, answering control frames into `wbuf` (a Ping gets
    /// its Pong at once).
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
        let mut pos = 0;
        while self.wants_input() && wbuf.len() <= max_backlog && pos < rbuf.len() {
            let read = self.reader.read(&rbuf[pos..]);
            pos += read.used;
            if read.used > 0 {
                self.last_heard = now;
                self.ping_sent = None;
            }
            match read.outcome {
                Ok(None) => break,
                Ok(Some(event)) => self.on_frame(event, wbuf, now),
                Err(violation) => self.fail(violation),
            }
        }
        rbuf.drain(..pos);
    }

    fn on_frame(&mut self, event: Event, wbuf: &mut Vec<u8>, now: Instant) {
        match event {
            Event::Message(message) => {
                if self.open() {
                    self.events.push_back(WsEvent::Message(message));
                }
            }
            Event::Deflated { text, payload } => {
                // Inflated by the worker that delivers it (see `next_event`).
                if self.open() {
                    self.events.push_back(WsEvent::Compressed(Compressed {
                        text,
                        payload,
                        max: self.max_message,
                        window: None,
                    }));
                }
            }
            Event::Ping(payload) => {
                if self.open() {
                    frame::write_frame(wbuf, opcode::PONG, &payload);
                }
            }
            Event::Pong => {}
            Event::Close(close) => self.on_peer_close(close, wbuf, now),
        }
    }

    /// The peer's Close: echoed (after the plugin's answers to what came before), or the end
    /// of a handshake we started.
    fn on_peer_close(&mut self, close: Option<(u16, String)>, _wbuf: &mut Vec<u8>, _now: Instant) {
        let (code, reason) = match &close {
            Some((code, reason)) => (*code, reason.clone()),
            None => (close_code::NO_STATUS, String::new()),
        };
        match &mut self.phase {
            Phase::Open => {
                self.queue_close(code, reason, true);
                self.reader.discard();
                self.phase = Phase::CloseDue {
                    code: close.as_ref().map(|(c, _)| *c),
                    reason: String::new(),
                    echo: true,
                    peer_closed: true,
                };
            }
            Phase::CloseDue { peer_closed, .. } => *peer_closed = true,
            Phase::CloseSent { .. } => {
                self.queue_close(code, reason, true);
                self.phase = Phase::Ended;
            }
            Phase::Ended => {}
        }
    }

    /// The peer broke the protocol: it gets a Close with the code that says how (once the
    /// plugin has handled what came before), and the rest of its input is only followed.
    fn fail(&mut self, violation: frame::Violation) {
        tracing::debug!(ws = self.id, "failing WebSocket: {violation}");
        if !self.open() {
            return;
        }
        self.queue_close(violation.close_code(), violation.reason().to_owned(), false);
        self.phase = Phase::CloseDue {
            code: Some(violation.close_code()),
            reason: violation.reason().to_owned(),
            echo: false,
            // A malformed Close is still the peer's Close: ours then ends the handshake.
            peer_closed: self.reader.peer_closed(),
        };
    }

    /// The peer closed TCP (or reset it).
    pub(crate) fn peer_gone(&mut self) {
        if self.close_event == CloseEvent::NotQueued {
            tracing::debug!(
                ws = self.id,
                "WebSocket dropped without a closing handshake"
            );
        }
        self.queue_close(close_code::ABNORMAL, String::new(), false);
        self.phase = Phase::Ended;
    }

    /// Sends a due Close once the plugin has reached the close event, that is, once every
    /// earlier message was handled and its answers queued ahead of the Close.
    pub fn settle(&mut self, wbuf: &mut Vec<u8>, now: Instant) {
        let reached = self.close_event != CloseEvent::NotQueued && self.events.is_empty();
        if !reached {
            return;
        }
        if let Phase::CloseDue {
            code,
            reason,
            echo,
            peer_closed,
        } = &self.phase
        {
            match code {
                Some(code) => frame::write_close(wbuf, *code, reason),
                None => frame::write_frame(wbuf, opcode::CLOSE, &[]),
            }
            self.phase = if *echo || *peer_closed {
                Phase::Ended
            } else {
                Phase::CloseSent { at: now }
            };
        }
    }

    /// A message from the plugin, compressed when the connection agreed to it and the message
    /// shrinks. Dropped once the connection is closing.
    pub fn send(&mut self, message: &Outbound, wbuf: &mut Vec<u8>, codec: &mut Codec) {
        if !self.can_send() {
            return;
        }
        let code = if message.text {
            opcode::TEXT
        } else {
            opcode::BINARY
        };
        if let Some(deflate) = self.deflate
            && let Some(compressed) =
                codec.compress(&message.payload, deflate.server_max_window_bits)
        {
            codec.counts.compressed_frames += 1;
            frame::write_message(wbuf, code, true, &compressed);
        } else {
            frame::write_frame(wbuf, code, &message.payload);
        }
    }

    /// Starts the closing handshake: what is queued goes first, then Close; the peer has
    /// [`WS_CLOSE_TIMEOUT`] to answer. Messages the peer sends meanwhile are not delivered.
    pub fn close(&mut self, code: u16, reason: &str, wbuf: &mut Vec<u8>, now: Instant) {
        match self.phase {
            Phase::Open => {
                frame::write_close(wbuf, code, reason);
                self.reader.discard();
                self.phase = Phase::CloseSent { at: now };
            }
            Phase::CloseDue { echo: true, .. } => {
                // The peer closed first: the plugin's Close is the echo, and ends the handshake.
                frame::write_close(wbuf, code, reason);
                self.phase = Phase::Ended;
            }
            // A failure's Close is due, or ours went out already.
            Phase::CloseDue { .. } | Phase::CloseSent { .. } | Phase::Ended => {}
        }
    }

    /// Pings a quiet peer, and gives up on one that stopped answering or never completed the
    /// closing handshake. Returns whether anything changed.
    pub(crate) fn on_timer(&mut self, now: Instant, wbuf: &mut Vec<u8>) -> bool {
        match self.phase {
            Phase::CloseSent { at } if now.saturating_duration_since(at) >= WS_CLOSE_TIMEOUT => {
                self.queue_close(close_code::ABNORMAL, String::new(), false);
                self.phase = Phase::Ended;
                true
            }
            Phase::Open => match self.ping_sent {
                Some(t) if now.saturating_duration_since(t) >= self.pong_timeout => {
                    tracing::debug!(ws = self.id, "WebSocket peer stopped answering pings");
                    self.queue_close(close_code::ABNORMAL, String::new(), false);
                    self.phase = Phase::Ended;
                    true
                }
                None if now.saturating_duration_since(self.last_heard) >= self.ping_interval => {
                    frame::write_frame(wbuf, opcode::PING, &[]);
                    self.ping_sent = Some(now);
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// When [`WsConn::on_timer`] next has something to do, at the latest.
    pub(crate) fn next_check(&self) -> Check {
        match self.phase {
            Phase::CloseSent { at } => Check::after(at, WS_CLOSE_TIMEOUT),
            Phase::Open => match self.ping_sent {
                Some(t) => Check::after(t, self.pong_timeout),
                None => Check::after(self.last_heard, self.ping_interval),
            },
            Phase::CloseDue { .. } | Phase::Ended => Check::Never,
        }
    }

    /// An event is queued and none is with a worker: it is waiting for room in the queue.
    pub(crate) fn event_waiting(&self) -> bool {
        !self.in_flight && !self.events.is_empty()
    }

    /// The next event for the plugin, if none is in flight. A compressed message takes the
    /// client's window with it, for the worker to inflate against; it comes back with
    /// [`WsConn::event_done_with`].
    pub fn next_event(&mut self) -> Option<WsEvent> {
        if self.in_flight {
            return None;
        }
        let mut event = self.events.pop_front()?;
        if let WsEvent::Compressed(c) = &mut event
            && let Some(deflate) = self.deflate
            && !deflate.client_no_context_takeover
        {
            let bits = deflate.client_max_window_bits;
            c.window = Some(
                self.window
                    .take()
                    .unwrap_or_else(|| DeflateWindow::new(bits)),
            );
        }
        self.in_flight = true;
        Some(event)
    }

    /// An event could not be handed out (the queue was full): it goes back to the front.
    pub(crate) fn undo_next(&mut self, mut event: WsEvent) {
        if let WsEvent::Compressed(c) = &mut event
            && let Some(window) = c.window.take()
        {
            self.window = Some(window);
        }
        self.in_flight = false;
        self.events.push_front(event);
    }

    /// The compressed message in flight was inflated (`Ok`) or broke a rule: the window comes
    /// back, and a violation fails the connection. Messages that arrived after the bad one
    /// are not delivered.
    pub fn event_done_with(
        &mut self,
        window: Option<DeflateWindow>,
        result: Result<(), Violation>,
    ) {
        if window.is_some() {
            self.window = window;
        }
        if let Err(violation) = result {
            self.events.retain(|e| matches!(e, WsEvent::Close { .. }));
            self.reader.discard();
            self.fail(violation);
        }
        self.event_done();
    }

    /// The event in flight finished.
    pub fn event_done(&mut self) {
        self.in_flight = false;
        if self.close_event == CloseEvent::Queued && self.events.is_empty() {
            self.close_event = CloseEvent::Delivered;
        }
    }

    /// Queues the close event for the plugin (once; nothing is queued after it).
    fn queue_close(&mut self, code: u16, reason: String, clean: bool) {
        if self.close_event == CloseEvent::NotQueued {
            self.close_event = CloseEvent::Queued;
            self.events.push_back(WsEvent::Close {
                code,
                reason,
                clean,
            });
        }
    }
}

#[cfg(test)]
mod tests;
