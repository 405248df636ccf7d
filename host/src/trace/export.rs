//! The OTLP exporter: spans queue (bounded) for one thread, which sends them in batches as
//! OTLP/HTTP protobuf (`POST /v1/traces`, `application/x-protobuf`, the messages of
//! `opentelemetry-proto`) to a collector, typically one beside the server.
//!
//! A batch leaves when it holds [`BATCH_SPANS`] spans or [`BATCH_EVERY`] after its first; a
//! batch the collector refuses or that cannot be sent within [`SEND_TIMEOUT`] is dropped,
//! counted and warned about (rate-limited): tracing never holds up a request, and never grows
//! memory past the queue of [`QUEUE_SPANS`].

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Status, span::SpanKind, status::StatusCode,
};
use prost::Message as _;

use super::{Attr, Kind, Span};

/// Spans waiting for the exporter; more are dropped and counted.
pub(crate) const QUEUE_SPANS: usize = 8192;

/// Most spans in one request to the collector.
pub(crate) const BATCH_SPANS: usize = 512;

/// Longest a span waits for its batch to fill.
pub(crate) const BATCH_EVERY: Duration = Duration::from_millis(500);

/// Connecting, sending a batch and reading the answer, each.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Where spans go: `http://HOST[:PORT][/PATH]` (port 4318 and path `/v1/traces` by default,
/// as OTLP/HTTP has them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    host: String,
    port: u16,
    path: String,
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let rest = match text.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(
                    "https:// is not supported: export to a collector beside the server over http:// (it forwards over TLS)".into(),
                );
            }
            _ => return Err("expected http://HOST[:PORT][/PATH]".into()),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err("expected http://HOST[:PORT][/PATH], without user information".into());
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
                match port.parse::<u16>() {
                    Ok(port) => (host, port),
                    Err(_) => return Err(format!("{port:?} is not a port")),
                }
            }
            _ => (authority, 4318),
        };
        let path = match path {
            "" | "/" => "/v1/traces".to_owned(),
            path => path.to_owned(),
        };
        if path
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err("the path holds spaces or control characters".into());
        }
        Ok(Endpoint {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            path,
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "http://[{}]:{}{}", self.host, self.port, self.path)
        } else {
            write!(f, "http://{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// What the exporter did, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub exported: AtomicU64,
    pub dropped: AtomicU64,
    pub failed_batches: AtomicU64,
}

/// The queue in front of the exporter's thread.
#[derive(Debug)]
pub(crate) struct Exporter {
    tx: Sender<Span>,
    stats: &'static Stats,
}

impl Exporter {
    /// Starts the thread that sends to `endpoint`, naming this process `service`.
    pub(crate) fn start(endpoint: Endpoint, service: &str) -> std::io::Result<Exporter> {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE_SPANS);
        let stats: &'static Stats = Box::leak(Box::default());
        let resource = resource(service);
        std::thread::Builder::new()
            .name("ankh-otlp".into())
            .spawn(move || run(&endpoint, &rx, &resource, stats))?;
        Ok(Exporter { tx, stats })
    }

    pub(crate) fn push(&self, span: Span) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(span) {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn stats(&self) -> &'static Stats {
        self.stats
    }
}

