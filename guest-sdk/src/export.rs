//! What [`export_plugin!`](crate::export_plugin) expands to calls into here: the per-instance
//! router and WebSocket handler, and the conversions between WIT records and SDK types.
//!
//! Not part of the public API (re-exported as the hidden `__private`). A wasm instance runs one
//! call at a time on one thread, so `thread_local!` cells are the whole state: the router is
//! built on the first request and reused by every later request the instance handles.

use std::cell::{OnceCell, RefCell};

use crate::ws::{CloseInfo, ConnectionId, Message, WebSocketHandler};
use crate::{Outcome, Request, Router, wit};

thread_local! {
    static ROUTER: OnceCell<Router> = const { OnceCell::new() };
    static WEBSOCKET: RefCell<Option<Box<dyn WebSocketHandler>>> = const { RefCell::new(None) };
}

/// `handler.handle-request`: builds the router on first use, then dispatches.
pub fn handle_request(build: fn() -> Router, request: wit::Request) -> wit::Outcome {
    route(build, Request::new(request)).into()
}

/// `packed-handler.handle-request`: the same, with the request read from its two buffers.
pub fn handle_packed(build: fn() -> Router, head: Vec<u8>, body: Vec<u8>) -> wit::Outcome {
    run_packed(build, head, body).into()
}

/// `packed-handler.handle`: the same again, with the answer packed into one buffer too.
pub fn handle_packed_answer(build: fn() -> Router, head: Vec<u8>, body: Vec<u8>) -> Vec<u8> {
    crate::packed::encode_outcome(&run_packed(build, head, body))
}

/// Runs the request of a packed head. A head the SDK cannot read (a host bug) is answered with
/// a 500 that says so.
fn run_packed(build: fn() -> Router, head: Vec<u8>, body: Vec<u8>) -> Outcome {
    match crate::packed::Head::decode(head) {
        Ok(head) => route(build, Request::from_packed(head, body)),
        Err(e) => {
            Outcome::Respond(crate::Response::text(format!("ankh-guest: {e}")).with_status(500))
        }
    }
}

/// Runs `request` through this instance's router, built on first use.
fn route(build: fn() -> Router, request: Request) -> Outcome {
    ROUTER.with(|router| router.get_or_init(build).handle(request))
}

/// `websocket-handler.on-open`.
pub fn on_open<W: WebSocketHandler + Default + 'static>(conn: ConnectionId, request: wit::Request) {
    with_websocket::<W>(|handler| handler.on_open(conn, &Request::new(request)));
}

/// `websocket-handler.on-message`.
pub fn on_message<W: WebSocketHandler + Default + 'static>(conn: ConnectionId, message: Message) {
    with_websocket::<W>(|handler| handler.on_message(conn, message));
}

/// `websocket-handler.on-close`.
pub fn on_close<W: WebSocketHandler + Default + 'static>(conn: ConnectionId, info: CloseInfo) {
    with_websocket::<W>(|handler| handler.on_close(conn, info));
}

/// Runs `event` on this instance's handler, creating it on first use. The host never calls
/// into an instance re-entrantly, so the `RefCell` borrow cannot fail.
fn with_websocket<W: WebSocketHandler + Default + 'static>(
    event: impl FnOnce(&mut dyn WebSocketHandler),
) {
    WEBSOCKET.with(|cell| {
        let mut slot = cell.borrow_mut();
        let handler = slot.get_or_insert_with(|| Box::new(W::default()));
        event(handler.as_mut());
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::test_support::request;

    static ROUTERS_BUILT: AtomicUsize = AtomicUsize::new(0);
    static MESSAGES_SEEN: AtomicUsize = AtomicUsize::new(0);
    static HANDLERS_MADE: AtomicUsize = AtomicUsize::new(0);

    fn counting_router() -> Router {
        ROUTERS_BUILT.fetch_add(1, Ordering::SeqCst);
        Router::new().get("/", |req: &Request| req.id().to_owned())
    }

    struct Counting;

    impl Default for Counting {
        fn default() -> Self {
            HANDLERS_MADE.fetch_add(1, Ordering::SeqCst);
            Self
        }
    }

    impl WebSocketHandler for Counting {
        fn on_message(&mut self, _conn: ConnectionId, _message: Message) {
            MESSAGES_SEEN.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn router_is_built_once_per_instance() {
        for _ in 0..3 {
            let outcome = handle_request(counting_router, request("GET", "/m", "/m").into_raw());
            let wit::Outcome::Respond(response) = outcome else {
                panic!("expected a response");
            };
            assert_eq!(
                (response.status, response.body.as_slice()),
                (200, &b"test-1"[..])
            );
        }
        assert_eq!(ROUTERS_BUILT.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn websocket_handler_is_made_once_and_receives_events() {
        for _ in 0..3 {
            on_message::<Counting>(7, Message::Text("hi".to_owned()));
        }
        on_close::<Counting>(
            7,
            CloseInfo {
                code: 1000,
                reason: String::new(),
                clean: true,
            },
        );
        assert_eq!(MESSAGES_SEEN.load(Ordering::SeqCst), 3);
        assert_eq!(HANDLERS_MADE.load(Ordering::SeqCst), 1);
    }
}
