//! The `http` import: a plugin answers its request early (`http.respond`) and keeps working.
//!
//! The runtime knows nothing of connections or of the wire: for the length of a call the
//! store holds where its answer goes as a [`Respond`], which the pool implements (it encodes
//! the response, logs it and hands the bytes to the connection's event loop).

use std::any::Any;

use crate::limits::LOOP_BODY_BYTES;
use crate::runtime::bindings::ankh::plugin::http;
use crate::runtime::bindings::types::{self, RespondError};
use crate::runtime::sandbox::exec::leave_loop;
use crate::runtime::sandbox::store::HostState;

/// A second final response was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlreadyResponded;

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
}

/// Takes back the exchange a call was given (see [`Respond`]), as the type it was given as.
pub(crate) fn take_back<R: Respond>(call: Box<dyn Respond>) -> R {
    let call: Box<dyn Any> = call;
    *call.downcast::<R>().unwrap_or_else(|_| {
        unreachable!("a call's exchange is taken back as the type it was given as")
    })
}
