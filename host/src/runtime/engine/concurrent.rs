//! WASI 0.3 components (`wasi:http/handler@0.3`): their own engine, and instances that serve
//! many requests, several at once, as `wasmtime serve` and Spin run them.
//!
//! **A second engine.** 0.3's async ABI needs wasmtime's concurrency support, which makes every
//! component call dearer. The engine of ankh's own world and of 0.2 components keeps it off
//! (see [`super::engine_config`]); this one has it on, and is made the first time a 0.3
//! component loads, so a server that never serves one never pays for it. Its instances are
//! allocated on demand rather than from a pool: each serves up to
//! [`Policy::recycle_after`](crate::runtime::engine::policy::Policy) requests, so few are made.
//!
//! **Where they run.** A 0.3 instance runs its own event loop (wasmtime's `run_concurrent`)
//! for as long as it lives, serving every request it accepts; wasmtime-wasi-http's
//! [`ProxyHandler`] keeps these instances, hands each request to one that accepts it, makes a
//! new one when none does, and retires those that trapped, expired, or served their count.
//! The instances' loops run on a runtime of their own, with one thread per core: ankh's
//! workers run calls that each hold one instance, and an instance here outlives its calls.
//! A request still goes through ankh's call path (its permit, the plugin's concurrency slots,
//! the access log, the response writer with its gzip, HEAD and streaming rules), which waits
//! for the instance's answer and then streams its body.
//!
//! **A cold start makes few instances, not one per request.** [`ProxyHandler`] makes a new
//! instance for every request that finds none accepting, so a burst on a plugin with no
//! instance (at its first request, or after its instances went idle) would make one per
//! request while the first is still being made. [`Warming`] holds such requests back, as many
//! as the instances being made will take at once, until one of them accepts. It is not exact:
//! an instance takes no request while its guest computes (wasmtime's rule, which spreads
//! CPU-bound requests over instances), so the requests let through together may still start
//! a few more.
//!
//! **CPU time.** An instance's guest runs inside wasmtime's event loop, on a task that
//! [`ProxyHandler`] spawns on this engine's threads, so the poll-by-poll measure of ankh's own
//! calls cannot wrap it. Each of these threads instead keeps the reading of its CPU clock at
//! the end of its last turn (see [`turn_ends`]): when a turn of an instance's task ends (the
//! instance's expiry is asked at the end of every poll that leaves work pending, and its
//! state is dropped when it ends) or a request's hand-over task yields, the plugin is charged
//! what the thread used since. One reading per turn, and no hook on the guest's calls: what
//! runs between two turns on a thread (the runtime's I/O driver, an outbound connection's
//! task) is small, and goes to the turn that ends next there.
//!
//! **Bounds.** Each instance's memory is capped by its store's limiter, as every instance's
//! is; a request that gives no response within the handler timeout gets a 504 and the instance
//! accepts no more; an instance that computes for longer than the CPU deadline without a new
//! request starting is interrupted (a trap: every request it still serves gets a 5xx); an
//! idle instance goes after [`IDLE_INSTANCE`], or at once when its plugin version was
//! replaced.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use wasmtime::component::{Component, GuestTaskId, Linker};
use wasmtime::{Config, Engine, Store, StoreContextMut};
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::handler::{
    self, HandlerState, ProxyHandler, ShouldAccept, WorkerExpiration, WorkerStatus,
};
use wasmtime_wasi_http::p3::bindings::ServicePre;

use crate::runtime::sandbox::store::HostState;

thread_local! {
    /// This thread's CPU clock when its last turn ended (see [`turn_ends`]).
    static TURN_ENDED: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
}

/// A turn of work for `metrics`' plugin ends on a thread of the 0.3 runtime: the plugin is
/// charged the thread's CPU time since the previous turn ended there (or the thread started).
/// A thread's CPU clock stands still while it waits, so nothing is charged for waiting.
pub(crate) fn turn_ends(metrics: &crate::metrics::PluginMetrics) {
    let Ok(now) = cpu_time::ThreadTime::try_now() else {
        return;
    };
    let now = now.as_duration();
    if let Some(before) = TURN_ENDED.replace(Some(now)) {
        metrics.cpu.charge(now.saturating_sub(before));
    }
}

/// A thread of the 0.3 runtime starts: its first turn is charged from here.
fn thread_starts() {
    TURN_ENDED.set(
        cpu_time::ThreadTime::try_now()
            .ok()
            .map(|t| t.as_duration()),
    );
}

/// A request's hand-over to the instances (see [`serve`]), charging its turns to its plugin.
pub(crate) struct Charged<F> {
    future: Pin<Box<F>>,
    metrics: Arc<crate::metrics::PluginMetrics>,
}

