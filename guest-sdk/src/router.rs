//! [`Router`]: maps a method and a route path to a handler.
//!
//! Contract:
//! - matching is against [`Request::route_path`] (decoded, relative to the mount), so a plugin
//!   works wherever the host mounts it; pattern syntax is described on [`Router`];
//! - routes are tried in insertion order and the first whose pattern *and* method match wins;
//! - a `GET` route also answers `HEAD` (the host drops the body);
//! - a path that some route matches, but not for this method, gets `405` with an `Allow`
//!   header; a path no route matches gets `404`. Both fallbacks can be replaced.

use std::fmt;

use crate::exchange::{IntoOutcome, Outcome, Request, Response};
use crate::pattern::{Pattern, PatternError};

/// A boxed handler: every handler is stored in this form.
type Handler = Box<dyn Fn(&Request) -> Outcome>;

/// A set of routes, built once per plugin instance and then used for every request.
///
/// ```
/// use ankh_guest::{Request, Response, Router};
///
/// fn show(req: &Request) -> Response {
///     Response::text(format!("item {}", req.param("id").unwrap_or_default()))
/// }
///
/// let router = Router::new()
///     .get("/", |_req| "index")
///     .get("/items/{id}", show)
///     .post("/items", |_req| Response::text("created").with_status(201))
///     .any("/static/**", |_req| Response::not_found());
/// # let _ = router;
/// ```
///
/// # Patterns
///
/// A pattern starts with `/` and is split on `/` into segments:
///
/// | segment          | matches                                                        |
/// |------------------|----------------------------------------------------------------|
/// | `items`          | exactly `items` (also `a*b`: a star in the middle is literal)  |
/// | `*`              | any one segment                                                |
/// | `*.txt`          | one segment that ends with `.txt`                              |
/// | `img-*`          | one segment that starts with `img-`                            |
/// | `*draft*`        | one segment that contains `draft`                              |
/// | `**`             | one or more segments                                           |
/// | `{id}`           | any one segment, available as [`Request::param`]`("id")`       |
///
/// `@id` is accepted as an alias of `{id}`.
///
/// Segments are percent-decoded before matching, so write patterns in plain UTF-8
/// (`/こんにちは` matches `/%E3%81%93...`); an encoded `%2F` stays inside its segment.
/// Wildcards and captures never match an empty segment, and a trailing slash is significant:
/// `/items` and `/items/` are different paths (the mount point itself is always `/`).
///
/// These patterns are rejected when the route is added: the empty string, a pattern without
/// a leading `/`, `**` directly followed by `*`, `**` or a capture, a capture without a name,
/// and two captures with the same name.
pub struct Router {
    routes: Vec<Route>,
    not_found: Handler,
    method_not_allowed: Handler,
}

struct Route {
    /// `None` for [`Router::any`].
    method: Option<String>,
    pattern: Pattern,
    handler: Handler,
}

impl Route {
    fn accepts(&self, method: &str) -> bool {
        match &self.method {
            None => true,
            Some(own) => own == method || (own == "GET" && method == "HEAD"),
        }
    }
}

impl Default for Router {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let routes: Vec<_> = self
            .routes
            .iter()
            .map(|route| {
                let method = route.method.as_deref().unwrap_or("*");
                format!("{method} {}", route.pattern.as_str())
            })
            .collect();
        f.debug_struct("Router").field("routes", &routes).finish()
    }
}

impl Router {
    /// An empty router: every request gets `404 Not Found`.
    pub fn new() -> Self {
        Self {
            routes: Vec::new(),
            not_found: Box::new(|_| Response::not_found().into_outcome()),
            method_not_allowed: Box::new(|_| {
                Response::text("Method Not Allowed")
                    .with_status(405)
                    .into_outcome()
            }),
        }
    }

