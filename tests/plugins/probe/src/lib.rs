//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then `curl localhost:8080/probe/status/418`.
//!
//! A grab bag of behaviours for the host's protocol and sandbox tests. Every route is a
//! `GET` unless noted; a missing or malformed number gives `400`.
//!
//! - `/probe/ok`: `ok <n>`, n = requests this instance has served, this one included
//! - `/probe/status/{code}`: empty body with that status (100..=999); `?body=TEXT` adds a text body
//! - `/probe/early?ms=N`: sends `early` through `http.respond` at once, sleeps N ms (default
//!   10000), logs `early done`, returns `done`
//! - `/probe/twice`: responds `first`, then `second` (must be refused with `already-responded`;
//!   an error is logged otherwise), then returns `third`, which the host must refuse too
//! - `/probe/none`: returns `done` without responding
//! - `/probe/close`: `ok` with `Connection: close`
//! - `POST /probe/inc`: `{"val": n}` → `{"val": n+1}`
//! - `/probe/cached?n=N`: N bytes of text made once per instance and kept, so that answering
//!   them again costs the guest only a copy
//! - `/probe/big?n=N&type=T&enc=E`: N bytes (default 4096) of compressible text, Content-Type T
//!   (default `text/plain`), and `Content-Encoding: E` when given (the body is not encoded)
//! - `/probe/sleep?ms=N`: logs `sleeping N`, sleeps N ms, then `slept N`
//! - `/probe/log?marker=M`: `stdout M` on stdout, `stderr M` on stderr, and a `log M` info line
//!   with the field `marker=M` through the log import; returns `logged`
//! - `/probe/kv?key=K&delta=D`: `kv::increment(K, D)` (D defaults to 1), returns the new value
//! - `/probe/env?name=N`: the environment variable N, or `absent`
//! - `/probe/file?path=P`: `read <len>` or `error <message>` (200 either way)
//! - `/probe/write?path=P`: `wrote` or `error <message>` (200 either way)
//! - `/probe/connect?addr=A`: `connected` or `error <message>` (200 either way)
//! - `/probe/work?n=N`: N million rounds of arithmetic (a fixed amount of CPU, no host call),
//!   then `worked <checksum>`
//! - `/probe/fetch?url=U[&n=N]`: N (default 1) sequential outbound `GET U` through the SDK's
//!   `http` client; answers `status S bytes B` and the last body, or the SDK's error answer
//!   (502, or 504 for a timeout) with the error
//! - `/probe/stream?n=N&size=S[&gate=ADDR][&trailer=1][&len=1][&ms=M][&status=S]`: a streamed response
//!   of N pieces (default 4) of S bytes (default 16) each, piece i all of the letter `a`+i%26,
//!   written M ms apart (default 0); with `gate`, after the first piece it waits for
//!   `GET http://ADDR/` to answer; with `trailer=1` it ends with the trailer `x-pieces: N`;
//!   with `len=1` the head declares the length. Logs `stream wrote K` or, when a write
//!   fails, `stream write failed after K: ERROR`
//! - `/probe/stream-forever?size=S`: writes pieces of S bytes (default 65536) until a write
//!   fails, then logs `stream ended after B bytes: ERROR`
//! - `/probe/alphabet?bytes=N`: a streamed body of N bytes, byte i being `a`+i%26, written
//!   64 KiB at a time (the streaming benchmark's own-world producer)
//! - `/probe/ticks?n=N&ms=M`: N lines, M ms apart, each the wall-clock time it was written at
//!   in nanoseconds since the Unix epoch (the streaming benchmark's event latency; needs
//!   `precise_clocks` to mean anything)
//! - `/probe/stream-misuse`: calls the streaming imports out of order and answers, as a
//!   streamed body, what each returned

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ankh_guest::prelude::*;
use ankh_guest::{RespondError, kv::KvError};
use serde::{Deserialize, Serialize};

/// Requests served by this instance; a fresh instance starts from zero.
static SERVED: AtomicU64 = AtomicU64::new(0);

/// How long `/probe/early` sleeps after responding when `ms` is not given.
const EARLY_DEFAULT_SLEEP_MS: u64 = 10_000;
/// The body size of `/probe/big` when `n` is not given.
const BIG_DEFAULT_BYTES: usize = 4096;

