//! Build: `cargo ankh build`, then connect a WebSocket client to `ws://localhost:8080/wsecho`.
//!
//! Echoes every text and binary message back unchanged. Used for conformance runs (the
//! Autobahn fuzzing client) as well as a minimal example of the WebSocket API.

use ankh_guest::prelude::*;

/// Sends every message straight back on the connection it came from.
struct Echo;

impl WebSocketHandler for Echo {
    fn on_message(conn: ws::ConnectionId, message: ws::Message) {
        // A connection that closed meanwhile is harmless: the send just reports `closed`.
        let _ = ws::send(conn, &message);
    }
}

fn router() -> Router {
    Router::new().get("/", |_req| Outcome::upgrade())
}

ankh_guest::export_plugin!(router, websocket = Echo);
