//! A live plugin instance, kept by one worker and reused across requests, and one call on it.
//!
//! Reuse is the fast path (about a microsecond a call, against tens for a fresh instance). Any
//! failure inside a call (a trap, the CPU deadline, the memory cap) poisons the instance: the
//! caller drops it and the next request gets a fresh one.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use wasmtime::component::ResourceTableError;
use wasmtime::{Store, Trap};

use super::bindings::{self, types};
use super::call::CallContext;
use super::plugin::Plugin;
use super::state::{HostState, WsLink};
use super::watch::{Cancel, Stop, Stopped};
use crate::job::{WsEvent, WsId, WsMessage};
use crate::limits::GUEST_TABLE_ENTRIES;

/// One instance of one plugin version.
pub struct Instance {
    pub plugin: Arc<Plugin>,
    store: Store<HostState>,
    bindings: bindings::Plugin,
    /// Calls served, for recycling decisions and logs.
    pub calls: u64,
    /// Linear memory right after instantiation.
    start_bytes: usize,
}

/// Why a call failed. Each maps to one status code, and says what happened in one line: the
/// body of the error page is this, the wasm backtrace goes to the log only.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// The call used more CPU time than its deadline allows.
    #[error("exceeded its CPU deadline of {0:?}")]
    Deadline(std::time::Duration),
    /// The call ran past its wall-clock deadline, waits included.
    #[error("exceeded its handler timeout of {0:?}")]
    TimedOut(std::time::Duration),
    /// The client disconnected; nobody is waiting for the answer.
    #[error("was cancelled: the client disconnected")]
    Cancelled,
    /// The instance tried to grow its memory past the cap.
    #[error("exceeded its memory cap of {0} bytes")]
    Memory(usize),
    /// The instance held as many resources (streams, pollables...) as its table allows.
    #[error("ran out of resource table entries (limit {0})")]
    TableFull(usize),
    /// The guest called `exit`.
    #[error("exited with status {0}")]
    Exit(i32),
    /// The guest trapped (a panic, `unreachable`, a stack overflow, an out-of-bounds access).
    #[error("trapped: {0}")]
    Trap(String),
}

impl InvokeError {
    pub fn status(&self) -> u16 {
        match self {
            InvokeError::Deadline(_) | InvokeError::TimedOut(_) => 504,
            // nginx's "client closed request": logged, never sent (there is no client).
            InvokeError::Cancelled => 499,
            InvokeError::Memory(_)
            | InvokeError::TableFull(_)
            | InvokeError::Exit(_)
            | InvokeError::Trap(_) => 500,
        }
    }
}

/// A failed call: the error for the client, and the full report (with the wasm backtrace) for
/// the log.
#[derive(Debug)]
pub struct Failure {
    pub error: InvokeError,
    pub report: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.plugin
            .metrics
            .live_instances
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Instance {
    pub fn new(plugin: Arc<Plugin>, ws: WsLink) -> Result<Instance, Failure> {
        let (store, bindings) = plugin.new_store_and_instantiate(Some(ws))?;
        plugin
            .metrics
            .live_instances
            .fetch_add(1, Ordering::Relaxed);
        let start_bytes = store.data().memory.bytes;
        Ok(Instance {
            plugin,
            store,
            bindings,
            calls: 0,
            start_bytes,
        })
    }

    /// Calls `handle-request` with `call` as the request being answered. Returns the outcome
    /// and gives the call context back.
    pub fn handle_request(
        &mut self,
        request: &types::Request,
        call: CallContext,
        cancel: Cancel,
    ) -> (Result<types::Outcome, Failure>, CallContext) {
        self.arm(Some(cancel));
        let data = self.store.data_mut();
        data.tags.request.store(call.request_id, Ordering::Relaxed);
        data.call = Some(call);
        let result = self
            .bindings
            .ankh_plugin_handler()
            .call_handle_request(&mut self.store, request);
        let data = self.store.data_mut();
        data.tags.request.store(0, Ordering::Relaxed);
        let call = data
            .call
            .take()
            .expect("call context is restored after the call");
        (result.map_err(|e| self.classify(e)), call)
    }

    /// Delivers the open event of WebSocket `ws`, with the request that asked for it.
    pub fn on_open(&mut self, ws: WsId, request: &types::Request) -> Result<(), Failure> {
        self.arm(None);
        let result = self.bindings.ankh_plugin_websocket_handler().call_on_open(
            &mut self.store,
            ws,
            request,
        );
        result.map_err(|e| self.classify(e))
    }

    /// Delivers a message or the close of WebSocket `ws`.
    pub fn on_event(&mut self, ws: WsId, event: WsEvent) -> Result<(), Failure> {
        self.arm(None);
        let handler = self.bindings.ankh_plugin_websocket_handler();
        let result = match event {
            WsEvent::Message(message) => {
                let message = match message {
                    WsMessage::Text(text) => types::Message::Text(text),
                    WsMessage::Binary(bytes) => types::Message::Binary(bytes),
                };
                handler.call_on_message(&mut self.store, ws, &message)
            }
            WsEvent::Close {
                code,
                reason,
                clean,
            } => handler.call_on_close(
                &mut self.store,
                ws,
                &types::CloseInfo {
                    code,
                    reason,
                    clean,
                },
            ),
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

/// What a failed call (or instantiation) of a store comes to.
pub(crate) fn classify(data: &HostState, e: wasmtime::Error) -> Failure {
    // The guest's own frames (symbolized from the name section) when there are any; the
    // reason itself goes in the headline, and the host's frames would only be noise.
    let report = match e.downcast_ref::<wasmtime::WasmBacktrace>() {
        Some(trace) => trace.to_string(),
        None => format!("{e:#}"),
    };
    let stopped = data
        .watch
        .stopped_by()
        .or_else(|| e.downcast_ref::<Stopped>().map(|s| s.0));
    let error = if data.budget.exceeded {
        InvokeError::Deadline(data.budget.deadline)
    } else if let Some(stop) = stopped {
        match stop {
            Stop::TimedOut(limit) => InvokeError::TimedOut(limit),
            Stop::Cancelled => InvokeError::Cancelled,
        }
    } else if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        InvokeError::Deadline(data.budget.deadline)
    } else if data.memory.hit {
        InvokeError::Memory(data.memory.limit_bytes)
    } else if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        InvokeError::Exit(exit.0)
    } else if matches!(
        e.downcast_ref::<ResourceTableError>(),
        Some(ResourceTableError::Full)
    ) {
        InvokeError::TableFull(GUEST_TABLE_ENTRIES)
    } else {
        let reason = match e.downcast_ref::<Trap>() {
            Some(trap) => trap.to_string(),
            // The outermost layer of an error is often the backtrace; the cause is the root.
            None => e.root_cause().to_string(),
        };
        let first_line = reason.lines().next().unwrap_or_default().to_owned();
        InvokeError::Trap(first_line)
    };
    Failure { error, report }
}
