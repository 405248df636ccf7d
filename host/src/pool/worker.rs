//! One worker thread: take a job, find or create this worker's instance of the plugin, call it,
//! send back what came of it. Nothing a plugin does can end this loop.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::access::Access;
use crate::message::{Compressed, ConnId, DeflateWindow, WsEvent, WsId, WsMessage};
use crate::pool::job::{EventJob, Job, RequestJob};
use crate::pool::reply::{Inflated, Replies, Reply};
use crate::proto::frame::Violation;
use crate::proto::ws_deflate::{Codec, InflateError};
use crate::proto::{Version, header, ws};
use crate::runtime::bindings::types;
use crate::runtime::call::{CallContext, Origin, Responder};
use crate::runtime::instance::{Failure, Instance, InvokeError};
use crate::runtime::plugin::Plugin;
use crate::runtime::state::WsLink;

/// Close code for a WebSocket whose plugin failed while handling one of its events.
const CLOSE_INTERNAL_ERROR: u16 = crate::proto::frame::close_code::INTERNAL_ERROR;

pub(super) struct Worker {
    /// The event loops' reply queues; a reply goes to the loop of its connection.
    reply: Replies,
    link: WsLink,
    /// This worker's instance of each plugin it has served, by plugin name.
    instances: HashMap<Arc<str>, Instance>,
    /// Reused for encoding responses.
    buf: Vec<u8>,
    /// Inflates compressed WebSocket messages (its inflater is made on first use).
    codec: Codec,
}

impl Worker {
    pub(super) fn new(reply: Replies, link: WsLink) -> Self {
        Worker {
            reply,
            link,
            instances: HashMap::new(),
            buf: Vec::with_capacity(4096),
            codec: Codec::default(),
        }
    }

    pub(super) fn run(mut self, rx: Receiver<Box<Job>>) {
        while let Ok(job) = rx.recv() {
            match *job {
                Job::Request(job) => {
                    let origin = origin(&job);
                    let to = self.to_connection(job.conn, job.seq);
                    let plugin = job.plugin.name.clone();
                    if catch_unwind(AssertUnwindSafe(|| self.serve(job))).is_err() {
                        // A bug in the host, not in the plugin: answer, forget the instance.
                        tracing::error!(%plugin, "worker panicked while serving a request");
                        self.instances.remove(&plugin);
                        let mut call = CallContext::new(origin, plugin, to, Vec::new());
                        call.respond_error(500, "internal error in the ankh host");
                    }
                }
                Job::Event(job) => {
                    let (conn, ws) = (job.conn, job.ws);
                    let plugin = job.plugin.name.clone();
                    if catch_unwind(AssertUnwindSafe(|| self.deliver(job))).is_err() {
                        tracing::error!(%plugin, ws, "worker panicked while delivering an event");
                        self.instances.remove(&plugin);
                        self.reply.to(conn.shard).send(Reply::EventDone {
                            conn,
                            ws,
                            inflated: None,
                        });
                    }
                }
            }
        }
    }

    /// This worker's instance of `plugin`, created (or replaced, for a newer version) on demand.
    fn instance(&mut self, plugin: &Arc<Plugin>) -> Result<&mut Instance, Failure> {
        let stale = self
            .instances
            .get(&plugin.name)
            .is_some_and(|i| !Arc::ptr_eq(&i.plugin, plugin));
        if stale {
            self.instances.remove(&plugin.name);
        }
        if !self.instances.contains_key(&plugin.name) {
            let instance = Instance::new(plugin.clone(), self.link.clone())?;
            self.instances.insert(plugin.name.clone(), instance);
        }
        Ok(self
            .instances
            .get_mut(&plugin.name)
            .expect("instance was just ensured"))
    }

