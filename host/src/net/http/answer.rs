//! The answers an HTTP connection makes itself: an error of the client's, a request the
//! dispatcher refused, `OPTIONS *`. Each is logged like a plugin's, with the request's method
//! and path when its head was read.

use std::sync::Arc;
use std::time::Instant;

use super::{HttpConn, State, Transport};
use crate::access::Access;
use crate::net::Immediate;
use crate::proto::request::RequestHead;
use crate::proto::response::{self, RequestMeta};
use crate::proto::{ProtoError, Version};

/// The methods `OPTIONS *` lists: what plugins may route (the router's own set, and OPTIONS).
const SERVER_METHODS: &str = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS";

impl<S: Transport> HttpConn<S> {
    /// Answers `OPTIONS *`: the methods the server accepts, no body.
    pub(super) fn answer_server_options(&mut self, head: &RequestHead) {
        let req = RequestMeta {
            version: head.version,
            head: false,
            keep_alive: head.keep_alive,
            accept_encoding: None,
        };
        let mut out = Vec::new();
        let keep_alive =
            response::encode_simple(200, &[("allow", SERVER_METHODS)], "", &req, &mut out);
        self.send_answer(200, &out, keep_alive);
    }

    /// Writes a host-made response for the current request.
    pub(super) fn answer(
        &mut self,
        immediate: &Immediate,
        version: Version,
        head: bool,
        keep_alive: bool,
    ) {
        let retry;
        let extra: &[(&str, &str)] = match immediate.retry_after {
            Some(secs) => {
                retry = secs.to_string();
                &[("retry-after", retry.as_str())]
            }
            None => &[],
        };
        let req = RequestMeta {
            version,
            head,
            keep_alive,
            accept_encoding: None,
        };
        let mut out = Vec::new();
        let keep_alive =
            response::encode_simple(immediate.status, extra, &immediate.message, &req, &mut out);
        self.send_answer(immediate.status, &out, keep_alive);
    }

    /// Logs and queues an answer of the host's, ending the exchange: the connection reads the
    /// next request, or closes.
    fn send_answer(&mut self, status: u16, bytes: &[u8], keep_alive: bool) {
        self.log_answer(status, bytes.len());
        self.out.push(bytes);
        self.finish_exchange();
        self.state = if keep_alive {
            State::Head
        } else {
            State::Closing
        };
    }

    /// The access-log line of an answer the host made itself: the request's method and path
    /// when its head was parsed (`-` when it never was), and the bytes of the answer.
    fn log_answer(&self, status: u16, bytes: usize) {
        let (method, path) = self
            .current
            .clone()
            .unwrap_or_else(|| (Arc::from("-"), Arc::from("-")));
        Access {
            remote: self.peer,
            method,
            path,
            received: Instant::now(),
            metrics: None,
            trace: None,
        }
        .log(status, bytes, "-", None);
    }

    /// Answers a protocol error and closes: the framing of what follows cannot be trusted.
    pub(super) fn fail(&mut self, e: ProtoError) {
        tracing::debug!(conn = ?self.id, peer = %self.peer, "protocol error: {e}");
        self.input.buf.clear();
        let req = RequestMeta {
            version: Version::Http11,
            head: false,
            keep_alive: false,
            accept_encoding: None,
        };
        let mut out = Vec::new();
        response::encode_simple(e.status(), &[], &e.to_string(), &req, &mut out);
        self.log_answer(e.status(), out.len());
        self.current = None;
        self.out.push(&out);
        self.state = State::Closing;
    }
}
