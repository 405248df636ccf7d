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
use std::sync::atomic::Ordering;

pub(crate) use crate::access::Access;
use crate::limits::STREAM_BUFFER_BYTES;
use crate::message::{Cancel, Flow, StreamTimes};
use crate::proto::response::{self, RequestMeta};
use crate::proto::stream::{self, BodyEncoder};
use crate::proto::{Field, Version};
use crate::runtime::host::http::{AlreadyResponded, Respond, StreamError};

/// Where the encoded answer to a request goes: the pool's is the reply queue of the
/// connection's event loop.
pub trait Responder: Send + 'static {
    /// Sends the complete response (ready for the wire); `close`: end the connection after it.
    fn respond(&mut self, bytes: Vec<u8>, close: bool);
    /// Sends the head of a streamed response; its body follows through `piece` and `end`.
    /// `flow` counts the bytes handed over and not yet written (the head's included).
    fn start(&mut self, head: Vec<u8>, flow: Flow);
    /// Sends one piece of a streamed body, framed.
    fn piece(&mut self, bytes: Vec<u8>);
    /// Ends a streamed response with `last` (its last framing); `close`: end the connection
    /// after it (always, for a body cut short).
    fn end(&mut self, last: Vec<u8>, close: bool);
}

/// A streamed response under way.
#[derive(Debug)]
struct Open {
    status: u16,
    encoder: BodyEncoder,
    keep_alive: bool,
    flow: Flow,
    /// Bytes sent, the head's included.
    sent: usize,
}

/// Everything needed to answer one request, owned by the call for its length.
pub struct Exchange<R: Responder> {
    pub request_id: u64,
    pub plugin: std::sync::Arc<str>,
    version: Version,
    head: bool,
    keep_alive: bool,
    accept_encoding: Option<Vec<u8>>,
    access: Access,
    stream: StreamTerms,
    responder: R,
    responded: bool,
    /// A streamed response whose body has not ended. Boxed: an exchange is moved into and out
    /// of every call, and a stream's encoder (with its gzip state) would make each move of
    /// every buffered response's exchange a few hundred bytes longer.
    open: Option<Box<Open>>,
}

impl<R: Responder> fmt::Debug for Exchange<R> {
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
    /// What bounds the response should it stream.
    pub stream: StreamTerms,
}

/// What bounds a streamed response: its times, and the call's cancel signal, which carries
/// the news that the call now streams (its handler deadline is then suspended).
#[derive(Debug, Clone)]
pub struct StreamTerms {
    pub times: StreamTimes,
    pub cancel: Option<Cancel>,
}

impl Default for StreamTerms {
    fn default() -> Self {
        StreamTerms {
            times: StreamTimes {
                idle: crate::limits::STREAM_IDLE_TIMEOUT,
                total: crate::limits::STREAM_TIMEOUT,
            },
            cancel: None,
        }
    }
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
            stream: origin.stream,
            responder,
            responded: false,
            open: None,
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

    /// Starts a streamed response: the head leaves now. An invalid one is replaced by a 500
    /// (logged), and the stream refused.
    pub(crate) fn start<F: Field>(
        &mut self,
        status: u16,
        headers: &[F],
    ) -> Result<Flow, StreamError> {
        if self.responded {
            return Err(StreamError::AlreadyResponded);
        }
        let mut head = Vec::new();
        let meta = self.meta();
        let (encoder, keep_alive) = match stream::encode_head(status, headers, &meta, &mut head) {
            Ok(started) => started,
            Err(e) => {
                error_limited!(
                    plugin = %self.plugin,
                    request = %format_args!("{:016x}", self.request_id),
                    "invalid response from plugin: {e}"
                );
                let message = self.error_message(&format!("returned an invalid response ({e})"));
                self.respond_error(500, &message);
                return Err(StreamError::Invalid(e.to_string()));
            }
        };
        self.responded = true;
        let tally = (self.access.metrics.as_ref()).map(|m| m.stream_held_bytes.clone());
        let flow = Flow::with_tally(STREAM_BUFFER_BYTES, self.stream.times, tally);
        flow.add(head.len());
        if let Some(cancel) = &self.stream.cancel {
            cancel.set_streaming(true);
        }
        if let Some(m) = &self.access.metrics {
            m.streams_open.fetch_add(1, Ordering::Relaxed);
        }
        self.open = Some(Box::new(Open {
            status,
            encoder,
            keep_alive,
            flow: flow.clone(),
            sent: head.len(),
        }));
        self.responder.start(head, flow.clone());
        Ok(flow)
    }

