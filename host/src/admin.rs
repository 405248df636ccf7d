//! The admin listener (`--admin ADDR`, meant for loopback): `/healthz`, `/readyz` and
//! `/metrics`. A plain blocking thread, one request per connection: admin traffic is a scrape
//! every few seconds, and it must keep answering when the main loop is saturated.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::net::event_loop::StopHandle;
use crate::runtime::registry::Registry;

/// Longest admin request head, in bytes.
const MAX_ADMIN_REQUEST_BYTES: usize = 4096;

/// How long an admin client may take to send its request.
const ADMIN_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the admin endpoints look at.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub hub: Arc<Hub>,
    pub registry: Arc<Registry>,
    pub stop: StopHandle,
    pub queue_depth: Box<dyn Fn() -> usize + Send + Sync>,
}

/// Binds `addr` and serves the admin endpoints on a thread of their own.
pub fn start(addr: SocketAddr, state: AdminState) -> anyhow::Result<SocketAddr> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} (--admin)"))?;
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("ankh-admin".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Err(e) = serve(stream, &state) {
                    tracing::debug!("admin request failed: {e}");
                }
            }
        })?;
    Ok(local)
}

fn serve(mut stream: TcpStream, state: &AdminState) -> std::io::Result<()> {
    stream.set_read_timeout(Some(ADMIN_READ_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_ADMIN_REQUEST_BYTES {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/healthz") => (200, "text/plain", "ok\n".to_owned()),
        (b"GET", b"/readyz") => {
            if state.stop.draining() {
                (503, "text/plain", "not ready: draining\n".to_owned())
            } else if state.registry.snapshot().is_empty() {
                (
                    503,
                    "text/plain",
                    "not ready: no plugin is mounted\n".to_owned(),
                )
            } else {
                (200, "text/plain", "ready\n".to_owned())
            }
        }
        (b"GET", b"/metrics") => (
            200,
            "text/plain; version=0.0.4",
            state
                .metrics
                .render(state.hub.open_count(), (state.queue_depth)()),
        ),
        (b"GET", _) => (404, "text/plain", "not found\n".to_owned()),
        _ => (405, "text/plain", "method not allowed\n".to_owned()),
    };
    let reason = crate::proto::response::reason(status);
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
