//! A plugin: a compiled component, checked against the `plugin` world and pre-instantiated,
//! ready for any worker to instantiate cheaply. Compiling happens once, at load, never on the
//! request path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::Component;

use crate::kv::Namespace;
use crate::runtime::engine::Runtime;
use crate::runtime::engine::concurrent::{self, P3_HANDLER};
use crate::runtime::engine::policy::Policy;
use crate::runtime::engine::world::{Exports, Pre};
use crate::runtime::host::stdio::LogTags;
use crate::runtime::host::websocket::WebSockets;
use crate::runtime::sandbox::store::HostState;

/// A loaded plugin. Immutable: a new version of the file is a new `Plugin`.
pub struct Plugin {
    /// The file stem: `hello` for `hello.wasm`.
    pub name: Arc<str>,
    pub path: PathBuf,
    pub(crate) pre: Pre,
    /// What this plugin may do and use.
    pub policy: Policy,
    /// Every bound its instances and calls run under, from the policy.
    pub limits: Arc<crate::runtime::sandbox::guest_limits::GuestLimits>,
    /// This plugin's counters (shared by its versions).
    pub metrics: Arc<crate::metrics::PluginMetrics>,
    /// Calls of this version in flight now (for `limits.max_concurrency`).
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// This version's idle instances, for the next calls of any worker.
    pub instances: crate::runtime::engine::instances::InstancePool,
    /// What its stores are made of.
    kit: Arc<StoreKit>,
    /// A WASI 0.3 component's instances, and the runtime their loops run on.
    pub(crate) service: Option<(concurrent::Service, tokio::runtime::Handle)>,
    /// How long compiling and checking took.
    pub load_time: Duration,
    /// Whether the compiled code came from the disk cache: `None` when another compile ran at
    /// the same time, so that the cache's counters cannot tell.
    pub cached: Option<bool>,
}

/// A thread pool for one plugin's compile. wasmtime compiles a component's functions in
/// parallel on the current rayon pool; on the global one, a small plugin's few functions
/// would queue behind the thousands of a large one compiling at the same time (an 18 MB
/// Python component held a 100 KB plugin back 12 s). A pool per load lets the OS share the
/// cores among the loads instead. Its threads end with the compile.
fn compile_pool(name: &str) -> Option<rayon::ThreadPool> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let tag: String = name.chars().take(8).collect();
    rayon::ThreadPoolBuilder::new()
        .num_threads(cores)
        .thread_name(move |i| format!("compile-{tag}-{i}"))
        .build()
        .ok()
}

/// Whether a compile was served by the cache, from the cache's (hits, misses) before and
/// after it. Compiles run side by side (a slow one must not hold back the others), so a
/// change in both counters is someone else's too, and cannot be told apart.
fn cache_use(before: (usize, usize), after: (usize, usize)) -> Option<bool> {
    match (after.0 > before.0, after.1 > before.1) {
        (true, false) => Some(true),
        (false, _) => Some(false),
        (true, true) => None,
    }
}

/// A WASI 0.3 component on a server that does not serve them.
fn p3_refused(path: &Path, why: &str) -> LoadError {
    LoadError::World {
        path: path.to_owned(),
        reason: format!(
            "it exports {P3_HANDLER}.x (WASI 0.3), which this server does not serve: {why}"
        ),
    }
}

/// What a plugin's stores are made of: its engine, its log budget, its policy's grants, its
/// limits and its namespaces.
struct StoreKit {
    engine: wasmtime::Engine,
    /// Its engine's epoch ticker, told when a guest runs.
    ticks: Arc<crate::runtime::engine::ticker::Ticks>,
    /// Whether it is a WASI 0.3 component (whose stores have their own epoch callback).
    p3: bool,
    name: Arc<str>,
    /// Its lines in the host's log, bounded across its instances.
    log_budget: Arc<crate::runtime::host::stdio::LogBudget>,
    policy: Policy,
    limits: Arc<crate::runtime::sandbox::guest_limits::GuestLimits>,
    kv: Namespace,
    metrics: Arc<crate::metrics::PluginMetrics>,
    outbound: Arc<crate::runtime::host::outbound::Outbound>,
    /// How many writes a wasi:http body stream may buffer.
    body_buffer_chunks: usize,
    /// Its configuration values (`wasi:config/store`).
    values: Arc<wasmtime_wasi_config::WasiConfigVariables>,
}