    /// Sends one piece of the streamed body. Its writer takes room from the flow first.
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<(), StreamError> {
        let open = self.open.as_mut().ok_or(StreamError::NotStarted)?;
        if open.flow.is_closed() {
            return Err(StreamError::Closed);
        }
        let mut framed = Vec::with_capacity(data.len() + 16);
        open.encoder.piece(data, &mut framed)?;
        if !framed.is_empty() {
            open.sent += framed.len();
            open.flow.add(framed.len());
            if let Some(m) = &self.access.metrics {
                m.streamed_bytes
                    .fetch_add(framed.len() as u64, Ordering::Relaxed);
            }
            self.responder.piece(framed);
        }
        if open.flow.is_draining() && open.encoder.is_event_stream() {
            // The server is going away and this is Server-Sent Events: this event is the
            // last, and the stream is ended whole, so its EventSource reconnects (to a server
            // that is not going away) and resumes after it. Other streams run on to their
            // end, or to the drain's deadline, which cuts them: a download ended early must
            // not look complete.
            let ended = self.finish::<(String, Vec<u8>)>(&[]);
            // Nobody reads what it would write next: the call stops at its next wait, so
            // the drain need not wait for it.
            if let Some(cancel) = &self.stream.cancel {
                cancel.cancel();
            }
            return Err(match ended {
                Ok(()) => StreamError::Draining,
                Err(e) => e,
            });
        }
        Ok(())
    }

    /// Ends the streamed body (with `trailers` where it is chunked) and writes the access
    /// line. A body short of its declared length is cut: the connection closes.
    pub(crate) fn finish<F: Field>(&mut self, trailers: &[F]) -> Result<(), StreamError> {
        let open = self.open.as_mut().ok_or(StreamError::NotStarted)?;
        let mut last = Vec::new();
        if let Err(e) = open.encoder.finish(trailers, &mut last) {
            self.cut("ended short of its declared length");
            return Err(e.into());
        }
        let open = self.open.take().expect("checked above");
        self.stream_over();
        let sent = open.sent + last.len();
        if let Some(m) = &self.access.metrics {
            m.streams_open.fetch_sub(1, Ordering::Relaxed);
            if open.flow.is_closed() {
                // Ended after its client left, or after a time limit closed it.
                m.streams_unfinished.fetch_add(1, Ordering::Relaxed);
            }
            m.streamed_bytes
                .fetch_add(last.len() as u64, Ordering::Relaxed);
        }
        self.responder.end(last, !open.keep_alive);
        self.access
            .log(open.status, sent, &self.plugin, Some(self.request_id));
        Ok(())
    }

    /// Ends a streamed response that cannot end well (its call failed, or its body broke its
    /// framing): the connection closes without the body's end, so the client sees it is
    /// incomplete.
    pub(crate) fn cut(&mut self, why: &str) {
        let Some(open) = self.open.take() else {
            return;
        };
        self.stream_over();
        if let Some(m) = &self.access.metrics {
            m.streams_open.fetch_sub(1, Ordering::Relaxed);
            m.streams_unfinished.fetch_add(1, Ordering::Relaxed);
        }
        if !open.flow.is_closed() {
            warn_limited!(
                plugin = %self.plugin,
                request = %format_args!("{:016x}", self.request_id),
                "streamed response cut: {why}"
            );
        }
        self.responder.end(Vec::new(), true);
        self.access
            .log(open.status, open.sent, &self.plugin, Some(self.request_id));
    }

    /// Whether a streamed response is under way.
    pub(crate) fn streaming(&self) -> bool {
        self.open.is_some()
    }

    /// The stream is over: the call's handler deadline applies again.
    fn stream_over(&self) {
        if let Some(cancel) = &self.stream.cancel {
            cancel.set_streaming(false);
        }
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

    fn streams(&self) -> bool {
        true
    }

    fn start(&mut self, status: u16, headers: &[(String, Vec<u8>)]) -> Result<Flow, StreamError> {
        Exchange::start(self, status, headers)
    }

    fn write(&mut self, data: &[u8]) -> Result<(), StreamError> {
        Exchange::write(self, data)
    }

    fn finish(&mut self, trailers: &[(String, Vec<u8>)]) -> Result<(), StreamError> {
        Exchange::finish(self, trailers)
    }

    fn cut(&mut self, why: &str) {
        Exchange::cut(self, why);
    }

    fn flow(&self) -> Option<Flow> {
        self.open.as_ref().map(|open| open.flow.clone())
    }
}

/// A stream still open when its exchange goes (the call failed, or the host panicked) is
/// cut, so that its connection never waits for a body that will not come.
impl<R: Responder> Drop for Exchange<R> {
    fn drop(&mut self) {
        self.cut("the call ended without ending its body");
    }
}
