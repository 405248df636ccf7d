//! WebSocket compression (permessage-deflate, RFC 7692) against the real binary, from raw
//! sockets with flate2 on the client side: the negotiation matrix, compressed and fragmented
//! messages both ways, context takeover across messages, every split of a compressed message,
//! the inflate bomb, a publish compressed once for every subscriber, and the switches that
//! turn it off.

use std::io::{BufRead, BufReader, Read, Write};

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

use crate::harness::{Options, TestServer, plugins};
use crate::metrics::{admin_addr, scrape, scrape_when, value};
use crate::ws::{
    BINARY, CLOSE, CONT, FIN, TEXT, close_code, frame, raw_offering as open, read_frame,
};

const RSV1: u8 = 0x40;
const TAIL: [u8; 4] = [0, 0, 0xff, 0xff];

fn server(extra: &[&str]) -> TestServer {
    let mut o = Options::default()
        .plugin(plugins::WSECHO)
        .plugin(plugins::BENCH)
        .flag("--workers", 4)
        .arg("--admin")
        .arg("127.0.0.1:0");
    for a in extra {
        o = o.arg(a);
    }
    o.start()
}

/// A client compressor (raw deflate) and what it makes of one message, tail removed.
fn compress(z: &mut Compress, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1024);
    z.compress_vec(data, &mut out, FlushCompress::Sync).unwrap();
    assert!(out.ends_with(&TAIL));
    out.truncate(out.len() - 4);
    out
}

/// Inflates a server message with a fresh context (the server never takes its context over),
/// with an inflater of exactly `bits` window: a reference past the window would fail.
fn inflate(data: &[u8], bits: u8) -> Vec<u8> {
    let mut z = Decompress::new_with_window_bits(false, bits);
    let mut input = data.to_vec();
    input.extend_from_slice(&TAIL);
    let mut out = Vec::with_capacity(16 << 20);
    z.decompress_vec(&input, &mut out, FlushDecompress::Sync)
        .unwrap();
    out
}

/// Reads the next data message: (opcode, compressed, payload as inflated).
fn read_message(r: &mut impl Read, bits: u8) -> (u8, bool, Vec<u8>) {
    loop {
        let (first, payload) = read_frame(r);
        let op = first & 0x0f;
        if op >= 0x8 {
            assert_ne!(op, CLOSE, "closed: {payload:?}");
            assert_eq!(first & RSV1, 0, "control frames are never compressed");
            continue;
        }
        assert_eq!(first & FIN, FIN, "the server does not fragment");
        let compressed = first & RSV1 != 0;
        let payload = if compressed {
            inflate(&payload, bits)
        } else {
            payload
        };
        return (op, compressed, payload);
    }
}

fn json(n: usize) -> Vec<u8> {
    let mut s = String::from("[");
    let mut i = 0;
    while s.len() < n {
        s.push_str(&format!(
            "{{\"id\":{i},\"user\":\"member-{i}\",\"text\":\"hello, room\",\"seen\":false}},"
        ));
        i += 1;
    }
    s.truncate(n);
    s.into_bytes()
}

