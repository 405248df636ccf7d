//! The WebSocket connection (`net::ws` over `proto::frame`) on arbitrary client bytes, in
//! arbitrary splits, with sends and closes from the plugin interleaved: it never panics, emits
//! at most one close event and nothing after it, and everything it writes is a sequence of
//! well-formed, unmasked server frames. The script's first byte also picks whether
//! permessage-deflate was agreed (and on what terms), so compressed messages go both ways
//! (inflated as a worker inflates them, the outcome reported back).

use std::time::Instant;

use crate::limits::Limits;
use crate::message::{Outbound, WsEvent};
use crate::net::ws::WsConn;
use crate::proto::frame::Violation;
use crate::proto::ws_deflate::{Codec, InflateError};
use crate::proto::ws_extension::negotiate;

/// The target: never panics on any `data`.
pub fn run(data: &[u8]) {
    let (script, stream) = data.split_at(data.len().min(8));
    let limits = Limits {
        ws_max_message_bytes: 4096,
        ..Limits::default()
    };
    let now = Instant::now();
    let offers = [
        None,
        Some("permessage-deflate"),
        Some("permessage-deflate; client_no_context_takeover"),
        Some("permessage-deflate; server_max_window_bits=9; client_max_window_bits=8"),
    ];
    let offer = offers[usize::from(script.first().copied().unwrap_or(0) & 3)];
    let deflate = offer
        .and_then(|o| negotiate(&[("sec-websocket-extensions".to_owned(), o.as_bytes().to_vec())]));
    let mut codec = Codec::default();
    let mut inflater = Codec::default();
    let mut ws = WsConn::new(1, "fuzz".into(), &limits, now, deflate);
    ws.event_done(); // the open event
    let (mut rbuf, mut wbuf) = (Vec::new(), Vec::new());
    let mut fed = 0;
    let mut step = 0;
    let mut closes = 0;
    let mut after_close = false;
    while fed < stream.len() && step < 10_000 {
        let knob = script
            .get(step % script.len().max(1))
            .copied()
            .unwrap_or(32);
        step += 1;
        let end = (fed + usize::from(knob % 32) + 1).min(stream.len());
        rbuf.extend_from_slice(&stream[fed..end]);
        fed = end;
        ws.read_frames(&mut rbuf, &mut wbuf, now, usize::MAX);
        match knob >> 5 {
            1 => ws.send(
                &Outbound::text("x".repeat(usize::from(knob))),
                &mut wbuf,
                &mut codec,
            ),
            2 => ws.send(&Outbound::binary(vec![knob; 300]), &mut wbuf, &mut codec),
            3 if knob & 1 == 1 => ws.close(1000, "bye", &mut wbuf, now),
            _ => {}
        }
        while let Some(event) = ws.next_event() {
            assert!(!after_close, "an event after the close event");
            if matches!(event, WsEvent::Close { .. }) {
                closes += 1;
                after_close = true;
            }
            // A compressed message is inflated as a worker would, and the outcome reported.
            if let WsEvent::Compressed(mut c) = event {
                let result = inflater
                    .inflate(&c.payload, c.window.as_mut(), c.max)
                    .map(drop)
                    .map_err(|e| match e {
                        InflateError::TooBig => Violation::TooBig,
                        InflateError::Corrupt => Violation::BadCompression,
                    });
                ws.event_done_with(c.window, result);
            } else {
                ws.event_done();
            }
        }
        ws.settle(&mut wbuf, now);
        if ws.finished() {
            break;
        }
    }
    assert!(closes <= 1);
    check_frames(&wbuf, deflate.is_some());
}

/// Server frames: FIN/RSV sane, a known opcode, never masked, length as declared.
fn check_frames(mut out: &[u8], compression: bool) {
    while out.len() >= 2 {
        let (b0, b1) = (out[0], out[1]);
        let rsv1_ok = compression && matches!(b0 & 0x0f, 0x1 | 0x2);
        assert_eq!(b0 & if rsv1_ok { 0x30 } else { 0x70 }, 0, "RSV bits set");
        assert!(
            matches!(b0 & 0x0f, 0x0 | 0x1 | 0x2 | 0x8 | 0x9 | 0xA),
            "opcode {b0:#x}"
        );
        assert_eq!(b1 & 0x80, 0, "masked server frame");
        let (len, at) = match b1 & 0x7f {
            126 if out.len() >= 4 => (usize::from(u16::from_be_bytes([out[2], out[3]])), 4),
            127 if out.len() >= 10 => (
                u64::from_be_bytes(out[2..10].try_into().unwrap()) as usize,
                10,
            ),
            126 | 127 => return,
            n => (usize::from(n), 2),
        };
        if b0 & 0x08 != 0 {
            assert!(len <= 125, "control frame of {len} bytes");
        }
        out = &out[(at + len).min(out.len())..];
    }
}
