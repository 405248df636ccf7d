//! Plugin stdout and stderr, captured line by line into the host's log.
//!
//! Each line becomes one `tracing` event tagged with the plugin's name, the stream and the id of
//! the request being handled, so `println!` in a plugin is a usable log, and a plugin cannot
//! write to the host's own stdout. Control characters are escaped, and a plugin's lines (these
//! and its `log` calls) are bounded by [`LogBudget`].

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::limits::{GUEST_LOG_LINE_BYTES, GUEST_LOG_LINES_PER_SECOND};
use crate::log_limit::LogLimit;

/// What a log line from a plugin is tagged with, and the plugin's budget of lines. One per
/// instance; the request id changes with every call.
#[derive(Debug)]
pub(crate) struct LogTags {
    pub plugin: Arc<str>,
    pub request: AtomicU64,
    /// The trace of the call being run, if it has one: its log lines carry the trace id,
    /// and its key-value operations and outbound calls are its children, which pass on the
    /// `tracestate` its request came with.
    trace: std::sync::Mutex<CallTrace>,
    budget: Arc<LogBudget>,
}

/// The trace of the call an instance runs.
#[derive(Debug, Default)]
struct CallTrace {
    context: Option<crate::trace::SpanContext>,
    tracestate: Option<Arc<str>>,
}

impl LogTags {
    pub(crate) fn new(plugin: Arc<str>, budget: Arc<LogBudget>) -> Arc<Self> {
        Arc::new(LogTags {
            plugin,
            request: AtomicU64::new(0),
            trace: std::sync::Mutex::new(CallTrace::default()),
            budget,
        })
    }

    /// The trace context of the call being run.
    pub(crate) fn trace(&self) -> Option<crate::trace::SpanContext> {
        self.call_trace().context
    }

    /// The `tracestate` of the call being run, if its request had one.
    pub(crate) fn tracestate(&self) -> Option<Arc<str>> {
        self.call_trace().tracestate.clone()
    }

    /// Sets (or clears) the trace context of the call being run, and its `tracestate`.
    pub(crate) fn set_trace(
        &self,
        context: Option<crate::trace::SpanContext>,
        tracestate: Option<Arc<str>>,
    ) {
        *self.call_trace() = CallTrace {
            context,
            tracestate,
        };
    }

    fn call_trace(&self) -> std::sync::MutexGuard<'_, CallTrace> {
        self.trace
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `text` with the plugin's secrets masked.
    pub(crate) fn mask<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        self.budget.mask(text)
    }

    /// The id of the request being handled, 0 outside a request.
    pub(crate) fn request(&self) -> u64 {
        self.request.load(Ordering::Relaxed)
    }

    /// Whether the plugin may log one more line now. When lines were dropped before this
    /// one, a warning saying how many is logged first.
    pub(crate) fn admit(&self) -> bool {
        match self.budget.limit.allow() {
            Some(0) => true,
            Some(dropped) => {
                tracing::warn!(
                    target: "ankh::plugin",
                    plugin = %self.plugin,
                    dropped,
                    "{dropped} log lines of this plugin were dropped: over {} lines a second",
                    GUEST_LOG_LINES_PER_SECOND
                );
                true
            }
            None => {
                self.budget
                    .metrics
                    .log_lines_dropped
                    .fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// One plugin's budget of log lines, shared by all its instances:
/// [`GUEST_LOG_LINES_PER_SECOND`] in each one-second window, as the host limits its own
/// repeated warnings.
#[derive(Debug)]
pub(crate) struct LogBudget {
    limit: LogLimit,
    /// The plugin's secret values, masked wherever its lines hold them.
    secrets: Arc<[String]>,
    /// Where the dropped lines are counted.
    metrics: Arc<crate::metrics::PluginMetrics>,
}

impl LogBudget {
    pub(crate) fn new(
        metrics: Arc<crate::metrics::PluginMetrics>,
        secrets: Arc<[String]>,
    ) -> Arc<Self> {
        Arc::new(LogBudget {
            limit: LogLimit::with_burst(u64::from(GUEST_LOG_LINES_PER_SECOND)),
            secrets,
            metrics,
        })
    }

    /// `text` with the plugin's secrets masked.
    pub(crate) fn mask<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        crate::runtime::engine::values::mask(text, &self.secrets)
    }
}

/// A `StdoutStream` for `WasiCtxBuilder::stdout` / `stderr`.
#[derive(Debug, Clone)]
pub(crate) struct GuestOutput {
    tags: Arc<LogTags>,
    stream: &'static str,
}

impl GuestOutput {
    pub(crate) fn stdout(tags: Arc<LogTags>) -> Self {
        GuestOutput {
            tags,
            stream: "stdout",
        }
    }

    pub(crate) fn stderr(tags: Arc<LogTags>) -> Self {
        GuestOutput {
            tags,
            stream: "stderr",
        }
    }

    fn writer(&self) -> LineWriter {
        LineWriter {
            out: self.clone(),
            partial: Vec::new(),
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.writer())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.writer())
    }
}

/// Splits written bytes into lines and logs each complete one.
struct LineWriter {
    out: GuestOutput,
    partial: Vec<u8>,
}

impl LineWriter {
    fn write_bytes(&mut self, mut bytes: &[u8]) {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&bytes[..nl]);
            self.emit();
            bytes = &bytes[nl + 1..];
        }
        self.partial.extend_from_slice(bytes);
        while self.partial.len() > GUEST_LOG_LINE_BYTES {
            let rest = self.partial.split_off(GUEST_LOG_LINE_BYTES);
            self.emit();
            self.partial = rest;
        }
    }

    fn emit(&mut self) {
        let line = String::from_utf8_lossy(&self.partial);
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            self.partial.clear();
            return;
        }
        if !self.out.tags.admit() {
            self.partial.clear();
            return;
        }
        let line = self.out.tags.mask(line);
        let line = printable(&line, GUEST_LOG_LINE_BYTES);
        tracing::info!(
            target: "ankh::plugin",
            plugin = %self.out.tags.plugin,
            request = %format_args!("{:016x}", self.out.tags.request()),
            trace = self.out.tags.trace().map(|t| t.trace_hex()),
            stream = self.out.stream,
            "{line}"
        );
        self.partial.clear();
    }
}

/// `text` made safe for one line of the host's log: control characters (a newline that would
/// forge a line, a terminal escape) are written as escapes, and text past `max_bytes` is cut,
/// saying how long it was.
pub(crate) fn printable(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    let clean = |c: char| !c.is_control() || c == '\t';
    if text.len() <= max_bytes && text.chars().all(clean) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max_bytes) + 32);
    for c in text.chars() {
        if out.len() >= max_bytes {
            let _ = write!(out, "… (truncated: {} bytes in all)", text.len());
            break;
        }
        if clean(c) {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    std::borrow::Cow::Owned(out)
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.partial.is_empty() {
            self.emit();
        }
    }
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LineWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_escaped_and_long_text_is_cut() {
        assert_eq!(printable("plain\ttext", 100), "plain\ttext");
        assert_eq!(printable("a\nINFO forged", 100), "a\\nINFO forged");
        assert_eq!(printable("\u{1b}[31mred", 100), "\\u{1b}[31mred");
        let long = "x".repeat(1000);
        let cut = printable(&long, 10);
        assert!(cut.starts_with("xxxxxxxxxx…"), "{cut}");
        assert!(cut.ends_with("(truncated: 1000 bytes in all)"), "{cut}");
        assert!(!printable("é".repeat(100).as_str(), 11).contains('\u{fffd}'));
    }
}
