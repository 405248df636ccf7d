//! Responses: a status, headers and a body in; the bytes for the wire out.
//!
//! The host owns framing and connection management: `Content-Length`, `Transfer-Encoding`,
//! `Connection`, `Keep-Alive` and `Date` set by a plugin are replaced, and a plugin's
//! `Connection: close` is honoured by closing after the response. Header names and values from a
//! plugin are checked, so a plugin cannot split a response with a CR or LF.
//!
//! Everything is appended to a caller-owned buffer, without `format!`, so a worker can reuse one
//! buffer for every response it writes.

use super::encoding::{self, Coding};
use super::{Field, Version, date, has_token, header};

/// What the encoder needs to know about the request being answered.
#[derive(Debug, Clone, Copy)]
pub struct RequestMeta<'a> {
    pub version: Version,
    /// `HEAD`: send the headers a `GET` would get, and no body.
    pub head: bool,
    /// The client asked for the connection to stay open.
    pub keep_alive: bool,
    /// The request's `Accept-Encoding` value.
    pub accept_encoding: Option<&'a [u8]>,
}

/// Why a plugin's response cannot be sent as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("status {0} is not a final status code (200-599; 1xx are the host's)")]
    Status(u16),
    #[error("header name {0:?} is not a valid token")]
    HeaderName(String),
    #[error("the value of header {0:?} contains a control character")]
    HeaderValue(String),
}

