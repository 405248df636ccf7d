//! The access log: one line per answered request (target `ankh::access`, off with
//! `--no-access-log`), whoever answered it, a plugin or the host itself.

use std::sync::Arc;

/// The request as the access log names it.
#[derive(Debug, Clone)]
pub struct Access {
    pub remote: std::net::SocketAddr,
    pub method: String,
    pub path: String,
    pub received: std::time::Instant,
    /// The plugin's counters, when a plugin answered.
    pub metrics: Option<Arc<crate::metrics::PluginMetrics>>,
}

impl Access {
    /// One access-log line (target `ankh::access`, off with `--no-access-log`).
    /// `request` is the request id, `None` for requests no plugin saw (logged as `-`). Nothing
    /// is formatted unless the line is written.
    pub fn log(&self, status: u16, bytes: usize, plugin: &str, request: Option<u64>) {
        if let Some(m) = &self.metrics {
            m.response(status, self.received.elapsed());
        }
        tracing::info!(
            target: "ankh::access",
            remote = %self.remote,
            method = %self.method,
            path = %self.path,
            status,
            bytes,
            duration_us = self.received.elapsed().as_micros() as u64,
            plugin = %plugin,
            request = %RequestId(request),
            "{} {} {status}",
            self.method,
            self.path
        );
    }
}

/// A request id as logged: 16 hex digits, or `-`.
struct RequestId(Option<u64>);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{id:016x}"),
            None => f.write_str("-"),
        }
    }
}
