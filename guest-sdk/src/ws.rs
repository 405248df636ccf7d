//! WebSockets: sending to the host's connections, and the [`WebSocketHandler`] trait that
//! receives their events.
//!
//! The host owns every connection. A handler accepts an upgrade by returning
//! [`Outcome::upgrade`](crate::Outcome::upgrade); the connection's events then arrive, in
//! order and never concurrently, at the plugin's `WebSocketHandler` (see
//! [`export_plugin!`](crate::export_plugin)). Sending never blocks the plugin: the host queues
//! the message.

use std::fmt;

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

/// Starts the closing handshake with `code` and `reason` (at most 123 bytes; a longer one is
/// [`WsError::TooLarge`]):
///
/// ```no_run
/// use ankh_guest::ws::{self, CloseCode};
///
/// const KICKED: CloseCode = CloseCode::application(4001).unwrap();
///
/// # let conn = 7;
/// let _ = ws::close(conn, CloseCode::NORMAL, "bye");
/// let _ = ws::close(conn, KICKED, "kicked");
/// ```
pub fn close(conn: ConnectionId, code: CloseCode, reason: &str) -> Result<(), WsError> {
    imports::close(conn, code.as_u16(), reason)
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

/// The status code of a WebSocket close (RFC 6455, section 7.4): one of the registered codes
/// below, or an application's own code from 3000 to 4999.
///
/// Every value is a code the host may send, so [`close`] never refuses one for its value (the
/// host refuses the codes RFC 6455 reserves). Those reserved for reporting (1005 "no status",
/// 1006 "abnormal", 1015 "TLS") appear only in [`CloseInfo::code`], which stays a plain `u16`.
/// The names say what each code means; tungstenite's `CloseCode` variant is given with each
/// for reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseCode(u16);

impl CloseCode {
    /// 1000: the purpose of the connection is fulfilled (tungstenite `Normal`).
    pub const NORMAL: Self = Self(1000);
    /// 1001: the server is going down, or the page is navigated away from (`Away`).
    pub const GOING_AWAY: Self = Self(1001);
    /// 1002: the peer broke the protocol (`Protocol`).
    pub const PROTOCOL_ERROR: Self = Self(1002);
    /// 1003: a kind of message this endpoint does not accept, e.g. binary for a text-only
    /// chat (`Unsupported`).
    pub const UNSUPPORTED: Self = Self(1003);
    /// 1007: a message's content is inconsistent with its type, e.g. text that is not UTF-8
    /// (`Invalid`).
    pub const INVALID_DATA: Self = Self(1007);
    /// 1008: a message violates the endpoint's policy; the generic code when no other fits
    /// (`Policy`).
    pub const POLICY: Self = Self(1008);
    /// 1009: a message is too big to process (`Size`).
    pub const TOO_BIG: Self = Self(1009);
    /// 1010: the client expected an extension the server did not negotiate; a client's code
    /// (`Extension`).
    pub const EXTENSION: Self = Self(1010);
    /// 1011: an unexpected condition kept the server from fulfilling the request (`Error`).
    pub const INTERNAL_ERROR: Self = Self(1011);
    /// 1012: the service is restarting (`Restart`).
    pub const RESTART: Self = Self(1012);
    /// 1013: a temporary condition, e.g. overload; try again later (`Again`).
    pub const TRY_AGAIN: Self = Self(1013);
    /// 1014: acting as a gateway, the server got an invalid response upstream.
    pub const BAD_GATEWAY: Self = Self(1014);

    /// The lowest code RFC 6455 leaves to libraries, frameworks and applications.
    const APPLICATION_MIN: u16 = 3000;
    /// The highest one (4000-4999 are for private use).
    const APPLICATION_MAX: u16 = 4999;

    /// An application's own code: `Some` for 3000 to 4999 (3000-3999 are registered with
    /// IANA by libraries and frameworks, 4000-4999 are for private use), `None` otherwise.
    ///
    /// A `const fn`, so a plugin's codes can be constants, checked when it compiles:
    ///
    /// ```
    /// use ankh_guest::ws::CloseCode;
    ///
    /// const KICKED: CloseCode = CloseCode::application(4001).unwrap();
    /// assert_eq!(KICKED.as_u16(), 4001);
    /// ```
    pub const fn application(code: u16) -> Option<Self> {
        if code >= Self::APPLICATION_MIN && code <= Self::APPLICATION_MAX {
            Some(Self(code))
        } else {
            None
        }
    }

    /// The code as sent on the wire.
    pub const fn as_u16(self) -> u16 {
        self.0
    }
}

/// Any code the host sends: a registered one (1000-1003, 1007-1014) or an application's
/// (3000-4999). Every other code is [`WsError::Unsupported`], as the host would answer it.
impl TryFrom<u16> for CloseCode {
    type Error = WsError;

    fn try_from(code: u16) -> Result<Self, WsError> {
        match code {
            1000..=1003 | 1007..=1014 => Ok(Self(code)),
            _ => Self::application(code).ok_or(WsError::Unsupported),
        }
    }
}

impl From<CloseCode> for u16 {
    fn from(code: CloseCode) -> u16 {
        code.0
    }
}

impl fmt::Display for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Receives the events of the plugin's WebSocket connections. Every function defaults to
/// doing nothing.
///
/// The functions take no `self`: there is no handler value to keep anything in. A plugin runs
/// as several instances (one per worker, each replaced after a trap), and the events of one
/// connection may reach different instances, so a field, a `static` or a thread-local would
/// see only part of a connection's life. State belongs where every instance sees it:
///
/// - what the plugin must remember about a connection (a user name, the room it joined) in
///   the [`kv`](crate::kv) store, under a key made from its [`ConnectionId`], written in
///   `on_open` and deleted in `on_close`;
/// - who should receive a message in topics: [`subscribe`] the connection in `on_open`, and
///   [`publish`] to reach every subscriber, on whichever instance or process it lives.
///
/// ```
/// use ankh_guest::prelude::*;
///
/// struct Chat;
///
/// impl WebSocketHandler for Chat {
///     fn on_open(conn: ws::ConnectionId, _request: &Request) {
///         let _ = ws::subscribe(conn, "lobby");
///     }
///
///     fn on_message(_conn: ws::ConnectionId, message: ws::Message) {
///         let _ = ws::publish("lobby", &message);
///     }
/// }
/// # fn router() -> Router { Router::new().get("/", |_req| Outcome::upgrade()) }
/// # ankh_guest::export_plugin!(router, websocket = Chat);
/// ```
pub trait WebSocketHandler {
    /// The connection was upgraded; `request` is the request that asked for it.
    fn on_open(conn: ConnectionId, request: &Request) {
        let _ = (conn, request);
    }

    /// A complete data message arrived.
    fn on_message(conn: ConnectionId, message: Message) {
        let _ = (conn, message);
    }

    /// The connection ended (exactly once per connection).
    fn on_close(conn: ConnectionId, info: CloseInfo) {
        let _ = (conn, info);
    }
}

/// The handler of a plugin that does not use WebSockets: ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoWebSocket;

impl WebSocketHandler for NoWebSocket {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes() {
        assert_eq!(CloseCode::NORMAL.as_u16(), 1000);
        assert_eq!(u16::from(CloseCode::INTERNAL_ERROR), 1011);
        assert_eq!(CloseCode::application(3000).map(u16::from), Some(3000));
        assert_eq!(CloseCode::application(4999).map(u16::from), Some(4999));
        for outside in [0, 1000, 2999, 5000, u16::MAX] {
            assert_eq!(CloseCode::application(outside), None, "{outside}");
        }
        assert_eq!(CloseCode::try_from(1003), Ok(CloseCode::UNSUPPORTED));
        assert_eq!(CloseCode::try_from(1014), Ok(CloseCode::BAD_GATEWAY));
        assert_eq!(
            CloseCode::try_from(4001),
            CloseCode::application(4001).ok_or(WsError::Unsupported)
        );
        // What the host refuses to send (`host/src/runtime/host/websocket.rs`), the SDK refuses to build.
        for reserved in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, u16::MAX] {
            assert_eq!(
                CloseCode::try_from(reserved),
                Err(WsError::Unsupported),
                "{reserved}"
            );
        }
        assert_eq!(CloseCode::POLICY.to_string(), "1008");
    }
}