/// Checks header fields a plugin wants sent: each name a token, each value free of control
/// characters other than horizontal tab (RFC 9110 §5.1, §5.5). The one rule for every
/// response a plugin writes, the `101` of a WebSocket upgrade included.
pub(crate) fn check_headers<F: Field>(headers: &[F]) -> Result<(), EncodeError> {
    for field in headers {
        let name = field.name();
        if name.is_empty() || !name.iter().copied().all(is_token_byte) {
            return Err(EncodeError::HeaderName(
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        if !field.value().iter().all(|&b| FIELD_VALUE[usize::from(b)]) {
            // A token is ASCII: the name is text here.
            return Err(EncodeError::HeaderValue(
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
    }
    Ok(())
}

/// Headers the host writes itself; a plugin's copies are dropped.
const HOST_OWNED: [&str; 6] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "date",
    "upgrade",
];

pub(super) fn host_owned(name: &[u8]) -> bool {
    HOST_OWNED
        .iter()
        .any(|owned| name.eq_ignore_ascii_case(owned.as_bytes()))
}

/// What `encode` writes around the plugin's headers and body, at most: the status line, the
/// date, vary, content-encoding, content-length and connection lines, and the blank line.
const FRAMING_MAX: usize = 256;

/// Appends a complete response to `out`. Returns whether the connection stays open afterwards.
pub fn encode<F: Field>(
    status: u16,
    headers: &[F],
    body: &[u8],
    req: &RequestMeta<'_>,
    out: &mut Vec<u8>,
) -> Result<bool, EncodeError> {
    if !(200..=599).contains(&status) {
        return Err(EncodeError::Status(status));
    }
    check_headers(headers)?;
    let plugin_closes = header(headers, "connection").is_some_and(|v| has_token(v, "close"));
    let keep_alive = req.keep_alive && !plugin_closes;
    // 204 and 304 have no body and no length; 205 has no body, and says so with a length of
    // zero (RFC 9110 §15.3.5, §15.3.6, §15.4.5).
    let bodiless = status == 204 || status == 304;
    let empty = bodiless || status == 205;

    // HEAD: a plugin that answers it without a body may declare the length GET's body would
    // have (as a wasi:http component does). A length is sent only where it is the one GET
    // would send (RFC 9110 §8.6): not where content coding would change it.
    let declared = if req.head && body.is_empty() && !empty {
        header(headers, "content-length").and_then(parse_length)
    } else {
        None
    };
    let mut length_unknown = false;

    // Content coding: only for a body we may change, of a type worth it.
    let mut coded: Option<(Coding, Vec<u8>)> = None;
    let mut vary = false;
    if !empty
        && header(headers, "content-encoding").is_none()
        && encoding::compressible(
            header(headers, "content-type"),
            declared.unwrap_or(body.len()),
        )
    {
        vary = true;
        if let Some(coding) = encoding::negotiate(req.accept_encoding) {
            if declared.is_some() {
                length_unknown = true;
            } else {
                let compressed = encoding::compress(coding, body);
                if compressed.len() < body.len() {
                    coded = Some((coding, compressed));
                }
            }
        }
    }
    let payload: &[u8] = match &coded {
        Some((_, bytes)) => bytes,
        None if empty => &[],
        None => body,
    };

    // Sized once: the response is written without growing the buffer.
    let fields: usize = headers
        .iter()
        .map(|f| f.name().len() + f.value().len() + 4)
        .sum();
    let sent = if req.head { 0 } else { payload.len() };
    out.reserve(FRAMING_MAX + fields + sent);
    write_head_fields(
        status,
        headers,
        vary,
        coded.as_ref().map(|(coding, _)| *coding),
        |_| false,
        out,
    );
    if !bodiless && !length_unknown {
        out.extend_from_slice(b"content-length: ");
        let length = declared.unwrap_or(payload.len());
        out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    connection_header(req.version, keep_alive, out);
    out.extend_from_slice(b"\r\n");
    if !req.head {
        out.extend_from_slice(payload);
    }
    Ok(keep_alive)
}

/// Writes the status line, the date and a plugin's header fields, as every response the
/// host sends for a plugin has them: host-owned fields and those `dropped` says are left
/// out, values trimmed, `Vary: Accept-Encoding` added where the body's coding was
/// negotiated (`vary`), and `coding`'s `Content-Encoding`. The framing fields and the
/// connection's come after, from the caller.
pub(super) fn write_head_fields<F: Field>(
    status: u16,
    headers: &[F],
    vary: bool,
    coding: Option<Coding>,
    dropped: impl Fn(&[u8]) -> bool,
    out: &mut Vec<u8>,
) {
    status_line(status, out);
    out.extend_from_slice(b"date: ");
    date::append_now(out);
    out.extend_from_slice(b"\r\n");
    let mut vary_written = false;
    for field in headers {
        // A field value has no leading or trailing whitespace (RFC 9110 §5.5): what a plugin
        // puts there is trimmed, as a recipient would.
        let (name, value) = (field.name(), trim_ows(field.value()));
        if host_owned(name) || dropped(name) {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        if vary && !vary_written && name.eq_ignore_ascii_case(b"vary") {
            vary_written = true;
            if !has_token(value, "accept-encoding") && !has_token(value, "*") {
                out.extend_from_slice(b", Accept-Encoding");
            }
        }
        out.extend_from_slice(b"\r\n");
    }
    if vary && !vary_written {
        out.extend_from_slice(b"vary: Accept-Encoding\r\n");
    }
    if let Some(coding) = coding {
        out.extend_from_slice(b"content-encoding: ");
        out.extend_from_slice(coding.token().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// A `Content-Length` value: decimal digits only, as RFC 9110 §8.6 writes it.
pub(super) fn parse_length(value: &[u8]) -> Option<usize> {
    let value = trim_ows(value);
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Appends a small plain-text response the host writes itself (an error, 404, 503...), or
/// one without a body when `message` is empty. `extra` headers are trusted. Returns whether
/// the connection stays open afterwards.
pub(crate) fn encode_simple(
    status: u16,
    extra: &[(&str, &str)],
    message: &str,
    req: &RequestMeta<'_>,
    out: &mut Vec<u8>,
) -> bool {
    let fields: usize = extra.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    out.reserve(FRAMING_MAX + fields + message.len() + 1);
    status_line(status, out);
    out.extend_from_slice(b"date: ");
    date::append_now(out);
    out.extend_from_slice(b"\r\n");
    if !message.is_empty() {
        out.extend_from_slice(b"content-type: text/plain; charset=utf-8\r\n");
    }
    for (name, value) in extra {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let body_len = if message.is_empty() {
        0
    } else {
        message.len() + 1
    };
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
    out.extend_from_slice(b"\r\n");
    connection_header(req.version, req.keep_alive, out);
    out.extend_from_slice(b"\r\n");
    if !req.head && !message.is_empty() {
        out.extend_from_slice(message.as_bytes());
        out.push(b'\n');
    }
    req.keep_alive
}

/// The interim response that tells a client to send the body it announced (RFC 9110 §10.1.1).
pub(crate) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

pub(super) fn connection_header(version: Version, keep_alive: bool, out: &mut Vec<u8>) {
    match (keep_alive, version) {
        (false, _) => out.extend_from_slice(b"connection: close\r\n"),
        (true, Version::Http10) => out.extend_from_slice(b"connection: keep-alive\r\n"),
        (true, Version::Http11) => {}
    }
}

/// `HTTP/1.1 SP status SP reason CRLF`; the SP before the reason is present even when the
/// reason is empty (RFC 9112 §4).
pub(super) fn status_line(status: u16, out: &mut Vec<u8>) {
    if status == 200 {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn is_token_byte(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

/// `tchar` of RFC 9110 §5.6.2, by byte.
static TOKEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    table
};

/// `value` without the spaces and tabs around it (RFC 9110 §5.6.3 OWS).
pub(super) fn trim_ows(value: &[u8]) -> &[u8] {
    let start = value.iter().position(|&b| b != b' ' && b != b'\t');
    let end = value.iter().rposition(|&b| b != b' ' && b != b'\t');
    match (start, end) {
        (Some(start), Some(end)) => &value[start..=end],
        _ => &[],
    }
}

/// Bytes a field value may hold: anything but control characters, horizontal tab allowed
/// (RFC 9110 §5.5; obs-text passes through).
static FIELD_VALUE: [bool; 256] = {
    let mut table = [true; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b == 0x09;
        b += 1;
    }
    table[0x7f] = false;
    table
};

/// The standard reason phrase, or "" for codes without one.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Header;

    const GET: RequestMeta<'static> = RequestMeta {
        version: Version::Http11,
        head: false,
        keep_alive: true,
        accept_encoding: None,
    };

    fn text(status: u16, headers: &[Header], body: &[u8], req: RequestMeta<'_>) -> String {
        let mut out = Vec::new();
        encode(status, headers, body, &req, &mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    fn h(name: &str, value: &str) -> Header {
        (name.to_owned(), value.as_bytes().to_vec())
    }

    #[test]
    fn the_byte_tables_follow_the_rfc() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_token_byte(b), tchar, "token byte {b:#04x}");
            let allowed = !((b < 0x20 && b != b'\t') || b == 0x7f);
            assert_eq!(FIELD_VALUE[usize::from(b)], allowed, "value byte {b:#04x}");
        }
    }

    #[test]
    fn the_response_is_written_without_growing_the_buffer() {
        let body = "compressible text, ".repeat(500);
        let headers = [
            h("Content-Type", "text/plain"),
            h("X-Long", &"v".repeat(3000)),
            h("Vary", "Origin"),
        ];
        let fields: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let gzip = RequestMeta {
            version: Version::Http10,
            accept_encoding: Some(b"gzip"),
            ..GET
        };
        for (status, req) in [(200, GET), (511, GET), (511, gzip)] {
            let mut out = Vec::new();
            encode(status, &headers, body.as_bytes(), &req, &mut out).unwrap();
            // Reserved once (a buffer that grew would have at least doubled), and the bound
            // holds with every line the host adds (vary, coding, keep-alive for HTTP/1.0).
            let text = String::from_utf8_lossy(&out);
            let sent: usize = text
                .split("content-length: ")
                .nth(1)
                .and_then(|rest| rest.split("\r\n").next())
                .map(|n| n.parse().unwrap())
                .unwrap();
            assert_eq!(
                req.accept_encoding.is_some(),
                sent < body.len(),
                "gzip when asked"
            );
            assert_eq!(out.capacity(), FRAMING_MAX + fields + sent);
            assert!(out.len() <= out.capacity());
        }
    }

    // See: issue 32, finding 6: header values were sent with the whitespace a plugin put
    // around them.
    #[test]
    fn whitespace_around_a_value_is_trimmed() {
        let t = text(
            200,
            &[
                h("X-A", "  padded\t "),
                h("X-B", " \t "),
                h("X-C", "in ner"),
            ],
            b"",
            GET,
        );
        assert!(t.contains("\r\nX-A: padded\r\n"), "{t}");
        assert!(t.contains("\r\nX-B: \r\n"), "{t}");
        assert!(t.contains("\r\nX-C: in ner\r\n"), "{t}");
    }

    #[test]
    fn status_line_keeps_the_space_without_a_reason() {
        assert!(text(299, &[], b"", GET).starts_with("HTTP/1.1 299 \r\n"));
        assert!(text(200, &[], b"", GET).starts_with("HTTP/1.1 200 OK\r\n"));
    }

    #[test]
    fn content_length_is_set_and_omitted_for_204() {
        let t = text(200, &[h("Content-Length", "999")], b"abc", GET);
        assert!(t.contains("content-length: 3\r\n"), "{t}");
        assert!(!t.contains("999"));
        let t = text(204, &[], b"ignored", GET);
        assert!(!t.to_ascii_lowercase().contains("content-length"), "{t}");
        assert!(t.ends_with("\r\n\r\n"));
    }

    #[test]
    fn head_has_length_but_no_body() {
        let req = RequestMeta { head: true, ..GET };
        let t = text(200, &[], b"abcdef", req);
        assert!(t.contains("content-length: 6\r\n"));
        assert!(t.ends_with("\r\n\r\n"));
    }

    #[test]
    fn head_without_a_body_keeps_the_declared_length_when_get_would_send_it() {
        let req = RequestMeta { head: true, ..GET };
        // Declared, and GET would send it as is: sent, once, and no body.
        let t = text(200, &[h("content-length", " 5 ")], b"", req);
        assert_eq!(t.matches("content-length").count(), 1, "{t}");
        assert!(t.contains("content-length: 5\r\n"), "{t}");
        assert!(t.ends_with("\r\n\r\n"), "{t}");
        // Not a number: the body's own length, zero.
        let t = text(200, &[h("content-length", "5x")], b"", req);
        assert!(t.contains("content-length: 0\r\n"), "{t}");
        // A body was given: its length wins over the declared one.
        let t = text(200, &[h("content-length", "99")], b"abc", req);
        assert!(t.contains("content-length: 3\r\n"), "{t}");
        // GET would be compressed for this client: its length is unknown, none is sent.
        let gzip = RequestMeta {
            accept_encoding: Some(b"gzip"),
            ..req
        };
        let big = (crate::limits::GZIP_MIN_BYTES + 1).to_string();
        let typed = [h("content-type", "text/plain"), h("content-length", &big)];
        let t = text(200, &typed, b"", gzip);
        assert!(!t.contains("content-length"), "{t}");
        assert!(t.contains("vary: Accept-Encoding\r\n"), "{t}");
        // ... and is sent for a client that takes no coding.
        let t = text(200, &typed, b"", req);
        assert!(t.contains(&format!("content-length: {big}\r\n")), "{t}");
        // A GET is never framed by a declared length.
        let t = text(200, &[h("content-length", "5")], b"", GET);
        assert!(t.contains("content-length: 0\r\n"), "{t}");
    }

    #[test]
    fn connection_headers() {
        let t = text(200, &[h("Connection", "close")], b"", GET);
        assert!(t.contains("connection: close\r\n"));
        let mut out = Vec::new();
        let keep = encode(200, &[h("Connection", "close")], b"", &GET, &mut out).unwrap();
        assert!(!keep);
        let req = RequestMeta {
            version: Version::Http10,
            ..GET
        };
        assert!(text(200, &[], b"", req).contains("connection: keep-alive\r\n"));
    }

    #[test]
    fn plugin_cannot_split_the_response() {
        let mut out = Vec::new();
        let bad = [h("X-A", "a\r\nSet-Cookie: x")];
        assert!(encode(200, &bad, b"", &GET, &mut out).is_err());
        assert!(encode(200, &[h("Bad Name", "x")], b"", &GET, &mut out).is_err());
        assert!(encode(101, &[] as &[Header], b"", &GET, &mut out).is_err());
        for control in ["a\x01b", "a\x1fb", "a\x7fb", "a\0b"] {
            let e = encode(200, &[h("X-A", control)], b"", &GET, &mut out);
            assert_eq!(
                e,
                Err(EncodeError::HeaderValue("X-A".into())),
                "{control:?}"
            );
        }
        assert!(encode(200, &[h("X-A", "tab\tis fine")], b"", &GET, &mut out).is_ok());
        for name in ["X(A)", "X/A", "X@A", "X\"A"] {
            assert!(encode(200, &[h(name, "v")], b"", &GET, &mut out).is_err());
        }
        for status in [600, 999, 199] {
            assert_eq!(
                encode(status, &[] as &[Header], b"", &GET, &mut out),
                Err(EncodeError::Status(status))
            );
        }
    }

    #[test]
    fn reset_content_has_no_body_and_a_zero_length() {
        let t = text(205, &[], b"not allowed", GET);
        assert!(t.contains("content-length: 0\r\n"), "{t}");
        assert!(t.ends_with("\r\n\r\n"), "{t}");
    }

    #[test]
    fn gzip_when_accepted_with_vary() {
        let body = "line of text\n".repeat(200);
        let ct = [h("Content-Type", "text/plain")];
        let req = RequestMeta {
            accept_encoding: Some(b"gzip"),
            ..GET
        };
        let t = text(200, &ct, body.as_bytes(), req);
        assert!(t.contains("content-encoding: gzip\r\n"), "{t}");
        assert!(t.contains("vary: Accept-Encoding\r\n"));
        let t = text(200, &ct, body.as_bytes(), GET);
        assert!(!t.contains("content-encoding"));
        assert!(t.contains("vary: Accept-Encoding\r\n"));
        let pre = [h("Content-Type", "text/plain"), h("Content-Encoding", "br")];
        let t = text(200, &pre, body.as_bytes(), req);
        assert!(!t.contains("gzip"));
        let merged = [h("Content-Type", "text/plain"), h("Vary", "Origin")];
        let t = text(200, &merged, body.as_bytes(), req);
        assert!(t.contains("Vary: Origin, Accept-Encoding\r\n"), "{t}");
    }
}
