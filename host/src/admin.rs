//! The admin listener (`--admin ADDR`, meant for loopback): `/healthz`, `/readyz` and
//! `/metrics`, on a thread of its own so that it keeps answering when the main loops are
//! saturated.
//!
//! It is served as the main port is, never blocking on any one client: a `mio` loop of its
//! own, non-blocking sockets, and a total deadline for each request head (the server's
//! `--head-timeout-ms`, as on the main port; past it: 408 and close). A client that drips a
//! byte every few seconds, or hundreds of them, cost a slot each until their deadline and
//! hold up no one. Past [`crate::limits::ADMIN_MAX_CONNECTIONS`] the oldest connection is closed to make
//! room, so a new scrape or probe is always taken in. One request per connection: admin
//! traffic is a scrape every few seconds. Requests are parsed and answers encoded by
//! [`crate::proto`], as on the main listener.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use crate::hub::Hub;
use crate::limits::{
    ADMIN_MAX_CONNECTIONS, ADMIN_MAX_REQUEST_BYTES, ADMIN_WRITE_TIMEOUT, Limits, READ_CHUNK_BYTES,
};
use crate::metrics::Metrics;
use crate::net::event_loop::StopHandle;
use crate::net::io::{Step, read_some, write_some};
use crate::proto::request::{self, RequestHead};
use crate::proto::response::{self, RequestMeta};
use crate::proto::{ProtoError, Status, Version};
use crate::runtime::engine::registry::Registry;

/// The listener's token; connections use their slab slot.
const LISTENER: Token = Token(usize::MAX);

/// How often deadlines are checked when nothing else happens.
const SWEEP: Duration = Duration::from_millis(100);

/// What the admin endpoints look at.
pub(crate) struct AdminState {
    /// The key-value store, whose trouble makes the server not ready.
    pub store: crate::kv::Store,
    /// The other processes, whose unreachability makes the server not ready.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    pub metrics: Arc<Metrics>,
    pub hub: Arc<Hub>,
    pub registry: Arc<Registry>,
    pub stop: StopHandle,
    pub queue_depth: Box<dyn Fn() -> usize + Send + Sync>,
    /// The whole request head must arrive within this of the connection's first byte.
    pub head_timeout: Duration,
}

/// Binds `addr` and serves the admin endpoints on a thread of their own.
pub(crate) fn start(addr: SocketAddr, state: AdminState) -> anyhow::Result<SocketAddr> {
    // The main listener's backlog: hundreds of clients that never finish must not fill the
    // accept queue, or /healthz's SYN waits a second to be retransmitted.
    let std_listener = crate::net::io::listen(addr, false)
        .with_context(|| format!("cannot listen on {addr} (--admin)"))?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    let mut listener = TcpListener::from_std(std_listener);
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    std::thread::Builder::new()
        .name("ankh-admin".into())
        .spawn(move || {
            let mut admin = Admin {
                poll,
                listener,
                conns: Slab::new(),
                state,
            };
            if let Err(e) = admin.run() {
                tracing::error!("the admin listener stopped: {e}");
            }
        })?;
    Ok(local)
}

/// One admin connection: reading its head, then writing its answer.
struct AdminConn {
    stream: TcpStream,
    opened: Instant,
    input: Vec<u8>,
    /// The answer, once there is one, and how much of it is written.
    out: Option<(Vec<u8>, usize)>,
    answered: Option<Instant>,
}

struct Admin {
    poll: Poll,
    listener: TcpListener,
    conns: Slab<AdminConn>,
    state: AdminState,
}

impl Admin {
    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        loop {
            match self.poll.poll(&mut events, Some(SWEEP)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in &events {
                match event.token() {
                    LISTENER => self.accept(),
                    Token(slot) => self.advance(slot),
                }
            }
            self.sweep(Instant::now());
        }
    }