fn count() -> u64 {
    SERVED.fetch_add(1, Ordering::Relaxed) + 1
}

/// The query parameter `name` parsed as `T`: `default` when absent, a `400` when malformed.
fn query<T: FromStr>(req: &Request, name: &str, default: Option<T>) -> Result<T, Response> {
    match (req.query_param(name), default) {
        (Some(raw), _) => raw
            .parse()
            .map_err(|_| Response::bad_request(format!("malformed query parameter `{name}`"))),
        (None, Some(default)) => Ok(default),
        (None, None) => Err(Response::bad_request(format!(
            "missing query parameter `{name}`"
        ))),
    }
}

fn status(req: &Request) -> Result<Response, Response> {
    let code: u16 = req
        .param("code")
        .and_then(|code| code.parse().ok())
        .filter(|code| (100..=999).contains(code))
        .ok_or_else(|| Response::bad_request("the status must be a number in 100..=999"))?;
    Ok(match req.query_param("body") {
        Some(body) => Response::text(body).with_status(code),
        None => Response::new(code),
    })
}

fn early(req: &Request) -> Result<Outcome, Response> {
    let ms = query(req, "ms", Some(EARLY_DEFAULT_SLEEP_MS))?;
    if let Err(err) = req.respond(Response::text("early")) {
        log::error(&format!("early response refused: {err}"));
    }
    std::thread::sleep(Duration::from_millis(ms));
    log::info("early done");
    Ok(Outcome::Done)
}

fn twice(req: &Request) -> Response {
    if let Err(err) = req.respond(Response::text("first")) {
        log::error(&format!("first response refused: {err}"));
    }
    match req.respond(Response::text("second")) {
        Err(RespondError::AlreadyResponded) => {}
        other => log::error(&format!(
            "second response: expected Err(AlreadyResponded), got {other:?}"
        )),
    }
    Response::text("third")
}

#[derive(Debug, Serialize, Deserialize)]
struct Val {
    val: i64,
}

fn inc(req: &Request) -> Result<Response, Response> {
    let Val { val } = req
        .json()
        .map_err(|err| Response::bad_request(err.to_string()))?;
    let val = val
        .checked_add(1)
        .ok_or_else(|| Response::bad_request("val + 1 overflows an i64"))?;
    Ok(Response::json(&Val { val }))
}

/// `n` bytes of text made once per instance and kept: later calls answer it at almost no
/// cost to the guest (a copy), so what the answer costs is the host's (compressing it).
fn cached(req: &Request) -> Result<Response, Response> {
    static BODY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let n = query(req, "n", Some(BIG_DEFAULT_BYTES))?;
    let body = BODY.get_or_init(|| (0..n).map(|i| b'a' + (i % 26) as u8).collect());
    Ok(Response::bytes("text/plain", body.clone()))
}

fn big(req: &Request) -> Result<Response, Response> {
    let len = query(req, "n", Some(BIG_DEFAULT_BYTES))?;
    let content_type = req
        .query_param("type")
        .unwrap_or_else(|| "text/plain".to_owned());
    let mut body = String::with_capacity(len + 32);
    let mut line = 0u64;
    while body.len() < len {
        body.push_str(&format!("ankh probe line {line:04}\n"));
        line += 1;
    }
    body.truncate(len);
    let response = Response::bytes(&content_type, body);
    Ok(match req.query_param("enc") {
        Some(encoding) => response.with_header("Content-Encoding", encoding),
        None => response,
    })
}

fn sleep(req: &Request) -> Result<String, Response> {
    let ms: u64 = query(req, "ms", None)?;
    // Tests wait for this line to know the call has started.
    log::info(&format!("sleeping {ms}"));
    std::thread::sleep(Duration::from_millis(ms));
    Ok(format!("slept {ms}"))
}

