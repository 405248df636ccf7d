//! Request heads: `&[u8]` → [`Status::Partial`] or [`Status::Complete`]`(`[`RequestHead`]`, consumed)`.
//!
//! `httparse` does the tokenising and already refuses what RFC 9112 forbids in the syntax (a
//! space before the colon, obs-fold, CTLs and bare CR in values, malformed request lines). This
//! module adds the semantic rules that keep framing unambiguous (RFC 9112 §6.1, §6.3):
//! one `Host`, at most one valid `Content-Length`, never both `Content-Length` and
//! `Transfer-Encoding`, and `chunked` as the only and final transfer coding.
//!
//! It also settles what the request is for, once, so every later stage agrees:
//! - the `Host` value must be an authority (`host[:port]`, no userinfo, RFC 9110 §7.2);
//! - an absolute-form target's authority replaces `Host` (RFC 9112 §3.2.2);
//! - the path has its dot segments removed (RFC 3986 §5.2.4, `%2e` counting as `.`), so
//!   `/evil/../hello` is routed, and seen by the plugin, as `/hello`, as a normalising proxy in
//!   front would route it;
//! - a target with a fragment (`#`) or raw non-ASCII bytes is refused.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::sync::Arc;

use super::{Header, ProtoError, Status, Version, has_token};
use crate::limits::Limits;

/// Header slots kept on the stack while parsing; `limits.max_headers` above this uses the heap.
const STACK_HEADER_SLOTS: usize = 128;

/// How the body of a request is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// `Content-Length: n`, with `n > 0`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed and validated request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method token, e.g. `GET`. Shared, like the path, with the call's access line.
    pub method: Arc<str>,
    /// The path of the request-target, still percent-encoded (`/` for `*` and for absolute-form
    /// targets without a path).
    pub path: Arc<str>,
    /// The query after `?`, without the `?` (empty when absent).
    pub query: String,
    pub version: Version,
    /// Header fields in the order received.
    pub headers: Vec<Header>,
    pub framing: Framing,
    /// Whether the client wants the connection kept open after this exchange.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
}

impl RequestHead {
    /// True for `HEAD`, whose response carries headers only.
    pub(crate) fn is_head(&self) -> bool {
        &*self.method == "HEAD"
    }
}

/// Parses one request head from the start of `buf`.
///
/// Leading empty lines are skipped (RFC 9112 §2.2). Returns `Partial` while the head is
/// incomplete and within limits.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Status<RequestHead>, ProtoError> {
    // Header slots for httparse: on the stack and left uninitialised for the usual limit (a
    // zeroed `Vec` of 100 slots was an allocation and a 3 KiB memset per parse attempt); on
    // the heap only for a limit above it.
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADER_SLOTS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] =
        if limits.max_headers <= STACK_HEADER_SLOTS {
            &mut stack[..limits.max_headers]
        } else {
            heap.resize_with(limits.max_headers, MaybeUninit::uninit);
            &mut heap
        };
    let mut req = httparse::Request::new(&mut []);
    let consumed = match req.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return partial(buf, req.path.is_some(), limits);
        }
        Err(e) => return Err(map_error(e, buf)),
    };
    if consumed > limits.max_head_bytes {
        return Err(ProtoError::HeadTooLarge);
    }
    let method = req.method.unwrap_or_default();
    let target = req.path.unwrap_or_default();
    if target.len() > limits.max_target_bytes {
        return Err(ProtoError::TargetTooLong);
    }
    let version = match req.version {
        Some(0) => Version::Http10,
        _ => Version::Http11,
    };
    if target.bytes().any(|b| b == b'#' || !b.is_ascii_graphic()) {
        return Err(ProtoError::BadRequest(
            "the request-target has a fragment or a byte that is not printable ASCII",
        ));
    }
    let (path, query, authority) = split_target(method, target)?;
    // RFC 3986 allows none of these in a target, and clients encode them: the WHATWG URL
    // standard, which browsers and fetch implementations follow, percent-encodes `"`, `<` and
    // `>` wherever they are, and `{` and `}` in a path. A query keeps `{` and `}` as
    // browsers send them raw there.
    if path.bytes().any(|b| b"\"<>{}".contains(&b)) || query.bytes().any(|b| b"\"<>".contains(&b)) {
        return Err(ProtoError::BadRequest(
            "the request-target has a character RFC 3986 does not allow (\", <, >, or { } in the path): percent-encode it",
        ));
    }
    let mut headers: Vec<Header> = req
        .headers
        .iter()
        .map(|h| (h.name.to_owned(), h.value.to_vec()))
        .collect();
    let path = if path == "*" {
        Cow::Borrowed(path)
    } else {
        remove_dot_segments(path)
    };
    let mut head = validate(method, &path, query, version, &headers)?;
    if let Some(authority) = authority {
        if !valid_authority(authority.as_bytes()) {
            return Err(ProtoError::BadRequest(
                "invalid authority in the request-target",
            ));
        }
        // The target's authority is the request's host; a Host field is ignored.
        match headers
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        {
            Some((_, value)) => *value = authority.as_bytes().to_vec(),
            None => headers.push(("host".to_owned(), authority.as_bytes().to_vec())),
        }
    }
    head.headers = headers;
    Ok(Status::Complete(head, consumed))
}