/// The exporter's thread: batches, sends, counts.
fn run(endpoint: &Endpoint, rx: &Receiver<Span>, resource: &Resource, stats: &Stats) {
    let mut batch = Vec::with_capacity(BATCH_SPANS);
    loop {
        match rx.recv() {
            Ok(span) => batch.push(span),
            Err(_) => return,
        }
        let deadline = Instant::now() + BATCH_EVERY;
        while batch.len() < BATCH_SPANS {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(span) => batch.push(span),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let body = encode(&batch, resource);
        match send(endpoint, &body) {
            Ok(()) => {
                stats
                    .exported
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Err(why) => {
                stats.failed_batches.fetch_add(1, Ordering::Relaxed);
                stats
                    .dropped
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                warn_limited!(
                    "cannot export {} spans to {endpoint}: {why}; they are dropped",
                    batch.len()
                );
            }
        }
        batch.clear();
    }
}

/// The resource every span of this process belongs to.
fn resource(service: &str) -> Resource {
    Resource {
        attributes: vec![
            text("service.name", service.to_owned()),
            text("service.version", env!("CARGO_PKG_VERSION").to_owned()),
            int("process.pid", i64::from(std::process::id())),
        ],
        ..Default::default()
    }
}

fn text(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..Default::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

/// One export request of `spans`, as protobuf.
pub(crate) fn encode(spans: &[Span], resource: &Resource) -> Vec<u8> {
    let spans = spans
        .iter()
        .map(|s| opentelemetry_proto::tonic::trace::v1::Span {
            trace_id: s.context.trace_id.to_be_bytes().to_vec(),
            span_id: s.context.span_id.to_be_bytes().to_vec(),
            trace_state: s.tracestate.clone().unwrap_or_default(),
            parent_span_id: s
                .parent
                .map(|p| p.to_be_bytes().to_vec())
                .unwrap_or_default(),
            flags: u32::from(s.context.sampled),
            name: s.name.to_string(),
            kind: match s.kind {
                Kind::Internal => SpanKind::Internal,
                Kind::Server => SpanKind::Server,
                Kind::Client => SpanKind::Client,
            } as i32,
            start_time_unix_nano: s.start_ns,
            end_time_unix_nano: s.end_ns.max(s.start_ns),
            attributes: s
                .attributes
                .iter()
                .map(|(k, v)| match v {
                    Attr::Text(t) => text(k, t.to_string()),
                    Attr::Int(n) => int(k, *n),
                })
                .collect(),
            status: Some(match &s.error {
                Some(why) => Status {
                    message: why.clone(),
                    code: StatusCode::Error as i32,
                },
                None => Status {
                    message: String::new(),
                    code: StatusCode::Unset as i32,
                },
            }),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource.clone()),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "ankh".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// POSTs one batch; `Err` with why when it was not taken (a 2xx answer).
fn send(endpoint: &Endpoint, body: &[u8]) -> Result<(), String> {
    let addr = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", endpoint.host))?
        .next()
        .ok_or_else(|| format!("{} has no address", endpoint.host))?;
    let mut stream = TcpStream::connect_timeout(&addr, SEND_TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(SEND_TIMEOUT))
        .and_then(|()| stream.set_read_timeout(Some(SEND_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let host = if endpoint.host.contains(':') {
        format!("[{}]:{}", endpoint.host, endpoint.port)
    } else {
        format!("{}:{}", endpoint.host, endpoint.port)
    };
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path,
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| e.to_string())?;
    // The status line is all that matters; the rest is read (a little) and dropped.
    let mut answer = [0u8; 256];
    let mut got = 0;
    while got < 12 {
        match stream.read(&mut answer[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    let status = std::str::from_utf8(&answer[..got])
        .ok()
        .and_then(|s| s.split(' ').nth(1))
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(s) if (200..300).contains(&s) => Ok(()),
        Some(s) => Err(format!("the collector answered {s}")),
        None => Err("the collector's answer is not HTTP".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_http_with_otlp_defaults() {
        let e: Endpoint = "http://127.0.0.1".parse().unwrap();
        assert_eq!(e.to_string(), "http://127.0.0.1:4318/v1/traces");
        let e: Endpoint = "http://collector:9999/custom".parse().unwrap();
        assert_eq!(e.to_string(), "http://collector:9999/custom");
        let e: Endpoint = "http://[::1]:4318/".parse().unwrap();
        assert_eq!(e.to_string(), "http://[::1]:4318/v1/traces");
        for bad in [
            "https://x",
            "x:4318",
            "http://",
            "http://u:p@x",
            "http://x:port",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn spans_encode_as_an_otlp_export_request() {
        let span = Span {
            context: super::super::SpanContext {
                trace_id: 7,
                span_id: 9,
                sampled: true,
            },
            parent: Some(3),
            tracestate: None,
            name: "GET /hello".into(),
            kind: Kind::Server,
            start_ns: 1,
            end_ns: 2,
            attributes: vec![("http.response.status_code", Attr::Int(200))],
            error: None,
        };
        let bytes = encode(&[span], &resource("ankh"));
        let back = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        let s = &back.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(s.name, "GET /hello");
        assert_eq!(s.trace_id, 7u128.to_be_bytes());
        assert_eq!(s.parent_span_id, 3u64.to_be_bytes());
        assert_eq!(s.kind, SpanKind::Server as i32);
        assert_eq!(s.attributes[0].key, "http.response.status_code");
    }
}
