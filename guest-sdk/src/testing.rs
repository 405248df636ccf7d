//! Testing a plugin's router with `cargo test`, without a host: build a request with
//! [`request`], run it through the router with [`call`], and read the [`TestResponse`], as
//! axum tests a router with `oneshot`.
//!
//! ```
//! use ankh_guest::prelude::*;
//! use ankh_guest::testing;
//!
//! fn router() -> Router {
//!     Router::new().get("/hello/{name}", |req| {
//!         format!("Hello, {}!", req.param("name").unwrap_or("stranger"))
//!     })
//! }
//!
//! // In the plugin crate, inside `#[cfg(test)] mod tests { ... }`:
//! let response = testing::call(&router(), testing::request("GET", "/hello/Ada"));
//! assert_eq!(response.status(), 200);
//! assert_eq!(response.text(), "Hello, Ada!");
//! assert_eq!(testing::call(&router(), testing::request("GET", "/")).status(), 404);
//! ```
//!
//! These tests run on the machine's own target (a plain `cargo test` in the plugin crate, not
//! `--target wasm32-wasip2`). Nothing here calls the host. A handler that does (the
//! [`kv`](crate::kv) store, [`log`](crate::log), [`ws`](crate::ws), [`http`](crate::http) or
//! [`Request::respond`]) cannot run this way: off wasm, an import is a stand-in that panics
//! where no panic may unwind, which aborts the whole test binary. Test those routes against a
//! running server, and keep what can be tested alone in functions of their own.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{JsonError, Outcome, Request, Response, Router, wit};

/// A request as the host would deliver it: `method` and `target`, the path below the plugin's
/// mount point (percent-encoded as on the wire) with an optional `?query`.
///
/// The request comes from `127.0.0.1:50000` over HTTP/1.1, with the id `test-1`, no headers
/// and no body, for a plugin mounted at the root; the [`TestRequest`] methods change that.
///
/// # Panics
///
/// If `target` does not start with `/`.
#[track_caller]
pub fn request(method: &str, target: &str) -> TestRequest {
    assert!(
        target.starts_with('/'),
        "a test request's target starts with `/`, not {target:?}"
    );
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    TestRequest {
        raw: wit::Request {
            id: "test-1".to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            mount: String::new(),
            query: query.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            remote_addr: "127.0.0.1:50000".to_owned(),
            version: wit::HttpVersion::Http11,
        },
    }
}

/// A request being built for a test; see [`request`]. Pass it to [`call`], or turn it into a
/// [`Request`] with [`build`](Self::build) to call a handler function directly.
#[derive(Debug, Clone)]
pub struct TestRequest {
    /// The record the host would send; `path` is below the mount until [`Self::build`].
    raw: wit::Request,
}

impl TestRequest {
    /// Appends a header field (repeated names stay separate fields, in order).
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.raw.headers.push(wit::Header {
            name: name.to_owned(),
            value: value.into(),
        });
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.raw.body = body.into();
        self
    }

    /// Sets `value`, serialized, as the body, and `Content-Type: application/json`.
    ///
    /// # Panics
    ///
    /// If `value` does not serialize (a map with non-string keys, a failing `Serialize`).
    #[track_caller]
    pub fn json(self, value: &impl Serialize) -> Self {
        let body = serde_json::to_vec(value)
            .unwrap_or_else(|err| panic!("the test request's JSON body: {err}"));
        self.header("Content-Type", "application/json").body(body)
    }

    /// Mounts the plugin at `mount` (e.g. `/todo`), for a handler that reads
    /// [`Request::mount`] or [`Request::path`]; the route path, which the router matches, is
    /// the target either way.
    pub fn mount(mut self, mount: &str) -> Self {
        self.raw.mount = mount.to_owned();
        self
    }

    /// The request a handler receives.
    pub fn build(self) -> Request {
        let mut raw = self.raw;
        raw.path = format!("{}{}", raw.mount.trim_end_matches('/'), raw.path);
        Request::new(raw)
    }
}

impl From<TestRequest> for Request {
    fn from(request: TestRequest) -> Self {
        request.build()
    }
}

