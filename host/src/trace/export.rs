//! The OTLP exporter: spans are written out as OTLP protobuf by the thread that ends them,
//! into a buffer of that thread's (bounded), and one thread sends them in batches as
//! OTLP/HTTP (`POST /v1/traces`, `application/x-protobuf`, an `ExportTraceServiceRequest`)
//! to a collector, typically one beside the server.
//!
//! A request's thread writes its spans into its own buffer, under a lock only the exporter
//! ever contends, and never wakes the exporter, which sleeps for [`BATCH_EVERY`] at a time
//! and is woken early only when a buffer holds a batch's worth of [`BATCH_SPANS`]. The
//! exporter swaps each buffer for an empty one and sends what it took. A batch the collector
//! refuses or that cannot be sent within [`SEND_TIMEOUT`] is dropped, counted and warned
//! about (rate-limited): tracing never holds up a request, and never grows memory past
//! [`THREAD_BYTES`] a recording thread.
//!
//! The messages are written here, field by field: building `opentelemetry-proto`'s structs
//! for each span (a `String` or `Vec` per id, name, key and value) cost more than the request
//! it traced, and so did moving each span through a queue to be written by the exporter
//! (2.5k instructions a span, 2026-12-06). Those structs decode what is written, in the
//! tests here and in the integration tests' receiver.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::{Attr, Kind, Span};

/// Most bytes of written spans a thread holds for the exporter; past it, its spans are
/// dropped and counted until the exporter takes them.
pub(crate) const THREAD_BYTES: usize = 512 * 1024;

/// Spans in a thread's buffer that wake the exporter (a batch).
pub(crate) const BATCH_SPANS: usize = 512;

/// Longest a span waits in its thread's buffer.
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

/// What the recording threads and the exporter's share: the counters, the threads' buffers,
/// and the flushes asked for and done (by number).
#[derive(Debug, Default)]
struct Shared {
    stats: Stats,
    buffers: Mutex<Vec<Arc<Mutex<Buffer>>>>,
    flushes_asked: AtomicU64,
    flushes_done: Mutex<u64>,
    flushed: Condvar,
}

/// One thread's spans, written out, each as field 2 of a `ScopeSpans` (tag, length, `Span`).
#[derive(Debug, Default)]
struct Buffer {
    bytes: Vec<u8>,
    spans: usize,
    /// One span being written (its length goes before it).
    span: Vec<u8>,
    /// The last address written out, and its text: a span's client is most often the
    /// previous span's.
    address: Option<(std::net::IpAddr, String)>,
}

thread_local! {
    /// This thread's buffer, registered with the exporter on its first span.
    static BUFFER: std::cell::OnceCell<Arc<Mutex<Buffer>>> = const { std::cell::OnceCell::new() };
}

/// The exporter: its thread, and what it shares with the threads that record spans.
#[derive(Debug)]
pub(crate) struct Exporter {
    thread: std::thread::Thread,
    shared: &'static Shared,
}

impl Exporter {
    /// Starts the thread that sends to `endpoint`, naming this process `service`.
    pub(crate) fn start(endpoint: Endpoint, service: &str) -> std::io::Result<Exporter> {
        let shared: &'static Shared = Box::leak(Box::default());
        let prefix = Prefix::new(service);
        let handle = std::thread::Builder::new()
            .name("ankh-otlp".into())
            .spawn(move || run(&endpoint, &prefix, shared))?;
        Ok(Exporter {
            thread: handle.thread().clone(),
            shared,
        })
    }

