//! A URL shortener over the durable key-value store: codes are claimed with
//! `compare_and_swap`, hits are counted with `increment`, and links expire with a time-to-live.
//!
//! - `POST   /shorten`              body `{"url": "https://...", "ttl_s"?: n}` (or the URL as
//!   plain text) → `201 {"code", "url", "short", "expires_in_s"}`; the link lives `ttl_s`
//!   seconds (default 30 days, at most a year)
//! - `GET    /shorten/{code}`       → `302` to the URL, counting a hit; `404` unknown or expired
//! - `GET    /shorten/{code}/stats` → `200 {"code", "url", "hits"}`
//! - `DELETE /shorten/{code}`       → `204`, or `404`
//!
//! The link and its hit counter expire together: the counter is created with the link's
//! time-to-live, and `increment` keeps a key's expiry.

use std::time::Duration;

use ankh_guest::kv::KvError;
use ankh_guest::prelude::*;
use serde::Deserialize;
use serde_json::json;

/// How long a link lives unless asked otherwise, and at most.
const DEFAULT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest URL accepted.
const MAX_URL_BYTES: usize = 2048;

/// Codes are this many base-62 characters.
const CODE_CHARS: usize = 7;

type Reply = Result<Response, Response>;

#[derive(Deserialize)]
struct NewLink {
    url: String,
    ttl_s: Option<u64>,
}

fn link_key(code: &str) -> String {
    format!("link/{code}")
}

fn hits_key(code: &str) -> String {
    format!("hits/{code}")
}

fn error(status: u16, message: impl Into<String>) -> Response {
    Response::json(&json!({ "error": message.into() })).with_status(status)
}

fn store_error(e: KvError) -> Response {
    let status = Response::from(e.clone()).status();
    error(status, format!("storage failed: {e}"))
}

/// An absolute http(s) URL without whitespace or control characters.
fn valid_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    url.len() <= MAX_URL_BYTES
        && rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `n` as `CODE_CHARS` base-62 digits.
fn base62(mut n: u64) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut code = [0u8; CODE_CHARS];
    for slot in code.iter_mut().rev() {
        *slot = DIGITS[(n % 62) as usize];
        n /= 62;
    }
    String::from_utf8_lossy(&code).into_owned()
}

/// A code for the `n`th link: the counter scrambled by an odd multiplier (a bijection mod
/// 2^64), so consecutive links do not get consecutive codes.
fn code_for(n: u64) -> String {
    base62(n.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 62u64.pow(CODE_CHARS as u32))
}

fn create(req: &Request) -> Reply {
    let new = match req.json::<NewLink>() {
        Ok(new) => new,
        Err(_) => NewLink {
            url: req.text().unwrap_or_default().trim().to_owned(),
            ttl_s: req.query_param("ttl_s").and_then(|t| t.parse().ok()),
        },
    };
    if !valid_url(&new.url) {
        return Err(error(400, "expected an absolute http:// or https:// URL"));
    }
    let ttl = new
        .ttl_s
        .map_or(DEFAULT_TTL, Duration::from_secs)
        .clamp(Duration::from_secs(1), MAX_TTL);
    // Claim a code nobody holds: compare-and-swap against "absent" wins only for a free code,
    // whatever other instances are doing at the same moment.
    for _ in 0..8 {
        let n = kv::increment("next", 1).map_err(store_error)?;
        let code = code_for(n.unsigned_abs());
        if !kv::compare_and_swap_with_ttl(&link_key(&code), None, &new.url, ttl)
            .map_err(store_error)?
        {
            continue;
        }
        kv::set_with_ttl(&hits_key(&code), "0", ttl).map_err(store_error)?;
        let body = json!({
            "code": code,
            "url": new.url,
            "short": format!("{}/{code}", req.mount()),
            "expires_in_s": ttl.as_secs(),
        });
        return Ok(Response::json(&body).with_status(201));
    }
    Err(error(503, "no free code found; try again"))
}

fn code(req: &Request) -> Result<String, Response> {
    let code = req.param("code").unwrap_or_default();
    if code.len() == CODE_CHARS && code.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(code.to_owned())
    } else {
        Err(error(404, "no such link"))
    }
}

fn url_of(code: &str) -> Result<String, Response> {
    kv::get_string(&link_key(code))
        .map_err(store_error)?
        .ok_or_else(|| error(404, "no such link (or it expired)"))
}

fn follow(req: &Request) -> Reply {
    let code = code(req)?;
    let url = url_of(&code)?;
    // Counting is best effort: a full or failing store must not break the redirect.
    let _ = kv::increment(&hits_key(&code), 1);
    Ok(Response::new(302)
        .with_header("location", url)
        .with_header("cache-control", "no-store"))
}

fn stats(req: &Request) -> Reply {
    let code = code(req)?;
    let url = url_of(&code)?;
    let hits: i64 = kv::get_string(&hits_key(&code))
        .map_err(store_error)?
        .and_then(|h| h.parse().ok())
        .unwrap_or(0);
    Ok(Response::json(
        &json!({ "code": code, "url": url, "hits": hits }),
    ))
}

fn remove(req: &Request) -> Reply {
    let code = code(req)?;
    let deleted = kv::delete_many(&[link_key(&code).as_str(), hits_key(&code).as_str()])
        .map_err(store_error)?;
    if deleted == 0 {
        return Err(error(404, "no such link"));
    }
    Ok(Response::new(204))
}

fn router() -> Router {
    Router::new()
        .post("/", create)
        .get("/{code}", follow)
        .get("/{code}/stats", stats)
        .delete("/{code}", remove)
        .not_found(|_req| error(404, "not found"))
}

ankh_guest::export_plugin!(router);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_codes() {
        assert!(valid_url("https://example.com/a?b=c"));
        assert!(valid_url("http://localhost:8080"));
        assert!(!valid_url("ftp://example.com"));
        assert!(!valid_url("https://"));
        assert!(!valid_url("https:///path"));
        assert!(!valid_url("https://exa mple.com"));
        assert!(!valid_url("javascript:alert(1)"));
        let codes: std::collections::HashSet<_> = (1..1000).map(code_for).collect();
        assert_eq!(codes.len(), 999);
        assert!(codes.iter().all(|c| c.len() == CODE_CHARS));
    }
}