/// Whether `value` is `uri-host [":" port]` with a non-empty host (RFC 9110 §4.2.1, §7.2;
/// RFC 3986 §3.2.2): a reg-name or IPv4 address, or an IP literal in brackets. Userinfo
/// (`user@host`), whitespace and anything else outside the grammar are refused.
fn valid_authority(value: &[u8]) -> bool {
    let sub_delim = |b: u8| b"!$&'()*+,;=".contains(&b);
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let (host, port) = if value.first() == Some(&b'[') {
        let Some(end) = value.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &value[1..end];
        if literal.is_empty()
            || !literal
                .iter()
                .all(|&b| unreserved(b) || sub_delim(b) || b == b':')
        {
            return false;
        }
        match &value[end + 1..] {
            [] => (&value[..=end], None),
            [b':', port @ ..] => (&value[..=end], Some(port)),
            _ => return false,
        }
    } else {
        let (host, port) = match value.iter().rposition(|&b| b == b':') {
            Some(colon) => (&value[..colon], Some(&value[colon + 1..])),
            None => (value, None),
        };
        let mut i = 0;
        while i < host.len() {
            let b = host[i];
            if b == b'%' {
                if !(host.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && host.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
                {
                    return false;
                }
                i += 3;
                continue;
            }
            if !unreserved(b) && !sub_delim(b) {
                return false;
            }
            i += 1;
        }
        (host, port)
    };
    !host.is_empty() && port.is_none_or(|p| p.len() <= 5 && p.iter().all(u8::is_ascii_digit))
}

/// Removes `.` and `..` segments from an absolute path (RFC 3986 §5.2.4), with `%2e` read as
/// `.` (RFC 3986 §6.2.2.2). A `..` above the root stays at the root.
fn remove_dot_segments(path: &str) -> Cow<'_, str> {
    #[derive(PartialEq)]
    enum Dots {
        None,
        One,
        Two,
    }
    fn dots(segment: &str) -> Dots {
        let one = |s: &str| s == "." || s.eq_ignore_ascii_case("%2e");
        if one(segment) {
            return Dots::One;
        }
        // `..`, `.%2e`, `%2e.`, `%2e%2e`: two dots, split after the first.
        let two = [1, 3].into_iter().any(|at| {
            segment
                .get(..at)
                .zip(segment.get(at..))
                .is_some_and(|(a, b)| one(a) && one(b))
        });
        if two { Dots::Two } else { Dots::None }
    }
    // Most paths have no dot at all, encoded or not.
    if !path.contains('.') && !path.contains('%') {
        return Cow::Borrowed(path);
    }
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    if segments.iter().all(|s| dots(s) == Dots::None) {
        return Cow::Borrowed(path);
    }
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        match dots(segment) {
            Dots::None => out.push(segment),
            Dots::One => {}
            Dots::Two => {
                out.pop();
            }
        }
        // A trailing `.` or `..` leaves a directory: `/a/b/..` is `/a/`.
        if i == last && dots(segment) != Dots::None {
            out.push("");
        }
    }
    Cow::Owned(format!("/{}", out.join("/")))
}

/// Decides whether an incomplete head may still grow.
fn partial(
    buf: &[u8],
    request_line_done: bool,
    limits: &Limits,
) -> Result<Status<RequestHead>, ProtoError> {
    if buf.len() <= limits.max_head_bytes {
        return Ok(Status::Partial);
    }
    // Over the head limit: blame the target when the request line itself never ended.
    let line_ends = buf.iter().position(|&b| b == b'\n');
    if !request_line_done && line_ends.is_none_or(|end| end > limits.max_target_bytes) {
        return Err(ProtoError::TargetTooLong);
    }
    Err(ProtoError::HeadTooLarge)
}