    /// Writes `span` into this thread's buffer (or drops it, counted, when the buffer is
    /// full); a buffer that holds a batch wakes the exporter.
    pub(crate) fn record(&self, span: &Span) {
        let written = BUFFER.try_with(|buffer| {
            let buffer = buffer.get_or_init(|| {
                let buffer = Arc::new(Mutex::new(Buffer::default()));
                lock(&self.shared.buffers).push(buffer.clone());
                buffer
            });
            let mut b = lock(buffer);
            if b.bytes.len() >= THREAD_BYTES {
                return false;
            }
            let Buffer {
                bytes,
                spans,
                span: one,
                address,
            } = &mut *b;
            one.clear();
            write_span(one, address, span);
            delimited(bytes, 2, one);
            *spans += 1;
            if *spans == BATCH_SPANS {
                drop(b);
                self.thread.unpark();
            }
            true
        });
        // Not written: the buffer is full, or this thread's locals are being torn down.
        if !matches!(written, Ok(true)) {
            self.shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Has the exporter send what is buffered now, and waits for it (at most `patience`).
    pub(crate) fn flush(&self, patience: Duration) {
        let asked = self.shared.flushes_asked.fetch_add(1, Ordering::AcqRel) + 1;
        self.thread.unpark();
        let done = lock(&self.shared.flushes_done);
        let _ = self
            .shared
            .flushed
            .wait_timeout_while(done, patience, |done| *done < asked);
    }

    pub(crate) fn stats(&self) -> &'static Stats {
        &self.shared.stats
    }
}

/// A lock that a panic elsewhere does not poison for good: spans are plain bytes.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The exporter's thread: sleeps, takes each thread's spans, sends them, counts.
fn run(endpoint: &Endpoint, prefix: &Prefix, shared: &Shared) {
    let stats = &shared.stats;
    // What a buffer is swapped for: the one taken last time, emptied.
    let mut spare = Vec::new();
    let mut head = Vec::new();
    loop {
        std::thread::park_timeout(BATCH_EVERY);
        let asked = shared.flushes_asked.load(Ordering::Acquire);
        let buffers = {
            let mut all = lock(&shared.buffers);
            // A thread that ended dropped its handle: its buffer goes once it is empty.
            all.retain(|b| Arc::strong_count(b) > 1 || lock(b).spans > 0);
            all.clone()
        };
        for buffer in buffers {
            let spans = {
                let mut b = lock(&buffer);
                if b.spans == 0 {
                    continue;
                }
                std::mem::swap(&mut b.bytes, &mut spare);
                std::mem::take(&mut b.spans)
            };
            prefix.write(&mut head, spare.len());
            match send(endpoint, &head, &spare) {
                Ok(()) => {
                    stats.exported.fetch_add(spans as u64, Ordering::Relaxed);
                }
                Err(why) => {
                    stats.failed_batches.fetch_add(1, Ordering::Relaxed);
                    stats.dropped.fetch_add(spans as u64, Ordering::Relaxed);
                    warn_limited!(
                        "cannot export {spans} spans to {endpoint}: {why}; they are dropped"
                    );
                }
            }
            spare.clear();
        }
        let mut done = lock(&shared.flushes_done);
        if *done < asked {
            *done = asked;
            shared.flushed.notify_all();
        }
    }
}

/// The start of every export request: the resource and the scope, written once; the spans
/// follow it.
struct Prefix {
    /// `ResourceSpans.resource` and `ScopeSpans.scope`, with their tags and lengths.
    resource: Vec<u8>,
    scope: Vec<u8>,
}

impl Prefix {
    fn new(service: &str) -> Prefix {
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
        Prefix { resource, scope }
    }

