//! The data of every plugin `Store`, and the host side of the WIT imports.
//!
//! One `HostState` per instance. It carries the WASI context (nothing granted but clocks,
//! random and captured stdout/stderr), the guest limits (memory cap, CPU budget, wall-clock
//! watch, resource-table cap), the plugin's key-value namespace and quota, and, during a
//! request, the [`CallContext`] that `http.respond` uses.
//!
//! Every import is scoped to the calling plugin: its own key-value namespace, its own
//! WebSocket connections and its own topics (see [`crate::hub`]).

use std::sync::Arc;
use std::time::Duration;

use cpu_time::ThreadTime;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::ankh::plugin::{http, log, types, websocket};
use super::bindings::types::{ConnectionId, LogLevel, Message, RespondError, WsError};
use super::call::CallContext;
use super::guest_limits::GuestLimits;
use super::policy::Policy;
use super::stdio::{GuestOutput, LogTags};
use super::watch::Watch;
use crate::hub::{Hub, SubscribeError};
use crate::kv::Namespace;
use crate::message::Outbound;
use crate::message::WsId;

/// How plugins' WebSocket messages leave the runtime, which knows nothing of connections: the
/// pool implements it over its queues to the event loops that own the sockets. `home` is the
/// loop of the connection, as the [`Hub`] knows it.
pub trait WsOut: Send + Sync + std::fmt::Debug {
    /// A message for one connection.
    fn send(&self, home: usize, ws: WsId, message: Outbound);
    /// Starts the closing handshake of one connection.
    fn close(&self, home: usize, ws: WsId, code: u16, reason: String);
    /// One message for every subscriber of a topic (`(home, ws)`, ordered by home), as one
    /// unit: every subscriber sees a topic's messages in one order.
    fn publish(&self, subscribers: Vec<(usize, WsId)>, message: Outbound);
}

/// What the `websocket` import needs: the shared table of connections, and the way out to
/// them.
#[derive(Debug, Clone)]
pub struct WsLink {
    pub hub: Arc<Hub>,
    pub out: Arc<dyn WsOut>,
    /// The other processes, when WebSockets span several (`--pubsub`).
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

/// Store data for one plugin instance.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) budget: CpuBudget,
    /// The wall-clock bound (and cancellation) of the call in progress.
    pub(crate) watch: Watch,
    /// This plugin's key-value namespace (see [`super::kv_host`]).
    pub(super) kv: Namespace,
    /// Every bound of this plugin's instances and calls.
    pub(crate) limits: Arc<GuestLimits>,
    pub(crate) tags: Arc<LogTags>,
    /// The request being answered, while `handle-request` runs.
    pub(crate) call: Option<CallContext>,
    /// Absent in stores that serve no traffic (the trial instantiation at load).
    ws: Option<WsLink>,
    /// wasi:http: inbound requests of proxy plugins, outbound requests of every plugin.
    http: wasmtime_wasi_http::WasiHttpCtx,
    http_hooks: super::outbound::HttpHooks,
}