impl<F: Future> Future for Charged<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = self.future.as_mut().poll(cx);
        turn_ends(&self.metrics);
        polled
    }
}

/// How long an instance of a 0.3 component waits for its next request before it goes.
pub(crate) const IDLE_INSTANCE: Duration = Duration::from_secs(10);

/// How often an idle instance looks whether its plugin version was replaced.
const RETIRED_CHECK: Duration = Duration::from_millis(100);

/// The export that makes a component a WASI 0.3 HTTP service (any 0.3.x).
pub(crate) const P3_HANDLER: &str = "wasi:http/handler@0.3";

/// The 0.3 version of wasi:http this host implements (the one wasmtime-wasi-http 48 declares).
pub(crate) const P3_HOST_VERSION: &str = "0.3.0";

/// The engine, linker and threads of WASI 0.3 components.
pub(crate) struct Concurrent {
    pub engine: Engine,
    pub linker: Linker<HostState>,
    /// Where the instances' event loops run.
    pub tokio: tokio::runtime::Runtime,
    pub(crate) ticker: super::ticker::EpochTicker,
}

impl std::fmt::Debug for Concurrent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Concurrent").finish_non_exhaustive()
    }
}

impl Concurrent {
    /// The engine with concurrency support, its linker (WASI 0.2 and 0.3, wasi:http 0.2 and
    /// 0.3, wasi:keyvalue) and its threads. Compiled components go to `cache`, the first
    /// engine's (its entries are keyed by engine settings too).
    pub(crate) fn new(cache: Option<wasmtime::Cache>) -> anyhow::Result<Concurrent> {
        let engine = Engine::new(&engine_config(cache))
            .map_err(|e| anyhow::anyhow!("cannot make the engine of WASI 0.3 components: {e:#}"))?;
        let mut linker = Linker::new(&engine);
        // A component built for wasm32-wasip2 imports 0.2's interfaces for its standard
        // library (stdout, clocks, random) beside 0.3's.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        wasmtime_wasi::p3::add_to_linker(&mut linker)?;
        wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
        crate::runtime::host::kv::add_to_linker(&mut linker)?;
        super::add_config_to_linker(&mut linker)?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores)
            .thread_name("ankh-p3")
            .on_thread_start(thread_starts)
            .enable_all()
            .build()
            .context("cannot start the threads of WASI 0.3 components")?;
        let ticker = super::ticker::EpochTicker::start(engine.clone(), crate::limits::EPOCH_TICK)
            .context("cannot start the epoch ticker thread of WASI 0.3 components")?;
        Ok(Concurrent {
            engine,
            linker,
            tokio,
            ticker,
        })
    }
}

/// The settings of the engine of 0.3 components: those of the first engine (stack sizes,
/// epochs, the same compiled-code cache) with the async ABI and concurrency support on, and
/// instances allocated on demand.
fn engine_config(cache: Option<wasmtime::Cache>) -> Config {
    let mut c = super::base_config(cache);
    c.wasm_component_model_async(true);
    c.concurrency_support(true);
    c
}

/// Whether `component` is a WASI 0.3 HTTP service: the version of `wasi:http/handler` it
/// exports, if it exports one.
pub(crate) fn p3_export(component: &Component, engine: &Engine) -> Option<String> {
    component
        .component_type()
        .exports(engine)
        .find_map(|(name, _)| name.strip_prefix("wasi:http/handler@").map(str::to_owned))
        .filter(|version| version.starts_with("0.3"))
}

/// How a plugin version's 0.3 instances are made and bounded.
pub(crate) struct Service {
    handler: ProxyHandler<Instances>,
    /// Set when the plugin version is replaced or unloaded: its idle instances go.
    retired: Arc<AtomicBool>,
}

impl Service {
    pub(crate) fn new(instances: Instances) -> Service {
        let retired = instances.retired.clone();
        Service {
            handler: ProxyHandler::new(instances),
            retired,
        }
    }

    /// What serves its requests (see [`serve`]), for a task of its own.
    pub(crate) fn handler(&self) -> ProxyHandler<Instances> {
        self.handler.clone()
    }
}

/// Serves one request on an instance that accepts it, made if need be (see [`Warming`]): a
/// future for a task on this engine's threads, whose turns are charged to the plugin.
pub(crate) fn serve(
    handler: ProxyHandler<Instances>,
    request: wasmtime_wasi_http::handler::Request,
) -> Charged<impl Future<Output = wasmtime::Result<wasmtime_wasi_http::handler::Response>>> {
    let metrics = handler.state().metrics.clone();
    let future = Box::pin(async move {
        let state = handler.state();
        state
            .warming
            .admit(state.concurrent, state.handler_timeout)
            .await;
        handler.handle((), request).await
    });
    Charged { future, metrics }
}

