//! One client connection: bytes in, requests out to the dispatcher, replies in, bytes out.
//!
//! ```text
//! Head ──head──▶ Body ──body──▶ Waiting ──reply──▶ Head (keep-alive) or Closing
//!   └──────────── no body ───────▲                    │
//! any protocol error ─▶ error response ─▶ Closing ─▶ Lingering ─▶ closed
//! ```
//!
//! One request per connection is with a worker at a time, so pipelined requests are answered
//! in order by construction; the bytes of the next ones wait in the read buffer. A reply is
//! accepted only for the request in flight (`seq`), so a late or duplicate reply never reaches
//! the wire.

use std::net::{Shutdown, SocketAddr};
use std::time::Instant;

use mio::net::TcpStream;

use super::io::{Step, read_some, write_some};
use crate::dispatch::{Dispatcher, Immediate};
use crate::job::{ConnId, Reply};
use crate::limits::{Limits, READ_CHUNK_BYTES};
use crate::proto::body::BodyDecoder;
use crate::proto::request::{self, Framing, RequestHead};
use crate::proto::response::{self, RequestMeta};
use crate::proto::{ProtoError, Status, Version};

/// Pending output past which no further pipelined request is started until the client reads.
const WRITE_HIGH_WATER_BYTES: usize = 256 * 1024;

/// Bytes read and discarded after an error response before the socket is closed anyway.
const LINGER_MAX_BYTES: usize = 256 * 1024;

/// Whether the event loop should keep the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Open,
    Closed,
}

enum State {
    /// Reading a request head.
    Head,
    /// Reading the body of `head`.
    Body {
        head: RequestHead,
        decoder: BodyDecoder,
        body: Vec<u8>,
    },
    /// A worker has the request; waiting for its reply.
    Waiting,
    /// The last response is queued; close once it is written.
    Closing,
    /// Our side is shut down; reading and discarding until the client closes, so that the
    /// response is not destroyed by a reset.
    Lingering { since: Instant, discarded: usize },
}

/// What the connection needs from the rest of the host while it advances.
pub struct Ctx<'a> {
    pub dispatcher: &'a mut Dispatcher,
    pub limits: &'a Limits,
}

pub struct Conn {
    pub id: ConnId,
    pub stream: TcpStream,
    peer: SocketAddr,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    wpos: usize,
    state: State,
    /// The position of the current request on this connection.
    seq: u64,
    eof: bool,
}

impl Conn {
    pub fn new(id: ConnId, stream: TcpStream, peer: SocketAddr) -> Self {
        Conn {
            id,
            stream,
            peer,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            wpos: 0,
            state: State::Head,
            seq: 0,
            eof: false,
        }
    }

    /// The socket is readable, writable, or both: make all the progress possible.
    pub fn on_ready(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
        self.advance(ctx)
    }

    /// A worker answered a request of this connection.
    pub fn on_reply(&mut self, reply: Reply, ctx: &mut Ctx<'_>) -> Liveness {
        if !matches!(self.state, State::Waiting) || reply.seq != self.seq {
            tracing::debug!(conn = ?self.id, seq = reply.seq, "stale reply dropped");
            return Liveness::Open;
        }
        self.wbuf.extend_from_slice(&reply.bytes);
        self.seq += 1;
        self.state = if reply.close {
            State::Closing
        } else {
            State::Head
        };
        self.advance(ctx)
    }

    /// A lingering connection whose client does not close is closed after this long.
    pub fn linger_expired(&self, now: Instant, linger: std::time::Duration) -> bool {
        matches!(self.state, State::Lingering { since, .. } if now.duration_since(since) >= linger)
    }

