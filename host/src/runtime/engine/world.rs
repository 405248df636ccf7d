//! Which world a plugin targets, and calling its exports whichever it is.
//!
//! A component built against the current `ankh:plugin@0.3.0` exports `handler@0.3.0`; one
//! built against 0.2.0 or 0.1.0 exports that version's `handler`. All are linked against every
//! import the host has, of every version, and their `types` are the same Rust types, so the
//! rest of the host never asks which one it is talking to. A standard `wasi:http/proxy` component (0.2.x)
//! exports `wasi:http/incoming-handler`; its calls go through [`crate::runtime::engine::proxy`] and answer as
//! ankh's own plugins do. Proxy components have no WebSocket events.
//!
//! A 0.3.0 or 0.2.0 component may also export `packed-handler` (the SDK's do): its requests are then
//! lowered as two buffers instead of a record, and when it exports `packed-handler.handle`
//! its answers come back as one buffer too (see [`crate::runtime::engine::packed`]).

use wasmtime::Store;
use wasmtime::component::types::{ComponentItem, Type};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, TypedFunc};

use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyPre};
use wasmtime_wasi_http::p3::bindings::ServicePre;

use crate::runtime::bindings::{self, legacy, types, v02};
use crate::runtime::engine::incoming::Incoming;
use crate::runtime::engine::packed::Returned;
use crate::runtime::sandbox::store::HostState;

/// `packed-handler.handle-request`: the head and the body of a request in, a record out.
type PackedFunc = TypedFunc<(Vec<u8>, Vec<u8>), (types::Outcome,)>;

/// `packed-handler.handle`: the head and the body of a request in, the packed answer out.
type AnswerFunc = TypedFunc<(Vec<u8>, Vec<u8>), (Vec<u8>,)>;

/// Which `packed-handler` function a component's requests go to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PackedExport {
    /// `handle-request`, which returns a record.
    Record(ComponentExportIndex),
    /// `handle`, which returns the packed answer.
    Answer(ComponentExportIndex),
}

/// A live instance's `packed-handler` function.
pub(crate) enum Packed {
    Record(PackedFunc),
    Answer(AnswerFunc),
}

/// `scheduled.job` as the host passes it (the `sdk-plugin` world's export, which the host's
/// bindings of the `plugin` world do not name).
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lower, Debug, Clone)]
#[component(record)]
pub(crate) struct JobRecord {
    pub schedule: String,
    #[component(name = "due-ms")]
    pub due_ms: u64,
    pub id: String,
}

/// `scheduled.run`.
type RunFunc = TypedFunc<(JobRecord,), (Result<(), String>,)>;

/// The interface a component exports to be run on a schedule.
pub(crate) const SCHEDULED: &str = "ankh:plugin/scheduled@0.3.0";

/// A pre-instantiated plugin of either world.
pub(crate) enum Pre {
    /// With where its `packed-handler` function is, when it exports one, and its
    /// `scheduled.run`, likewise.
    Current(
        bindings::PluginPre<HostState>,
        Option<PackedExport>,
        Option<ComponentExportIndex>,
    ),
    /// `ankh:plugin@0.2.0`, likewise.
    V02(v02::PluginPre<HostState>, Option<PackedExport>),
    Legacy(legacy::PluginPre<HostState>),
    Proxy(ProxyPre<HostState>),
    /// A WASI 0.3 `wasi:http/service` component, with the version of the handler it
    /// exports. Its requests never reach an [`Exports`]: they go to its instances through
    /// [`crate::runtime::engine::concurrent`]; this is for the trial instantiation at load.
    Service(ServicePre<HostState>, String),
}

/// A live instance's exports, of either world.
pub(crate) enum Exports {
    Current(bindings::Plugin, Option<Packed>, Option<RunFunc>),
    V02(v02::Plugin, Option<Packed>),
    Legacy(legacy::Plugin),
    Proxy(Proxy),
    /// Instantiated only to prove that it starts.
    Service,
}

