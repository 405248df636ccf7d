//! Putting the pipeline together: listener, runtime, plugins, pool, event loop.

pub use crate::reload::ValuesHandle;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};

use crate::config::ServeConfig;
use crate::dispatch::Dispatcher;
use crate::hub::Hub;
use crate::loader::Loads;
use crate::metrics::Metrics;
use crate::net::event_loop::{Ended, EventLoop, Shared, StopHandle};
use crate::net::shards;
use crate::pool::WorkerPool;
use crate::pool::reply::{Replies, reply_channel};
use crate::runtime::engine::registry::Registry;
use crate::runtime::engine::{Runtime, RuntimeConfig};
use crate::ws_router::WsRouter;

/// A server that is bound and has loaded its plugins, ready to [`run`](Server::run).
pub struct Server {
    pub local_addr: SocketAddr,
    pub registry: Arc<Registry>,
    pub runtime: Arc<Runtime>,
    /// Where the admin endpoints listen, when on.
    pub admin_addr: Option<SocketAddr>,
    loops: Vec<EventLoop>,
    stop: StopHandle,
    ready_file: Option<std::path::PathBuf>,
    _reloader: Option<crate::reload::Reloader>,
    _values: crate::reload::ValuesWatch,
    values_handle: crate::reload::ValuesHandle,
    scheduler: crate::scheduler::Scheduler,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds the listener, loads the plugins and starts the workers. Errors name what is wrong
    /// (a missing directory, an address in use) so the CLI can print them as they are.
    pub fn bind(config: &ServeConfig) -> anyhow::Result<Server> {
        raise_fd_limit();
        let dir = &config.plugins_dir;
        if dir.is_file() {
            bail!(
                "plugins directory {} is a file, not a directory (pass --plugins DIR)",
                dir.display()
            );
        }
        if !dir.is_dir() {
            bail!(
                "plugins directory {} does not exist (create it, or pass --plugins DIR)",
                dir.display()
            );
        }
        let std_listener =
            crate::net::io::listen(config.listen, config.reuse_port).map_err(|e| {
                let why = match e.kind() {
                    std::io::ErrorKind::AddrInUse => "the address is already in use".to_owned(),
                    std::io::ErrorKind::AddrNotAvailable => {
                        "the address is not available on this machine".to_owned()
                    }
                    std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                    _ => e.to_string(),
                };
                anyhow::anyhow!("cannot listen on {}: {why}", config.listen)
            })?;
        std_listener.set_nonblocking(true)?;
        let local_addr = std_listener.local_addr()?;
        let listener = mio::net::TcpListener::from_std(std_listener);

        if let Some(endpoint) = &config.otlp_endpoint {
            let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "ankh".into());
            crate::trace::install(endpoint.clone(), &service, config.trace_sample)
                .context("cannot start the trace exporter")?;
            tracing::info!(
                "exporting traces to {endpoint} as service {service}, sampling {} of new traces",
                config.trace_sample
            );
        }
        // Before anything listens: a store that cannot be opened (locked by another ankh,
        // corrupt, an uncreatable directory) stops the start with its one-line reason.
        let store = crate::kv::Store::open(&config.kv, &config.data_dir)?;
        let metrics = Arc::new(Metrics::default());
        metrics.attach_kv(store.stats());
        // Plugins' values: a secrets file others may read stops the start, naming it.
        let values = Arc::new(crate::runtime::engine::values::Sources::new(
            config.secrets.clone(),
            config.source.clone(),
            &config.values,
        )?);
        let runtime = Runtime::new(
            RuntimeConfig {
                limits: config.limits.clone(),
                pooling: config.pooling,
                cache_dir: config.cache_dir.clone(),
                store: store.clone(),
                wasi_p3: config.wasi_p3,
                values: values.clone(),
            },
            metrics.clone(),
        )
        .context("cannot set up the wasm runtime")?;
        let registry = Arc::new(Registry::new(config.allow_nested_routes));
        crate::runtime::engine::registry::start_trimming(
            Arc::downgrade(&registry),
            crate::limits::INSTANCE_TRIM_INTERVAL,
        )
        .context("cannot start the instance trimming thread")?;
        let loads = Loads::new(runtime.clone(), registry.clone());
        // Watching first, so that a change made while the plugins load is not missed.
        let reloader = if config.watch {
            Some(crate::reload::watch(loads.clone(), dir)?)
        } else {
            None
        };
        let (values_watch, values_handle) =
            crate::reload::watch_values(loads.clone(), values.clone(), config.watch)?;
        loads
            .load_dir(dir)
            .with_context(|| format!("cannot read plugins directory {}", dir.display()))?;
        if registry.snapshot().is_empty() {
            tracing::warn!(
                dir = %dir.display(),
                "no plugin is mounted: every request gets 404 until a NAME.wasm is added{}",
                if config.watch { "" } else { " (and --no-watch is on: none will be)" }
            );
        }

