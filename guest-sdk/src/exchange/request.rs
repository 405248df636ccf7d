//! [`Request`]: read-only access to one buffered request, with the path made relative to the
//! plugin's mount point and the query and route captures decoded.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::fmt;

use serde::de::DeserializeOwned;

use crate::exchange::{Outcome, Response};
use crate::packed::{self, Head, Text};
use crate::percent;
use crate::wit;

/// One HTTP request, fully buffered by the host.
///
/// Accessors borrow from the request; the decoded views ([`route_path`](Self::route_path),
/// [`query_param`](Self::query_param), ...) are computed from the raw fields, which stay
/// available through [`as_raw`](Self::as_raw).
#[derive(Clone)]
pub struct Request {
    fields: Fields,
    /// The decoded route path, when decoding changed it (`None`: the raw one, read from the
    /// fields, so the common request allocates nothing for it).
    route_path: Option<String>,
    /// `route_path` split on `/` *before* decoding, so a `%2F` stays inside its segment.
    segments: Vec<String>,
    params: Vec<(String, String)>,
}

/// Where the request's fields are: a WIT record, or the packed head the host sent, read in
/// place (see [`packed`]).
#[derive(Clone)]
enum Fields {
    Raw(wit::Request),
    Packed {
        head: Head,
        body: Vec<u8>,
        /// The record, built on the first [`Request::as_raw`].
        raw: OnceCell<wit::Request>,
    },
}

impl Fields {
    fn text(&self, field: Text) -> &str {
        match self {
            Fields::Packed { head, .. } => head.text(field),
            Fields::Raw(raw) => match field {
                Text::Id => &raw.id,
                Text::Method => &raw.method,
                Text::Path => &raw.path,
                Text::Mount => &raw.mount,
                Text::Query => &raw.query,
                Text::RemoteAddr => &raw.remote_addr,
            },
        }
    }
}

impl Request {
    /// Wraps a request as the host delivered it.
    pub fn new(raw: wit::Request) -> Self {
        Self::with_fields(Fields::Raw(raw))
    }

    /// Wraps a request the host delivered as a packed head and a body.
    pub(crate) fn from_packed(head: Head, body: Vec<u8>) -> Self {
        Self::with_fields(Fields::Packed {
            head,
            body,
            raw: OnceCell::new(),
        })
    }

    fn with_fields(fields: Fields) -> Self {
        let route_raw = route_raw(fields.text(Text::Path), fields.text(Text::Mount));
        let route_path = match percent::decode_path(route_raw) {
            Cow::Borrowed(_) => None,
            Cow::Owned(decoded) => Some(decoded),
        };
        let segments = route_raw[1..]
            .split('/')
            .map(|segment| percent::decode_path(segment).into_owned())
            .collect();
        Self {
            fields,
            route_path,
            segments,
            params: Vec::new(),
        }
    }

    /// The WIT record this request was built from (built on first use when the host sent the
    /// request packed, with a copy of the body).
    pub fn as_raw(&self) -> &wit::Request {
        match &self.fields {
            Fields::Raw(raw) => raw,
            Fields::Packed { head, body, raw } => raw.get_or_init(|| head.to_raw(body.clone())),
        }
    }

    /// Unwraps the WIT record.
    pub fn into_raw(self) -> wit::Request {
        match self.fields {
            Fields::Raw(raw) => raw,
            Fields::Packed { head, body, raw } => {
                raw.into_inner().unwrap_or_else(|| head.to_raw(body))
            }
        }
    }

    /// A text field, wherever the fields are.
    fn field(&self, field: Text) -> &str {
        self.fields.text(field)
    }

    /// The request id, unique within the running host (it appears in the host's log lines).
    pub fn id(&self) -> &str {
        self.field(Text::Id)
    }

    /// The method token as sent, e.g. `GET`.
    pub fn method(&self) -> &str {
        self.field(Text::Method)
    }

    /// The protocol version of the request line.
    pub fn version(&self) -> wit::HttpVersion {
        match &self.fields {
            Fields::Raw(raw) => raw.version,
            Fields::Packed { head, .. } => head.version(),
        }
    }

    /// The peer address, e.g. `127.0.0.1:51234`.
    pub fn remote_addr(&self) -> &str {
        self.field(Text::RemoteAddr)
    }