    /// Reads, parses, dispatches and writes until nothing more can happen without an event.
    fn advance(&mut self, ctx: &mut Ctx<'_>) -> Liveness {
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
                State::Head | State::Body { .. } if self.eof => {
                    // The client closed mid-request, or between requests.
                    return Liveness::Closed;
                }
                State::Head | State::Body { .. } | State::Lingering { .. } => {}
                State::Waiting => return Liveness::Open,
                State::Closing => {
                    if self.pending_output() {
                        return Liveness::Open;
                    }
                    let _ = self.stream.shutdown(Shutdown::Write);
                    if self.eof {
                        return Liveness::Closed;
                    }
                    self.state = State::Lingering {
                        since: Instant::now(),
                        discarded: 0,
                    };
                    continue;
                }
            }
            if self.pending_output() && self.wbuf.len() - self.wpos > WRITE_HIGH_WATER_BYTES {
                return Liveness::Open;
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

    /// One step of protocol work on buffered input. Returns whether anything changed.
    fn process(&mut self, ctx: &mut Ctx<'_>) -> Result<bool, ProtoError> {
        match &mut self.state {
            State::Waiting | State::Closing => Ok(false),
            State::Lingering { discarded, .. } => {
                *discarded += self.rbuf.len();
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
                let (head, used) = match request::parse(&self.rbuf, ctx.limits)? {
                    Status::Partial => return Ok(false),
                    Status::Complete(head, used) => (head, used),
                };
                self.rbuf.drain(..used);
                match head.framing {
                    Framing::Empty => self.dispatch(head, Vec::new(), ctx),
                    Framing::Length(n) => {
                        if head.expect_continue && self.rbuf.is_empty() {
                            self.wbuf.extend_from_slice(response::CONTINUE);
                        }
                        let cap = usize::try_from(n).unwrap_or(usize::MAX).min(1 << 20);
                        self.state = State::Body {
                            head,
                            decoder: BodyDecoder::length(n),
                            body: Vec::with_capacity(cap),
                        };
                    }
                    Framing::Chunked => {
                        if head.expect_continue && self.rbuf.is_empty() {
                            self.wbuf.extend_from_slice(response::CONTINUE);
                        }
                        self.state = State::Body {
                            head,
                            decoder: BodyDecoder::chunked(ctx.limits.max_body_bytes),
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
                    let State::Body { head, body, .. } =
                        std::mem::replace(&mut self.state, State::Waiting)
                    else {
                        unreachable!("state was Body");
                    };
                    self.dispatch(head, body, ctx);
                }
                Ok(progress.consumed > 0 || progress.done)
            }
        }
    }

    /// Hands a complete request on; answers at once when the dispatcher says so.
    fn dispatch(&mut self, head: RequestHead, body: Vec<u8>, ctx: &mut Ctx<'_>) {
        let meta = Meta::of(&head);
        self.state = State::Waiting;
        if let Err(immediate) = ctx
            .dispatcher
            .dispatch(self.id, self.seq, head, body, self.peer)
        {
            self.answer(&immediate, meta);
        }
    }

    /// Writes a host-made response for the current request.
    fn answer(&mut self, immediate: &Immediate, meta: Meta) {
        let retry;
        let extra: &[(&str, &str)] = match immediate.retry_after {
            Some(secs) => {
                retry = secs.to_string();
                &[("retry-after", retry.as_str())]
            }
            None => &[],
        };
        let req = RequestMeta {
            version: meta.version,
            head: meta.head,
            keep_alive: meta.keep_alive,
            accept_encoding: None,
        };
        let keep_alive = response::encode_simple(
            immediate.status,
            extra,
            &immediate.message,
            &req,
            &mut self.wbuf,
        );
        self.seq += 1;
        self.state = if keep_alive {
            State::Head
        } else {
            State::Closing
        };
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
        response::encode_simple(e.status(), &[], &e.to_string(), &req, &mut self.wbuf);
        self.state = State::Closing;
    }

    fn read(&mut self) -> std::io::Result<Step> {
        let len = self.rbuf.len();
        self.rbuf.resize(len + READ_CHUNK_BYTES, 0);
        let step = read_some(&mut self.stream, &mut self.rbuf[len..]);
        let got = match step {
            Ok(Step::Moved(n)) => n,
            _ => 0,
        };
        self.rbuf.truncate(len + got);
        step
    }

    fn pending_output(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// Writes buffered output until it is all written or the socket would block.
    fn flush(&mut self) -> std::io::Result<()> {
        while self.pending_output() {
            match write_some(&mut self.stream, &self.wbuf[self.wpos..])? {
                Step::Moved(n) => self.wpos += n,
                Step::WouldBlock | Step::Eof => return Ok(()),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(())
    }
}

/// What a host-made answer needs to know about the request.
#[derive(Debug, Clone, Copy)]
struct Meta {
    version: Version,
    head: bool,
    keep_alive: bool,
}

impl Meta {
    fn of(head: &RequestHead) -> Self {
        Meta {
            version: head.version,
            head: head.is_head(),
            keep_alive: head.keep_alive,
        }
    }
}
