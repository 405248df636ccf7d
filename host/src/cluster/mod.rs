//! One application across many processes (`--pubsub`, implied by `--kv redis://`): WebSocket
//! topics and connections that span every ankh process sharing a Redis server.
//!
//! - **Node numbers.** Each process takes a node number from Redis at start (`INCR`), and
//!   connection and request ids carry it in their top bits (see [`crate::message::node_of`]),
//!   so ids are unique across processes and a connection's id names its process. A process
//!   keeps `ankh:node:N` alive (a key that expires [`CLUSTER_NODE_TTL`] after its last
//!   refresh): a process killed with `kill -9` is known to be gone within that time.
//! - **Topics.** A publish reaches the local subscribers at once (as without Redis) and is
//!   `PUBLISH`ed once; every process holds one pattern subscription on `ankh:ps:*`, skips its
//!   own messages and hands the others to its local subscribers, so none is delivered twice.
//!   One publisher's messages on a topic keep their order: a plugin's publishes are `PUBLISH`ed
//!   in the order it made them (each awaits the one before), Redis keeps that order, and the
//!   one subscription delivers them in it. `publish` answers the local subscribers plus the
//!   other processes that received the message (Redis counts receivers, not their
//!   subscribers).
//! - **Connections on other processes.** Each open connection is listed in its plugin's hash
//!   `ankh:ws:{PLUGIN}` (id → node). A send or close for an id that is not local runs one
//!   script that checks the hash and the node's liveness and publishes to that node's channel;
//!   a connection that is closed, never was, is another plugin's, or whose process is gone
//!   answers `closed`, as locally.
//! - **Failures.** Redis pub/sub delivers at most once: a message published while a process's
//!   subscription is down is lost to that process. The subscription is re-made with backoff
//!   and pinged every [`KV_REDIS_PING_INTERVAL`]; `/readyz` reports it while it is down. Every
//!   call is bounded by [`KV_REDIS_TIMEOUT`]; a publish that cannot reach Redis still reaches
//!   the local subscribers.
//!
//! [`KV_REDIS_TIMEOUT`]: crate::limits::KV_REDIS_TIMEOUT
//! [`KV_REDIS_PING_INTERVAL`]: crate::limits::KV_REDIS_PING_INTERVAL
//! [`CLUSTER_NODE_TTL`]: crate::limits::CLUSTER_NODE_TTL

pub(crate) mod wire;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;

use self::wire::{Body, Envelope};
use crate::hub::{Hub, Roster};
use crate::kv::redis::{client_runtime, display_url, manager_config};
use crate::limits::{
    CLUSTER_NODE_TTL, CLUSTER_ROSTER_BATCH, CLUSTER_ROSTER_QUEUE, KV_REDIS_PING_INTERVAL,
    KV_REDIS_TIMEOUT,
};
use crate::message::{NODE_BITS, Outbound, WsId, WsOut};

/// Every channel ankh publishes on starts with this; each process subscribes to `PREFIX*`.
const PREFIX: &str = "ankh:ps:";

/// The next node number.
const NODES: &str = "ankh:nodes";

/// A send or close for a connection on another process: `KEYS[1]` the plugin's hash of
/// connections, `ARGV[1]` the id, `ARGV[2]` the message. Answers 1 when published to the
/// connection's process, 0 when there is no such connection or its process is gone.
const ROUTE: &str = r"
local node = redis.call('HGET', KEYS[1], ARGV[1])
if not node then return 0 end
if redis.call('EXISTS', 'ankh:node:' .. node) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
redis.call('PUBLISH', 'ankh:ps:n:' .. node, ARGV[2])
return 1
";

/// Why cross-process WebSockets could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClusterError {
    #[error("{url:?} is not a Redis URL: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot reach the pub/sub Redis at {target}: {reason}")]
    Unreachable { target: String, reason: String },
    #[error("cannot start the pub/sub client's threads: {0}")]
    Runtime(std::io::Error),
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Messages this process published to Redis (publishes, sends and closes).
    pub sent: AtomicU64,
    /// Messages from other processes delivered here.
    pub received: AtomicU64,
    /// Publishes, sends and closes that could not reach Redis.
    pub failed: AtomicU64,
}

/// This process's membership of the cluster.
pub struct Cluster {
    node: u32,
    target: String,
    runtime: tokio::runtime::Runtime,
    connection: ConnectionManager,
    route: Arc<redis::Script>,
    /// Why the subscription is down, for `/readyz`.
    trouble: Arc<Mutex<Option<String>>>,
    pub stats: Arc<ClusterStats>,
    /// Where received messages go, once the hub and the loops exist.
    delivery: Arc<OnceLock<Delivery>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.node)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// The local side of delivery.
struct Delivery {
    hub: Arc<Hub>,
    out: Arc<dyn WsOut>,
}

