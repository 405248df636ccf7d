//! Serving a `wasi:http/proxy` component (what `wasmtime serve`, Spin and wasmCloud run) from
//! ankh's buffered request, with no HTTP server of wasi-http's own.
//!
//! The request becomes an `incoming-request` (its path the part below the plugin's mount:
//! `/NAME/x` arrives as `/x`; its body as it arrives, through an [`Inflow`] the connection
//! fills, with its trailers and with the plugin's body limit as a read error), and the
//! response comes back through
//! a `response-outparam`. A body the guest writes in one go is read whole and answered with
//! its length, like any plugin's response (ankh's own framing, gzip and HEAD rules); a body
//! that comes over time, or is large, or ends with trailers, is streamed: its head leaves
//! with what was written so far and every later piece as it comes (see [`read_response`]).
//!
//! **Bounded memory, no deadlock.** A guest may write its body before it calls
//! `response-outparam.set`, and the host can read it only after: up to
//! [`HTTP_BODY_AHEAD_BYTES`] (1 MiB) waits in the body's stream, as under `wasmtime serve`;
//! a guest that writes more before `set` waits until its handler timeout. After `set` the
//! body is read while the guest still runs (the two are polled together on the call's
//! fiber), and a streamed body holds at most that much in the stream plus
//! [`STREAM_BUFFER_BYTES`] in the connection: a client that reads slowly makes the guest's
//! writes wait. A guest that never finishes its body is cut at the call's handler timeout,
//! like any wait.
//!
//! [`HTTP_BODY_AHEAD_BYTES`]: crate::limits::HTTP_BODY_AHEAD_BYTES
//! [`STREAM_BUFFER_BYTES`]: crate::limits::STREAM_BUFFER_BYTES

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::Poll;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use wasmtime::Store;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::Proxy;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::message::{Inflow, InflowEnd, Inflowing};
use crate::runtime::bindings::types;
use crate::runtime::sandbox::store::HostState;

use crate::limits::{LOOP_BODY_BYTES, STREAM_PIECE_BYTES};
use crate::runtime::host::http::write_piecewise;
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
    inflow: Option<Inflow>,
) -> wasmtime::Result<types::Outcome> {
    let incoming = match to_http(request, inflow) {
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
    incoming: http::Request<RequestBody>,
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
        let mut context = context;
        let outcome = match rx.await {
            Ok(Ok(response)) => read_response(response, cap, head, context.as_deref_mut()).await,
            Ok(Err(code)) => Err(Answer(
                500,
                format!("the handler set an error response: {code:?}"),
            )),
            Err(_) => Err(Answer(
                500,
                "the handler returned without setting a response".into(),
            )),
        };
        (outcome, context)
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
        match (called, collected) {
            // A HEAD response set before a trap: the client has it, the trap is the call's.
            (Some(Err(trap)), Some(Ok((Ok(Collected::Whole(response)), Some(context))))) => {
                send(context, response);
                return Err(trap);
            }
            (Some(done), collected) => (done, collected),
            // The response is complete (or streamed to its end) and the guest still runs:
            // it leaves now, and the guest finishes within the call's bounds.
            (None, Some(Ok((answer, Some(context))))) => {
                match answer {
                    Ok(Collected::Whole(response)) => send(context, response),
                    Ok(Collected::Streamed) => {}
                    Err(Answer(status, why)) => send(context, refusal(status, &why)),
                }
                call.await?;
                return Ok(types::Outcome::Done);
            }
            (None, collected) => (call.await, collected),
        }
    };
    // A trap is the call's failure, whatever was read.
    called?;
    Ok(match collected {
        Some(Ok((Ok(Collected::Whole(response)), _))) => types::Outcome::Respond(response),
        Some(Ok((Ok(Collected::Streamed), _))) => types::Outcome::Done,
        Some(Ok((Err(Answer(status, why)), _))) => types::Outcome::Respond(refusal(status, &why)),
        Some(Err(stop)) => {
            store.data_mut().watch.record(stop);
            return Err(wasmtime::Error::new(
                crate::runtime::sandbox::watch::Stopped(stop),
            ));
        }
        None => unreachable!("only a trap leaves the body unread, and it returned above"),
    })
}

