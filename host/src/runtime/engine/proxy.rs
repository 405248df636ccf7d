//! Serving a `wasi:http/proxy` component (what `wasmtime serve`, Spin and wasmCloud run) from
//! ankh's buffered request, with no HTTP server of wasi-http's own.
//!
//! The request becomes an `incoming-request` (its body already complete, its path the part
//! below the plugin's mount: `/NAME/x` arrives as `/x`), the response
//! comes back through a `response-outparam`, and its body is read to the end before ankh
//! answers: trailers and streaming are not passed on, the body is buffered like any plugin's
//! response, and the host then writes it with its own framing, gzip and HEAD rules.
//!
//! **The body never deadlocks a call.** A guest may write its body before it calls
//! `response-outparam.set`, and the host can read it only after. Each write into a body
//! stream is at most [`HTTP_BODY_WRITE_BYTES`] (the stream's `check-write` budget), and the
//! stream buffers enough writes to hold [`MAX_RESPONSE_BYTES`]: a body within the cap
//! always fits, whatever the guest's write sizes, and the host memory it holds is bounded by
//! the cap. The body is read while the guest still runs (the two are polled together on the
//! call's fiber). A guest that never finishes its body is cut at the call's handler
//! timeout, like any wait; one whose body passes the cap gets 502.
//!
//! [`HTTP_BODY_WRITE_BYTES`]: crate::limits::HTTP_BODY_WRITE_BYTES
//! [`MAX_RESPONSE_BYTES`]: crate::limits::MAX_RESPONSE_BYTES

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use wasmtime::Store;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::Proxy;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::runtime::bindings::types;
use crate::runtime::sandbox::store::HostState;

use crate::limits::LOOP_BODY_BYTES;
use crate::runtime::sandbox::exec::leave_loop;

/// The authority given to a request that names none (HTTP/1.0 without `Host`): wasi-http
/// requires one.
const SYNTHESIZED_AUTHORITY: &str = "localhost";

/// Response headers a guest cannot send, besides wasi:http's forbidden ones (which its
/// `fields` already refuse): ankh writes the framing itself, and drops trailers.
const DROPPED_RESPONSE_HEADERS: [&str; 2] = ["content-length", "trailer"];

/// What a proxy call answered, as ankh's own plugins answer.
///
/// The response leaves as soon as its body is complete, while the guest may go on running
/// (wasi:http lets a handler work on after `set`), as an early `http.respond` does for ankh's
/// own plugins: the call's context is out of the store for the length of the call, and the
/// outcome is then `done`. A guest that traps before its response is complete gets a 5xx.
pub(crate) async fn handle(
    store: &mut Store<HostState>,
    proxy: &Proxy,
    request: &types::Request,
) -> wasmtime::Result<types::Outcome> {
    let incoming = match to_http(request) {
        Ok(incoming) => incoming,
        Err(why) => return Ok(types::Outcome::Respond(refusal(400, &why))),
    };
    let mut context = store.data_mut().call.take();
    let result = serve(store, proxy, incoming, context.as_deref_mut()).await;
    store.data_mut().call = context;
    result
}

async fn serve(
    store: &mut Store<HostState>,
    proxy: &Proxy,
    incoming: http::Request<Full<Bytes>>,
    context: Option<&mut dyn crate::runtime::host::http::Respond>,
) -> wasmtime::Result<types::Outcome> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let head = incoming.method() == http::Method::HEAD;
    store.data_mut().head_request = head;
    let (req, out) = {
        let mut view = store.data_mut().http();
        let req = view.new_incoming_request(Scheme::Http, incoming)?;
        let out = view.new_response_outparam(tx)?;
        (req, out)
    };
    let cap = store.data().limits.max_response_bytes;
    let stop = store.data().watch.stopped();
    let collect = async move {
        match rx.await {
            Ok(Ok(response)) => read_response(response, cap, head).await,
            Ok(Err(code)) => Err(Answer(
                500,
                format!("the handler set an error response: {code:?}"),
            )),
            Err(_) => Err(Answer(
                500,
                "the handler returned without setting a response".into(),
            )),
        }
    };
    let (called, collected) = {
        let mut call = pin!(
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut *store, req, out)
        );
        // The guest and the reading of its body, polled together: the body is drained while
        // the guest writes it. Once the guest has returned, its body gets the rest of the
        // call's wall-clock time to end.
        let mut collect = pin!(crate::runtime::sandbox::watch::race(collect, stop));
        let mut called: Option<wasmtime::Result<()>> = None;
        let collected = std::future::poll_fn(|cx| {
            if called.is_none()
                && let Poll::Ready(done) = call.as_mut().poll(cx)
            {
                called = Some(done);
            }
            if matches!(called, Some(Err(_))) {
                // A trap: whatever was read is not an answer, unless it is a HEAD response,
                // complete once set.
                return match collect.as_mut().poll(cx) {
                    Poll::Ready(answer) if head => Poll::Ready(Some(answer)),
                    _ => Poll::Ready(None),
                };
            }
            collect.as_mut().poll(cx).map(Some)
        })
        .await;
        match (called, collected, context) {
            // A HEAD response set before a trap: the client has it, the trap is the call's.
            (Some(Err(trap)), Some(Ok(Ok(response))), Some(context)) => {
                send(context, response);
                return Err(trap);
            }
            (Some(done), collected, _) => (done, collected),
            // The response is complete and the guest still runs: it leaves now, and the
            // guest finishes within the call's bounds.
            (None, Some(Ok(answer)), Some(context)) => {
                send(
                    context,
                    answer.unwrap_or_else(|Answer(status, why)| refusal(status, &why)),
                );
                call.await?;
                return Ok(types::Outcome::Done);
            }
            (None, collected, _) => (call.await, collected),
        }
    };
    // A trap is the call's failure, whatever was read.
    called?;
    Ok(match collected {
        Some(Ok(Ok(response))) => types::Outcome::Respond(response),
        Some(Ok(Err(Answer(status, why)))) => types::Outcome::Respond(refusal(status, &why)),
        Some(Err(stop)) => {
            store.data_mut().watch.record(stop);
            return Err(wasmtime::Error::new(
                crate::runtime::sandbox::watch::Stopped(stop),
            ));
        }
        None => unreachable!("only a trap leaves the body unread, and it returned above"),
    })
}

