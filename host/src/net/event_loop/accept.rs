//! Taking connections in: loop 0 accepts until the listener would block, checks the global
//! connection cap, and hands each connection to the loop with the fewest open, through that
//! loop's hand-off queue and waker; the connection stays there for life.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use mio::net::TcpStream;
use mio::{Interest, Token, Waker};

use super::EventLoop;
use crate::message::ConnId;
use crate::net::conn::Conn;
use crate::net::http::HttpConn;

/// After `accept` failed for lack of file descriptors, wait this long before trying again, so
/// the loop neither spins nor forgets the backlog.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A connection loop 0 accepted for another loop.
pub(crate) struct Accepted {
    pub stream: TcpStream,
    pub peer: SocketAddr,
}

/// Every loop's hand-off queue and waker.
#[derive(Debug)]
pub(crate) struct Lanes {
    pub(crate) lanes: Vec<(Sender<Accepted>, Arc<Waker>)>,
    /// Loop 0 closed its listener: nothing more will be handed off. A draining loop with
    /// nothing open waits for it, so that no connection is handed to a loop that has ended.
    pub(crate) closed: AtomicBool,
}

impl Lanes {
    pub(crate) fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Loop 0 has closed its listener: every loop is woken to see it.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for (_, waker) in &self.lanes {
            let _ = waker.wake();
        }
    }

    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Queues `accepted` for loop `lane` and wakes it. Should the loop be gone (the server is
    /// stopping), the connection is closed with the queue.
    pub(crate) fn hand_off(&self, lane: usize, accepted: Accepted) {
        let (inbox, waker) = &self.lanes[lane];
        if inbox.send(accepted).is_ok() {
            let _ = waker.wake();
        }
    }
}

impl EventLoop {
    /// Accepts until the listener would block (loop 0 only), handing each connection to the
    /// loop with the fewest open.
    pub(super) fn accept(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => {
                    if self.accept_failing {
                        self.accept_failing = false;
                        tracing::info!("accept works again");
                    }
                    let open = self.metrics.connections_open.load(Ordering::Relaxed);
                    if open >= self.limits.max_connections as i64 {
                        // Accepted and closed at once: the client learns immediately, and the
                        // backlog does not fill with connections we would never serve.
                        warn_limited!(%peer, max = self.limits.max_connections, "connection limit reached: closing a new connection");
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                        continue;
                    }
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!("set_nodelay failed: {e}");
                    }
                    self.metrics
                        .connections_open
                        .fetch_add(1, Ordering::Relaxed);
                    self.metrics
                        .connections_total
                        .fetch_add(1, Ordering::Relaxed);
                    let lane = self.least_loaded();
                    self.metrics.io_loop(lane).opened();
                    if lane == self.shard {
                        self.admit(stream, peer);
                    } else {
                        self.lanes.hand_off(lane, Accepted { stream, peer });
                    }
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

    /// The loop with the fewest open connections; ties go round-robin.
    pub(super) fn least_loaded(&mut self) -> usize {
        let loops = self.lanes.len();
        if loops == 1 {
            return 0;
        }
        let start = self.next_lane;
        self.next_lane = (start + 1) % loops;
        (0..loops)
            .map(|k| (start + k) % loops)
            .min_by_key(|&lane| self.metrics.io_loop(lane).open())
            .unwrap_or(self.shard)
    }

    /// Connections loop 0 accepted for this loop. While draining, each is served the request
    /// it already sent, if any, and closed otherwise, as an idle connection is.
    pub(super) fn admit_handed_off(&mut self) {
        while let Ok(Accepted { stream, peer }) = self.inbox.try_recv() {
            self.admit(stream, peer);
        }
    }

    /// Takes an accepted connection into this loop's table and poll (and, while draining,
    /// gives it the drain's treatment at once).
    pub(super) fn admit(&mut self, stream: TcpStream, peer: std::net::SocketAddr) {
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        let id = ConnId {
            shard: self.shard,
            slot,
            serial: self.next_serial,
        };
        self.next_serial += 1;
        let mut conn = Conn::Http(Box::new(HttpConn::new(id, stream, peer, Instant::now())));
        if let Err(e) = self.poll.registry().register(
            conn.stream_mut(),
            Token(slot),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("cannot register a connection: {e}");
            self.forget_connection();
            return;
        }
        entry.insert(conn);
        self.settle(slot, crate::net::conn::Liveness::Open);
        if self.drain_deadline.is_some() {
            // Accepted before the drain began: what it sent by then is served.
            self.on_last_look(slot);
            self.on_drain(slot);
        }
    }

    /// A connection of this loop is gone (or never arrived): the counts drop.
    pub(super) fn forget_connection(&self) {
        self.metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
        self.metrics.io_loop(self.shard).closed();
    }
}
