//! What [`export_plugin!`](crate::export_plugin) expands to calls into here: the per-instance
//! router, the WebSocket events, and the conversions between WIT records and SDK types.
//!
//! Not part of the public API (re-exported as the hidden `__private`). A wasm instance runs one
//! call at a time on one thread, so a `thread_local!` cell is the whole state: the router is
//! built on the first request and reused by every later request the instance handles. The
//! WebSocket handler is a type, not a value, so its events keep nothing here.

use std::cell::OnceCell;

use crate::ws::{CloseInfo, ConnectionId, Message, WebSocketHandler};
use crate::{Outcome, Request, Router, wit};

thread_local! {
    static ROUTER: OnceCell<Router> = const { OnceCell::new() };
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
pub fn on_open<W: WebSocketHandler>(conn: ConnectionId, request: wit::Request) {
    W::on_open(conn, &Request::new(request));
}

/// `websocket-handler.on-message`.
pub fn on_message<W: WebSocketHandler>(conn: ConnectionId, message: Message) {
    W::on_message(conn, message);
}

/// `websocket-handler.on-close`.
pub fn on_close<W: WebSocketHandler>(conn: ConnectionId, info: CloseInfo) {
    W::on_close(conn, info);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::testing;

    static ROUTERS_BUILT: AtomicUsize = AtomicUsize::new(0);
    static MESSAGES_SEEN: AtomicUsize = AtomicUsize::new(0);
    static CLOSES_SEEN: AtomicUsize = AtomicUsize::new(0);

    fn counting_router() -> Router {
        ROUTERS_BUILT.fetch_add(1, Ordering::SeqCst);
        Router::new().get("/", |req| req.id().to_owned())
    }

    struct Counting;

    impl WebSocketHandler for Counting {
        fn on_message(_conn: ConnectionId, _message: Message) {
            MESSAGES_SEEN.fetch_add(1, Ordering::SeqCst);
        }

        fn on_close(conn: ConnectionId, info: CloseInfo) {
            assert_eq!((conn, info.code), (7, 1000));
            CLOSES_SEEN.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn router_is_built_once_per_instance() {
        for _ in 0..3 {
            let request = testing::request("GET", "/").mount("/m").build();
            let outcome = handle_request(counting_router, request.into_raw());
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
    fn websocket_events_reach_the_handler_type() {
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
        assert_eq!(CLOSES_SEEN.load(Ordering::SeqCst), 1);
    }
}
