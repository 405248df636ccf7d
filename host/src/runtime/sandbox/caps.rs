//! The two meters every store carries: the cap on an instance's linear memory (wasmtime's
//! `ResourceLimiter`) and the CPU budget of the call in progress (charged on epoch ticks).

use std::sync::Arc;
use std::time::Duration;

use cpu_time::ThreadTime;

use crate::limits::GUEST_TABLE_ELEMENTS;

/// Caps the linear memory of an instance, and remembers that the cap was hit so the failure
/// can be reported as such rather than as a generic trap. Counts the instance's memory in the
/// plugin's `ankh_plugin_instance_memory_bytes` while the store lives.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    pub limit_bytes: usize,
    pub hit: bool,
    /// Linear memory of the instance now, all its memories together.
    pub bytes: usize,
    metrics: Arc<crate::metrics::PluginMetrics>,
}

impl MemoryCap {
    pub(super) fn new(limit_bytes: usize, metrics: Arc<crate::metrics::PluginMetrics>) -> Self {
        MemoryCap {
            limit_bytes,
            hit: false,
            bytes: 0,
            metrics,
        }
    }
}

impl Drop for MemoryCap {
    fn drop(&mut self) {
        self.metrics
            .instance_memory_bytes
            .fetch_sub(self.bytes as i64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The error that stops a guest at its memory cap.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {limit_bytes} bytes reached (wanted {desired_bytes})")]
pub(crate) struct MemoryCapReached {
    pub limit_bytes: usize,
    pub desired_bytes: usize,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.metrics.memory(desired);
        if desired > self.limit_bytes {
            self.hit = true;
            return Err(wasmtime::Error::new(MemoryCapReached {
                limit_bytes: self.limit_bytes,
                desired_bytes: desired,
            }));
        }
        let grown = desired.saturating_sub(current);
        self.bytes += grown;
        self.metrics
            .instance_memory_bytes
            .fetch_add(grown as i64, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= GUEST_TABLE_ELEMENTS)
    }
}

/// The CPU time a call may use. Checked on every epoch tick that finds the guest running: the
/// thread's CPU clock is read then, so time the guest spends blocked in the host (a sleep, a
/// database call) is not charged.
#[derive(Debug)]
pub(crate) struct CpuBudget {
    pub deadline: Duration,
    used: Duration,
    /// The thread's CPU clock at the previous tick of this call.
    last: Option<Duration>,
    pub exceeded: bool,
    /// The engine's epoch ticker, told whenever this store's guest runs (it rests while
    /// none does): set by the plugin's store kit.
    pub(crate) ticks: Option<std::sync::Arc<crate::runtime::engine::ticker::Ticks>>,
}

impl CpuBudget {
    pub(super) fn new(deadline: Duration) -> Self {
        CpuBudget {
            deadline,
            used: Duration::ZERO,
            last: None,
            exceeded: false,
            ticks: None,
        }
    }

    /// The guest runs, or is about to: its engine's epoch must tick.
    #[inline]
    fn running(&self) {
        if let Some(ticks) = &self.ticks {
            ticks.want();
        }
    }

    /// Starts a new call with a full budget. Costs no system call.
    pub(crate) fn reset(&mut self) {
        self.running();
        self.used = Duration::ZERO;
        self.last = None;
        self.exceeded = false;
    }

    /// The call resumes after a wait in which the worker may have run other calls: their CPU
    /// time is not this call's. The next tick charges from now.
    pub(crate) fn resumed(&mut self) {
        self.running();
        if self.last.is_some() {
            self.last = Some(ThreadTime::now().as_duration());
        }
    }

    /// The call yielded its thread at a tick (see [`crate::runtime::sandbox::guest_limits::configure_store`]):
    /// the next tick that finds it running charges one whole tick, as at the start of a call.
    pub(crate) fn yielded(&mut self) {
        self.last = None;
    }

    /// Called on an epoch tick while the guest runs; returns false once the budget is spent.
    /// The CPU used before the first tick of a call is counted as one whole tick.
    pub(crate) fn tick(&mut self, tick: Duration) -> bool {
        self.running();
        let now = ThreadTime::now().as_duration();
        self.used += match self.last {
            Some(last) => now.saturating_sub(last),
            None => tick,
        };
        self.last = Some(now);
        if self.used >= self.deadline {
            self.exceeded = true;
        }
        !self.exceeded
    }
}
