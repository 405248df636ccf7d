//! A plugin whose `ankh:plugin/packed-handler@0.2.0` exports a correct `handle-request` and a
//! `handle` with the wrong signature: the host must refuse it at load, saying so, rather than
//! call either or fall back silently to `handle-request`.

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
    fn handle_request(_head: Vec<u8>, _body: Vec<u8>) -> packed_handler::Outcome {
        packed_handler::Outcome::Done
    }

    fn handle(head: Vec<u8>) -> Vec<u8> {
        head
    }
}

export!(Bad);
