//! WebSocket clients for the tests: tungstenite as a real client, raw frames for every
//! malformed case, and the probe plugin's event log.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tungstenite::{Message, WebSocket};

use crate::harness::{Options, PATIENCE, TestServer, plugins};

pub fn server() -> TestServer {
    Options::default()
        .plugin(plugins::WSPROBE)
        .flag("--workers", 4)
        .start()
}

pub type Client = WebSocket<TcpStream>;

/// A tungstenite client connected to `path`.
pub fn client(s: &TestServer, path: &str) -> Client {
    let stream = s.connect();
    let (ws, response) = tungstenite::client(format!("ws://{}{}", s.addr, path), stream)
        .unwrap_or_else(|e| panic!("handshake failed: {e}\n{}", s.log()));
    assert_eq!(response.status(), 101);
    ws
}

pub fn text(ws: &mut Client) -> String {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return t.as_str().to_owned(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected text, got {other:?}"),
        }
    }
}

pub fn send(ws: &mut Client, t: &str) {
    ws.send(Message::text(t)).unwrap();
}

/// Opens a probe connection and learns its id.
pub fn probe_client(s: &TestServer) -> (Client, u64) {
    let mut ws = client(s, "/wsprobe/?id=1");
    let id = text(&mut ws);
    let id: u64 = id.strip_prefix("id:").unwrap().parse().unwrap();
    (ws, id)
}

/// The event log the probe kept for connection `id`, waiting until it ends with `suffix`.
pub fn event_log(s: &TestServer, id: u64, suffix: &str) -> String {
    let started = Instant::now();
    loop {
        let (_, log) = s.get(&format!("/wsprobe/log?conn={id}"));
        if log.ends_with(suffix) {
            return log;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "log {log:?} never ended with {suffix:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---- raw frames ----

/// A client frame: `first` byte (FIN, RSV, opcode), masked unless `unmasked`.
pub fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut out = vec![first];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n < 65536 => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CONT: u8 = 0x0;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const FIN: u8 = 0x80;

/// A raw connection past the handshake.
pub fn raw(s: &TestServer, path: &str) -> (TcpStream, BufReader<TcpStream>) {
    let (stream, reader, _) = raw_offering(s, path, None);
    (stream, reader)
}

/// A raw connection past a handshake that offered `extensions` (`Sec-WebSocket-Extensions`),
/// if any; with the extensions the server answered.
pub fn raw_offering(
    s: &TestServer,
    path: &str,
    extensions: Option<&str>,
) -> (TcpStream, BufReader<TcpStream>, Option<String>) {
    let mut stream = s.connect();
    let offer = extensions.map_or(String::new(), |o| {
        format!("Sec-WebSocket-Extensions: {o}\r\n")
    });
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{offer}\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 101 "), "{line}\n{}", s.log());
    let mut answered = None;
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("sec-websocket-extensions")
        {
            assert!(answered.is_none(), "one extensions header");
            answered = Some(value.trim().to_owned());
        }
    }
    (stream, reader, answered)
}

/// Reads one server frame: (first byte, payload).
pub fn read_frame(r: &mut impl Read) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    r.read_exact(&mut head).unwrap();
    assert_eq!(head[1] & 0x80, 0, "server frames are never masked");
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).unwrap();
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            r.read_exact(&mut b).unwrap();
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload).unwrap();
    (head[0], payload)
}

/// Reads frames until a Close; returns its code.
pub fn close_code(r: &mut impl Read) -> u16 {
    loop {
        let (first, payload) = read_frame(r);
        if first & 0x0f == CLOSE {
            return u16::from_be_bytes([payload[0], payload[1]]);
        }
    }
}