        // Each loop's poll and waker first: a loop's reply queue wakes it.
        let seats = shards::seats(config.io_threads)?;
        let (reply_txs, reply_rxs): (Vec<_>, Vec<_>) = seats
            .iter()
            .map(|seat| {
                let wake = seat.waker.clone();
                reply_channel(Arc::new(move || {
                    let _ = wake.wake();
                }))
            })
            .unzip();
        let replies = Replies::new(reply_txs);
        // With --pubsub, a node number from Redis first: every id carries it.
        let cluster = config
            .pubsub_url()
            .map(crate::cluster::Cluster::join)
            .transpose()?;
        let hub = Arc::new(match &cluster {
            Some(cluster) => Hub::new(cluster.node(), Some(cluster.roster())),
            None => Hub::default(),
        });
        if let Some(cluster) = &cluster {
            cluster.deliver_to(hub.clone(), Arc::new(replies.clone()));
        }
        let websockets = Arc::new(WsRouter::new(
            hub.clone(),
            Arc::new(replies.clone()),
            cluster.clone(),
        ));
        let pool = WorkerPool::new(
            config.workers,
            config.limits.queue_depth,
            config.limits.max_calls,
            replies.clone(),
            websockets,
            metrics.clone(),
        )
        .context("cannot start worker threads")?;
        let scheduler =
            crate::scheduler::Scheduler::new(registry.clone(), pool.clone(), &store, hub.node());
        let dispatcher = Dispatcher::new(registry.clone(), pool, hub.node());
        let depth = dispatcher.depth_probe();
        let (loops, stop) = shards::build(
            seats,
            reply_rxs,
            replies,
            listener,
            Box::new(dispatcher),
            &Shared {
                limits: config.limits.clone(),
                hub: hub.clone(),
                metrics: metrics.clone(),
            },
        )?;
        let admin_addr = match config.admin {
            Some(addr) => Some(crate::admin::start(
                addr,
                crate::admin::AdminState {
                    store,
                    cluster: cluster.clone(),
                    metrics: metrics.clone(),
                    hub,
                    registry: registry.clone(),
                    stop: stop.clone(),
                    queue_depth: Box::new(depth),
                    head_timeout: config.limits.head_timeout,
                },
            )?),
            None => None,
        };
        Ok(Server {
            local_addr,
            registry,
            runtime,
            admin_addr,
            loops,
            stop,
            ready_file: config.ready_file.clone(),
            _reloader: reloader,
            _values: values_watch,
            values_handle,
            scheduler,
        })
    }

    /// A handle that stops [`run`](Server::run) from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// What re-reads plugins' values (SIGHUP).
    pub fn values_handle(&self) -> ValuesHandle {
        self.values_handle.clone()
    }

    /// What runs the plugins' schedules (`ankh run` asks it for one run).
    pub fn scheduler(&self) -> crate::scheduler::Scheduler {
        self.scheduler.clone()
    }

    /// Serves on the calling thread until stopped or drained: the schedules start ticking,
    /// and the ready file is written, first.
    pub fn run(self) -> anyhow::Result<Ended> {
        self.scheduler
            .start()
            .context("cannot start the scheduler thread")?;
        if let Some(path) = &self.ready_file {
            write_ready_file(path, self.local_addr)
                .with_context(|| format!("cannot write ready file {}", path.display()))?;
        }
        let ended = shards::run(self.loops, &self.stop).context("an event loop failed");
        // The last requests' spans leave before the process does.
        crate::trace::flush();
        ended
    }
}

/// Writes `addr` to `path` atomically: a reader sees no file or the whole address.
pub fn write_ready_file(path: &std::path::Path, addr: SocketAddr) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{addr}\n"))?;
    std::fs::rename(&tmp, path)
}

/// Each connection is a file descriptor: lift the soft limit to the hard one, as servers
/// usually do, so the connection cap rather than a low default is what binds.
fn raise_fd_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "file descriptor limit"),
        Err(e) => tracing::warn!("cannot raise the file descriptor limit: {e}"),
    }
}
