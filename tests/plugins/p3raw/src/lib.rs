//! A WASI 0.3 HTTP service on the `wasip3` bindings crate (0.10, WASI 0.3.2's WIT), with no
//! SDK: streams and futures of the component model as wit-bindgen gives them. Its routes are
//! those of `p3spin`, written the raw way; `/echo` hands the request's body stream, trailers
//! future and all, straight back as the response's.

use wasip3::http::types::{ErrorCode, Fields, Request, Response, Scheme};
use wasip3::{wit_future, wit_stream};

struct Service;

/// The reading end of a `trailers` future.
type TrailersRx =
    wasip3::wit_bindgen::rt::async_support::FutureReader<Result<Option<Fields>, ErrorCode>>;

/// A `trailers` future that resolves to no trailers (its writer is dropped at once).
fn no_trailers() -> TrailersRx {
    let (_tx, rx) = wit_future::new::<Result<Option<Fields>, ErrorCode>>(|| Ok(None));
    rx
}

fn fields(list: &[(&str, &[u8])]) -> Fields {
    let list: Vec<(String, Vec<u8>)> = list
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
        .collect();
    Fields::from_list(&list).expect("valid fields")
}

/// A response whose body is written after it is returned (nobody reads it before).
fn respond(status: u16, headers: Fields, body: Vec<u8>, trailers: Option<Fields>) -> Response {
    let (mut tx, rx) = wit_stream::new::<u8>();
    let (trailers_tx, trailers_rx) =
        wit_future::new::<Result<Option<Fields>, ErrorCode>>(|| Ok(None));
    drop(wasip3::spawn_local(async move {
        let _ = tx.write_all(body).await;
        drop(tx);
        let _ = trailers_tx.write(Ok(trailers)).await;
    }));
    let (response, _sent) = Response::new(headers, Some(rx), trailers_rx);
    let _ = response.set_status_code(status);
    response
}

fn text(status: u16, body: impl Into<Vec<u8>>) -> Response {
    respond(
        status,
        fields(&[("content-type", b"text/plain")]),
        body.into(),
        None,
    )
}

fn query(target: &str, key: &str) -> Option<String> {
    let (_, query) = target.split_once('?')?;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.to_owned())
    })
}

