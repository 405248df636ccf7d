//! The HTTP connection on memory, with no pool: partial reads, pipelining, the upgrade
//! hand-off, and every clock.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use super::*;
use crate::limits::LINGER_IDLE_TIMEOUT;

/// A transport whose input arrives in the pieces a test pushes, and whose output is kept.
#[derive(Default)]
struct Mem {
    incoming: VecDeque<Vec<u8>>,
    eof: bool,
    written: Vec<u8>,
    /// The peer reads nothing: every write would block.
    stuck: bool,
}

impl Read for Mem {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.incoming.front_mut() {
            Some(piece) => {
                let n = buf.len().min(piece.len());
                buf[..n].copy_from_slice(&piece[..n]);
                piece.drain(..n);
                if piece.is_empty() {
                    self.incoming.pop_front();
                }
                Ok(n)
            }
            None if self.eof => Ok(0),
            None => Err(std::io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Mem {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stuck {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        self.written.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Transport for Mem {
    fn shutdown_write(&self) {}
}

/// Routes every path nowhere, with a body limit.
struct Nowhere(u64);

impl Router for Nowhere {
    fn route(&self, _path: &str) -> Route {
        Route {
            mount: None,
            max_body: Some(self.0),
            streams_body: false,
        }
    }
}

const STREAM_TIMES: crate::message::StreamTimes = crate::message::StreamTimes {
    idle: Duration::from_secs(60),
    total: Duration::from_secs(3600),
};

/// Routes every path to a plugin that reads its bodies as they arrive, with a body limit.
struct Arriving(u64);

impl Router for Arriving {
    fn route(&self, _path: &str) -> Route {
        Route {
            mount: None,
            max_body: Some(self.0),
            streams_body: true,
        }
    }
}

/// What an inflow holds now: its pieces, joined, and its end if it came.
fn drain_inflow(inflow: &Inflow) -> (Vec<u8>, Option<crate::message::InflowEnd>) {
    use crate::message::Inflowing;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut body = Vec::new();
    loop {
        match inflow.poll_next(&mut cx) {
            std::task::Poll::Ready(Inflowing::Piece(piece)) => body.extend_from_slice(&piece),
            std::task::Poll::Ready(Inflowing::End(end)) => return (body, Some(end)),
            std::task::Poll::Pending => return (body, None),
        }
    }
}

fn conn() -> Box<HttpConn<Mem>> {
    Box::new(HttpConn::new(
        ConnId {
            shard: 0,
            slot: 0,
            serial: 1,
        },
        Mem::default(),
        "127.0.0.1:9".parse().unwrap(),
        Instant::now(),
    ))
}

fn ctx<'a>(limits: &'a Limits, router: &'a dyn Router) -> HttpCtx<'a> {
    HttpCtx {
        limits,
        router,
        draining: false,
    }
}

/// Feeds `bytes` as one readiness event.
fn feed(c: &mut HttpConn<Mem>, bytes: &[u8], ctx: &HttpCtx<'_>) -> Step {
    c.stream.incoming.push_back(bytes.to_vec());
    c.on_ready(false, ctx)
}

fn written(c: &mut HttpConn<Mem>) -> String {
    String::from_utf8_lossy(&std::mem::take(&mut c.stream.written)).into_owned()
}

#[test]
fn a_head_in_pieces_is_dispatched_once_complete() {
    let (limits, router) = (Limits::default(), Nowhere(1 << 20));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    let raw = b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
    for byte in &raw[..raw.len() - 1] {
        let step = feed(&mut c, &[*byte], &ctx);
        assert!(step.dispatch.is_none());
        assert_eq!(step.liveness, Liveness::Open);
    }
    let step = feed(&mut c, &raw[raw.len() - 1..], &ctx);
    let d = step.dispatch.expect("the request, complete");
    assert_eq!((&*d.head.path, d.body.as_slice()), ("/a", &b"hello"[..]));
    assert_eq!(d.seq, 0);
}

#[test]
fn pipelined_requests_are_handed_out_one_at_a_time_in_order() {
    let (limits, router) = (Limits::default(), Nowhere(1 << 20));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    let two = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
    let first = feed(&mut c, two, &ctx).dispatch.unwrap();
    assert_eq!(&*first.head.path, "/1");
    // The second waits until the first is answered, even when more input arrives.
    assert!(c.on_ready(false, &ctx).dispatch.is_none());
    let second = c
        .on_reply(
            first.seq,
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1".to_vec(),
            false,
            &ctx,
        )
        .dispatch
        .unwrap();
    assert_eq!((&*second.head.path, second.seq), ("/2", 1));
    // A late reply for the first position is dropped.
    c.on_reply(first.seq, b"stale".to_vec(), false, &ctx);
    c.on_reply(
        second.seq,
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n2".to_vec(),
        false,
        &ctx,
    );
    let out = written(&mut c);
    assert!(
        out.find("\r\n\r\n1").unwrap() < out.find("\r\n\r\n2").unwrap(),
        "{out}"
    );
    assert!(!out.contains("stale"));
}

#[test]
fn a_refused_request_is_answered_by_the_host() {
    let (limits, router) = (Limits::default(), Nowhere(1 << 20));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    feed(&mut c, b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n", &ctx)
        .dispatch
        .unwrap();
    let busy = Immediate {
        status: 503,
        message: "busy".into(),
        retry_after: Some(1),
    };
    let step = c.refused(&busy, &ctx);
    assert_eq!(step.liveness, Liveness::Open);
    let out = written(&mut c);
    assert!(
        out.starts_with("HTTP/1.1 503 ") && out.contains("retry-after: 1"),
        "{out}"
    );
}

#[test]
fn the_upgrade_hands_on_the_bytes_behind_the_handshake() {
    let (limits, router) = (Limits::default(), Nowhere(1 << 20));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    let mut bytes = b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0x81, 0x82, 1, 2, 3, 4]); // the client's first frame, early
    let d = feed(&mut c, &bytes, &ctx).dispatch.unwrap();
    let c = match c.upgrade(d.seq + 1, b"HTTP/1.1 101 Switching Protocols\r\n\r\n") {
        Err(c) => c,
        Ok(_) => panic!("a stale upgrade was taken"),
    };
    let parts = c
        .upgrade(d.seq, b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
        .ok()
        .unwrap();
    assert_eq!(parts.input.buf, [0x81, 0x82, 1, 2, 3, 4]);
    assert!(parts.out.pending(), "the 101 goes first");
}

#[test]
fn every_clock_cuts_what_it_bounds() {
    let limits = Limits {
        idle_timeout: Duration::from_secs(3),
        head_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(7),
        send_timeout: Duration::from_secs(9),
        ..Limits::default()
    };
    let router = Nowhere(1 << 20);
    let ctx = ctx(&limits, &router);
    let start = Instant::now();
    let after = |s: u64| start + Duration::from_secs(s);
    // Idle: nothing sent at all.
    let mut c = conn();
    c.on_ready(false, &ctx);
    assert_eq!(c.on_timer(after(2), &ctx).liveness, Liveness::Open);
    assert_eq!(c.on_timer(after(4), &ctx).liveness, Liveness::Closed);
    // Head: a head that trickles gets 408.
    let mut c = conn();
    feed(&mut c, b"GET / HT", &ctx);
    assert_eq!(c.on_timer(after(4), &ctx).liveness, Liveness::Open);
    c.on_timer(after(6), &ctx);
    assert!(written(&mut c).starts_with("HTTP/1.1 408 "));
    // Request: a body that trickles gets 408 at the request deadline.
    let mut c = conn();
    feed(
        &mut c,
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\nab",
        &ctx,
    );
    assert_eq!(c.on_timer(after(6), &ctx).liveness, Liveness::Open);
    c.on_timer(after(8), &ctx);
    assert!(written(&mut c).starts_with("HTTP/1.1 408 "));
    // Send: output that never moves closes the connection.
    let mut c = conn();
    let d = feed(&mut c, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &ctx)
        .dispatch
        .unwrap();
    c.stream.stuck = true;
    let sent = Instant::now();
    c.on_reply(
        d.seq,
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec(),
        false,
        &ctx,
    );
    assert!(c.out.pending());
    assert_eq!(
        c.on_timer(sent + Duration::from_secs(8), &ctx).liveness,
        Liveness::Open
    );
    assert_eq!(
        c.on_timer(sent + Duration::from_secs(10), &ctx).liveness,
        Liveness::Closed
    );
    // Lingering: after a closing answer, at most LINGER_IDLE_TIMEOUT without input.
    let mut c = conn();
    feed(
        &mut c,
        b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999\r\n\r\n",
        &ctx,
    );
    assert!(written(&mut c).starts_with("HTTP/1.1 413 "));
    assert!(matches!(c.state, State::Lingering { .. }));
    assert_eq!(c.on_timer(Instant::now(), &ctx).liveness, Liveness::Open);
    let later = Instant::now() + LINGER_IDLE_TIMEOUT;
    assert_eq!(c.on_timer(later, &ctx).liveness, Liveness::Closed);
}

/// The body's deadline follows its progress (issue 33, finding 5), at the defaults: a steady
/// upload faster than the minimum rate is never cut however long it takes, a slower one is,
/// and so is one that stops. The timer is given the times, so no test waits for them.
#[test]
fn a_body_deadline_follows_progress() {
    let limits = Limits::default();
    let router = Nowhere(17 << 20);
    let ctx = ctx(&limits, &router);
    let start = Instant::now();
    let at = |s: u64| start + Duration::from_secs(s);
    let head = |len: usize| format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {len}\r\n\r\n");

    // 16 MiB at 64 KiB/s: 256 s, four times the request timeout.
    let mut c = conn();
    feed(&mut c, head(16 << 20).as_bytes(), &ctx);
    let piece = vec![b'x'; 64 * 1024];
    for second in 1..256 {
        feed(&mut c, &piece, &ctx);
        assert_eq!(
            c.on_timer(at(second), &ctx).liveness,
            Liveness::Open,
            "cut after {second} s"
        );
    }
    let done = feed(&mut c, &piece, &ctx);
    let answer = written(&mut c);
    assert!(
        done.dispatch.is_some() || answer.starts_with("HTTP/1.1 404 "),
        "the whole body arrived: {answer}"
    );
    assert!(!answer.contains(" 408 "), "{answer}");

    // 512 B/s, half the minimum rate: allowed 60 s + t/2, so cut at about 120 s.
    let mut c = conn();
    feed(&mut c, head(1 << 20).as_bytes(), &ctx);
    let piece = vec![b'x'; 512];
    for second in 1..=115 {
        feed(&mut c, &piece, &ctx);
        assert_eq!(c.on_timer(at(second), &ctx).liveness, Liveness::Open);
    }
    for second in 116..=125 {
        feed(&mut c, &piece, &ctx);
        c.on_timer(at(second), &ctx);
    }
    assert!(written(&mut c).starts_with("HTTP/1.1 408 "));

    // 100 KiB at once, then nothing: the rate allows minutes, the idle clock cuts at 30 s.
    let mut c = conn();
    feed(&mut c, head(1 << 20).as_bytes(), &ctx);
    feed(&mut c, &vec![b'x'; 100 * 1024], &ctx);
    assert_eq!(c.on_timer(at(1), &ctx).liveness, Liveness::Open);
    assert_eq!(c.on_timer(at(30), &ctx).liveness, Liveness::Open);
    c.on_timer(at(32), &ctx);
    assert!(written(&mut c).starts_with("HTTP/1.1 408 "));
}

#[test]
fn a_stream_releases_its_flow_as_the_client_reads_and_closes_it_when_the_client_goes() {
    let (limits, router) = (Limits::default(), Nowhere(1 << 20));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    // A response still unwritten from the request before: its bytes are not the stream's.
    let two = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
    let first = feed(&mut c, two, &ctx).dispatch.unwrap();
    c.stream.stuck = true;
    let earlier = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1".to_vec();
    let foreign = earlier.len();
    let second = c
        .on_reply(first.seq, earlier, false, &ctx)
        .dispatch
        .unwrap();
    let flow = Flow::new(64, STREAM_TIMES);
    let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    flow.add(head.len());
    c.on_stream(second.seq, head.clone(), flow.clone(), &ctx);
    for piece in [&b"3\r\nabc\r\n"[..], b"2\r\nde\r\n"] {
        flow.add(piece.len());
        c.on_piece(second.seq, piece.to_vec(), &ctx);
    }
    let held = head.len() + 15;
    assert_eq!(flow.held(), held);
    // A stale piece (another position) never reaches the wire.
    c.on_piece(first.seq, b"stale".to_vec(), &ctx);
    // The client reads: everything written past the earlier response is released.
    c.stream.stuck = false;
    c.on_ready(false, &ctx);
    assert_eq!(flow.held(), 0);
    let out = written(&mut c);
    assert_eq!(out.len(), foreign + held, "{out}");
    assert!(!out.contains("stale"), "{out}");
    // The end goes out, and the next request may come.
    c.on_end(second.seq, b"0\r\n\r\n".to_vec(), false, &ctx);
    assert!(written(&mut c).ends_with("0\r\n\r\n"));
    let third = feed(&mut c, b"GET /3 HTTP/1.1\r\nHost: h\r\n\r\n", &ctx)
        .dispatch
        .unwrap();
    // A client that leaves mid-stream closes the flow: the writer's next write fails.
    let flow = Flow::new(64, STREAM_TIMES);
    c.on_stream(
        third.seq,
        b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
        flow.clone(),
        &ctx,
    );
    c.stream.eof = true;
    let step = c.on_ready(true, &ctx);
    assert_eq!(step.liveness, Liveness::Closed);
    c.abandon();
    assert!(flow.is_closed());
}

#[test]
fn a_stream_is_ended_at_its_idle_and_total_limits() {
    let (limits, router) = (Limits::default(), Nowhere(1 << 20));
    let ctx = ctx(&limits, &router);
    let times = crate::message::StreamTimes {
        idle: Duration::from_secs(10),
        total: Duration::from_secs(25),
    };
    let start = |c: &mut HttpConn<Mem>| {
        let d = feed(c, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &ctx)
            .dispatch
            .unwrap();
        let flow = Flow::new(64, times);
        c.on_stream(
            d.seq,
            b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
            flow.clone(),
            &ctx,
        );
        (d.seq, flow, Instant::now())
    };
    // Pieces keep it alive past the idle limit; nothing for the idle limit ends it.
    let mut c = conn();
    let (seq, flow, t0) = start(&mut c);
    for s in [5, 10, 15] {
        c.on_piece(seq, b"1\r\na\r\n".to_vec(), &ctx);
        let step = c.on_timer(t0 + Duration::from_secs(s), &ctx);
        assert_eq!(step.liveness, Liveness::Open, "at {s} s");
    }
    assert_eq!(
        c.on_timer(t0 + Duration::from_secs(24), &ctx).liveness,
        Liveness::Open
    );
    assert_eq!(
        c.on_timer(t0 + Duration::from_secs(25), &ctx).liveness,
        Liveness::Closed
    );
    c.abandon();
    assert!(flow.is_closed());
    // However busy, the total limit ends it.
    let mut c = conn();
    let (seq, _, t0) = start(&mut c);
    c.on_timer(t0 + Duration::from_secs(1), &ctx);
    assert_eq!(
        c.on_timer(t0 + Duration::from_secs(11), &ctx).liveness,
        Liveness::Closed
    );
    let _ = seq;
}

#[test]
fn a_body_read_as_it_arrives_goes_out_with_its_head_and_follows_through_its_inflow() {
    let (limits, router) = (Limits::default(), Arriving(1 << 20));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    let head = b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel";
    let d = feed(&mut c, head, &ctx)
        .dispatch
        .expect("handed out at its head");
    assert!(d.body.is_empty());
    let inflow = d.inflow.expect("the body follows");
    assert_eq!(drain_inflow(&inflow), (b"hel".to_vec(), None));
    // The rest, trailers, and a pipelined request that must wait for the answer.
    let rest = b"lo\r\n0\r\nx-t: 1\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n";
    assert!(feed(&mut c, rest, &ctx).dispatch.is_none());
    assert_eq!(
        drain_inflow(&inflow),
        (
            b"lo".to_vec(),
            Some(crate::message::InflowEnd::Complete(vec![(
                "x-t".to_owned(),
                b"1".to_vec()
            )]))
        )
    );
    let second = c
        .on_reply(
            d.seq,
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1".to_vec(),
            false,
            &ctx,
        )
        .dispatch
        .expect("the next request");
    assert_eq!(&*second.head.path, "/b");
    assert!(second.inflow.is_none());
}

#[test]
fn an_answer_before_the_body_ends_waits_for_it_before_the_next_request() {
    let (limits, router) = (Limits::default(), Arriving(1 << 20));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    let head = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123";
    let d = feed(&mut c, head, &ctx).dispatch.unwrap();
    let step = c.on_reply(
        d.seq,
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
        false,
        &ctx,
    );
    assert!(step.dispatch.is_none());
    assert!(written(&mut c).ends_with("ok"));
    // The rest of the body is drained, then the next request is read.
    let next = feed(&mut c, b"456789GET /b HTTP/1.1\r\nHost: h\r\n\r\n", &ctx)
        .dispatch
        .expect("the next request, after the body");
    assert_eq!(&*next.head.path, "/b");
}

#[test]
fn a_body_past_the_limit_ends_its_inflow_and_the_connection_after_the_answer() {
    let (limits, router) = (Limits::default(), Arriving(4));
    let ctx = ctx(&limits, &router);
    let mut c = conn();
    let raw = b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n";
    let d = feed(&mut c, raw, &ctx).dispatch.unwrap();
    assert_eq!(
        drain_inflow(d.inflow.as_ref().unwrap()),
        (
            b"abc".to_vec(),
            Some(crate::message::InflowEnd::TooLarge(4))
        )
    );
    let step = c.on_reply(
        d.seq,
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
        false,
        &ctx,
    );
    // Answered, and then closed: what followed the body is never read as a request.
    assert!(step.dispatch.is_none());
    assert!(written(&mut c).ends_with("ok"));
    assert!(matches!(c.state, State::Lingering { .. } | State::Closing));
}