impl Cluster {
    /// Joins the cluster at `url`: takes a node number, and starts keeping it alive and
    /// listening for other processes' messages.
    pub(crate) fn join(url: &str) -> Result<Arc<Cluster>, ClusterError> {
        let target = display_url(url);
        let client = redis::Client::open(url).map_err(|e| ClusterError::Url {
            url: target.clone(),
            reason: e.to_string(),
        })?;
        let runtime = client_runtime("ankh-pubsub").map_err(ClusterError::Runtime)?;
        let unreachable = |e: redis::RedisError| ClusterError::Unreachable {
            target: target.clone(),
            reason: e.to_string(),
        };
        let (mut connection, node) = runtime
            .block_on(async {
                let mut connection = client
                    .get_connection_manager_with_config(manager_config())
                    .await?;
                let n: u64 = redis::cmd("INCR")
                    .arg(NODES)
                    .query_async(&mut connection)
                    .await?;
                // 1 up to the largest the id's bits hold; 0 is a process without a cluster.
                let node = (n - 1) % ((1u64 << NODE_BITS) - 1) + 1;
                Ok::<_, redis::RedisError>((connection, node as u32))
            })
            .map_err(unreachable)?;
        runtime
            .block_on(keep_alive_once(&mut connection, node))
            .map_err(unreachable)?;
        let cluster = Arc::new(Cluster {
            node,
            target: target.clone(),
            runtime,
            connection: connection.clone(),
            route: Arc::new(redis::Script::new(ROUTE)),
            trouble: Arc::new(Mutex::new(Some("not subscribed yet".to_owned()))),
            stats: Arc::default(),
            delivery: Arc::default(),
        });
        cluster.runtime.spawn(keep_alive(connection, node));
        cluster.runtime.spawn(listen(
            client,
            node,
            cluster.delivery.clone(),
            cluster.trouble.clone(),
            cluster.stats.clone(),
        ));
        tracing::info!(node, redis = %target, "joined the cluster: WebSocket topics and connections span every process sharing it");
        Ok(cluster)
    }

    /// This process's node number (at least 1).
    pub(crate) fn node(&self) -> u32 {
        self.node
    }

    /// The roster the hub reports opened and closed connections to.
    pub(crate) fn roster(&self) -> Arc<dyn Roster> {
        let (tx, rx) = mpsc::channel(CLUSTER_ROSTER_QUEUE);
        self.runtime
            .spawn(write_roster(self.connection.clone(), self.node, rx));
        Arc::new(RosterTx { tx })
    }

    /// Starts delivering other processes' messages to the local connections of `hub`
    /// through `out`.
    pub(crate) fn deliver_to(&self, hub: Arc<Hub>, out: Arc<dyn WsOut>) {
        let _ = self.delivery.set(Delivery { hub, out });
    }

    /// Why other processes' messages cannot reach this one, if they cannot.
    pub(crate) fn trouble(&self) -> Option<String> {
        self.trouble
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .map(|why| format!("pub/sub {}: {why}", self.target))
    }

    /// Publishes `message` on `plugin`'s `topic` to the other processes; answers how many
    /// received it (0 when Redis cannot be reached: the local subscribers have it anyway).
    pub(crate) async fn publish(&self, plugin: &str, topic: &str, message: Outbound) -> u32 {
        let channel = format!("{PREFIX}t:{plugin}:{topic}");
        let payload = Envelope {
            origin: self.node,
            plugin: plugin.to_owned(),
            body: Body::Publish {
                topic: topic.to_owned(),
                message,
            },
        }
        .encode();
        let mut connection = self.connection.clone();
        let answer = self
            .bounded(async move {
                redis::cmd("PUBLISH")
                    .arg(channel)
                    .arg(payload.as_ref())
                    .query_async::<u32>(&mut connection)
                    .await
            })
            .await;
        match answer {
            // This process's own subscription is one of the receivers.
            Ok(receivers) => receivers.saturating_sub(u32::from(self.trouble_free())),
            Err(e) => {
                warn_limited!(
                    plugin,
                    topic,
                    "publish reached only this process's subscribers: {e}"
                );
                0
            }
        }
    }

    /// Sends `message` to connection `ws` of `plugin` on another process; `false` when there
    /// is no such connection (or Redis cannot be reached).
    pub(crate) async fn send(&self, plugin: &str, ws: WsId, message: Outbound) -> bool {
        self.route(plugin, ws, Body::Send { ws, message }).await
    }

    /// Closes connection `ws` of `plugin` on another process; `false` as for [`Self::send`].
    pub(crate) async fn close(&self, plugin: &str, ws: WsId, code: u16, reason: String) -> bool {
        self.route(plugin, ws, Body::Close { ws, code, reason })
            .await
    }