impl Pre {
    /// Checks the component's exports against the current world, then against 0.2.0 and
    /// 0.1.0, then against `wasi:http/proxy`. The error, when none fits, is the current
    /// world's.
    pub(crate) fn new(pre: InstancePre<HostState>) -> wasmtime::Result<Pre> {
        let e = match bindings::PluginPre::new(pre.clone()) {
            Ok(current) => {
                let packed = packed_export(pre.component(), pre.engine(), 0)?;
                let scheduled = scheduled_export(pre.component());
                return Ok(Pre::Current(current, packed, scheduled));
            }
            Err(e) => e,
        };
        if let Ok(v02) = v02::PluginPre::new(pre.clone()) {
            let packed = packed_export(pre.component(), pre.engine(), 1)?;
            return Ok(Pre::V02(v02, packed));
        }
        if let Ok(legacy) = legacy::PluginPre::new(pre.clone()) {
            return Ok(Pre::Legacy(legacy));
        }
        match ProxyPre::new(pre) {
            Ok(proxy) => Ok(Pre::Proxy(proxy)),
            Err(_) => Err(e),
        }
    }

    /// Whether it exports `scheduled` (so that it can be run on a schedule).
    pub(crate) fn runs_jobs(&self) -> bool {
        matches!(self, Pre::Current(_, _, Some(_)))
    }

    /// Whether it is a `wasi:http/proxy` component.
    pub(crate) fn is_proxy(&self) -> bool {
        matches!(self, Pre::Proxy(_))
    }

    /// The world the component targets, and for the current one how its requests are passed.
    pub(crate) fn world(&self) -> std::borrow::Cow<'static, str> {
        let name = match self {
            Pre::Current(_, Some(PackedExport::Answer(_)), _) => {
                "ankh:plugin@0.3.0 (requests as two buffers, answers as one: packed-handler)"
            }
            Pre::Current(_, Some(PackedExport::Record(_)), _) => {
                "ankh:plugin@0.3.0 (requests as two buffers: packed-handler)"
            }
            Pre::Current(_, None, _) => "ankh:plugin@0.3.0 (requests as a record: handler)",
            Pre::V02(_, Some(PackedExport::Answer(_))) => {
                "ankh:plugin@0.2.0 (requests as two buffers, answers as one: packed-handler)"
            }
            Pre::V02(_, Some(PackedExport::Record(_))) => {
                "ankh:plugin@0.2.0 (requests as two buffers: packed-handler)"
            }
            Pre::V02(_, None) => "ankh:plugin@0.2.0 (requests as a record: handler)",
            Pre::Legacy(_) => "ankh:plugin@0.1.0",
            Pre::Proxy(_) => "wasi:http/proxy@0.2",
            Pre::Service(_, version) => {
                return format!(
                    "wasi:http/service@{version} (WASI 0.3: instances serve many requests, several at once)"
                )
                .into();
            }
        };
        name.into()
    }

    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<Exports> {
        Ok(match self {
            Pre::Current(p, packed, scheduled) => {
                let instance = p.instance_pre().instantiate_async(&mut *store).await?;
                let exports = bindings::Plugin::new(&mut *store, &instance)?;
                let run = match scheduled {
                    Some(index) => Some(instance.get_typed_func(&mut *store, index).map_err(
                        |e| e.context("its `scheduled.run` export has another signature than in wit/plugin.wit"),
                    )?),
                    None => None,
                };
                Exports::Current(exports, packed_func(store, &instance, packed)?, run)
            }
            Pre::V02(p, packed) => {
                let instance = p.instance_pre().instantiate_async(&mut *store).await?;
                let exports = v02::Plugin::new(&mut *store, &instance)?;
                Exports::V02(exports, packed_func(store, &instance, packed)?)
            }
            Pre::Legacy(p) => Exports::Legacy(p.instantiate_async(store).await?),
            Pre::Proxy(p) => Exports::Proxy(p.instantiate_async(store).await?),
            Pre::Service(p, _) => {
                p.instantiate_async(store).await?;
                Exports::Service
            }
        })
    }
}

