//! From a complete request to its handler: find the plugin for the path, hand the request to
//! the pool, or answer at once when there is nothing to run (404) or no room to queue it (503).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::limits::RETRY_AFTER_SECS;
use crate::message::{ConnId, WsEvent, WsId};
use crate::net::http::{Dispatch, Route, Router};
use crate::net::ws_conn::Events;
use crate::net::{Handler, Immediate, Undelivered};
use crate::pool::job::{EventJob, Job, RequestJob};
use crate::pool::{Busy, WorkerPool};
use crate::runtime::engine::incoming::Incoming;
use crate::runtime::engine::registry::Registry;

/// Routes requests to plugins. Each event loop has a clone; they share the registry, the
/// pool and the request ids.
#[derive(Debug, Clone)]
pub(crate) struct Dispatcher {
    registry: Arc<Registry>,
    pool: WorkerPool,
    /// The next request id, unique across every loop.
    request_ids: Arc<AtomicU64>,
}

impl Dispatcher {
    /// A dispatcher whose request ids carry `node` (0 outside a cluster) in their top bits,
    /// as connection ids do: unique across the processes of a cluster.
    pub(crate) fn new(registry: Arc<Registry>, pool: WorkerPool, node: u32) -> Self {
        let first = (u64::from(node) << crate::message::LOCAL_ID_BITS) | 1;
        Dispatcher {
            registry,
            pool,
            request_ids: Arc::new(AtomicU64::new(first)),
        }
    }

    /// Takes back every request no worker has started (the server is draining), whichever
    /// loop queued it. WebSocket events stay queued: their connections are closing and the
    /// plugin still hears of it.
    pub(crate) fn take_unstarted_requests(&mut self) -> Vec<(ConnId, u64)> {
        let mut unstarted = Vec::new();
        for job in self.pool.take_queued() {
            match *job {
                Job::Request(r) => unstarted.push((r.conn, r.seq)),
                // Not run: its scheduler hears so when it is dropped here.
                Job::Scheduled(_) => {}
                job @ (Job::Event(_) | Job::Resume(_)) => {
                    if let Err(Busy(job)) = self.pool.submit_queued(Box::new(job)) {
                        tracing::warn!(?job, "event dropped while draining");
                    }
                }
            }
        }
        unstarted
    }

    /// Hands an event of WebSocket `ws` to the current version of plugin `name`. When it
    /// cannot: `Busy` gives the event back (the queue is full), `Gone` drops it (the plugin
    /// was unmounted).
    pub(crate) fn dispatch_event(
        &mut self,
        conn: ConnId,
        ws: WsId,
        name: &str,
        event: WsEvent,
    ) -> Result<(), Undelivered> {
        let Some(plugin) = self.registry.by_name(name) else {
            warn_limited!(
                plugin = name,
                ws,
                "WebSocket event for a plugin that is no longer mounted"
            );
            return Err(Undelivered::Gone);
        };
        // A plugin at its share of the call slots: the event waits (the connection tries
        // again at its next timer), as it does when the queue is full.
        let Some(slot) = plugin.try_enter() else {
            return Err(Undelivered::Busy(event));
        };
        let job = Box::new(Job::Event(EventJob {
            conn,
            ws,
            plugin,
            event,
            slot,
        }));
        self.pool.submit(job).map_err(|Busy(job)| match *job {
            Job::Event(e) => Undelivered::Busy(e.event),
            Job::Request(_) | Job::Scheduled(_) | Job::Resume(_) => {
                unreachable!("an event job was submitted")
            }
        })
    }

    /// Makes this thread, event loop `shard` of `loops`, run calls itself (see
    /// [`crate::pool::inline`]).
    pub(crate) fn run_calls_here(&self, shard: usize, loops: usize) {
        self.pool.run_calls_here(shard, loops);
    }

    /// A probe that reads the queue depth from any thread.
    pub(crate) fn depth_probe(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        self.pool.depth_probe()
    }