impl HostState {
    /// The data of a store of `plugin`: the capabilities its `policy` grants, under
    /// `limits`.
    pub fn new(
        plugin: Arc<str>,
        kv: Namespace,
        policy: &Policy,
        limits: Arc<GuestLimits>,
        metrics: Arc<crate::metrics::PluginMetrics>,
        ws: Option<WsLink>,
        http_hooks: super::outbound::HttpHooks,
    ) -> Self {
        let tags = LogTags::new(plugin);
        let (monotonic, wall) = super::clocks::at_resolution(limits.clock_resolution);
        let mut builder = WasiCtxBuilder::new();
        builder
            .monotonic_clock(monotonic)
            .wall_clock(wall)
            .stdout(GuestOutput::stdout(tags.clone()))
            .stderr(GuestOutput::stderr(tags.clone()))
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .envs(&policy.env);
        for dir in &policy.dirs {
            let perms = if dir.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            if let Err(e) = builder.preopened_dir(&dir.host, &dir.guest, perms) {
                tracing::warn!(plugin = %tags.plugin, dir = %dir.host.display(), "cannot grant directory: {e}");
            }
        }
        // Outbound TCP only to the addresses the policy lists; none by default.
        let allowed: Arc<[std::net::SocketAddr]> = policy.network.clone().into();
        builder.allow_tcp(!allowed.is_empty());
        builder.socket_addr_check(move |addr, use_| {
            let ok = match use_ {
                SocketAddrUse::TcpConnect => allowed.contains(&addr),
                // The implicit bind of an outgoing connection (wildcard address, any port).
                SocketAddrUse::TcpBind => {
                    !allowed.is_empty() && addr.ip().is_unspecified() && addr.port() == 0
                }
                _ => false,
            };
            Box::pin(async move { ok })
        });
        let wasi = builder.build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.table_entries);
        HostState {
            wasi,
            table,
            memory: MemoryCap::new(limits.memory_bytes, metrics),
            budget: CpuBudget::new(limits.cpu_deadline),
            watch: Watch::new(limits.handler_timeout),
            kv,
            limits,
            tags,
            call: None,
            ws,
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            http_hooks,
        }
    }

    fn plugin(&self) -> &str {
        &self.tags.plugin
    }

    /// The instance's resource table.
    pub(super) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// The resource table and the call's watch, borrowed together (a bounded wait needs both).
    pub(super) fn table_and_watch(&mut self) -> (&mut ResourceTable, &mut Watch) {
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

/// Caps the linear memory of an instance, and remembers that the cap was hit so the failure
/// can be reported as such rather than as a generic trap. Counts the instance's memory in the
/// plugin's `ankh_plugin_instance_memory_bytes` while the store lives.
#[derive(Debug)]
pub struct MemoryCap {
    pub limit_bytes: usize,
    pub hit: bool,
    /// Linear memory of the instance now, all its memories together.
    pub bytes: usize,
    metrics: Arc<crate::metrics::PluginMetrics>,
}

impl MemoryCap {
    fn new(limit_bytes: usize, metrics: Arc<crate::metrics::PluginMetrics>) -> Self {
        MemoryCap {
            limit_bytes,
            hit: false,
            bytes: 0,
            metrics,
        }
    }
}

impl Drop for MemoryCap {
    fn drop(&mut self) {
        self.metrics
            .instance_memory_bytes
            .fetch_sub(self.bytes as i64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The error that stops a guest at its memory cap.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {limit_bytes} bytes reached (wanted {desired_bytes})")]
pub struct MemoryCapReached {
    pub limit_bytes: usize,
    pub desired_bytes: usize,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.metrics.memory(desired);
        if desired > self.limit_bytes {
            self.hit = true;
            return Err(wasmtime::Error::new(MemoryCapReached {
                limit_bytes: self.limit_bytes,
                desired_bytes: desired,
            }));
        }
        let grown = desired.saturating_sub(current);
        self.bytes += grown;
        self.metrics
            .instance_memory_bytes
            .fetch_add(grown as i64, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The CPU time a call may use. Checked on every epoch tick that finds the guest running: the
/// thread's CPU clock is read then, so time the guest spends blocked in the host (a sleep, a
/// database call) is not charged.
#[derive(Debug)]
pub struct CpuBudget {
    pub deadline: Duration,
    used: Duration,
    /// The thread's CPU clock at the previous tick of this call.
    last: Option<Duration>,
    pub exceeded: bool,
}

impl CpuBudget {
    fn new(deadline: Duration) -> Self {
        CpuBudget {
            deadline,
            used: Duration::ZERO,
            last: None,
            exceeded: false,
        }
    }

    /// Starts a new call with a full budget. Costs no system call.
    pub fn reset(&mut self) {
        self.used = Duration::ZERO;
        self.last = None;
        self.exceeded = false;
    }

    /// The call resumes after a wait in which the worker may have run other calls: their CPU
    /// time is not this call's. The next tick charges from now.
    pub fn resumed(&mut self) {
        if self.last.is_some() {
            self.last = Some(ThreadTime::now().as_duration());
        }
    }

    /// The call yielded its thread at a tick (see [`super::guest_limits::configure_store`]):
    /// the next tick that finds it running charges one whole tick, as at the start of a call.
    pub fn yielded(&mut self) {
        self.last = None;
    }

    /// Called on an epoch tick while the guest runs; returns false once the budget is spent.
    /// The CPU used before the first tick of a call is counted as one whole tick.
    pub fn tick(&mut self, tick: Duration) -> bool {
        let now = ThreadTime::now().as_duration();
        self.used += match self.last {
            Some(last) => now.saturating_sub(last),
            None => tick,
        };
        self.last = Some(now);
        if self.used >= self.deadline {
            self.exceeded = true;
        }
        !self.exceeded
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    /// One line per call, whatever the plugin wrote: newlines and other control characters
    /// are escaped (a plugin cannot forge a line of the host's log), and a message over
    /// [`GuestLimits::log_message_bytes`] is cut, saying how long it was.
    fn log(&mut self, level: LogLevel, message: String, fields: Vec<(String, String)>) {
        let plugin = self.plugin();
        let request = format_args!("{:016x}", self.tags.request());
        let cap = self.limits.log_message_bytes;
        let message = super::stdio::printable(&message, cap);
        let mut budget = cap;
        let fields = fields
            .iter()
            .map_while(|(k, v)| {
                let field = format!(
                    "{}={:?}",
                    super::stdio::printable(k, budget),
                    super::stdio::printable(v, budget)
                );
                budget = budget.checked_sub(field.len())?;
                Some(field)
            })
            .collect::<Vec<_>>()
            .join(" ");
        match level {
            LogLevel::Trace => {
                tracing::trace!(target: "ankh::plugin", plugin, %request, %fields, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "ankh::plugin", plugin, %request, %fields, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "ankh::plugin", plugin, %request, %fields, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "ankh::plugin", plugin, %request, %fields, "{message}")
            }
            LogLevel::Error => {
                tracing::error!(target: "ankh::plugin", plugin, %request, %fields, "{message}")
            }
        }
    }
}

impl http::Host for HostState {
    fn respond(&mut self, response: types::Response) -> Result<(), RespondError> {
        let call = self.call.as_mut().ok_or(RespondError::NoRequest)?;
        let headers: Vec<_> = response
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect();
        call.respond(response.status, &headers, &response.body)
            .map_err(|_| RespondError::AlreadyResponded)
    }
}

/// A plugin's message, ready to be shared by every connection it goes to.
fn to_outbound(message: Message) -> Outbound {
    match message {
        Message::Text(text) => Outbound::text(text),
        Message::Binary(bytes) => Outbound::binary(bytes),
    }
}

fn message_len(message: &Message) -> usize {
    match message {
        Message::Text(text) => text.len(),
        Message::Binary(bytes) => bytes.len(),
    }
}

/// The longest close reason: a Close frame's payload is at most 125 bytes, two of them the
/// code (RFC 6455 §5.5).
const MAX_CLOSE_REASON_BYTES: usize = 123;

/// Close codes an endpoint may send (RFC 6455 §7.4 and the IANA registry): the defined ones
/// except those reserved for reporting (1005, 1006, 1015), and 3000-4999 for applications.
pub fn sendable_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

impl From<SubscribeError> for WsError {
    fn from(e: SubscribeError) -> Self {
        match e {
            SubscribeError::Closed => WsError::Closed,
            SubscribeError::TooLarge => WsError::TooLarge,
        }
    }
}

impl HostState {
    fn ws_link(&self) -> Result<&WsLink, WsError> {
        self.ws.as_ref().ok_or(WsError::Unsupported)
    }

    /// Where `conn` lives, if it is an open connection of this plugin: on an event loop of
    /// this process, or on another process of the cluster. `closed` otherwise, whether it is
    /// closed, never existed, or belongs to another plugin.
    fn own_connection(&self, conn: ConnectionId) -> Result<Place<'_>, WsError> {
        let link = self.ws_link()?;
        if let Some(home) = link.hub.home_for(conn, &self.tags.plugin) {
            return Ok(Place::Here(&*link.out, home));
        }
        match &link.cluster {
            // Only another process's id can be open elsewhere; whether it is, Redis answers.
            Some(cluster) if crate::message::node_of(conn) != link.hub.node() => {
                Ok(Place::Elsewhere(cluster))
            }
            _ => Err(WsError::Closed),
        }
    }
}

/// Where a connection lives.
enum Place<'a> {
    /// On event loop `.1` of this process.
    Here(&'a dyn WsOut, usize),
    /// On another process of the cluster (if it is open at all).
    Elsewhere(&'a crate::cluster::Cluster),
}

/// Sending goes through the I/O thread, which owns the sockets. Every operation is confined
/// to this plugin's own connections and topics.
impl websocket::Host for HostState {
    async fn send(&mut self, conn: ConnectionId, message: Message) -> Result<(), WsError> {
        self.ws_link()?;
        if message_len(&message) > self.limits.ws_max_message_bytes {
            return Err(WsError::TooLarge);
        }
        match self.own_connection(conn)? {
            Place::Here(out, home) => out.send(home, conn, to_outbound(message)),
            Place::Elsewhere(cluster) => {
                if !cluster
                    .send(&self.tags.plugin, conn, to_outbound(message))
                    .await
                {
                    return Err(WsError::Closed);
                }
            }
        }
        Ok(())
    }

    /// A code RFC 6455 reserves (0-999, 1004-1006, 1015, 1016-2999, 5000 and up) is refused
    /// with `unsupported`.
    async fn close(
        &mut self,
        conn: ConnectionId,
        code: u16,
        reason: String,
    ) -> Result<(), WsError> {
        self.ws_link()?;
        if !sendable_close_code(code) {
            return Err(WsError::Unsupported);
        }
        if reason.len() > MAX_CLOSE_REASON_BYTES {
            return Err(WsError::TooLarge);
        }
        match self.own_connection(conn)? {
            Place::Here(out, home) => out.close(home, conn, code, reason),
            Place::Elsewhere(cluster) => {
                if !cluster.close(&self.tags.plugin, conn, code, reason).await {
                    return Err(WsError::Closed);
                }
            }
        }
        Ok(())
    }

    fn subscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        let link = self.ws_link()?;
        let limits = &self.limits;
        let caps = (
            limits.ws_max_topic_bytes,
            limits.ws_max_topics_per_connection,
        );
        Ok(link.hub.subscribe(&self.tags.plugin, conn, &topic, caps)?)
    }

    fn unsubscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        let link = self.ws_link()?;
        Ok(link.hub.unsubscribe(&self.tags.plugin, conn, &topic)?)
    }

    /// One copy of the message, shared by every subscriber's queue, and one reply to each event
    /// loop for its subscribers: every subscriber of a topic sees its messages in one order.
    /// In a cluster, then once to Redis for the other processes' subscribers: the answer adds
    /// the processes that received it.
    async fn publish(&mut self, topic: String, message: Message) -> Result<u32, WsError> {
        let link = self.ws_link()?;
        // A topic no connection can subscribe to has no subscribers anywhere; refusing it keeps
        // a long name from reaching Redis as a channel.
        if message_len(&message) > self.limits.ws_max_message_bytes
            || topic.len() > self.limits.ws_max_topic_bytes
        {
            return Err(WsError::TooLarge);
        }
        let subscribers = link.hub.subscribers(&self.tags.plugin, &topic);
        let mut count = u32::try_from(subscribers.len()).unwrap_or(u32::MAX);
        let message = to_outbound(message);
        if !subscribers.is_empty() {
            link.out.publish(subscribers, message.clone());
        }
        if let Some(cluster) = &link.cluster {
            let elsewhere = cluster.publish(&self.tags.plugin, &topic, message).await;
            count = count.saturating_add(elsewhere);
        }
        Ok(count)
    }
}
