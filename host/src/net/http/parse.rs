//! From buffered bytes to a request: the head, its route and body limit, the body, and the
//! complete request handed out as a [`Dispatch`].

use std::time::Instant;

use super::{Dispatch, Feed, HttpConn, HttpCtx, State, Transport};
use crate::limits::LINGER_MAX_BYTES;
use crate::message::{Cancel, Inflow, InflowEnd};
use crate::net::Immediate;
use crate::proto::body::BodyDecoder;
use crate::proto::request::{self, Framing, RequestHead};
use crate::proto::response;
use crate::proto::{ProtoError, Status};
use crate::runtime::engine::registry::Mount;

impl<S: Transport> HttpConn<S> {
    /// One step of protocol work on buffered input. Returns whether anything changed.
    pub(super) fn process(&mut self, ctx: &HttpCtx<'_>) -> Result<bool, ProtoError> {
        if self.feed.is_some() && !matches!(self.state, State::Closing | State::Lingering { .. }) {
            // A body still arriving for the request in flight (or just answered) comes first:
            // nothing after it is parsed before it ends.
            return Ok(self.feed_body());
        }
        match &mut self.state {
            State::Waiting | State::Streaming { .. } | State::Closing => Ok(false),
            State::Lingering {
                discarded,
                last_read,
                ..
            } => {
                if self.input.buf.is_empty() {
                    return Ok(false);
                }
                *discarded += self.input.buf.len();
                *last_read = Instant::now();
                self.input.buf.clear();
                if *discarded > LINGER_MAX_BYTES {
                    self.input.eof = true;
                    self.state = State::Closing;
                    return Ok(true);
                }
                Ok(false)
            }
            State::Head => {
                if self.input.buf.is_empty() {
                    return Ok(false);
                }
                // The request clock starts with its first byte, however it arrived.
                self.request_since.get_or_insert_with(Instant::now);
                let (head, used) = match request::parse(&self.input.buf, ctx.limits)? {
                    Status::Partial => return Ok(false),
                    Status::Complete(head, used) => (head, used),
                };
                self.input.buf.drain(..used);
                self.current = Some((head.method.clone(), head.path.clone()));
                if &*head.path == "*" {
                    // `OPTIONS *` asks about the server itself (RFC 9110 §9.3.7).
                    self.answer_server_options(&head);
                    return Ok(true);
                }
                // The plugin's own body limit, when lower than the server's.
                let route = ctx.router.route(&head.path);
                // The plugin's own limit (its policy may only lower the server's); the
                // server's where no plugin is mounted.
                let max_body = route.max_body.unwrap_or(ctx.limits.max_body_bytes);
                if let Framing::Length(n) = head.framing
                    && n > max_body
                {
                    return Err(ProtoError::BodyTooLarge);
                }
                let continue_now =
                    head.expect_continue && self.input.buf.is_empty() && !ctx.draining;
                let decoder = match head.framing {
                    Framing::Empty => {
                        self.dispatch(head, route.mount, Vec::new(), None, ctx);
                        return Ok(true);
                    }
                    Framing::Length(n) => BodyDecoder::length(n),
                    Framing::Chunked => BodyDecoder::chunked(max_body),
                };
                if continue_now {
                    self.out.push(response::CONTINUE);
                }
                if route.streams_body && !ctx.draining {
                    // The plugin reads the body as it arrives: the request goes now, and
                    // the body follows it.
                    let inflow = Inflow::default();
                    self.feed = Some(Box::new(Feed {
                        decoder,
                        inflow: inflow.clone(),
                        max_body,
                        received: 0,
                        progress: None,
                    }));
                    self.dispatch(head, route.mount, Vec::new(), Some(inflow), ctx);
                    return Ok(true);
                }
                let capacity = match head.framing {
                    Framing::Length(n) => usize::try_from(n).unwrap_or(usize::MAX).min(1 << 20),
                    _ => 0,
                };
                self.state = State::Body {
                    head,
                    route,
                    decoder,
                    body: Vec::with_capacity(capacity),
                };
                Ok(true)
            }
            State::Body { decoder, body, .. } => {
                if self.input.buf.is_empty() {
                    return Ok(false);
                }
                let progress = decoder.decode(&self.input.buf, body)?;
                self.input.buf.drain(..progress.consumed);
                if progress.done
                    && let State::Body {
                        head, route, body, ..
                    } = std::mem::replace(&mut self.state, State::Waiting)
                {
                    self.dispatch(head, route.mount, body, None, ctx);
                }
                Ok(progress.consumed > 0 || progress.done)
            }
        }
    }

    /// A request is complete: it is handed out with this step, unless the server is
    /// draining (then it is answered 503 at once).
    fn dispatch(
        &mut self,
        head: RequestHead,
        mount: Option<Mount>,
        body: Vec<u8>,
        inflow: Option<Inflow>,
        ctx: &HttpCtx<'_>,
    ) {
        let (version, is_head, keep_alive) = (head.version, head.is_head(), head.keep_alive);
        self.state = State::Waiting;
        if ctx.draining {
            let immediate = Immediate {
                status: 503,
                message: "the server is shutting down".to_owned(),
                retry_after: None,
            };
            self.answer(&immediate, version, is_head, false);
            return;
        }
        let cancel = Cancel::default();
        self.in_flight = Some(cancel.clone());
        self.answering = Some((version, is_head, keep_alive));
        self.ready = Some(Dispatch {
            seq: self.seq,
            head,
            mount,
            body,
            inflow,
            peer: self.peer,
            cancel,
        });
    }

    /// Decodes what is buffered of the body in flight into its inflow. Returns whether
    /// anything changed. A body that breaks its framing or the plugin's limit ends its
    /// inflow with the reason, and the connection closes after the answer: what follows
    /// cannot be told apart from the body.
    fn feed_body(&mut self) -> bool {
        let Some(feed) = self.feed.as_mut() else {
            return false;
        };
        if self.input.buf.is_empty() {
            return false;
        }
        let mut piece = Vec::new();
        match feed.decoder.decode(&self.input.buf, &mut piece) {
            Ok(progress) => {
                self.input.buf.drain(..progress.consumed);
                feed.received += piece.len() as u64;
                feed.inflow.push(piece);
                if progress.done {
                    let trailers = feed.decoder.take_trailers();
                    feed.inflow.end(InflowEnd::Complete(trailers));
                    self.feed = None;
                }
                progress.consumed > 0 || progress.done
            }
            Err(e) => {
                feed.inflow.push(piece);
                feed.inflow.end(match e {
                    ProtoError::BodyTooLarge => InflowEnd::TooLarge(feed.max_body),
                    _ => InflowEnd::Cut,
                });
                tracing::debug!(conn = ?self.id, peer = %self.peer, "request body refused mid-stream: {e}");
                self.feed = None;
                self.input.buf.clear();
                self.close_after = true;
                if matches!(self.state, State::Head) {
                    self.state = State::Closing;
                }
                true
            }
        }
    }
}
