//! Every call of the key-value store (`ankh:plugin/kv@0.3.0`) behind a route, for the
//! durability, expiry, batch, race and limit tests. Values travel as text.
//!
//! - `GET /kvprobe/get?key=K` → the value, or `404 absent`
//! - `PUT /kvprobe/set?key=K[&ttl_ms=N]`, body = the value → `204`
//! - `POST /kvprobe/set-many[?ttl_ms=N]`, body = a JSON object of key → value → `204`
//! - `POST /kvprobe/get-many`, body = a JSON array of keys → a JSON array of values or nulls
//! - `POST /kvprobe/delete-many`, body = a JSON array of keys → how many existed
//! - `DELETE /kvprobe/del?key=K` → `true` or `false`
//! - `GET /kvprobe/exists?key=K` → `true` or `false`
//! - `POST /kvprobe/cas?key=K[&expected=E][&ttl_ms=N]`, body = the new value (no `expected`:
//!   only if absent) → `true` or `false`
//! - `POST /kvprobe/incr?key=K[&delta=D]` → the new value
//! - `GET /kvprobe/list?prefix=P[&cursor=C][&limit=N]` → `{"keys": [...], "cursor": ...}`
//! - `GET /kvprobe/count?prefix=P` → how many keys, paging through all of them
//! - `POST /kvprobe/fill?prefix=P&n=N[&from=F]` → writes keys P{F}..P{F+N} (zero-padded, value =
//!   the number) in batches of 1000 → how many it wrote, or the error that stopped it
//!
//! A store error answers with the SDK's status for it and the body `kv error: <Debug>`.

use std::collections::BTreeMap;
use std::time::Duration;

use ankh_guest::kv::KvError;
use ankh_guest::prelude::*;

type Reply = Result<Response, Response>;

fn kv_error(e: KvError) -> Response {
    let status = Response::from(e.clone()).status();
    Response::text(format!("kv error: {e:?}")).with_status(status)
}

fn param(req: &Request, name: &str) -> Result<String, Response> {
    req.query_param(name)
        .ok_or_else(|| Response::bad_request(format!("missing query parameter `{name}`")))
}

fn number(req: &Request, name: &str) -> Result<Option<u64>, Response> {
    req.query_param(name)
        .map(|n| n.parse())
        .transpose()
        .map_err(|_| Response::bad_request(format!("`{name}` must be a number")))
}

fn ttl(req: &Request) -> Result<Option<Duration>, Response> {
    Ok(number(req, "ttl_ms")?.map(Duration::from_millis))
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

fn get(req: &Request) -> Reply {
    match kv::get(&param(req, "key")?).map_err(kv_error)? {
        Some(value) => Ok(Response::text(text(&value))),
        None => Ok(Response::text("absent").with_status(404)),
    }
}

fn set(req: &Request) -> Reply {
    let key = param(req, "key")?;
    match ttl(req)? {
        Some(ttl) => kv::set_with_ttl(&key, req.body(), ttl),
        None => kv::set(&key, req.body()),
    }
    .map_err(kv_error)?;
    Ok(Response::new(204))
}

fn set_many(req: &Request) -> Reply {
    let entries: BTreeMap<String, String> = req
        .json()
        .map_err(|e| Response::bad_request(e.to_string()))?;
    let entries: Vec<(&str, &[u8])> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    match ttl(req)? {
        Some(ttl) => kv::set_many_with_ttl(&entries, ttl),
        None => kv::set_many(&entries),
    }
    .map_err(kv_error)?;
    Ok(Response::new(204))
}

fn keys(req: &Request) -> Result<Vec<String>, Response> {
    req.json().map_err(|e| Response::bad_request(e.to_string()))
}

fn get_many(req: &Request) -> Reply {
    let keys = keys(req)?;
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let values: Vec<Option<String>> = kv::get_many(&keys)
        .map_err(kv_error)?
        .into_iter()
        .map(|v| v.map(|v| text(&v)))
        .collect();
    Ok(Response::json(&values))
}

fn delete_many(req: &Request) -> Reply {
    let keys = keys(req)?;
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let n = kv::delete_many(&keys).map_err(kv_error)?;
    Ok(Response::text(n.to_string()))
}

fn del(req: &Request) -> Reply {
    let existed = kv::delete(&param(req, "key")?).map_err(kv_error)?;
    Ok(Response::text(existed.to_string()))
}

fn exists(req: &Request) -> Reply {
    let exists = kv::exists(&param(req, "key")?).map_err(kv_error)?;
    Ok(Response::text(exists.to_string()))
}

fn cas(req: &Request) -> Reply {
    let key = param(req, "key")?;
    let expected = req.query_param("expected");
    let expected = expected.as_deref().map(str::as_bytes);
    let stored = match ttl(req)? {
        Some(ttl) => kv::compare_and_swap_with_ttl(&key, expected, req.body(), ttl),
        None => kv::compare_and_swap(&key, expected, req.body()),
    }
    .map_err(kv_error)?;
    Ok(Response::text(stored.to_string()))
}

fn incr(req: &Request) -> Reply {
    let key = param(req, "key")?;
    let delta = req
        .query_param("delta")
        .map(|d| d.parse::<i64>())
        .transpose()
        .map_err(|_| Response::bad_request("`delta` must be a number"))?
        .unwrap_or(1);
    let value = kv::increment(&key, delta).map_err(kv_error)?;
    Ok(Response::text(value.to_string()))
}

fn list(req: &Request) -> Reply {
    let prefix = req.query_param("prefix").unwrap_or_default();
    let cursor = req.query_param("cursor");
    let limit = number(req, "limit")?.unwrap_or(100);
    let limit = u32::try_from(limit).unwrap_or(u32::MAX);
    let page = kv::list_page(&prefix, cursor.as_deref(), limit).map_err(kv_error)?;
    Ok(Response::json(&serde_json::json!({
        "keys": page.keys,
        "cursor": page.cursor,
    })))
}

fn count(req: &Request) -> Reply {
    let prefix = req.query_param("prefix").unwrap_or_default();
    let mut n = 0u64;
    for key in kv::list_keys(&prefix) {
        key.map_err(kv_error)?;
        n += 1;
    }
    Ok(Response::text(n.to_string()))
}

fn fill(req: &Request) -> Reply {
    let prefix = req.query_param("prefix").unwrap_or_default();
    let n = number(req, "n")?.unwrap_or(0);
    let from = number(req, "from")?.unwrap_or(0);
    let mut written = 0u64;
    while written < n {
        let batch: Vec<(String, String)> = (from + written..from + n.min(written + 1000))
            .map(|i| (format!("{prefix}{i:08}"), i.to_string()))
            .collect();
        let entries: Vec<(&str, &[u8])> = batch
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_bytes()))
            .collect();
        if let Err(e) = kv::set_many(&entries) {
            return Ok(Response::text(format!("wrote {written} then {e:?}")).with_status(507));
        }
        written += batch.len() as u64;
    }
    Ok(Response::text(written.to_string()))
}

fn router() -> Router {
    Router::new()
        .get("/get", get)
        .put("/set", set)
        .post("/set-many", set_many)
        .post("/get-many", get_many)
        .post("/delete-many", delete_many)
        .delete("/del", del)
        .get("/exists", exists)
        .post("/cas", cas)
        .post("/incr", incr)
        .get("/list", list)
        .get("/count", count)
        .post("/fill", fill)
}

ankh_guest::export_plugin!(router);