impl StoreKit {
    /// A fresh store, with its limits armed.
    fn store(&self, ws: Option<Arc<dyn WebSockets>>) -> Store<HostState> {
        let tags = LogTags::new(self.name.clone(), self.log_budget.clone());
        let wasi = crate::runtime::engine::wasi::context(&self.policy, &self.limits, &tags);
        let mut state = HostState::new(
            wasi,
            tags.clone(),
            self.kv.clone(),
            self.limits.clone(),
            self.metrics.clone(),
            ws,
            crate::runtime::host::outbound::HttpHooks {
                outbound: self.outbound.clone(),
                body_buffer_chunks: self.body_buffer_chunks,
                tags,
            },
        );
        state.config = self.values.clone();
        state.budget.ticks = Some(self.ticks.clone());
        let mut store = Store::new(&self.engine, state);
        if self.p3 {
            concurrent::configure_store(&mut store);
        } else {
            crate::runtime::sandbox::guest_limits::configure_store(&mut store);
        }
        store
    }
}

/// Whether `needle` occurs in `bytes` (an export name in a component's binary).
fn mentions(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The identity of a plugin version: its code and its policy file.
pub(crate) fn version_digest(wasm: &Path, bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    std::fs::read(wasm.with_extension("toml")).ok().hash(&mut h);
    h.finish()
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Why a file could not become a plugin.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a WebAssembly file")]
    NotWasm { path: PathBuf },
    #[error(
        "{path} is a core WebAssembly module, not a component: build it for wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule { path: PathBuf },
    #[error("{path} does not compile: {reason}")]
    Compile { path: PathBuf, reason: String },
    #[error(
        "{path} does not match the ankh:plugin@0.3.0 world (nor 0.2.0's or 0.1.0's, nor wasi:http/proxy@0.2): {reason}"
    )]
    World { path: PathBuf, reason: String },
    #[error("{path} fails to instantiate: {reason}")]
    Instantiate { path: PathBuf, reason: String },
    #[error("{0}")]
    Policy(String),
}