/// What came of reading the guest's response.
enum Collected {
    /// Its whole body, read before any of it was sent.
    Whole(types::Response),
    /// Sent as a stream, through the call's answer, to its end (or until the client left).
    Streamed,
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

/// A request body as wasi-http takes it.
type RequestBody = UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>;

/// A request body read as it arrives (see [`Inflow`]).
struct Arriving {
    inflow: Inflow,
    ended: bool,
}

impl http_body::Body for Arriving {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = std::task::ready!(self.inflow.poll_next(cx));
        let end = match next {
            Inflowing::Piece(piece) => {
                return Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(piece)))));
            }
            Inflowing::End(end) => end,
        };
        self.ended = true;
        Poll::Ready(match end {
            InflowEnd::Complete(trailers) if trailers.is_empty() => None,
            InflowEnd::Complete(trailers) => {
                // Trailer fields that `http` cannot carry are dropped, as a proxy would.
                let mut map = http::HeaderMap::new();
                for (name, value) in trailers {
                    if let (Ok(name), Ok(value)) = (
                        http::HeaderName::from_bytes(name.as_bytes()),
                        http::HeaderValue::from_bytes(&value),
                    ) {
                        map.append(name, value);
                    }
                }
                Some(Ok(http_body::Frame::trailers(map)))
            }
            InflowEnd::TooLarge(limit) => Some(Err(
                wasmtime_wasi_http::Error::HttpRequestBodySize(Some(limit)),
            )),
            InflowEnd::Cut => Some(Err(wasmtime_wasi_http::Error::ConnectionTerminated)),
        })
    }
}

/// The component let go of its body: the rest is dropped as it arrives.
impl Drop for Arriving {
    fn drop(&mut self) {
        self.inflow.abandon();
    }
}

