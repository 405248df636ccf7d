//! The admin listener (`--admin ADDR`, meant for loopback): `/healthz`, `/readyz` and
//! `/metrics`. A plain blocking thread, one request per connection: admin traffic is a scrape
//! every few seconds, and it must keep answering when the main loop is saturated. Requests are
//! parsed and answers encoded by [`crate::proto`], as on the main listener.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::hub::Hub;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::net::event_loop::StopHandle;
use crate::proto::request;
use crate::proto::response::{self, RequestMeta};
use crate::proto::{Status, Version};
use crate::runtime::engine::registry::Registry;

/// Longest admin request head, in bytes.
const MAX_ADMIN_REQUEST_BYTES: usize = 4096;

/// How long an admin client may take to send its request.
const ADMIN_READ_TIMEOUT: Duration = Duration::from_secs(5);

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
}

/// Binds `addr` and serves the admin endpoints on a thread of their own.
pub(crate) fn start(addr: SocketAddr, state: AdminState) -> anyhow::Result<SocketAddr> {
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
    // The same parser and encoder as the main listener: one set of HTTP rules.
    let limits = Limits {
        max_head_bytes: MAX_ADMIN_REQUEST_BYTES,
        ..Limits::default()
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let head = loop {
        match request::parse(&buf, &limits) {
            Ok(Status::Complete(head, _)) => break Ok(head),
            Ok(Status::Partial) => {}
            Err(e) => break Err(e),
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let mut out = Vec::new();
    let meta = |head: bool| RequestMeta {
        version: Version::Http11,
        head,
        keep_alive: false,
        accept_encoding: None,
    };
    let head = match head {
        Ok(head) => head,
        Err(e) => {
            response::encode_simple(e.status(), &[], &e.to_string(), &meta(false), &mut out);
            stream.write_all(&out)?;
            return stream.flush();
        }
    };
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
    let _ = response::encode(
        status,
        &headers,
        body.as_bytes(),
        &meta(head.is_head()),
        &mut out,
    );
    stream.write_all(&out)?;
    stream.flush()
}