    async fn route(&self, plugin: &str, ws: WsId, body: Body) -> bool {
        let payload = Envelope {
            origin: self.node,
            plugin: plugin.to_owned(),
            body,
        }
        .encode();
        let (mut connection, route) = (self.connection.clone(), self.route.clone());
        let key = roster_key(plugin);
        let answer = self
            .bounded(async move {
                route
                    .key(key)
                    .arg(ws)
                    .arg(payload.as_ref())
                    .invoke_async::<u32>(&mut connection)
                    .await
            })
            .await;
        match answer {
            Ok(routed) => routed == 1,
            Err(e) => {
                warn_limited!(
                    plugin,
                    "a message for a connection on another process was lost: {e}"
                );
                false
            }
        }
    }

    /// Runs `work` on the cluster's runtime within [`KV_REDIS_TIMEOUT`], counting it.
    async fn bounded<T: Send + 'static>(
        &self,
        work: impl Future<Output = redis::RedisResult<T>> + Send + 'static,
    ) -> Result<T, String> {
        let task = self
            .runtime
            .spawn(tokio::time::timeout(KV_REDIS_TIMEOUT, work));
        let outcome = match task.await {
            Ok(Ok(Ok(answer))) => Ok(answer),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(_)) => Err(format!("no answer within {KV_REDIS_TIMEOUT:?}")),
            Err(e) => Err(e.to_string()),
        };
        let counter = if outcome.is_ok() {
            &self.stats.sent
        } else {
            &self.stats.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        outcome
    }

    /// The cluster's lines of `/metrics` (Prometheus text).
    pub(crate) fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = write!(
            out,
            "# HELP ankh_cluster_node This process's node number in the cluster.\n\
             # TYPE ankh_cluster_node gauge\n\
             ankh_cluster_node {}\n\
             # HELP ankh_cluster_messages_total Messages between processes through Redis: publishes, sends and closes this process sent (out) or delivered from others (in).\n\
             # TYPE ankh_cluster_messages_total counter\n\
             ankh_cluster_messages_total{{direction=\"out\"}} {}\n\
             ankh_cluster_messages_total{{direction=\"in\"}} {}\n\
             # HELP ankh_cluster_errors_total Publishes, sends and closes that could not reach Redis.\n\
             # TYPE ankh_cluster_errors_total counter\n\
             ankh_cluster_errors_total {}\n\
             # HELP ankh_cluster_subscribed Whether this process's subscription to other processes' messages is up.\n\
             # TYPE ankh_cluster_subscribed gauge\n\
             ankh_cluster_subscribed {}\n",
            self.node,
            read(&self.stats.sent),
            read(&self.stats.received),
            read(&self.stats.failed),
            u8::from(self.trouble_free()),
        );
    }

    fn trouble_free(&self) -> bool {
        self.trouble
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}

/// The hash listing `plugin`'s open connections (id → node).
fn roster_key(plugin: &str) -> String {
    format!("ankh:ws:{{{plugin}}}")
}

/// Refreshes this node's liveness key.
async fn keep_alive_once(connection: &mut ConnectionManager, node: u32) -> redis::RedisResult<()> {
    redis::cmd("SET")
        .arg(format!("ankh:node:{node}"))
        .arg(std::process::id())
        .arg("PX")
        .arg(CLUSTER_NODE_TTL.as_millis() as u64)
        .query_async::<()>(connection)
        .await
}

/// Keeps this node alive while the process runs.
async fn keep_alive(mut connection: ConnectionManager, node: u32) {
    loop {
        tokio::time::sleep(KV_REDIS_PING_INTERVAL).await;
        if let Ok(Err(e)) =
            tokio::time::timeout(KV_REDIS_TIMEOUT, keep_alive_once(&mut connection, node)).await
        {
            tracing::debug!(node, "cannot refresh the node's liveness: {e}");
        }
    }
}

/// Opened and closed connections, on their way to Redis.
enum RosterEntry {
    Opened(Arc<str>, WsId),
    Closed(Arc<str>, WsId),
}

/// The hub's side of the roster: a bounded queue to the task that writes it.
#[derive(Debug)]
struct RosterTx {
    tx: mpsc::Sender<RosterEntry>,
}

impl Roster for RosterTx {
    fn opened(&self, owner: &Arc<str>, ws: WsId) {
        if self
            .tx
            .try_send(RosterEntry::Opened(owner.clone(), ws))
            .is_err()
        {
            warn_limited!(plugin = %owner, "the cluster roster is behind: connection {ws} cannot be reached from other processes");
        }
    }

    fn closed(&self, owner: &Arc<str>, ws: WsId) {
        // Should the queue be full, the entry stays until a send finds its node gone or the
        // connection missing.
        let _ = self.tx.try_send(RosterEntry::Closed(owner.clone(), ws));
    }
}

