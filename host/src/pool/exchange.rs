//! The exchange of one request: what its answer must follow, and how its one final response
//! gets to the client.
//!
//! A response can leave in two ways: returned from `handle-request`, or sent early through the
//! `http.respond` import while the handler keeps running (the runtime holds the exchange as a
//! [`Respond`] for the length of the call). Either way it goes through [`Exchange::respond`],
//! which encodes it on the thread that runs the call, writes the access line, hands the bytes
//! to the connection's event loop, and refuses any second final response for the same
//! request.

use std::fmt;

pub(crate) use crate::access::Access;
use crate::proto::response::{self, RequestMeta};
use crate::proto::{Field, Version};
use crate::runtime::host::http::{AlreadyResponded, Respond};

/// Where the encoded answer to a request goes: the pool's is the reply queue of the
/// connection's event loop.
pub trait Responder: Send + 'static {
    /// Sends the complete response (ready for the wire); `close`: end the connection after it.
    fn respond(&mut self, bytes: Vec<u8>, close: bool);
}

/// Everything needed to answer one request, owned by the call for its length.
pub struct Exchange<R> {
    pub request_id: u64,
    pub plugin: std::sync::Arc<str>,
    version: Version,
    head: bool,
    keep_alive: bool,
    accept_encoding: Option<Vec<u8>>,
    access: Access,
    responder: R,
    responded: bool,
}

impl<R> fmt::Debug for Exchange<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchange")
            .field("request_id", &self.request_id)
            .field("responded", &self.responded)
            .finish_non_exhaustive()
    }
}

/// What the answer to a request must follow: its protocol version, method, connection
/// preference and accepted codings.
#[derive(Debug, Clone)]
pub struct Origin {
    pub request_id: u64,
    pub version: Version,
    pub head: bool,
    pub keep_alive: bool,
    pub accept_encoding: Option<Vec<u8>>,
    /// What the access log says about the request.
    pub access: Access,
}

impl<R: Responder> Exchange<R> {
    pub fn new(origin: Origin, plugin: std::sync::Arc<str>, responder: R) -> Self {
        Exchange {
            request_id: origin.request_id,
            plugin,
            version: origin.version,
            head: origin.head,
            keep_alive: origin.keep_alive,
            accept_encoding: origin.accept_encoding,
            access: origin.access,
            responder,
            responded: false,
        }
    }

    /// Whether a final response was sent.
    pub(crate) fn responded(&self) -> bool {
        self.responded
    }

    /// Marks the request answered by a switch to WebSocket, sent by the caller, and writes
    /// its access line.
    pub(crate) fn upgraded(&mut self) {
        self.responded = true;
        self.access.log(101, 0, &self.plugin, Some(self.request_id));
    }

    /// Sends a response written by the host (an error, or a WebSocket refusal with its
    /// `extra` headers), unless one was sent already.
    pub(crate) fn respond_error_with(
        &mut self,
        status: u16,
        extra: &[(&str, &str)],
        message: &str,
    ) {
        if self.responded {
            return;
        }
        let mut out = Vec::new();
        let keep_alive = response::encode_simple(status, extra, message, &self.meta(), &mut out);
        self.send(out, keep_alive, status);
    }

    /// Sends a response written by the host (an error), unless one was sent already.
    pub(crate) fn respond_error(&mut self, status: u16, message: &str) {
        self.respond_error_with(status, &[], message);
    }

    fn meta(&self) -> RequestMeta<'_> {
        RequestMeta {
            version: self.version,
            head: self.head,
            keep_alive: self.keep_alive,
            accept_encoding: self.accept_encoding.as_deref(),
        }
    }

    /// Sends a plugin's response. An invalid one (bad status or header) is replaced by a 500 and
    /// logged.
    pub(crate) fn respond<F: Field>(
        &mut self,
        status: u16,
        headers: &[F],
        body: &[u8],
    ) -> Result<(), AlreadyResponded> {
        if self.responded {
            warn_limited!(
                plugin = %self.plugin,
                request = %format_args!("{:016x}", self.request_id),
                status,
                "second final response refused: the request was already answered"
            );
            return Err(AlreadyResponded);
        }
        // One allocation per response: `encode` sizes the buffer before it writes.
        let mut out = Vec::new();
        let meta = self.meta();
        let (keep_alive, sent) = match response::encode(status, headers, body, &meta, &mut out) {
            Ok(keep_alive) => (keep_alive, status),
            Err(e) => {
                error_limited!(
                    plugin = %self.plugin,
                    request = %format_args!("{:016x}", self.request_id),
                    "invalid response from plugin: {e}"
                );
                out.clear();
                let message = self.error_message(&format!("returned an invalid response ({e})"));
                let keep_alive = response::encode_simple(500, &[], &message, &meta, &mut out);
                (keep_alive, 500)
            }
        };
        // The access line and the metrics count the status that was sent.
        self.send(out, keep_alive, sent);
        Ok(())
    }

    /// Ends a request nobody is waiting for (its client disconnected): logged with `status`,
    /// nothing sent.
    pub(crate) fn abandon(&mut self, status: u16) {
        if !self.responded {
            self.responded = true;
            self.access
                .log(status, 0, &self.plugin, Some(self.request_id));
        }
    }

    /// The body of an error page: names the plugin and the request id, nothing internal.
    pub(crate) fn error_message(&self, what: &str) -> String {
        format!(
            "plugin `{}` {what} (request {:016x})",
            self.plugin, self.request_id
        )
    }

    fn send(&mut self, bytes: Vec<u8>, keep_alive: bool, status: u16) {
        self.responded = true;
        self.access
            .log(status, bytes.len(), &self.plugin, Some(self.request_id));
        self.responder.respond(bytes, !keep_alive);
    }
}

/// The runtime's view of the exchange while the plugin runs: the `http.respond` import and a
/// `wasi:http` response that is complete while its guest still runs answer through it.
impl<R: Responder> Respond for Exchange<R> {
    fn respond(
        &mut self,
        status: u16,
        headers: &[(String, Vec<u8>)],
        body: &[u8],
    ) -> Result<(), AlreadyResponded> {
        Exchange::respond(self, status, headers, body)
    }
}
