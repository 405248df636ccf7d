//! The worker pool: a fixed number of threads behind one bounded queue.
//!
//! Handlers are plain blocking code, so the pool is sized for blocking (many more threads than
//! cores). The queue is bounded: when it is full, [`WorkerPool::submit`] fails at once with
//! [`Busy`] and the client gets 503 + `Retry-After`, rather than the host queueing without
//! bound.

pub mod job;
pub mod reply;
mod worker;

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::pool::job::Job;
use std::sync::Arc;

use crate::hub::Hub;
use crate::runtime::state::WsLink;
use reply::ReplyTx;

/// The queue is full.
#[derive(Debug)]
pub struct Busy(pub Box<Job>);

/// Worker threads and the queue that feeds them.
#[derive(Debug)]
pub struct WorkerPool {
    tx: Option<Sender<Box<Job>>>,
    /// Kept to take back jobs no worker has started, when the server drains.
    rx: Receiver<Box<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts `workers` threads sharing a queue of `queue_depth` jobs. They send what comes
    /// of each job through `reply`; their plugins reach WebSockets through `hub` and `reply`.
    pub fn new(
        workers: usize,
        queue_depth: usize,
        reply: ReplyTx,
        hub: Arc<Hub>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded::<Box<Job>>(queue_depth);
        let link = WsLink {
            hub,
            out: Arc::new(reply.clone()),
        };
        let mut threads = Vec::with_capacity(workers);
        for i in 0..workers {
            let rx = rx.clone();
            let (link, reply) = (link.clone(), reply.clone());
            let thread = std::thread::Builder::new()
                .name(format!("ankh-worker-{i}"))
                .spawn(move || worker::Worker::new(reply, link).run(rx))?;
            threads.push(thread);
        }
        Ok(WorkerPool {
            tx: Some(tx),
            rx,
            threads,
        })
    }

    /// Queues a job, or gives it back if the queue is full.
    pub fn submit(&self, job: Box<Job>) -> Result<(), Busy> {
        let Some(tx) = &self.tx else {
            return Err(Busy(job));
        };
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => Err(Busy(job)),
        }
    }

    /// Jobs waiting for a worker.
    pub fn queued(&self) -> usize {
        self.rx.len()
    }

    /// A probe that reads the queue depth from any thread.
    pub fn depth_probe(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let rx = self.rx.clone();
        move || rx.len()
    }

    /// Takes every job no worker has started yet.
    pub fn take_queued(&self) -> Vec<Box<Job>> {
        self.rx.try_iter().collect()
    }

    /// Closes the queue: each worker exits once it finishes its current job. Does not wait
    /// for them, since a handler may be blocked for a long time; see [`WorkerPool::join`].
    pub fn close(&mut self) {
        self.tx = None;
    }

    /// Closes the queue and waits for every worker to exit.
    pub fn join(mut self) {
        self.close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