/// The request as wasi-http takes it, its body buffered or `inflow`; an error names what
/// `http` refuses.
fn to_http(
    request: &types::Request,
    inflow: Option<Inflow>,
) -> Result<http::Request<RequestBody>, String> {
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
    let body = match inflow {
        Some(inflow) => Arriving {
            inflow,
            ended: false,
        }
        .boxed_unsync(),
        None => Full::new(Bytes::from(request.body.clone()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    };
    builder
        .body(body)
        .map_err(|e| format!("the request is not valid for wasi:http: {e}"))
}

/// The guest's response: its body read to the end (at most `cap` bytes) while it comes
/// complete, else streamed through `context`.
///
/// Frames that are ready at once are gathered, so a body the guest writes in one go leaves
/// as one response with its length, as before. Once the next frame is not ready (the guest
/// is working, or waiting, between writes), once more than [`STREAM_PIECE_BYTES`] are
/// gathered, or once trailers come, the head leaves with what was gathered, and every later
/// frame follows as it comes, each once the client has taken enough of the earlier ones
/// (see [`Flow`]). A streamed body has no cap: it is bounded by time, not size.
///
/// For HEAD (`head`), a body that fails is no failure, since none of it would be sent: axum,
/// for one, keeps GET's `content-length` on HEAD and writes nothing, so finishing the body
/// fails and the guest traps after setting its response. The answer is then the head, with
/// the length the guest declared for the response writer to send where GET would.
///
/// [`Flow`]: crate::message::Flow
async fn read_response(
    response: http::Response<HyperOutgoingBody>,
    cap: u64,
    head: bool,
    mut context: Option<&mut dyn crate::runtime::host::http::Respond>,
) -> Result<Collected, Answer> {
    let (parts, mut body) = response.into_parts();
    let mut bytes = Vec::new();
    let mut on_loop = true;
    // HEAD too: its head mirrors GET's, and the pieces are dropped (the body is drained so
    // the guest can finish, never gathered).
    let may_stream = context.as_ref().is_some_and(|c| c.streams());
    let mut flow: Option<crate::message::Flow> = None;
    // A frame taken while gathering a piece, to be handled next.
    let mut held = None;
    loop {
        let frame = if let Some(frame) = held.take() {
            frame
        } else if flow.is_none() && may_stream {
            // Only what is ready now; a frame not ready means the body comes over time.
            match ready_frame(&mut body).await {
                Some(frame) => frame,
                None => {
                    if let Some(call) = context.as_deref_mut() {
                        flow = Some(start_stream(call, &parts, &mut bytes).await?);
                        if head {
                            // The head is all a HEAD answer has: it is complete. Dropping the
                            // body makes the guest's further writes fail, so it ends.
                            let _ = call.finish(&[]);
                            return Ok(Collected::Streamed);
                        }
                    }
                    continue;
                }
            }
        } else if let (Some(open), Some(call)) = (&flow, context.as_deref_mut()) {
            // The next frame, unless the loop closes the stream first (its client left, or
            // a stream limit passed): a guest that never writes again nor ends its body (or
            // never resolves its trailers) must not hold the call.
            let mut next = std::pin::pin!(body.frame());
            let next = std::future::poll_fn(|cx| {
                if let Poll::Ready(frame) = next.as_mut().poll(cx) {
                    return Poll::Ready(Some(frame));
                }
                open.poll_closed(cx).map(|()| None)
            })
            .await;
            match next {
                Some(frame) => frame,
                None => {
                    call.cut("its client left, or a stream limit passed");
                    return Ok(Collected::Streamed);
                }
            }
        } else {
            body.frame().await
        };
        let Some(frame) = frame else { break };
        let frame = match frame {
            Ok(frame) => frame,
            Err(_) if head && flow.is_some() => {
                // The head is out and complete: nothing of the body would have been sent.
                if let Some(call) = context.as_deref_mut() {
                    let _ = call.finish(&[]);
                }
                return Ok(Collected::Streamed);
            }
            Err(_) if head => {
                return Ok(Collected::Whole(types::Response {
                    status: parts.status.as_u16(),
                    headers: response_headers(&parts.headers, &["trailer"]),
                    body: Vec::new(),
                }));
            }
            Err(e) => {
                if let Some(call) = context.as_deref_mut().filter(|_| flow.is_some()) {
                    // The head is out: the body is cut, and the client sees it incomplete.
                    call.cut(&format!("the handler's response body failed: {e}"));
                    return Ok(Collected::Streamed);
                }
                return Err(Answer(
                    500,
                    format!("the handler's response body failed: {e}"),
                ));
            }
        };
        let frame = match frame.into_data() {
            Ok(data) => {
                if let (Some(flow), Some(call)) = (&flow, context.as_deref_mut()) {
                    // The writes that are ready now, gathered into one piece: a guest writes
                    // at most 4 KiB at a time, and each piece costs the loop a hand-off and
                    // the wire a chunk header.
                    let mut piece = Vec::from(data);
                    while piece.len() < STREAM_PIECE_BYTES {
                        match ready_frame(&mut body).await {
                            Some(Some(Ok(frame))) if frame.is_data() => {
                                if let Ok(data) = frame.into_data() {
                                    piece.extend_from_slice(&data);
                                }
                            }
                            Some(other) => {
                                held = Some(other);
                                break;
                            }
                            None => break,
                        }
                    }
                    if write_piecewise(call, flow, &piece).await.is_err() {
                        // The client is gone, or the body broke its declared length: nothing
                        // more of it is read; the guest's call ends at its next wait.
                        return Ok(Collected::Streamed);
                    }
                    continue;
                }
                if (bytes.len() + data.len()) as u64 > cap && !may_stream {
                    return Err(Answer(
                        502,
                        format!("the handler's response body is over the limit of {cap} bytes"),
                    ));
                }
                bytes.extend_from_slice(&data);
                if may_stream && bytes.len() > STREAM_PIECE_BYTES {
                    if let Some(call) = context.as_deref_mut() {
                        flow = Some(start_stream(call, &parts, &mut bytes).await?);
                        if head {
                            // The head is all a HEAD answer has: it is complete. Dropping the
                            // body makes the guest's further writes fail, so it ends.
                            let _ = call.finish(&[]);
                            return Ok(Collected::Streamed);
                        }
                    }
                    continue;
                }
                // A big body is collected (and then compressed) on a worker, not on the loop.
                if on_loop && bytes.len() > LOOP_BODY_BYTES {
                    on_loop = false;
                    leave_loop().await;
                }
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(trailers) = frame.into_trailers() {
            let Some(call) = context.as_deref_mut().filter(|_| may_stream) else {
                // Nowhere to send them: a buffered body carries no trailers.
                continue;
            };
            if flow.is_none() {
                start_stream(call, &parts, &mut bytes).await?;
            }
            let trailers: Vec<(String, Vec<u8>)> = trailers
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect();
            let _ = call.finish(&trailers);
            return Ok(Collected::Streamed);
        }
    }
    if let (Some(_), Some(call)) = (&flow, context) {
        // A body short of its declared length is cut by `finish`.
        let _ = call.finish(&[]);
        return Ok(Collected::Streamed);
    }
    // A HEAD response keeps the length it declared: the response writer sends it where GET
    // would have, since the body it stands for is not there.
    let dropped: &[&str] = if head && bytes.is_empty() {
        &["trailer"]
    } else {
        &DROPPED_RESPONSE_HEADERS
    };
    Ok(Collected::Whole(types::Response {
        status: parts.status.as_u16(),
        headers: response_headers(&parts.headers, dropped),
        body: bytes,
    }))
}

/// The body's next frame if it is ready now (`Some(None)` at its end), else `None`.
async fn ready_frame(
    body: &mut HyperOutgoingBody,
) -> Option<Option<Result<http_body::Frame<Bytes>, wasmtime_wasi_http::Error>>> {
    std::future::poll_fn(|cx| {
        Poll::Ready(
            match http_body::Body::poll_frame(Pin::new(&mut *body), cx) {
                Poll::Ready(frame) => Some(frame),
                Poll::Pending => None,
            },
        )
    })
    .await
}

/// Sends the head of the guest's response as a stream, then what was gathered of its body.
async fn start_stream(
    call: &mut dyn crate::runtime::host::http::Respond,
    parts: &http::response::Parts,
    gathered: &mut Vec<u8>,
) -> Result<crate::message::Flow, Answer> {
    let headers: Vec<(String, Vec<u8>)> = response_headers(&parts.headers, &[])
        .into_iter()
        .map(|h| (h.name, h.value))
        .collect();
    // An invalid head was answered with a 500 by `start`: nothing more is sent.
    let flow = call
        .start(parts.status.as_u16(), &headers)
        .map_err(|e| Answer(500, e.to_string()))?;
    let first = std::mem::take(gathered);
    // Written or not (the client may be gone already), the rest follows the flow.
    let _ = write_piecewise(call, &flow, &first).await;
    Ok(flow)
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

/// Why a WASI 0.3 component's request got no response of its own.
pub(crate) struct ServiceError {
    /// The status the client gets.
    pub status: u16,
    /// What the log says.
    pub why: String,
    /// Whether it ran out of time (else it failed).
    pub timed_out: bool,
}

/// Serves `request` on one of a WASI 0.3 component's instances (see
/// [`crate::runtime::engine::concurrent`]), and answers through `context`: the response read
/// whole, or streamed, as for a 0.2 component (see [`read_response`]). The instance's loop
/// runs on `tokio`; this waits for its response head, then reads its body.
pub(crate) async fn serve_service(
    service: &crate::runtime::engine::concurrent::Service,
    tokio: &tokio::runtime::Handle,
    request: &types::Request,
    inflow: Option<Inflow>,
    context: &mut dyn crate::runtime::host::http::Respond,
    cap: u64,
) -> Result<(), ServiceError> {
    use wasmtime_wasi_http::handler::{ExpirationError, InstantiationError, TrapOrPanicError};
    let incoming = to_http(request, inflow).map_err(|why| ServiceError {
        status: 400,
        why,
        timed_out: false,
    })?;
    let head = incoming.method() == http::Method::HEAD;
    let handler = service.handler();
    let answered = tokio
        .spawn(crate::runtime::engine::concurrent::serve(handler, incoming))
        .await;
    let response = match answered {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            let (status, timed_out, why) = if e.is::<ExpirationError>() {
                (
                    504,
                    true,
                    "gave no response within its handler timeout".to_owned(),
                )
            } else if e.is::<TrapOrPanicError>() {
                (
                    500,
                    false,
                    "failed (its instance trapped with this request in flight)".to_owned(),
                )
            } else if let Some(failed) = e.downcast_ref::<InstantiationError<()>>() {
                (
                    500,
                    false,
                    format!("could not be instantiated: {:#}", failed.error),
                )
            } else {
                (500, false, format!("failed: {e:#}"))
            };
            return Err(ServiceError {
                status,
                why,
                timed_out,
            });
        }
        Err(panicked) => {
            return Err(ServiceError {
                status: 500,
                why: format!("failed: the host task serving it ended: {panicked}"),
                timed_out: false,
            });
        }
    };
    match read_response(response, cap, head, Some(context)).await {
        Ok(Collected::Whole(response)) => {
            send(context, response);
            Ok(())
        }
        Ok(Collected::Streamed) => Ok(()),
        Err(Answer(status, why)) => Err(ServiceError {
            status,
            why,
            timed_out: false,
        }),
    }
}