    /// Adds a `GET` route (which also answers `HEAD`).
    ///
    /// # Panics
    ///
    /// If `pattern` is invalid; see [`Router::try_route`] for a fallible version.
    #[track_caller]
    pub fn get<H, O>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.route("GET", pattern, handler)
    }

    /// Adds a `POST` route.
    ///
    /// # Panics
    ///
    /// If `pattern` is invalid.
    #[track_caller]
    pub fn post<H, O>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.route("POST", pattern, handler)
    }

    /// Adds a `PUT` route.
    ///
    /// # Panics
    ///
    /// If `pattern` is invalid.
    #[track_caller]
    pub fn put<H, O>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.route("PUT", pattern, handler)
    }

    /// Adds a `DELETE` route.
    ///
    /// # Panics
    ///
    /// If `pattern` is invalid.
    #[track_caller]
    pub fn delete<H, O>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.route("DELETE", pattern, handler)
    }

    /// Adds a `PATCH` route.
    ///
    /// # Panics
    ///
    /// If `pattern` is invalid.
    #[track_caller]
    pub fn patch<H, O>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.route("PATCH", pattern, handler)
    }

    /// Adds a route that answers every method.
    ///
    /// # Panics
    ///
    /// If `pattern` is invalid.
    #[track_caller]
    pub fn any<H, O>(self, pattern: &str, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.try_any(pattern, handler)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// Adds a route for `method`, compared case-sensitively as HTTP requires (`"GET"`, not
    /// `"get"`). A `GET` route also answers `HEAD`.
    ///
    /// # Panics
    ///
    /// If `pattern` is invalid; the message names the pattern and the rule it broke.
    #[track_caller]
    pub fn route<H, O>(self, method: &str, pattern: &str, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.try_route(method, pattern, handler)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// Like [`Router::route`], but returns an invalid pattern as an error.
    pub fn try_route<H, O>(
        self,
        method: &str,
        pattern: &str,
        handler: H,
    ) -> Result<Self, PatternError>
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.push(Some(method.to_owned()), pattern, boxed(handler))
    }

    /// Like [`Router::any`], but returns an invalid pattern as an error.
    pub fn try_any<H, O>(self, pattern: &str, handler: H) -> Result<Self, PatternError>
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.push(None, pattern, boxed(handler))
    }

    /// Replaces the handler for paths no route matches (by default `404 Not Found`).
    pub fn not_found<H, O>(mut self, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.not_found = boxed(handler);
        self
    }

    /// Replaces the handler for paths that some route matches, but not for the request's
    /// method (by default `405 Method Not Allowed`).
    ///
    /// The router adds the `Allow` header to the response unless the handler set one.
    pub fn method_not_allowed<H, O>(mut self, handler: H) -> Self
    where
        H: Fn(&Request) -> O + 'static,
        O: IntoOutcome,
    {
        self.method_not_allowed = boxed(handler);
        self
    }

    /// Runs the handler for `request`: the first route that matches, else a fallback.
    pub fn handle(&self, mut request: Request) -> Outcome {
        let mut allowed: Vec<&str> = Vec::new();
        for route in &self.routes {
            let Some(params) = route.pattern.matches(request.route_segments()) else {
                continue;
            };
            if route.accepts(request.method()) {
                request.set_params(params);
                return (route.handler)(&request);
            }
            if let Some(method) = route.method.as_deref() {
                allowed.push(method);
            }
        }
        if allowed.is_empty() {
            return (self.not_found)(&request);
        }
        match (self.method_not_allowed)(&request) {
            Outcome::Respond(response) if response.header("Allow").is_none() => {
                Outcome::Respond(response.with_header("Allow", allow_header(&allowed)))
            }
            other => other,
        }
    }

    fn push(
        mut self,
        method: Option<String>,
        pattern: &str,
        handler: Handler,
    ) -> Result<Self, PatternError> {
        let pattern = Pattern::parse(pattern)?;
        self.routes.push(Route {
            method,
            pattern,
            handler,
        });
        Ok(self)
    }
}

fn boxed<H, O>(handler: H) -> Handler
where
    H: Fn(&Request) -> O + 'static,
    O: IntoOutcome,
{
    Box::new(move |request| handler(request).into_outcome())
}

