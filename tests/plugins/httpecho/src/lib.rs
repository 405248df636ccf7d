//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then serve it with
//! ankh (`/httpecho/...`) or `wasmtime serve` (`/...`).
//!
//! A `wasi:http/proxy` component written with the `wasip2` crate's bindings alone (no ankh
//! SDK), for ankh's wasi:http tests. It is written for `/`, as for `wasmtime serve`; ankh
//! passes it the path below its mount.
//! - `/`: `hello from wasi:http` as text
//! - `/echo`: the request's body back, with `x-method`, `x-path` (path and query) and each
//!   request header as `x-req-NAME`, in order (repeated headers repeated)
//! - `/status?code=N`: an empty response with status N
//! - `/big?bytes=N[&before=1]`: N bytes of text (a repeating alphabet), written in 4 KiB writes,
//!   after `response-outparam.set`, or all of them before it with `before=1`
//! - `/unfinished`: sets a response, writes a little, and returns without finishing the body
//! - `/count`: how many requests this instance has handled, this one included
//! - `/length`: `five!` with the guest's own (right) `content-length: 5`; for HEAD, that
//!   length and no body, and the guest then traps (as an axum handler does)
//! - `/trailers`: `body before trailers`, finished with a trailer `x-trailer: t`
//! - `/after?ms=N`: answers `answered` in full, then waits N ms and prints `after N ms` on
//!   stdout; `/after?ms=N&trap=1` panics instead of printing
//! - `/echo` also answers `x-authority` (the request's authority) and `x-scheme`
//! - anything else: 404 `not found`

use std::sync::atomic::{AtomicU64, Ordering};

use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam, Scheme,
};

/// Requests this instance has handled.
static HANDLED: AtomicU64 = AtomicU64::new(0);

struct Echo;

/// The route: the path without the query, and the query.
fn route(path_with_query: &str) -> (&str, &str) {
    path_with_query
        .split_once('?')
        .unwrap_or((path_with_query, ""))
}

fn param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

fn method_name(m: &Method) -> String {
    match m {
        Method::Get => "GET".into(),
        Method::Head => "HEAD".into(),
        Method::Post => "POST".into(),
        Method::Put => "PUT".into(),
        Method::Delete => "DELETE".into(),
        Method::Connect => "CONNECT".into(),
        Method::Options => "OPTIONS".into(),
        Method::Trace => "TRACE".into(),
        Method::Patch => "PATCH".into(),
        Method::Other(o) => o.clone(),
    }
}

/// Reads the whole request body.
fn read_body(request: &IncomingRequest) -> Vec<u8> {
    let body = request.consume().expect("the body is consumed once");
    let stream = body.stream().expect("the stream is taken once");
    let mut out = Vec::new();
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        out.extend_from_slice(&chunk);
    }
    drop(stream);
    out
}

/// Writes `bytes` into `body` in writes of at most 4 KiB.
fn write_all(body: &OutgoingBody, bytes: &[u8]) {
    let stream = body.write().expect("the stream is taken once");
    for chunk in bytes.chunks(4096) {
        stream
            .blocking_write_and_flush(chunk)
            .expect("the host takes the body");
    }
}

fn respond(out: ResponseOutparam, status: u16, headers: &[(&str, Vec<u8>)], body: &[u8]) {
    let fields = Fields::new();
    for (name, value) in headers {
        fields.append(name, value).expect("valid header");
    }
    let response = OutgoingResponse::new(fields);
    response.set_status_code(status).expect("valid status");
    let outgoing = response.body().expect("the body is taken once");
    ResponseOutparam::set(out, Ok(response));
    write_all(&outgoing, body);
    OutgoingBody::finish(outgoing, None).expect("the body ends");
}

