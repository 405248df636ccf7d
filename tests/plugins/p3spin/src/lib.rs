//! A WASI 0.3 HTTP service built with the Spin Rust SDK (`spin-sdk` 7, `#[http_service]`, as
//! Spin 4's template makes one); it is served unchanged by ankh and by `wasmtime serve`, and the
//! tests compare the two.
//!
//! - `/`: a greeting;
//! - `/echo`: the request body back, with `x-method`, `x-path` and `x-req-content-length`;
//! - `/headers`: the request's headers, one `name: value` line each, in the order received;
//! - `/status?code=N`: that status, no body;
//! - `/big?bytes=N`: N bytes of `abc…z` repeated;
//! - `/trailers`: a body, then the trailer `x-checksum`;
//! - `/stream?n=N&ms=M`: N lines `tick I`, M ms apart;
//! - `/drip`: reads the request body as it arrives, answers `read N` per piece, its trailers and
//!   `end` (or `error: WHY`);
//! - `/fetch?url=U`: a GET to `U` (an outbound call), answered as `fetched STATUS: BODY`;
//! - `/count`: how many requests this instance has served (instances are reused);
//! - `/sleep?ms=M`: answers after M ms (requests overlap on one instance);
//! - `/trap`: panics, which traps the instance;
//! - anything else: 404.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::SinkExt;
use http_body_util::{BodyExt, Full, StreamBody};
use spin_sdk::http::body::IncomingBodyExt;
use spin_sdk::http::{BoxBody, IntoResponse, Request, box_body};
use spin_sdk::http_service;

static SERVED: AtomicU64 = AtomicU64::new(0);

fn text(status: u16, body: impl Into<Bytes>) -> http::Response<BoxBody> {
    http::Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(box_body(Full::new(body.into())))
        .unwrap()
}

fn query(request: &Request, key: &str) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.to_owned())
    })
}

fn number(request: &Request, key: &str) -> u64 {
    query(request, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn wait_ms(ms: u64) {
    spin_sdk::wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
}

#[http_service]
async fn handle(request: Request) -> impl IntoResponse {
    let served = SERVED.fetch_add(1, Ordering::Relaxed) + 1;
    let path = request.uri().path().to_owned();
    match path.as_str() {
        "/" => text(200, "hello from a WASI 0.3 component (spin-sdk)\n"),
        "/echo" => {
            let method = request.method().to_string();
            let target = request
                .uri()
                .path_and_query()
                .map_or("/".to_owned(), |p| p.to_string());
            let length = request
                .headers()
                .get("content-length")
                .map(|v| v.as_bytes().to_vec());
            let body = match request.into_body().bytes().await {
                Ok(body) => body,
                Err(e) => return text(500, format!("reading the body failed: {e:?}\n")),
            };
            let mut response = http::Response::builder()
                .status(200)
                .header("x-method", method)
                .header("x-path", target);
            if let Some(length) = length {
                response = response.header("x-req-content-length", length);
            }
            response.body(box_body(Full::new(body))).unwrap()
        }
        "/headers" => {
            let mut lines = String::new();
            for (name, value) in request.headers() {
                lines.push_str(&format!(
                    "{name}: {}\n",
                    String::from_utf8_lossy(value.as_bytes())
                ));
            }
            text(200, lines)
        }
        "/status" => {
            let code = u16::try_from(number(&request, "code")).unwrap_or(500);
            http::Response::builder()
                .status(code)
                .body(box_body(http_body_util::Empty::new()))
                .unwrap()
        }
        "/big" => {
            let n = usize::try_from(number(&request, "bytes")).unwrap_or(0);
            let body: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            text(200, body)
        }
        "/trailers" => {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-checksum", http::HeaderValue::from_static("abc123"));
            let frames = futures::stream::iter([
                Ok::<_, anyhow::Error>(http_body::Frame::data(Bytes::from_static(
                    b"a body with trailers\n",
                ))),
                Ok(http_body::Frame::trailers(trailers)),
            ]);
            http::Response::builder()
                .status(200)
                .header("content-type", "text/plain")
                .body(box_body(StreamBody::new(frames)))
                .unwrap()
        }
        "/stream" => {
            let (n, ms) = (number(&request, "n"), number(&request, "ms"));
            let (mut tx, body) = spin_sdk::http::body::stream::<String>();
            spin_sdk::wasip3::spawn(async move {
                for i in 1..=n {
                    if tx.send(format!("tick {i}\n")).await.is_err() {
                        break;
                    }
                    wait_ms(ms).await;
                }
            });
            http::Response::builder()
                .status(200)
                .header("content-type", "text/plain")
                .body(box_body(body))
                .unwrap()
        }
        "/drip" => {
            let mut body = request.into_body();
            let mut lines = String::new();
            loop {
                match body.frame().await {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => lines.push_str(&format!("read {}\n", data.len())),
                        Err(frame) => {
                            if let Ok(trailers) = frame.into_trailers() {
                                for (name, value) in &trailers {
                                    lines.push_str(&format!(
                                        "trailer {name}: {}\n",
                                        String::from_utf8_lossy(value.as_bytes())
                                    ));
                                }
                            }
                        }
                    },
                    Some(Err(e)) => {
                        lines.push_str(&format!("error: {e:?}\n"));
                        return text(200, lines);
                    }
                    None => break,
                }
            }
            lines.push_str("end\n");
            text(200, lines)
        }
        "/fetch" => {
            let Some(url) = query(&request, "url") else {
                return text(400, "no url\n");
            };
            match spin_sdk::http::get(url).await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body = response.into_body().bytes().await.unwrap_or_default();
                    let mut answer = format!("fetched {status}: ").into_bytes();
                    answer.extend_from_slice(&body);
                    text(200, answer)
                }
                Err(e) => text(502, format!("fetch failed: {e:?}\n")),
            }
        }
        "/count" => text(200, format!("{served}\n")),
        "/sleep" => {
            wait_ms(number(&request, "ms")).await;
            text(200, "slept\n")
        }
        "/trap" => panic!("asked to trap"),
        _ => text(404, "not found\n"),
    }
}
