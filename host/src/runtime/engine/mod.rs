//! The wasmtime `Engine` every plugin is compiled with, its `Linker`, and the epoch ticker.
//!
//! All guest limits are set up here or in [`crate::runtime::engine::instance`]: the pooling allocator sized for
//! the calls in flight and the idle instances, the linear-memory cap, the wasm and fiber stack
//! sizes, and epoch interruption driven by one ticker thread per engine (never a thread per
//! request).

pub(crate) mod concurrent;
pub mod incoming;
pub mod instance;
pub(crate) mod instances;
pub mod packed;
pub mod plugin;
pub mod policy;
pub(crate) mod proxy;
pub mod registry;
pub mod schedules;
pub(crate) mod ticker;
pub mod values;
pub(crate) mod wasi;
pub(crate) mod world;

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

use anyhow::Context;

use crate::limits::{
    DECOMMIT_BATCH_SLOTS, EPOCH_TICK, FIBER_HOST_STACK_BYTES, GUEST_STACK_BYTES,
    INSTANCES_IDLE_TOTAL, INSTANCES_SPARE, Limits,
};
use crate::runtime::bindings;
use crate::runtime::sandbox::store::HostState;

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The server's limits, whole: every plugin's policy starts from them, and
    /// [`Limits::max_calls`] and [`Limits::guest_memory_bytes`] size the pooling allocator.
    pub limits: Limits,
    /// Use the pooling instance allocator (falls back to on-demand if it cannot be set up).
    pub pooling: bool,
    /// Where compiled plugins are cached, keyed by content and engine settings; `None` turns
    /// the cache off.
    pub cache_dir: Option<std::path::PathBuf>,
    /// The key-value store every plugin's namespace lives in.
    pub store: crate::kv::Store,
    /// Serve WASI 0.3 components (on a second engine, made when the first one loads).
    pub wasi_p3: bool,
    /// Where plugins' configuration values come from.
    pub values: Arc<values::Sources>,
}

impl RuntimeConfig {
    /// A runtime under `limits`, over `store`: pooling on, no compiled-code cache.
    pub fn new(limits: Limits, store: crate::kv::Store) -> RuntimeConfig {
        RuntimeConfig {
            limits,
            pooling: true,
            cache_dir: None,
            store,
            wasi_p3: true,
            values: Arc::new(values::Sources::none()),
        }
    }
}