/// Holds one of a plugin's `limits.max_concurrency` call slots until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Plugin {
    /// Compiles `path`, links it against the host's imports, checks that it exports the
    /// `plugin` world, and instantiates it once to prove that it starts.
    pub fn load(runtime: &Runtime, name: &str, path: &Path) -> Result<Plugin, LoadError> {
        let mut plugin = Plugin::compile(runtime, name, path)?;
        plugin.start()?;
        Ok(plugin)
    }

    /// Reads the policy, compiles `path` and links it: host work, bounded by the file's size.
    /// Compilations run side by side, one thread per plugin name: a plugin that takes a minute
    /// to compile holds back no other (a cached one loads in milliseconds beside it).
    pub(crate) fn compile(runtime: &Runtime, name: &str, path: &Path) -> Result<Plugin, LoadError> {
        let started = Instant::now();
        let server = &runtime.config.limits;
        let policy =
            Policy::for_plugin(path, name, server).map_err(|e| LoadError::Policy(e.message))?;
        let values = runtime
            .config
            .values
            .resolve(name, &policy.config)
            .map_err(|why| LoadError::Policy(format!("plugin {name}: {why}")))?;
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
            path: path.to_owned(),
            source,
        })?;
        // The preamble: magic, then a version and a layer; layer 1 is a component.
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', _, _, 1, 0]) => {}
            Some([0, b'a', b's', b'm', _, _, 0, 0]) => {
                return Err(LoadError::CoreModule {
                    path: path.to_owned(),
                });
            }
            _ => {
                return Err(LoadError::NotWasm {
                    path: path.to_owned(),
                });
            }
        }
        // A WASI 0.3 component goes to the engine with concurrency support; everything else
        // to the first one. The export's name is in the binary, so this costs no compile.
        let p3 = mentions(&bytes, P3_HANDLER);
        let (engine, linker, ticks) = if p3 {
            if !runtime.config.wasi_p3 {
                return Err(p3_refused(
                    path,
                    "WASI 0.3 support is off (`wasi_p3 = false` in the config file, or --no-wasi-p3)",
                ));
            }
            let concurrent = runtime.concurrent().map_err(|why| p3_refused(path, why))?;
            (
                &concurrent.engine,
                &concurrent.linker,
                concurrent.ticker.ticks(),
            )
        } else {
            (&runtime.engine, &runtime.linker, runtime.ticker.ticks())
        };
        let (component, cached) = {
            let before = runtime.cache_counts();
            let compile = || Component::new(engine, &bytes);
            let component = match compile_pool(name) {
                Some(pool) => pool.install(compile),
                // No threads to be had: the global pool, as wasmtime would use.
                None => compile(),
            };
            let component = component.map_err(|e| LoadError::Compile {
                path: path.to_owned(),
                reason: format!("{e:#}"),
            })?;
            (component, cache_use(before, runtime.cache_counts()))
        };
        let world_error = |e: wasmtime::Error| LoadError::World {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        };
        let pre = match concurrent::p3_export(&component, engine) {
            Some(version) => {
                // A later 0.3.x links where the component model's version matching allows
                // it; where it does not, the refusal names both versions.
                let p3_error = |e: wasmtime::Error| LoadError::World {
                    path: path.to_owned(),
                    reason: format!(
                        "it exports wasi:http/handler@{version} (WASI 0.3), and this host serves wasi:http@{}: {e:#}",
                        concurrent::P3_HOST_VERSION
                    ),
                };
                let instance_pre = linker.instantiate_pre(&component).map_err(p3_error)?;
                let pre = wasmtime_wasi_http::p3::bindings::ServicePre::new(instance_pre)
                    .map_err(p3_error)?;
                Pre::Service(pre, version)
            }
            None => Pre::new(linker.instantiate_pre(&component).map_err(world_error)?)
                .map_err(world_error)?,
        };
        if !policy.schedules.is_empty() && !pre.runs_jobs() {
            return Err(LoadError::World {
                path: path.to_owned(),
                reason: format!(
                    "its policy declares schedules ({}) and it does not export `{}` (the SDK's `export_plugin!(router, jobs = ...)` does)",
                    policy
                        .schedules
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    crate::runtime::engine::world::SCHEDULED
                ),
            });
        }
        // wasmtime serve's model: a fresh instance per request, unless the policy asks for
        // reuse (a proxy component need not expect its export to be called twice).
        let mut policy = policy;
        if pre.is_proxy() && !policy.instances_mode_given {
            policy.fresh_instances = true;
        }
        let name: Arc<str> = Arc::from(name);
        let limits = Arc::new(
            crate::runtime::sandbox::guest_limits::GuestLimits::for_plugin(
                &policy.limits,
                policy.precise_clocks,
            ),
        );
        let metrics = runtime.metrics.plugin(&name);
        metrics.cpu.set_cap(policy.cpu_per_minute);
        for schedule in &policy.schedules {
            metrics.schedule_declared(&schedule.name);
        }
        let outbound = Arc::new(crate::runtime::host::outbound::Outbound::new(
            name.clone(),
            policy.http.clone(),
            crate::runtime::host::outbound::OutboundConfig::from_limits(&policy.limits),
            metrics.clone(),
        ));
        // What a guest may write into a body that nobody reads yet (its response before
        // `set`, its request before sending it), and what the host holds of a streamed body
        // ahead of its reader: HTTP_BODY_AHEAD_BYTES.
        let body_buffer_chunks =
            crate::limits::HTTP_BODY_AHEAD_BYTES / crate::limits::HTTP_BODY_WRITE_BYTES;
        let kv = runtime.config.store.namespace(&name, limits.kv);
        let kit = Arc::new(StoreKit {
            engine: engine.clone(),
            ticks,
            p3: matches!(pre, Pre::Service(..)),
            name: name.clone(),
            log_budget: crate::runtime::host::stdio::LogBudget::new(
                metrics.clone(),
                values.secrets.clone(),
            ),
            policy: policy.clone(),
            limits: limits.clone(),
            kv: kv.clone(),
            metrics: metrics.clone(),
            outbound: outbound.clone(),
            body_buffer_chunks,
            values: values.vars.clone(),
        });
        let service = match &pre {
            Pre::Service(service_pre, _) => {
                let concurrent = runtime.concurrent().map_err(|why| p3_refused(path, why))?;
                let store_kit = kit.clone();
                let instances = concurrent::Instances {
                    pre: service_pre.clone(),
                    make_store: Box::new(move || store_kit.store(None)),
                    reuse: if policy.fresh_instances {
                        1
                    } else {
                        policy
                            .recycle_after
                            .map_or(crate::limits::P3_REUSE_REQUESTS, |n| {
                                usize::try_from(n).unwrap_or(usize::MAX)
                            })
                    },
                    concurrent: policy.concurrent_requests,
                    handler_timeout: limits.handler_timeout,
                    stream_timeout: policy.limits.stream_timeout,
                    metrics: metrics.clone(),
                    plugin: name.clone(),
                    retired: Arc::default(),
                    warming: Arc::default(),
                };
                Some((
                    concurrent::Service::new(instances),
                    concurrent.tokio.handle().clone(),
                ))
            }
            _ => None,
        };
        Ok(Plugin {
            kit,
            service,
            instances: crate::runtime::engine::instances::InstancePool::new(
                policy.max_idle_instances,
                runtime.idle.clone(),
                metrics.clone(),
            ),
            metrics,
            name,
            path: path.to_owned(),
            pre,
            limits,
            policy,
            in_flight: Arc::default(),
            load_time: started.elapsed(),
            cached,
        })
    }

    /// Instantiates the plugin once, to prove that it starts: a start function that traps,
    /// sleeps past the handler timeout or spins past the CPU deadline, or a memory larger
    /// than the cap, shows up here rather than on the first request. Runs guest code, so it
    /// runs under a call's limits.
    pub(crate) fn start(&mut self) -> Result<(), LoadError> {
        let started = Instant::now();
        let instantiate = self.new_store_and_instantiate(None);
        let result = match &self.service {
            // A 0.3 component's instances run where its requests will run them.
            Some((_, tokio)) => tokio.block_on(instantiate).map(drop),
            None => crate::runtime::sandbox::exec::block_on(instantiate).map(drop),
        };
        result.map_err(|failure| LoadError::Instantiate {
            path: self.path.clone(),
            reason: failure.error.to_string(),
        })?;
        self.load_time += started.elapsed();
        Ok(())
    }

    /// The world the component targets (`ankh:plugin@0.3.0` or `@0.2.0`, with how its requests are
    /// passed, `ankh:plugin@0.1.0` or `wasi:http/proxy@0.2`).
    pub fn world(&self) -> std::borrow::Cow<'static, str> {
        self.pre.world()
    }

    /// `text` (something the guest said: a job's error) with the plugin's secrets masked,
    /// as its log lines have them.
    pub(crate) fn mask<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        self.kit.log_budget.mask(text)
    }

    /// Whether it exports `scheduled`, so that its schedules can run.
    pub fn runs_jobs(&self) -> bool {
        self.pre.runs_jobs()
    }

    /// Whether it is a WASI 0.3 component, whose instances serve requests side by side.
    pub fn is_p3(&self) -> bool {
        self.service.is_some()
    }

    /// Whether it is a `wasi:http` component, 0.2 or 0.3 (which reads its request body as it
    /// arrives).
    pub fn is_proxy(&self) -> bool {
        self.pre.is_proxy() || self.service.is_some()
    }

    /// Takes one of the plugin's call slots (`limits.max_concurrency`: its share of the
    /// server's), for a request or a WebSocket event; `None` when all are in use.
    pub(crate) fn try_enter(&self) -> Option<InFlight> {
        let now = self
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let guard = InFlight(self.in_flight.clone());
        (now < self.policy.limits.max_concurrency).then_some(guard)
    }

    /// A fresh store for this plugin, with its limits armed.
    pub(crate) fn new_store(&self, ws: Option<Arc<dyn WebSockets>>) -> Store<HostState> {
        self.kit.store(ws)
    }

    /// A store with a fresh instance of this plugin. Instantiating runs the guest's start
    /// code, so it gets a call's limits: the CPU deadline and the handler timeout.
    pub(crate) async fn new_store_and_instantiate(
        &self,
        ws: Option<Arc<dyn WebSockets>>,
    ) -> Result<(Store<HostState>, Exports), crate::runtime::sandbox::failure::Failure> {
        let mut store = self.new_store(ws);
        store.set_epoch_deadline(1);
        store.data_mut().budget.reset();
        store.data_mut().watch.arm(None);
        match self.pre.instantiate(&mut store).await {
            Ok(bindings) => Ok((store, bindings)),
            Err(e) => Err(crate::runtime::sandbox::failure::classify(store.data(), e)),
        }
    }
}