    /// The full path of the request target, still percent-encoded, without the query.
    pub fn path(&self) -> &str {
        self.field(Text::Path)
    }

    /// The prefix the plugin is mounted at, e.g. `/todo` (empty for the index plugin).
    pub fn mount(&self) -> &str {
        self.field(Text::Mount)
    }

    /// The path below the mount point, percent-decoded (lossily, as UTF-8).
    ///
    /// Always starts with `/`. At the mount point itself it is `/`, with or without a trailing
    /// slash: for a plugin mounted at `/todo`, both `/todo` and `/todo/` give `/`, and
    /// `/todo/items%20x` gives `/items x`. The [`Router`](crate::Router) matches against this.
    pub fn route_path(&self) -> &str {
        match &self.route_path {
            Some(decoded) => decoded,
            None => route_raw(self.field(Text::Path), self.field(Text::Mount)),
        }
    }

    /// The decoded segments of the route path (the router's input).
    pub(crate) fn route_segments(&self) -> &[String] {
        &self.segments
    }

    /// The raw query string, without the `?` (empty when there is none).
    pub fn query(&self) -> &str {
        self.field(Text::Query)
    }

    /// The first value of the query parameter `name`, decoded (`+` is a space).
    pub fn query_param(&self, name: &str) -> Option<String> {
        percent::query_pairs(self.query())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }

    /// Every value of the query parameter `name`, decoded, in the order sent.
    pub fn query_params(&self, name: &str) -> Vec<String> {
        percent::query_pairs(self.query())
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
            .collect()
    }

    /// All query parameters, decoded, in the order sent (repeated keys stay separate).
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        percent::query_pairs(self.query())
            .map(|(key, value)| (key.into_owned(), value.into_owned()))
            .collect()
    }

    /// The first value of the header `name` (case-insensitive), if it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.header_all(name)
            .next()
            .and_then(|value| std::str::from_utf8(value).ok())
    }

    /// Every value of the header `name` (case-insensitive), as raw bytes, in the order sent.
    pub fn header_all(&self, name: &str) -> impl Iterator<Item = &[u8]> {
        self.headers()
            .filter(move |(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    }

    /// Every header as `(name, value)`, in the order sent; names as the client spelled them.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> {
        match &self.fields {
            Fields::Raw(raw) => HeaderIter::Raw(raw.headers.iter()),
            Fields::Packed { head, .. } => HeaderIter::Packed(head.headers()),
        }
    }

    /// The body, with any chunked transfer coding already removed.
    pub fn body(&self) -> &[u8] {
        match &self.fields {
            Fields::Raw(raw) => &raw.body,
            Fields::Packed { body, .. } => body,
        }
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(self.body())
    }

    /// Deserializes the body as JSON (the `Content-Type` is not checked).
    ///
    /// [`JsonError`] is itself an [`IntoOutcome`](crate::IntoOutcome) (a `400`), so a handler
    /// returning `Result<Response, JsonError>` can use `?`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, JsonError> {
        serde_json::from_slice(self.body()).map_err(JsonError::new)
    }

    /// The route capture `name` (`{name}` in the pattern), decoded.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// All route captures as `(name, value)`, in pattern order.
    pub fn params(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }

    /// Sets the route captures; called by the router before it runs a handler.
    pub(crate) fn set_params(&mut self, params: Vec<(String, String)>) {
        self.params = params;
    }

    /// Sends `response` to the client now, while the handler keeps running.
    ///
    /// The handler must then return [`Outcome::Done`]. Only the first final response counts:
    /// a second call fails with [`RespondError::AlreadyResponded`](crate::RespondError), and a
    /// call from a WebSocket event with [`RespondError::NoRequest`](crate::RespondError).
    pub fn respond(&self, response: Response) -> Result<(), crate::RespondError> {
        crate::bindings::ankh::plugin::http::respond(&response.into_raw())
    }

    /// Starts a streamed response: `head`'s status and headers leave now, then its body (if
    /// it has one) as the first piece, and the returned [`BodyWriter`](crate::BodyWriter) writes the rest as the
    /// handler produces it.
    ///
    /// The host frames the body itself: with the `content-length` `head` declares, else
    /// chunked (closed-delimited for an HTTP/1.0 client). It compresses it when the client
    /// accepts gzip, flushing after each write, so every piece is readable as it arrives.
    /// The handler must then return [`Outcome::Done`]. Like
    /// [`Request::respond`], only the first final response counts.
    pub fn stream(&self, head: Response) -> Result<crate::BodyWriter, crate::StreamError> {
        crate::BodyWriter::start(head)
    }
}