impl wasip2::exports::http::incoming_handler::Guest for Echo {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let handled = HANDLED.fetch_add(1, Ordering::Relaxed) + 1;
        let target = request.path_with_query().unwrap_or_default();
        let (path, query) = route(&target);
        let text = || vec![("content-type", b"text/plain".to_vec())];
        match path {
            "/" => respond(out, 200, &text(), b"hello from wasi:http\n"),
            "/echo" => {
                let scheme = match request.scheme() {
                    Some(Scheme::Http) => "http".to_owned(),
                    Some(Scheme::Https) => "https".to_owned(),
                    Some(Scheme::Other(other)) => other,
                    None => "none".to_owned(),
                };
                let mut headers = vec![
                    ("x-method", method_name(&request.method()).into_bytes()),
                    ("x-path", target.clone().into_bytes()),
                    (
                        "x-authority",
                        request.authority().unwrap_or_default().into_bytes(),
                    ),
                    ("x-scheme", scheme.into_bytes()),
                ];
                let entries = request.headers().entries();
                let names: Vec<String> =
                    entries.iter().map(|(n, _)| format!("x-req-{n}")).collect();
                for ((_, value), name) in entries.iter().zip(&names) {
                    headers.push((name.as_str(), value.clone()));
                }
                let body = read_body(&request);
                respond(out, 200, &headers, &body);
            }
            "/status" => {
                let code = param(query, "code")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(400);
                respond(out, code, &[], b"");
            }
            "/big" => {
                let n: usize = param(query, "bytes")
                    .and_then(|b| b.parse().ok())
                    .unwrap_or(0);
                // The repeating alphabet, made by doubling (a memcpy at a time, so that making
                // a big body costs the guest little).
                let mut bytes = Vec::with_capacity(n);
                bytes.extend((0..26.min(n)).map(|i| b'a' + i as u8));
                while bytes.len() < n {
                    bytes.extend_from_within(..bytes.len().min(n - bytes.len()));
                }
                let headers = Fields::new();
                headers
                    .append("content-type", b"text/plain")
                    .expect("a valid header");
                let response = OutgoingResponse::new(headers);
                let outgoing = response.body().expect("the body is taken once");
                if param(query, "before") == Some("1") {
                    // The whole body first, then the response: the host must not wait on us.
                    write_all(&outgoing, &bytes);
                    ResponseOutparam::set(out, Ok(response));
                } else {
                    ResponseOutparam::set(out, Ok(response));
                    write_all(&outgoing, &bytes);
                }
                OutgoingBody::finish(outgoing, None).expect("the body ends");
            }
            "/after" => {
                let ms: u64 = param(query, "ms").and_then(|m| m.parse().ok()).unwrap_or(0);
                respond(out, 200, &text(), b"answered");
                wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
                assert!(
                    param(query, "trap") != Some("1"),
                    "trapping after the response"
                );
                println!("after {ms} ms");
            }
            "/count" => respond(out, 200, &text(), handled.to_string().as_bytes()),
            "/length" => {
                let mut headers = text();
                headers.push(("content-length", b"5".to_vec()));
                // HEAD as axum answers it: GET's length, and no body, so finishing the body
                // fails and the guest traps after setting its response.
                let body: &[u8] = if matches!(request.method(), Method::Head) {
                    b""
                } else {
                    b"five!"
                };
                respond(out, 200, &headers, body);
            }
            "/trailers" => {
                let response = OutgoingResponse::new(Fields::new());
                let outgoing = response.body().expect("the body is taken once");
                ResponseOutparam::set(out, Ok(response));
                write_all(&outgoing, b"body before trailers");
                let trailers = Fields::new();
                trailers.append("x-trailer", b"t").expect("a valid trailer");
                OutgoingBody::finish(outgoing, Some(trailers)).expect("the body ends");
            }
            "/unfinished" => {
                let response = OutgoingResponse::new(Fields::new());
                let outgoing = response.body().expect("the body is taken once");
                ResponseOutparam::set(out, Ok(response));
                write_all(&outgoing, b"partial");
                // Neither finished nor dropped: the body never ends.
                std::mem::forget(outgoing);
            }
            _ => respond(out, 404, &text(), b"not found\n"),
        }
    }
}

wasip2::http::proxy::export!(Echo);