/// Writes the roster in pipelined batches of up to [`CLUSTER_ROSTER_BATCH`] entries: a burst
/// of 100,000 connections is a few hundred round trips, not 100,000.
async fn write_roster(
    mut connection: ConnectionManager,
    node: u32,
    mut rx: mpsc::Receiver<RosterEntry>,
) {
    let mut batch = Vec::with_capacity(CLUSTER_ROSTER_BATCH);
    while rx.recv_many(&mut batch, CLUSTER_ROSTER_BATCH).await > 0 {
        let mut pipe = redis::pipe();
        for entry in batch.drain(..) {
            match entry {
                RosterEntry::Opened(plugin, ws) => {
                    pipe.hset(roster_key(&plugin), ws, node).ignore();
                }
                RosterEntry::Closed(plugin, ws) => {
                    pipe.hdel(roster_key(&plugin), ws).ignore();
                }
            }
        }
        let written =
            tokio::time::timeout(KV_REDIS_TIMEOUT, pipe.query_async::<()>(&mut connection)).await;
        if !matches!(written, Ok(Ok(()))) {
            warn_limited!(
                node,
                "cannot write the cluster roster (Redis unreachable?): some connections cannot be reached from other processes"
            );
        }
    }
}

/// Holds the pattern subscription, re-made with backoff whenever it fails, and delivers
/// what arrives.
async fn listen(
    client: redis::Client,
    node: u32,
    delivery: Arc<OnceLock<Delivery>>,
    trouble: Arc<Mutex<Option<String>>>,
    stats: Arc<ClusterStats>,
) {
    let set_trouble = |now: Option<String>| {
        let mut current = trouble.lock().unwrap_or_else(PoisonError::into_inner);
        match (&*current, &now) {
            (None, Some(why)) => tracing::warn!(
                node,
                "pub/sub subscription lost: other processes' messages are not arriving ({why})"
            ),
            (Some(_), None) => tracing::info!(node, "pub/sub subscribed"),
            _ => {}
        }
        *current = now;
    };
    let mut backoff = Duration::from_millis(50);
    loop {
        let why = match subscribe(&client).await {
            Ok((mut sink, mut stream)) => {
                set_trouble(None);
                backoff = Duration::from_millis(50);
                let mut ping = tokio::time::interval(KV_REDIS_PING_INTERVAL);
                loop {
                    tokio::select! {
                        message = stream.next() => match message {
                            Some(message) => {
                                if let Some(d) = delivery.get() {
                                    deliver(d, node, message, &stats);
                                }
                            }
                            None => break "the connection closed".to_owned(),
                        },
                        _ = ping.tick() => {
                            match tokio::time::timeout(KV_REDIS_TIMEOUT, sink.ping::<redis::Value>()).await {
                                Ok(Ok(_)) => {}
                                Ok(Err(e)) => break e.to_string(),
                                Err(_) => break format!("no answer to PING within {KV_REDIS_TIMEOUT:?}"),
                            }
                        }
                    }
                }
            }
            Err(e) => e.to_string(),
        };
        set_trouble(Some(why));
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

async fn subscribe(
    client: &redis::Client,
) -> redis::RedisResult<(redis::aio::PubSubSink, redis::aio::PubSubStream)> {
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.psubscribe(format!("{PREFIX}*")).await?;
        Ok(pubsub.split())
    };
    tokio::time::timeout(KV_REDIS_TIMEOUT, connect)
        .await
        .unwrap_or_else(|_| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "no answer to PSUBSCRIBE",
            )))
        })
}

/// Hands one message from another process to this process's connections.
fn deliver(d: &Delivery, node: u32, message: redis::Msg, stats: &ClusterStats) {
    let envelope =
        match Envelope::decode(bytes::Bytes::copy_from_slice(message.get_payload_bytes())) {
            Ok(e) => e,
            Err(e) => {
                warn_limited!(
                    channel = message.get_channel_name(),
                    "skipped a pub/sub message: {e}"
                );
                return;
            }
        };
    // Its own publishes reached the local subscribers already.
    if envelope.origin == node {
        return;
    }
    let plugin = envelope.plugin;
    match envelope.body {
        Body::Publish { topic, message } => {
            let subscribers = d.hub.subscribers(&plugin, &topic);
            if !subscribers.is_empty() {
                d.out.publish(subscribers, message);
            }
        }
        Body::Send { ws, message } => {
            if let Some(home) = d.hub.home_for(ws, &plugin) {
                d.out.send(home, ws, message);
            }
        }
        Body::Close { ws, code, reason } => {
            if let Some(home) = d.hub.home_for(ws, &plugin) {
                d.out.close(home, ws, code, reason);
            }
        }
    }
    stats.received.fetch_add(1, Ordering::Relaxed);
}
