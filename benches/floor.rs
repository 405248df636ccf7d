//! The floor under any server of WASI 0.3 components built on wasmtime 48: requests through
//! wasmtime-wasi-http's own `ProxyHandler`, in process, with no socket, no HTTP parser and
//! nothing of ankh. It serves the component of `benches/wasi_http.rs`'s 0.3 table (`p3spin`)
//! with the reuse `wasmtime serve` and ankh default to (128 requests an instance, 16 at once).
//! A server's throughput on that component cannot be above [`rate`]: every request it serves
//! pays for this, and for its sockets besides.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use wasmtime::component::{Component, GuestTaskId, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreContextMut};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::handler::{
    self, HandlerState, ProxyHandler, ShouldAccept, WorkerExpiration, WorkerStatus,
};
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

/// Requests in flight at once in [`rate`] (as the load benches' connections).
pub const CONCURRENT: usize = 64;
/// Requests an instance serves in all, and at once: `wasmtime serve`'s defaults and ankh's.
const REUSE: usize = 128;
const AT_ONCE: usize = 16;

/// What an instance's store holds: WASI and wasi:http contexts, nothing more.
pub struct State {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: NoOutbound,
}

/// p3spin makes no outbound call.
pub struct NoOutbound;

type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
);

impl WasiHttpHooks for NoOutbound {
    fn send_request(
        &mut self,
        _: http::Request<WasiBody>,
        _: Option<RequestOptions>,
        _: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = Result<Sent, HttpError>> + Send> {
        Box::new(async { unreachable!("p3spin makes no outbound call") })
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for State {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

pub struct Instances {
    engine: Engine,
    pre: ServicePre<State>,
    /// Instances made so far.
    pub made: AtomicUsize,
}

impl HandlerState for Instances {
    type StoreData = State;
    type WorkerExpiration = Never;
    type WorkerState = Worker;

    async fn instantiate(&self) -> wasmtime::Result<handler::Instance<State, Never, Worker>> {
        let mut store = Store::new(
            &self.engine,
            State {
                wasi: WasiCtx::builder().build(),
                http: WasiHttpCtx::new(),
                table: ResourceTable::new(),
                hooks: NoOutbound,
            },
        );
        let service = self.pre.instantiate_async(&mut store).await?;
        self.made.fetch_add(1, Ordering::Relaxed);
        Ok(handler::Instance {
            store,
            proxy: handler::Proxy::P3(service),
            view: <State as WasiHttpView>::http,
            expiration: Never,
            state: Worker,
        })
    }
}

/// Instances go only when they have served their count.
pub struct Never;

impl WorkerExpiration for Never {
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>, _: WorkerStatus, _: Instant) -> Poll<()> {
        Poll::Pending
    }
}

/// An instance's reuse: `REUSE` requests, `AT_ONCE` at once.
pub struct Worker;

impl handler::WorkerState for Worker {
    type StoreData = State;
    type RequestData = ();

    fn should_accept_request(&self, concurrent: usize, total: usize) -> ShouldAccept {
        if total >= REUSE {
            ShouldAccept::Never
        } else if concurrent >= AT_ONCE {
            ShouldAccept::No
        } else {
            ShouldAccept::Yes
        }
    }

    fn on_request_start(
        &self,
        _: StoreContextMut<'_, State>,
        (): (),
        _: GuestTaskId,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        Box::pin(std::future::pending())
    }

    fn drop(&self, store: Store<State>, _: wasmtime::Result<()>) {
        // An instance still running when the runtime stops ends with an error: no matter.
        drop(store);
    }
}

/// One GET of `/`, its body read whole; the status and the body's length.
pub async fn one(handler: &ProxyHandler<Instances>) -> (u16, usize) {
    let body = Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync();
    let request = http::Request::builder()
        .uri("http://localhost/")
        .header("host", "localhost")
        .header("user-agent", "p3floor")
        .body(body)
        .expect("a valid request");
    let response = handler.handle((), request).await.expect("a response");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (status, body.len())
}

/// A handler of `p3spin` on an engine with wasmtime's defaults and concurrency support (ankh's
/// engine of 0.3 components also checks epochs, which costs more, not less).
pub fn handler() -> ProxyHandler<Instances> {
    let mut config = Config::new();
    config.wasm_component_model_async(true);
    config.concurrency_support(true);
    // Compiled once: an instruction count then holds only the requests.
    let mut cache = wasmtime::CacheConfig::new();
    cache.with_directory(crate::root().join("target/bench-cache"));
    config.cache(Some(wasmtime::Cache::new(cache).expect("a cache")));
    let engine = Engine::new(&config).expect("an engine");
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI 0.2");
    wasmtime_wasi::p3::add_to_linker(&mut linker).expect("WASI 0.3");
    wasmtime_wasi_http::p3::add_to_linker(&mut linker).expect("wasi:http 0.3");
    let wasm = std::path::Path::new(ankh_test_support::harness::plugins::P3SPIN);
    let component = Component::from_file(&engine, wasm).expect("the p3spin component");
    let pre = ServicePre::new(linker.instantiate_pre(&component).expect("its imports"))
        .expect("a wasi:http 0.3 service");
    ProxyHandler::new(Instances {
        engine,
        pre,
        made: AtomicUsize::new(0),
    })
}

/// Requests per second through `handler` on `rt` for `round`, [`CONCURRENT`] in flight.
pub fn rate(
    rt: &tokio::runtime::Runtime,
    handler: &ProxyHandler<Instances>,
    round: Duration,
) -> f64 {
    let served = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..CONCURRENT {
            let handler = handler.clone();
            let served = served.clone();
            tasks.spawn(async move {
                while start.elapsed() < round {
                    assert_eq!(one(&handler).await.0, 200);
                    served.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("a client task");
        }
    });
    served.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// A runtime with one thread per core, as ankh's threads of 0.3 instances.
pub fn runtime() -> tokio::runtime::Runtime {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a runtime")
}
