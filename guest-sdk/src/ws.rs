//! WebSockets: sending to the host's connections, and the [`WebSocketHandler`] trait that
//! receives their events.
//!
//! The host owns every connection. A handler accepts an upgrade by returning
//! [`Outcome::upgrade`](crate::Outcome::upgrade); the connection's events then arrive, in
//! order and never concurrently, at the plugin's `WebSocketHandler` (see
//! [`export_plugin!`](crate::export_plugin)). Sending never blocks the plugin: the host queues
//! the message.

use crate::Request;
use crate::bindings::ankh::plugin::websocket as imports;

pub use crate::wit::{CloseInfo, ConnectionId, Message, WsError};

/// Sends `message` to `conn`. When several ankh processes share a Redis (`--pubsub`),
/// `conn` may live on any of them; [`WsError::Closed`] if it is closed, or not this plugin's.
pub fn send(conn: ConnectionId, message: &Message) -> Result<(), WsError> {
    imports::send(conn, message)
}

/// Sends a text message to `conn`.
pub fn send_text(conn: ConnectionId, text: &str) -> Result<(), WsError> {
    send(conn, &Message::Text(text.to_owned()))
}

/// Sends a binary message to `conn`.
pub fn send_binary(conn: ConnectionId, bytes: &[u8]) -> Result<(), WsError> {
    send(conn, &Message::Binary(bytes.to_vec()))
}

/// Starts the closing handshake with `code` (1000-1003, 1007-1014 or 3000-4999; the codes RFC
/// 6455 reserves are refused with [`WsError::Unsupported`]) and `reason` (at most 123 bytes).
pub fn close(conn: ConnectionId, code: u16, reason: &str) -> Result<(), WsError> {
    imports::close(conn, code, reason)
}

/// Subscribes `conn` to `topic`, so that it receives what is [`publish`]ed there.
pub fn subscribe(conn: ConnectionId, topic: &str) -> Result<(), WsError> {
    imports::subscribe(conn, topic)
}

/// Unsubscribes `conn` from `topic`.
pub fn unsubscribe(conn: ConnectionId, topic: &str) -> Result<(), WsError> {
    imports::unsubscribe(conn, topic)
}

/// Sends `message` to every connection subscribed to `topic`; returns how many there were on
/// this process, plus, when several ankh processes share a Redis (`--pubsub`), how many other
/// processes received it (each delivers it to its own subscribers). [`WsError::TooLarge`]
/// for a message over the size limit, or a topic longer than a subscription may name.
pub fn publish(topic: &str, message: &Message) -> Result<u32, WsError> {
    imports::publish(topic, message)
}

/// Receives the events of the plugin's WebSocket connections. Every method defaults to doing
/// nothing.
///
/// One value lives in each plugin instance, created with `Default` on its first event.
/// Instances are per worker and are replaced after a trap, so state that must be seen by every
/// connection belongs in [`kv`](crate::kv) or in topics, not in fields.
pub trait WebSocketHandler {
    /// The connection was upgraded; `request` is the request that asked for it.
    fn on_open(&mut self, conn: ConnectionId, request: &Request) {
        let _ = (conn, request);
    }

    /// A complete data message arrived.
    fn on_message(&mut self, conn: ConnectionId, message: Message) {
        let _ = (conn, message);
    }

    /// The connection ended (exactly once per connection).
    fn on_close(&mut self, conn: ConnectionId, info: CloseInfo) {
        let _ = (conn, info);
    }
}

/// The handler of a plugin that does not use WebSockets: ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoWebSocket;

impl WebSocketHandler for NoWebSocket {}
