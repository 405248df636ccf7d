//! Where plugins' WebSocket operations go: the runtime's [`WebSockets`], implemented over the
//! table of open connections ([`Hub`]), the event loops that own the sockets ([`WsOut`]) and,
//! when WebSockets span several processes (`--pubsub`), the [`Cluster`].
//!
//! Every operation is confined to the calling plugin's own connections and topics: a
//! connection that is closed, never existed or is another plugin's answers `closed` alike,
//! here or on another process.

use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::{Either, ready};

use crate::cluster::Cluster;
use crate::hub::{Hub, SubscribeError};
use crate::message::{Outbound, WsId, WsOut, node_of};
use crate::runtime::bindings::types::WsError;
use crate::runtime::host::websocket::{Answer, WebSockets};

/// The server's WebSockets, as plugins reach them.
#[derive(Debug)]
pub struct WsRouter {
    hub: Arc<Hub>,
    out: Arc<dyn WsOut>,
    cluster: Option<Arc<Cluster>>,
}

impl WsRouter {
    /// Operations on the connections of `hub`, sent through `out`, and through `cluster` to
    /// the other processes' when there is one.
    pub fn new(hub: Arc<Hub>, out: Arc<dyn WsOut>, cluster: Option<Arc<Cluster>>) -> Self {
        WsRouter { hub, out, cluster }
    }

    /// The table of this process's open connections.
    pub(crate) fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Where `ws` lives, if it is an open connection of `plugin`: on an event loop of this
    /// process, or possibly on another process of the cluster (whether it is open there, Redis
    /// answers). `None`: closed, never existed, or another plugin's.
    fn place(&self, plugin: &str, ws: WsId) -> Option<Place<'_>> {
        if let Some(home) = self.hub.home_for(ws, plugin) {
            return Some(Place::Here(home));
        }
        match &self.cluster {
            Some(cluster) if node_of(ws) != self.hub.node() => Some(Place::Elsewhere(cluster)),
            _ => None,
        }
    }
}

/// Where a connection lives.
enum Place<'a> {
    /// On this event loop of this process.
    Here(usize),
    /// On another process of the cluster (if it is open at all).
    Elsewhere(&'a Cluster),
}

impl From<SubscribeError> for WsError {
    fn from(e: SubscribeError) -> Self {
        match e {
            SubscribeError::Closed => WsError::Closed,
            SubscribeError::TooLarge => WsError::TooLarge,
        }
    }
}

/// A cluster's answer: delivered, or closed.
fn delivered(sent: bool) -> Result<(), WsError> {
    if sent { Ok(()) } else { Err(WsError::Closed) }
}

impl WebSockets for WsRouter {
    fn send<'a>(&'a self, plugin: &'a str, ws: WsId, message: Outbound) -> Answer<'a, ()> {
        match self.place(plugin, ws) {
            Some(Place::Here(home)) => {
                self.out.send(home, ws, message);
                Either::Left(ready(Ok(())))
            }
            Some(Place::Elsewhere(cluster)) => {
                Either::Right(cluster.send(plugin, ws, message).map(delivered).boxed())
            }
            None => Either::Left(ready(Err(WsError::Closed))),
        }
    }

    fn close<'a>(&'a self, plugin: &'a str, ws: WsId, code: u16, reason: String) -> Answer<'a, ()> {
        match self.place(plugin, ws) {
            Some(Place::Here(home)) => {
                self.out.close(home, ws, code, reason);
                Either::Left(ready(Ok(())))
            }
            Some(Place::Elsewhere(cluster)) => Either::Right(
                cluster
                    .close(plugin, ws, code, reason)
                    .map(delivered)
                    .boxed(),
            ),
            None => Either::Left(ready(Err(WsError::Closed))),
        }
    }

    fn subscribe(
        &self,
        plugin: &str,
        ws: WsId,
        topic: &str,
        caps: (usize, usize),
    ) -> Result<(), WsError> {
        Ok(self.hub.subscribe(plugin, ws, topic, caps)?)
    }

    fn unsubscribe(&self, plugin: &str, ws: WsId, topic: &str) -> Result<(), WsError> {
        Ok(self.hub.unsubscribe(plugin, ws, topic)?)
    }

    /// One copy of the message, shared by every subscriber's queue, and one reply to each
    /// event loop for its subscribers: every subscriber of a topic sees its messages in one
    /// order. In a cluster, then once to Redis for the other processes' subscribers: the
    /// answer adds the processes that received it.
    fn publish<'a>(
        &'a self,
        plugin: &'a str,
        topic: &'a str,
        message: Outbound,
    ) -> Answer<'a, u32> {
        let subscribers = self.hub.subscribers(plugin, topic);
        let here = u32::try_from(subscribers.len()).unwrap_or(u32::MAX);
        let Some(cluster) = &self.cluster else {
            if !subscribers.is_empty() {
                self.out.publish(subscribers, message);
            }
            return Either::Left(ready(Ok(here)));
        };
        if !subscribers.is_empty() {
            self.out.publish(subscribers, message.clone());
        }
        Either::Right(
            cluster
                .publish(plugin, topic, message)
                .map(move |elsewhere| Ok(here.saturating_add(elsewhere)))
                .boxed(),
        )
    }
}
