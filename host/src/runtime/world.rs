//! Which world a plugin targets, and calling its exports whichever it is.
//!
//! A component built against the current `ankh:plugin@0.2.0` exports `handler@0.2.0`; one
//! built against 0.1.0 exports `handler@0.1.0`. Both are linked against every import the host
//! has, of both versions, and their `types` are the same Rust types, so the rest of the host
//! never asks which one it is talking to.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::bindings::{self, legacy, types};
use super::state::HostState;

/// A pre-instantiated plugin of either world.
pub enum Pre {
    Current(bindings::PluginPre<HostState>),
    Legacy(legacy::PluginPre<HostState>),
}

/// A live instance's exports, of either world.
pub enum Exports {
    Current(bindings::Plugin),
    Legacy(legacy::Plugin),
}

impl Pre {
    /// Checks the component's exports against the current world, then against 0.1.0. The
    /// error, when neither fits, is the current world's.
    pub fn new(pre: InstancePre<HostState>) -> wasmtime::Result<Pre> {
        match bindings::PluginPre::new(pre.clone()) {
            Ok(current) => Ok(Pre::Current(current)),
            Err(e) => match legacy::PluginPre::new(pre) {
                Ok(legacy) => Ok(Pre::Legacy(legacy)),
                Err(_) => Err(e),
            },
        }
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Pre::Current(p) => p.engine(),
            Pre::Legacy(p) => p.engine(),
        }
    }

    /// The version of `ankh:plugin` the component was built against.
    pub fn version(&self) -> &'static str {
        match self {
            Pre::Current(_) => "0.2.0",
            Pre::Legacy(_) => "0.1.0",
        }
    }

    pub async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Exports> {
        Ok(match self {
            Pre::Current(p) => Exports::Current(p.instantiate_async(store).await?),
            Pre::Legacy(p) => Exports::Legacy(p.instantiate_async(store).await?),
        })
    }
}

impl Exports {
    pub async fn handle_request(
        &self,
        store: &mut Store<HostState>,
        request: &types::Request,
    ) -> wasmtime::Result<types::Outcome> {
        match self {
            Exports::Current(p) => {
                p.ankh_plugin_handler()
                    .call_handle_request(store, request)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_handler()
                    .call_handle_request(store, request)
                    .await
            }
        }
    }

    pub async fn on_open(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        request: &types::Request,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_open(store, conn, request)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_open(store, conn, request)
                    .await
            }
        }
    }

    pub async fn on_message(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        message: &types::Message,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_message(store, conn, message)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_message(store, conn, message)
                    .await
            }
        }
    }

    pub async fn on_close(
        &self,
        store: &mut Store<HostState>,
        conn: types::ConnectionId,
        info: &types::CloseInfo,
    ) -> wasmtime::Result<()> {
        match self {
            Exports::Current(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_close(store, conn, info)
                    .await
            }
            Exports::Legacy(p) => {
                p.ankh_plugin_websocket_handler()
                    .call_on_close(store, conn, info)
                    .await
            }
        }
    }
}
