//! Traces: the W3C trace context (`traceparent`) read from requests and passed on by outbound
//! calls, and spans of the request, the plugin call, each key-value operation, each outbound
//! call and each WebSocket event, exported over OTLP (HTTP, protobuf) when an endpoint is
//! configured (`--otlp-endpoint`, see [`export`]).
//!
//! Without an endpoint nothing is recorded: a request that carries a `traceparent` still has
//! its trace id in the access log and the plugin's log lines, and its outbound calls pass the
//! same `traceparent` on (an untraced hop, as the W3C recommendation allows), so a trace
//! crosses ankh whether or not ankh exports. With one, a request without a `traceparent`
//! starts a trace, and every span is sent (sampling is the caller's: a `traceparent` whose
//! sampled flag is off is passed on and not recorded).

pub(crate) mod export;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub use export::Endpoint;

/// A span's place in its trace, as `traceparent` carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    /// The trace id, high half first: two `u64`s rather than a `u128`, whose 16-byte
    /// alignment made every boxed trace an aligned allocation (a slow path of the allocator,
    /// about 300 instructions a request).
    trace: [u64; 2],
    pub span_id: u64,
    /// The caller records this trace (the `sampled` flag).
    pub sampled: bool,
}

/// Longest `tracestate` kept (the W3C limit is 32 members; 512 bytes is what a vendor must
/// at least pass on).
const TRACESTATE_MAX_BYTES: usize = 512;

impl SpanContext {
    /// A `traceparent` value: `00-<32 hex>-<16 hex>-<2 hex>`. A later version is read by its
    /// first four fields, as the recommendation says; version `ff`, all-zero ids, upper-case
    /// hex and anything malformed are not a context.
    pub fn parse(value: &[u8]) -> Option<SpanContext> {
        let ows = |b: &u8| *b == b' ' || *b == b'\t';
        let start = value.iter().position(|b| !ows(b))?;
        let end = value.iter().rposition(|b| !ows(b))? + 1;
        let bytes = &value[start..end];
        if bytes.len() < 55 || (bytes.len() > 55 && bytes[55] != b'-') {
            return None;
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let version = hex(&bytes[0..2])?;
        if version == 0xff || (version == 0 && bytes.len() != 55) {
            return None;
        }
        let trace = [hex(&bytes[3..19])?, hex(&bytes[19..35])?];
        let span_id = hex(&bytes[36..52])?;
        let flags = hex(&bytes[53..55])?;
        (trace != [0, 0] && span_id != 0).then_some(SpanContext {
            trace,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// A context of these ids.
    pub fn new(trace_id: u128, span_id: u64, sampled: bool) -> SpanContext {
        SpanContext {
            trace: [(trace_id >> 64) as u64, trace_id as u64],
            span_id,
            sampled,
        }
    }

    /// The 128-bit trace id.
    pub fn trace_id(&self) -> u128 {
        (u128::from(self.trace[0]) << 64) | u128::from(self.trace[1])
    }

    /// The `traceparent` value that names this span.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id(),
            self.span_id,
            u8::from(self.sampled)
        )
    }

    /// A new span in the same trace.
    pub fn child(&self) -> SpanContext {
        SpanContext {
            span_id: new_span_id(),
            ..*self
        }
    }

    /// The first span of a new trace, sampled as `--trace-sample` says.
    pub fn root() -> SpanContext {
        let trace = [random(), random()];
        SpanContext {
            trace,
            span_id: new_span_id(),
            sampled: sample(trace[1], SAMPLE_BELOW.load(Ordering::Relaxed)),
        }
    }

    /// The trace id as logs and OTLP write it: 32 hex digits.
    pub fn trace_hex(&self) -> String {
        let mut out = String::with_capacity(32);
        crate::text::push_trace_id(&mut out, self.trace_id());
        out
    }
}

/// The trace of one request: the span ankh makes of it (the server span), and what the
/// client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTrace {
    /// The request's span (recorded only with an exporter).
    pub span: SpanContext,
    /// The client's span, from its `traceparent`.
    pub parent: Option<SpanContext>,
    pub tracestate: Option<Arc<str>>,
    /// When the request was complete, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
}

impl RequestTrace {
    /// The trace of a request with these headers: a child of its `traceparent`, or a new
    /// trace when ankh exports; `None` when it has none and nothing is exported (the cost
    /// of tracing off is this look at the header names).
    pub fn for_headers(headers: &[(String, Vec<u8>)]) -> Option<Box<RequestTrace>> {
        let header = |name: &str| crate::proto::header(headers, name);
        let parent = header("traceparent").and_then(SpanContext::parse);
        let span = match parent {
            Some(parent) => parent.child(),
            None if exporting() => SpanContext::root(),
            None => return None,
        };
        let tracestate = parent
            .and_then(|_| header("tracestate"))
            .filter(|v| v.len() <= TRACESTATE_MAX_BYTES)
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(Arc::from);
        Some(Box::new(RequestTrace {
            span,
            parent,
            tracestate,
            start_ns: now_ns(),
        }))
    }

