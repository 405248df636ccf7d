//! [`Response`]: a builder for the response a handler returns (or sends early with
//! [`Request::respond`](crate::Request::respond)).
//!
//! The host adds `Date`, `Content-Length` and the connection headers, and compresses the body
//! when the client accepts it, so a handler sets only what is specific to its answer.

use std::borrow::Cow;

use serde::Serialize;

use crate::wit;

/// `Content-Type` of [`Response::text`] and [`Response::bad_request`].
const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
/// `Content-Type` of [`Response::html`].
const TEXT_HTML: &str = "text/html; charset=utf-8";
/// `Content-Type` of [`Response::json`].
const APPLICATION_JSON: &str = "application/json";

/// An HTTP response: a status code, header fields in order, and a body.
///
/// Build one with a constructor (`Response::new(204)` for a status alone) and chain `with_*`
/// calls:
///
/// ```
/// use ankh_guest::Response;
///
/// let response = Response::text("created")
///     .with_status(201)
///     .with_header("Location", "/todo/items/7");
/// assert_eq!(response.status(), 201);
/// assert_eq!(response.header("location"), Some("/todo/items/7"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    status: u16,
    /// The fields the SDK sets itself (a constructor's `Content-Type`) are borrowed: a
    /// response costs an allocation per field only for the fields a handler names.
    headers: Vec<Field>,
    body: Vec<u8>,
}

/// A header field: its name and its value.
pub(crate) type Field = (Cow<'static, str>, Cow<'static, [u8]>);

impl Response {
    /// A response with this status, no headers and an empty body: `Response::new(204)`, or
    /// `Response::new(302).with_header("Location", url)`.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// `200` with a `text/plain; charset=utf-8` body.
    pub fn text(body: impl Into<String>) -> Self {
        Self::typed(TEXT_PLAIN, body.into().into_bytes())
    }

    /// `200` with a `text/html; charset=utf-8` body.
    pub fn html(body: impl Into<String>) -> Self {
        Self::typed(TEXT_HTML, body.into().into_bytes())
    }

    /// `200` with `value` serialized as an `application/json` body.
    ///
    /// If serialization fails (a map with non-string keys, a failing `Serialize` impl), the
    /// response is a `500` whose text body names the error instead.
    pub fn json(value: &impl Serialize) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => Self::typed(APPLICATION_JSON, body),
            Err(err) => {
                Self::text(format!("failed to serialize the JSON response: {err}")).with_status(500)
            }
        }
    }

    /// `200` with this body and `Content-Type`.
    pub fn bytes(content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self::new(200)
            .with_header("Content-Type", content_type)
            .with_body(body)
    }

    /// `200` with this body and one of the SDK's own `Content-Type` values, borrowed.
    fn typed(content_type: &'static str, body: Vec<u8>) -> Self {
        Self {
            status: 200,
            headers: vec![(
                Cow::Borrowed("Content-Type"),
                Cow::Borrowed(content_type.as_bytes()),
            )],
            body,
        }
    }

    /// `404` with the text body `Not Found`.
    pub fn not_found() -> Self {
        Self::text("Not Found").with_status(404)
    }

    /// `400` with `message` as a text body.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::text(message).with_status(400)
    }

    /// Replaces the status code.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Appends a header field (an existing field of the same name stays).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers
            .push((Cow::Owned(name.into()), Cow::Owned(value.into())));
        self
    }

    /// Sets a header field, removing every existing field of that name (case-insensitive)
    /// first; e.g. to change the `Content-Type` a constructor chose.
    pub fn replace_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        let name = name.into();
        self.headers
            .retain(|(field, _)| !field.eq_ignore_ascii_case(&name));
        self.with_header(name, value)
    }

    /// Replaces the body (headers, including `Content-Type`, are unchanged).
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The status code; the old name of [`Response::status`].
    #[deprecated(since = "0.1.0", note = "renamed to `Response::status`")]
    pub fn status_code(&self) -> u16 {
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
            .map(|(name, value)| (name.as_ref(), value.as_ref()))
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The header fields, for the packed answer.
    pub(crate) fn fields(&self) -> &[Field] {
        &self.headers
    }

    /// The WIT record the host receives.
    pub fn into_raw(self) -> wit::Response {
        wit::Response {
            status: self.status,
            headers: self
                .headers
                .into_iter()
                .map(|(name, value)| wit::Header {
                    name: name.into_owned(),
                    value: value.into_owned(),
                })
                .collect(),
            body: self.body,
        }
    }
}

impl From<wit::Response> for Response {
    fn from(raw: wit::Response) -> Self {
        Self {
            status: raw.status,
            headers: raw
                .headers
                .into_iter()
                .map(|h| (Cow::Owned(h.name), Cow::Owned(h.value)))
                .collect(),
            body: raw.body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_set_status_and_content_type() {
        let text = Response::text("hi");
        assert_eq!(text.status(), 200);
        assert_eq!(text.header("content-type"), Some(TEXT_PLAIN));
        assert_eq!(text.body(), b"hi");
        assert_eq!(
            Response::html("<p>").header("Content-Type"),
            Some(TEXT_HTML)
        );
        assert_eq!(Response::new(204).status(), 204);
        assert_eq!(Response::new(204).body(), b"");
        assert_eq!(Response::new(204).headers().count(), 0);
        assert_eq!(Response::not_found().status(), 404);
        let bad = Response::bad_request("no title");
        assert_eq!((bad.status(), bad.body()), (400, &b"no title"[..]));
        let bytes = Response::bytes("image/png", vec![1, 2]);
        assert_eq!(bytes.header("content-type"), Some("image/png"));
    }

    #[test]
    fn json_body() {
        let ok = Response::json(&serde_json::json!({"id": 1}));
        assert_eq!(ok.header("content-type"), Some(APPLICATION_JSON));
        assert_eq!(ok.body(), br#"{"id":1}"#);
        let map: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        assert_eq!(Response::json(&map).status(), 500);
    }

    #[test]
    fn headers_append_or_replace() {
        let response = Response::text("x")
            .with_header("Set-Cookie", "a=1")
            .with_header("Set-Cookie", "b=2")
            .replace_header("content-type", "text/csv");
        let names: Vec<_> = response.headers().map(|(name, _)| name).collect();
        assert_eq!(names, ["Set-Cookie", "Set-Cookie", "content-type"]);
        assert_eq!(response.header("Content-Type"), Some("text/csv"));
    }
}
