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
//! - `/lines?n=N&ms=M`: `line I` for I in 0..N, one a line, M ms apart (a body over time)
//! - `/gated?gate=HOST:PORT`: `first`, then a GET to `http://HOST:PORT/` (granted by the
//!   test's policy), then `second` and what the gate answered: the test answers the gate only
//!   once it has read `first`, which proves the first piece left before the handler ended
//! - `/stream?bytes=N`: N bytes of the repeating alphabet in writes of 4,082 bytes (a
//!   multiple of 26, within the 4 KiB a write may carry), made from one buffer: any size, in
//!   little guest memory
//! - `/relay?from=HOST:PORT`: GETs `http://HOST:PORT/` and relays its body as it arrives,
//!   4 KiB at a time, with the upstream's `content-length` (a proxy of a large download)
//! - `/ticks?n=N&ms=M`: N lines, M ms apart, each the wall-clock time it was written at, in
//!   nanoseconds since the epoch (a stream of events whose latency a client can measure;
//!   give the plugin `precise_clocks` for full resolution)
//! - `/upload?to=HOST:PORT&bytes=N`: POSTs N bytes of the repeating alphabet to
//!   `http://HOST:PORT/`, written in 4,082-byte pieces after the request is sent (an upload
//!   streamed through), and answers the upstream's status and body, or the error
//! - `/drip`: reads the request body as it arrives and answers, streamed, `read N` for each
//!   read (at most 64 KiB), then `trailer NAME: VALUE` for each request trailer and `end`;
//!   or, when a read fails, `error: WHY` (the wasi:http error code) and the body ends
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

/// Reads the whole request body, into room reserved from its Content-Length (up to 32 MiB).
///
/// Without the reservation the buffer grows by doubling from the size of the first piece read,
/// and which size that is depends on how the bytes arrived: a 16 MiB body could then hold
/// close to 3× its size in the heap at its last growth, near the default 64 MiB memory cap.
fn read_body(request: &IncomingRequest) -> Vec<u8> {
    let declared = request
        .headers()
        .get("content-length")
        .first()
        .and_then(|v| std::str::from_utf8(v).ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    let body = request.consume().expect("the body is consumed once");
    let stream = body.stream().expect("the stream is taken once");
    let mut out = Vec::with_capacity(declared.min(32 << 20));
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

/// Sets a 200 response with `headers` and returns its body and the body's stream.
fn start(
    out: ResponseOutparam,
    headers: &[(&str, Vec<u8>)],
) -> (OutgoingBody, wasip2::io::streams::OutputStream) {
    let fields = Fields::new();
    for (name, value) in headers {
        fields.append(name, value).expect("valid header");
    }
    let response = OutgoingResponse::new(fields);
    let outgoing = response.body().expect("the body is taken once");
    ResponseOutparam::set(out, Ok(response));
    let stream = outgoing.write().expect("the stream is taken once");
    (outgoing, stream)
}

/// `GET http://AUTHORITY/`: the response, its body unread.
fn fetch(authority: &str) -> Result<wasip2::http::types::IncomingResponse, String> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::OutgoingRequest;
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some("/"));
    let future = outgoing_handler::handle(request, None).map_err(|e| format!("error {e:?}"))?;
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => Ok(response),
        other => Err(format!("error {other:?}")),
    }
}

/// `POST http://AUTHORITY/` with a body of `bytes` bytes of the repeating alphabet, written
/// in pieces of 4,082 bytes after the request is sent: its status and body as text, or the
/// error.
fn upload(authority: &str, mut bytes: u64) -> String {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::OutgoingRequest;
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_method(&Method::Post);
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some("/"));
    let body = request.body().expect("the body is taken once");
    let future = match outgoing_handler::handle(request, None) {
        Ok(future) => future,
        Err(e) => return format!("error {e:?}"),
    };
    let stream = body.write().expect("the stream is taken once");
    let piece: Vec<u8> = (0..4082).map(|i| b'a' + (i % 26) as u8).collect();
    while bytes > 0 {
        let len = bytes.min(piece.len() as u64) as usize;
        if let Err(e) = stream.blocking_write_and_flush(&piece[..len]) {
            return format!("error writing: {e:?}");
        }
        bytes -= len as u64;
    }
    drop(stream);
    if let Err(e) = OutgoingBody::finish(body, None) {
        return format!("error finishing: {e:?}");
    }
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => status_and_body(response),
        other => format!("error {other:?}"),
    }
}

/// A response's status and body, as text.
fn status_and_body(response: wasip2::http::types::IncomingResponse) -> String {
    let body = response.consume().expect("the body is consumed once");
    let stream = body.stream().expect("the stream is taken once");
    let mut text = Vec::new();
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        text.extend_from_slice(&chunk);
    }
    format!("{} {}", response.status(), String::from_utf8_lossy(&text))
}

