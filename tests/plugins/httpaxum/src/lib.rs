//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then serve it with
//! ankh or `wasmtime serve`.
//!
//! A `wasi:http/proxy` component as wasmCloud's `http-handler` and `http-kv-handler` templates
//! write one: an axum `Router` served through `wstd-axum`, and the standard
//! `wasi:keyvalue@0.2.0-draft` imports bound with wit-bindgen, opening buckets by name as a
//! component written for another host does. Routes (below its mount):
//! - `GET /`: `hello from axum`; axum answers HEAD from the GET route, keeping the
//!   Content-Length and writing no body
//! - `GET /kv/{bucket}/{key}`: the value, or 404 `absent`
//! - `PUT /kv/{bucket}/{key}`: stores the request body → 204
//! - `POST /kv/{bucket}/{key}/incr`: adds one (`atomics.increment`) → the new count
//! - `GET /kv/{bucket}`: every key of the bucket, one a line, paging with the cursor
//! - a store error: 500 with the error

wit_bindgen::generate!({
    inline: "
        package test:httpaxum;

        world imports {
            import wasi:keyvalue/store@0.2.0-draft;
            import wasi:keyvalue/atomics@0.2.0-draft;
        }
    ",
    path: "../../../wit",
    generate_all,
});

use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{get, post};
use wasi::keyvalue::{atomics, store};

type Failure = (StatusCode, String);

#[wstd_axum::http_server]
fn main() -> Router {
    Router::new()
        .route("/", get(hello))
        .route("/kv/{bucket}", get(keys))
        .route("/kv/{bucket}/{key}", get(read).put(write))
        .route("/kv/{bucket}/{key}/incr", post(incr))
}

async fn hello() -> &'static str {
    "hello from axum\n"
}

fn failed(e: store::Error) -> Failure {
    (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}\n"))
}

fn open(bucket: &str) -> Result<store::Bucket, Failure> {
    store::open(bucket).map_err(failed)
}

async fn read(Path((bucket, key)): Path<(String, String)>) -> Result<Vec<u8>, Failure> {
    match open(&bucket)?.get(&key).map_err(failed)? {
        Some(value) => Ok(value),
        None => Err((StatusCode::NOT_FOUND, "absent\n".into())),
    }
}

async fn write(
    Path((bucket, key)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, Failure> {
    open(&bucket)?.set(&key, &body).map_err(failed)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn incr(Path((bucket, key)): Path<(String, String)>) -> Result<String, Failure> {
    let bucket = open(&bucket)?;
    let count = atomics::increment(&bucket, &key, 1).map_err(failed)?;
    Ok(format!("{count}\n"))
}

async fn keys(Path(bucket): Path<String>) -> Result<String, Failure> {
    let bucket = open(&bucket)?;
    let mut out = String::new();
    let mut cursor = None;
    loop {
        let page = bucket.list_keys(cursor).map_err(failed)?;
        for key in page.keys {
            out.push_str(&key);
            out.push('\n');
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(out),
        }
    }
}