// See: issue 16, "Negotiation per RFC 7692".
#[test]
fn the_negotiation_matrix() {
    let s = server(&[]);
    let cases: &[(Option<&str>, Option<&str>)] = &[
        (None, None),
        (
            Some("permessage-deflate"),
            Some("permessage-deflate; server_no_context_takeover"),
        ),
        // What Chromium and Firefox send.
        (
            Some("permessage-deflate; client_max_window_bits"),
            Some("permessage-deflate; server_no_context_takeover"),
        ),
        (
            Some("permessage-deflate; client_max_window_bits=10"),
            Some("permessage-deflate; server_no_context_takeover; client_max_window_bits=10"),
        ),
        (
            Some("permessage-deflate; server_max_window_bits=9; client_no_context_takeover"),
            Some(
                "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9",
            ),
        ),
        (
            Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=15"),
            Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=15"),
        ),
        // Declined offers give way to the next; an unknown extension is skipped.
        (
            Some(
                "x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=16, permessage-deflate; mystery, permessage-deflate; client_no_context_takeover",
            ),
            Some("permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
        ),
        // Nothing acceptable: a plain connection, not a failed handshake.
        (Some("permessage-deflate; server_max_window_bits"), None),
        (
            Some("permessage-deflate; client_no_context_takeover; client_no_context_takeover"),
            None,
        ),
        (
            Some("permessage-deflate; server_max_window_bits=\"1\\"),
            None,
        ),
        (Some(";;,,=\"\""), None),
    ];
    for (offer, answer) in cases {
        let (_stream, _reader, got) = open(&s, "/wsecho", *offer);
        assert_eq!(got.as_deref(), *answer, "offer {offer:?}");
    }
    // Two header lines are one list.
    let mut stream = s.connect();
    write!(
        stream,
        "GET /wsecho HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Extensions: permessage-deflate; bad\r\nSec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=12\r\n\r\n"
    )
    .unwrap();
    let mut head = String::new();
    let mut reader = BufReader::new(stream);
    while !head.ends_with("\r\n\r\n") {
        reader.read_line(&mut head).unwrap();
    }
    assert!(
        head.contains(
            "sec-websocket-extensions: permessage-deflate; server_no_context_takeover; server_max_window_bits=12\r\n"
        ),
        "{head}"
    );
}

// See: issue 16, "Frames" and "Plugins see nothing of it".
#[test]
fn compressed_messages_both_ways_with_context_takeover_and_fragments() {
    let s = server(&[]);
    let (mut stream, mut reader, ext) = open(
        &s,
        "/wsecho",
        Some("permessage-deflate; client_max_window_bits"),
    );
    assert_eq!(
        ext.as_deref(),
        Some("permessage-deflate; server_no_context_takeover")
    );
    // The client keeps its context: later messages refer back into earlier ones.
    let mut z = Compress::new(Compression::default(), false);
    let message = json(2048);
    for round in 0..5 {
        let c = compress(&mut z, &message);
        if round > 0 {
            assert!(c.len() < 64, "round {round}: {} bytes", c.len());
        }
        stream
            .write_all(&frame(FIN | RSV1 | TEXT, &c, true))
            .unwrap();
        let (op, compressed, echoed) = read_message(&mut reader, 15);
        assert_eq!(op, TEXT);
        assert!(compressed, "a 2 KiB JSON echo goes out compressed");
        assert_eq!(echoed, message, "round {round}");
    }
    // Fragmented: RSV1 on the first frame only, a Ping between fragments.
    let big = json(50_000);
    let c = compress(&mut z, &big);
    let (a, rest) = c.split_at(c.len() / 3);
    let (b, d) = rest.split_at(rest.len() / 2);
    stream.write_all(&frame(RSV1 | BINARY, a, true)).unwrap();
    stream
        .write_all(&frame(FIN | 0x9, b"between", true))
        .unwrap();
    stream.write_all(&frame(CONT, b, true)).unwrap();
    stream.write_all(&frame(FIN | CONT, d, true)).unwrap();
    let (first, pong) = read_frame(&mut reader);
    assert_eq!((first, pong.as_slice()), (0x8A, &b"between"[..]));
    let (op, compressed, echoed) = read_message(&mut reader, 15);
    assert_eq!((op, compressed), (BINARY, true));
    assert_eq!(echoed, big);
    // Short messages, and uncompressed ones (RSV1 clear), still work; short answers go plain.
    stream
        .write_all(&frame(FIN | TEXT, b"plain", true))
        .unwrap();
    assert_eq!(
        read_message(&mut reader, 15),
        (TEXT, false, b"plain".to_vec())
    );
    let c = compress(&mut z, b"tiny");
    stream
        .write_all(&frame(FIN | RSV1 | TEXT, &c, true))
        .unwrap();
    assert_eq!(
        read_message(&mut reader, 15),
        (TEXT, false, b"tiny".to_vec())
    );
    // An empty compressed message: one 0x00 byte (RFC 7692 §7.2.3.6).
    stream
        .write_all(&frame(FIN | RSV1 | BINARY, &[0x00], true))
        .unwrap();
    assert_eq!(read_message(&mut reader, 15), (BINARY, false, Vec::new()));

    let admin = admin_addr(&s);
    scrape_when(admin, "ankh_ws_messages_inflated_total", 8.0);
    scrape_when(admin, "ankh_ws_compressed_frames_total", 6.0);
}

// See: issue 16, server_max_window_bits and client_no_context_takeover honoured.
#[test]
fn a_small_server_window_is_honoured_and_no_takeover_clients_share_nothing() {
    let s = server(&[]);
    for bits in [9u8, 12, 15] {
        let offer = format!(
            "permessage-deflate; server_max_window_bits={bits}; client_no_context_takeover"
        );
        let (mut stream, mut reader, ext) = open(&s, "/wsecho", Some(&offer));
        assert!(
            ext.as_deref()
                .is_some_and(|e| e.contains(&format!("server_max_window_bits={bits}"))),
            "{ext:?}"
        );
        // A message with repeats farther apart than 512 bytes: a 9-bit window must not reach.
        let message = json(40_000);
        for _ in 0..3 {
            // No takeover: a fresh client context per message.
            let mut z = Compress::new(Compression::default(), false);
            let c = compress(&mut z, &message);
            stream
                .write_all(&frame(FIN | RSV1 | TEXT, &c, true))
                .unwrap();
            // `inflate` uses exactly `bits`: a reference past the window would fail there.
            let (_, compressed, echoed) = read_message(&mut reader, bits);
            assert!(compressed);
            assert_eq!(echoed, message, "bits {bits}");
        }
    }
    // 8 bits cannot be produced by zlib: accepted, and answered uncompressed.
    let (mut stream, mut reader, ext) = open(
        &s,
        "/wsecho",
        Some("permessage-deflate; server_max_window_bits=8"),
    );
    assert!(ext.unwrap().contains("server_max_window_bits=8"));
    let message = json(4000);
    stream
        .write_all(&frame(FIN | TEXT, &message, true))
        .unwrap();
    assert_eq!(read_message(&mut reader, 8), (TEXT, false, message));
}

// See: issue 16, "a compressed message split across reads at every byte boundary".
#[test]
fn a_compressed_message_split_at_every_byte_arrives_whole() {
    let s = server(&[]);
    let admin = admin_addr(&s);
    let bytes_in = || value(&scrape(admin), "ankh_bytes_in_total", &[]) as usize;
    // No context takeover: every message is compressed alike, so the same bytes can be cut
    // at every boundary.
    let (mut stream, mut reader, ext) = open(
        &s,
        "/wsecho",
        Some("permessage-deflate; client_no_context_takeover"),
    );
    assert!(ext.unwrap().contains("client_no_context_takeover"));
    stream.set_nodelay(true).unwrap();
    let message = json(300);
    let c = compress(&mut Compress::new(Compression::default(), false), &message);
    // Two fragments, so the cut also falls in the second header.
    let mut wire = frame(RSV1 | TEXT, &c[..c.len() / 2], true);
    wire.extend(frame(FIN | CONT, &c[c.len() / 2..], true));
    for split in 1..wire.len() {
        // The first part, then wait until the server has read exactly it (the bytes-in
        // counter moves once a read is done), so the second part is a read of its own.
        let before = bytes_in();
        stream.write_all(&wire[..split]).unwrap();
        let started = std::time::Instant::now();
        while bytes_in() < before + split {
            assert!(
                started.elapsed() < crate::harness::PATIENCE,
                "split {split} unread"
            );
        }
        stream.write_all(&wire[split..]).unwrap();
        let (_, compressed, echoed) = read_message(&mut reader, 15);
        assert!(compressed);
        assert_eq!(echoed, message, "split at {split}");
    }
}

// See: issue 16, "a decompression bomb is closed with 1009 after at most the limit's worth of
// output".
#[test]
fn an_inflate_bomb_is_closed_with_1009_and_costs_at_most_the_limit() {
    let s = server(&["--ws-max-message-bytes", "1048576"]);
    let rss_before = s.rss_kib();
    // 64 MiB of zeros: about 64 KiB on the wire, under the compressed cap.
    let mut z = Compress::new(Compression::best(), false);
    let zeros = vec![0u8; 64 << 20];
    let bomb = compress(&mut z, &zeros);
    drop(zeros);
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    for _ in 0..3 {
        let (mut stream, mut reader, _) = open(&s, "/wsecho", Some("permessage-deflate"));
        stream
            .write_all(&frame(FIN | RSV1 | BINARY, &bomb, true))
            .unwrap();
        assert_eq!(close_code(&mut reader), 1009);
    }
    // Three bombs later, the server holds no more than a few limits' worth.
    let grown = s.rss_kib().saturating_sub(rss_before);
    assert!(grown < 32 * 1024, "RSS grew {grown} KiB");
    // Just under the limit inflates and echoes.
    let (mut stream, mut reader, _) = open(&s, "/wsecho", Some("permessage-deflate"));
    let fits = vec![b'x'; 1 << 20];
    let c = compress(&mut z, &fits);
    stream
        .write_all(&frame(FIN | RSV1 | BINARY, &c, true))
        .unwrap();
    assert_eq!(read_message(&mut reader, 15).2, fits);
    // Invalid deflate data is 1007; compressed text that inflates to bad UTF-8 is 1007; RSV1
    // without the extension is 1002. The server goes on serving.
    let (mut stream, mut reader, _) = open(&s, "/wsecho", Some("permessage-deflate"));
    stream
        .write_all(&frame(FIN | RSV1 | TEXT, &[0xff, 0xff, 0xff], true))
        .unwrap();
    assert_eq!(close_code(&mut reader), 1007);
    let (mut stream, mut reader, _) = open(&s, "/wsecho", Some("permessage-deflate"));
    let mut z = Compress::new(Compression::default(), false);
    let bad = compress(&mut z, &[b'a', 0xff, b'b']);
    stream
        .write_all(&frame(FIN | RSV1 | TEXT, &bad, true))
        .unwrap();
    assert_eq!(close_code(&mut reader), 1007);
    let (mut stream, mut reader, ext) = open(&s, "/wsecho", None);
    assert_eq!(ext, None);
    stream
        .write_all(&frame(FIN | RSV1 | TEXT, &bad, true))
        .unwrap();
    assert_eq!(close_code(&mut reader), 1002);
    assert_eq!(s.get("/wsecho/").0 / 100, 4, "still serving");
}

// See: issue 16, "Publish: compressed once".
#[test]
fn a_publish_is_compressed_once_for_every_subscriber() {
    let s = server(&[]);
    let admin = admin_addr(&s);
    const SUBSCRIBERS: usize = 40;
    let mut clients: Vec<_> = (0..SUBSCRIBERS)
        .map(|i| {
            // Half of them without compression: they get the plain frame.
            let offer = (i % 2 == 0).then_some("permessage-deflate");
            open(&s, "/bench/ws", offer)
        })
        .collect();
    // Every connection is subscribed on open: an echo on each shows its open event ran.
    for (stream, reader, _) in &mut clients {
        stream
            .write_all(&frame(FIN | TEXT, b"ready", true))
            .unwrap();
        assert_eq!(read_message(reader, 15).2, b"ready");
    }
    let message = String::from_utf8(json(1500)).unwrap();
    let before = scrape(admin);
    let deflated = value(&before, "ankh_ws_messages_deflated_total", &[]);
    let frames = value(&before, "ankh_ws_compressed_frames_total", &[]);
    let publisher = &mut clients[0].0;
    publisher
        .write_all(&frame(
            FIN | TEXT,
            format!("publish:{message}").as_bytes(),
            true,
        ))
        .unwrap();
    for (i, (_, reader, ext)) in clients.iter_mut().enumerate() {
        let (op, compressed, payload) = read_message(reader, 15);
        assert_eq!(op, TEXT);
        assert_eq!(compressed, ext.is_some(), "client {i}");
        assert_eq!(payload, message.as_bytes(), "client {i}");
    }
    let after = scrape_when(
        admin,
        "ankh_ws_compressed_frames_total",
        frames + (SUBSCRIBERS / 2) as f64,
    );
    assert_eq!(
        value(&after, "ankh_ws_messages_deflated_total", &[]) - deflated,
        1.0,
        "compressed once"
    );
    assert_eq!(
        value(&after, "ankh_ws_compressed_frames_total", &[]) - frames,
        (SUBSCRIBERS / 2) as f64
    );
}

// See: issue 16, "Per-plugin and server switch".
#[test]
fn compression_can_be_turned_off_for_the_server_or_one_plugin() {
    let off = server(&["--no-ws-compression"]);
    let (_s, _r, ext) = open(&off, "/wsecho", Some("permessage-deflate"));
    assert_eq!(ext, None);
    let (status, config) = {
        let out = std::process::Command::new(crate::harness::ankh_bin())
            .args(["serve", "--no-ws-compression", "--print-config"])
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert!(status.success());
    assert!(config.contains("ws_compression = false"), "{config}");

    let s = Options::default()
        .plugin(plugins::WSECHO)
        .plugin(plugins::BENCH)
        .file("wsecho.toml", b"ws_compression = false\n")
        .start();
    let (_s, _r, ext) = open(&s, "/wsecho", Some("permessage-deflate"));
    assert_eq!(ext, None, "the policy turns it off for wsecho");
    let (_s, _r, ext) = open(&s, "/bench/ws", Some("permessage-deflate"));
    assert!(ext.is_some(), "and only for wsecho");
    // A bad value is refused with the file and key, and the plugin with it.
    let s = Options::default()
        .plugin(plugins::WSECHO)
        .file("wsecho.toml", b"ws_compression = \"maybe\"\n")
        .start();
    let log = s.wait_for_log("wsecho.toml");
    assert!(log.contains("ws_compression"), "{log}");
}
