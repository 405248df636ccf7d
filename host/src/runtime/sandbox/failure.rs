//! How a call (or an instantiation) failed, in one line for the client and with the guest's
//! backtrace for the log: [`classify`] reads the store's limits and the error wasmtime gave.

use wasmtime::Trap;
use wasmtime::component::ResourceTableError;

use crate::limits::GUEST_TABLE_ENTRIES;
use crate::runtime::sandbox::store::HostState;
use crate::runtime::sandbox::watch::{Stop, Stopped};

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
    pub(crate) fn status(&self) -> u16 {
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
