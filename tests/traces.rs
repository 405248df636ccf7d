//! Traces (issue 36): a request's `traceparent` is read, its spans (the request, the plugin
//! call, each key-value operation, each outbound call, WebSocket events, scheduled jobs) go to
//! a real OTLP receiver over HTTP/protobuf, and the context crosses an outbound call into a
//! second ankh process, whose spans hang under the first's; the access log carries the trace
//! id. Without an endpoint the context is still logged and passed on.

use crate::harness::{Options, PATIENCE, TestServer, plugins};
use crate::otlp::{ReceivedSpan, Receiver};

/// The client's trace and span.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// The client's vendors' state, passed on with the trace.
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

const SERVER: i32 = 2;
const CLIENT: i32 = 3;

/// `B`: kvprobe, `A`: probe granted `B`'s origin; both export to `otlp` when given.
fn pair(otlp: Option<&Receiver>) -> (TestServer, TestServer) {
    let with = |o: Options| match otlp {
        Some(r) => o.flag("--otlp-endpoint", r.endpoint()),
        None => o,
    };
    let b = with(Options::default().plugin(plugins::KVPROBE)).start();
    let a = with(Options::default().plugin(plugins::PROBE).file(
        "probe.toml",
        format!("[capabilities]\nhttp = [\"http://{}\"]\n", b.addr).as_bytes(),
    ))
    .start();
    (a, b)
}

/// `GET /probe/fetch` on `a`, which calls `b`'s `/kvprobe/get?key=k`, with the client's
/// `traceparent` and `tracestate`.
fn call_through(a: &TestServer, b: &TestServer) -> String {
    let target = format!("http://{}/kvprobe/get%3Fkey%3Dk", b.addr);
    let request = format!(
        "GET /probe/fetch?url={target} HTTP/1.1\r\nHost: x\r\ntraceparent: 00-{TRACE}-{CLIENT_SPAN}-01\r\ntracestate: {STATE}\r\nConnection: close\r\n\r\n"
    );
    a.raw(request.as_bytes())
}

fn one<'a>(
    spans: &'a [ReceivedSpan],
    what: &str,
    pick: impl Fn(&ReceivedSpan) -> bool,
) -> &'a ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|s| pick(s)).collect();
    assert_eq!(found.len(), 1, "{what}: {found:#?}\nall: {spans:#?}");
    found[0]
}

/// The spans of one request through two processes, linked parent to child, in one trace.
#[test]
fn spans_follow_a_request_across_an_outbound_call_into_another_process() {
    let otlp = Receiver::start();
    let (a, b) = pair(Some(&otlp));
    let answer = call_through(&a, &b);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let spans = otlp.wait_for(PATIENCE, |s| {
        s.iter().filter(|s| s.trace_id == TRACE).count() >= 6
    });
    let ours: Vec<_> = spans.into_iter().filter(|s| s.trace_id == TRACE).collect();
    // A: its server span is the client's child.
    let a_server = one(&ours, "A's request", |s| {
        s.kind == SERVER && s.parent == CLIENT_SPAN
    });
    assert_eq!(a_server.attribute("ankh.plugin"), Some("probe"));
    assert_eq!(a_server.attribute("http.response.status_code"), Some("200"));
    assert_eq!(a_server.remote_parent, Some(true), "{a_server:?}");
    let a_call = one(&ours, "A's plugin call", |s| s.parent == a_server.span_id);
    assert_eq!(a_call.name, "plugin call");
    assert_eq!(a_call.remote_parent, Some(false), "{a_call:?}");
    let a_out = one(&ours, "A's outbound call", |s| {
        s.kind == CLIENT && s.parent == a_call.span_id
    });
    assert_eq!(a_out.name, "GET");
    assert_eq!(
        a_out.attribute("server.port"),
        Some(b.addr.port().to_string().as_str())
    );
    // B: its server span is A's outbound call's child, in another process.
    let b_server = one(&ours, "B's request", |s| {
        s.kind == SERVER && s.parent == a_out.span_id
    });
    assert_ne!(
        b_server.pid, a_server.pid,
        "both spans came from one process"
    );
    assert_eq!(b_server.attribute("ankh.plugin"), Some("kvprobe"));
    assert_eq!(b_server.remote_parent, Some(true), "{b_server:?}");
    // The client's `tracestate` crossed both processes.
    assert_eq!(a_server.trace_state, STATE);
    assert_eq!(b_server.trace_state, STATE);
    let b_call = one(&ours, "B's plugin call", |s| s.parent == b_server.span_id);
    let kv = one(&ours, "B's kv.get", |s| s.parent == b_call.span_id);
    assert_eq!(kv.name, "kv.get");
    // The access log of each carries the trace id.
    a.wait_for_log(&format!("trace={TRACE}"));
    b.wait_for_log(&format!("trace={TRACE}"));
}

/// A request without a `traceparent` starts a trace of its own when ankh exports, and the
/// exporter's counters say what it sent.
#[test]
fn a_request_without_a_traceparent_starts_a_trace() {
    let otlp = Receiver::start();
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--otlp-endpoint", otlp.endpoint())
        .flag("--admin", "127.0.0.1:0")
        .start();
    assert_eq!(s.get("/probe/ok").0, 200);
    let spans = otlp.wait_for(PATIENCE, |s| {
        s.iter().any(|s| s.kind == SERVER && s.parent.is_empty())
    });
    let root = spans
        .iter()
        .find(|s| s.kind == SERVER && s.parent.is_empty())
        .unwrap();
    assert_eq!(root.trace_id.len(), 32);
    assert_ne!(root.trace_id, "0".repeat(32));
    s.wait_for_log(&format!("trace={}", root.trace_id));
    crate::metrics::wait_metric(
        crate::metrics::admin_addr(&s),
        "ankh_trace_spans_exported_total",
        &[],
        |v| v >= 2.0,
    );
}

