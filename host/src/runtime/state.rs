//! The data of every plugin `Store`, and the host side of the WIT imports.
//!
//! One `HostState` per instance. It carries the WASI context (nothing granted but clocks,
//! random and captured stdout/stderr), the guest limits (memory cap, CPU budget), the plugin's
//! key-value namespace, and, during a request, the [`CallContext`] that `http.respond` uses.

use std::sync::Arc;
use std::time::Duration;

use cpu_time::ThreadTime;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::ankh::plugin::{http, kv, log, types, websocket};
use super::bindings::types::{ConnectionId, KvError, LogLevel, Message, RespondError, WsError};
use super::call::CallContext;
use super::kv::Namespace;
use super::policy::Policy;
use super::stdio::{GuestOutput, LogTags};
use crate::hub::{Hub, SubscribeError};
use crate::job::{Reply, ReplyTx, WsMessage};

/// What the `websocket` import needs: the shared table of connections, and the queue to the
/// I/O thread that owns them.
#[derive(Debug, Clone)]
pub struct WsLink {
    pub hub: Arc<Hub>,
    pub reply: ReplyTx,
}

/// Store data for one plugin instance.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) budget: CpuBudget,
    kv: Arc<Namespace>,
    pub(crate) tags: Arc<LogTags>,
    /// The request being answered, while `handle-request` runs.
    pub(crate) call: Option<CallContext>,
    /// Absent in stores that serve no traffic (the trial instantiation at load).
    ws: Option<WsLink>,
}

impl HostState {
    pub fn new(
        plugin: Arc<str>,
        kv: Arc<Namespace>,
        policy: &Policy,
        metrics: Arc<crate::metrics::PluginMetrics>,
        ws: Option<WsLink>,
    ) -> Self {
        let tags = LogTags::new(plugin);
        let (memory_bytes, cpu_deadline) = (policy.memory_bytes, policy.cpu_deadline);
        let mut builder = WasiCtxBuilder::new();
        builder
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
        HostState {
            wasi,
            table: ResourceTable::new(),
            memory: MemoryCap::new(memory_bytes, metrics),
            budget: CpuBudget::new(cpu_deadline),
            kv,
            tags,
            call: None,
            ws,
        }
    }

    fn plugin(&self) -> &str {
        &self.tags.plugin
    }

    /// The instance's resource table.
    pub(super) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
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
/// can be reported as such rather than as a generic trap.
#[derive(Debug)]
pub struct MemoryCap {
    pub limit_bytes: usize,
    pub hit: bool,
    metrics: Arc<crate::metrics::PluginMetrics>,
}

impl MemoryCap {
    fn new(limit_bytes: usize, metrics: Arc<crate::metrics::PluginMetrics>) -> Self {
        MemoryCap {
            limit_bytes,
            hit: false,
            metrics,
        }
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
        _current: usize,
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
    fn log(&mut self, level: LogLevel, message: String, fields: Vec<(String, String)>) {
        let plugin = self.plugin();
        let request = format_args!("{:016x}", self.tags.request());
        let fields = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
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

impl kv::Host for HostState {
    fn get(&mut self, key: String) -> Option<Vec<u8>> {
        self.kv.get(&key)
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), KvError> {
        self.kv.set(key, value)
    }

    fn delete(&mut self, key: String) -> bool {
        self.kv.delete(&key)
    }

    fn list_keys(&mut self, prefix: String) -> Vec<String> {
        self.kv.list_keys(&prefix)
    }

    fn increment(&mut self, key: String, delta: i64) -> Result<i64, KvError> {
        self.kv.increment(key, delta)
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

fn to_message(message: Message) -> WsMessage {
    match message {
        Message::Text(text) => WsMessage::Text(text),
        Message::Binary(bytes) => WsMessage::Binary(bytes),
    }
}

fn message_len(message: &Message) -> usize {
    match message {
        Message::Text(text) => text.len(),
        Message::Binary(bytes) => bytes.len(),
    }
}

/// Largest message a plugin may send in one call.
const MAX_OUTBOUND_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

impl From<SubscribeError> for WsError {
    fn from(e: SubscribeError) -> Self {
        match e {
            SubscribeError::Closed => WsError::Closed,
            SubscribeError::TooLarge => WsError::TooLarge,
        }
    }
}

/// Sending goes through the I/O thread, which owns the sockets; an id that is not open is
/// `closed`, and since ids are never reused it can never reach another client.
impl websocket::Host for HostState {
    fn send(&mut self, conn: ConnectionId, message: Message) -> Result<(), WsError> {
        let link = self.ws.as_ref().ok_or(WsError::Unsupported)?;
        if message_len(&message) > MAX_OUTBOUND_MESSAGE_BYTES {
            return Err(WsError::TooLarge);
        }
        if !link.hub.is_open(conn) {
            return Err(WsError::Closed);
        }
        link.reply.send(Reply::Send {
            ws: conn,
            message: to_message(message),
        });
        Ok(())
    }

    fn close(&mut self, conn: ConnectionId, code: u16, reason: String) -> Result<(), WsError> {
        let link = self.ws.as_ref().ok_or(WsError::Unsupported)?;
        if reason.len() > 123 {
            return Err(WsError::TooLarge);
        }
        if !link.hub.is_open(conn) {
            return Err(WsError::Closed);
        }
        link.reply.send(Reply::Close {
            ws: conn,
            code,
            reason,
        });
        Ok(())
    }

    fn subscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        let link = self.ws.as_ref().ok_or(WsError::Unsupported)?;
        Ok(link.hub.subscribe(conn, &topic)?)
    }

    fn unsubscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        let link = self.ws.as_ref().ok_or(WsError::Unsupported)?;
        Ok(link.hub.unsubscribe(conn, &topic)?)
    }

    fn publish(&mut self, topic: String, message: Message) -> Result<u32, WsError> {
        let link = self.ws.as_ref().ok_or(WsError::Unsupported)?;
        if message_len(&message) > MAX_OUTBOUND_MESSAGE_BYTES {
            return Err(WsError::TooLarge);
        }
        let subscribers = link.hub.subscribers(&topic);
        let message = to_message(message);
        for ws in &subscribers {
            link.reply.send(Reply::Send {
                ws: *ws,
                message: message.clone(),
            });
        }
        Ok(u32::try_from(subscribers.len()).unwrap_or(u32::MAX))
    }
}
