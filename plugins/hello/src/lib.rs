//! Build: `cd plugins && cargo build --release --target wasm32-wasip2`, then `curl localhost:8080/hello`.
//!
//! The smallest plugin: one route, one string. The host mounts `hello.wasm` at `/hello`, and
//! routes are relative to the mount, so `/` here is `/hello` on the wire.

use ankh_guest::prelude::*;

fn router() -> Router {
    Router::new().get("/", |_req: &Request| "Hello, World!")
}

ankh_guest::export_plugin!(router);
