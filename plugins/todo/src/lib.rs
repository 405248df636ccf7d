//! Build: `cd plugins && cargo build --release --target wasm32-wasip2`, then `curl -d '{"title":"milk"}' localhost:8080/todo/items`.
//!
//! A JSON REST API over the key-value store. Every worker runs its own instance of this plugin
//! and instances share no memory, so the items live in `kv`, where all of them see the same
//! data; ids come from an atomic `kv::increment`. The store is durable: items survive a restart.
//!
//! - `GET    /todo/items`       → `200` array of items, by id
//! - `POST   /todo/items`       → `201` the new item; body `{"title": string, "done"?: bool}`
//! - `GET    /todo/items/{id}`  → `200` the item, or `404`
//! - `PUT    /todo/items/{id}`  → `200` the updated item; body `{"title"?: string, "done"?: bool}`
//!   (fields present replace the stored ones), `404` unknown id
//! - `DELETE /todo/items/{id}`  → `204`, or `404`
//!
//! Errors are JSON too: `{"error": "..."}` with `400` for a body that is not the expected JSON,
//! and the store's own status for a store failure (`503` when it is unavailable, `507` full).

use ankh_guest::kv::KvError;
use ankh_guest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Where items live: `item/` + the id zero-padded to 20 digits, so key order is id order.
const ITEM_PREFIX: &str = "item/";
/// The counter `POST` draws ids from.
const NEXT_ID_KEY: &str = "next-id";

#[derive(Debug, Serialize, Deserialize)]
struct Item {
    id: u64,
    title: String,
    done: bool,
}

/// The body of `POST /items`.
#[derive(Debug, Deserialize)]
struct NewItem {
    title: String,
    #[serde(default)]
    done: bool,
}

/// The body of `PUT /items/{id}`.
#[derive(Debug, Deserialize)]
struct ItemUpdate {
    title: Option<String>,
    done: Option<bool>,
}

type Reply = Result<Response, Response>;

fn item_key(id: u64) -> String {
    format!("{ITEM_PREFIX}{id:020}")
}

fn error(status: u16, message: impl Into<String>) -> Response {
    Response::json(&json!({ "error": message.into() })).with_status(status)
}

fn not_found(req: &Request) -> Response {
    let id = req.param("id").unwrap_or_default();
    error(404, format!("no item with id {id:?}"))
}

/// A store failure, as JSON, with the status the SDK gives it (413, 507, 503...).
fn store_error(err: KvError) -> Response {
    let status = Response::from(err.clone()).status();
    error(status, format!("storage failed: {err}"))
}

/// Loads the item named by the `{id}` capture; a non-numeric or unknown id is a `404`.
fn load(req: &Request) -> Result<Item, Response> {
    let id: u64 = req
        .param("id")
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| not_found(req))?;
    kv::get_json(&item_key(id))
        .map_err(store_error)?
        .ok_or_else(|| not_found(req))
}

fn store(item: &Item) -> Result<(), Response> {
    kv::set_json(&item_key(item.id), item).map_err(store_error)
}

/// Every item, a page of keys and one batch read at a time.
fn list(_req: &Request) -> Reply {
    let mut items: Vec<Item> = Vec::new();
    let mut cursor = None;
    loop {
        let page = kv::list_page(ITEM_PREFIX, cursor.as_deref(), 1000).map_err(store_error)?;
        let keys: Vec<&str> = page.keys.iter().map(String::as_str).collect();
        let values = kv::get_many(&keys).map_err(store_error)?;
        // A key deleted since it was listed simply drops out.
        items.extend(
            values
                .iter()
                .flatten()
                .filter_map(|bytes| serde_json::from_slice(bytes).ok()),
        );
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(Response::json(&items)),
        }
    }
}

fn create(req: &Request) -> Reply {
    let new: NewItem = req.json().map_err(|err| error(400, err.to_string()))?;
    let id = kv::increment(NEXT_ID_KEY, 1).map_err(store_error)?;
    let id = u64::try_from(id).map_err(|_| error(500, "the id counter went negative"))?;
    let item = Item {
        id,
        title: new.title,
        done: new.done,
    };
    store(&item)?;
    Ok(Response::json(&item).with_status(201))
}

fn show(req: &Request) -> Reply {
    Ok(Response::json(&load(req)?))
}

fn update(req: &Request) -> Reply {
    let mut item = load(req)?;
    let update: ItemUpdate = req.json().map_err(|err| error(400, err.to_string()))?;
    if let Some(title) = update.title {
        item.title = title;
    }
    if let Some(done) = update.done {
        item.done = done;
    }
    store(&item)?;
    Ok(Response::json(&item))
}

fn remove(req: &Request) -> Reply {
    let item = load(req)?;
    if kv::delete(&item_key(item.id)).map_err(store_error)? {
        Ok(Response::new(204))
    } else {
        Err(not_found(req))
    }
}

fn router() -> Router {
    Router::new()
        .get("/items", list)
        .post("/items", create)
        .get("/items/{id}", show)
        .put("/items/{id}", update)
        .delete("/items/{id}", remove)
        // Errors stay JSON; the router adds the `Allow` header to the 405 itself.
        .not_found(|_req| error(404, "not found"))
        .method_not_allowed(|req| error(405, format!("{} is not allowed here", req.method())))
}

ankh_guest::export_plugin!(router);

#[cfg(test)]
mod tests {
    use ankh_guest::testing;
    use serde_json::Value;

    use super::*;

    /// The routes that answer before touching the store run in a plain `cargo test`; the
    /// others need a host (`tests/routing.rs` and `tests/kv.rs` drive them through a server).
    #[test]
    fn errors_are_json() {
        let router = router();
        let missing = testing::call(&router, testing::request("GET", "/nothing/here"));
        assert_eq!(missing.status(), 404);
        assert_eq!(missing.json::<Value>().unwrap()["error"], "not found");

        let bad_id = testing::call(&router, testing::request("GET", "/items/milk"));
        assert_eq!(bad_id.status(), 404);
        assert_eq!(
            bad_id.json::<Value>().unwrap()["error"],
            r#"no item with id "milk""#
        );

        let wrong_method = testing::call(&router, testing::request("PATCH", "/items"));
        assert_eq!(wrong_method.status(), 405);
        assert_eq!(wrong_method.header("allow"), Some("GET, HEAD, POST"));
        assert_eq!(
            wrong_method.json::<Value>().unwrap()["error"],
            "PATCH is not allowed here"
        );
    }
}