/// `GET http://AUTHORITY/`: its status and body as text, or the error.
fn get(authority: &str) -> String {
    match fetch(authority) {
        Ok(response) => status_and_body(response),
        Err(e) => e,
    }
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
            "/lines" => {
                let n: u32 = param(query, "n").and_then(|v| v.parse().ok()).unwrap_or(3);
                let ms: u64 = param(query, "ms").and_then(|v| v.parse().ok()).unwrap_or(0);
                let (outgoing, stream) = start(out, &text());
                for i in 0..n {
                    if i > 0 && ms > 0 {
                        wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
                    }
                    if stream
                        .blocking_write_and_flush(format!("line {i}\n").as_bytes())
                        .is_err()
                    {
                        return;
                    }
                }
                drop(stream);
                OutgoingBody::finish(outgoing, None).expect("the body ends");
            }
            "/ticks" => {
                let n: u32 = param(query, "n").and_then(|v| v.parse().ok()).unwrap_or(3);
                let ms: u64 = param(query, "ms").and_then(|v| v.parse().ok()).unwrap_or(0);
                let (outgoing, stream) = start(out, &text());
                for i in 0..n {
                    if i > 0 && ms > 0 {
                        wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
                    }
                    let now = wasip2::clocks::wall_clock::now();
                    let ns = u128::from(now.seconds) * 1_000_000_000 + u128::from(now.nanoseconds);
                    if stream
                        .blocking_write_and_flush(format!("{ns}\n").as_bytes())
                        .is_err()
                    {
                        return;
                    }
                }
                drop(stream);
                OutgoingBody::finish(outgoing, None).expect("the body ends");
            }
            "/gated" => {
                let gate = param(query, "gate").unwrap_or("127.0.0.1:9").to_owned();
                let (outgoing, stream) = start(out, &text());
                stream
                    .blocking_write_and_flush(b"first\n")
                    .expect("the host takes the body");
                let answer = get(&gate);
                stream
                    .blocking_write_and_flush(format!("second {answer}\n").as_bytes())
                    .expect("the host takes the body");
                drop(stream);
                OutgoingBody::finish(outgoing, None).expect("the body ends");
            }
            "/stream" => {
                let mut n: u64 = param(query, "bytes")
                    .and_then(|b| b.parse().ok())
                    .unwrap_or(0);
                let piece: Vec<u8> = (0..4082).map(|i| b'a' + (i % 26) as u8).collect();
                let (outgoing, stream) = start(out, &[("content-type", b"text/plain".to_vec())]);
                while n > 0 {
                    let len = n.min(piece.len() as u64) as usize;
                    if let Err(e) = stream.blocking_write_and_flush(&piece[..len]) {
                        // The client is gone: said on stderr, which the host logs.
                        eprintln!("stream: the write failed: {e:?}");
                        return;
                    }
                    n -= len as u64;
                }
                drop(stream);
                OutgoingBody::finish(outgoing, None).expect("the body ends");
            }
            "/relay" => {
                let from = param(query, "from").unwrap_or("127.0.0.1:9").to_owned();
                let upstream = match fetch(&from) {
                    Ok(upstream) => upstream,
                    Err(e) => return respond(out, 502, &text(), e.as_bytes()),
                };
                let mut headers = vec![("content-type", b"application/octet-stream".to_vec())];
                if let Some((_, length)) = upstream
                    .headers()
                    .entries()
                    .into_iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                {
                    headers.push(("content-length", length));
                }
                let body = upstream.consume().expect("the body is consumed once");
                let input = body.stream().expect("the stream is taken once");
                let (outgoing, output) = start(out, &headers);
                while let Ok(piece) = input.blocking_read(4096) {
                    if output.blocking_write_and_flush(&piece).is_err() {
                        return;
                    }
                }
                drop(input);
                drop(output);
                OutgoingBody::finish(outgoing, None).expect("the body ends");
            }
            "/upload" => {
                let to = param(query, "to").unwrap_or("127.0.0.1:9").to_owned();
                let bytes: u64 = param(query, "bytes")
                    .and_then(|b| b.parse().ok())
                    .unwrap_or(0);
                let answer = upload(&to, bytes);
                respond(out, 200, &text(), answer.as_bytes());
            }
            "/drip" => {
                let body = request.consume().expect("the body is consumed once");
                let input = body.stream().expect("the stream is taken once");
                let (outgoing, output) = start(out, &text());
                let say = |line: String| output.blocking_write_and_flush(line.as_bytes()).is_ok();
                loop {
                    match input.blocking_read(64 * 1024) {
                        Ok(chunk) => {
                            if !say(format!("read {}\n", chunk.len())) {
                                return;
                            }
                        }
                        Err(wasip2::io::streams::StreamError::Closed) => break,
                        Err(wasip2::io::streams::StreamError::LastOperationFailed(e)) => {
                            let code = wasip2::http::types::http_error_code(&e);
                            say(format!("error: {code:?}\n"));
                            drop(input);
                            drop(output);
                            OutgoingBody::finish(outgoing, None).expect("the body ends");
                            return;
                        }
                    }
                }
                drop(input);
                let trailers = wasip2::http::types::IncomingBody::finish(body);
                trailers.subscribe().block();
                if let Some(Ok(Ok(Some(fields)))) = trailers.get() {
                    for (name, value) in fields.entries() {
                        say(format!(
                            "trailer {name}: {}\n",
                            String::from_utf8_lossy(&value)
                        ));
                    }
                }
                say("end\n".to_owned());
                drop(output);
                OutgoingBody::finish(outgoing, None).expect("the body ends");
            }
            _ => respond(out, 404, &text(), b"not found\n"),
        }
    }
}

wasip2::http::proxy::export!(Echo);
