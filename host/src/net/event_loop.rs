//! The I/O thread: one `mio::Poll` for the listener, every connection, and the waker that
//! workers use to hand back replies. Handlers never run here.
//!
//! Besides readiness, the loop runs a timer sweep (every `TIMER_PERIOD`, 100 ms) that enforces each
//! connection's deadlines, retries `accept` after the process ran out of file descriptors, and
//! ends a graceful drain.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use std::collections::HashMap;

use super::conn::Conn;
use super::http::HttpConn;
use crate::dispatch::Dispatcher;
use crate::hub::Hub;
use crate::limits::Limits;
use crate::message::{ConnId, WsId};
use crate::pool::reply::ReplyRx;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);

/// How often deadlines are checked. Every timeout is enforced within one period.
const TIMER_PERIOD: Duration = Duration::from_millis(100);

/// After `accept` failed for lack of file descriptors, wait this long before trying again, so
/// the loop neither spins nor forgets the backlog.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Readiness events taken per `poll`.
const EVENTS_PER_POLL: usize = 1024;

/// What the loop has been asked to do, set from any thread.
const RUN: u8 = 0;
const DRAIN: u8 = 1;
const STOP: u8 = 2;

/// The socket loop. Build with [`EventLoop::new`], then call [`EventLoop::run`] on its thread.
pub struct EventLoop {
    pub(super) poll: Poll,
    listener: Option<TcpListener>,
    pub(super) conns: Slab<Conn<TcpStream>>,
    next_serial: u64,
    pub(super) dispatcher: Dispatcher,
    pub(super) replies: ReplyRx,
    pub(super) limits: Limits,
    pub(super) hub: Arc<Hub>,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    /// permessage-deflate's compressors and inflater, shared by this loop's WebSockets.
    pub(super) codec: crate::proto::ws_deflate::Codec,
    /// What `codec` had done when last added to `metrics`.
    pub(super) codec_reported: crate::proto::ws_deflate::Counts,
    /// Where each open WebSocket lives, for messages from plugins.
    pub(super) websockets: HashMap<WsId, ConnId>,
    /// Upgrades whose client left before the 101 could be written: once their open event
    /// finishes, the plugin still gets the close event (exactly once, after the open).
    pub(super) ghosts: HashMap<WsId, Arc<str>>,
    command: Arc<AtomicU8>,
    /// Set once draining: when everything still open is closed regardless.
    pub(super) drain_deadline: Option<Instant>,
    accept_retry_at: Option<Instant>,
    /// `accept` is failing (out of descriptors); logged once per episode.
    accept_failing: bool,
}

/// Drains or stops a running [`EventLoop`] from any thread.
#[derive(Clone)]
pub struct StopHandle {
    command: Arc<AtomicU8>,
    waker: Arc<Waker>,
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
        let _ = self.waker.wake();
    }

    /// Whether a drain or a stop was asked for.
    pub fn draining(&self) -> bool {
        self.command.load(Ordering::Acquire) != RUN
    }

    /// Immediate: return from `run` at the next wake-up, closing every connection.
    pub fn stop(&self) {
        self.command.store(STOP, Ordering::Release);
        let _ = self.waker.wake();
    }
}

/// What the loop shares with the rest of the server.
#[derive(Debug)]
pub struct Shared {
    pub limits: Limits,
    pub hub: Arc<Hub>,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// How a run ended.
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
    /// The poll and its waker come first, because workers need the waker before the loop
    /// exists (their replies wake it).
    pub fn poll_and_waker() -> io::Result<(Poll, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok((poll, waker))
    }

    pub fn new(
        poll: Poll,
        waker: Arc<Waker>,
        mut listener: TcpListener,
        dispatcher: Dispatcher,
        replies: ReplyRx,
        shared: Shared,
    ) -> io::Result<(EventLoop, StopHandle)> {
        let Shared {
            limits,
            hub,
            metrics,
        } = shared;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let command = Arc::new(AtomicU8::new(RUN));
        let handle = StopHandle {
            command: command.clone(),
            waker,
        };
        Ok((
            EventLoop {
                poll,
                listener: Some(listener),
                conns: Slab::new(),
                next_serial: 1,
                dispatcher,
                replies,
                limits,
                hub,
                metrics,
                codec: Default::default(),
                codec_reported: Default::default(),
                websockets: HashMap::new(),
                ghosts: HashMap::new(),
                command,
                drain_deadline: None,
                accept_retry_at: None,
                accept_failing: false,
            },
            handle,
        ))
    }