    /// Requests waiting for a worker.
    pub(crate) fn queued(&self) -> usize {
        self.pool.queued()
    }

    /// Queues `request` of connection `conn` for its mount (found by the [`Router`]
    /// implementation below), or says what to answer instead. Its `cancel` is fired by the
    /// connection if its client leaves.
    pub(crate) fn dispatch(&mut self, conn: ConnId, request: Dispatch) -> Result<(), Immediate> {
        let Dispatch {
            seq,
            head,
            mount,
            body,
            inflow,
            peer: remote,
            cancel,
        } = request;
        let Some(mount) = mount else {
            return Err(Immediate {
                status: 404,
                message: format!("no plugin is mounted at {}", head.path),
                retry_after: None,
            });
        };
        let name_for_log = mount.plugin.name.clone();
        if let Some(seconds) = mount.plugin.metrics.cpu_throttle() {
            return Err(Immediate {
                status: 503,
                message: format!(
                    "plugin `{}` used its CPU time for now (limits.cpu_ms_per_minute)",
                    mount.plugin.name
                ),
                retry_after: Some(seconds),
            });
        }
        let Some(slot) = mount.plugin.try_enter() else {
            return Err(Immediate {
                status: 503,
                message: format!(
                    "plugin `{}` is handling as many calls as it may (limits.max_concurrency)",
                    mount.plugin.name
                ),
                retry_after: Some(RETRY_AFTER_SECS),
            });
        };
        let request_id = self.request_ids.fetch_add(1, Ordering::Relaxed);
        let trace = crate::trace::RequestTrace::for_headers(&head.headers);
        let job = Box::new(Job::Request(RequestJob {
            conn,
            seq,
            plugin: mount.plugin,
            request: Incoming {
                id: request_id,
                head,
                mount: mount.prefix,
                body,
                inflow,
                remote,
                trace,
            },
            received: std::time::Instant::now(),
            slot: Some(slot),
            cancel,
        }));
        self.pool.submit(job).map_err(|Busy(_)| {
            warn_limited!(plugin = %name_for_log, "worker queue full: answering 503");
            Immediate {
                status: 503,
                message: "the server is busy, try again shortly".to_owned(),
                retry_after: Some(RETRY_AFTER_SECS),
            }
        })
    }
}

/// Where a path goes: the plugin mounted there, and its body limit (its policy's, which is at
/// most the server's).
impl Router for Dispatcher {
    fn route(&self, path: &str) -> Route {
        let mount = self.registry.route(path);
        let max_body = mount
            .as_ref()
            .map(|m| m.plugin.policy.limits.max_body_bytes);
        let streams_body = mount.as_ref().is_some_and(|m| m.plugin.is_proxy());
        Route {
            mount,
            max_body,
            streams_body,
        }
    }
}

/// A WebSocket's events go to the current version of its plugin.
impl Events for Dispatcher {
    fn event(
        &mut self,
        conn: ConnId,
        ws: WsId,
        plugin: &str,
        event: WsEvent,
    ) -> Result<(), Undelivered> {
        self.dispatch_event(conn, ws, plugin, event)
    }
}

/// What the event loops hand on goes here.
impl Handler for Dispatcher {
    fn dispatch(&mut self, conn: ConnId, request: Dispatch) -> Result<(), Immediate> {
        Dispatcher::dispatch(self, conn, request)
    }

    fn take_unstarted_requests(&mut self) -> Vec<(ConnId, u64)> {
        Dispatcher::take_unstarted_requests(self)
    }

    fn run_calls_here(&self, shard: usize, loops: usize) {
        Dispatcher::run_calls_here(self, shard, loops);
    }

    fn queued(&self) -> usize {
        Dispatcher::queued(self)
    }

    fn another(&self) -> Box<dyn Handler> {
        Box::new(self.clone())
    }
}
