//! A hostile WASI 0.3 HTTP service (issue 35): each route tries to make the host hold
//! something without bound, through what the component model's async gives a guest.
//!
//! - `/hold-body`: a body that writes one line and then never another, and is never closed;
//! - `/hold-trailers`: a whole body whose `trailers` future is never resolved;
//! - `/never`: a `handle` that waits for a future it never resolves;
//! - `/tasks?n=N`: starts N tasks that each wait an hour in the host (N = 0: until it fails),
//!   then answers how many it started;
//! - `/ignore-body`: answers at once and never reads the request's body;
//! - `/huge-write?mib=M`: a body written as one write of M MiB;
//! - `/huge-read?mib=M`: reads the request's body with reads of M MiB each, and answers the
//!   total.
//! - `/burn?ms=N`: computes for N ms (its CPU time is charged to it, and capped by policy);
//! - `/sleep?ms=N`: waits N ms in the host (which costs it next to no CPU time).

use wasip3::http::types::{ErrorCode, Fields, Request, Response};
use wasip3::{wit_future, wit_stream};

struct Service;

type Trailers = Result<Option<Fields>, ErrorCode>;

fn text(body: impl Into<Vec<u8>>) -> Response {
    let (mut tx, rx) = wit_stream::new::<u8>();
    let body = body.into();
    drop(wasip3::spawn_local(async move {
        let _ = tx.write_all(body).await;
    }));
    let (_trailers_tx, trailers) = wit_future::new::<Trailers>(|| Ok(None));
    let (response, _sent) = Response::new(Fields::new(), Some(rx), trailers);
    response
}

fn number(target: &str, key: &str) -> u64 {
    let Some((_, query)) = target.split_once('?') else {
        return 0;
    };
    query
        .split('&')
        .find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == key).then(|| v.parse().ok())?
        })
        .unwrap_or(0)
}

async fn wait_ms(ms: u64) {
    wasip3::clocks::monotonic_clock::wait_for(ms.saturating_mul(1_000_000)).await;
}

const HOUR_MS: u64 = 3_600_000;

impl wasip3::exports::http::handler::Guest for Service {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let target = request.get_path_with_query().unwrap_or_else(|| "/".into());
        let path = target.split('?').next().unwrap_or("/").to_owned();
        Ok(match path.as_str() {
            "/hold-body" => {
                let (mut tx, rx) = wit_stream::new::<u8>();
                drop(wasip3::spawn_local(async move {
                    let _ = tx.write_all(b"first\n".to_vec()).await;
                    // Holds the writer, never writes again, never closes it.
                    wait_ms(HOUR_MS).await;
                    drop(tx);
                }));
                let (_trailers_tx, trailers) = wit_future::new::<Trailers>(|| Ok(None));
                let (response, _sent) = Response::new(Fields::new(), Some(rx), trailers);
                response
            }
            "/hold-trailers" => {
                let (mut tx, rx) = wit_stream::new::<u8>();
                let (trailers_tx, trailers) = wit_future::new::<Trailers>(|| Ok(None));
                drop(wasip3::spawn_local(async move {
                    let _ = tx.write_all(b"whole body\n".to_vec()).await;
                    drop(tx);
                    // The body is over; its trailers never come.
                    wait_ms(HOUR_MS).await;
                    drop(trailers_tx);
                }));
                let (response, _sent) = Response::new(Fields::new(), Some(rx), trailers);
                response
            }
            "/never" => {
                // A future of its own whose writer it keeps and never writes.
                let (_never_written, never) = wit_future::new::<Result<(), ErrorCode>>(|| Ok(()));
                let _ = never.await;
                text("resolved\n")
            }
            "/tasks" => {
                let n = number(&target, "n");
                let mut started = 0_u64;
                while n == 0 || started < n {
                    drop(wasip3::spawn_local(wait_ms(HOUR_MS)));
                    started += 1;
                    if started.is_multiple_of(1024) {
                        // Lets the tasks start (each calls the host) before more are made.
                        wait_ms(0).await;
                    }
                }
                wait_ms(0).await;
                text(format!("started {started} tasks\n"))
            }
            "/ignore-body" => text("ignored\n"),
            "/burn" => {
                // Computes for `ms` of its clock, calling the host only to read it.
                let ms = number(&target, "ms");
                let start = wasip3::clocks::monotonic_clock::now();
                let mut x = 1_u64;
                while wasip3::clocks::monotonic_clock::now() - start < ms.saturating_mul(1_000_000)
                {
                    for _ in 0..1000 {
                        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    }
                }
                text(format!("burned {ms} ms ({x})\n"))
            }
            "/sleep" => {
                wait_ms(number(&target, "ms")).await;
                text("slept\n")
            }
            "/huge-write" => {
                let mib = usize::try_from(number(&target, "mib")).unwrap_or(0);
                let (mut tx, rx) = wit_stream::new::<u8>();
                drop(wasip3::spawn_local(async move {
                    let _ = tx.write_all(vec![b'w'; mib << 20]).await;
                }));
                let (_trailers_tx, trailers) = wit_future::new::<Trailers>(|| Ok(None));
                let (response, _sent) = Response::new(Fields::new(), Some(rx), trailers);
                response
            }
            "/huge-read" => {
                let mib = usize::try_from(number(&target, "mib")).unwrap_or(1);
                let (_tx, done) = wit_future::new::<Result<(), ErrorCode>>(|| Ok(()));
                let (mut body, _trailers) = Request::consume_body(request, done);
                let mut total = 0;
                let mut buffer = Vec::with_capacity(mib << 20);
                loop {
                    let (result, piece) = body.read(buffer).await;
                    total += piece.len();
                    buffer = piece;
                    buffer.clear();
                    if !matches!(result, wasip3::wit_bindgen::StreamResult::Complete(_)) {
                        break;
                    }
                }
                text(format!("read {total}\n"))
            }
            _ => text("not found\n"),
        })
    }
}

wasip3::http::service::export!(Service);
