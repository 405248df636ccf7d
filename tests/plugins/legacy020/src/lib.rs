//! A plugin built against `ankh:plugin@0.2.0` (the frozen `wit/legacy/ankh-plugin-0.2.0.wit`),
//! with wit-bindgen directly and no SDK, exporting `packed-handler` as the 0.2 SDK did: the
//! fixture that shows a 0.2.0 plugin still loads, is called through its packed entry point,
//! and works on a host whose current world is 0.3.0. Kept as source, bound to the frozen WIT.
//!
//! - `GET /legacy020/set?key=K&value=V` → `ok`, or the kv error
//! - `GET /legacy020/get?key=K` → the value, or `404`
//! - `GET /legacy020/page?limit=N` → the first N keys, comma-separated, then `|more` when a
//!   cursor came back
//! - `GET /legacy020/bad-ttl` → the error of a time-to-live of 0 (`invalid`)
//! - `GET /legacy020/early` → answers through `http.respond`, then logs `after respond`
//! - `GET /legacy020/ws` → a WebSocket that echoes every message
//! - `GET /legacy020/how` → which export the host called: `packed` or `record`

wit_bindgen::generate!({
    path: "../../../wit/legacy/ankh-plugin-0.2.0.wit",
    world: "sdk-plugin",
});

use ankh::plugin::types::{Header, LogLevel, Message, Outcome, Request, Response, Upgrade};
use ankh::plugin::{http, kv, log, websocket};

struct Legacy;

fn query<'a>(query: &'a str, name: &str) -> &'a str {
    query
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

/// The route below the mount, the query, and how the request came in.
fn handle(route: &str, q: &str, how: &str) -> Outcome {
    let response = match route {
        "/set" => match kv::set(query(q, "key"), query(q, "value").as_bytes(), None) {
            Ok(()) => text(200, "ok"),
            Err(e) => text(507, format!("{e:?}")),
        },
        "/get" => match kv::get(query(q, "key")) {
            Ok(Some(v)) => text(200, String::from_utf8_lossy(&v)),
            Ok(None) => text(404, "absent"),
            Err(e) => text(500, format!("{e:?}")),
        },
        "/page" => {
            let limit = query(q, "limit").parse().unwrap_or(10);
            match kv::list_keys("", None, limit) {
                Ok(page) => {
                    let more = if page.cursor.is_some() { "|more" } else { "" };
                    text(200, format!("{}{more}", page.keys.join(",")))
                }
                Err(e) => text(500, format!("{e:?}")),
            }
        }
        "/bad-ttl" => match kv::set("k", b"v", Some(0)) {
            Ok(()) => text(200, "stored"),
            Err(e) => text(400, format!("{e:?}")),
        },
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
        "/how" => text(200, how),
        _ => text(404, "not found"),
    };
    Outcome::Respond(response)
}

impl exports::ankh::plugin::handler::Guest for Legacy {
    fn handle_request(req: Request) -> Outcome {
        let route = req.path.strip_prefix(&req.mount).unwrap_or(&req.path);
        handle(route, &req.query, "record")
    }
}

/// The head's strings, in order: id, method, path, mount, query, remote address.
fn head_fields(head: &[u8]) -> Vec<String> {
    let mut at = 1;
    let mut fields = Vec::new();
    for _ in 0..6 {
        let len = u32::from_le_bytes(head[at..at + 4].try_into().unwrap()) as usize;
        at += 4;
        fields.push(String::from_utf8_lossy(&head[at..at + len]).into_owned());
        at += len;
    }
    fields
}

fn packed(head: &[u8]) -> Outcome {
    let f = head_fields(head);
    let route = f[2].strip_prefix(&f[3]).unwrap_or(&f[2]);
    handle(route, &f[4], "packed")
}

impl exports::ankh::plugin::packed_handler::Guest for Legacy {
    fn handle_request(head: Vec<u8>, _body: Vec<u8>) -> Outcome {
        packed(&head)
    }

    fn handle(head: Vec<u8>, _body: Vec<u8>) -> Vec<u8> {
        let response = match packed(&head) {
            Outcome::Respond(response) => response,
            // No protocol, no header fields.
            Outcome::Upgrade(_) => return vec![1, 0, 0, 0, 0, 0],
            Outcome::Done => return vec![2],
        };
        let mut out = vec![0];
        out.extend_from_slice(&response.status.to_le_bytes());
        out.extend_from_slice(&(response.headers.len() as u32).to_le_bytes());
        for h in &response.headers {
            out.extend_from_slice(&(h.name.len() as u32).to_le_bytes());
            out.extend_from_slice(h.name.as_bytes());
            out.extend_from_slice(&(h.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&h.value);
        }
        out.extend_from_slice(&response.body);
        out
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
