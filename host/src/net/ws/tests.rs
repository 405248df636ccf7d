//! The WebSocket protocol state on buffers: the closing handshake from every side.

use super::*;
use crate::message::WsMessage;

fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let key = [1, 2, 3, 4];
    let mut out = vec![first, 0x80 | payload.len() as u8];
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

fn conn() -> WsConn {
    let limits = Limits {
        ws_max_message_bytes: 100,
        ..Limits::default()
    };
    let mut ws = WsConn::new(1, "p".into(), &limits, Instant::now(), None);
    ws.event_done(); // the open event
    ws
}

fn drain_events(ws: &mut WsConn) -> Vec<WsEvent> {
    let mut out = Vec::new();
    while let Some(e) = ws.next_event() {
        out.push(e);
        ws.event_done();
    }
    out
}

#[test]
fn a_peers_close_is_echoed_after_the_answers_to_what_came_before() {
    let mut ws = conn();
    let mut rbuf = masked(0x81, b"hi");
    rbuf.extend(masked(0x88, &[0x03, 0xe8]));
    let mut wbuf = Vec::new();
    ws.read_frames(&mut rbuf, &mut wbuf, Instant::now(), usize::MAX);
    assert!(wbuf.is_empty(), "the echo waits for the plugin");
    let first = ws.next_event().unwrap();
    assert_eq!(first, WsEvent::Message(WsMessage::Text("hi".into())));
    // The plugin answers, then finishes.
    ws.send(&Outbound::text("answer"), &mut wbuf, &mut Codec::default());
    ws.event_done();
    ws.settle(&mut wbuf, Instant::now());
    assert!(!ws.finished(), "the close event is not reached yet");
    let close = ws.next_event().unwrap();
    assert!(matches!(
        close,
        WsEvent::Close {
            code: 1000,
            clean: true,
            ..
        }
    ));
    ws.settle(&mut wbuf, Instant::now());
    assert_eq!(&wbuf[..2], &[0x81, 6]);
    assert_eq!(&wbuf[8..], &[0x88, 2, 0x03, 0xe8]);
    assert!(ws.finished());
    ws.event_done();
    assert!(ws.done());
}

#[test]
fn a_violation_waits_for_the_peers_close_before_tcp_closes() {
    let mut ws = conn();
    let mut rbuf = masked(0x82, &[0; 101][..]); // too big: len 101 > 100
    rbuf[1] = 0x80 | 101;
    let mut wbuf = Vec::new();
    let now = Instant::now();
    ws.read_frames(&mut rbuf, &mut wbuf, now, usize::MAX);
    assert!(matches!(
        drain_events(&mut ws)[..],
        [WsEvent::Close {
            code: 1009,
            clean: false,
            ..
        }]
    ));
    ws.settle(&mut wbuf, now);
    assert_eq!(&wbuf[..4], &[0x88, 17, 0x03, 0xf1]);
    assert!(!ws.finished(), "TCP stays open for the peer's Close");
    // Then the peer's Close completes the handshake.
    let mut rbuf = masked(0x88, &[0x03, 0xf1]);
    ws.read_frames(&mut rbuf, &mut wbuf, now, usize::MAX);
    assert!(ws.finished());
    assert!(ws.done());
}

#[test]
fn a_malformed_close_is_answered_and_ends_the_handshake() {
    // Autobahn 7.3.2: a Close with a one-byte payload. The peer has closed its side;
    // after our 1002, TCP closes without waiting for another Close.
    let mut ws = conn();
    let mut rbuf = masked(0x88, &[0x03]);
    let mut wbuf = Vec::new();
    let now = Instant::now();
    ws.read_frames(&mut rbuf, &mut wbuf, now, usize::MAX);
    drain_events(&mut ws);
    ws.settle(&mut wbuf, now);
    assert_eq!(&wbuf[2..4], &1002u16.to_be_bytes());
    assert!(ws.finished());
}

#[test]
fn a_close_without_an_answer_ends_at_the_timeout() {
    let mut ws = conn();
    let mut wbuf = Vec::new();
    let now = Instant::now();
    ws.close(1000, "bye", &mut wbuf, now);
    ws.send(&Outbound::text("late"), &mut wbuf, &mut Codec::default());
    assert_eq!(wbuf[0], 0x88, "nothing after our Close");
    assert_eq!(wbuf.len(), 2 + 2 + 3);
    assert!(!ws.on_timer(now + WS_CLOSE_TIMEOUT / 2, &mut wbuf));
    assert!(ws.on_timer(now + WS_CLOSE_TIMEOUT, &mut wbuf));
    assert!(ws.finished());
    assert!(matches!(
        drain_events(&mut ws)[..],
        [WsEvent::Close {
            code: 1006,
            clean: false,
            ..
        }]
    ));
}

#[test]
fn a_compressed_message_carries_the_window_and_a_bad_one_fails_the_connection() {
    let limits = Limits {
        ws_max_message_bytes: 100,
        ..Limits::default()
    };
    let offer = [(
        "sec-websocket-extensions".to_owned(),
        b"permessage-deflate".to_vec(),
    )];
    let deflate = crate::proto::ws_extension::negotiate(&offer);
    let mut ws = WsConn::new(1, "p".into(), &limits, Instant::now(), deflate);
    ws.event_done(); // the open event
    // A compressed message (inflating it is the worker's), then a plain one.
    let mut rbuf = masked(0xC1, &[1, 2, 3]);
    rbuf.extend(masked(0x81, b"after"));
    let mut wbuf = Vec::new();
    ws.read_frames(&mut rbuf, &mut wbuf, Instant::now(), usize::MAX);
    let Some(WsEvent::Compressed(compressed)) = ws.next_event() else {
        panic!("a compressed message first");
    };
    assert_eq!(compressed.payload, vec![1, 2, 3]);
    assert_eq!(compressed.max, 100);
    // The client keeps its context: the window travels with the message.
    let window = compressed.window.expect("the window goes with it");
    // The worker found it broken: what came after is not delivered, the close event is.
    ws.event_done_with(
        Some(window),
        Err(crate::proto::frame::Violation::BadCompression),
    );
    let close = ws.next_event().unwrap();
    assert!(
        matches!(close, WsEvent::Close { code: 1007, .. }),
        "{close:?}"
    );
    ws.event_done();
    ws.settle(&mut wbuf, Instant::now());
    assert_eq!(&wbuf[2..4], &1007u16.to_be_bytes());
    assert_eq!(wbuf[0], 0x88);
}
