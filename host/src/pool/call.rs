//! One job served as a future: a request answered, or an event of a WebSocket delivered, on
//! an instance of its plugin. The worker ([`super::worker`]) polls it; while the guest waits
//! (a sleep, a socket, a commit) the future is pending and the worker runs other calls.
//!
//! A call takes an idle instance from its plugin's pool or makes one, and gives it back when
//! it is over, unless the call failed (the instance is discarded) or the policy asks for a
//! fresh one. Nothing a plugin does makes this panic; a bug in the host that does is caught
//! by the worker, which answers for the call ([`Fallback`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::access::Access;
use crate::limits::LOOP_BODY_BYTES;
use crate::message::{ConnId, WsEvent, WsId};
use crate::pool::exchange::{Exchange, Origin, Responder};
use crate::pool::job::{EventJob, RequestJob, RunOutcome, ScheduledJob};
use crate::pool::reply::{Inflated, Replies, Reply};
use crate::proto::{header, ws};
use crate::runtime::bindings::types;
use crate::runtime::engine::incoming::Incoming;
use crate::runtime::engine::instance::{Failure, Instance, InvokeError};
use crate::runtime::engine::packed::Answer;
use crate::runtime::engine::plugin::Plugin;
use crate::runtime::sandbox::exec::leave_loop;
use crate::ws_router::WsRouter;

/// Close code for a WebSocket whose plugin failed while handling one of its events.
const CLOSE_INTERNAL_ERROR: u16 = crate::proto::frame::close_code::INTERNAL_ERROR;

/// How to answer for a call whose future panicked (a bug in the host, not in the plugin).
pub(super) enum Fallback {
    Request {
        origin: Box<Origin>,
        plugin: Arc<str>,
        conn: ConnId,
        seq: u64,
    },
    Event {
        conn: ConnId,
        ws: WsId,
        plugin: Arc<str>,
    },
    /// A run of a schedule: its scheduler hears of it when the run's future is dropped.
    Scheduled {
        plugin: Arc<str>,
        schedule: Arc<str>,
    },
}

impl Fallback {
    pub(super) fn for_request(job: &RequestJob) -> Self {
        Fallback::Request {
            origin: Box::new(origin(job)),
            plugin: job.plugin.name.clone(),
            conn: job.conn,
            seq: job.seq,
        }
    }

    pub(super) fn for_event(job: &EventJob) -> Self {
        Fallback::Event {
            conn: job.conn,
            ws: job.ws,
            plugin: job.plugin.name.clone(),
        }
    }

    /// Answers for the call: a 500, or the event marked done.
    pub(super) fn answer(self, reply: &Replies) {
        match self {
            Fallback::Request {
                origin,
                plugin,
                conn,
                seq,
            } => {
                tracing::error!(%plugin, "worker panicked while serving a request");
                let to = to_connection(reply, conn, seq);
                let mut call = Exchange::new(*origin, plugin, to);
                call.respond_error(500, "internal error in the ankh host");
            }
            Fallback::Scheduled { plugin, schedule } => {
                tracing::error!(%plugin, %schedule, "worker panicked while running a scheduled job");
            }
            Fallback::Event { conn, ws, plugin } => {
                tracing::error!(%plugin, ws, "worker panicked while delivering an event");
                reply.to(conn.shard).send(Reply::EventDone {
                    conn,
                    ws,
                    inflated: None,
                });
            }
        }
    }
}

/// One call's own state: its plugin, where its answers go, and the instance it runs on.
pub(super) struct Call {
    plugin: Arc<Plugin>,
    reply: Replies,
    link: Arc<WsRouter>,
    instance: Option<Instance>,
}

impl Call {
    pub(super) fn new(plugin: Arc<Plugin>, reply: Replies, link: Arc<WsRouter>) -> Self {
        let instance = if plugin.policy.fresh_instances {
            None
        } else {
            plugin.instances.take()
        };
        plugin
            .metrics
            .calls_in_flight
            .fetch_add(1, Ordering::Relaxed);
        Call {
            plugin,
            reply,
            link,
            instance,
        }
    }

