//! One I/O thread: a `mio::Poll` for its connections and the waker that workers use to hand
//! back replies. There are `--io-threads` of these loops (see [`super::shards`]); loop 0 also
//! owns the listener and hands each accepted connection to the least loaded loop, where it
//! stays for life.
//!
//! A loop starts the calls of its own connections itself when it can (see
//! [`crate::pool::inline`]): a guest runs here until it finishes, waits (its fiber is then
//! suspended, and resumed here when the wait is over), or computes past an epoch tick (it then
//! moves to the worker pool). Its answer is queued for this loop and written right after the
//! event that started the call (or the round that resumed it), with no thread woken. An alarm
//! (a `timerfd`, see `alarm.rs`) wakes the loop at its calls' earliest deadline, to the
//! nanosecond.
//!
//! Besides readiness, the loop ticks every `TIMER_PERIOD` (100 ms): it enforces the deadlines
//! of the connections whose time came (a timing wheel, see [`super::timers`]: an idle
//! connection is not visited until its deadline), retries `accept` after the process ran out
//! of file descriptors, and ends a graceful drain.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use std::collections::HashMap;

use super::conn::Conn;
use crate::hub::Hub;
use crate::limits::Limits;
use crate::message::{ConnId, WsId};
use crate::pool::reply::{Replies, ReplyRx};

mod accept;
mod stop;

pub(crate) use accept::{Accepted, Lanes};
pub(super) use stop::RUN;
use stop::{DRAIN, STOP};
pub use stop::{Ended, StopHandle};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const ALARM: Token = Token(usize::MAX - 3);

/// How often deadlines are checked. Every timeout is enforced within one period.
const TIMER_PERIOD: Duration = Duration::from_millis(100);

/// Rounds of resuming this loop's calls and delivering their replies between two polls;
/// what is left after them makes the next poll return at once.
const RUN_ROUNDS: usize = 4;

/// Readiness events taken per `poll`.
const EVENTS_PER_POLL: usize = 1024;

/// Within a batch of events, the loop resumes its due calls (and writes their answers) after
/// this many.
const EVENTS_PER_CALL_ROUND: usize = 64;

/// One socket loop. Built by [`super::shards::build`], run by [`super::shards::run`].
pub(crate) struct EventLoop {
    /// Which loop this is: connection ids carry it, so replies find their way back.
    pub(super) shard: usize,
    pub(super) poll: Poll,
    /// Rings at the earliest deadline of the calls this loop runs.
    alarm: super::alarm::Alarm,
    /// Loop 0's: the listening socket, until the drain begins.
    listener: Option<TcpListener>,
    /// Every loop's hand-off queue and waker, for loop 0's accepts.
    lanes: Arc<Lanes>,
    /// Where rotation resumes when several loops are equally loaded.
    next_lane: usize,
    /// The reply queues of every loop: a request another loop took off the queue at the drain
    /// deadline is answered through them.
    forward: Replies,
    pub(super) conns: Slab<Conn<TcpStream>>,
    next_serial: u64,
    pub(super) dispatcher: Box<dyn super::Handler>,
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
    /// Held by a loop while it takes unstarted requests off the shared queue and answers its
    /// own, so that none forwarded to another loop is missed by it.
    drain_lock: Arc<std::sync::Mutex<()>>,
    /// Connections loop 0 accepted for this loop.
    inbox: crossbeam_channel::Receiver<Accepted>,
    /// Set once draining: when everything still open is closed regardless.
    pub(super) drain_deadline: Option<Instant>,
    accept_retry_at: Option<Instant>,
    /// `accept` is failing (out of descriptors); logged once per episode.
    accept_failing: bool,
    /// When each connection's deadlines are next looked at.
    pub(super) timers: super::timers::Wheel,
    /// The connections whose time came at this tick (kept to reuse its allocation).
    due: Vec<(usize, u64)>,
}

/// What the loop shares with the rest of the server.
#[derive(Debug)]
pub(crate) struct Shared {
    pub limits: Limits,
    pub hub: Arc<Hub>,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// What one loop is made of, besides what every loop shares.
pub(super) struct Parts {
    pub shard: usize,
    pub poll: Poll,
    pub listener: Option<TcpListener>,
    pub replies: ReplyRx,
    pub inbox: crossbeam_channel::Receiver<Accepted>,
}

/// What every loop shares.
pub(super) struct Common {
    pub dispatcher: Box<dyn super::Handler>,
    pub forward: Replies,
    pub lanes: Arc<Lanes>,
    pub command: Arc<AtomicU8>,
    pub drain_lock: Arc<std::sync::Mutex<()>>,
}

impl EventLoop {
    /// The poll and its waker come first, because workers need the waker before the loop
    /// exists (their replies wake it).
    pub(crate) fn poll_and_waker() -> io::Result<(Poll, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok((poll, waker))
    }

    pub(super) fn new(parts: Parts, common: &Common, shared: &Shared) -> io::Result<EventLoop> {
        let Parts {
            shard,
            poll,
            mut listener,
            replies,
            inbox,
        } = parts;
        if let Some(listener) = &mut listener {
            poll.registry()
                .register(listener, LISTENER, Interest::READABLE)?;
        }
        let alarm = super::alarm::Alarm::new(poll.registry(), ALARM)?;
        Ok(EventLoop {
            shard,
            alarm,
            poll,
            listener,
            lanes: common.lanes.clone(),
            next_lane: 0,
            forward: common.forward.clone(),
            inbox,
            conns: Slab::new(),
            next_serial: 1,
            dispatcher: common.dispatcher.another(),
            replies,
            limits: shared.limits.clone(),
            hub: shared.hub.clone(),
            metrics: shared.metrics.clone(),
            codec: Default::default(),
            codec_reported: Default::default(),
            websockets: HashMap::new(),
            ghosts: HashMap::new(),
            command: common.command.clone(),
            drain_lock: common.drain_lock.clone(),
            drain_deadline: None,
            accept_retry_at: None,
            accept_failing: false,
            timers: super::timers::Wheel::new(Instant::now(), TIMER_PERIOD),
            due: Vec::new(),
        })
    }