    /// Logs a failed call and forgets the instance that failed.
    /// One log event per failure, whatever the format: the plugin and the request (when there
    /// is one) as fields, and the guest's backtrace as one escaped field, not as lines of
    /// their own.
    fn discard(&mut self, plugin: &Plugin, failure: &Failure, request: Option<u64>, context: &str) {
        self.instances.remove(&plugin.name);
        let m = &plugin.metrics;
        let counter = match failure.error {
            InvokeError::Deadline(_) => &m.deadline_hits,
            InvokeError::TimedOut(_) => &m.timeouts,
            InvokeError::Cancelled => &m.cancellations,
            _ => &m.traps,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request = request.map_or_else(|| "-".to_owned(), |id| format!("{id:016x}"));
        if matches!(failure.error, InvokeError::Cancelled) {
            // Not the plugin's fault, and routine under load: no backtrace.
            tracing::info!(
                plugin = %plugin.name,
                %request,
                "plugin `{}` call stopped ({context}): the client disconnected; a fresh instance takes the next call",
                plugin.name
            );
            return;
        }
        tracing::error!(
            plugin = %plugin.name,
            %request,
            backtrace = failure.report.as_str(),
            "plugin `{}` {} ({context}); instance discarded",
            plugin.name,
            failure.error,
        );
    }

    /// After a call: replaces the instance if its policy says so (a fresh one per request,
    /// a bounded number of calls each), or if its memory grew past the policy's bound (wasm
    /// memory never shrinks; a fresh instance starts small again).
    /// Where a call's response goes: request `seq` of connection `conn`, through the reply
    /// queue.
    fn to_connection(&self, conn: ConnId, seq: u64) -> Box<dyn Responder> {
        Box::new(ToConnection {
            conn,
            seq,
            reply: self.reply.to(conn.shard).clone(),
        })
    }

    /// The instance modes count requests; memory growth counts after any call.
    fn recycle_if_due(&mut self, plugin: &Plugin, after_request: bool) {
        let Some(instance) = self.instances.get(&plugin.name) else {
            return;
        };
        let policy = &plugin.policy;
        let by_mode =
            policy.fresh_instances || policy.recycle_after.is_some_and(|n| instance.calls >= n);
        if after_request && by_mode {
            self.instances.remove(&plugin.name);
            return;
        }
        let grown = instance.grown_bytes();
        if grown > policy.recycle_growth_bytes {
            tracing::debug!(
                plugin = %plugin.name,
                grown,
                "instance replaced: its memory grew past the recycle bound"
            );
            plugin
                .metrics
                .memory_recycles
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.instances.remove(&plugin.name);
        }
    }

    fn serve(&mut self, job: RequestJob) {
        let origin = origin(&job);
        let plugin = job.plugin.clone();
        let buf = std::mem::take(&mut self.buf);
        let (conn, seq) = (job.conn, job.seq);
        let to = self.to_connection(conn, seq);
        let mut call = CallContext::new(origin, plugin.name.clone(), to, buf);
        if job.cancel.is_cancelled() {
            // The client left while the request waited in the queue: nobody wants the answer.
            plugin
                .metrics
                .cancellations
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            call.abandon(InvokeError::Cancelled.status());
            self.buf = call.into_buffer();
            return;
        }
        let instance = match self.instance(&plugin) {
            Ok(instance) => instance,
            Err(failure) => {
                let context = format!("instantiating for request {:016x}", job.request_id);
                self.discard(&plugin, &failure, Some(job.request_id), &context);
                let message =
                    call.error_message(&format!("could not be instantiated: {}", failure.error));
                call.respond_error(failure.error.status(), &message);
                self.buf = call.into_buffer();
                return;
            }
        };
        let mut job = job;
        let slot = job.slot.take();
        let cancel = job.cancel.clone();
        let request = to_wit(job);
        let (result, mut call) = instance.handle_request(&request, call, cancel);
        // The call is over: free the plugin's concurrency slot before the response leaves, so
        // a client that sends its next request on receipt finds the slot free.
        drop(slot);
        self.recycle_if_due(&plugin, true);
        match result {
            Ok(types::Outcome::Respond(response)) => {
                let headers: Vec<_> = response
                    .headers
                    .into_iter()
                    .map(|h| (h.name, h.value))
                    .collect();
                // Refused (and logged) if the handler already responded early.
                let _ = call.respond(response.status, &headers, &response.body);
            }
            Ok(types::Outcome::Done) => {
                if !call.responded() {
                    tracing::error!(
                        plugin = %plugin.name,
                        request = %format_args!("{:016x}", call.request_id),
                        "handler returned without responding"
                    );
                    let message = call.error_message("returned without responding");
                    call.respond_error(500, &message);
                }
            }
            Ok(types::Outcome::Upgrade(upgrade)) => {
                self.upgrade(&plugin, &request, upgrade, &mut call, (conn, seq));
            }
            Err(failure) => {
                let context = format!("request {:016x}", call.request_id);
                self.discard(&plugin, &failure, Some(call.request_id), &context);
                if matches!(failure.error, InvokeError::Cancelled) {
                    call.abandon(failure.error.status());
                } else {
                    let message = call.error_message(&failure.error.to_string());
                    call.respond_error(failure.error.status(), &message);
                }
            }
        }
        self.buf = call.into_buffer();
    }

    /// The handler accepted a WebSocket: check the handshake, switch the connection, and run
    /// the open event right here, before any other event of the connection can start.
    fn upgrade(
        &mut self,
        plugin: &Arc<Plugin>,
        request: &types::Request,
        upgrade: types::Upgrade,
        call: &mut CallContext,
        (conn, seq): (ConnId, u64),
    ) {
        if call.responded() {
            warn_limited!(plugin = %plugin.name, "upgrade refused: the request was already answered");
            return;
        }
        let headers: Vec<_> = request
            .headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let version = match request.version {
            types::HttpVersion::Http10 => Version::Http10,
            types::HttpVersion::Http11 => Version::Http11,
        };
        let accept = match ws::accept_key(&request.method, version, &headers) {
            Ok(accept) => accept,
            Err(refusal) => {
                call.respond_error_with(refusal.status, refusal.headers(), refusal.message);
                return;
            }
        };
        let offered = ws::offered_protocols(&headers);
        let protocol = upgrade.protocol.filter(|p| {
            let ok = offered.iter().any(|o| o == p);
            if !ok {
                warn_limited!(plugin = %plugin.name, protocol = %p, "the plugin chose a subprotocol the client did not offer; omitted");
            }
            ok
        });
        let extra: Vec<_> = upgrade
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect();
        // The same rules as for any response: an invalid header refuses the whole upgrade.
        if let Err(e) = crate::proto::response::check_headers(&extra) {
            tracing::error!(
                plugin = %plugin.name,
                request = %format_args!("{:016x}", call.request_id),
                "invalid upgrade from plugin: {e}"
            );
            let message = call.error_message(&format!("returned an invalid upgrade ({e})"));
            call.respond_error(500, &message);
            return;
        }
        let deflate = if plugin.policy.ws_compression {
            crate::proto::ws_extension::negotiate(&headers)
        } else {
            None
        };
        let extension = deflate.map(|d| d.response());
        let bytes =
            ws::switching_protocols(&accept, protocol.as_deref(), extension.as_deref(), &extra);
        let ws_id = self.link.hub.open(&plugin.name, conn.shard);
        call.mark_upgraded();
        call.log_upgrade();
        let reply = self.reply.to(conn.shard).clone();
        reply.send(Reply::Upgrade {
            conn,
            seq,
            bytes,
            ws: ws_id,
            plugin: plugin.name.clone(),
            deflate,
        });
        // The instance that accepted is the one that opens.
        if let Some(instance) = self.instances.get_mut(&plugin.name)
            && let Err(failure) = instance.on_open(ws_id, request)
        {
            let context = format!("open event of WebSocket {ws_id}");
            self.discard(plugin, &failure, Some(call.request_id), &context);
            reply.send(Reply::Close {
                ws: ws_id,
                code: CLOSE_INTERNAL_ERROR,
                reason: "plugin failed".to_owned(),
            });
        }
        reply.send(Reply::EventDone {
            conn,
            ws: ws_id,
            inflated: None,
        });
    }

    fn deliver(&mut self, job: EventJob) {
        let EventJob {
            conn,
            ws,
            plugin,
            event,
        } = job;
        // A compressed message is inflated here, off the I/O thread; one that breaks a rule
        // never reaches the plugin, and the I/O thread fails its connection.
        let (event, inflated) = match event {
            WsEvent::Compressed(compressed) => {
                let (message, window) = self.inflate(compressed);
                let result = message.as_ref().map(drop).map_err(|v| *v);
                let inflated = Inflated { window, result };
                (message.ok().map(WsEvent::Message), Some(inflated))
            }
            event => (Some(event), None),
        };
        if let Some(event) = event {
            self.deliver_event(conn, ws, &plugin, event);
        }
        self.reply
            .to(conn.shard)
            .send(Reply::EventDone { conn, ws, inflated });
    }

    /// A compressed message inflated against the client's window (which it grows), within its
    /// limit, and checked for UTF-8 if it is text.
    fn inflate(
        &mut self,
        compressed: Compressed,
    ) -> (Result<WsMessage, Violation>, Option<DeflateWindow>) {
        let Compressed {
            text,
            payload,
            max,
            mut window,
        } = compressed;
        let failures = self.codec.counts.failures;
        let inflated = self.codec.inflate(&payload, window.as_mut(), max);
        if self.codec.counts.failures > failures {
            tracing::error!(
                "the deflate library panicked (a bug there); the inflater was replaced and the connection failed (1007)"
            );
        }
        let message = inflated
            .map_err(|e| match e {
                InflateError::TooBig => Violation::TooBig,
                InflateError::Corrupt => Violation::BadCompression,
            })
            .and_then(|bytes| {
                if text {
                    String::from_utf8(bytes)
                        .map(WsMessage::Text)
                        .map_err(|_| Violation::InvalidUtf8)
                } else {
                    Ok(WsMessage::Binary(bytes))
                }
            });
        (message, window)
    }

    fn deliver_event(&mut self, conn: ConnId, ws: WsId, plugin: &Arc<Plugin>, event: WsEvent) {
        let closing = matches!(event, WsEvent::Close { .. });
        match self.instance(plugin) {
            Ok(instance) => {
                if let Err(failure) = instance.on_event(ws, event) {
                    let context = format!("event of WebSocket {ws}");
                    self.discard(plugin, &failure, None, &context);
                    if !closing {
                        self.reply.to(conn.shard).send(Reply::Close {
                            ws,
                            code: CLOSE_INTERNAL_ERROR,
                            reason: "plugin failed".to_owned(),
                        });
                    }
                } else {
                    self.recycle_if_due(plugin, false);
                }
            }
            Err(failure) => {
                let context = format!("instantiating for WebSocket {ws}");
                self.discard(plugin, &failure, None, &context);
                if !closing {
                    self.reply.to(conn.shard).send(Reply::Close {
                        ws,
                        code: CLOSE_INTERNAL_ERROR,
                        reason: "plugin unavailable".to_owned(),
                    });
                }
            }
        }
    }
}

/// A response for request `seq` of `conn`, through the reply queue of its event loop.
struct ToConnection {
    conn: ConnId,
    seq: u64,
    reply: crate::pool::reply::ReplyTx,
}

impl Responder for ToConnection {
    fn respond(&mut self, bytes: Vec<u8>, close: bool) {
        self.reply.send(Reply::Response {
            conn: self.conn,
            seq: self.seq,
            bytes,
            close,
        });
    }
}

fn origin(job: &RequestJob) -> Origin {
    Origin {
        request_id: job.request_id,
        version: job.head.version,
        head: job.head.is_head(),
        keep_alive: job.head.keep_alive,
        accept_encoding: header(&job.head.headers, "accept-encoding").map(<[u8]>::to_vec),
        access: Access {
            remote: job.remote,
            method: job.head.method.clone(),
            path: job.head.path.clone(),
            received: job.received,
            metrics: Some(job.plugin.metrics.clone()),
        },
    }
}

/// The WIT view of a request. Moves the headers and body, no copies.
fn to_wit(job: RequestJob) -> types::Request {
    types::Request {
        id: hex_id(job.request_id),
        method: job.head.method,
        path: job.head.path,
        mount: job.mount.to_string(),
        query: job.head.query,
        headers: job
            .head
            .headers
            .into_iter()
            .map(|(name, value)| types::Header { name, value })
            .collect(),
        body: job.body,
        remote_addr: address_text(job.remote),
        version: match job.head.version {
            Version::Http10 => types::HttpVersion::Http10,
            Version::Http11 => types::HttpVersion::Http11,
        },
    }
}

/// `{:016x}` without the formatting machinery (once per request).
fn hex_id(id: u64) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    (0..16)
        .rev()
        .map(|i| DIGITS[((id >> (i * 4)) & 0xf) as usize] as char)
        .collect()
}

/// `addr.to_string()`, with IPv4 (the common case) written digit by digit: `Display` for
/// socket addresses was 1% of a hello-world load.
fn address_text(addr: std::net::SocketAddr) -> String {
    let std::net::SocketAddr::V4(v4) = addr else {
        return addr.to_string();
    };
    let mut out = String::with_capacity(21);
    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_decimal(&mut out, u32::from(octet));
    }
    out.push(':');
    push_decimal(&mut out, u32::from(v4.port()));
    out
}

fn push_decimal(out: &mut String, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[..len].iter().rev().map(|&d| d as char));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_addresses_read_as_formatting_writes_them() {
        for id in [0, 1, 0xdead_beef, u64::MAX] {
            assert_eq!(hex_id(id), format!("{id:016x}"));
        }
        for addr in [
            "127.0.0.1:8080",
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "10.20.3.4:51234",
            "[::1]:443",
        ] {
            let addr: std::net::SocketAddr = addr.parse().unwrap();
            assert_eq!(address_text(addr), addr.to_string());
        }
    }
}
