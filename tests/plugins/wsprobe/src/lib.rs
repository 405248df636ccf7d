//! WebSocket behaviour probe for the integration tests, mounted at `/wsprobe`.
//!
//! `GET /wsprobe/` (any path) upgrades. Query: `greet=1` sends `First` then `Second` from the
//! open event; `id=1` sends `id:<conn>` first. Every event is appended to the kv key
//! `log/<conn>` (`open;`, `msg:<text>;`, `bin:<len>;`, `close:<code>:<clean>;`), and a kv
//! counter detects two calls for one connection overlapping (`OVERLAP;`).
//! `GET /wsprobe/log?conn=N` returns that log over plain HTTP. `GET /wsprobe/proto` upgrades
//! choosing the subprotocol `superchat` and adding the header `X-Probe: upgraded`.
//!
//! Text commands: `slow:<ms>` sleeps then echoes; `close:<code>` sends `one`, `two`, `three`,
//! then closes with that code (and tries a send after, which the host drops); `sub:<topic>`;
//! `unsub:<topic>`; `pub:<topic>:<text>` answers `published <n>`; `sendto:<id>:<text>` answers
//! `sent` or `error <e>`; `closeto:<id>` closes another connection with 4001 (`closed` or `error
//! <e>`); `big:<n>` sends a binary message of n bytes; `panic` panics.
//! Anything else is echoed; binary messages are echoed too.

use std::time::Duration;

use ankh_guest::prelude::*;

/// The code `closeto:` closes the other connection with.
const CLOSED_BY_ANOTHER: ws::CloseCode = ws::CloseCode::application(4001).unwrap();

fn append(conn: ws::ConnectionId, entry: &str) {
    let key = format!("log/{conn}");
    let mut log = kv::get_string(&key).ok().flatten().unwrap_or_default();
    log.push_str(entry);
    log.push(';');
    let _ = kv::set(&key, log);
}

/// Runs `f` as one event call, recording an overlap if another call for the same connection
/// is running at the same time (on another instance).
fn event(conn: ws::ConnectionId, entry: &str, f: impl FnOnce()) {
    let busy = format!("busy/{conn}");
    if kv::increment(&busy, 1) != Ok(1) {
        append(conn, "OVERLAP");
    }
    append(conn, entry);
    f();
    let _ = kv::increment(&busy, -1);
}

fn text(conn: ws::ConnectionId, text: &str) {
    let _ = ws::send_text(conn, text);
}

struct Probe;

impl WebSocketHandler for Probe {
    fn on_open(conn: ws::ConnectionId, request: &Request) {
        event(conn, "open", || {
            if request.query_param("id").is_some() {
                text(conn, &format!("id:{conn}"));
            }
            if request.query_param("greet").is_some() {
                text(conn, "First");
                text(conn, "Second");
            }
        });
    }

    fn on_message(conn: ws::ConnectionId, message: ws::Message) {
        let message = match message {
            ws::Message::Binary(bytes) => {
                event(conn, &format!("bin:{}", bytes.len()), || {
                    let _ = ws::send_binary(conn, &bytes);
                });
                return;
            }
            ws::Message::Text(t) => t,
        };
        event(conn, &format!("msg:{message}"), || command(conn, &message));
    }

    fn on_close(conn: ws::ConnectionId, info: ws::CloseInfo) {
        event(conn, &format!("close:{}:{}", info.code, info.clean), || {});
    }
}

fn command(conn: ws::ConnectionId, message: &str) {
    let (verb, rest) = message.split_once(':').unwrap_or((message, ""));
    match verb {
        "slow" => {
            std::thread::sleep(Duration::from_millis(rest.parse().unwrap_or(10)));
            text(conn, message);
        }
        "close" => {
            for t in ["one", "two", "three"] {
                text(conn, t);
            }
            // A code the host would refuse closes nothing, as the refused call did.
            if let Ok(code) = ws::CloseCode::try_from(rest.parse().unwrap_or(1000)) {
                let _ = ws::close(conn, code, "bye");
            }
            text(conn, "after close");
        }
        "sub" => {
            let r = ws::subscribe(conn, rest);
            text(conn, &format!("subscribed {}", r.is_ok()));
        }
        "unsub" => {
            let r = ws::unsubscribe(conn, rest);
            text(conn, &format!("unsubscribed {}", r.is_ok()));
        }
        "pub" => {
            let (topic, body) = rest.split_once(':').unwrap_or((rest, ""));
            match ws::publish(topic, &ws::Message::Text(body.to_owned())) {
                Ok(n) => text(conn, &format!("published {n}")),
                Err(e) => text(conn, &format!("error {e:?}")),
            }
        }
        "sendto" => {
            let (id, body) = rest.split_once(':').unwrap_or((rest, ""));
            let id: u64 = id.parse().unwrap_or(0);
            match ws::send_text(id, body) {
                Ok(()) => text(conn, "sent"),
                Err(e) => text(conn, &format!("error {e:?}")),
            }
        }
        "closeto" => {
            let id: u64 = rest.parse().unwrap_or(0);
            match ws::close(id, CLOSED_BY_ANOTHER, "closed by another") {
                Ok(()) => text(conn, "closed"),
                Err(e) => text(conn, &format!("error {e:?}")),
            }
        }
        "big" => {
            let n: usize = rest.parse().unwrap_or(0);
            let bytes: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let _ = ws::send_binary(conn, &bytes);
        }
        "panic" => panic!("wsprobe panicked on purpose"),
        _ => text(conn, message),
    }
}

fn router() -> Router {
    Router::new()
        .get("/log", |req| {
            let conn = req.query_param("conn").unwrap_or_default();
            Response::text(
                kv::get_string(&format!("log/{conn}"))
                    .ok()
                    .flatten()
                    .unwrap_or_default(),
            )
        })
        .get("/proto", |_req| Outcome::Upgrade {
            protocol: Some("superchat".to_owned()),
            headers: vec![("X-Probe".to_owned(), b"upgraded".to_vec())],
        })
        .get("/**", |_req| Outcome::upgrade())
        .get("/", |_req| Outcome::upgrade())
}

ankh_guest::export_plugin!(router, websocket = Probe);