    /// The instance for this call: the idle one it was given, or a new one.
    async fn instance(&mut self) -> Result<&mut Instance, Failure> {
        if self.instance.is_none() {
            // Boxed, as the upgrade below: a rare path's future would otherwise size every
            // call's (a request's future went from 4 KB to 2 KB with the three rare paths
            // boxed; see `Exports::handle_request`).
            let instance = Box::pin(Instance::new(&self.plugin, self.link.clone())).await?;
            self.instance = Some(instance);
        }
        Ok(self.instance.as_mut().expect("instance was just ensured"))
    }

    /// After a call: drops the instance if its policy says so (a fresh one per request, a
    /// bounded number of calls each), or if its memory grew past the policy's bound (wasm
    /// memory never shrinks; a fresh instance starts small again).
    fn recycle_if_due(&mut self, after_request: bool) {
        let Some(instance) = &self.instance else {
            return;
        };
        let policy = &self.plugin.policy;
        let by_mode =
            policy.fresh_instances || policy.recycle_after.is_some_and(|n| instance.calls >= n);
        if after_request && by_mode {
            self.instance = None;
            return;
        }
        let grown = instance.grown_bytes();
        if grown > policy.recycle_growth_bytes {
            tracing::debug!(
                plugin = %self.plugin.name,
                grown,
                "instance replaced: its memory grew past the recycle bound"
            );
            self.plugin
                .metrics
                .memory_recycles
                .fetch_add(1, Ordering::Relaxed);
            self.instance = None;
        }
    }

