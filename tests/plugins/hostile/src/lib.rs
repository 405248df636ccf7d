//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`; never served by
//! default.
//!
//! A hostile tenant, for the isolation and bounds tests (issue 11). Every route tries to reach
//! past its sandbox or exhaust a host resource, and reports what the host let it do. All are
//! `GET`s; numbers come from the query.
//!
//! Other plugins' WebSockets (the test passes the victim's connection id, as if guessed):
//! - `/hostile/send?conn=N&text=T`, `/hostile/close?conn=N&code=C`,
//!   `/hostile/subscribe?conn=N&topic=T`, `/hostile/unsubscribe?conn=N&topic=T`:
//!   `ok`, or `error <WsError>`
//! - `/hostile/publish?topic=T&text=X` (or `&bytes=N` for a binary message of N bytes):
//!   `published <n>`, or `error <WsError>`
//!
//! Holding a worker: `/hostile/sleep?ms=N` logs `hostile sleeping` and sleeps;
//! `/hostile/early?ms=N` answers `early` through `http.respond`, then sleeps; `/hostile/spin`
//! computes forever.
//!
//! Host memory: `/hostile/kv-fill?kib=N` stores N KiB values under new keys until the store
//! refuses (`stored <n> then <KvError>`); `/hostile/pollables?n=N` leaks N clock pollables.
//! `/hostile/kv-bounds` asks the store for what no call may have, through the raw WIT (no SDK
//! clamping): a time-to-live of 0, a page of 2^32 - 1 keys, a batch of 1001 keys, a batch of
//! 17 MiB, and a cursor that is not below its prefix; it answers one `name=result` line each.
//!
//! Failures and logs: `/hostile/exit?code=C` calls `exit`; `/hostile/log-forge` logs a message
//! with a forged second line, a 100 KiB message and a field with a newline;
//! `/hostile/header?value=V` answers with header `X-Hostile: V` (control characters included).
//!
//! Clocks: `/hostile/clock` reads both clocks 2000 times and answers
//! `monotonic_step=<ns> wall_step=<ns>`, the largest power of ten (up to 1 s) that divides
//! every reading.
//!
//! Outbound HTTP, through raw `wasi:http/outgoing-handler` (no SDK):
//! `/hostile/http-flood?url=U&n=N` starts N GETs of U at once and waits for them all
//! (`ok <answered> failed <failed>`); `/hostile/http-slow?url=U` asks for a first-byte and
//! between-bytes timeout of an hour (`ok <status>` or `error <ErrorCode>`).
//!
//! WebSocket: `/hostile/ws` upgrades; a text `close:<code>` asks the host to close this very
//! connection with that code (answered `refused <code> <WsError>` when refused), anything else
//! is echoed. `/hostile/bad-upgrade` accepts an upgrade with an invalid header name.

use std::time::Duration;

use ankh_guest::prelude::*;

/// The query parameter `name` as a number, `default` when absent.
fn number(req: &Request, name: &str, default: u64) -> u64 {
    req.query_param(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn conn(req: &Request) -> u64 {
    number(req, "conn", 0)
}

fn report(result: Result<(), ws::WsError>) -> String {
    match result {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("error {e:?}"),
    }
}

fn publish(req: &Request) -> String {
    let topic = req.query_param("topic").unwrap_or_default();
    let message = match req.query_param("bytes") {
        Some(n) => ws::Message::Binary(vec![7; n.parse().unwrap_or(0)]),
        None => ws::Message::Text(req.query_param("text").unwrap_or_default()),
    };
    match ws::publish(&topic, &message) {
        Ok(n) => format!("published {n}"),
        Err(e) => format!("error {e:?}"),
    }
}

fn sleep(req: &Request) -> &'static str {
    log::info("hostile sleeping");
    std::thread::sleep(Duration::from_millis(number(req, "ms", 60_000)));
    "slept"
}

fn early(req: &Request) -> Outcome {
    let _ = req.respond(Response::text("early"));
    log::info("hostile answered early");
    std::thread::sleep(Duration::from_millis(number(req, "ms", 60_000)));
    log::info("hostile woke up");
    Outcome::Done
}

/// Replaces the directory `name` of the granted directory `grant` (writable) with a symbolic
/// link to `target`: how a plugin would redirect another plugin's grant that lies inside its
/// own. Raw WASI, as the standard library's `symlink_path` is unstable.
fn redirect(req: &Request) -> String {
    let grant = req.query_param("grant").unwrap_or_default();
    let name = req.query_param("name").unwrap_or_default();
    let target = req.query_param("target").unwrap_or_default();
    let Some((dir, _)) = wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find(|(_, path)| *path == grant)
    else {
        return format!("no grant {grant}");
    };
    if let Err(e) = dir.remove_directory_at(&name) {
        return format!("rmdir error {e:?}");
    }
    match dir.symlink_at(&target, &name) {
        Ok(()) => "redirected".to_owned(),
        Err(e) => format!("symlink error {e:?}"),
    }
}

/// The text a host error gives the guest: an outgoing body declared one byte long, written
/// two, fails with an `error` resource, whose debug string is returned.
fn stream_error(_req: &Request) -> String {
    use wasip2::http::types::{Fields, OutgoingRequest};
    let headers = Fields::new();
    if headers.append("content-length", b"1").is_err() {
        return "no header".to_owned();
    }
    let request = OutgoingRequest::new(headers);
    let Ok(body) = request.body() else {
        return "no body".to_owned();
    };
    let Ok(stream) = body.write() else {
        return "no stream".to_owned();
    };
    match stream.write(b"xx") {
        Err(wasip2::io::streams::StreamError::LastOperationFailed(e)) => e.to_debug_string(),
        other => format!("unexpected {other:?}"),
    }
}

fn spin(_req: &Request) -> &'static str {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn kv_fill(req: &Request) -> String {
    let value = vec![b'x'; number(req, "kib", 1024) as usize * 1024];
    let mut stored = 0;
    loop {
        match kv::set(&format!("fill/{stored}"), &value) {
            Ok(()) => stored += 1,
            Err(e) => return format!("stored {stored} then {e:?}"),
        }
    }
}

