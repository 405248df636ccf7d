//! A plugin whose `packed-handler.handle` returns answers that break the layout of
//! `wit/plugin.wit`, one per path: the host must answer each with a 500 that names the fault,
//! keep the instance, and go on serving. `/good` returns a well-formed packed answer, and the
//! record entry points answer differently, so a test sees which one the host called.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "sdk-plugin",
    generate_all,
});

use exports::ankh::plugin::{handler, packed_handler, scheduled, websocket_handler};

struct Bad;

impl handler::Guest for Bad {
    fn handle_request(_request: handler::Request) -> handler::Outcome {
        handler::Outcome::Respond(ankh::plugin::types::Response {
            status: 200,
            headers: Vec::new(),
            body: b"record".to_vec(),
        })
    }
}

impl scheduled::Guest for Bad {
    fn run(_job: scheduled::Job) -> Result<(), String> {
        Err("no jobs".into())
    }
}

impl websocket_handler::Guest for Bad {
    fn on_open(_conn: u64, _request: websocket_handler::Request) {}
    fn on_message(_conn: u64, _message: websocket_handler::Message) {}
    fn on_close(_conn: u64, _info: websocket_handler::CloseInfo) {}
}

/// Little-endian length prefix, as the layout writes it.
fn len(n: usize) -> [u8; 4] {
    (n as u32).to_le_bytes()
}

/// A `respond` answer with status 200, the given header fields and body.
fn respond(headers: &[(&[u8], &[u8])], body: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 200, 0];
    out.extend_from_slice(&len(headers.len()));
    for (name, value) in headers {
        out.extend_from_slice(&len(name.len()));
        out.extend_from_slice(name);
        out.extend_from_slice(&len(value.len()));
        out.extend_from_slice(value);
    }
    out.extend_from_slice(body);
    out
}

impl packed_handler::Guest for Bad {
    fn handle_request(_head: Vec<u8>, _body: Vec<u8>) -> packed_handler::Outcome {
        packed_handler::Outcome::Respond(ankh::plugin::types::Response {
            status: 200,
            headers: Vec::new(),
            body: b"packed record".to_vec(),
        })
    }

    fn handle(head: Vec<u8>, _body: Vec<u8>) -> Vec<u8> {
        // The path is one of the head's length-prefixed texts; finding it as bytes is enough.
        let path = |p: &str| {
            let mut field = len(p.len()).to_vec();
            field.extend_from_slice(p.as_bytes());
            head.windows(field.len()).any(|w| w == field)
        };
        if path("/badanswer/good") {
            respond(&[(b"x-packed", b"yes")], b"packed answer")
        } else if path("/badanswer/truncated") {
            vec![0, 200]
        } else if path("/badanswer/lie") {
            vec![0, 200, 0, 0xff, 0xff, 0xff, 0x7f]
        } else if path("/badanswer/kind") {
            vec![9]
        } else if path("/badanswer/name") {
            respond(&[(&[0xff, b'x'], b"1")], b"")
        } else if path("/badanswer/value") {
            respond(&[(b"x-split", b"a\r\nx-injected: 1")], b"")
        } else if path("/badanswer/trailing") {
            vec![2, 0]
        } else if path("/badanswer/done") {
            vec![2]
        } else if path("/badanswer/empty") {
            Vec::new()
        } else {
            respond(&[], b"unknown path")
        }
    }
}

export!(Bad);