fn map_error(e: httparse::Error, buf: &[u8]) -> ProtoError {
    match e {
        httparse::Error::TooManyHeaders => ProtoError::HeadTooLarge,
        httparse::Error::Version => {
            // `HTTP/2.0`, `HTTP/1.2`: a well-formed version we do not speak. Anything else
            // in that position is just malformed.
            if looks_like_version(buf) {
                ProtoError::VersionNotSupported
            } else {
                ProtoError::BadRequest("malformed HTTP version")
            }
        }
        httparse::Error::HeaderName => ProtoError::BadRequest("invalid header name"),
        httparse::Error::HeaderValue => ProtoError::BadRequest("invalid header value"),
        httparse::Error::NewLine => ProtoError::BadRequest("invalid line ending"),
        httparse::Error::Token => ProtoError::BadRequest("invalid method or request-target"),
        httparse::Error::Status => ProtoError::BadRequest("invalid request line"),
    }
}

/// True when the request line is well formed (`METHOD SP target SP HTTP/d.d`) apart from naming
/// a version we do not speak.
fn looks_like_version(buf: &[u8]) -> bool {
    let line_end = buf.iter().position(|&b| b == b'\r' || b == b'\n');
    let line = &buf[..line_end.unwrap_or(buf.len())];
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    matches!(parts.as_slice(), [method, target, version]
        if !method.is_empty() && !target.is_empty() && matches!(version,
            [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
                if major.is_ascii_digit() && minor.is_ascii_digit()))
}

/// Splits the request-target into path, query and, for the absolute form, the authority
/// (RFC 9112 §3.2).
fn split_target<'a>(
    method: &str,
    target: &'a str,
) -> Result<(&'a str, &'a str, Option<&'a str>), ProtoError> {
    let (target, authority) = if target.starts_with('/') {
        (target, None)
    } else if target == "*" {
        if method != "OPTIONS" {
            return Err(ProtoError::BadRequest(
                "`*` target is only valid for OPTIONS",
            ));
        }
        return Ok(("*", "", None));
    } else if let Some(rest) = strip_scheme(target) {
        // absolute-form: the authority, then path and query.
        match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[i..], Some(&rest[..i])),
            Some(i) => return Ok(("/", &rest[i + 1..], Some(&rest[..i]))),
            None => ("/", Some(rest)),
        }
    } else {
        return Err(ProtoError::BadRequest("request-target must be a path"));
    };
    Ok(match target.split_once('?') {
        Some((path, query)) => (path, query, authority),
        None => (target, "", authority),
    })
}

fn strip_scheme(target: &str) -> Option<&str> {
    let lower = target.get(..8)?.to_ascii_lowercase();
    if lower.starts_with("http://") {
        Some(&target[7..])
    } else if lower == "https://" {
        Some(&target[8..])
    } else {
        None
    }
}

fn validate(
    method: &str,
    path: &str,
    query: &str,
    version: Version,
    headers: &[Header],
) -> Result<RequestHead, ProtoError> {
    let mut hosts = 0;
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding: Option<&[u8]> = None;
    let mut connection_close = false;
    let mut connection_keep_alive = false;
    let mut expect_continue = false;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            if !valid_authority(value) {
                return Err(ProtoError::BadRequest("invalid Host header"));
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            if content_length.is_some() {
                return Err(ProtoError::BadRequest("more than one Content-Length"));
            }
            content_length = Some(parse_content_length(value)?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if transfer_encoding.is_some() {
                return Err(ProtoError::BadRequest("more than one Transfer-Encoding"));
            }
            transfer_encoding = Some(value);
        } else if name.eq_ignore_ascii_case("connection") {
            connection_close |= has_token(value, "close");
            connection_keep_alive |= has_token(value, "keep-alive");
        } else if name.eq_ignore_ascii_case("expect") {
            if !value.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                return Err(ProtoError::ExpectationFailed);
            }
            expect_continue = true;
        }
    }
    if hosts > 1 || (hosts == 0 && version == Version::Http11) {
        return Err(ProtoError::BadRequest(
            "HTTP/1.1 requires exactly one Host header",
        ));
    }
    let framing = match (content_length, transfer_encoding) {
        (Some(_), Some(_)) => {
            return Err(ProtoError::BadRequest(
                "both Content-Length and Transfer-Encoding",
            ));
        }
        (None, Some(_)) if version == Version::Http10 => {
            return Err(ProtoError::BadRequest(
                "Transfer-Encoding in an HTTP/1.0 request",
            ));
        }
        (None, Some(te)) => chunked_framing(te)?,
        (Some(0), None) | (None, None) => Framing::Empty,
        // Whether `n` is too large is the connection's call: the plugin the path routes to
        // may set a lower limit, and the answer's access line names the request.
        (Some(n), None) => Framing::Length(n),
    };
    let keep_alive = match version {
        Version::Http11 => !connection_close,
        Version::Http10 => connection_keep_alive && !connection_close,
    };
    Ok(RequestHead {
        method: Arc::from(method),
        path: Arc::from(path),
        query: query.to_owned(),
        version,
        headers: Vec::new(),
        framing,
        keep_alive,
        // An expectation only makes sense when a body follows, and an HTTP/1.0 client cannot
        // have one: it must be ignored (RFC 9110 §10.1.1).
        expect_continue: expect_continue && framing != Framing::Empty && version == Version::Http11,
    })
}