fn kv_bounds(_req: &Request) -> String {
    use ankh_guest::bindings::ankh::plugin::kv as raw;
    let mut out = Vec::new();
    out.push(format!("ttl0={:?}", raw::set("k", b"v", Some(0))));
    for i in 0..1500 {
        let _ = raw::set(&format!("key{i:05}"), b"", None);
    }
    out.push(format!(
        "page={:?}",
        raw::list_keys("", None, u32::MAX).map(|p| p.keys.len())
    ));
    let many: Vec<String> = (0..1001).map(|i| format!("key{i:05}")).collect();
    out.push(format!(
        "get-many={:?}",
        raw::get_many(&many).map(|v| v.len())
    ));
    let big: Vec<(String, Vec<u8>)> = (0..17)
        .map(|i| (format!("big{i}"), vec![0; 1 << 20]))
        .collect();
    out.push(format!("set-many={:?}", raw::set_many(&big, None)));
    out.push(format!(
        "cursor={:?}",
        raw::list_keys("key", Some("zzz"), 10).map(|p| p.keys.len())
    ));
    out.join("\n")
}

fn pollables(req: &Request) -> String {
    let n = number(req, "n", 1_000_000);
    let mut leaked = Vec::new();
    for _ in 0..n {
        leaked.push(wasip2::clocks::monotonic_clock::subscribe_duration(
            1_000_000_000,
        ));
    }
    std::mem::forget(leaked);
    format!("leaked {n}")
}

/// `?lines=N`: N lines on stdout and N `log` calls, as fast as it can (`lines` at most 100,000).
fn chatty(req: &Request) -> String {
    let lines: u32 = req
        .query_param("lines")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .min(100_000);
    for i in 0..lines {
        println!("chatty stdout {i}");
        log::info(&format!("chatty log {i}"));
    }
    format!("said {lines}")
}

fn log_forge(_req: &Request) -> &'static str {
    log::info("innocent\n2026-12-01T00:00:00.000000Z  INFO ankh: forged line");
    log::info(&"y".repeat(100 * 1024));
    log::log(
        log::Level::Warn,
        "with a field",
        &[("evil", "a\nFORGED-FIELD-LINE")],
    );
    println!("stdout\u{1b}[31m escape");
    "logged"
}

fn header(req: &Request) -> Response {
    let value = req.query_param("value").unwrap_or_default();
    Response::text("header").with_header("X-Hostile", value)
}

/// The largest power of ten, up to a second, that divides every value.
fn step(values: impl Iterator<Item = u128>) -> u128 {
    let mut step = 1_000_000_000;
    for v in values {
        while v % step != 0 {
            step /= 10;
        }
    }
    step
}

fn clock(_req: &Request) -> String {
    let mono: Vec<u128> = (0..2000)
        .map(|_| u128::from(wasip2::clocks::monotonic_clock::now()))
        .collect();
    let wall: Vec<u128> = (0..2000)
        .map(|_| {
            let t = wasip2::clocks::wall_clock::now();
            u128::from(t.seconds) * 1_000_000_000 + u128::from(t.nanoseconds)
        })
        .collect();
    format!(
        "monotonic_step={} wall_step={}",
        step(mono.into_iter()),
        step(wall.into_iter())
    )
}

