//! The OTLP exporter: spans queue (bounded) for one thread, which sends them in batches as
//! OTLP/HTTP protobuf (`POST /v1/traces`, `application/x-protobuf`, an
//! `ExportTraceServiceRequest`) to a collector, typically one beside the server.
//!
//! A request's thread only moves its spans into the queue: it never wakes the exporter, which
//! sleeps for [`BATCH_EVERY`] at a time and is woken early only when a batch's worth of
//! [`BATCH_SPANS`] is waiting. A batch the collector refuses or that cannot be sent within
//! [`SEND_TIMEOUT`] is dropped, counted and warned about (rate-limited): tracing never holds
//! up a request, and never grows memory past the queue of [`QUEUE_SPANS`].
//!
//! The messages are written here, field by field, into buffers the thread keeps: building
//! `opentelemetry-proto`'s structs for each span (a `String` or `Vec` per id, name, key and
//! value) cost more than the request it traced. Those structs decode what is written, in the
//! tests here and in the integration tests' receiver.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::{Attr, Kind, Span};

/// Spans waiting for the exporter; more are dropped and counted.
pub(crate) const QUEUE_SPANS: usize = 8192;

/// Most spans in one request to the collector; a full batch wakes the exporter.
pub(crate) const BATCH_SPANS: usize = 512;

/// Longest a span waits in the queue.
pub(crate) const BATCH_EVERY: Duration = Duration::from_millis(500);

/// Connecting, sending a batch and reading the answer, each.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a server that stops waits for its last spans to be sent.
pub(crate) const FLUSH_PATIENCE: Duration = Duration::from_secs(2);

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

/// What a request's thread and the exporter's share: the counters, and the flushes asked
/// for and done (by number).
#[derive(Debug, Default)]
struct Shared {
    stats: Stats,
    flushes_asked: AtomicU64,
    flushes_done: Mutex<u64>,
    flushed: Condvar,
}

/// The queue in front of the exporter's thread.
#[derive(Debug)]
pub(crate) struct Exporter {
    tx: Sender<Span>,
    thread: std::thread::Thread,
    shared: &'static Shared,
}

impl Exporter {
    /// Starts the thread that sends to `endpoint`, naming this process `service`.
    pub(crate) fn start(endpoint: Endpoint, service: &str) -> std::io::Result<Exporter> {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE_SPANS);
        let shared: &'static Shared = Box::leak(Box::default());
        let encoder = Encoder::new(service);
        let handle = std::thread::Builder::new()
            .name("ankh-otlp".into())
            .spawn(move || run(&endpoint, &rx, encoder, shared))?;
        Ok(Exporter {
            tx,
            thread: handle.thread().clone(),
            shared,
        })
    }

    pub(crate) fn push(&self, span: Span) {
        if self.tx.try_send(span).is_err() {
            self.shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
        } else if self.tx.len() >= BATCH_SPANS {
            // An atomic swap unless the exporter sleeps: then one wake for a whole batch.
            self.thread.unpark();
        }
    }

    /// Has the exporter send what is queued now, and waits for it (at most `patience`).
    pub(crate) fn flush(&self, patience: Duration) {
        let asked = self.shared.flushes_asked.fetch_add(1, Ordering::AcqRel) + 1;
        self.thread.unpark();
        let done = self
            .shared
            .flushes_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = self
            .shared
            .flushed
            .wait_timeout_while(done, patience, |done| *done < asked);
    }

    pub(crate) fn stats(&self) -> &'static Stats {
        &self.shared.stats
    }
}