/// The compilation and linking context shared by every plugin.
pub struct Runtime {
    pub engine: Engine,
    pub linker: Linker<HostState>,
    pub config: RuntimeConfig,
    /// True when the pooling allocator is in use.
    pub pooling: bool,
    /// The compiled-code cache, when on.
    pub cache: Option<Cache>,
    /// Counters for `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// How many idle instances all plugins together keep.
    pub idle: Arc<crate::runtime::engine::instances::IdleBudget>,
    /// The engine of WASI 0.3 components, made when the first one loads (or why it could
    /// not be).
    concurrent: std::sync::OnceLock<Result<concurrent::Concurrent, String>>,
    pub(crate) ticker: ticker::EpochTicker,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.config)
            .field("pooling", &self.pooling)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// The engine of WASI 0.3 components, made on first use.
    pub(crate) fn concurrent(&self) -> Result<&concurrent::Concurrent, &str> {
        self.concurrent
            .get_or_init(|| {
                concurrent::Concurrent::new(self.cache.clone()).map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// The imports and exports of the component at `path`, as the engine that would run it
    /// sees them (the second engine's for a WASI 0.3 component); `None` if it is no component
    /// either engine compiles.
    pub fn interfaces(&self, path: &std::path::Path) -> Option<(Vec<String>, Vec<String>)> {
        let list = |engine: &Engine| {
            let component = wasmtime::component::Component::from_file(engine, path).ok()?;
            let ty = component.component_type();
            let imports = ty
                .imports(engine)
                .map(|(name, _)| name.to_owned())
                .collect();
            let exports = ty
                .exports(engine)
                .map(|(name, _)| name.to_owned())
                .collect();
            Some((imports, exports))
        };
        list(&self.engine).or_else(|| {
            let concurrent = self.concurrent().ok()?;
            list(&concurrent.engine)
        })
    }

    /// The compiled-code cache's hits and misses so far.
    pub(crate) fn cache_counts(&self) -> (usize, usize) {
        self.cache
            .as_ref()
            .map_or((0, 0), |c| (c.cache_hits(), c.cache_misses()))
    }

    /// The engine and linker for `config`; plugins count into `metrics`.
    pub fn new(
        config: RuntimeConfig,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> anyhow::Result<Arc<Runtime>> {
        let cache = match &config.cache_dir {
            Some(dir) => {
                let mut cc = CacheConfig::new();
                cc.with_directory(dir);
                Some(Cache::new(cc).map_err(|e| {
                    anyhow::anyhow!("cannot use cache directory {}: {e}", dir.display())
                })?)
            }
            None => None,
        };
        let (engine, pooling) = if config.pooling {
            // Each memory slot reserves 4 GiB of address space (so that guest loads need no
            // bounds checks), and a process has 128 TiB: with many calls in flight, two memory
            // slots per instance do not fit, one and a quarter may.
            let first = Engine::new(&engine_config(
                &config,
                Some(MemorySlots::Two),
                cache.clone(),
            ));
            match first.or_else(|_| {
                Engine::new(&engine_config(
                    &config,
                    Some(MemorySlots::Fewer),
                    cache.clone(),
                ))
            }) {
                Ok(engine) => (engine, true),
                Err(e) => {
                    tracing::warn!("pooling allocator unavailable, allocating on demand: {e}");
                    (
                        Engine::new(&engine_config(&config, None, cache.clone()))?,
                        false,
                    )
                }
            }
        } else {
            (
                Engine::new(&engine_config(&config, None, cache.clone()))?,
                false,
            )
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        crate::runtime::sandbox::waits::add_clocks_to_linker(&mut linker)?;
        crate::runtime::sandbox::waits::add_to_linker(&mut linker)?;
        crate::runtime::host::io_error::add_to_linker(&mut linker)?;
        crate::runtime::host::head::add_to_linker(&mut linker)?;
        bindings::Plugin::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
        crate::runtime::host::v02::add_to_linker(&mut linker)?;
        crate::runtime::host::legacy::add_to_linker(&mut linker)?;
        crate::runtime::host::kv::add_to_linker(&mut linker)?;
        add_config_to_linker(&mut linker)?;
        let ticker = ticker::EpochTicker::start(engine.clone(), EPOCH_TICK)
            .context("cannot start the epoch ticker thread")?;
        Ok(Arc::new(Runtime {
            engine,
            linker,
            config,
            pooling,
            cache,
            metrics,
            idle: Arc::new(crate::runtime::engine::instances::IdleBudget::new(
                INSTANCES_IDLE_TOTAL,
            )),
            concurrent: std::sync::OnceLock::new(),
            ticker,
        }))
    }
}

/// Linear-memory slots of the pooling allocator, per instance slot.
#[derive(Debug, Clone, Copy)]
enum MemorySlots {
    /// Two: room for components with more than one memory at every instance.
    Two,
    /// One and a quarter: components have one memory as a rule.
    Fewer,
}

/// What both engines share: components, epoch interruption, the stack sizes, the cache.
fn base_config(cache: Option<Cache>) -> Config {
    let mut c = Config::new();
    c.cache(cache);
    c.wasm_component_model(true);
    c.epoch_interruption(true);
    // Calls run on fibers (`call_async`): a guest that waits suspends its call and frees
    // the thread.
    c.max_wasm_stack(GUEST_STACK_BYTES);
    c.async_stack_size(GUEST_STACK_BYTES + FIBER_HOST_STACK_BYTES);
    c
}

/// The engine's settings; `pooling` sizes the pooling allocator (`None`: allocate on demand).
fn engine_config(
    config: &RuntimeConfig,
    pooling: Option<MemorySlots>,
    cache: Option<Cache>,
) -> Config {
    let mut c = base_config(cache);
    // Off here: it makes every component call dearer, and only WASI 0.3 components need it
    // (they have their own engine: see `concurrent`).
    c.concurrency_support(false);
    if let Some(slots) = pooling {
        // Every call in flight holds an instance (and a fiber stack), idle instances wait for
        // the next calls, and plugins being loaded are instantiated once; a component holds
        // a few core instances and usually one memory.
        let instances = u32::try_from(
            config
                .limits
                .max_calls
                .saturating_add(INSTANCES_IDLE_TOTAL + INSTANCES_SPARE),
        )
        .unwrap_or(u32::MAX / 64);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(4))
            .total_memories(match slots {
                MemorySlots::Two => instances.saturating_mul(2),
                MemorySlots::Fewer => instances.saturating_add(instances / 4),
            })
            .total_tables(instances.saturating_mul(4))
            .total_stacks(instances)
            .max_memory_size(config.limits.guest_memory_bytes)
            .decommit_batch_size(DECOMMIT_BATCH_SLOTS);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    c
}

/// `wasi:config/store`: each store reads its own plugin's values (see [`values`]).
pub(crate) fn add_config_to_linker(
    linker: &mut Linker<crate::runtime::sandbox::store::HostState>,
) -> wasmtime::Result<()> {
    wasmtime_wasi_config::add_to_linker(linker, |s| {
        wasmtime_wasi_config::WasiConfig::from(&*s.config)
    })
}
