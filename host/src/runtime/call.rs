//! The request a plugin call is answering, and how its one final response gets to the client.
//!
//! A response can leave in two ways: returned from `handle-request`, or sent early through the
//! `http.respond` import while the handler keeps running. Either way it goes through
//! [`CallContext::respond`], which encodes it on the worker, hands the bytes to the I/O thread,
//! and refuses any second final response for the same request.

use std::fmt;

pub use crate::access::Access;
use crate::proto::response::{self, RequestMeta};
use crate::proto::{Field, Version};

/// Where the answer to a request goes. The runtime knows nothing of connections: the pool
/// gives each call one of these, which hands the bytes to the I/O thread.
pub trait Responder: Send {
    /// Sends the complete response (ready for the wire); `close`: end the connection after it.
    fn respond(&mut self, bytes: Vec<u8>, close: bool);
}

/// Everything needed to answer one request, owned by the worker for the length of the call.
pub struct CallContext {
    pub request_id: u64,
    pub plugin: std::sync::Arc<str>,
    version: Version,
    head: bool,
    keep_alive: bool,
    accept_encoding: Option<Vec<u8>>,
    access: Access,
    responder: Box<dyn Responder>,
    responded: bool,
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("request_id", &self.request_id)
            .field("responded", &self.responded)
            .finish_non_exhaustive()
    }
}

/// A second final response was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlreadyResponded;

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

impl CallContext {
    pub fn new(origin: Origin, plugin: std::sync::Arc<str>, responder: Box<dyn Responder>) -> Self {
        CallContext {
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
    pub fn responded(&self) -> bool {
        self.responded
    }

    /// Marks the request answered by a switch to WebSocket, sent by the caller.
    pub fn mark_upgraded(&mut self) {
        self.responded = true;
    }

    /// Sends a host-made response with extra headers (a WebSocket refusal), unless one was
    /// sent already.
    pub fn respond_error_with(&mut self, status: u16, extra: &[(&str, &str)], message: &str) {
        if self.responded {
            return;
        }
        let mut out = Vec::new();
        let keep_alive = response::encode_simple(status, extra, message, &self.meta(), &mut out);
        self.send(out, keep_alive, status);
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
    pub fn respond<F: Field>(
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
    pub fn abandon(&mut self, status: u16) {
        if !self.responded {
            self.responded = true;
            self.access
                .log(status, 0, &self.plugin, Some(self.request_id));
        }
    }

    /// Sends a response written by the host (an error), unless one was sent already.
    pub fn respond_error(&mut self, status: u16, message: &str) {
        if self.responded {
            return;
        }
        let mut out = Vec::new();
        let keep_alive = response::encode_simple(status, &[], message, &self.meta(), &mut out);
        self.send(out, keep_alive, status);
    }

    /// The body of an error page: names the plugin and the request id, nothing internal.
    pub fn error_message(&self, what: &str) -> String {
        format!(
            "plugin `{}` {what} (request {:016x})",
            self.plugin, self.request_id
        )
    }

    /// Marks the request answered by a switch to WebSocket, sent by the caller.
    pub fn log_upgrade(&self) {
        self.access.log(101, 0, &self.plugin, Some(self.request_id));
    }

    fn send(&mut self, bytes: Vec<u8>, keep_alive: bool, status: u16) {
        self.responded = true;
        self.access
            .log(status, bytes.len(), &self.plugin, Some(self.request_id));
        self.responder.respond(bytes, !keep_alive);
    }
}