/// The exporter's thread: sleeps, drains the queue in batches, sends, counts.
fn run(endpoint: &Endpoint, rx: &Receiver<Span>, mut encoder: Encoder, shared: &Shared) {
    let stats = &shared.stats;
    let mut batch = Vec::with_capacity(BATCH_SPANS);
    loop {
        std::thread::park_timeout(BATCH_EVERY);
        let asked = shared.flushes_asked.load(Ordering::Acquire);
        loop {
            batch.extend(rx.try_iter().take(BATCH_SPANS));
            if batch.is_empty() {
                break;
            }
            let full = batch.len() == BATCH_SPANS;
            let body = encoder.encode(&batch);
            match send(endpoint, body) {
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
            if !full {
                break;
            }
        }
        let mut done = shared
            .flushes_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *done < asked {
            *done = asked;
            shared.flushed.notify_all();
        }
    }
}

/// Writes export requests: the resource and scope once, each batch's spans into buffers kept
/// from one batch to the next.
struct Encoder {
    /// `ResourceSpans.resource` and `ScopeSpans.scope`, with their tags and lengths.
    resource: Vec<u8>,
    scope: Vec<u8>,
    /// The batch's spans, each with its tag and length; one span being written.
    spans: Vec<u8>,
    span: Vec<u8>,
    /// The last address written out, and its text: a span's client is most often the
    /// previous span's.
    address: Option<(std::net::IpAddr, String)>,
    body: Vec<u8>,
}

impl Encoder {
    fn new(service: &str) -> Encoder {
        let mut attributes = Vec::new();
        key_value(&mut attributes, 1, "service.name", Value::Text(service));
        key_value(
            &mut attributes,
            1,
            "service.version",
            Value::Text(env!("CARGO_PKG_VERSION")),
        );
        key_value(
            &mut attributes,
            1,
            "process.pid",
            Value::Int(i64::from(std::process::id())),
        );
        let mut resource = Vec::new();
        delimited(&mut resource, 1, &attributes);
        let mut scope_fields = Vec::new();
        delimited(&mut scope_fields, 1, b"ankh");
        delimited(&mut scope_fields, 2, env!("CARGO_PKG_VERSION").as_bytes());
        let mut scope = Vec::new();
        delimited(&mut scope, 1, &scope_fields);
        Encoder {
            resource,
            scope,
            spans: Vec::new(),
            span: Vec::new(),
            address: None,
            body: Vec::new(),
        }
    }

    /// One `ExportTraceServiceRequest` of `spans`, in one `ResourceSpans` and `ScopeSpans`.
    fn encode(&mut self, spans: &[Span]) -> &[u8] {
        self.spans.clear();
        for span in spans {
            self.span.clear();
            write_span(&mut self.span, &mut self.address, span);
            delimited(&mut self.spans, 2, &self.span);
        }
        let scope_spans = self.scope.len() + self.spans.len();
        let resource_spans = self.resource.len() + 1 + varint_len(scope_spans as u64) + scope_spans;
        let body = &mut self.body;
        body.clear();
        tag(body, 1, LEN);
        varint(body, resource_spans as u64);
        body.extend_from_slice(&self.resource);
        tag(body, 2, LEN);
        varint(body, scope_spans as u64);
        body.extend_from_slice(&self.scope);
        body.extend_from_slice(&self.spans);
        &self.body
    }
}

/// OTLP's `Span` flags: the W3C trace flags in the low byte, and whether the parent's
/// remoteness is known and is remote.
const FLAG_HAS_IS_REMOTE: u32 = 0x100;
const FLAG_IS_REMOTE: u32 = 0x200;

/// One `Span` message's fields (see `opentelemetry/proto/trace/v1/trace.proto`).
fn write_span(out: &mut Vec<u8>, address: &mut Option<(std::net::IpAddr, String)>, s: &Span) {
    delimited(out, 1, &s.context.trace_id().to_be_bytes());
    delimited(out, 2, &s.context.span_id.to_be_bytes());
    if let Some(state) = s.tracestate.as_deref().filter(|t| !t.is_empty()) {
        delimited(out, 3, state.as_bytes());
    }
    if let Some(parent) = s.parent {
        delimited(out, 4, &parent.to_be_bytes());
    }
    delimited(out, 5, s.name.as_str().as_bytes());
    let kind = match s.kind {
        Kind::Internal => 1,
        Kind::Server => 2,
        Kind::Client => 3,
    };
    tag(out, 6, VARINT);
    varint(out, kind);
    tag(out, 7, FIXED64);
    out.extend_from_slice(&s.start_ns.to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&s.end_ns.max(s.start_ns).to_le_bytes());
    let mut hex;
    for (key, value) in &s.attributes {
        let value = match value {
            Attr::Text(t) => Value::Text(t.as_str()),
            Attr::Int(n) => Value::Int(*n),
            Attr::Ip(ip) => {
                if address.as_ref().is_none_or(|(last, _)| last != ip) {
                    *address = Some((*ip, ip.to_string()));
                }
                Value::Text(address.as_ref().map_or("", |(_, text)| text))
            }
            Attr::Hex(id) => {
                hex = crate::text::hex_digits(*id);
                Value::Text(std::str::from_utf8(&hex).unwrap_or_default())
            }
        };
        key_value(out, 9, key, value);
    }
    if let Some(why) = &s.error {
        // `Status { message = 2, code = 3 }`, code 2 being `STATUS_CODE_ERROR`.
        let len = 1 + varint_len(why.len() as u64) + why.len() + 2;
        tag(out, 15, LEN);
        varint(out, len as u64);
        delimited(out, 2, why.as_bytes());
        tag(out, 3, VARINT);
        varint(out, 2);
    }
    let mut flags = u32::from(s.context.sampled);
    if s.parent.is_some() {
        flags |= FLAG_HAS_IS_REMOTE;
        if s.remote_parent {
            flags |= FLAG_IS_REMOTE;
        }
    }
    tag(out, 16, FIXED32);
    out.extend_from_slice(&flags.to_le_bytes());
}

/// An attribute's value, as `AnyValue` has it.
enum Value<'a> {
    Text(&'a str),
    Int(i64),
}

/// A `KeyValue` as field `field` of its message.
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: Value<'_>) {
    // `AnyValue { string_value = 1, int_value = 3 }`.
    let any = match value {
        Value::Text(t) => 1 + varint_len(t.len() as u64) + t.len(),
        Value::Int(n) => 1 + varint_len(n as u64),
    };
    let len = 1 + varint_len(key.len() as u64) + key.len() + 1 + varint_len(any as u64) + any;
    tag(out, field, LEN);
    varint(out, len as u64);
    delimited(out, 1, key.as_bytes());
    tag(out, 2, LEN);
    varint(out, any as u64);
    match value {
        Value::Text(t) => delimited(out, 1, t.as_bytes()),
        Value::Int(n) => {
            tag(out, 3, VARINT);
            varint(out, n as u64);
        }
    }
}

