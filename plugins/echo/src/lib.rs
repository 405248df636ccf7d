//! Build: `cd plugins && cargo build --release --target wasm32-wasip2`, then `curl -d hi 'localhost:8080/echo/a%20b?x=1&x=2'`.
//!
//! Echoes the request back as JSON: every method, every path under `/echo`. Handy for seeing
//! what a plugin receives (the decoded route path, the query pairs, the raw headers). A body
//! over 64 KiB is shown by its first 64 KiB and its size.

use ankh_guest::prelude::*;
use serde_json::json;

/// The most of a body that is echoed; past it, the answer shows its first bytes and says how
/// many there were. A whole 16 MiB body (the server's default limit) decoded, escaped and
/// serialized would need several times its size in the instance's 64 MiB.
const SHOWN_BODY_BYTES: usize = 64 * 1024;

/// Describes `req` as a JSON object; header values and the body are decoded lossily as UTF-8.
fn echo(req: &Request) -> Response {
    let body = req.body();
    let shown = &body[..body.len().min(SHOWN_BODY_BYTES)];
    let headers: Vec<(&str, String)> = req
        .headers()
        .map(|(name, value)| (name, String::from_utf8_lossy(value).into_owned()))
        .collect();
    Response::json(&json!({
        "method": req.method(),
        "path": req.path(),
        "mount": req.mount(),
        "route": req.route_path(),
        "query": req.query_pairs(),
        "headers": headers,
        "body": String::from_utf8_lossy(shown),
        "body_bytes": body.len(),
        "body_truncated": shown.len() < body.len(),
        "remote_addr": req.remote_addr(),
        "version": req.version().as_str(),
        "id": req.id(),
    }))
}

fn router() -> Router {
    // No route at all: the fallback answers every method and path, including ones a pattern
    // would refuse (`/echo/a/` with its empty last segment, `/echo//x`).
    Router::new().not_found(echo)
}

ankh_guest::export_plugin!(router);
