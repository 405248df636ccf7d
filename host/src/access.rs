//! The access log: one line per answered request (target `ankh::access`, off with
//! `--no-access-log`), whoever answered it, a plugin or the host itself.
//!
//! The binary installs a [`Sink`]: lines are then formatted here, in the log's own layout (the
//! text or JSON of `tracing-subscriber`, its timestamp included), and appended to the batching
//! writer. That skips tracing's per-field formatting, which cost as much as the rest of the
//! access log together (a `perf` profile of hello world: 8% of the server's CPU). Without a
//! sink (the library alone, in tests) the line goes through `tracing` like any other. Either
//! way the log filter decides (`RUST_LOG`, `--log-level`, `--no-access-log`).

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use crate::text;

/// The target of access lines.
pub const TARGET: &str = "ankh::access";

/// Takes one whole access line, newline included.
pub(crate) type WriteLine = dyn Fn(&[u8]) + Send + Sync;

/// Where formatted access lines go.
pub struct Sink {
    /// One JSON object per line, as `--log-format json` writes them; else text.
    pub json: bool,
    /// Where each line goes.
    pub write: Box<WriteLine>,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends access lines to `sink` from now on (once; later calls change nothing).
pub fn install(sink: Sink) {
    let _ = SINK.set(sink);
}

thread_local! {
    /// Where a line is formatted (reused).
    static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The request as the access log names it.
#[derive(Debug, Clone)]
pub struct Access {
    pub remote: std::net::SocketAddr,
    pub method: Arc<str>,
    pub path: Arc<str>,
    pub received: std::time::Instant,
    /// The plugin's counters, when a plugin answered.
    pub metrics: Option<Arc<crate::metrics::PluginMetrics>>,
    /// The request's trace: its id goes in the line, and its span (the server span) is
    /// recorded here, when it ends.
    pub trace: Option<Box<crate::trace::RequestTrace>>,
}

/// One line's values.
struct Fields<'a> {
    access: &'a Access,
    status: u16,
    bytes: usize,
    duration_us: u64,
    plugin: &'a str,
    request: RequestId,
}

/// The server span of a request that ended with `status` after `bytes`.
fn record_span(
    trace: &crate::trace::RequestTrace,
    access: &Access,
    status: u16,
    bytes: usize,
    plugin: &str,
    request: Option<u64>,
) {
    use crate::trace::{Attr, Kind, Span};
    // Shared or copied as numbers: the exporter's thread writes them out.
    let mut attributes = vec![
        (
            "http.request.method",
            Attr::Text(access.method.clone().into()),
        ),
        ("url.path", Attr::Text(access.path.clone().into())),
        ("http.response.status_code", Attr::Int(i64::from(status))),
        ("http.response.body.size", Attr::Int(bytes as i64)),
        ("client.address", Attr::Ip(access.remote.ip())),
        ("ankh.plugin", Attr::Text(plugin.to_owned().into())),
    ];
    if let Some(id) = request {
        attributes.push(("ankh.request", Attr::Hex(id)));
    }
    crate::trace::record(Span {
        context: trace.span,
        parent: trace.parent.map(|p| p.span_id),
        remote_parent: trace.parent.is_some(),
        tracestate: trace.tracestate.clone(),
        name: access.method.clone().into(),
        kind: Kind::Server,
        start_ns: trace.start_ns,
        end_ns: crate::trace::now_ns(),
        attributes,
        error: (status >= 500).then(|| format!("answered {status}")),
    });
}

impl Access {
    /// One access-log line (target `ankh::access`, off with `--no-access-log`).
    /// `request` is the request id, `None` for requests no plugin saw (logged as `-`). Nothing
    /// is formatted unless the line is written.
    pub(crate) fn log(&self, status: u16, bytes: usize, plugin: &str, request: Option<u64>) {
        let elapsed = self.received.elapsed();
        if let Some(m) = &self.metrics {
            m.response(status, elapsed);
        }
        if let Some(trace) = self.trace.as_deref().filter(|t| t.recorded()) {
            record_span(trace, self, status, bytes, plugin, request);
        }
        if !tracing::enabled!(target: TARGET, tracing::Level::INFO) {
            return;
        }
        let fields = Fields {
            access: self,
            status,
            bytes,
            duration_us: elapsed.as_micros() as u64,
            plugin,
            request: RequestId(request),
        };
        let Some(sink) = SINK.get() else {
            tracing::info!(
                target: TARGET,
                remote = %self.remote,
                method = %self.method,
                path = %self.path,
                status,
                bytes,
                duration_us = fields.duration_us,
                plugin = %plugin,
                request = %fields.request,
                trace = self.trace.as_ref().map(|t| t.span.trace_hex()),
                "{} {} {status}",
                self.method,
                self.path
            );
            return;
        };
        LINE.with_borrow_mut(|line| {
            line.clear();
            if sink.json {
                fields.json(line);
            } else {
                fields.text(line);
            }
            (sink.write)(line.as_bytes());
        });
    }
}

impl Fields<'_> {
    /// `2026-12-01T07:46:30.151581Z  INFO ankh::access: GET / 200 remote=... method=GET ...`,
    /// as tracing-subscriber's full text format writes it without colour.
    fn text(&self, out: &mut String) {
        let a = self.access;
        text::push_timestamp(out);
        out.push_str("  INFO ");
        out.push_str(TARGET);
        out.push_str(": ");
        out.push_str(&a.method);
        out.push(' ');
        out.push_str(&a.path);
        out.push(' ');
        text::push_decimal(out, u64::from(self.status));
        out.push_str(" remote=");
        text::push_address(out, a.remote);
        out.push_str(" method=");
        out.push_str(&a.method);
        out.push_str(" path=");
        out.push_str(&a.path);
        out.push_str(" status=");
        text::push_decimal(out, u64::from(self.status));
        out.push_str(" bytes=");
        text::push_decimal(out, self.bytes as u64);
        out.push_str(" duration_us=");
        text::push_decimal(out, self.duration_us);
        out.push_str(" plugin=");
        out.push_str(self.plugin);
        out.push_str(" request=");
        self.request.push(out);
        if let Some(trace) = &a.trace {
            out.push_str(" trace=");
            text::push_trace_id(out, trace.span.trace_id());
        }
        out.push('\n');
    }