/// Sends `response` through the call's early answer; the guest may work on.
fn send(context: &mut dyn crate::runtime::host::http::Respond, response: types::Response) {
    let headers: Vec<_> = response
        .headers
        .into_iter()
        .map(|h| (h.name, h.value))
        .collect();
    let _ = context.respond(response.status, &headers, &response.body);
}

/// Why a proxy call gives no response of its own: the status the client gets, and why.
struct Answer(u16, String);

/// A host-made answer for the client.
fn refusal(status: u16, why: &str) -> types::Response {
    types::Response {
        status,
        headers: vec![types::Header {
            name: "content-type".into(),
            value: b"text/plain; charset=utf-8".to_vec(),
        }],
        body: format!("{why}\n").into_bytes(),
    }
}

/// The buffered request as wasi-http takes it; an error names what `http` refuses.
fn to_http(request: &types::Request) -> Result<http::Request<Full<Bytes>>, String> {
    let method = http::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| format!("method {:?} is not valid for wasi:http", request.method))?;
    let host = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| String::from_utf8_lossy(&h.value).into_owned());
    let authority = host.as_deref().unwrap_or(SYNTHESIZED_AUTHORITY);
    // The path below the mount, as a reverse proxy that strips its prefix passes it on: a
    // component written for `/` works unchanged at `/NAME` (mounted at `/` it sees all).
    let below = request
        .path
        .strip_prefix(request.mount.as_str())
        .unwrap_or(&request.path);
    let path = if below.starts_with('/') {
        below.to_owned()
    } else {
        format!("/{below}")
    };
    let target = if request.query.is_empty() {
        path
    } else {
        format!("{path}?{}", request.query)
    };
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(target)
        .build()
        .map_err(|e| format!("the request target is not valid for wasi:http: {e}"))?;
    let mut builder =
        http::Request::builder()
            .method(method)
            .uri(uri)
            .version(match request.version {
                types::HttpVersion::Http10 => http::Version::HTTP_10,
                types::HttpVersion::Http11 => http::Version::HTTP_11,
            });
    let headers = builder.headers_mut().expect("the builder has no error yet");
    for h in &request.headers {
        let name = http::HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("header name {:?} is not valid for wasi:http", h.name))?;
        let value = http::HeaderValue::from_bytes(&h.value).map_err(|_| {
            format!(
                "the value of header {:?} is not valid for wasi:http",
                h.name
            )
        })?;
        headers.append(name, value);
    }
    if host.is_none() {
        headers.insert(
            http::header::HOST,
            http::HeaderValue::from_static(SYNTHESIZED_AUTHORITY),
        );
    }
    builder
        .body(Full::new(Bytes::from(request.body.clone())))
        .map_err(|e| format!("the request is not valid for wasi:http: {e}"))
}

/// The guest's response with its body read to the end, at most `cap` bytes.
///
/// For HEAD (`head`), a body that fails is no failure, since none of it would be sent: axum,
/// for one, keeps GET's `content-length` on HEAD and writes nothing, so finishing the body
/// fails and the guest traps after setting its response. The answer is then the head, with
/// the length the guest declared for the response writer to send where GET would.
async fn read_response(
    response: http::Response<HyperOutgoingBody>,
    cap: u64,
    head: bool,
) -> Result<types::Response, Answer> {
    let (parts, mut body) = response.into_parts();
    let mut bytes = Vec::new();
    let mut on_loop = true;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(_) if head => {
                return Ok(types::Response {
                    status: parts.status.as_u16(),
                    headers: response_headers(&parts.headers, &["trailer"]),
                    body: Vec::new(),
                });
            }
            Err(e) => {
                return Err(Answer(
                    500,
                    format!("the handler's response body failed: {e}"),
                ));
            }
        };
        if let Ok(data) = frame.into_data() {
            if (bytes.len() + data.len()) as u64 > cap {
                return Err(Answer(
                    502,
                    format!("the handler's response body is over the limit of {cap} bytes"),
                ));
            }
            bytes.extend_from_slice(&data);
            // A big body is collected (and then compressed) on a worker, not on the loop.
            if on_loop && bytes.len() > LOOP_BODY_BYTES {
                on_loop = false;
                leave_loop().await;
            }
        }
        // Trailers are dropped: the body is buffered, and ankh's responses carry none.
    }
    // A HEAD response keeps the length it declared: the response writer sends it where GET
    // would have, since the body it stands for is not there.
    let dropped: &[&str] = if head && bytes.is_empty() {
        &["trailer"]
    } else {
        &DROPPED_RESPONSE_HEADERS
    };
    Ok(types::Response {
        status: parts.status.as_u16(),
        headers: response_headers(&parts.headers, dropped),
        body: bytes,
    })
}

/// The guest's response headers, without wasi:http's forbidden ones and `dropped`.
fn response_headers(headers: &http::HeaderMap, dropped: &[&str]) -> Vec<types::Header> {
    headers
        .iter()
        .filter(|(name, _)| {
            !dropped.contains(&name.as_str())
                && !wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(name)
        })
        .map(|(name, value)| types::Header {
            name: name.as_str().to_owned(),
            value: value.as_bytes().to_vec(),
        })
        .collect()
}