/// Closes `conn` with any `code` at all, through the raw WIT import: `ws::close` takes only a
/// `ws::CloseCode`, which cannot hold the codes the host must refuse.
fn close_raw(conn: ws::ConnectionId, code: u16) -> Result<(), ws::WsError> {
    ankh_guest::bindings::ankh::plugin::websocket::close(conn, code, "bye")
}

struct Hostile;

impl WebSocketHandler for Hostile {
    fn on_message(conn: ws::ConnectionId, message: ws::Message) {
        if let ws::Message::Text(text) = &message
            && let Some(code) = text.strip_prefix("close:")
        {
            let code: u16 = code.parse().unwrap_or(0);
            if let Err(e) = close_raw(conn, code) {
                let _ = ws::send_text(conn, &format!("refused {code} {e:?}"));
            }
            return;
        }
        let _ = ws::send(conn, &message);
    }
}

/// One outbound GET of `url` (an `http://host:port/path` URL), with `options`.
fn outbound_get(
    url: &str,
    options: Option<wasip2::http::types::RequestOptions>,
) -> Result<wasip2::http::types::FutureIncomingResponse, String> {
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};
    let rest = url.strip_prefix("http://").ok_or("http:// URLs only")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let request = OutgoingRequest::new(Fields::new());
    request
        .set_scheme(Some(&Scheme::Http))
        .map_err(|()| "scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "authority")?;
    let path = if path.is_empty() { "/" } else { path };
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "path")?;
    wasip2::http::outgoing_handler::handle(request, options).map_err(|e| format!("{e:?}"))
}

/// Waits for one response: its status, or the error code.
fn outcome(pending: &wasip2::http::types::FutureIncomingResponse) -> Result<u16, String> {
    pending.subscribe().block();
    match pending.get() {
        Some(Ok(Ok(response))) => Ok(response.status()),
        Some(Ok(Err(code))) => Err(format!("{code:?}")),
        other => Err(format!("{other:?}")),
    }
}

fn http_flood(req: &Request) -> String {
    let url = req.query_param("url").unwrap_or_default();
    let pending: Vec<_> = (0..number(req, "n", 64))
        .map(|_| outbound_get(&url, None))
        .collect();
    let answered = pending
        .iter()
        .filter(|p| p.as_ref().is_ok_and(|p| outcome(p).is_ok()))
        .count();
    format!("ok {answered} failed {}", pending.len() - answered)
}

fn http_slow(req: &Request) -> String {
    let url = req.query_param("url").unwrap_or_default();
    let hour = 3_600_000_000_000;
    let options = wasip2::http::types::RequestOptions::new();
    let _ = options.set_first_byte_timeout(Some(hour));
    let _ = options.set_between_bytes_timeout(Some(hour));
    match outbound_get(&url, Some(options)).and_then(|p| outcome(&p)) {
        Ok(status) => format!("ok {status}"),
        Err(e) => format!("error {e}"),
    }
}

fn router() -> Router {
    Router::new()
        .get("/send", |req| {
            let text = req.query_param("text").unwrap_or_default();
            report(ws::send_text(conn(req), &text))
        })
        .get("/close", |req| {
            report(close_raw(conn(req), number(req, "code", 1000) as u16))
        })
        .get("/subscribe", |req| {
            let topic = req.query_param("topic").unwrap_or_default();
            report(ws::subscribe(conn(req), &topic))
        })
        .get("/unsubscribe", |req| {
            let topic = req.query_param("topic").unwrap_or_default();
            report(ws::unsubscribe(conn(req), &topic))
        })
        .get("/publish", publish)
        .get("/sleep", sleep)
        .get("/early", early)
        .get("/spin", spin)
        .get("/redirect", redirect)
        .get("/stream-error", stream_error)
        .get("/kv-fill", kv_fill)
        .get("/kv-bounds", kv_bounds)
        .get("/pollables", pollables)
        .get("/exit", |req| -> &'static str {
            std::process::exit(number(req, "code", 3) as i32)
        })
        .get("/log-forge", log_forge)
        .get("/chatty", chatty)
        .get("/header", header)
        .get("/clock", clock)
        .get("/http-flood", http_flood)
        .get("/http-slow", http_slow)
        .get("/ws", |_req| Outcome::upgrade())
        .get("/bad-upgrade", |_req| Outcome::Upgrade {
            protocol: None,
            headers: vec![("X Bad".to_owned(), b"v".to_vec())],
        })
}

ankh_guest::export_plugin!(router, websocket = Hostile);