    /// Accepts until the listener would block; at the cap, the oldest connection makes room.
    fn accept(&mut self) {
        loop {
            let (mut stream, _) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("admin accept failed: {e}");
                    return;
                }
            };
            if self.conns.len() >= ADMIN_MAX_CONNECTIONS
                && let Some(oldest) = self
                    .conns
                    .iter()
                    .min_by_key(|(_, c)| c.opened)
                    .map(|(slot, _)| slot)
            {
                self.close(oldest);
            }
            let entry = self.conns.vacant_entry();
            let token = Token(entry.key());
            if self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
            {
                continue;
            }
            entry.insert(AdminConn {
                stream,
                opened: Instant::now(),
                input: Vec::new(),
                out: None,
                answered: None,
            });
        }
    }

    /// Reads what has arrived; once the head is complete (or wrong), answers; writes what the
    /// socket takes; closes when done.
    fn advance(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if conn.out.is_none() {
            let mut chunk = [0u8; READ_CHUNK_BYTES];
            loop {
                match read_some(&mut conn.stream, &mut chunk) {
                    Ok(Step::Moved(n)) => conn.input.extend_from_slice(&chunk[..n]),
                    Ok(Step::WouldBlock) => break,
                    Ok(Step::Eof) | Err(_) => return self.close(slot),
                }
                if conn.input.len() > ADMIN_MAX_REQUEST_BYTES {
                    break;
                }
            }
            let limits = Limits {
                max_head_bytes: ADMIN_MAX_REQUEST_BYTES,
                ..Limits::default()
            };
            match request::parse(&conn.input, &limits) {
                Ok(Status::Partial) => return,
                Ok(Status::Complete(head, _)) => {
                    conn.out = Some((answer(&self.state, &head), 0));
                }
                Err(e) => conn.out = Some((refusal(&e), 0)),
            }
            conn.answered = Some(Instant::now());
        }
        let Some((out, written)) = &mut conn.out else {
            return;
        };
        while *written < out.len() {
            match write_some(&mut conn.stream, &out[*written..]) {
                Ok(Step::Moved(n)) => *written += n,
                Ok(Step::WouldBlock) => return,
                Ok(Step::Eof) | Err(_) => break,
            }
        }
        self.close(slot);
    }

    /// Answers 408 to a head past its deadline, drops an answer the client does not read.
    fn sweep(&mut self, now: Instant) {
        let head_timeout = self.state.head_timeout;
        let late: Vec<(usize, bool)> = self
            .conns
            .iter()
            .filter_map(|(slot, c)| match c.answered {
                None if now.duration_since(c.opened) >= head_timeout => Some((slot, true)),
                Some(at) if now.duration_since(at) >= ADMIN_WRITE_TIMEOUT => Some((slot, false)),
                _ => None,
            })
            .collect();
        for (slot, reading) in late {
            if reading {
                let conn = &mut self.conns[slot];
                let mut out = Vec::new();
                response::encode_simple(
                    408,
                    &[],
                    "the request head took too long",
                    &meta(false),
                    &mut out,
                );
                conn.out = Some((out, 0));
                conn.answered = Some(now);
                self.advance(slot);
            } else {
                self.close(slot);
            }
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut conn) = self.conns.try_remove(slot) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }
}

fn meta(head: bool) -> RequestMeta<'static> {
    RequestMeta {
        version: Version::Http11,
        head,
        keep_alive: false,
        accept_encoding: None,
    }
}

/// The answer to a malformed request.
fn refusal(e: &ProtoError) -> Vec<u8> {
    let mut out = Vec::new();
    response::encode_simple(e.status(), &[], &e.to_string(), &meta(false), &mut out);
    out
}

/// The answer to a request of the admin endpoints.
fn answer(state: &AdminState, head: &RequestHead) -> Vec<u8> {
    let (status, content_type, body) = match (&*head.method, &*head.path) {
        ("GET" | "HEAD", "/healthz") => (200, "text/plain", "ok\n".to_owned()),
        ("GET" | "HEAD", "/readyz") => {
            if state.stop.draining() {
                (503, "text/plain", "not ready: draining\n".to_owned())
            } else if state.registry.snapshot().is_empty() {
                (
                    503,
                    "text/plain",
                    "not ready: no plugin is mounted\n".to_owned(),
                )
            } else if let Some(why) = state
                .store
                .trouble()
                .or_else(|| state.cluster.as_ref().and_then(|c| c.trouble()))
            {
                (503, "text/plain", format!("not ready: {why}\n"))
            } else {
                (200, "text/plain", "ready\n".to_owned())
            }
        }
        ("GET" | "HEAD", "/metrics") => (200, "text/plain; version=0.0.4", {
            let mut text = state
                .metrics
                .render(state.hub.open_count(), (state.queue_depth)());
            if let Some(cluster) = &state.cluster {
                cluster.render_metrics(&mut text);
            }
            text
        }),
        ("GET" | "HEAD", _) => (404, "text/plain", "not found\n".to_owned()),
        _ => (405, "text/plain", "method not allowed\n".to_owned()),
    };
    let headers = [("content-type".to_owned(), content_type.as_bytes().to_vec())];
    let mut out = Vec::new();
    let _ = response::encode(
        status,
        &headers,
        body.as_bytes(),
        &meta(head.is_head()),
        &mut out,
    );
    out
}
