//! A plugin built against `ankh:plugin@0.1.0` (the frozen `wit/legacy/ankh-plugin-0.1.0.wit`),
//! with wit-bindgen directly and no SDK: the fixture that shows a 0.1.0 plugin still loads and
//! works on a host whose current world is newer. It is kept as source (built `.wasm` files are
//! never committed), bound to the frozen WIT, so what it builds is a 0.1.0 component.
//!
//! - `GET /legacy010/set?key=K&value=V` → `ok`, or the kv error
//! - `GET /legacy010/get?key=K` → the value, or `404`
//! - `GET /legacy010/incr?key=K` → the new value
//! - `GET /legacy010/list?prefix=P` → the keys, comma-separated
//! - `GET /legacy010/del?key=K` → `true` or `false`
//! - `GET /legacy010/early` → answers through `http.respond`, then logs `after respond`
//! - `GET /legacy010/ws` → a WebSocket that echoes every message

wit_bindgen::generate!({
    path: "../../../wit/legacy/ankh-plugin-0.1.0.wit",
    world: "plugin",
});

use ankh::plugin::types::{Header, LogLevel, Message, Outcome, Request, Response, Upgrade};
use ankh::plugin::{http, kv, log, websocket};

struct Legacy;

fn query<'a>(req: &'a Request, name: &str) -> &'a str {
    req.query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or("")
}

fn text(status: u16, body: impl Into<String>) -> Response {
    Response {
        status,
        headers: vec![Header {
            name: "content-type".into(),
            value: b"text/plain".to_vec(),
        }],
        body: body.into().into_bytes(),
    }
}

impl exports::ankh::plugin::handler::Guest for Legacy {
    fn handle_request(req: Request) -> Outcome {
        let route = req.path.strip_prefix(&req.mount).unwrap_or(&req.path);
        let response = match route {
            "/set" => match kv::set(query(&req, "key"), query(&req, "value").as_bytes()) {
                Ok(()) => text(200, "ok"),
                Err(e) => text(507, format!("{e:?}")),
            },
            "/get" => match kv::get(query(&req, "key")) {
                Some(v) => text(200, String::from_utf8_lossy(&v)),
                None => text(404, "absent"),
            },
            "/incr" => match kv::increment(query(&req, "key"), 1) {
                Ok(n) => text(200, n.to_string()),
                Err(e) => text(409, format!("{e:?}")),
            },
            "/list" => text(200, kv::list_keys(query(&req, "prefix")).join(",")),
            "/del" => text(200, kv::delete(query(&req, "key")).to_string()),
            "/early" => {
                let sent = http::respond(&text(200, "early"));
                log::log(
                    LogLevel::Info,
                    "after respond",
                    &[("sent".into(), sent.is_ok().to_string())],
                );
                return Outcome::Done;
            }
            "/ws" => {
                return Outcome::Upgrade(Upgrade {
                    protocol: None,
                    headers: Vec::new(),
                });
            }
            _ => text(404, "not found"),
        };
        Outcome::Respond(response)
    }
}

impl exports::ankh::plugin::websocket_handler::Guest for Legacy {
    fn on_open(_conn: u64, _request: Request) {}

    fn on_message(conn: u64, message: Message) {
        let _ = websocket::send(conn, &message);
    }

    fn on_close(_conn: u64, _info: ankh::plugin::types::CloseInfo) {}
}

export!(Legacy);
