//! The I/O thread: one `mio::Poll` for the listener, every connection, and the waker that
//! workers use to hand back replies. Handlers never run here.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use super::conn::{Conn, Ctx, Liveness};
use crate::dispatch::Dispatcher;
use crate::job::{ConnId, ReplyRx};
use crate::limits::Limits;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);

/// How often timers are checked when no event arrives.
const TIMER_PERIOD: Duration = Duration::from_millis(250);

/// How long a connection whose response ended it may linger before it is closed.
const LINGER: Duration = Duration::from_secs(2);

/// Readiness events taken per `poll`.
const EVENTS_PER_POLL: usize = 1024;

/// The socket loop. Build with [`EventLoop::new`], then call [`EventLoop::run`] on its thread.
pub struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    conns: Slab<Conn>,
    next_serial: u64,
    dispatcher: Dispatcher,
    replies: ReplyRx,
    limits: Limits,
    stop: Arc<AtomicBool>,
}

/// Stops a running [`EventLoop`] from any thread.
#[derive(Clone)]
pub struct StopHandle {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopHandle").finish_non_exhaustive()
    }
}

impl StopHandle {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
    }
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
        limits: Limits,
    ) -> io::Result<(EventLoop, StopHandle)> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let stop = Arc::new(AtomicBool::new(false));
        let handle = StopHandle {
            stop: stop.clone(),
            waker,
        };
        Ok((
            EventLoop {
                poll,
                listener,
                conns: Slab::new(),
                next_serial: 1,
                dispatcher,
                replies,
                limits,
                stop,
            },
            handle,
        ))
    }

    /// Serves until stopped.
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        let mut last_sweep = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
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
                    Token(slot) => self.on_conn_event(slot),
                }
            }
            let now = Instant::now();
            if now.duration_since(last_sweep) >= TIMER_PERIOD {
                last_sweep = now;
                self.sweep(now);
            }
        }
        Ok(())
    }

    /// Accepts until the listener would block.
    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
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
                    let mut conn = Conn::new(id, stream, peer);
                    if let Err(e) = self.poll.registry().register(
                        &mut conn.stream,
                        Token(slot),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        tracing::warn!("cannot register a connection: {e}");
                        continue;
                    }
                    entry.insert(conn);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: leave the rest in the backlog until the next event.
                    tracing::warn!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn on_conn_event(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let mut ctx = Ctx {
            dispatcher: &mut self.dispatcher,
            limits: &self.limits,
        };
        if conn.on_ready(&mut ctx) == Liveness::Closed {
            self.close(slot);
        }
    }

    fn deliver_replies(&mut self) {
        let replies: Vec<_> = self.replies.drain().collect();
        for reply in replies {
            let slot = reply.conn.slot;
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            if conn.id != reply.conn {
                // The connection this reply was for is gone; its slot has a new occupant.
                continue;
            }
            let mut ctx = Ctx {
                dispatcher: &mut self.dispatcher,
                limits: &self.limits,
            };
            if conn.on_reply(reply, &mut ctx) == Liveness::Closed {
                self.close(slot);
            }
        }
    }

    fn sweep(&mut self, now: Instant) {
        let expired: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.linger_expired(now, LINGER))
            .map(|(slot, _)| slot)
            .collect();
        for slot in expired {
            self.close(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        let mut conn = self.conns.remove(slot);
        let _ = self.poll.registry().deregister(&mut conn.stream);
    }
}
