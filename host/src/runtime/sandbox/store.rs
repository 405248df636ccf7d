//! The data of every plugin `Store`: one `HostState` per instance.
//!
//! It carries the WASI context (nothing granted but clocks, random and captured
//! stdout/stderr, unless the plugin's policy grants more), the guest's bounds (memory cap, CPU
//! budget, wall-clock watch, resource-table cap: see [`super::caps`]), the plugin's key-value
//! namespace, the way out to its WebSockets, and, during a request, where its answer goes
//! ([`Respond`]). The host side of each import works on it, one file per interface in
//! [`crate::runtime::host`].
//!
//! Every import is scoped to the calling plugin: its own key-value namespace, its own
//! WebSocket connections and its own topics.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::caps::{CpuBudget, MemoryCap};
use crate::kv::Namespace;
use crate::runtime::host::http::Respond;
use crate::runtime::host::stdio::LogTags;
use crate::runtime::host::websocket::WebSockets;
use crate::runtime::sandbox::guest_limits::GuestLimits;
use crate::runtime::sandbox::watch::Watch;

/// Store data for one plugin instance.
pub struct HostState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) budget: CpuBudget,
    /// The wall-clock bound (and cancellation) of the call in progress.
    pub(crate) watch: Watch,
    /// This plugin's key-value namespace (see [`crate::runtime::host::kv`]).
    pub(crate) kv: Namespace,
    /// This plugin's configuration values, and no other's (`wasi:config/store`).
    pub(crate) config: Arc<wasmtime_wasi_config::WasiConfigVariables>,
    /// Every bound of this plugin's instances and calls.
    pub(crate) limits: Arc<GuestLimits>,
    pub(crate) tags: Arc<LogTags>,
    /// Where the answer to the request being handled goes, while `handle-request` runs.
    pub(crate) call: Option<Box<dyn Respond>>,
    /// Absent in stores that serve no traffic (the trial instantiation at load).
    pub(crate) ws: Option<Arc<dyn WebSockets>>,
    /// wasi:http: inbound requests of proxy plugins, outbound requests of every plugin.
    pub(crate) http: wasmtime_wasi_http::WasiHttpCtx,
    /// Whether the wasi:http request being served is a HEAD (see `runtime::host::head`).
    pub(crate) head_request: bool,
    pub(crate) http_hooks: crate::runtime::host::outbound::HttpHooks,
}

impl HostState {
    /// The data of a store of a plugin: `wasi` is what its policy grants it (see
    /// `engine::wasi`), `limits` what bounds its calls.
    pub(crate) fn new(
        wasi: WasiCtx,
        tags: Arc<LogTags>,
        kv: Namespace,
        limits: Arc<GuestLimits>,
        metrics: Arc<crate::metrics::PluginMetrics>,
        ws: Option<Arc<dyn WebSockets>>,
        http_hooks: crate::runtime::host::outbound::HttpHooks,
    ) -> Self {
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.table_entries);
        HostState {
            wasi,
            table,
            memory: MemoryCap::new(limits.memory_bytes, metrics),
            budget: CpuBudget::new(limits.cpu_deadline),
            watch: Watch::new(limits.handler_timeout),
            kv,
            config: Arc::default(),
            limits,
            tags,
            call: None,
            ws,
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            head_request: false,
            http_hooks,
        }
    }

    /// The plugin this store belongs to.
    pub(crate) fn plugin(&self) -> &Arc<str> {
        &self.tags.plugin
    }

    /// The instance's resource table.
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// The resource table and the call's watch, borrowed together (a bounded wait needs both).
    pub(crate) fn table_and_watch(&mut self) -> (&mut ResourceTable, &mut Watch) {
        (&mut self.table, &mut self.watch)
    }
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
