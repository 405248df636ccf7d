//! A real OTLP/HTTP receiver for the trace tests: it binds 127.0.0.1:0, takes
//! `POST /v1/traces` with a protobuf body as a collector does, decodes it with
//! `opentelemetry-proto`'s messages and keeps the spans; it answers anything else 404.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;

/// One span as received, its ids in hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    /// The `tracestate` it was recorded with.
    pub trace_state: String,
    pub name: String,
    /// OTLP's span kind: 1 internal, 2 server, 3 client.
    pub kind: i32,
    /// Attributes as text (numbers written in decimal).
    pub attributes: Vec<(String, String)>,
    /// The `process.pid` of the resource that sent it.
    pub pid: String,
    /// Its status is an error.
    pub error: bool,
    /// Its status's message.
    pub status: String,
    /// Its flags say whether its parent is in another process: `None` when they do not say.
    pub remote_parent: Option<bool>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// Export requests taken (answered 200).
    posts: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the OTLP receiver");
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let posts = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, counted, stopped) = (spans.clone(), posts.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (kept, counted) = (kept.clone(), counted.clone());
                std::thread::spawn(move || serve(conn, &kept, &counted));
            }
        });
        Receiver {
            addr,
            spans,
            posts,
            stop,
        }
    }

    /// The endpoint to give ankh (`--otlp-endpoint`).
    pub fn endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many export requests it took.
    pub fn posts(&self) -> usize {
        self.posts.load(Ordering::Acquire)
    }

    /// Waits until `done` holds for the spans received; fails after `patience`.
    pub fn wait_for(
        &self,
        patience: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let started = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                started.elapsed() < patience,
                "the spans never arrived; received: {spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// One connection: requests until it closes.
fn serve(conn: TcpStream, kept: &Mutex<Vec<ReceivedSpan>>, posts: &AtomicUsize) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target_ok = line.starts_with("POST /v1/traces ");
        let mut length = 0usize;
        let mut close = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("connection") {
                    close = value.eq_ignore_ascii_case("close");
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let status = match ExportTraceServiceRequest::decode(body.as_slice()) {
            Ok(request) if target_ok => {
                kept.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(spans_of(request));
                posts.fetch_add(1, Ordering::AcqRel);
                "200 OK"
            }
            Ok(_) => "404 Not Found",
            Err(_) => "400 Bad Request",
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
        );
        if writer.write_all(answer.as_bytes()).is_err() || close {
            return;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(n)) => n.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

fn spans_of(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let pid = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "process.pid")
            .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                out.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    trace_state: span.trace_state.clone(),
                    name: span.name,
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|a| {
                            (
                                a.key.clone(),
                                text(a.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect(),
                    pid: pid.clone(),
                    error: span.status.as_ref().is_some_and(|s| s.code == 2),
                    status: span
                        .status
                        .as_ref()
                        .map(|s| s.message.clone())
                        .unwrap_or_default(),
                    // OTLP's `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE` and `..._IS_REMOTE`.
                    remote_parent: (span.flags & 0x100 != 0).then_some(span.flags & 0x200 != 0),
                });
            }
        }
    }
    out
}
