//! The idle instances of one plugin version, shared by every worker.
//!
//! A reused instance serves one call at a time, so a plugin whose calls wait (a sleep, a
//! socket, a commit) needs as many instances as it has calls in flight. The pool grows on
//! demand: a call takes an idle instance, or the worker creates one (with the pooling
//! allocator, tens of microseconds, plus the unmapping when it is dropped), and gives it
//! back when the call is over. Calls that wait together tend to finish together, so the pool
//! keeps what a burst needed rather than a fixed few: at most `instances.max_idle` (the
//! policy) between calls, at most
//! [`INSTANCES_IDLE_TOTAL`](crate::limits::INSTANCES_IDLE_TOTAL) across all plugins (the
//! [`IdleBudget`], which sizes the pooling allocator), and none that went unused for
//! [`INSTANCE_IDLE_TIMEOUT`](crate::limits::INSTANCE_IDLE_TIMEOUT): after a burst the pool
//! shrinks back ([`trim_idle`](crate::runtime::engine::registry::trim_idle) runs every second). How
//! many run at once is bounded elsewhere: by `limits.max_concurrency` per plugin (503 past
//! it) and by the server's `max_calls` (requests wait in the queue).
//!
//! Instances belong to one version: a reloaded plugin is a new `Plugin` with an empty pool,
//! and the old version's idle instances go with it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::metrics::PluginMetrics;
use crate::runtime::engine::instance::Instance;

/// How many idle instances all plugins together may keep.
#[derive(Debug)]
pub struct IdleBudget {
    kept: AtomicUsize,
    max: usize,
}

impl IdleBudget {
    pub(crate) fn new(max: usize) -> Self {
        IdleBudget {
            kept: AtomicUsize::new(0),
            max,
        }
    }

    fn reserve(&self) -> bool {
        self.kept
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        self.kept.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Idle instances with the time each was put back, most recently used last.
pub struct InstancePool {
    idle: Mutex<VecDeque<(Instance, Instant)>>,
    max_idle: usize,
    budget: Arc<IdleBudget>,
    metrics: Arc<PluginMetrics>,
}

impl InstancePool {
    pub(crate) fn new(
        max_idle: usize,
        budget: Arc<IdleBudget>,
        metrics: Arc<PluginMetrics>,
    ) -> Self {
        InstancePool {
            idle: Mutex::new(VecDeque::new()),
            max_idle,
            budget,
            metrics,
        }
    }

    /// The most recently used idle instance (its memory is the likeliest to be in cache).
    pub(crate) fn take(&self) -> Option<Instance> {
        let (instance, _) = self.lock().pop_back()?;
        self.budget.release(1);
        self.metrics.idle_instances.fetch_sub(1, Ordering::Relaxed);
        Some(instance)
    }

    /// Keeps `instance` for a later call, or drops it when this plugin or all plugins keep
    /// as many as they may.
    pub(crate) fn put(&self, instance: Instance) {
        let mut idle = self.lock();
        if idle.len() >= self.max_idle || !self.budget.reserve() {
            drop(idle);
            drop(instance);
            return;
        }
        idle.push_back((instance, Instant::now()));
        self.metrics.idle_instances.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops the instances that went unused for `timeout` (the oldest are in front). They
    /// are dropped after the lock is released: unmapping an instance takes a while.
    pub(crate) fn trim(&self, now: Instant, timeout: Duration) -> usize {
        let mut stale = Vec::new();
        {
            let mut idle = self.lock();
            while idle
                .front()
                .is_some_and(|(_, since)| now.saturating_duration_since(*since) >= timeout)
            {
                stale.extend(idle.pop_front().map(|(instance, _)| instance));
            }
        }
        self.budget.release(stale.len());
        self.metrics
            .idle_instances
            .fetch_sub(stale.len() as i64, Ordering::Relaxed);
        stale.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instance, Instant)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for InstancePool {
    fn drop(&mut self) {
        let kept = self.lock().len();
        self.budget.release(kept);
        self.metrics
            .idle_instances
            .fetch_sub(kept as i64, Ordering::Relaxed);
    }
}