/// `Content-Length = 1*DIGIT`, no sign, no whitespace inside, no overflow.
fn parse_content_length(value: &[u8]) -> Result<u64, ProtoError> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ProtoError::BadRequest("invalid Content-Length"));
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(ProtoError::BadRequest("Content-Length overflows"))
    })
}

/// `chunked` must be the final coding; any coding before it is one we do not implement.
fn chunked_framing(te: &[u8]) -> Result<Framing, ProtoError> {
    let codings: Vec<&[u8]> = te.split(|&b| b == b',').map(<[u8]>::trim_ascii).collect();
    match codings.as_slice() {
        [only] if only.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
        [.., last] if last.eq_ignore_ascii_case(b"chunked") => {
            Err(ProtoError::UnsupportedTransferCoding)
        }
        _ => Err(ProtoError::BadRequest(
            "Transfer-Encoding must end in chunked",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(bytes: &[u8]) -> (RequestHead, usize) {
        match parse(bytes, &Limits::default()) {
            Ok(Status::Complete(head, n)) => (head, n),
            other => panic!("expected a complete head, got {other:?}"),
        }
    }

    fn parse_err(bytes: &[u8]) -> u16 {
        match parse(bytes, &Limits::default()) {
            Err(e) => e.status(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    macro_rules! rejects {
        ($($name:ident: $bytes:expr => $status:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_eq!(parse_err($bytes), $status);
            }
        )*};
    }

    rejects! {
        one_space: b"GET /HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        three_spaces: b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        empty_method: b" / HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        http2: b"GET / HTTP/2.0\r\nHost: a\r\n\r\n" => 505;
        two_spaces_before_version: b"GET /  HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        http12x: b"GET / HTTP/1.2x\r\nHost: a\r\n\r\n" => 400;
        cl_and_te: b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" => 400;
        te_and_cl: b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" => 400;
        two_cl: b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n" => 400;
        cl_letters: b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3a\r\n\r\n" => 400;
        cl_negative: b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n" => 400;
        cl_plus: b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n" => 400;
        cl_overflow: b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n" => 400;
        two_te: b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" => 400;
        te_gzip: b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n" => 400;
        te_gzip_chunked: b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" => 501;
        te_chunked_gzip: b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n" => 400;
        no_host: b"GET / HTTP/1.1\r\n\r\n" => 400;
        two_hosts: b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" => 400;
        space_before_colon: b"GET / HTTP/1.1\r\nHost : a\r\n\r\n" => 400;
        obs_fold: b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n" => 400;
        no_colon: b"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n" => 400;
        nul_in_value: b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n" => 400;
        bare_cr_in_value: b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n" => 400;
        expect_other: b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n" => 417;
        relative_target: b"GET foo HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        star_not_options: b"GET * HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        empty_host: b"GET / HTTP/1.1\r\nHost: \r\n\r\n" => 400;
        host_with_space: b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n" => 400;
        host_with_userinfo: b"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n" => 400;
        host_bad_port: b"GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n" => 400;
        host_bad_literal: b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n" => 400;
        fragment: b"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        non_ascii_target: b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
        absolute_form_userinfo: b"GET http://user@evil/ HTTP/1.1\r\nHost: a\r\n\r\n" => 400;
    }

    #[test]
    fn hosts_that_are_authorities() {
        for host in [
            "a",
            "example.com:8080",
            "127.0.0.1",
            "[::1]:443",
            "[::1]",
            "xn--ls8h.la",
            "a:",
        ] {
            let raw = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            parse_ok(raw.as_bytes());
        }
    }

    #[test]
    fn dot_segments_are_removed_before_routing() {
        for (target, path) in [
            ("/evil/../hello", "/hello"),
            ("/evil/%2E%2e/hello", "/hello"),
            ("/a/./b/.", "/a/b/"),
            ("/a/b/..", "/a/"),
            ("/../../x", "/x"),
            ("/..", "/"),
            ("/a/.b/..c", "/a/.b/..c"),
            ("/plain/path", "/plain/path"),
        ] {
            let raw = format!("GET {target}?q=1 HTTP/1.1\r\nHost: a\r\n\r\n");
            let (h, _) = parse_ok(raw.as_bytes());
            assert_eq!((&*h.path, h.query.as_str()), (path, "q=1"), "{target}");
        }
    }

    // See: issue 32, finding 6: a target with `"`, `{`, `}`, `<` or `>` was answered 200.
    #[test]
    fn characters_clients_always_encode_are_refused_in_a_target() {
        for target in [
            "/a\"b",
            "/<x>",
            "/a{b}",
            "/x?q=<script>",
            "/x?q=\"",
            "/a>b?c",
        ] {
            let raw = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
            assert_eq!(parse_err(raw.as_bytes()), 400, "{target}");
        }
        // Browsers send braces raw in a query, and percent-encoded characters are fine.
        for target in ["/x?q={\"a\":1}", "/x?q={a}", "/a%22b%7Bc%7D"] {
            let raw =
                format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n").replace("\"a\"", "%22a%22");
            let (head, _) = parse_ok(raw.as_bytes());
            assert!(head.path.starts_with('/'), "{target}");
        }
    }

    #[test]
    fn parses_a_simple_get() {
        let raw =
            b"GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: example\r\nX-Multi: 1\r\nx-multi: 2\r\n\r\nrest";
        let (head, n) = parse_ok(raw);
        assert_eq!(n, raw.len() - 4);
        assert_eq!(&*head.method, "GET");
        assert_eq!(&*head.path, "/a/b");
        assert_eq!(head.query, "x=1&y=2");
        assert_eq!(head.version, Version::Http11);
        assert_eq!(head.headers.len(), 3);
        assert_eq!(head.headers[2], ("x-multi".to_owned(), b"2".to_vec()));
        assert!(head.keep_alive);
        assert_eq!(head.framing, Framing::Empty);
    }

    #[test]
    fn keep_alive_follows_version_and_connection_tokens() {
        let (h, _) = parse_ok(b"GET / HTTP/1.0\r\n\r\n");
        assert!(!h.keep_alive);
        let (h, _) = parse_ok(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(h.keep_alive);
        let (h, _) =
            parse_ok(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, CLOSE\r\n\r\n");
        assert!(!h.keep_alive);
    }

    #[test]
    fn a_large_declared_body_is_left_to_the_connection_to_refuse() {
        let (h, _) =
            parse_ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999999\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(999_999_999_999));
    }

    #[test]
    fn framing_is_detected() {
        let (h, _) = parse_ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n");
        assert_eq!(h.framing, Framing::Length(12));
        let (h, _) = parse_ok(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked);
        let (h, _) = parse_ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.framing, Framing::Empty);
    }

    #[test]
    fn absolute_form_and_asterisk_targets() {
        let (h, _) = parse_ok(b"GET http://example.com/x?q HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!((&*h.path, h.query.as_str()), ("/x", "q"));
        // The target's authority is the host the plugin sees.
        assert_eq!(
            crate::proto::header(&h.headers, "host"),
            Some(&b"example.com"[..])
        );
        let (h, _) = parse_ok(b"GET http://example.com HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(&*h.path, "/");
        let (h, _) = parse_ok(b"GET http://example.com:81/ HTTP/1.0\r\n\r\n");
        assert_eq!(
            crate::proto::header(&h.headers, "host"),
            Some(&b"example.com:81"[..])
        );
        let (h, _) = parse_ok(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(&*h.path, "*");
    }

    #[test]
    fn leading_empty_lines_are_skipped() {
        let (h, _) = parse_ok(b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(&*h.path, "/");
    }

    #[test]
    fn partial_until_the_blank_line() {
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for end in 0..raw.len() {
            assert_eq!(
                parse(&raw[..end], &Limits::default()),
                Ok(Status::Partial),
                "{end}"
            );
        }
    }

    #[test]
    fn oversized_heads_and_targets() {
        let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: ".to_vec();
        raw.resize(raw.len() + 9000, b'a');
        assert_eq!(parse_err(&raw), 431);
        let mut raw = b"GET /".to_vec();
        raw.resize(raw.len() + 9000, b'a');
        assert_eq!(parse_err(&raw), 414);
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..150 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_err(&many), 431);
    }
}