/// A server that stops sends the spans of its last requests before it exits: they do not
/// wait for the exporter's next round.
#[test]
fn a_stopping_server_sends_its_last_spans_first() {
    let otlp = Receiver::start();
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--otlp-endpoint", otlp.endpoint())
        .start();
    assert_eq!(s.get("/probe/ok").0, 200);
    let status = s.terminate();
    assert!(status.success(), "{status}");
    // Received before the exit, or never.
    let spans = otlp.spans();
    let served = spans
        .iter()
        .find(|s| s.attribute("url.path") == Some("/probe/ok"));
    assert!(served.is_some(), "the last spans were lost: {spans:#?}");
    assert_eq!(served.unwrap().attribute("ankh.plugin"), Some("probe"));
}

/// `--trace-sample 0`: a new trace is not recorded, but it has an id, logged; a request whose
/// `traceparent` says sampled is recorded all the same.
#[test]
fn sampling_leaves_new_traces_unrecorded_and_follows_the_callers_flag() {
    let otlp = Receiver::start();
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--otlp-endpoint", otlp.endpoint())
        .flag("--trace-sample", "0")
        .start();
    assert_eq!(s.get("/probe/ok").0, 200);
    let log = s.wait_for_log("GET /probe/ok 200");
    let line = log
        .lines()
        .find(|l| l.contains("GET /probe/ok 200"))
        .unwrap();
    let unsampled = line.split("trace=").nth(1).expect("a trace id").trim();
    assert_eq!(unsampled.len(), 32, "{line}");
    let answer = s.raw(
        format!(
            "GET /probe/ok?second HTTP/1.1\r\nHost: x\r\ntraceparent: 00-{TRACE}-{CLIENT_SPAN}-01\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The spans leave in order: once the second request's are in, the first's would be.
    let spans = otlp.wait_for(PATIENCE, |spans| {
        spans
            .iter()
            .any(|s| s.trace_id == TRACE && s.kind == SERVER)
    });
    assert!(
        !spans.iter().any(|s| s.trace_id == unsampled),
        "an unsampled trace was exported: {spans:#?}"
    );
}

/// Without an endpoint nothing is exported, and the client's context still reaches the
/// access log of both processes: passed on unchanged by the untraced hop.
#[test]
fn without_an_endpoint_the_context_is_logged_and_passed_on() {
    let (a, b) = pair(None);
    let answer = call_through(&a, &b);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    a.wait_for_log(&format!("trace={TRACE}"));
    b.wait_for_log(&format!("trace={TRACE}"));
    // A request without one has no trace field.
    assert_eq!(a.get("/probe/ok").0, 200);
    let log = a.wait_for_log("GET /probe/ok 200");
    let line = log
        .lines()
        .find(|l| l.contains("GET /probe/ok 200"))
        .unwrap();
    assert!(!line.contains("trace="), "{line}");
}

/// A scheduled job is a trace of its own, with its key-value operations under it.
#[test]
fn a_scheduled_job_is_a_trace_with_its_kv_operations_under_it() {
    let otlp = Receiver::start();
    let _s = Options::default()
        .plugin(plugins::JOBSPROBE)
        .file(
            "jobsprobe.toml",
            b"[[schedule]]\nname = \"count\"\nevery = \"200ms\"\n",
        )
        .flag("--otlp-endpoint", otlp.endpoint())
        .start();
    let spans = otlp.wait_for(PATIENCE, |spans| {
        spans.iter().any(|job| {
            job.name == "scheduled job"
                && spans
                    .iter()
                    .any(|kv| kv.name == "kv.increment" && kv.parent == job.span_id)
        })
    });
    let job = spans.iter().find(|s| s.name == "scheduled job").unwrap();
    assert_eq!(job.attribute("ankh.schedule"), Some("count"));
    assert!(job.parent.is_empty());
}

/// A plugin's own log lines carry the trace id of the request they were written in.
#[test]
fn a_plugins_log_lines_carry_the_trace_id() {
    let s = Options::default().plugin(plugins::PROBE).start();
    let answer = s.raw(
        format!(
            "GET /probe/sleep?ms=1 HTTP/1.1\r\nHost: x\r\ntraceparent: 00-{TRACE}-{CLIENT_SPAN}-01\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let log = s.wait_for_log("sleeping 1");
    let line = log.lines().find(|l| l.contains("sleeping 1")).unwrap();
    assert!(
        line.contains(&format!("trace=\"{TRACE}\"")) || line.contains(&format!("trace={TRACE}")),
        "{line}"
    );
}

/// Each WebSocket event is a span (a trace of its own: a connection outlives any request).
#[test]
fn websocket_events_are_spans() {
    let otlp = Receiver::start();
    let s = Options::default()
        .plugin(plugins::WSPROBE)
        .flag("--otlp-endpoint", otlp.endpoint())
        .start();
    let mut ws = crate::ws::client(&s, "/wsprobe/");
    crate::ws::send(&mut ws, "still");
    let _ = crate::ws::text(&mut ws);
    let spans = otlp.wait_for(PATIENCE, |spans| {
        ["websocket open", "websocket message"]
            .iter()
            .all(|name| spans.iter().any(|s| s.name == *name))
    });
    let message = spans
        .iter()
        .find(|s| s.name == "websocket message")
        .unwrap();
    assert_eq!(message.attribute("ankh.plugin"), Some("wsprobe"));
    assert!(message.attribute("ankh.websocket").is_some());
}
