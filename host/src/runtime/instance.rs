//! A live plugin instance, reused across calls (one at a time), and one call on it.
//!
//! Reuse is the fast path (about a microsecond a call, against tens for a fresh instance).
//! Between calls an instance waits in its plugin's [`InstancePool`](super::instances). Any
//! failure inside a call (a trap, the CPU deadline, the memory cap) poisons the instance: the
//! caller drops it and the next request gets a fresh one.
//!
//! Every call is a future: the guest runs on a fiber, and a wait of the guest (a sleep, a
//! socket, a key-value commit) suspends it without holding its thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use wasmtime::Store;

use super::bindings::types;
use super::call::CallContext;
use super::failure::classify;
pub use super::failure::{Failure, InvokeError};
use super::packed::Returned;
use super::plugin::Plugin;
use super::state::{HostState, WsLink};
use super::watch::Cancel;
use super::world::Exports;
use crate::message::{WsEvent, WsId, WsMessage};

/// One instance of one plugin version.
pub struct Instance {
    metrics: Arc<crate::metrics::PluginMetrics>,
    store: Store<HostState>,
    bindings: Exports,
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
    pub async fn new(plugin: &Plugin, ws: WsLink) -> Result<Instance, Failure> {
        let (store, bindings) = plugin.new_store_and_instantiate(Some(ws)).await?;
        let metrics = plugin.metrics.clone();
        metrics.live_instances.fetch_add(1, Ordering::Relaxed);
        let start_bytes = store.data().memory.bytes;
        Ok(Instance {
            metrics,
            store,
            bindings,
            calls: 0,
            start_bytes,
        })
    }

    /// Calls `handle-request` with `call` as the request being answered. Returns the outcome
    /// and gives the call context back. `request` keeps everything but its body, which may
    /// have been moved into the guest.
    pub async fn handle_request(
        &mut self,
        request: &mut super::incoming::Incoming,
        call: CallContext,
        cancel: Cancel,
    ) -> (Result<Returned, Failure>, CallContext) {
        self.arm(Some(cancel));
        let data = self.store.data_mut();
        data.tags.request.store(call.request_id, Ordering::Relaxed);
        data.call = Some(call);
        let result = self.bindings.handle_request(&mut self.store, request).await;
        let data = self.store.data_mut();
        data.tags.request.store(0, Ordering::Relaxed);
        let call = data
            .call
            .take()
            .expect("call context is restored after the call");
        (result.map_err(|e| self.classify(e)), call)
    }

    /// Delivers the open event of WebSocket `ws`, with the request that asked for it.
    pub async fn on_open(&mut self, ws: WsId, request: &types::Request) -> Result<(), Failure> {
        self.arm(None);
        let result = self.bindings.on_open(&mut self.store, ws, request).await;
        result.map_err(|e| self.classify(e))
    }

    /// Delivers a message or the close of WebSocket `ws`.
    pub async fn on_event(&mut self, ws: WsId, event: WsEvent) -> Result<(), Failure> {
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

    /// How much the instance's linear memory grew since it started.
    pub fn grown_bytes(&self) -> usize {
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