fn work(req: &Request) -> Result<String, Response> {
    let n: u64 = query(req, "n", None)?;
    let mut x: u64 = 1;
    for _ in 0..n.saturating_mul(1_000_000) {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    Ok(format!("worked {x:x}"))
}

fn log_marker(req: &Request) -> &'static str {
    let marker = req.query_param("marker").unwrap_or_default();
    println!("stdout {marker}");
    eprintln!("stderr {marker}");
    log::log(
        log::Level::Info,
        &format!("log {marker}"),
        &[("marker", &marker)],
    );
    "logged"
}

fn kv_increment(req: &Request) -> Result<String, Response> {
    let key = req
        .query_param("key")
        .ok_or_else(|| Response::bad_request("missing query parameter `key`"))?;
    let delta: i64 = query(req, "delta", Some(1))?;
    kv::increment(&key, delta)
        .map(|value| value.to_string())
        .map_err(|err| {
            let status = match err {
                KvError::TooLarge => 413,
                KvError::Full => 507,
                KvError::NotANumber | KvError::Overflow => 409,
                KvError::Invalid(_) => 400,
                KvError::Unavailable(_) => 503,
            };
            Response::text(format!("kv error: {err:?}")).with_status(status)
        })
}

fn env(req: &Request) -> String {
    let name = req.query_param("name").unwrap_or_default();
    std::env::var(name).unwrap_or_else(|_| "absent".to_owned())
}

/// `/probe/write?path=P`: tries to create P with the content `written`.
fn write(req: &Request) -> String {
    let path = req.query_param("path").unwrap_or_default();
    match std::fs::write(&path, "written") {
        Ok(()) => "wrote".to_owned(),
        Err(e) => format!("error {e}"),
    }
}

fn file(req: &Request) -> String {
    let path = req.query_param("path").unwrap_or_default();
    match std::fs::read_to_string(path) {
        Ok(text) => format!("read {}", text.len()),
        Err(err) => format!("error {err}"),
    }
}

fn connect(req: &Request) -> String {
    let addr = req.query_param("addr").unwrap_or_default();
    match std::net::TcpStream::connect(addr) {
        Ok(_) => "connected".to_owned(),
        Err(err) => format!("error {err}"),
    }
}

fn fetch(req: &Request) -> Result<Response, Outcome> {
    let url = req
        .query_param("url")
        .ok_or_else(|| Response::bad_request("missing query parameter `url`").into_outcome())?;
    let n: u32 = query(req, "n", Some(1)).map_err(IntoOutcome::into_outcome)?;
    let mut last = None;
    for _ in 0..n {
        last = Some(http::get(&url).map_err(IntoOutcome::into_outcome)?);
    }
    let last = last.ok_or_else(|| Response::bad_request("n must be at least 1").into_outcome())?;
    let mut body = format!("status {} bytes {}\n", last.status, last.body.len()).into_bytes();
    body.extend_from_slice(&last.body);
    Ok(Response::bytes("text/plain", body))
}

