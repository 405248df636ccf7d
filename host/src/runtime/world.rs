//! Which world a plugin targets, and calling its exports whichever it is.
//!
//! A component built against the current `ankh:plugin@0.2.0` exports `handler@0.2.0`; one
//! built against 0.1.0 exports `handler@0.1.0`. Both are linked against every import the host
//! has, of both versions, and their `types` are the same Rust types, so the rest of the host
//! never asks which one it is talking to. A standard `wasi:http/proxy` component (0.2.x)
//! exports `wasi:http/incoming-handler`; its calls go through [`super::proxy`] and answer as
//! ankh's own plugins do. Proxy components have no WebSocket events.
//!
//! A current component may also export `packed-handler` (the SDK's do): its requests are then
//! lowered as two buffers instead of a record (see [`super::packed`]).

use wasmtime::Store;
use wasmtime::component::types::{ComponentItem, Type};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, TypedFunc};

use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyPre};

use super::bindings::{self, legacy, types};
use super::incoming::Incoming;
use super::state::HostState;

/// `packed-handler.handle-request`: the head and the body of a request.
type PackedFunc = TypedFunc<(Vec<u8>, Vec<u8>), (types::Outcome,)>;

/// A pre-instantiated plugin of either world.
pub enum Pre {
    /// With where its `packed-handler.handle-request` is, when it exports one.
    Current(bindings::PluginPre<HostState>, Option<ComponentExportIndex>),
    Legacy(legacy::PluginPre<HostState>),
    Proxy(ProxyPre<HostState>),
}

/// A live instance's exports, of either world.
pub enum Exports {
    Current(bindings::Plugin, Option<PackedFunc>),
    Legacy(legacy::Plugin),
    Proxy(Proxy),
}

impl Pre {
    /// Checks the component's exports against the current world, then against 0.1.0, then
    /// against `wasi:http/proxy`. The error, when none fits, is the current world's.
    pub fn new(pre: InstancePre<HostState>) -> wasmtime::Result<Pre> {
        let e = match bindings::PluginPre::new(pre.clone()) {
            Ok(current) => {
                let component = pre.component();
                let packed = component
                    .get_export_index(None, super::packed::INTERFACE)
                    .and_then(|i| component.get_export_index(Some(&i), super::packed::FUNCTION));
                if packed.is_some() && !packed_signature_fits(component, pre.engine()) {
                    return Err(wasmtime::Error::msg(format!(
                        "its `{}` export has another signature than \
                         `{}: func(head: list<u8>, body: list<u8>) -> outcome` (see wit/plugin.wit)",
                        super::packed::INTERFACE,
                        super::packed::FUNCTION
                    )));
                }
                return Ok(Pre::Current(current, packed));
            }
            Err(e) => e,
        };
        if let Ok(legacy) = legacy::PluginPre::new(pre.clone()) {
            return Ok(Pre::Legacy(legacy));
        }
        match ProxyPre::new(pre) {
            Ok(proxy) => Ok(Pre::Proxy(proxy)),
            Err(_) => Err(e),
        }
    }

    /// Whether it is a `wasi:http/proxy` component.
    pub fn is_proxy(&self) -> bool {
        matches!(self, Pre::Proxy(_))
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Pre::Current(p, _) => p.engine(),
            Pre::Legacy(p) => p.engine(),
            Pre::Proxy(p) => p.engine(),
        }
    }

    /// The world the component targets, and for the current one how its requests are passed.
    pub fn world(&self) -> &'static str {
        match self {
            Pre::Current(_, Some(_)) => {
                "ankh:plugin@0.2.0 (requests as two buffers: packed-handler)"
            }
            Pre::Current(_, None) => "ankh:plugin@0.2.0 (requests as a record: handler)",
            Pre::Legacy(_) => "ankh:plugin@0.1.0",
            Pre::Proxy(_) => "wasi:http/proxy@0.2",
        }
    }

    pub async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Exports> {
        Ok(match self {
            Pre::Current(p, packed) => {
                let instance = p.instance_pre().instantiate_async(&mut *store).await?;
                let exports = bindings::Plugin::new(&mut *store, &instance)?;
                // Its signature was checked by `Pre::new`; this check cannot fail then.
                let packed = match packed {
                    Some(index) => Some(instance.get_typed_func(&mut *store, index)?),
                    None => None,
                };
                Exports::Current(exports, packed)
            }
            Pre::Legacy(p) => Exports::Legacy(p.instantiate_async(store).await?),
            Pre::Proxy(p) => Exports::Proxy(p.instantiate_async(store).await?),
        })
    }
}

/// Whether `packed-handler.handle-request` takes two `list<u8>` and returns what
/// `handler.handle-request` returns (`outcome`). Checked at load, so that a component with
/// another signature is refused with the reason instead of failing its first instantiation.
fn packed_signature_fits(component: &Component, engine: &wasmtime::Engine) -> bool {
    let ty = component.component_type();
    let func = |interface: &str| {
        let ComponentItem::ComponentInstance(instance) = ty.get_export(engine, interface)?.ty
        else {
            return None;
        };
        match instance.get_export(engine, super::packed::FUNCTION)?.ty {
            ComponentItem::ComponentFunc(func) => Some(func),
            _ => None,
        }
    };
    let (Some(packed), Some(record)) = (func(super::packed::INTERFACE), func(HANDLER)) else {
        return false;
    };
    let bytes = |ty: &Type| matches!(ty, Type::List(list) if list.ty() == Type::U8);
    packed.params().len() == 2
        && packed.params().all(|(_, ty)| bytes(&ty))
        && packed.results().eq(record.results())
}

/// The record entry point of the current world.
const HANDLER: &str = "ankh:plugin/handler@0.2.0";

impl Exports {
    /// Calls the request handler. The body is moved into the guest: `request` comes back
    /// with an empty one, its head as it was.
    pub async fn handle_request(
        &self,
        store: &mut Store<HostState>,
        request: &mut Incoming,
    ) -> wasmtime::Result<types::Outcome> {
        let record = match self {
            Exports::Current(_, Some(packed)) => {
                let mut head = Vec::new();
                super::packed::encode_head(request, &mut head);
                let body = std::mem::take(&mut request.body);
                let (outcome,) = packed.call_async(store, (head, body)).await?;
                return Ok(outcome);
            }
            _ => request.lend(),
        };
        let outcome = match self {
            Exports::Current(p, _) => {
                p.ankh_plugin_handler()
                    .call_handle_request(&mut *store, &record)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_handler()
                    .call_handle_request(&mut *store, &record)
                    .await
            }
            Exports::Proxy(p) => super::proxy::handle(store, p, &record).await,
        };
        request.restore(record);
        outcome
    }

    pub async fn on_open(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        request: &types::Request,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p, _) => {
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
            Exports::Proxy(_) => Ok(()),
        }
    }

    pub async fn on_message(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        message: &types::Message,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p, _) => {
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
            Exports::Proxy(_) => Ok(()),
        }
    }

    pub async fn on_close(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        info: &types::CloseInfo,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p, _) => {
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
            Exports::Proxy(_) => Ok(()),
        }
    }
}
