//! The bodies of an outbound exchange: a response body under the plugin's cap and the
//! between-bytes timeout, holding its place until it is done ([`Bounded`]), and a request body
//! that is read to its end whatever happens to the request ([`Drained`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

use super::gates::Pass;

/// A response body under the cap and the between-bytes timeout, holding its origin's permit
/// until it is done.
pub(super) struct Bounded {
    pub(super) inner: hyper::body::Incoming,
    pub(super) left: u64,
    pub(super) between_bytes: Duration,
    pub(super) timer: Option<Pin<Box<tokio::time::Sleep>>>,
    pub(super) _permit: Pass,
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.timer = None;
                if let Some(data) = frame.data_ref() {
                    let len = data.len() as u64;
                    if len > this.left {
                        return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(None))));
                    }
                    this.left -= len;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(if e.is_timeout() {
                HttpError::HttpResponseTimeout
            } else {
                HttpError::HttpResponseIncomplete
            }))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let between = this.between_bytes;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(between)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that, dropped before its end (the request was refused, or its connection
/// failed), goes on being read in the background until the guest ends it. Without this the
/// guest's next write or `finish` fails with a reset stream, and a guest that writes its body
/// before it asks for the response (as most do) reports that instead of the refusal.
pub(super) struct Drained(pub(super) Option<WasiBody>);

impl Body for Drained {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let Some(body) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = Pin::new(body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            self.0 = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.0
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Drained {
    fn drop(&mut self) {
        let Some(mut body) = self.0.take() else {
            return;
        };
        // Bounded by the guest: the writer is its stream, which ends with its call at the
        // latest. Outside a runtime (never, for a request the hook took) it is just dropped.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { while let Some(Ok(_)) = body.frame().await {} });
        }
    }
}