fn number(target: &str, key: &str) -> u64 {
    query(target, key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn wait_ms(ms: u64) {
    wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
}

/// The body of `response`, read whole.
async fn body_of(response: Response) -> Vec<u8> {
    let (_tx, done) = wit_future::new::<Result<(), ErrorCode>>(|| Ok(()));
    let (body, _trailers) = Response::consume_body(response, done);
    body.collect().await
}

impl wasip3::exports::http::handler::Guest for Service {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let target = request.get_path_with_query().unwrap_or_else(|| "/".into());
        let path = target.split('?').next().unwrap_or("/").to_owned();
        Ok(match path.as_str() {
            "/" => text(200, "hello from a WASI 0.3 component (wasip3 bindings)\n"),
            "/echo" => {
                let method = format!("{:?}", request.get_method()).to_uppercase();
                let length = request
                    .get_headers()
                    .get("content-length")
                    .into_iter()
                    .next();
                let mut list: Vec<(&str, Vec<u8>)> = vec![
                    ("x-method", method.into_bytes()),
                    ("x-path", target.clone().into_bytes()),
                ];
                if let Some(length) = length {
                    list.push(("x-req-content-length", length));
                }
                let borrowed: Vec<(&str, &[u8])> =
                    list.iter().map(|(n, v)| (*n, v.as_slice())).collect();
                let (_tx, done) = wit_future::new::<Result<(), ErrorCode>>(|| Ok(()));
                let (body, trailers) = Request::consume_body(request, done);
                let (response, _sent) = Response::new(fields(&borrowed), Some(body), trailers);
                response
            }
            "/headers" => {
                let mut lines = Vec::new();
                for (name, value) in request.get_headers().copy_all() {
                    lines.extend_from_slice(name.as_bytes());
                    lines.extend_from_slice(b": ");
                    lines.extend_from_slice(String::from_utf8_lossy(&value).as_bytes());
                    lines.push(b'\n');
                }
                text(200, lines)
            }
            "/status" => {
                let code = u16::try_from(number(&target, "code")).unwrap_or(500);
                let (response, _sent) = Response::new(Fields::new(), None, no_trailers());
                let _ = response.set_status_code(code);
                response
            }
            "/big" => {
                let n = usize::try_from(number(&target, "bytes")).unwrap_or(0);
                text(
                    200,
                    (0..n).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>(),
                )
            }
            "/trailers" => respond(
                200,
                fields(&[("content-type", b"text/plain")]),
                b"a body with trailers\n".to_vec(),
                Some(fields(&[("x-checksum", b"abc123")])),
            ),
            "/stream" => {
                let (n, ms) = (number(&target, "n"), number(&target, "ms"));
                let (mut tx, rx) = wit_stream::new::<u8>();
                drop(wasip3::spawn_local(async move {
                    for i in 1..=n {
                        if !tx
                            .write_all(format!("tick {i}\n").into_bytes())
                            .await
                            .is_empty()
                        {
                            break;
                        }
                        wait_ms(ms).await;
                    }
                }));
                let (response, _sent) = Response::new(
                    fields(&[("content-type", b"text/plain")]),
                    Some(rx),
                    no_trailers(),
                );
                response
            }
            "/fetch" => {
                let Some(url) = query(&target, "url") else {
                    return Ok(text(400, "no url\n"));
                };
                let rest = url.strip_prefix("http://").unwrap_or(&url);
                let (authority, path) = match rest.find('/') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, "/"),
                };
                let (outbound, _sent) = Request::new(Fields::new(), None, no_trailers(), None);
                let _ = outbound.set_scheme(Some(&Scheme::Http));
                let _ = outbound.set_authority(Some(authority));
                let _ = outbound.set_path_with_query(Some(path));
                match wasip3::http::client::send(outbound).await {
                    Ok(response) => {
                        let status = response.get_status_code();
                        let mut answer = format!("fetched {status}: ").into_bytes();
                        answer.extend(body_of(response).await);
                        text(200, answer)
                    }
                    Err(e) => text(502, format!("fetch failed: {e:?}\n")),
                }
            }
            "/drip" => {
                let (_tx, done) = wit_future::new::<Result<(), ErrorCode>>(|| Ok(()));
                let (mut body, trailers) = Request::consume_body(request, done);
                let mut lines = String::new();
                loop {
                    let (result, piece) = body.read(Vec::with_capacity(64 * 1024)).await;
                    if !piece.is_empty() {
                        lines.push_str(&format!("read {}\n", piece.len()));
                    }
                    if !matches!(result, wasip3::wit_bindgen::StreamResult::Complete(_)) {
                        break;
                    }
                }
                match trailers.await {
                    Ok(Some(trailers)) => {
                        for (name, value) in trailers.copy_all() {
                            lines.push_str(&format!(
                                "trailer {name}: {}\n",
                                String::from_utf8_lossy(&value)
                            ));
                        }
                        lines.push_str("end\n");
                    }
                    Ok(None) => lines.push_str("end\n"),
                    Err(e) => lines.push_str(&format!("error: {e:?}\n")),
                }
                text(200, lines)
            }
            "/count" => text(200, format!("{}\n", count())),
            "/sleep" => {
                wait_ms(number(&target, "ms")).await;
                text(200, "slept\n")
            }
            "/trap" => panic!("asked to trap"),
            _ => text(404, "not found\n"),
        })
    }
}

/// Requests this instance has served.
fn count() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SERVED: AtomicU64 = AtomicU64::new(0);
    SERVED.fetch_add(1, Ordering::Relaxed) + 1
}

wasip3::http::service::export!(Service);