    /// What the request's calls pass on and parent their spans to: the request's span when
    /// it is recorded, else the client's own (an untraced hop).
    pub fn context(&self) -> SpanContext {
        match self.parent {
            Some(parent) if !self.recorded() => parent,
            _ => self.span,
        }
    }

    /// Whether its spans are recorded: an exporter is set and the caller samples.
    pub fn recorded(&self) -> bool {
        self.span.sampled && exporting()
    }
}

/// What a span is to its trace (OTLP's span kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal,
    Server,
    Client,
}

/// Text in a span: a name or an attribute's value, taken as it is (a request's method and
/// path are shared, not copied, on their way to the exporter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    Static(&'static str),
    Shared(Arc<str>),
    Owned(String),
}

impl Text {
    pub fn as_str(&self) -> &str {
        match self {
            Text::Static(s) => s,
            Text::Shared(s) => s,
            Text::Owned(s) => s,
        }
    }
}

impl From<&'static str> for Text {
    fn from(s: &'static str) -> Self {
        Text::Static(s)
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text::Owned(s)
    }
}

impl From<Arc<str>> for Text {
    fn from(s: Arc<str>) -> Self {
        Text::Shared(s)
    }
}

/// A value of a span attribute. Addresses and ids are written out by the exporter's
/// thread, not by the request's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    Text(Text),
    Int(i64),
    /// An IP address, as text.
    Ip(std::net::IpAddr),
    /// An id, as 16 hex digits.
    Hex(u64),
}

/// A finished span, on its way to the exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub context: SpanContext,
    pub parent: Option<u64>,
    /// Its parent is in another process (a `traceparent` that came with the request).
    pub remote_parent: bool,
    pub tracestate: Option<Arc<str>>,
    pub name: Text,
    pub kind: Kind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, Attr)>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// A span being timed: started by [`Timed::start`], sent by [`Timed::end`].
#[derive(Debug)]
pub struct Timed {
    pub context: SpanContext,
    parent: Option<u64>,
    name: Text,
    kind: Kind,
    start_ns: u64,
}

impl Timed {
    /// A child of `parent` starting now, if spans are recorded (an exporter is set, and the
    /// trace is sampled).
    pub fn start(parent: Option<SpanContext>, name: impl Into<Text>, kind: Kind) -> Option<Timed> {
        let parent = parent.filter(|p| p.sampled && exporting())?;
        Some(Timed {
            context: parent.child(),
            parent: Some(parent.span_id),
            name: name.into(),
            kind,
            start_ns: now_ns(),
        })
    }

    /// The first span of a new trace, starting now, if spans are exported and the new trace
    /// is sampled.
    pub fn root(name: impl Into<Text>, kind: Kind) -> Option<Timed> {
        if !exporting() {
            return None;
        }
        let context = SpanContext::root();
        context.sampled.then(|| Timed {
            context,
            parent: None,
            name: name.into(),
            kind,
            start_ns: now_ns(),
        })
    }

    /// Ends the span now and sends it.
    pub fn end(self, attributes: Vec<(&'static str, Attr)>, error: Option<String>) {
        record(Span {
            context: self.context,
            parent: self.parent,
            remote_parent: false,
            tracestate: None,
            name: self.name,
            kind: self.kind,
            start_ns: self.start_ns,
            end_ns: now_ns(),
            attributes,
            error,
        });
    }
}

/// The exporter, once [`install`]ed.
static EXPORTER: OnceLock<export::Exporter> = OnceLock::new();

/// The trace ids of new traces that are sampled: those whose low 56 bits are below this (as
/// OpenTelemetry's trace-id ratio sampler has it, so that every process decides alike).
static SAMPLE_BELOW: AtomicU64 = AtomicU64::new(SAMPLE_ALL);

/// Past every 56-bit value: all sampled.
const SAMPLE_ALL: u64 = 1 << 56;

/// The threshold of a share from 0 to 1.
fn sample_below(share: f64) -> u64 {
    (share.clamp(0.0, 1.0) * SAMPLE_ALL as f64) as u64
}

/// Whether a new trace whose id ends in the 64 bits `low` is sampled under `below`.
fn sample(low: u64, below: u64) -> bool {
    (low & (SAMPLE_ALL - 1)) < below
}

/// Lower-case hex digits (at most 16) as a number; `None` if any is not one.
fn hex(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u64::from(digit))
    })
}