/// A live instance's `packed-handler` function, at the place [`packed_export`] found.
fn packed_func(
    store: &mut Store<HostState>,
    instance: &wasmtime::component::Instance,
    packed: &Option<PackedExport>,
) -> wasmtime::Result<Option<Packed>> {
    // Its signature was checked by `Pre::new`; this check cannot fail then.
    Ok(match packed {
        Some(PackedExport::Record(index)) => {
            Some(Packed::Record(instance.get_typed_func(&mut *store, index)?))
        }
        Some(PackedExport::Answer(index)) => {
            Some(Packed::Answer(instance.get_typed_func(&mut *store, index)?))
        }
        None => None,
    })
}

/// Where `scheduled.run` is, if the component exports it.
fn scheduled_export(component: &Component) -> Option<ComponentExportIndex> {
    let interface = component.get_export_index(None, SCHEDULED)?;
    component.get_export_index(Some(&interface), "run")
}

/// Where the `packed-handler` function the host calls is, if the component exports one:
/// `handle` when it is there, else `handle-request`. Both signatures are checked here, at
/// load, so that a component with another one is refused with the reason instead of failing
/// its first instantiation. `version` picks the world: 0 for the current one, 1 for 0.2.0.
fn packed_export(
    component: &Component,
    engine: &wasmtime::Engine,
    version: usize,
) -> wasmtime::Result<Option<PackedExport>> {
    use crate::runtime::engine::packed::{ANSWER_FUNCTION, FUNCTION};
    let (packed_name, record_name) = (
        crate::runtime::engine::packed::INTERFACE[version],
        HANDLER[version],
    );
    let Some(interface) = component.get_export_index(None, packed_name) else {
        return Ok(None);
    };
    let ty = component.component_type();
    let func = |interface: &str, name: &str| {
        let ComponentItem::ComponentInstance(instance) = ty.get_export(engine, interface)?.ty
        else {
            return None;
        };
        match instance.get_export(engine, name)?.ty {
            ComponentItem::ComponentFunc(func) => Some(func),
            _ => None,
        }
    };
    let bytes = |ty: &Type| matches!(ty, Type::List(list) if list.ty() == Type::U8);
    let takes_two_buffers = |f: &wasmtime::component::types::ComponentFunc| {
        f.params().len() == 2 && f.params().all(|(_, ty)| bytes(&ty))
    };
    let refuse = |name: &str, signature: &str| {
        wasmtime::Error::msg(format!(
            "its `{packed_name}` export has another signature than \
             `{name}: func(head: list<u8>, body: list<u8>) -> {signature}` (see wit/plugin.wit)"
        ))
    };
    if let Some(index) = component.get_export_index(Some(&interface), ANSWER_FUNCTION) {
        let fits = func(packed_name, ANSWER_FUNCTION).is_some_and(|f| {
            let mut results = f.results();
            takes_two_buffers(&f)
                && results.len() == 1
                && results.next().is_some_and(|ty| bytes(&ty))
        });
        if !fits {
            return Err(refuse(ANSWER_FUNCTION, "list<u8>"));
        }
        return Ok(Some(PackedExport::Answer(index)));
    }
    let Some(index) = component.get_export_index(Some(&interface), FUNCTION) else {
        return Ok(None);
    };
    let fits = match (func(packed_name, FUNCTION), func(record_name, FUNCTION)) {
        (Some(packed), Some(record)) => {
            takes_two_buffers(&packed) && packed.results().eq(record.results())
        }
        _ => false,
    };
    if !fits {
        return Err(refuse(FUNCTION, "outcome"));
    }
    Ok(Some(PackedExport::Record(index)))
}