    /// Logs a failed call and forgets the instance that failed.
    /// One log event per failure, whatever the format: the plugin and the request (when there
    /// is one) as fields, and the guest's backtrace as one escaped field, not as lines of
    /// their own.
    fn discard(&mut self, failure: &Failure, request: Option<u64>, context: &str) {
        self.instance = None;
        let plugin = &self.plugin;
        let m = &plugin.metrics;
        let counter = match failure.error {
            InvokeError::Deadline(_) => &m.deadline_hits,
            InvokeError::TimedOut(_) => &m.timeouts,
            InvokeError::Cancelled => &m.cancellations,
            _ => &m.traps,
        };
        counter.fetch_add(1, Ordering::Relaxed);
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

    /// The call is over: its instance goes back to the plugin's pool, if it may serve again.
    fn finish(mut self) {
        if let Some(instance) = self.instance.take() {
            self.plugin.instances.put(instance);
        }
    }

    pub(super) async fn serve(mut self, job: RequestJob) {
        let origin = origin(&job);
        let plugin = self.plugin.clone();
        let (conn, seq) = (job.conn, job.seq);
        let to = to_connection(&self.reply, conn, seq);
        // Boxed from the start: the store keeps it boxed during the call, and a future that
        // held it by value would carry it twice (before the call and after).
        let mut call = Box::new(Exchange::new(origin, plugin.name.clone(), to));
        if job.cancel.is_cancelled() {
            // The client left while the request waited in the queue: nobody wants the answer.
            plugin.metrics.cancellations.fetch_add(1, Ordering::Relaxed);
            call.abandon(InvokeError::Cancelled.status());
            return self.finish();
        }
        if plugin.service.is_some() {
            return Box::pin(self.serve_service(job, *call)).await;
        }
        let instance = match self.instance().await {
            Ok(instance) => instance,
            Err(failure) => {
                let context = format!("instantiating for request {:016x}", job.request.id);
                self.discard(&failure, Some(job.request.id), &context);
                let message =
                    call.error_message(&format!("could not be instantiated: {}", failure.error));
                call.respond_error(failure.error.status(), &message);
                return self.finish();
            }
        };
        let mut job = job;
        let slot = job.slot.take();
        let cancel = job.cancel.clone();
        // Used in place: moved out of the job, it would take room of its own in this future.
        let request = &mut job.request;
        let (result, mut call) = instance.handle_request(request, call, cancel).await;
        // Whether or not the call took it, the body is not the WebSocket's (`on-open` gets
        // the request without it).
        request.body = Vec::new();
        // The call is over: free the plugin's concurrency slot before the response leaves, so
        // a client that sends its next request on receipt finds the slot free.
        drop(slot);
        self.recycle_if_due(true);
        let returned = match result {
            Ok(returned) => returned,
            Err(failure) => {
                let context = format!("request {:016x}", call.request_id);
                self.discard(&failure, Some(call.request_id), &context);
                if matches!(failure.error, InvokeError::Cancelled) {
                    call.abandon(failure.error.status());
                } else {
                    let message = call.error_message(&failure.error.to_string());
                    call.respond_error(failure.error.status(), &message);
                }
                return self.finish();
            }
        };
        if call.streaming() {
            // Returning ends a streamed body, as `http.finish` would: a response or an
            // upgrade returned after it is refused and logged below.
            let _ = call.finish::<(String, Vec<u8>)>(&[]);
        }
        match returned.answer() {
            Ok(Answer::Respond {
                status,
                headers,
                body,
            }) => {
                if body.len() > LOOP_BODY_BYTES {
                    leave_loop().await;
                }
                // Refused (and logged) if the handler already responded early.
                let _ = call.respond(status, &headers, body);
            }
            Ok(Answer::Done) => {
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
            Ok(Answer::Upgrade(upgrade)) => {
                Box::pin(self.upgrade(request, upgrade, &mut call, (conn, seq))).await;
            }
            Err(malformed) => {
                // The instance is sound (nothing trapped): only its answer is unreadable.
                error_limited!(
                    plugin = %plugin.name,
                    request = %format_args!("{:016x}", call.request_id),
                    "{malformed}"
                );
                let message = call.error_message(&malformed.to_string());
                call.respond_error(500, &message);
            }
        }
        self.finish()
    }

    /// A request to a WASI 0.3 component: its instances are its own (see
    /// `runtime::engine::concurrent`), so the call holds none; it holds its permit and the
    /// plugin's concurrency slot until the response is out.
    async fn serve_service(self, job: RequestJob, mut call: Exchange<ToConnection>) {
        let plugin = self.plugin.clone();
        let Some((service, tokio)) = &plugin.service else {
            return self.finish();
        };
        let mut job = job;
        let slot = job.slot.take();
        let mut request = job.request;
        let inflow = request.inflow.take();
        let record = request.lend();
        let cap = plugin.limits.max_response_bytes;
        let served = crate::runtime::engine::proxy::serve_service(
            service, tokio, &record, inflow, &mut call, cap,
        )
        .await;
        drop(slot);
        if let Err(failed) = served {
            let m = &plugin.metrics;
            let id = format!("{:016x}", call.request_id);
            if failed.timed_out {
                m.timeouts.fetch_add(1, Ordering::Relaxed);
            } else if failed.status >= 500 {
                m.traps.fetch_add(1, Ordering::Relaxed);
            }
            tracing::error!(plugin = %plugin.name, request = %id, "plugin `{}` {}", plugin.name, failed.why);
            if call.streaming() {
                call.cut(&failed.why);
            } else if !call.responded() {
                let message = call.error_message(&failed.why);
                call.respond_error(failed.status, &message);
            }
        }
        self.finish()
    }

    /// The handler accepted a WebSocket: check the handshake, switch the connection, and run
    /// the open event right here, before any other event of the connection can start.
    async fn upgrade(
        &mut self,
        request: &mut Incoming,
        upgrade: types::Upgrade,
        call: &mut Exchange<ToConnection>,
        (conn, seq): (ConnId, u64),
    ) {
        let plugin = self.plugin.clone();
        if call.responded() {
            warn_limited!(plugin = %plugin.name, "upgrade refused: the request was already answered");
            return;
        }
        let headers = &request.head.headers;
        let accept = match ws::accept_key(&request.head.method, request.head.version, headers) {
            Ok(accept) => accept,
            Err(refusal) => {
                call.respond_error_with(refusal.status, refusal.headers(), refusal.message);
                return;
            }
        };
        let offered = ws::offered_protocols(headers);
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
        let deflate = if plugin.policy.limits.ws_compression {
            crate::proto::ws_extension::negotiate(headers)
        } else {
            None
        };
        let extension = deflate.map(|d| d.response());
        let bytes =
            ws::switching_protocols(&accept, protocol.as_deref(), extension.as_deref(), &extra);
        let ws_id = self.link.hub().open(&plugin.name, conn.shard);
        call.upgraded();
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
        let opened = match self.instance.as_mut() {
            Some(instance) => instance.on_open(ws_id, &request.lend()).await,
            None => Ok(()),
        };
        if let Err(failure) = opened {
            let context = format!("open event of WebSocket {ws_id}");
            self.discard(&failure, Some(call.request_id), &context);
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

    /// One run of a schedule, reported to its scheduler.
    pub(super) async fn run_job(mut self, job: ScheduledJob) {
        let ScheduledJob {
            plugin: _,
            schedule,
            due_ms,
            id,
            slot,
            done,
        } = job;
        let _slot = slot;
        let record = crate::runtime::engine::world::JobRecord {
            schedule: schedule.to_string(),
            due_ms,
            id: format!("{id:016x}"),
        };
        let context = format!("schedule {schedule}");
        let outcome = match self.instance().await {
            Ok(instance) => match instance.run_job(record, id).await {
                Ok(Ok(())) => {
                    self.recycle_if_due(true);
                    RunOutcome::Ok
                }
                Ok(Err(why)) => {
                    self.recycle_if_due(true);
                    RunOutcome::Failed(why)
                }
                Err(failure) => {
                    self.discard(&failure, Some(id), &context);
                    RunOutcome::Failed(failure.error.to_string())
                }
            },
            Err(failure) => {
                self.discard(&failure, Some(id), &format!("instantiating for {context}"));
                RunOutcome::Failed(failure.error.to_string())
            }
        };
        done.report(outcome);
        self.finish()
    }

    /// One event of a WebSocket (none when its message failed to inflate), then `EventDone`
    /// so that the next may go.
    pub(super) async fn deliver(
        mut self,
        conn: ConnId,
        ws: WsId,
        event: Option<WsEvent>,
        inflated: Option<Inflated>,
    ) {
        if let Some(event) = event {
            self.deliver_event(conn, ws, event).await;
        }
        self.reply
            .to(conn.shard)
            .send(Reply::EventDone { conn, ws, inflated });
        self.finish()
    }

    async fn deliver_event(&mut self, conn: ConnId, ws: WsId, event: WsEvent) {
        let closing = matches!(event, WsEvent::Close { .. });
        match self.instance().await {
            Ok(instance) => {
                if let Err(failure) = instance.on_event(ws, event).await {
                    let context = format!("event of WebSocket {ws}");
                    self.discard(&failure, None, &context);
                    if !closing {
                        self.reply.to(conn.shard).send(Reply::Close {
                            ws,
                            code: CLOSE_INTERNAL_ERROR,
                            reason: "plugin failed".to_owned(),
                        });
                    }
                } else {
                    self.recycle_if_due(false);
                }
            }
            Err(failure) => {
                let context = format!("instantiating for WebSocket {ws}");
                self.discard(&failure, None, &context);
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

impl Drop for Call {
    /// Finished, or dropped unfinished (the host panicked): either way no longer in flight.
    fn drop(&mut self) {
        self.plugin
            .metrics
            .calls_in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response for request `seq` of `conn`, through the reply queue of its event loop.
pub(super) struct ToConnection {
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

    fn start(&mut self, head: Vec<u8>, flow: crate::message::Flow) {
        self.reply.send(Reply::Stream {
            conn: self.conn,
            seq: self.seq,
            head,
            flow,
        });
    }

    fn piece(&mut self, bytes: Vec<u8>) {
        self.reply.send(Reply::Piece {
            conn: self.conn,
            seq: self.seq,
            bytes,
        });
    }

    fn end(&mut self, last: Vec<u8>, close: bool) {
        self.reply.send(Reply::End {
            conn: self.conn,
            seq: self.seq,
            last,
            close,
        });
    }
}

/// Where a call's response goes: request `seq` of connection `conn`, through the reply
/// queue of its loop.
fn to_connection(reply: &Replies, conn: ConnId, seq: u64) -> ToConnection {
    ToConnection {
        conn,
        seq,
        reply: reply.to(conn.shard).clone(),
    }
}

fn origin(job: &RequestJob) -> Origin {
    Origin {
        request_id: job.request.id,
        version: job.request.head.version,
        head: job.request.head.is_head(),
        keep_alive: job.request.head.keep_alive,
        accept_encoding: header(&job.request.head.headers, "accept-encoding").map(<[u8]>::to_vec),
        access: Access {
            remote: job.request.remote,
            method: job.request.head.method.clone(),
            path: job.request.head.path.clone(),
            received: job.received,
            metrics: Some(job.plugin.metrics.clone()),
            trace: job.request.trace.clone(),
        },
        stream: crate::pool::exchange::StreamTerms {
            times: crate::message::StreamTimes {
                idle: job.plugin.policy.limits.stream_idle_timeout,
                total: job.plugin.policy.limits.stream_timeout,
            },
            cancel: Some(job.cancel.clone()),
        },
    }
}