    /// Serves until stopped, or until a drain completes. The loop runs calls itself when it
    /// can (see [`crate::pool::inline`]), within wasmtime-wasi's tokio runtime as the workers
    /// do (WASI's sockets and files need a reactor to register with).
    pub(crate) fn run(self) -> io::Result<Ended> {
        self.dispatcher.run_calls_here(self.shard, self.lanes.len());
        wasmtime_wasi::runtime::with_ambient_tokio_runtime(move || {
            let ended = self.serve();
            crate::pool::inline::uninstall();
            ended
        })
    }

    /// How long the next `poll` may wait: not at all while calls of this loop are ready or
    /// replies wait, and no longer than the next sweep or the earliest deadline of its calls.
    /// The alarm is set for that deadline: the poll's own timeout is whole milliseconds.
    fn poll_timeout(&mut self, last_sweep: Instant) -> Duration {
        if crate::pool::inline::any_ready() || !self.replies.is_empty() {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let sweep = (last_sweep + TIMER_PERIOD).saturating_duration_since(now);
        match crate::pool::inline::next_deadline() {
            Some(at) => {
                self.alarm.ring_by(at);
                sweep.min(at.saturating_duration_since(now))
            }
            None => sweep,
        }
    }

    fn serve(mut self) -> io::Result<Ended> {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        let mut last_sweep = Instant::now();
        loop {
            match self.command.load(Ordering::Acquire) {
                STOP => return Ok(Ended::Stopped),
                DRAIN if self.drain_deadline.is_none() => self.begin_drain(),
                _ => {}
            }
            if let Some(deadline) = self.drain_deadline {
                if self.conns.is_empty() && self.lanes.closed() {
                    // Handed off before the listener closed: served like the rest, if they
                    // sent a request.
                    self.admit_handed_off();
                    if self.conns.is_empty() {
                        return Ok(Ended::Drained);
                    }
                }
                if Instant::now() >= deadline {
                    // What never reached a worker gets its 503 now (written if the socket
                    // takes it); the rest is closed.
                    self.refuse_unstarted();
                    return Ok(Ended::ForceClosed(self.conns.len()));
                }
            }
            let timeout = self.poll_timeout(last_sweep);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let busy_from = Instant::now();
            // Awake again: the time since the last `pause` is none of the CPU time the loop's
            // calls share (see `pool::cpu`).
            crate::pool::cpu::resume(busy_from);
            crate::pool::inline::new_round();
            // Calls whose deadlines passed first: their answers are late already, and are
            // written before the batch of events is handled.
            self.run_calls();
            for (n, event) in events.iter().enumerate() {
                // A long batch does not hold back the calls whose deadlines pass meanwhile.
                if n % EVENTS_PER_CALL_ROUND == EVENTS_PER_CALL_ROUND - 1 {
                    self.run_calls();
                }
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {
                        self.admit_handed_off();
                        self.deliver_replies();
                    }
                    // The calls it rang for are resumed below.
                    ALARM => self.alarm.rang(),
                    Token(slot) => {
                        self.on_conn_event(slot, event.is_read_closed() || event.is_error());
                        // A call the event started here may have answered already: written
                        // now, while its bytes are warm, rather than after every other
                        // event, so answers never pile up for a whole batch of events.
                        if !self.replies.is_empty() {
                            self.deliver_replies();
                        }
                    }
                }
            }
            // The calls this loop runs: those woken or due, then what they answered (which
            // may start more calls: a connection's next request, a WebSocket's next event).
            for _ in 0..RUN_ROUNDS {
                crate::pool::inline::run_ready();
                if self.replies.is_empty() {
                    break;
                }
                self.deliver_replies();
            }
            let now = Instant::now();
            if now.duration_since(last_sweep) >= TIMER_PERIOD {
                last_sweep = now;
                self.sweep(now);
            }
            self.metrics
                .io_loop(self.shard)
                .busy(now.saturating_duration_since(busy_from));
            crate::pool::cpu::pause(now);
        }
    }

    /// Resumes this loop's calls that were woken or are due, and writes what they answered.
    fn run_calls(&mut self) {
        crate::pool::inline::run_ready();
        if !self.replies.is_empty() {
            self.deliver_replies();
        }
    }

    fn sweep(&mut self, now: Instant) {
        if self.accept_retry_at.is_some_and(|t| now >= t) {
            self.accept_retry_at = None;
            self.accept();
        }
        let mut due = std::mem::take(&mut self.due);
        self.timers.advance(now, &mut due);
        for (slot, serial) in due.drain(..) {
            self.on_timer(slot, serial, now);
        }
        self.due = due;
    }

    /// The slots in use now (a snapshot, so connections can close while iterating).
    pub(super) fn slots(&self) -> Vec<usize> {
        self.conns.iter().map(|(slot, _)| slot).collect()
    }

    pub(super) fn close(&mut self, slot: usize) {
        let mut conn = self.conns.remove(slot);
        self.timers.forget(slot);
        conn.abandon();
        self.forget_connection();
        if let Some(ws) = conn.ws_id() {
            self.websockets.remove(&ws);
            self.hub.closed(ws);
        }
        let _ = self.poll.registry().deregister(conn.stream_mut());
    }
}
