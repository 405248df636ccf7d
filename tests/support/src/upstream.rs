//! A small HTTP/1.1 server for outbound tests: the service a plugin calls. It binds
//! 127.0.0.1:0, counts the connections it accepts and the requests it answers at once, keeps
//! connections alive, and answers every request the same way, as its [`Mode`] says.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The body every [`Mode::Hello`] answer carries.
pub const HELLO: &str = "hello from upstream\n";

/// How the upstream answers.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// `200` with [`HELLO`], at once.
    Hello,
    /// [`HELLO`] after this long.
    Slow(Duration),
    /// Reads the request and never answers.
    Silent,
    /// Announces this many bytes and writes them until the peer goes away.
    Huge(u64),
}

/// What the upstream saw; shared with its connection threads.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    open: AtomicUsize,
    requests: AtomicUsize,
    busy: AtomicUsize,
    most_busy: AtomicUsize,
    written: AtomicU64,
    stop: AtomicBool,
}

/// A running upstream; stops accepting when dropped.
pub struct Upstream {
    pub addr: SocketAddr,
    seen: Arc<Seen>,
}

impl Upstream {
    pub fn start(mode: Mode) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let shared = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                shared.accepted.fetch_add(1, Ordering::AcqRel);
                shared.open.fetch_add(1, Ordering::AcqRel);
                let seen = shared.clone();
                std::thread::spawn(move || {
                    serve(conn, mode, &seen);
                    seen.open.fetch_sub(1, Ordering::AcqRel);
                });
            }
        });
        Upstream { addr, seen }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://localhost:PORT`: a name that resolves to loopback.
    pub fn origin_by_name(&self) -> String {
        format!("http://localhost:{}", self.addr.port())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.seen.accepted.load(Ordering::Acquire)
    }

    /// The most requests it was answering at once.
    pub fn most_busy(&self) -> usize {
        self.seen.most_busy.load(Ordering::Acquire)
    }

    /// Request heads read so far.
    pub fn requests(&self) -> usize {
        self.seen.requests.load(Ordering::Acquire)
    }

    /// Body bytes written by [`Mode::Huge`] answers.
    pub fn written(&self) -> u64 {
        self.seen.written.load(Ordering::Acquire)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.seen.open.load(Ordering::Acquire)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.seen.stop.store(true, Ordering::Release);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Answers requests on one connection until the peer closes it.
fn serve(conn: TcpStream, mode: Mode, seen: &Seen) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        // The head: lines up to an empty one; the body, by Content-Length, is read and dropped.
        let mut length = 0usize;
        let mut first = true;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() {
                if first {
                    continue;
                }
                break;
            }
            first = false;
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        seen.requests.fetch_add(1, Ordering::AcqRel);
        match mode {
            Mode::Hello | Mode::Slow(_) => {
                let busy = seen.busy.fetch_add(1, Ordering::AcqRel) + 1;
                seen.most_busy.fetch_max(busy, Ordering::AcqRel);
                if let Mode::Slow(pause) = mode {
                    std::thread::sleep(pause);
                }
                // No longer busy before the answer leaves: the next request on this
                // connection can only come after it.
                seen.busy.fetch_sub(1, Ordering::AcqRel);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{HELLO}",
                    HELLO.len()
                );
                if conn.write_all(answer.as_bytes()).is_err() {
                    return;
                }
            }
            Mode::Silent => {
                // Never answers: waits for the peer to give up.
                let mut sink = [0u8; 1024];
                while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
                return;
            }
            Mode::Huge(total) => {
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
                if conn.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                let mut left = total;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if conn.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    seen.written.fetch_add(n as u64, Ordering::AcqRel);
                    left -= n as u64;
                }
            }
        }
    }
}