/// [`Request::headers`], over either form of the fields.
enum HeaderIter<'a> {
    Raw(std::slice::Iter<'a, wit::Header>),
    Packed(packed::Headers<'a>),
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a str, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            HeaderIter::Raw(headers) => headers
                .next()
                .map(|h| (h.name.as_str(), h.value.as_slice())),
            HeaderIter::Packed(headers) => headers.next(),
        }
    }
}

/// Two requests are equal when every field, the body and the route captures are, whichever
/// form the host sent them in.
impl PartialEq for Request {
    fn eq(&self, other: &Self) -> bool {
        self.version() == other.version()
            && [
                Text::Id,
                Text::Method,
                Text::Path,
                Text::Mount,
                Text::Query,
                Text::RemoteAddr,
            ]
            .into_iter()
            .all(|field| self.field(field) == other.field(field))
            && self.headers().eq(other.headers())
            && self.body() == other.body()
            && self.params == other.params
    }
}

impl Eq for Request {}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("id", &self.id())
            .field("method", &self.method())
            .field("path", &self.path())
            .field("mount", &self.mount())
            .field("query", &self.query())
            .field("headers", &self.headers().collect::<Vec<_>>())
            .field("body_len", &self.body().len())
            .field("remote_addr", &self.remote_addr())
            .field("version", &self.version())
            .field("params", &self.params)
            .finish()
    }
}

impl From<wit::Request> for Request {
    fn from(raw: wit::Request) -> Self {
        Self::new(raw)
    }
}

/// The still-encoded part of `path` below `mount`, starting with `/`.
fn route_raw<'a>(path: &'a str, mount: &str) -> &'a str {
    match path.strip_prefix(mount.trim_end_matches('/')) {
        Some(rest) if rest.starts_with('/') => rest,
        Some("") => "/",
        // The path is not below the mount at a segment boundary (the host never sends such a
        // request): fall back to the whole path, or `/` when even that is not a path.
        _ if path.starts_with('/') => path,
        _ => "/",
    }
}

/// A body that is not the JSON expected: a request's ([`Request::json`]), or in a test a
/// response's ([`TestResponse::json`](crate::testing::TestResponse::json)).
///
/// As an [`IntoOutcome`](crate::IntoOutcome) it becomes `400 Bad Request` with the JSON body
/// `{"error": "<message>"}`.
#[derive(Debug)]
pub struct JsonError(serde_json::Error);

impl JsonError {
    pub(crate) fn new(err: serde_json::Error) -> Self {
        Self(err)
    }

    /// The underlying `serde_json` error (line, column, category).
    pub fn inner(&self) -> &serde_json::Error {
        &self.0
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid JSON body: {}", self.0)
    }
}