/// Whether a request should wait for an instance being made rather than make one: counts of
/// the instances being made and of those accepting requests, kept by the instances (see
/// `Worker::should_accept_request`).
#[derive(Debug, Default)]
pub(crate) struct Warming {
    /// Instances being made, or made and not yet asked for a request.
    making: AtomicUsize,
    /// Instances whose last answer was that they accept a request.
    accepting: AtomicUsize,
    /// Requests waiting for an instance being made.
    waiting: AtomicUsize,
    /// Told when an instance accepts, or one being made failed or went.
    changed: tokio::sync::Notify,
}

impl Warming {
    /// Waits while no instance accepts and the ones being made have room for this request,
    /// at most `patience`; then the request goes to [`ProxyHandler::handle`].
    async fn admit(&self, concurrent: usize, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before the counts are read, so a change after the read wakes it.
            changed.as_mut().enable();
            let making = self.making.load(Ordering::Acquire);
            if making == 0 || self.accepting.load(Ordering::Acquire) > 0 {
                return;
            }
            let room = making.saturating_mul(concurrent.max(1));
            if self.waiting.fetch_add(1, Ordering::AcqRel) >= room {
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            let waited = tokio::time::timeout_at(deadline, changed).await;
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            if waited.is_err() {
                return;
            }
        }
    }

    fn made(&self) {
        self.making.fetch_sub(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.retired.store(true, Ordering::Release);
    }
}

/// Makes a fresh store of the plugin, its limits armed.
pub(crate) type MakeStore = Box<dyn Fn() -> Store<HostState> + Send + Sync>;

/// The state [`ProxyHandler`] keeps for one plugin version.
pub(crate) struct Instances {
    pub(crate) pre: ServicePre<HostState>,
    pub(crate) make_store: MakeStore,
    /// Requests an instance serves in all before it goes.
    pub(crate) reuse: usize,
    /// Requests an instance serves at once.
    pub(crate) concurrent: usize,
    /// Wall-clock time a request has to give its response.
    pub(crate) handler_timeout: Duration,
    /// Wall-clock time the guest may work on once its responses are given: a streamed body's
    /// whole life (the stream's own limits cut it sooner at the client's side).
    pub(crate) stream_timeout: Duration,
    pub(crate) metrics: Arc<crate::metrics::PluginMetrics>,
    pub(crate) plugin: Arc<str>,
    pub(crate) retired: Arc<AtomicBool>,
    pub(crate) warming: Arc<Warming>,
}

impl HandlerState for Instances {
    type StoreData = HostState;
    type WorkerExpiration = Expiry;
    type WorkerState = Worker;

    async fn instantiate(&self) -> wasmtime::Result<handler::Instance<HostState, Expiry, Worker>> {
        let mut store = (self.make_store)();
        store.set_epoch_deadline(1);
        store.data_mut().budget.reset();
        self.warming.making.fetch_add(1, Ordering::AcqRel);
        let instantiate = self.pre.instantiate_async(&mut store);
        let made = tokio::time::timeout(self.handler_timeout, instantiate).await;
        turn_ends(&self.metrics);
        let service = match made {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                self.warming.made();
                return Err(e);
            }
            Err(_) => {
                self.warming.made();
                wasmtime::bail!(
                    "instantiating took longer than the handler timeout ({} ms)",
                    self.handler_timeout.as_millis()
                )
            }
        };
        self.metrics
            .instances_created
            .fetch_add(1, Ordering::Relaxed);
        self.metrics.live_instances.fetch_add(1, Ordering::Relaxed);
        Ok(handler::Instance {
            store,
            proxy: handler::Proxy::P3(service),
            view: <HostState as WasiHttpView>::http,
            expiration: Expiry {
                handler_timeout: self.handler_timeout,
                stream_timeout: self.stream_timeout,
                retired: self.retired.clone(),
                timer: None,
                metrics: self.metrics.clone(),
            },
            state: Worker {
                reuse: self.reuse,
                concurrent: self.concurrent,
                handler_timeout: self.handler_timeout,
                metrics: self.metrics.clone(),
                plugin: self.plugin.clone(),
                warming: self.warming.clone(),
                asked: AtomicBool::new(false),
                accepting: AtomicBool::new(false),
            },
        })
    }
}

/// One instance's bounds, as [`ProxyHandler`] asks them.
pub(crate) struct Worker {
    reuse: usize,
    concurrent: usize,
    handler_timeout: Duration,
    metrics: Arc<crate::metrics::PluginMetrics>,
    plugin: Arc<str>,
    warming: Arc<Warming>,
    /// Whether it was asked for a request yet (until then it counts as being made).
    asked: AtomicBool,
    /// Whether its last answer was that it accepts one.
    accepting: AtomicBool,
}