    /// The same line as tracing-subscriber's JSON format writes it.
    fn json(&self, out: &mut String) {
        let a = self.access;
        out.push_str("{\"timestamp\":\"");
        text::push_timestamp(out);
        out.push_str("\",\"level\":\"INFO\",\"fields\":{\"message\":\"");
        json_str(out, &a.method);
        out.push(' ');
        json_str(out, &a.path);
        let _ = write!(
            out,
            " {}\",\"remote\":\"{}\",\"method\":\"",
            self.status, a.remote
        );
        json_str(out, &a.method);
        out.push_str("\",\"path\":\"");
        json_str(out, &a.path);
        let _ = write!(
            out,
            "\",\"status\":{},\"bytes\":{},\"duration_us\":{},\"plugin\":\"",
            self.status, self.bytes, self.duration_us
        );
        json_str(out, self.plugin);
        let _ = write!(out, "\",\"request\":\"{}\"", self.request);
        if let Some(trace) = &a.trace {
            out.push_str(",\"trace\":\"");
            text::push_trace_id(out, trace.span.trace_id());
            out.push('"');
        }
        let _ = writeln!(out, "}},\"target\":\"{TARGET}\"}}");
    }
}

/// `s` inside a JSON string: quotes, backslashes and control characters escaped.
fn json_str(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

/// A request id as logged: 16 hex digits, or `-`.
struct RequestId(Option<u64>);

impl RequestId {
    /// Appends the id as [`Display`](std::fmt::Display) writes it.
    fn push(&self, out: &mut String) {
        match self.0 {
            Some(id) => text::push_hex_id(out, id),
            None => out.push('-'),
        }
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{id:016x}"),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(access: &Access) -> Fields<'_> {
        Fields {
            access,
            status: 404,
            bytes: 132,
            duration_us: 94,
            plugin: "index",
            request: RequestId(Some(2)),
        }
    }

    fn access(path: &str) -> Access {
        Access {
            remote: "127.0.0.1:45688".parse().unwrap(),
            method: "GET".into(),
            path: path.into(),
            received: std::time::Instant::now(),
            metrics: None,
            trace: None,
        }
    }

    #[test]
    fn text_lines_read_as_tracing_writes_them() {
        let mut line = String::new();
        fields(&access("/nope%20x")).text(&mut line);
        // The timestamp: 2026-12-01T07:46:30.157611Z
        let (stamp, rest) = line.split_at(27);
        assert!(
            stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
            "{line}"
        );
        assert_eq!(
            rest,
            "  INFO ankh::access: GET /nope%20x 404 remote=127.0.0.1:45688 method=GET path=/nope%20x status=404 bytes=132 duration_us=94 plugin=index request=0000000000000002\n"
        );
    }

    #[test]
    fn a_request_no_plugin_saw_is_logged_as_a_dash() {
        let a = access("/");
        let mut f = fields(&a);
        f.request = RequestId(None);
        let mut line = String::new();
        f.text(&mut line);
        assert!(line.ends_with(" plugin=index request=-\n"), "{line}");
    }

    #[test]
    fn json_lines_parse_and_escape() {
        let mut line = String::new();
        fields(&access("/a\"b\\c\u{1}")).json(&mut line);
        assert!(line.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["target"], TARGET);
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["fields"]["path"], "/a\"b\\c\u{1}");
        assert_eq!(v["fields"]["message"], "GET /a\"b\\c\u{1} 404");
        assert_eq!(v["fields"]["status"], 404);
        assert_eq!(v["fields"]["bytes"], 132);
        assert_eq!(v["fields"]["duration_us"], 94);
        assert_eq!(v["fields"]["plugin"], "index");
        assert_eq!(v["fields"]["request"], "0000000000000002");
        assert_eq!(v["fields"]["remote"], "127.0.0.1:45688");
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn a_traced_request_names_its_trace_in_both_formats() {
        let mut a = access("/");
        let span = crate::trace::SpanContext::parse(
            b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .unwrap();
        a.trace = Some(Box::new(crate::trace::RequestTrace {
            span,
            parent: None,
            tracestate: None,
            start_ns: 0,
        }));
        let mut line = String::new();
        fields(&a).text(&mut line);
        assert!(
            line.ends_with(" request=0000000000000002 trace=0af7651916cd43dd8448eb211c80319c\n"),
            "{line}"
        );
        line.clear();
        fields(&a).json(&mut line);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["fields"]["trace"], "0af7651916cd43dd8448eb211c80319c");
    }
}
