//! The HTTP connection state machine fed an arbitrary byte stream, split at arbitrary points,
//! with timers firing at arbitrary moments and every request it hands out refused with 404
//! (as the dispatcher would with no plugin): it never panics or loops, and everything it
//! writes is a sequence of well-formed HTTP/1.1 responses. No pool, no runtime. The first
//! byte also chooses whether the route reads its bodies as they arrive (as a wasi:http
//! component's does): then a request goes out at its head, and its body is drained after
//! the refusal.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crate::limits::Limits;
use crate::message::ConnId;
use crate::net::Immediate;
use crate::net::conn::{Liveness, Transport};
use crate::net::http::{HttpConn, HttpCtx, Route, Router, Step};

/// Every path routes nowhere; `.0`: as a plugin that reads its bodies as they arrive.
struct Nowhere(bool);

impl Router for Nowhere {
    fn route(&self, _path: &str) -> Route {
        Route {
            mount: None,
            max_body: None,
            streams_body: self.0,
        }
    }
}

/// What the dispatcher says when no plugin is mounted.
fn refuse(conn: &mut HttpConn<MemIo>, step: Step, ctx: &HttpCtx<'_>) -> Liveness {
    let mut step = step;
    while step.dispatch.take().is_some() {
        let not_found = Immediate {
            status: 404,
            message: "no plugin".to_owned(),
            retry_after: None,
        };
        step = conn.refused(&not_found, ctx);
    }
    step.liveness
}

/// A socket made of memory: reads return the chunks made available so far, then WouldBlock
/// (or EOF once the client is done); writes accept at most `window` bytes at a time.
struct MemIo {
    ready: VecDeque<u8>,
    eof: bool,
    out: Vec<u8>,
    window: usize,
}

impl Read for MemIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ready.is_empty() {
            return if self.eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(self.ready.len());
        for (slot, b) in buf.iter_mut().zip(self.ready.drain(..n)) {
            *slot = b;
        }
        Ok(n)
    }
}

impl Write for MemIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.window == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.window);
        self.out.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for MemIo {
    fn shutdown_write(&self) {}
}

/// The target: never panics on any `data`.
pub fn run(data: &[u8]) {
    // The first bytes choose how the stream is cut and when timers fire; the rest is the stream.
    let (script, stream) = data.split_at(data.len().min(16));
    let limits = Limits {
        max_body_bytes: 64 * 1024,
        ..Limits::default()
    };
    let start = Instant::now();
    let io = MemIo {
        ready: VecDeque::new(),
        eof: false,
        out: Vec::new(),
        window: 1 << 20,
    };
    let peer = "127.0.0.1:9".parse().unwrap();
    let mut conn = HttpConn::new(
        ConnId {
            shard: 0,
            slot: 0,
            serial: 1,
        },
        io,
        peer,
        start,
    );
    let router = Nowhere(script.first().is_some_and(|b| b & 1 == 1));
    let ctx = HttpCtx {
        limits: &limits,
        router: &router,
        draining: false,
    };
    let mut fed = 0;
    let mut step = 0;
    let mut now = start;
    let mut open = true;
    while open && fed < stream.len() {
        let knob = script
            .get(step % script.len().max(1))
            .copied()
            .unwrap_or(64);
        step += 1;
        let n = usize::from(knob % 64) + 1;
        let end = (fed + n).min(stream.len());
        conn.stream.ready.extend(&stream[fed..end]);
        fed = end;
        conn.stream.window = if knob & 0x40 != 0 { 7 } else { 1 << 20 };
        let ready = conn.on_ready(false, &ctx);
        open = refuse(&mut conn, ready, &ctx) == Liveness::Open;
        if open && knob & 0x80 != 0 {
            now += Duration::from_secs(u64::from(knob & 0x3f));
            let timed = conn.on_timer(now, &ctx);
            open = refuse(&mut conn, timed, &ctx) == Liveness::Open;
        }
        assert!(step < 100_000, "no progress");
    }
    if open {
        conn.stream.eof = true;
        conn.stream.window = 1 << 20;
        let last = conn.on_ready(true, &ctx);
        let _ = refuse(&mut conn, last, &ctx);
    }
    check_responses(&conn.stream.out);
}

/// Everything written is zero or more complete responses, the last possibly cut short.
fn check_responses(mut out: &[u8]) {
    while !out.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut headers);
        let used = match resp.parse(out) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return,
            Err(e) => panic!(
                "malformed response ({e}): {:?}",
                String::from_utf8_lossy(out)
            ),
        };
        let code = resp.code.unwrap();
        assert!((100..600).contains(&code), "status {code}");
        let len = resp
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .map(|h| {
                std::str::from_utf8(h.value)
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
            });
        if code >= 200 {
            assert!(len.is_some(), "final response without Content-Length");
        }
        out = &out[(used + len.unwrap_or(0)).min(out.len())..];
    }
}