impl Worker {
    /// Keeps [`Warming`]'s counts as this instance's answers change.
    fn counted(&self, accepting: bool) {
        let changed = self.accepting.swap(accepting, Ordering::AcqRel) != accepting;
        if changed {
            if accepting {
                self.warming.accepting.fetch_add(1, Ordering::AcqRel);
            } else {
                self.warming.accepting.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if !self.asked.swap(true, Ordering::AcqRel) {
            self.warming.made();
        } else if changed && accepting {
            self.warming.changed.notify_waiters();
        }
    }
}

impl handler::WorkerState for Worker {
    type StoreData = HostState;
    type RequestData = ();

    fn should_accept_request(&self, concurrent: usize, total: usize) -> ShouldAccept {
        let answer = if total >= self.reuse {
            ShouldAccept::Never
        } else if concurrent >= self.concurrent {
            ShouldAccept::No
        } else {
            ShouldAccept::Yes
        };
        self.counted(matches!(answer, ShouldAccept::Yes));
        answer
    }

    fn on_request_start(
        &self,
        mut store: StoreContextMut<'_, HostState>,
        (): (),
        _task: GuestTaskId,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        // The CPU deadline counts from the latest request's start: an instance that computes
        // longer than that with no request starting is interrupted.
        store.data_mut().budget.reset();
        Box::pin(tokio::time::sleep(self.handler_timeout))
    }

    fn drop(&self, store: Store<HostState>, result: wasmtime::Result<()>) {
        turn_ends(&self.metrics);
        drop(store);
        self.counted(false);
        self.metrics.live_instances.fetch_sub(1, Ordering::Relaxed);
        // Its requests in flight are counted as they fail (see `pool::call`).
        if let Err(e) = result {
            tracing::error!(
                plugin = %self.plugin,
                "plugin `{}` failed: {e:#}; instance retired (its requests in flight got a 5xx)",
                self.plugin
            );
        }
    }
}

/// When an instance goes: idle for [`IDLE_INSTANCE`] or once its plugin version is replaced;
/// busy past the handler timeout (the second line of defence [`handler::WorkerState`] asks
/// for); after its responses, with guest work still going (a body streaming), past the
/// stream time limit.
pub(crate) struct Expiry {
    handler_timeout: Duration,
    stream_timeout: Duration,
    retired: Arc<AtomicBool>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Asked at the end of every poll of the instance's task that leaves work pending: the
    /// end of a turn, charged to its plugin.
    metrics: Arc<crate::metrics::PluginMetrics>,
}

impl WorkerExpiration for Expiry {
    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        state: WorkerStatus,
        start: Instant,
    ) -> Poll<()> {
        turn_ends(&self.metrics);
        let now = Instant::now();
        let deadline = match state {
            WorkerStatus::Idle => {
                if self.retired.load(Ordering::Acquire) {
                    return Poll::Ready(());
                }
                (start + IDLE_INSTANCE).min(now + RETIRED_CHECK)
            }
            // A little past the request's own expiry, which answers it first.
            WorkerStatus::Requests => start + self.handler_timeout + RETIRED_CHECK,
            // Its responses are out, and a body may still be streaming.
            WorkerStatus::PostReturn => start + self.stream_timeout,
        };
        if state == WorkerStatus::Idle && now >= start + IDLE_INSTANCE
            || state != WorkerStatus::Idle && now >= deadline
        {
            return Poll::Ready(());
        }
        let deadline = tokio::time::Instant::from_std(deadline);
        match &mut self.timer {
            Some(timer) if timer.deadline() == deadline => {}
            Some(timer) => timer.as_mut().reset(deadline),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        let timer = self.timer.as_mut().expect("the timer was just set");
        match timer.as_mut().poll(cx) {
            // Due: poll again, so that the state decides.
            Poll::Ready(()) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Configures a store of a 0.3 component: its memory cap, and its epoch callback, which
/// yields at every tick (other instances' loops share the threads) and interrupts a guest past
/// its CPU deadline.
pub(crate) fn configure_store(store: &mut Store<HostState>) {
    store.limiter(|s| &mut s.memory);
    store.epoch_deadline_callback(|mut ctx| {
        let state = ctx.data_mut();
        let tick = state.limits.epoch_tick;
        if state.budget.tick(tick) {
            Ok(wasmtime::UpdateDeadline::Yield(1))
        } else {
            Ok(wasmtime::UpdateDeadline::Interrupt)
        }
    });
}
