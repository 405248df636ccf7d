//! Build: `cargo ankh build`, then open <http://localhost:8080/chat> in two browser tabs.
//!
//! A chat: `GET /chat` serves the page, whose script connects to `/chat/ws?room=R&name=N`.
//! Each room is a topic. A connection subscribes to its room on open, and every message it
//! sends is published to the room as JSON, as are join and leave notices.
//!
//! Events of one connection may be handled by different instances (one per worker), so what
//! the plugin must remember about a connection (its room and name) lives in the key-value
//! store, keyed by the connection id; the handler is a type with no value to keep it in.

use ankh_guest::prelude::*;
use serde_json::json;

const PAGE: &str = include_str!("chat.html");

/// Longest name and message accepted, in characters.
const MAX_NAME_CHARS: usize = 32;
const MAX_TEXT_CHARS: usize = 2000;

/// How long a membership record outlives a server that never closed its connection.
const MEMBERSHIP_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

fn topic(room: &str) -> String {
    format!("room:{room}")
}

fn key(conn: ws::ConnectionId) -> String {
    format!("conn/{conn}")
}

/// Room and name of a connection, as stored at open.
fn member(conn: ws::ConnectionId) -> Option<(String, String)> {
    let stored = kv::get_string(&key(conn)).ok()??;
    let (room, name) = stored.split_once('\n')?;
    Some((room.to_owned(), name.to_owned()))
}

fn publish(room: &str, value: serde_json::Value) {
    let _ = ws::publish(&topic(room), &ws::Message::Text(value.to_string()));
}

struct Chat;

impl WebSocketHandler for Chat {
    fn on_open(conn: ws::ConnectionId, request: &Request) {
        let room = request
            .query_param("room")
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "lobby".to_owned());
        let name: String = request
            .query_param("name")
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| format!("guest{conn}"))
            .chars()
            .take(MAX_NAME_CHARS)
            .collect();
        // Membership lives as long as the connection; the time-to-live cleans up after a
        // server that stopped without closing its connections.
        if kv::set_with_ttl(&key(conn), format!("{room}\n{name}"), MEMBERSHIP_TTL).is_err()
            || ws::subscribe(conn, &topic(&room)).is_err()
        {
            let _ = ws::close(conn, ws::CloseCode::INTERNAL_ERROR, "cannot join");
            return;
        }
        publish(&room, json!({"type": "join", "name": name, "room": room}));
    }

    fn on_message(conn: ws::ConnectionId, message: ws::Message) {
        let ws::Message::Text(text) = message else {
            let _ = ws::close(conn, ws::CloseCode::UNSUPPORTED, "text only");
            return;
        };
        let Some((room, name)) = member(conn) else {
            return;
        };
        let text: String = text.chars().take(MAX_TEXT_CHARS).collect();
        publish(
            &room,
            json!({"type": "message", "name": name, "text": text}),
        );
    }

    fn on_close(conn: ws::ConnectionId, _info: ws::CloseInfo) {
        if let Some((room, name)) = member(conn) {
            let _ = kv::delete(&key(conn));
            publish(&room, json!({"type": "leave", "name": name}));
        }
    }
}

fn router() -> Router {
    Router::new()
        .get("/", |_req| Response::html(PAGE))
        .get("/ws", |_req| Outcome::upgrade())
}

ankh_guest::export_plugin!(router, websocket = Chat);