/// `/probe/stream`.
fn stream(req: &Request) -> Result<Outcome, Response> {
    let n: usize = query(req, "n", Some(4))?;
    let size: usize = query(req, "size", Some(16))?;
    let ms: u64 = query(req, "ms", Some(0))?;
    let status: u16 = query(req, "status", Some(200))?;
    let mut head = Response::new(status).with_header("content-type", "text/plain");
    if req.query_param("len").as_deref() == Some("1") {
        head = head.with_header("content-length", (n * size).to_string());
    }
    let Ok(mut body) = req.stream(head) else {
        return Ok(Outcome::Done);
    };
    for i in 0..n {
        let piece = vec![b'a' + (i % 26) as u8; size];
        if let Err(e) = body.write(&piece) {
            log::info(&format!("stream write failed after {i}: {e:?}"));
            return Ok(Outcome::Done);
        }
        if i == 0
            && let Some(gate) = req.query_param("gate")
        {
            let _ = http::get(&format!("http://{gate}/"));
        }
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
    log::info(&format!("stream wrote {n}"));
    let ended = if req.query_param("trailer").as_deref() == Some("1") {
        body.finish_with_trailers(&[("x-pieces", n.to_string().as_bytes())])
    } else {
        body.finish()
    };
    if let Err(e) = ended {
        log::info(&format!("stream finish failed: {e:?}"));
    }
    Ok(Outcome::Done)
}

/// `/probe/stream-forever`.
fn stream_forever(req: &Request) -> Result<Outcome, Response> {
    let size: usize = query(req, "size", Some(65536))?;
    let piece = vec![b'x'; size];
    let Ok(mut body) = req.stream(Response::new(200)) else {
        return Ok(Outcome::Done);
    };
    let mut sent = 0u64;
    loop {
        if let Err(e) = body.write(&piece) {
            log::info(&format!("stream ended after {sent} bytes: {e:?}"));
            return Ok(Outcome::Done);
        }
        sent += size as u64;
    }
}

/// `/probe/alphabet`.
fn alphabet(req: &Request) -> Result<Outcome, Response> {
    const PIECE: usize = 64 * 1024;
    let total: u64 = query(req, "bytes", None)?;
    // Any piece is a window of this, starting at the body's offset modulo 26.
    let pattern: Vec<u8> = (0..PIECE + 26).map(|i| b'a' + (i % 26) as u8).collect();
    let Ok(mut body) = req.stream(Response::new(200)) else {
        return Ok(Outcome::Done);
    };
    let mut at = 0u64;
    while at < total {
        let n = (total - at).min(PIECE as u64) as usize;
        let offset = (at % 26) as usize;
        if body.write(&pattern[offset..offset + n]).is_err() {
            return Ok(Outcome::Done);
        }
        at += n as u64;
    }
    let _ = body.finish();
    Ok(Outcome::Done)
}

/// `/probe/ticks`.
fn ticks(req: &Request) -> Result<Outcome, Response> {
    let n: u32 = query(req, "n", None)?;
    let ms: u64 = query(req, "ms", Some(0))?;
    let Ok(mut body) = req.stream(Response::new(200)) else {
        return Ok(Outcome::Done);
    };
    for _ in 0..n {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        if body.write(format!("{now}\n")).is_err() {
            return Ok(Outcome::Done);
        }
        std::thread::sleep(Duration::from_millis(ms));
    }
    Ok(Outcome::Done)
}

/// `/probe/stream-misuse`.
fn stream_misuse(req: &Request) -> Outcome {
    use ankh_guest::bindings::ankh::plugin::http as raw;
    let before = raw::write(b"x");
    let first = raw::start(200, &[]);
    let second = raw::start(200, &[]);
    let respond = req.respond(Response::text("late"));
    let report = format!(
        "write before start: {before:?}\nstart: {first:?}\nstart again: {second:?}\nrespond: {respond:?}\n"
    );
    let _ = raw::write(report.as_bytes());
    let finish = raw::finish(&[]);
    let after = raw::write(b"y");
    let again = raw::finish(&[]);
    log::info(&format!(
        "misuse: finish {finish:?}, write after {after:?}, finish again {again:?}"
    ));
    Outcome::Done
}

fn router() -> Router {
    // Every handler counts the request, so `ok <n>` tells a fresh instance apart.
    fn counted<O: IntoOutcome>(
        handler: impl Fn(&Request) -> O + 'static,
    ) -> impl Fn(&Request) -> O + 'static {
        move |req| {
            count();
            handler(req)
        }
    }
    Router::new()
        .get("/ok", |_req| format!("ok {}", count()))
        .get("/status/{code}", counted(status))
        .get("/early", counted(early))
        .get("/twice", counted(twice))
        .get("/none", counted(|_req| Outcome::Done))
        .get(
            "/close",
            counted(|_req| Response::text("ok").with_header("Connection", "close")),
        )
        .post("/inc", counted(inc))
        .get("/big", counted(big))
        .get("/cached", counted(cached))
        .get("/sleep", counted(sleep))
        .get("/log", counted(log_marker))
        .get("/kv", counted(kv_increment))
        .get("/env", counted(env))
        .get("/file", counted(file))
        .get("/write", counted(write))
        .get("/connect", counted(connect))
        .get("/work", counted(work))
        .get("/stream", counted(stream))
        .get("/stream-forever", counted(stream_forever))
        .get("/stream-misuse", counted(stream_misuse))
        .get("/alphabet", counted(alphabet))
        .get("/ticks", counted(ticks))
        .get("/fetch", counted(fetch))
}

ankh_guest::export_plugin!(router);