/// Runs `request` through `router`, as the host runs a request through the plugin's router,
/// and returns what the handler answered.
///
/// An accepted WebSocket upgrade ([`Outcome::Upgrade`]) reads as `101` with the chosen
/// subprotocol as `Sec-WebSocket-Protocol` and the handler's extra headers; the host adds the
/// handshake's own headers. What the host adds to every response (`Date`, `Content-Length`,
/// compression, dropping the body of a `HEAD` answer) is not applied.
///
/// # Panics
///
/// If the handler returned [`Outcome::Done`]: its response went through
/// [`Request::respond`], which needs the host.
#[track_caller]
pub fn call(router: &Router, request: impl Into<Request>) -> TestResponse {
    match router.handle(request.into()) {
        Outcome::Respond(response) => TestResponse::from(response),
        Outcome::Upgrade { protocol, headers } => TestResponse {
            status: 101,
            headers: protocol
                .map(|protocol| ("Sec-WebSocket-Protocol".to_owned(), protocol.into_bytes()))
                .into_iter()
                .chain(headers)
                .collect(),
            body: Vec::new(),
        },
        Outcome::Done => panic!(
            "the handler returned `Outcome::Done`, which a test cannot see: \
             `Request::respond` needs the host"
        ),
    }
}

/// What a handler answered, as [`call`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResponse {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl TestResponse {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The first value of the header `name` (case-insensitive), if it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    /// Every header as `(name, value)`, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_slice()))
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON (the `Content-Type` is not checked).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, JsonError> {
        serde_json::from_slice(&self.body).map_err(JsonError::new)
    }
}

impl From<Response> for TestResponse {
    fn from(response: Response) -> Self {
        Self {
            status: response.status(),
            headers: response
                .headers()
                .map(|(name, value)| (name.to_owned(), value.to_vec()))
                .collect(),
            body: response.body().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_fills_what_a_handler_reads() {
        let req = request("POST", "/items/a%20b?tag=x&tag=y")
            .mount("/todo")
            .header("X-One", "1")
            .header("x-one", b"2")
            .json(&serde_json::json!({"title": "milk"}))
            .build();
        assert_eq!(
            (req.method(), req.path(), req.mount(), req.route_path()),
            ("POST", "/todo/items/a%20b", "/todo", "/items/a b")
        );
        assert_eq!(req.query_params("tag"), ["x", "y"]);
        assert_eq!(req.header_all("X-ONE").count(), 2);
        assert_eq!(req.header("content-type"), Some("application/json"));
        assert_eq!(req.json::<serde_json::Value>().unwrap()["title"], "milk");
        assert_eq!(
            (req.id(), req.remote_addr(), req.version()),
            ("test-1", "127.0.0.1:50000", wit::HttpVersion::Http11)
        );
        let root = request("GET", "/").build();
        assert_eq!(
            (root.path(), root.mount(), root.route_path()),
            ("/", "", "/")
        );
        assert_eq!(request("GET", "/").mount("/m/").build().path(), "/m/");
    }

    #[test]
    #[should_panic(expected = "starts with `/`")]
    fn a_target_without_a_slash_is_refused() {
        let _ = request("GET", "items");
    }

    #[test]
    fn call_returns_the_response_or_the_upgrade() {
        let router = Router::new()
            .post("/items", |req| {
                Response::json(&serde_json::json!({"got": req.text().unwrap_or_default()}))
                    .with_status(201)
                    .with_header("Location", "/items/1")
            })
            .get("/ws", |_req| Outcome::Upgrade {
                protocol: Some("chat".to_owned()),
                headers: vec![("X-A".to_owned(), b"1".to_vec())],
            });
        let created = call(&router, request("POST", "/items").body("milk"));
        assert_eq!(created.status(), 201);
        assert_eq!(created.header("location"), Some("/items/1"));
        assert_eq!(created.text(), r#"{"got":"milk"}"#);
        let value: serde_json::Value = created.json().unwrap();
        assert_eq!(value["got"], "milk");
        assert!(created.json::<Vec<u8>>().is_err());

        let upgraded = call(&router, request("GET", "/ws"));
        assert_eq!(upgraded.status(), 101);
        let headers: Vec<_> = upgraded.headers().collect();
        assert_eq!(
            headers,
            [("Sec-WebSocket-Protocol", &b"chat"[..]), ("X-A", &b"1"[..])]
        );
        assert_eq!(call(&router, request("GET", "/items")).status(), 405);
    }

    #[test]
    #[should_panic(expected = "`Outcome::Done`")]
    fn done_cannot_be_seen() {
        let router = Router::new().get("/", |_req| Outcome::Done);
        let _ = call(&router, request("GET", "/"));
    }
}
