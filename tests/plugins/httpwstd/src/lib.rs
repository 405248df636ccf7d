//! Build: `cd tests/plugins && cargo build --release --target wasm32-wasip2`, then serve it with
//! ankh or `wasmtime serve`.
//!
//! A `wasi:http/proxy` component written with `wstd` (async Rust on WASI), for ankh's
//! wasi:http tests, written for `/` (ankh passes it the path below its mount):
//! - `/`: `hello from wstd` as text
//! - `/wait?ms=N`: sleeps N ms (at most 10 s), then says how long
//! - `/echo`: the request body back
//! - `/echo-headers`: the request's headers back as the response's, with an empty body
//! - `/fetch?url=U`: a GET of U through `wasi:http/outgoing-handler`; answers `status N` and
//!   the body it got, or 502 and the error
//! - anything else: 404

use wstd::http::{Body, Client, Error, Request, Response, StatusCode};

fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let value = kv.strip_prefix(name)?.strip_prefix('=')?;
        Some(value.replace("%3A", ":").replace("%2F", "/"))
    })
}

#[wstd::http_server]
async fn main(request: Request<Body>) -> Result<Response<Body>, Error> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    match path.as_str() {
        "/" => Ok(Response::new("hello from wstd\n".into())),
        "/wait" => {
            let ms: u64 = param(&query, "ms")
                .and_then(|m| m.parse().ok())
                .unwrap_or(0)
                .min(10_000);
            let started = wstd::time::Instant::now();
            wstd::task::sleep(wstd::time::Duration::from_millis(ms)).await;
            let waited = started.elapsed().as_millis() >= u128::from(ms);
            Ok(Response::new(format!("waited {ms} ms: {waited}\n").into()))
        }
        "/echo" => Ok(Response::new(request.into_body())),
        "/echo-headers" => {
            let mut response = Response::builder();
            *response.headers_mut().expect("a fresh builder") = request.into_parts().0.headers;
            Ok(response.body(Body::empty())?)
        }
        "/fetch" => {
            let Some(url) = param(&query, "url") else {
                return Ok(Response::builder()
                    .status(StatusCode::BAD_REQUEST)
                    .body("missing url\n".into())?);
            };
            let outgoing = Request::get(url.as_str()).body(Body::empty())?;
            match Client::new().send(outgoing).await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let mut body = response.into_body();
                    match body.contents().await {
                        Ok(bytes) => {
                            let mut text = format!("status {status}\n").into_bytes();
                            text.extend_from_slice(bytes);
                            Ok(Response::new(text.into()))
                        }
                        Err(e) => Ok(Response::builder()
                            .status(StatusCode::BAD_GATEWAY)
                            .body(format!("body failed: {e:?}\n").into())?),
                    }
                }
                Err(e) => Ok(Response::builder()
                    .status(StatusCode::BAD_GATEWAY)
                    .body(format!("fetch failed: {e:?}\n").into())?),
            }
        }
        _ => Ok(Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())?),
    }
}
