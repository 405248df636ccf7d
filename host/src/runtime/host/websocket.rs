//! The `websocket` import: a plugin sends to and closes its own connections, subscribes them
//! to its own topics and publishes there.
//!
//! The runtime knows no connection: it checks what a guest asks against the guest's bounds
//! (message size, close code, reason and topic length) and hands the rest to a
//! [`WebSockets`], which the server implements over its table of connections, the event
//! loops that own the sockets and, with `--pubsub`, the other processes.

use futures_util::future::{BoxFuture, Either, Ready};

use crate::message::{Outbound, WsId};
use crate::runtime::bindings::ankh::plugin::websocket;
use crate::runtime::bindings::types::{ConnectionId, Message, WsError};
use crate::runtime::sandbox::store::HostState;

/// An answer that is ready at once (this process) or comes later (another process).
pub type Answer<'a, T> = Either<Ready<Result<T, WsError>>, BoxFuture<'a, Result<T, WsError>>>;

/// Where a plugin's WebSocket operations go. Every operation names the plugin and is
/// confined to its own connections and topics: a connection that is closed, never existed or
/// belongs to another plugin answers [`WsError::Closed`] alike.
pub trait WebSockets: Send + Sync + std::fmt::Debug {
    /// Sends `message` to connection `ws` of `plugin`.
    fn send<'a>(&'a self, plugin: &'a str, ws: WsId, message: Outbound) -> Answer<'a, ()>;
    /// Starts the closing handshake of connection `ws` of `plugin`.
    fn close<'a>(&'a self, plugin: &'a str, ws: WsId, code: u16, reason: String) -> Answer<'a, ()>;
    /// Subscribes connection `ws` of `plugin` to `topic`, within `caps` (the longest topic
    /// name, the most topics one connection may have).
    fn subscribe(
        &self,
        plugin: &str,
        ws: WsId,
        topic: &str,
        caps: (usize, usize),
    ) -> Result<(), WsError>;
    /// Unsubscribes connection `ws` of `plugin` from `topic`.
    fn unsubscribe(&self, plugin: &str, ws: WsId, topic: &str) -> Result<(), WsError>;
    /// Sends `message` to every subscriber of `plugin`'s `topic`; answers how many received
    /// it (the local subscribers, plus the other processes that did).
    fn publish<'a>(&'a self, plugin: &'a str, topic: &'a str, message: Outbound)
    -> Answer<'a, u32>;
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
pub(crate) fn sendable_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

impl HostState {
    fn websockets(&self) -> Result<&dyn WebSockets, WsError> {
        self.ws.as_deref().ok_or(WsError::Unsupported)
    }
}

/// Every operation is confined to this plugin's own connections and topics (the
/// [`WebSockets`] implementation checks ownership; the bounds are checked here).
impl websocket::Host for HostState {
    async fn send(&mut self, conn: ConnectionId, message: Message) -> Result<(), WsError> {
        let ws = self.websockets()?;
        if message_len(&message) > self.limits.ws_max_message_bytes {
            return Err(WsError::TooLarge);
        }
        ws.send(&self.tags.plugin, conn, to_outbound(message)).await
    }

    /// A code RFC 6455 reserves (0-999, 1004-1006, 1015, 1016-2999, 5000 and up) is refused
    /// with `unsupported`.
    async fn close(
        &mut self,
        conn: ConnectionId,
        code: u16,
        reason: String,
    ) -> Result<(), WsError> {
        let ws = self.websockets()?;
        if !sendable_close_code(code) {
            return Err(WsError::Unsupported);
        }
        if reason.len() > MAX_CLOSE_REASON_BYTES {
            return Err(WsError::TooLarge);
        }
        ws.close(&self.tags.plugin, conn, code, reason).await
    }

    fn subscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        let ws = self.websockets()?;
        let caps = (
            self.limits.ws_max_topic_bytes,
            self.limits.ws_max_topics_per_connection,
        );
        ws.subscribe(&self.tags.plugin, conn, &topic, caps)
    }

    fn unsubscribe(&mut self, conn: ConnectionId, topic: String) -> Result<(), WsError> {
        self.websockets()?
            .unsubscribe(&self.tags.plugin, conn, &topic)
    }

    /// A topic no connection can subscribe to has no subscribers anywhere; refusing it keeps
    /// a long name from reaching another process as a channel.
    async fn publish(&mut self, topic: String, message: Message) -> Result<u32, WsError> {
        let ws = self.websockets()?;
        if message_len(&message) > self.limits.ws_max_message_bytes
            || topic.len() > self.limits.ws_max_topic_bytes
        {
            return Err(WsError::TooLarge);
        }
        ws.publish(&self.tags.plugin, &topic, to_outbound(message))
            .await
    }
}
