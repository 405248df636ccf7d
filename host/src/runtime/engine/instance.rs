//! A live plugin instance, reused across calls (one at a time), and one call on it.
//!
//! Reuse is the fast path (about a microsecond a call, against tens for a fresh instance).
//! Between calls an instance waits in its plugin's [`InstancePool`](crate::runtime::engine::instances). Any
//! failure inside a call (a trap, the CPU deadline, the memory cap) poisons the instance: the
//! caller drops it and the next request gets a fresh one.
//!
//! Every call is a future: the guest runs on a fiber, and a wait of the guest (a sleep, a
//! socket, a key-value commit) suspends it without holding its thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use wasmtime::Store;

use crate::message::{WsEvent, WsId, WsMessage};
use crate::runtime::bindings::types;
use crate::runtime::engine::packed::Returned;
use crate::runtime::engine::plugin::Plugin;
use crate::runtime::engine::world::Exports;
use crate::runtime::host::http::{Respond, take_back};
use crate::runtime::host::websocket::WebSockets;
use crate::runtime::sandbox::failure::classify;
pub use crate::runtime::sandbox::failure::{Failure, InvokeError};
use crate::runtime::sandbox::store::HostState;
use crate::runtime::sandbox::watch::Cancel;

/// One instance of one plugin version.
pub struct Instance {
    metrics: Arc<crate::metrics::PluginMetrics>,
    store: Store<HostState>,
    /// Boxed: a call's future holds its instance, and the exports' handles are most of it
    /// (one box per instance, kept while the instance is reused).
    bindings: Box<Exports>,
    /// Calls served, for recycling decisions and logs.
    pub calls: u64,
    /// Linear memory right after instantiation.
    start_bytes: usize,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.metrics.live_instances.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Instance {
    /// A fresh instance of `plugin`. Instantiating runs the guest's start code, under a call's
    /// limits.
    pub async fn new(plugin: &Plugin, ws: Arc<dyn WebSockets>) -> Result<Instance, Failure> {
        let (store, bindings) = plugin.new_store_and_instantiate(Some(ws)).await?;
        let metrics = plugin.metrics.clone();
        metrics.live_instances.fetch_add(1, Ordering::Relaxed);
        metrics.instances_created.fetch_add(1, Ordering::Relaxed);
        let start_bytes = store.data().memory.bytes;
        Ok(Instance {
            metrics,
            store,
            bindings: Box::new(bindings),
            calls: 0,
            start_bytes,
        })
    }

    /// Calls `handle-request` with `call` as where the answer goes (an early `http.respond`
    /// answers through it). Returns the outcome and gives the exchange back. `request` keeps
    /// everything but its body, which may have been moved into the guest.
    pub async fn handle_request<R: Respond>(
        &mut self,
        request: &mut crate::runtime::engine::incoming::Incoming,
        call: Box<R>,
        cancel: Cancel,
    ) -> (Result<Returned, Failure>, Box<R>) {
        self.arm(Some(cancel));
        // Only a box and a flag live across the call: every call's future carries them.
        let traced = request.trace.is_some();
        let span = if traced {
            self.enter_trace(request)
        } else {
            None
        };
        let data = self.store.data_mut();
        data.tags.request.store(request.id, Ordering::Relaxed);
        data.call = Some(call);
        let result = self.bindings.handle_request(&mut self.store, request).await;
        let data = self.store.data_mut();
        data.tags.request.store(0, Ordering::Relaxed);
        if traced {
            self.leave_trace(span, result.is_err());
        }
        let data = self.store.data_mut();
        let call = data
            .call
            .take()
            .expect("the exchange is back in the store after the call");
        (result.map_err(|e| self.classify(e)), take_back(call))
    }

    /// The trace of a request's call: its span, a child of the request's, when spans are
    /// recorded; and what its key-value operations and outbound calls are children of (or
    /// pass on, when nothing is recorded), set in the store's tags.
    #[cold]
    fn enter_trace(
        &mut self,
        request: &crate::runtime::engine::incoming::Incoming,
    ) -> Option<Box<crate::trace::Timed>> {
        let trace = request.trace.as_deref()?;
        let span = crate::trace::Timed::start(
            Some(trace.span),
            "plugin call",
            crate::trace::Kind::Internal,
        )
        .filter(|_| trace.recorded())
        .map(Box::new);
        let context = span.as_ref().map_or_else(|| trace.context(), |s| s.context);
        self.store
            .data()
            .tags
            .set_trace(Some(context), trace.tracestate.clone());
        span
    }

    /// The call is over: its trace context is cleared and its span sent.
    #[cold]
    fn leave_trace(&mut self, span: Option<Box<crate::trace::Timed>>, failed: bool) {
        let tags = &self.store.data().tags;
        tags.set_trace(None, None);
        if let Some(span) = span {
            let plugin = crate::trace::Attr::Text(tags.plugin.clone().into());
            // Not the error's text: a guest's own words stay in its (masked) log lines.
            let error = failed.then(|| "the call failed".to_owned());
            span.end(vec![("ankh.plugin", plugin)], error);
        }
    }

    /// Runs one job of a schedule; `Ok(Err(why))` when the job said it failed. `id` tags
    /// the plugin's log lines, as a request's id does.
    pub(crate) async fn run_job(
        &mut self,
        job: crate::runtime::engine::world::JobRecord,
        id: u64,
    ) -> Result<Result<(), String>, Failure> {
        let (schedule, due_ms) = (job.schedule.clone(), job.due_ms);
        let attributes = move || {
            vec![
                ("ankh.schedule", crate::trace::Attr::Text(schedule.into())),
                ("ankh.due_ms", crate::trace::Attr::Int(due_ms as i64)),
            ]
        };
        self.traced("scheduled job", attributes, async move |this: &mut Self| {
            this.arm(None);
            this.store
                .data_mut()
                .tags
                .request
                .store(id, Ordering::Relaxed);
            let result = this.bindings.run_job(&mut this.store, job).await;
            this.store
                .data_mut()
                .tags
                .request
                .store(0, Ordering::Relaxed);
            result.map_err(|e| this.classify(e))
        })
        .await
    }

    /// Delivers the open event of WebSocket `ws`, with the request that asked for it.
    pub(crate) async fn on_open(
        &mut self,
        ws: WsId,
        request: &types::Request,
    ) -> Result<(), Failure> {
        let attributes = || vec![("ankh.websocket", crate::trace::Attr::Int(ws as i64))];
        self.traced("websocket open", attributes, async |this: &mut Self| {
            this.arm(None);
            let result = this.bindings.on_open(&mut this.store, ws, request).await;
            result.map_err(|e| this.classify(e))
        })
        .await
    }

    /// Delivers a message or the close of WebSocket `ws`.
    pub(crate) async fn on_event(&mut self, ws: WsId, event: WsEvent) -> Result<(), Failure> {
        let name = match event {
            WsEvent::Close { .. } => "websocket close",
            _ => "websocket message",
        };
        let attributes = || vec![("ankh.websocket", crate::trace::Attr::Int(ws as i64))];
        self.traced(name, attributes, async move |this: &mut Self| {
            this.deliver(ws, event).await
        })
        .await
    }

    async fn deliver(&mut self, ws: WsId, event: WsEvent) -> Result<(), Failure> {
        self.arm(None);
        let result = match event {
            WsEvent::Message(message) => {
                let message = match message {
                    WsMessage::Text(text) => types::Message::Text(text),
                    WsMessage::Binary(bytes) => types::Message::Binary(bytes),
                };
                self.bindings
                    .on_message(&mut self.store, ws, &message)
                    .await
            }
            // Inflated by the worker before it gets here (see `pool::worker`).
            WsEvent::Compressed(_) => return Ok(()),
            WsEvent::Close {
                code,
                reason,
                clean,
            } => {
                let info = types::CloseInfo {
                    code,
                    reason,
                    clean,
                };
                self.bindings.on_close(&mut self.store, ws, &info).await
            }
        };
        result.map_err(|e| self.classify(e))
    }

    /// Runs `call` as the span `name` of a new trace (when spans are exported), its key-value
    /// operations and outbound calls children of it: a WebSocket event or a scheduled job.
    /// Its `attributes` are made only when it is.
    async fn traced<T>(
        &mut self,
        name: &'static str,
        attributes: impl FnOnce() -> Vec<(&'static str, crate::trace::Attr)>,
        call: impl AsyncFnOnce(&mut Self) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let Some(span) = crate::trace::Timed::root(name, crate::trace::Kind::Server) else {
            return call(self).await;
        };
        self.store.data().tags.set_trace(Some(span.context), None);
        let result = call(self).await;
        let tags = &self.store.data().tags;
        tags.set_trace(None, None);
        let mut attributes = attributes();
        attributes.push((
            "ankh.plugin",
            crate::trace::Attr::Text(tags.plugin.clone().into()),
        ));
        // Not the failure's text, which may hold the guest's words (as for a request's call).
        let error = result.as_ref().err().map(|_| "the call failed".to_owned());
        span.end(attributes, error);
        result
    }

    /// How much the instance's linear memory grew since it started.
    pub(crate) fn grown_bytes(&self) -> usize {
        self.store
            .data()
            .memory
            .bytes
            .saturating_sub(self.start_bytes)
    }

    /// A fresh CPU budget and wall-clock deadline for the next call.
    fn arm(&mut self, cancel: Option<Cancel>) {
        self.calls += 1;
        let data = self.store.data_mut();
        data.budget.reset();
        data.watch.arm(cancel);
        self.store.set_epoch_deadline(1);
    }

    fn classify(&self, e: wasmtime::Error) -> Failure {
        classify(self.store.data(), e)
    }
}
