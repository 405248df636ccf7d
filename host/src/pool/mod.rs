//! The worker pool: a fixed number of threads behind one bounded queue, and the calls the
//! event loops run themselves.
//!
//! Handlers are plain blocking code, but a handler that waits (a sleep, a socket, a key-value
//! commit) holds no thread: its call is suspended on its fiber and its thread runs others
//! (see `worker`), up to `max_calls` calls in flight in all. A call starts on the event loop
//! that read its request when a permit is free (see `inline`): most calls finish or wait
//! there without a thread hand-off, and a guest still computing at an epoch tick moves on to
//! the workers. Workers are still more
//! than the cores, so that CPU-bound handlers keep every core busy while others compute.
//! The queue is bounded: when it is full, [`WorkerPool::submit`] fails at once with [`Busy`]
//! and the client gets 503 + `Retry-After`, rather than the host queueing without bound.

mod call;
pub(crate) mod cpu;
pub mod exchange;
pub(crate) mod inline;
pub(crate) mod job;
pub mod reply;
mod tasks;
mod worker;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::pool::job::Job;
use std::sync::Arc;

use crate::ws_router::WsRouter;
use reply::Replies;

/// The queue is full.
#[derive(Debug)]
pub(crate) struct Busy(pub Box<Job>);

/// The queue that feeds the worker threads. Cloned into every event loop: one pool serves
/// them all, so its depth is one global bound. The threads run for the life of the process
/// (a draining server exits without waiting for a handler that blocks).
#[derive(Debug, Clone)]
pub(crate) struct WorkerPool {
    tx: Sender<Box<Job>>,
    /// Kept to take back jobs no worker has started, when the server drains.
    rx: Receiver<Box<Job>>,
    /// What an event loop needs to run calls itself (see [`inline`]).
    inline: Arc<inline::Parts>,
}

impl std::fmt::Debug for inline::Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts").finish_non_exhaustive()
    }
}

impl WorkerPool {
    /// Starts `workers` threads sharing a queue of `queue_depth` jobs. They send what comes
    /// of each job through `reply` (to the event loop of its connection); their plugins reach
    /// WebSockets through `link`.
    /// Calls in flight across the workers are bounded by `max_calls` (counted in
    /// `metrics.calls_in_flight`).
    pub(crate) fn new(
        workers: usize,
        queue_depth: usize,
        max_calls: usize,
        reply: Replies,
        link: Arc<WsRouter>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded::<Box<Job>>(queue_depth);
        let slots = Arc::new(worker::CallSlots::new(max_calls, metrics.clone()));
        let inline = Arc::new(inline::Parts {
            reply: reply.clone(),
            link: link.clone(),
            slots: slots.clone(),
            queue: tx.clone(),
            metrics,
        });
        for i in 0..workers {
            let rx = rx.clone();
            let (link, reply, slots) = (link.clone(), reply.clone(), slots.clone());
            std::thread::Builder::new()
                .name(format!("ankh-worker-{i}"))
                .spawn(move || worker::Worker::new(reply, link, slots).run(rx))?;
        }
        Ok(WorkerPool { tx, rx, inline })
    }

    /// Makes this thread, event loop `shard`, run calls itself (see [`inline`]).
    pub(crate) fn run_calls_here(&self, shard: usize, loops: usize) {
        reply::set_this_loop(shard);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let budget = (loops < cores).then_some(crate::limits::LOOP_GUEST_BUDGET);
        inline::install(self.inline.clone(), shard, budget);
    }

    /// Starts a job on this thread if it is an event loop that runs calls and a call permit
    /// is free; queues it otherwise, or gives it back if the queue is full.
    pub(crate) fn submit(&self, job: Box<Job>) -> Result<(), Busy> {
        match inline::try_start(job) {
            Ok(()) => Ok(()),
            Err(job) => self.submit_queued(job),
        }
    }

    /// Queues a job, or gives it back if the queue is full.
    pub(crate) fn submit_queued(&self, job: Box<Job>) -> Result<(), Busy> {
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => Err(Busy(job)),
        }
    }

    /// Jobs waiting for a worker.
    pub(crate) fn queued(&self) -> usize {
        self.rx.len()
    }

    /// A probe that reads the queue depth from any thread.
    pub(crate) fn depth_probe(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let rx = self.rx.clone();
        move || rx.len()
    }

    /// Takes every job no worker has started yet.
    #[allow(clippy::vec_box)] // as the queue holds them: the events among them go back in
    pub(crate) fn take_queued(&self) -> Vec<Box<Job>> {
        self.rx.try_iter().collect()
    }
}