/// Exports spans to `endpoint` from now on (once per process; later calls change nothing),
/// sampling `share` of the new traces.
pub fn install(endpoint: Endpoint, service: &str, share: f64) -> std::io::Result<()> {
    if EXPORTER.get().is_some() {
        return Ok(());
    }
    SAMPLE_BELOW.store(sample_below(share), Ordering::Relaxed);
    let exporter = export::Exporter::start(endpoint, service)?;
    let _ = EXPORTER.set(exporter);
    Ok(())
}

/// Whether spans are exported.
pub fn exporting() -> bool {
    EXPORTER.get().is_some()
}

/// Sends the spans still buffered, waiting at most [`export::FLUSH_PATIENCE`]: a server that
/// stops does not lose the spans of its last requests.
pub fn flush() {
    if let Some(exporter) = EXPORTER.get() {
        exporter.flush(export::FLUSH_PATIENCE);
    }
}

/// Sends a finished span (dropped, and counted, when its thread's buffer is full).
pub fn record(span: Span) {
    if let Some(exporter) = EXPORTER.get()
        && span.context.sampled
    {
        exporter.record(&span);
    }
}

/// The exporter's counters, for `/metrics`.
pub(crate) fn stats() -> Option<&'static export::Stats> {
    EXPORTER.get().map(export::Exporter::stats)
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A span id: random, never zero.
fn new_span_id() -> u64 {
    loop {
        let id = random();
        if id != 0 {
            return id;
        }
    }
}

/// 64 random bits: SplitMix64 over a per-thread state seeded from std's randomly keyed
/// hasher (ids need to be unique, not secret).
fn random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            use std::hash::{BuildHasher, Hash, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            std::thread::current().id().hash(&mut h);
            now_ns().hash(&mut h);
            h.finish()
        });
    }
    STATE.with(|state| {
        let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(next);
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_as_the_recommendation_says() {
        let good = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = SpanContext::parse(good).unwrap();
        assert_eq!(c.trace_id(), 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(c.span_id, 0x00f067aa0ba902b7);
        assert!(c.sampled);
        assert_eq!(c.traceparent().as_bytes(), good);
        let unsampled =
            SpanContext::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.unwrap().sampled);
        // A later version: its first fields, and whatever follows a dash.
        assert!(
            SpanContext::parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_some()
        );
        for bad in [
            &b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"[..],
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"",
        ] {
            assert_eq!(
                SpanContext::parse(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn children_keep_the_trace_and_get_their_own_span() {
        let root = SpanContext::root();
        let child = root.child();
        assert_eq!(child.trace_id(), root.trace_id());
        assert_ne!(child.span_id, root.span_id);
        assert_ne!(SpanContext::root().trace_id(), root.trace_id());
    }

    #[test]
    fn a_share_of_new_traces_is_sampled_by_trace_id() {
        let ids: Vec<u64> = (0..20_000)
            .map(|_| SpanContext::root().trace_id() as u64)
            .collect();
        for share in [0.0, 0.01, 0.25, 0.5, 1.0] {
            let below = sample_below(share);
            let n = ids.iter().filter(|id| sample(**id, below)).count();
            let expected = share * ids.len() as f64;
            assert!(
                (n as f64 - expected).abs() <= 0.02 * ids.len() as f64,
                "{share}: {n} of {}",
                ids.len()
            );
        }
        assert!(ids.iter().all(|id| sample(*id, sample_below(1.0))));
        assert!(!ids.iter().any(|id| sample(*id, sample_below(0.0))));
        // The decision is the trace id's: the same in every process.
        let id = 0xa3ce_929d_0e0e_4736;
        assert_eq!(sample(id, sample_below(0.5)), sample(id, sample_below(0.5)));
    }

    #[test]
    fn without_an_exporter_a_request_is_traced_only_if_it_says_so() {
        assert_eq!(RequestTrace::for_headers(&[]), None);
        let headers = vec![
            (
                "TraceParent".to_owned(),
                b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_vec(),
            ),
            ("tracestate".to_owned(), b"congo=t61rcWkgMzE".to_vec()),
        ];
        let t = RequestTrace::for_headers(&headers).unwrap();
        assert_eq!(t.span.trace_id(), 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(t.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        // Not recorded here: what is passed on is the client's own span.
        assert!(!t.recorded());
        assert_eq!(t.context().span_id, 0x00f067aa0ba902b7);
    }
}