/// The record entry point of the worlds with a `packed-handler`, as in
/// [`crate::runtime::engine::packed::INTERFACE`].
const HANDLER: [&str; 2] = ["ankh:plugin/handler@0.3.0", "ankh:plugin/handler@0.2.0"];

impl Exports {
    /// Calls the request handler. The body is moved into the guest: `request` comes back
    /// with an empty one, its head as it was.
    pub(crate) async fn handle_request(
        &self,
        store: &mut Store<HostState>,
        request: &mut Incoming,
    ) -> wasmtime::Result<Returned> {
        let (Exports::Current(_, Some(packed), _) | Exports::V02(_, Some(packed))) = self else {
            // Boxed: with the record paths inline this future was 2.3 KB, the packed call's
            // alone is 440 bytes, and every call's future is as large as its largest path.
            return Box::pin(self.handle_record(store, request)).await;
        };
        let mut head = Vec::new();
        crate::runtime::engine::packed::encode_head(request, &mut head);
        let body = std::mem::take(&mut request.body);
        Ok(match packed {
            Packed::Answer(f) => Returned::Packed(f.call_async(store, (head, body)).await?.0),
            Packed::Record(f) => Returned::Record(f.call_async(store, (head, body)).await?.0),
        })
    }

    /// [`Exports::handle_request`] for the components that take the request as a record.
    async fn handle_record(
        &self,
        store: &mut Store<HostState>,
        request: &mut Incoming,
    ) -> wasmtime::Result<Returned> {
        let record = request.lend();
        let outcome = match self {
            Exports::Current(p, _, _) => {
                p.ankh_plugin_handler()
                    .call_handle_request(&mut *store, &record)
                    .await
            }
            Exports::V02(p, _) => {
                p.ankh_plugin_handler()
                    .call_handle_request(&mut *store, &record)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_handler()
                    .call_handle_request(&mut *store, &record)
                    .await
            }
            Exports::Proxy(p) => {
                let inflow = request.inflow.take();
                crate::runtime::engine::proxy::handle(store, p, &record, inflow).await
            }
            Exports::Service => Err(wasmtime::Error::msg(
                "a WASI 0.3 component's requests go to its own instances",
            )),
        };
        request.restore(record);
        outcome.map(Returned::Record)
    }

    /// Runs one job of a schedule: `Ok(Err(why))` when the job said it failed.
    pub(crate) async fn run_job(
        &self,
        store: &mut Store<HostState>,
        job: JobRecord,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Exports::Current(_, _, Some(run)) => Ok(run.call_async(store, (job,)).await?.0),
            _ => Ok(Err(
                "the plugin exports no `ankh:plugin/scheduled@0.3.0`".to_owned()
            )),
        }
    }

    pub(crate) async fn on_open(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        request: &types::Request,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p, _, _) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_open(store, conn, request)
                    .await
            }
            Exports::V02(p, _) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_open(store, conn, request)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_open(store, conn, request)
                    .await
            }
            // A proxy component never accepts a WebSocket, so it has no events.
            Exports::Proxy(_) | Exports::Service => Ok(()),
        }
    }

    pub(crate) async fn on_message(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        message: &types::Message,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p, _, _) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_message(store, conn, message)
                    .await
            }
            Exports::V02(p, _) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_message(store, conn, message)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_message(store, conn, message)
                    .await
            }
            // A proxy component never accepts a WebSocket, so it has no events.
            Exports::Proxy(_) | Exports::Service => Ok(()),
        }
    }

    pub(crate) async fn on_close(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        info: &types::CloseInfo,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p, _, _) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_close(store, conn, info)
                    .await
            }
            Exports::V02(p, _) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_close(store, conn, info)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_close(store, conn, info)
                    .await
            }
            // A proxy component never accepts a WebSocket, so it has no events.
            Exports::Proxy(_) | Exports::Service => Ok(()),
        }
    }
}
