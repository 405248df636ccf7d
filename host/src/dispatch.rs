//! From a complete request to its handler: find the plugin for the path, hand the request to
//! the pool, or answer at once when there is nothing to run (404) or no room to queue it (503).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::job::{ConnId, Job};
use crate::limits::RETRY_AFTER_SECS;
use crate::pool::{Busy, WorkerPool};
use crate::proto::request::RequestHead;
use crate::runtime::registry::Registry;

/// An answer written by the host itself, without a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Immediate {
    pub status: u16,
    pub message: String,
    pub retry_after: Option<u32>,
}

/// Routes requests to plugins.
#[derive(Debug)]
pub struct Dispatcher {
    registry: Arc<Registry>,
    pool: WorkerPool,
    next_request_id: u64,
}

impl Dispatcher {
    pub fn new(registry: Arc<Registry>, pool: WorkerPool) -> Self {
        Dispatcher {
            registry,
            pool,
            next_request_id: 1,
        }
    }

    /// Takes back every request no worker has started, and closes the queue.
    pub fn shut_down(&mut self) -> Vec<(ConnId, u64)> {
        let jobs = self.pool.take_queued();
        self.pool.close();
        jobs.into_iter().map(|job| (job.conn, job.seq)).collect()
    }

    /// Requests waiting for a worker.
    pub fn queued(&self) -> usize {
        self.pool.queued()
    }

    /// Queues the request for a worker, or says what to answer instead.
    pub fn dispatch(
        &mut self,
        conn: ConnId,
        seq: u64,
        head: RequestHead,
        body: Vec<u8>,
        remote: SocketAddr,
    ) -> Result<(), Immediate> {
        let Some(mount) = self.registry.route(&head.path) else {
            return Err(Immediate {
                status: 404,
                message: format!("no plugin is mounted at {}", head.path),
                retry_after: None,
            });
        };
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let job = Box::new(Job {
            conn,
            seq,
            request_id,
            plugin: mount.plugin,
            mount: mount.prefix,
            head,
            body,
            remote,
        });
        self.pool.submit(job).map_err(|Busy(job)| {
            tracing::warn!(plugin = %job.plugin.name, "worker queue full: answering 503");
            Immediate {
                status: 503,
                message: "the server is busy, try again shortly".to_owned(),
                retry_after: Some(RETRY_AFTER_SECS),
            }
        })
    }
}