/// Protobuf's wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    let bits = u64::BITS - (v | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

/// A length-delimited field: bytes, a string or a message.
fn delimited(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(out, field, LEN);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
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

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::trace::v1 as otlp;
    use prost::Message as _;

    fn span(parent: Option<u64>, attributes: Vec<(&'static str, Attr)>) -> Span {
        Span {
            context: super::super::SpanContext::new(
                0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
                0x00f0_67aa_0ba9_02b7,
                true,
            ),
            parent,
            remote_parent: parent.is_some(),
            tracestate: parent.map(|_| "congo=t61rcWkgMzE".into()),
            name: "GET".into(),
            kind: Kind::Server,
            start_ns: 1_765_000_000_000_000_000,
            end_ns: 1_765_000_000_000_250_000,
            attributes,
            error: parent.map(|_| "answered 503".to_owned()),
        }
    }

    fn text(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_owned())),
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

    /// What is written is what `opentelemetry-proto` decodes, field by field, and byte for
    /// byte what prost writes for the same message.
    #[test]
    fn spans_encode_as_prost_encodes_an_otlp_export_request() {
        let spans = [
            span(
                Some(0x1122_3344_5566_7788),
                vec![
                    (
                        "http.request.method",
                        Attr::Text(std::sync::Arc::<str>::from("GET").into()),
                    ),
                    ("url.path", Attr::Text("/hello".into())),
                    ("http.response.status_code", Attr::Int(503)),
                    ("negative", Attr::Int(-1)),
                    ("client.address", Attr::Ip("::1".parse().unwrap())),
                    ("client.v4", Attr::Ip("127.0.0.1".parse().unwrap())),
                    ("ankh.request", Attr::Hex(0xab)),
                    ("long", Attr::Text("x".repeat(300).into())),
                ],
            ),
            span(None, Vec::new()),
        ];
        let mut encoder = Encoder::new("svc");
        let bytes = encoder.encode(&spans).to_vec();
        let back = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();

        let expected = ExportTraceServiceRequest {
            resource_spans: vec![otlp::ResourceSpans {
                resource: Some(opentelemetry_proto::tonic::resource::v1::Resource {
                    attributes: vec![
                        text("service.name", "svc"),
                        text("service.version", env!("CARGO_PKG_VERSION")),
                        int("process.pid", i64::from(std::process::id())),
                    ],
                    ..Default::default()
                }),
                scope_spans: vec![otlp::ScopeSpans {
                    scope: Some(
                        opentelemetry_proto::tonic::common::v1::InstrumentationScope {
                            name: "ankh".into(),
                            version: env!("CARGO_PKG_VERSION").into(),
                            ..Default::default()
                        },
                    ),
                    spans: vec![
                        otlp::Span {
                            trace_id: spans[0].context.trace_id().to_be_bytes().to_vec(),
                            span_id: spans[0].context.span_id.to_be_bytes().to_vec(),
                            trace_state: "congo=t61rcWkgMzE".into(),
                            parent_span_id: 0x1122_3344_5566_7788u64.to_be_bytes().to_vec(),
                            flags: 0x301,
                            name: "GET".into(),
                            kind: otlp::span::SpanKind::Server as i32,
                            start_time_unix_nano: spans[0].start_ns,
                            end_time_unix_nano: spans[0].end_ns,
                            attributes: vec![
                                text("http.request.method", "GET"),
                                text("url.path", "/hello"),
                                int("http.response.status_code", 503),
                                int("negative", -1),
                                text("client.address", "::1"),
                                text("client.v4", "127.0.0.1"),
                                text("ankh.request", "00000000000000ab"),
                                text("long", &"x".repeat(300)),
                            ],
                            status: Some(otlp::Status {
                                message: "answered 503".into(),
                                code: otlp::status::StatusCode::Error as i32,
                            }),
                            ..Default::default()
                        },
                        otlp::Span {
                            trace_id: spans[1].context.trace_id().to_be_bytes().to_vec(),
                            span_id: spans[1].context.span_id.to_be_bytes().to_vec(),
                            flags: 1,
                            name: "GET".into(),
                            kind: otlp::span::SpanKind::Server as i32,
                            start_time_unix_nano: spans[1].start_ns,
                            end_time_unix_nano: spans[1].end_ns,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        assert_eq!(back, expected);
        assert_eq!(bytes, expected.encode_to_vec());
        // The buffers are reused: a second batch is written from scratch.
        let again = encoder.encode(&spans[1..]).to_vec();
        let back = ExportTraceServiceRequest::decode(again.as_slice()).unwrap();
        assert_eq!(back.resource_spans[0].scope_spans[0].spans.len(), 1);
    }

    #[test]
    fn varints_are_as_long_as_they_must_be() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            assert_eq!(
                prost::encoding::decode_varint(&mut out.as_slice()).unwrap(),
                v
            );
        }
    }
}
