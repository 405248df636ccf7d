//! A plugin whose `ankh:plugin/packed-handler@0.2.0` export has the wrong signature: the host
//! must refuse it at load, saying so, rather than call it or fall back silently.

wit_bindgen::generate!({
    path: "wit",
    world: "bad",
});

use exports::ankh::plugin::{handler, packed_handler, websocket_handler};

struct Bad;

impl handler::Guest for Bad {
    fn handle_request(_request: handler::Request) -> handler::Outcome {
        handler::Outcome::Done
    }
}

impl websocket_handler::Guest for Bad {
    fn on_open(_conn: u64, _request: websocket_handler::Request) {}
    fn on_message(_conn: u64, _message: websocket_handler::Message) {}
    fn on_close(_conn: u64, _info: websocket_handler::CloseInfo) {}
}

impl packed_handler::Guest for Bad {
    fn handle_request(head: String) -> u32 {
        head.len() as u32
    }
}

export!(Bad);