    /// Into `head`: an `ExportTraceServiceRequest` up to its spans, which are `spans` bytes
    /// long (written spans, each with its tag and length).
    fn write(&self, head: &mut Vec<u8>, spans: usize) {
        let scope_spans = self.scope.len() + spans;
        let resource_spans = self.resource.len() + 1 + varint_len(scope_spans as u64) + scope_spans;
        head.clear();
        tag(head, 1, LEN);
        varint(head, resource_spans as u64);
        head.extend_from_slice(&self.resource);
        tag(head, 2, LEN);
        varint(head, scope_spans as u64);
        head.extend_from_slice(&self.scope);
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
#[inline]
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

#[inline]
fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

#[inline]
fn varint(out: &mut Vec<u8>, mut v: u64) {
    // Tags, lengths, kinds: nearly every varint here fits in one byte.
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn varint_len(v: u64) -> usize {
    let bits = u64::BITS - (v | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

/// A length-delimited field: bytes, a string or a message.
#[inline]
fn delimited(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(out, field, LEN);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// POSTs one batch, `head` then `spans`; `Err` with why when it was not taken (a 2xx
/// answer).
fn send(endpoint: &Endpoint, head: &[u8], spans: &[u8]) -> Result<(), String> {
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
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path,
        head.len() + spans.len()
    );
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.write_all(head))
        .and_then(|()| stream.write_all(spans))
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
        let bytes = encode("svc", &spans);
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
    }

    /// An export request of `spans`, written as a thread's buffer and the exporter's prefix
    /// write it.
    fn encode(service: &str, spans: &[Span]) -> Vec<u8> {
        let mut buffer = Buffer::default();
        for span in spans {
            buffer.span.clear();
            write_span(&mut buffer.span, &mut buffer.address, span);
            delimited(&mut buffer.bytes, 2, &buffer.span);
        }
        let mut body = Vec::new();
        Prefix::new(service).write(&mut body, buffer.bytes.len());
        body.extend_from_slice(&buffer.bytes);
        body
    }

    /// Spans recorded on several threads reach the collector, each once.
    #[test]
    fn spans_from_many_threads_are_sent_each_once() {
        let receiver = ankh_test_support::otlp::Receiver::start();
        let endpoint: Endpoint = receiver.endpoint().parse().unwrap();
        let exporter: &'static Exporter =
            Box::leak(Box::new(Exporter::start(endpoint, "t").unwrap()));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        exporter.record(&span(None, vec![("n", Attr::Int(1))]));
                    }
                });
            }
        });
        exporter.flush(Duration::from_secs(10));
        let spans = receiver.wait_for(Duration::from_secs(10), |s| s.len() >= 4000);
        assert_eq!(spans.len(), 4000);
        let posts = receiver.posts();
        assert!(posts >= 4, "one post or more per thread: {posts}");
        assert_eq!(exporter.stats().exported.load(Ordering::Relaxed), 4000);
        assert_eq!(exporter.stats().dropped.load(Ordering::Relaxed), 0);
    }

    /// While the collector does not answer, a thread's buffer stops at its bound: the spans
    /// past it are dropped and counted, and recording never waits.
    #[test]
    fn a_thread_buffers_no_more_than_its_bound() {
        // Accepted by the kernel, never answered: the exporter waits in its first send.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint: Endpoint = format!("http://{}", silent.local_addr().unwrap())
            .parse()
            .unwrap();
        let exporter: &'static Exporter =
            Box::leak(Box::new(Exporter::start(endpoint, "t").unwrap()));
        let one = {
            let mut b = Buffer::default();
            write_span(&mut b.span, &mut b.address, &span(None, Vec::new()));
            delimited(&mut b.bytes, 2, &b.span);
            b.bytes.len()
        };
        // The exporter takes one buffer at most (a batch, or what it found on waking) before
        // it waits; twice the bound is more than both.
        let written = 2 * (THREAD_BYTES / one + BATCH_SPANS);
        let started = std::time::Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..written {
                    exporter.record(&span(None, Vec::new()));
                }
            });
        });
        assert!(started.elapsed() < SEND_TIMEOUT, "recording waited");
        let dropped = exporter.stats().dropped.load(Ordering::Relaxed) as usize;
        assert!(
            dropped >= written - 2 * (THREAD_BYTES / one + 1) - BATCH_SPANS,
            "{dropped} of {written} dropped"
        );
        assert_eq!(exporter.stats().exported.load(Ordering::Relaxed), 0);
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