    /// Serves until stopped, or until a drain completes.
    pub fn run(mut self) -> io::Result<Ended> {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        let mut last_sweep = Instant::now();
        loop {
            match self.command.load(Ordering::Acquire) {
                STOP => return Ok(Ended::Stopped),
                DRAIN if self.drain_deadline.is_none() => self.begin_drain(),
                _ => {}
            }
            if let Some(deadline) = self.drain_deadline {
                if self.conns.is_empty() {
                    return Ok(Ended::Drained);
                }
                if Instant::now() >= deadline {
                    // What never reached a worker gets its 503 now (written if the socket
                    // takes it); the rest is closed.
                    self.refuse_unstarted();
                    return Ok(Ended::ForceClosed(self.conns.len()));
                }
            }
            if let Err(e) = self.poll.poll(&mut events, Some(TIMER_PERIOD)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for event in &events {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => self.deliver_replies(),
                    Token(slot) => {
                        self.on_conn_event(slot, event.is_read_closed() || event.is_error())
                    }
                }
            }
            let now = Instant::now();
            if now.duration_since(last_sweep) >= TIMER_PERIOD {
                last_sweep = now;
                self.sweep(now);
            }
        }
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Accepts until the listener would block.
    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if self.accept_failing {
                        self.accept_failing = false;
                        tracing::info!("accept works again");
                    }
                    if self.conns.len() >= self.limits.max_connections {
                        // Accepted and closed at once: the client learns immediately, and the
                        // backlog does not fill with connections we would never serve.
                        warn_limited!(%peer, max = self.limits.max_connections, "connection limit reached: closing a new connection");
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                        continue;
                    }
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!("set_nodelay failed: {e}");
                    }
                    let entry = self.conns.vacant_entry();
                    let slot = entry.key();
                    let id = ConnId {
                        slot,
                        serial: self.next_serial,
                    };
                    self.next_serial += 1;
                    let mut conn =
                        Conn::Http(Box::new(HttpConn::new(id, stream, peer, Instant::now())));
                    if let Err(e) = self.poll.registry().register(
                        conn.stream_mut(),
                        Token(slot),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        tracing::warn!("cannot register a connection: {e}");
                        continue;
                    }
                    entry.insert(conn);
                    self.metrics
                        .connections_open
                        .fetch_add(1, Ordering::Relaxed);
                    self.metrics
                        .connections_total
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors (EMFILE/ENFILE) or memory: the connection stays
                    // in the backlog. Retry after a pause rather than spinning on it.
                    if !self.accept_failing {
                        self.accept_failing = true;
                        tracing::warn!("accept failed, retrying shortly: {e}");
                    }
                    self.accept_retry_at = Some(Instant::now() + ACCEPT_BACKOFF);
                    return;
                }
            }
        }
    }

    fn sweep(&mut self, now: Instant) {
        if self.accept_retry_at.is_some_and(|t| now >= t) {
            self.accept_retry_at = None;
            self.accept();
        }
        for slot in self.slots() {
            self.on_timer(slot, now);
        }
    }

    /// Stops accepting at once and closes idle connections; busy ones close after their
    /// in-flight response. Queued requests still run while the drain deadline allows: only
    /// those no worker has started by then get 503 (see [`EventLoop::refuse_unstarted`]).
    fn begin_drain(&mut self) {
        self.drain_deadline = Some(Instant::now() + self.limits.drain_timeout);
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        tracing::info!(
            connections = self.conns.len(),
            queued = self.dispatcher.queued(),
            deadline_ms = self.limits.drain_timeout.as_millis() as u64,
            "draining: no longer accepting"
        );
        for slot in self.slots() {
            self.on_drain(slot);
        }
    }

    /// Answers 503 to every request no worker has started.
    fn refuse_unstarted(&mut self) {
        let unstarted = self.dispatcher.take_unstarted_requests();
        if !unstarted.is_empty() {
            tracing::warn!(
                requests = unstarted.len(),
                "drain deadline reached: answering 503 to requests no worker started"
            );
        }
        for (id, seq) in unstarted {
            self.with_http(id, |conn, ctx| conn.on_unstarted(seq, ctx));
        }
    }

    /// The slots in use now (a snapshot, so connections can close while iterating).
    pub(super) fn slots(&self) -> Vec<usize> {
        self.conns.iter().map(|(slot, _)| slot).collect()
    }

    pub(super) fn close(&mut self, slot: usize) {
        let mut conn = self.conns.remove(slot);
        conn.abandon();
        self.metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
        if let Some(ws) = conn.ws_id() {
            self.websockets.remove(&ws);
            self.hub.closed(ws);
        }
        let _ = self.poll.registry().deregister(conn.stream_mut());
    }
}
