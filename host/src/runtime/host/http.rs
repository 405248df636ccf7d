//! The `http` import: a plugin answers its request early (`http.respond`) and keeps working.
//!
//! The runtime knows nothing of connections or of the wire: for the length of a call the
//! store holds where its answer goes as a [`Respond`], which the pool implements (it encodes
//! the response, logs it and hands the bytes to the connection's event loop).

use std::any::Any;

use crate::limits::{LOOP_BODY_BYTES, STREAM_PIECE_BYTES};
pub use crate::message::Flow;
use crate::runtime::bindings::ankh::plugin::http;
use crate::runtime::bindings::types::{self, RespondError};
use crate::runtime::sandbox::exec::leave_loop;
use crate::runtime::sandbox::store::HostState;

/// A second final response was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlreadyResponded;

/// Why a streamed response, or one of its pieces, was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("the request was already answered")]
    AlreadyResponded,
    #[error("the response is not valid ({0}); a 500 was sent instead")]
    Invalid(String),
    #[error("no streamed response was started, or it has ended")]
    NotStarted,
    #[error("the client is gone")]
    Closed,
    #[error("the server is shutting down: the response was ended")]
    Draining,
    #[error("{0}")]
    Body(#[from] crate::proto::stream::BodyError),
    #[error("this call cannot stream its response")]
    Unsupported,
}

/// Where the one final answer to the request being handled goes.
pub trait Respond: Any + Send {
    /// Sends a plugin's response (checked, encoded and sent by the implementation), unless
    /// one was sent already.
    fn respond(
        &mut self,
        status: u16,
        headers: &[(String, Vec<u8>)],
        body: &[u8],
    ) -> Result<(), AlreadyResponded>;

    /// Whether [`Respond::start`] can stream (a test's stand-in may not).
    fn streams(&self) -> bool {
        false
    }

    /// Starts a streamed response: its head leaves now, its body follows in pieces. Returns
    /// the flow to take room from before each piece (see [`Flow`]).
    fn start(&mut self, _status: u16, _headers: &[(String, Vec<u8>)]) -> Result<Flow, StreamError> {
        Err(StreamError::Unsupported)
    }

    /// One piece of the body, at most [`STREAM_PIECE_BYTES`]; its writer took room first.
    fn write(&mut self, _data: &[u8]) -> Result<(), StreamError> {
        Err(StreamError::NotStarted)
    }

    /// Ends the streamed body, with `trailers` where the framing carries them.
    fn finish(&mut self, _trailers: &[(String, Vec<u8>)]) -> Result<(), StreamError> {
        Err(StreamError::NotStarted)
    }

    /// Ends a streamed response that cannot end well: the client sees it incomplete.
    fn cut(&mut self, _why: &str) {}

    /// The flow of the streamed response under way, if one is.
    fn flow(&self) -> Option<Flow> {
        None
    }
}

/// Writes `data` into the streamed response of `call` in pieces of at most
/// [`STREAM_PIECE_BYTES`], each once the flow has room: while the client reads slower than
/// the body is written, the call waits here (suspended, holding no thread).
pub(crate) async fn write_piecewise(
    call: &mut dyn Respond,
    flow: &Flow,
    data: &[u8],
) -> Result<(), StreamError> {
    for piece in data.chunks(STREAM_PIECE_BYTES) {
        flow.room().await.map_err(|_| StreamError::Closed)?;
        call.write(piece)?;
    }
    Ok(())
}

impl http::Host for HostState {
    async fn respond(&mut self, response: types::Response) -> Result<(), RespondError> {
        if self.call.is_none() {
            return Err(RespondError::NoRequest);
        }
        if response.body.len() > LOOP_BODY_BYTES {
            leave_loop().await;
        }
        let call = self.call.as_mut().ok_or(RespondError::NoRequest)?;
        let headers: Vec<_> = response
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect();
        call.respond(response.status, &headers, &response.body)
            .map_err(|_| RespondError::AlreadyResponded)
    }

    fn start(&mut self, status: u16, headers: Vec<types::Header>) -> Result<(), http::StreamError> {
        let call = self.call.as_mut().ok_or(http::StreamError::NoRequest)?;
        let headers: Vec<_> = headers.into_iter().map(|h| (h.name, h.value)).collect();
        call.start(status, &headers).map(drop).map_err(wit_error)
    }

    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), http::StreamError> {
        let call = self
            .call
            .as_deref_mut()
            .ok_or(http::StreamError::NoRequest)?;
        let flow = call.flow().ok_or(http::StreamError::NotStarted)?;
        write_piecewise(call, &flow, &bytes)
            .await
            .map_err(wit_error)
    }

    fn finish(&mut self, trailers: Vec<types::Header>) -> Result<(), http::StreamError> {
        let call = self.call.as_mut().ok_or(http::StreamError::NoRequest)?;
        let trailers: Vec<_> = trailers.into_iter().map(|h| (h.name, h.value)).collect();
        call.finish(&trailers).map_err(wit_error)
    }
}

/// The guest's view of why a stream failed.
fn wit_error(e: StreamError) -> http::StreamError {
    match e {
        StreamError::AlreadyResponded => http::StreamError::AlreadyResponded,
        StreamError::Invalid(why) => http::StreamError::Invalid(why),
        StreamError::NotStarted => http::StreamError::NotStarted,
        StreamError::Unsupported => http::StreamError::NoRequest,
        StreamError::Closed => http::StreamError::Closed(
            "the client is gone, or the stream's time limit passed".to_owned(),
        ),
        StreamError::Draining => {
            http::StreamError::Closed("the server is shutting down".to_owned())
        }
        StreamError::Body(e) => http::StreamError::Closed(e.to_string()),
    }
}

/// Takes back the exchange a call was given (see [`Respond`]), as the type it was given as.
pub(crate) fn take_back<R: Respond>(call: Box<dyn Respond>) -> Box<R> {
    let call: Box<dyn Any> = call;
    call.downcast::<R>().unwrap_or_else(|_| {
        unreachable!("a call's exchange is taken back as the type it was given as")
    })
}
