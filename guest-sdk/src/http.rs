//! Calling other services over HTTP: a small blocking client over the standard
//! `wasi:http/outgoing-handler`.
//!
//! The host denies every origin unless the plugin's policy grants it
//! (`[capabilities] http = ["https://api.example.com"]`), resolves names itself, keeps
//! connections alive in a pool of the plugin's own, and bounds every call (connect, first
//! byte, between bytes, response size). A call counts against the request's deadline, and
//! while it waits the plugin holds no thread of the host. An [`Error`] is an
//! [`IntoOutcome`], so `?` in a handler answers 502 (504 for a timeout):
//!
//! ```no_run
//! use ankh_guest::prelude::*;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Weather {
//!     celsius: f64,
//! }
//!
//! fn weather(req: &Request) -> Result<Response, http::Error> {
//!     let city = req.query_param("city").unwrap_or_else(|| "paris".into());
//!     let now: Weather = http::get_json(&format!("https://api.example.com/weather/{city}"))?;
//!     let hook = http::Request::post("https://hooks.example.com/seen")
//!         .header("content-type", "text/plain")
//!         .body(city.clone());
//!     let answer = http::send(hook)?;
//!     log::info(&format!("hook answered {}", answer.status));
//!     Ok(Response::text(format!("{city}: {} °C", now.celsius)))
//! }
//! # let _ = weather;
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};

use crate::{IntoOutcome, Outcome};

/// Bytes per write into a request body (what a WASI blocking write takes at most).
const WRITE_BYTES: usize = 4096;

/// Bytes asked for per read of a response body.
const READ_BYTES: u64 = 64 * 1024;

/// An outbound request: a method, an absolute `http` or `https` URL, headers and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method token, e.g. `GET`.
    pub method: String,
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// Header fields in order; repeated names stay separate entries.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The request body (empty for none).
    pub body: Vec<u8>,
}

impl Request {
    /// A request with `method` (`GET`, `POST`, ...) to `url`.
    pub fn new(method: &str, url: &str) -> Self {
        Request {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A `GET` of `url`.
    pub fn get(url: &str) -> Self {
        Request::new("GET", url)
    }

    /// A `POST` to `url`.
    pub fn post(url: &str) -> Self {
        Request::new("POST", url)
    }

    /// Adds a header (repeated names are kept in order).
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and its `content-type`.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, Error> {
        let body = serde_json::to_vec(value).map_err(|e| Error::Json(e.to_string()))?;
        Ok(self.header("content-type", "application/json").body(body))
    }
}

/// What the other service answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code, e.g. `200`.
    pub status: u16,
    /// Header fields in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole body, read to its end.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (any case), as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Json(e.to_string()))
    }
}

/// Why a call got no response, or the response was unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The policy grants no such origin.
    Denied,
    /// The name resolves only to addresses the plugin may not reach (private, loopback).
    Prohibited,
    /// Connecting, the first byte or the next one took too long.
    Timeout,
    /// The name does not resolve.
    Dns,
    /// No connection could be made, or it broke.
    Connect(String),
    /// The response body is over the host's limit.
    TooLarge,
    /// The URL is not an absolute `http`/`https` URL.
    BadUrl(String),
    /// [`get_json`] got a status other than 2xx.
    Status(u16),
    /// A body did not serialize or parse as JSON.
    Json(String),
    /// Anything else the host said.
    Other(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Denied => f.write_str("the origin is not granted (capabilities.http)"),
            Error::Prohibited => f.write_str("the name resolves to a prohibited address"),
            Error::Timeout => f.write_str("timed out"),
            Error::Dns => f.write_str("the name does not resolve"),
            Error::Connect(why) => write!(f, "connection failed: {why}"),
            Error::TooLarge => f.write_str("the response body is too large"),
            Error::BadUrl(why) => write!(f, "bad URL: {why}"),
            Error::Status(status) => write!(f, "the service answered {status}"),
            Error::Json(why) => write!(f, "JSON: {why}"),
            Error::Other(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

impl IntoOutcome for Error {
    /// 504 for a timeout, 502 otherwise, with the reason as text.
    fn into_outcome(self) -> Outcome {
        let status = if self == Error::Timeout { 504 } else { 502 };
        crate::Response::text(format!("upstream call failed: {self}"))
            .with_status(status)
            .into_outcome()
    }
}

impl From<ErrorCode> for Error {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::HttpRequestDenied => Error::Denied,
            ErrorCode::DestinationIpProhibited => Error::Prohibited,
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout
            | ErrorCode::DnsTimeout => Error::Timeout,
            ErrorCode::DnsError(_) | ErrorCode::DestinationNotFound => Error::Dns,
            ErrorCode::HttpResponseBodySize(_) => Error::TooLarge,
            ErrorCode::ConnectionRefused
            | ErrorCode::ConnectionTerminated
            | ErrorCode::DestinationUnavailable
            | ErrorCode::HttpResponseIncomplete => Error::Connect(format!("{code:?}")),
            other => Error::Other(format!("{other:?}")),
        }
    }
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, Error> {
    send(Request::get(url))
}

/// `GET url`, a 2xx answer's body parsed as JSON.
pub fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, Error> {
    let response = get(url)?;
    if !(200..300).contains(&response.status) {
        return Err(Error::Status(response.status));
    }
    response.json()
}

/// The parts of an absolute URL wasi:http takes: scheme, authority, path and query.
fn split_url(url: &str) -> Result<(Scheme, &str, String), Error> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| Error::BadUrl(format!("{url:?} has no scheme")))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(Error::BadUrl(format!("scheme {other:?} is not http(s)"))),
    };
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(Error::BadUrl(format!("{url:?} has no host")));
    }
    let path = if tail.starts_with('/') {
        tail.to_owned()
    } else {
        format!("/{tail}")
    };
    Ok((scheme, authority, path))
}