impl std::error::Error for JsonError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl crate::IntoOutcome for JsonError {
    fn into_outcome(self) -> Outcome {
        let body = serde_json::json!({ "error": self.to_string() });
        Outcome::Respond(Response::json(&body).with_status(400))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::encode_packed;
    use crate::testing::request;

    #[test]
    fn a_packed_request_reads_as_the_record_it_encodes() {
        let mut raw = request("POST", "/a%2Fb/c%20d?q=a+b&tag=x")
            .mount("/m")
            .header("Accept", "text/html")
            .header("X-Bin", b"\xff")
            .header("accept", "application/json")
            .body(r#"{"val": 41}"#)
            .build()
            .into_raw();
        raw.version = wit::HttpVersion::Http10;
        let head = Head::decode(encode_packed(&raw)).unwrap();
        let packed = Request::from_packed(head, raw.body.clone());
        let plain = Request::new(raw.clone());
        assert_eq!(packed, plain);
        assert_eq!(
            (packed.id(), packed.method(), packed.path(), packed.mount()),
            ("test-1", "POST", "/m/a%2Fb/c%20d", "/m")
        );
        assert_eq!(
            (packed.query(), packed.remote_addr(), packed.version()),
            ("q=a+b&tag=x", "127.0.0.1:50000", wit::HttpVersion::Http10)
        );
        assert_eq!(packed.route_path(), "/a/b/c d");
        assert_eq!(packed.route_segments(), ["a/b", "c d"]);
        assert_eq!(packed.query_param("q").as_deref(), Some("a b"));
        assert_eq!(packed.header("ACCEPT"), Some("text/html"));
        assert_eq!(packed.header("x-bin"), None, "not UTF-8");
        assert_eq!(packed.header_all("accept").count(), 2);
        assert_eq!(packed.headers().count(), 3);
        assert_eq!(packed.json::<serde_json::Value>().unwrap()["val"], 41);
        assert_eq!(packed.as_raw(), &raw);
        assert_eq!(packed.clone().into_raw(), raw);
        assert_eq!(
            Request::from_packed(Head::decode(encode_packed(&raw)).unwrap(), raw.body.clone())
                .into_raw(),
            raw
        );
        let mut other = raw.clone();
        other.headers.pop();
        assert_ne!(Request::new(other), packed);
    }

    /// A request as the host sends it, with `path` the whole path, the mount included.
    fn wire(mount: &str, path: &str) -> Request {
        let mut raw = request("GET", "/").build().into_raw();
        (raw.mount, raw.path) = (mount.to_owned(), path.to_owned());
        Request::new(raw)
    }

    #[test]
    fn route_path_is_relative_to_the_mount() {
        assert_eq!(wire("/todo", "/todo").route_path(), "/");
        assert_eq!(wire("/todo", "/todo/").route_path(), "/");
        assert_eq!(wire("/todo", "/todo/items/3").route_path(), "/items/3");
        assert_eq!(wire("", "/").route_path(), "/");
        assert_eq!(wire("", "/a/b").route_path(), "/a/b");
        assert_eq!(wire("/todo/", "/todo/x").route_path(), "/x");
    }

    #[test]
    fn route_path_is_decoded_but_segments_keep_encoded_slashes() {
        let req = request("GET", "/a%2Fb/c%20d").mount("/m").build();
        assert_eq!(req.route_path(), "/a/b/c d");
        assert_eq!(req.route_segments(), ["a/b", "c d"]);
        assert_eq!(req.path(), "/m/a%2Fb/c%20d");
    }

    #[test]
    fn query_decoding() {
        let req = request("GET", "/?q=a+b%20c&tag=x&tag=y%26z&empty=&flag").build();
        assert_eq!(req.query_param("q").as_deref(), Some("a b c"));
        assert_eq!(req.query_param("tag").as_deref(), Some("x"));
        assert_eq!(req.query_params("tag"), ["x", "y&z"]);
        assert_eq!(req.query_param("empty").as_deref(), Some(""));
        assert_eq!(req.query_param("flag").as_deref(), Some(""));
        assert_eq!(req.query_param("missing"), None);
        assert!(req.query_params("missing").is_empty());
        assert_eq!(req.query_pairs().len(), 5);
        assert_eq!(req.query_pairs()[3], ("empty".to_owned(), String::new()));
    }

    #[test]
    fn headers_are_case_insensitive_and_ordered() {
        let req = request("GET", "/")
            .header("Accept", "text/html")
            .header("X-Bin", b"\xff")
            .header("accept", "application/json")
            .build();
        assert_eq!(req.header("ACCEPT"), Some("text/html"));
        assert_eq!(req.header("x-bin"), None, "not UTF-8");
        assert_eq!(req.header("missing"), None);
        let all: Vec<_> = req.header_all("accept").collect();
        assert_eq!(all, [&b"text/html"[..], &b"application/json"[..]]);
        let names: Vec<_> = req.headers().map(|(name, _)| name).collect();
        assert_eq!(names, ["Accept", "X-Bin", "accept"]);
    }

    #[test]
    fn body_as_text_and_json() {
        let req = request("POST", "/").body(r#"{"val": 41}"#).build();
        assert_eq!(req.text().unwrap(), r#"{"val": 41}"#);
        let value: serde_json::Value = req.json().unwrap();
        assert_eq!(value["val"], 41);
        let err = req.json::<Vec<u8>>().unwrap_err();
        assert!(err.to_string().starts_with("invalid JSON body"), "{err}");
    }
}
