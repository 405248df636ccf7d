//! Build: `cd plugins && cargo build --release --target wasm32-wasip2`, then `curl localhost:8080/hello`.
//!
//! The smallest plugin: one route, one string. The host mounts `hello.wasm` at `/hello`, and
//! routes are relative to the mount, so `/` here is `/hello` on the wire.

use ankh_guest::prelude::*;

fn router() -> Router {
    Router::new().get("/", |_req| "Hello, World!")
}

ankh_guest::export_plugin!(router);

#[cfg(test)]
mod tests {
    use ankh_guest::testing;

    /// `cargo test` (on this machine, not wasm) runs the router without a host.
    #[test]
    fn greets_the_world() {
        let response = testing::call(&super::router(), testing::request("GET", "/"));
        assert_eq!(response.status(), 200);
        assert_eq!(response.text(), "Hello, World!");
        let missing = testing::call(&super::router(), testing::request("GET", "/nope"));
        assert_eq!(missing.status(), 404);
    }
}