fn method(name: &str) -> Method {
    match name.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        _ => Method::Other(name.to_owned()),
    }
}

/// Writes `bytes` into `body` and ends it (an empty body is ended without opening its
/// stream: two fewer calls into the host).
fn write_body(body: OutgoingBody, bytes: &[u8]) -> Result<(), Error> {
    if !bytes.is_empty() {
        let stream = body
            .write()
            .map_err(|()| Error::Other("the request body was taken".into()))?;
        for chunk in bytes.chunks(WRITE_BYTES) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| Error::Connect(format!("writing the body: {e:?}")))?;
        }
    }
    OutgoingBody::finish(body, None)?;
    Ok(())
}

/// Sends `request` and waits for the whole response.
pub fn send(request: Request) -> Result<Response, Error> {
    let (scheme, authority, path) = split_url(&request.url)?;
    let headers = Fields::new();
    for (name, value) in &request.headers {
        headers
            .append(name, value)
            .map_err(|e| Error::BadUrl(format!("header {name:?}: {e:?}")))?;
    }
    let outgoing = OutgoingRequest::new(headers);
    let bad = |what: &str| Error::BadUrl(format!("{what} of {:?}", request.url));
    outgoing
        .set_method(&method(&request.method))
        .map_err(|()| bad("the method"))?;
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| bad("the scheme"))?;
    outgoing
        .set_authority(Some(authority))
        .map_err(|()| bad("the host"))?;
    outgoing
        .set_path_with_query(Some(&path))
        .map_err(|()| bad("the path"))?;
    let body = outgoing.body().map_err(|()| bad("the body"))?;
    let pending = outgoing_handler::handle(outgoing, None)?;
    // A failure to send the body is reported after the response's own: when the host refuses
    // the request or cannot connect, the response says why, where the body only says that
    // nobody took it.
    let sent = write_body(body, &request.body);
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(code.into()),
        Some(Err(())) | None => return Err(Error::Other("no response".into())),
    };
    sent?;
    let status = response.status();
    let headers = response.headers().entries();
    // With the length declared, the read that would only say the body ended is skipped once
    // that many bytes are in (the host has read the whole body by then: hyper ends a body of
    // known length with its last byte, and the connection goes back to the pool).
    let length = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| {
            std::str::from_utf8(value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        });
    let incoming = response.consume().map_err(|()| bad("the response body"))?;
    let mut bytes = Vec::with_capacity(length.unwrap_or(0).min(READ_BYTES as usize));
    {
        let stream = incoming.stream().map_err(|()| bad("the response body"))?;
        loop {
            if length.is_some_and(|length| bytes.len() >= length) {
                break;
            }
            match stream.blocking_read(READ_BYTES) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(wasip2::io::streams::StreamError::Closed) => break,
                Err(wasip2::io::streams::StreamError::LastOperationFailed(e)) => {
                    let code = wasip2::http::types::http_error_code(&e);
                    return Err(code.map_or_else(|| Error::Other(e.to_debug_string()), Error::from));
                }
            }
        }
    }
    // Trailers, if any, are not kept: the body is dropped rather than finished (finishing
    // would make a future for them, one more resource to make and drop).
    drop(incoming);
    Ok(Response {
        status,
        headers,
        body: bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_what_wasi_http_takes() {
        let parts = |url| {
            let (scheme, authority, path) = split_url(url).unwrap();
            (matches!(scheme, Scheme::Https), authority.to_owned(), path)
        };
        assert_eq!(
            parts("https://a.example/x/y?q=1"),
            (true, "a.example".into(), "/x/y?q=1".into())
        );
        assert_eq!(
            parts("http://127.0.0.1:9000"),
            (false, "127.0.0.1:9000".into(), "/".into())
        );
        assert_eq!(
            parts("https://a.example?q"),
            (true, "a.example".into(), "/?q".into())
        );
        assert_eq!(
            parts("HTTPS://a.example/p#frag"),
            (true, "a.example".into(), "/p".into())
        );
        for bad in ["a.example/x", "ftp://a.example", "https:///x"] {
            assert!(matches!(split_url(bad), Err(Error::BadUrl(_))), "{bad}");
        }
    }

    #[test]
    fn errors_answer_502_or_504() {
        let status = |e: Error| match e.into_outcome() {
            Outcome::Respond(r) => r.status(),
            other => panic!("{other:?}"),
        };
        assert_eq!(status(Error::Timeout), 504);
        assert_eq!(status(Error::Denied), 502);
        assert_eq!(Error::from(ErrorCode::HttpRequestDenied), Error::Denied);
        assert_eq!(
            Error::from(ErrorCode::DestinationIpProhibited),
            Error::Prohibited
        );
        assert_eq!(
            Error::from(ErrorCode::ConnectionReadTimeout),
            Error::Timeout
        );
    }
}