/// The `Allow` value: each method once, in registration order, with `HEAD` after `GET`.
fn allow_header(methods: &[&str]) -> String {
    let mut list: Vec<&str> = Vec::new();
    for &method in methods {
        if !list.contains(&method) {
            list.push(method);
        }
        if method == "GET" && !methods.contains(&"HEAD") && !list.contains(&"HEAD") {
            list.push("HEAD");
        }
    }
    list.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, request};

    /// Runs `router` on a request for `path` (below the mount) and returns (status, body,
    /// Allow header).
    fn call(router: &Router, method: &str, path: &str) -> (u16, String, Option<String>) {
        let response = testing::call(router, request(method, path));
        (
            response.status(),
            response.text(),
            response.header("Allow").map(str::to_owned),
        )
    }

    fn body(router: &Router, method: &str, path: &str) -> String {
        let (status, body, _) = call(router, method, path);
        assert_eq!(status, 200, "{method} {path} answered {status}: {body}");
        body
    }

    fn status(router: &Router, method: &str, path: &str) -> u16 {
        call(router, method, path).0
    }

    #[test]
    fn matches_relative_to_the_mount() {
        let router = Router::new()
            .get("/", |_| "root")
            .get("/hello", |_| "hello");
        let at = |path| testing::call(&router, request("GET", path).mount("/m"));
        assert_eq!(at("/").text(), "root");
        assert_eq!(at("/hello").text(), "hello");
        assert_eq!(at("/hello/").status(), 404);
        // The mount point without its trailing slash (`/m`) is the root too.
        let mut bare = request("GET", "/").mount("/m").build().into_raw();
        bare.path = "/m".to_owned();
        assert_eq!(testing::call(&router, Request::new(bare)).text(), "root");
    }

    #[test]
    fn wildcards() {
        let router = Router::new()
            .get("/one/*", |_| "one")
            .get("/txt/*.txt", |_| "suffix")
            .get("/img/img-*", |_| "prefix")
            .get("/has/*draft*", |_| "contains")
            .get("/rest/**", |_| "rest")
            .get("/lit/a*b", |_| "literal");
        assert_eq!(body(&router, "GET", "/one/x"), "one");
        assert_eq!(status(&router, "GET", "/one/x/y"), 404);
        assert_eq!(status(&router, "GET", "/one/"), 404);
        assert_eq!(body(&router, "GET", "/txt/a.txt"), "suffix");
        assert_eq!(status(&router, "GET", "/txt/a.md"), 404);
        assert_eq!(body(&router, "GET", "/img/img-7"), "prefix");
        assert_eq!(status(&router, "GET", "/img/7-img"), 404);
        assert_eq!(body(&router, "GET", "/has/a-draft-b"), "contains");
        assert_eq!(status(&router, "GET", "/has/final"), 404);
        assert_eq!(body(&router, "GET", "/rest/a"), "rest");
        assert_eq!(body(&router, "GET", "/rest/a/b/c"), "rest");
        assert_eq!(status(&router, "GET", "/rest"), 404);
        assert_eq!(body(&router, "GET", "/lit/a*b"), "literal");
        assert_eq!(status(&router, "GET", "/lit/axb"), 404);
    }

    #[test]
    fn captures() {
        let router = Router::new().get("/users/{user}/posts/{post}", |req| {
            format!(
                "{} {}",
                req.param("user").unwrap(),
                req.param("post").unwrap()
            )
        });
        assert_eq!(body(&router, "GET", "/users/ann/posts/7"), "ann 7");
        assert_eq!(body(&router, "GET", "/users/a%20b/posts/x%2Fy"), "a b x/y");
        assert_eq!(status(&router, "GET", "/users//posts/7"), 404);
    }

    #[test]
    fn first_match_wins() {
        let router = Router::new()
            .get("/items/new", |_| "new")
            .get("/items/{id}", |_| "by id")
            .get("/items/new", |_| "never");
        assert_eq!(body(&router, "GET", "/items/new"), "new");
        assert_eq!(body(&router, "GET", "/items/3"), "by id");
    }

    #[test]
    fn method_dispatch_and_any() {
        let router = Router::new()
            .get("/x", |_| "get")
            .post("/x", |_| "post")
            .put("/x", |_| "put")
            .delete("/x", |_| "delete")
            .patch("/x", |_| "patch")
            .route("OPTIONS", "/x", |_| "options")
            .any("/y", |req| req.method().to_owned());
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
            assert_eq!(body(&router, method, "/x"), method.to_lowercase());
        }
        assert_eq!(body(&router, "BREW", "/y"), "BREW");
    }

    #[test]
    fn not_found_and_method_not_allowed() {
        let router = Router::new()
            .get("/x", |_| "get")
            .post("/x", |_| "post")
            .delete("/*", |_| "delete");
        assert_eq!(status(&router, "GET", "/nothing/here"), 404);
        let (status, _, allow) = call(&router, "PUT", "/x");
        assert_eq!(status, 405);
        assert_eq!(allow.as_deref(), Some("GET, HEAD, POST, DELETE"));
        let (status, _, allow) = call(&router, "GET", "/other");
        assert_eq!(status, 405);
        assert_eq!(allow.as_deref(), Some("DELETE"));
    }

    #[test]
    fn head_is_answered_by_get() {
        let router = Router::new().get("/x", |req| req.method().to_owned());
        assert_eq!(body(&router, "HEAD", "/x"), "HEAD");
        let router = Router::new().post("/x", |_| "post");
        assert_eq!(status(&router, "HEAD", "/x"), 405);
    }

    #[test]
    fn custom_fallbacks() {
        let router = Router::new()
            .post("/x", |_| "post")
            .not_found(|req| Response::text(format!("no {}", req.route_path())).with_status(404))
            .method_not_allowed(|_| Response::text("nope").with_status(405));
        assert_eq!(
            call(&router, "GET", "/zz"),
            (404, "no /zz".to_owned(), None)
        );
        assert_eq!(
            call(&router, "GET", "/x"),
            (405, "nope".to_owned(), Some("POST".to_owned()))
        );
        let keeps_own_allow = Router::new()
            .post("/x", |_| "post")
            .method_not_allowed(|_| Response::new(405).with_header("Allow", "POST, PUT"));
        assert_eq!(
            call(&keeps_own_allow, "GET", "/x").2.as_deref(),
            Some("POST, PUT")
        );
    }

    #[test]
    fn percent_decoded_matching() {
        let router = Router::new().get("/こんにちは", |_| "konnichiwa");
        assert_eq!(
            body(
                &router,
                "GET",
                "/%E3%81%93%E3%82%93%E3%81%AB%E3%81%A1%E3%81%AF"
            ),
            "konnichiwa"
        );
        assert_eq!(body(&router, "GET", "/こんにちは"), "konnichiwa");
    }

    #[test]
    fn handlers_can_return_results() {
        let router = Router::new().get("/n", |req| -> Result<String, Response> {
            let n: u32 = req
                .query_param("n")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| Response::bad_request("bad n"))?;
            Ok(format!("{}", n + 1))
        });
        assert_eq!(body(&router, "GET", "/n?n=41"), "42");
        assert_eq!(status(&router, "GET", "/n"), 400);
    }

    #[test]
    fn invalid_patterns_are_rejected() {
        let err = Router::new()
            .try_route("GET", "/**/{id}", |_| "x")
            .unwrap_err();
        assert_eq!(err.pattern(), "/**/{id}");
        assert!(Router::new().try_any("", |_| "x").is_err());
        assert!(Router::new().try_any("x", |_| "x").is_err());
    }

    #[test]
    #[should_panic(expected = "invalid route pattern \"/**/*\"")]
    fn invalid_pattern_panics_with_its_name() {
        let _ = Router::new().get("/**/*", |_| "x");
    }
}
