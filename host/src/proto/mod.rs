//! Sans-IO HTTP/1.1: bytes in, values out, values in, bytes out. Nothing here touches a socket,
//! a thread or a wasm instance.
//!
//! - [`request`] parses a request head (`Partial` until the blank line arrives);
//! - [`body`] decodes a `Content-Length` or chunked body incrementally;
//! - [`response`] encodes a response, with the headers the host owns and content negotiation;
//! - [`stream`] encodes a response whose body comes in pieces: its head, framing and coding;
//! - [`error`] names every way a client can get the protocol wrong;
//! - [`ws`] checks a WebSocket handshake, and [`frame`] reads and writes WebSocket frames;
//! - [`ws_extension`] negotiates permessage-deflate, and [`ws_deflate`] compresses and inflates.

pub mod body;
pub(crate) mod date;
pub mod encoding;
pub(crate) mod error;
pub mod frame;
pub mod request;
pub mod response;
pub mod stream;
pub(crate) mod ws;
pub mod ws_deflate;
pub mod ws_extension;

pub(crate) use error::ProtoError;

/// The result of feeding bytes to an incremental parser.
#[derive(Debug, PartialEq, Eq)]
pub enum Status<T> {
    /// A complete value, and how many input bytes it used.
    Complete(T, usize),
    /// More input is needed.
    Partial,
}

/// The protocol version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: connections close after one exchange unless asked otherwise.
    Http10,
    /// HTTP/1.1: connections persist unless asked otherwise.
    Http11,
}

/// True when the comma-separated field `value` lists `token` (ASCII case-insensitive, optional
/// whitespace around the commas ignored), as RFC 9110 §5.6.1 defines list-based fields.
pub(crate) fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|item| item.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// A header field as it crosses the host: name as sent, raw value bytes.
pub(crate) type Header = (String, Vec<u8>);

/// A header field, owned ([`Header`]) or read in place from a buffer (`(&[u8], &[u8])`, as
/// a plugin's packed answer holds them): what the response encoder takes. The name is bytes:
/// the encoder checks that it is a token, which is ASCII, so it never needs it as text.
pub trait Field {
    fn name(&self) -> &[u8];
    fn value(&self) -> &[u8];
}

impl Field for Header {
    fn name(&self) -> &[u8] {
        self.0.as_bytes()
    }

    fn value(&self) -> &[u8] {
        &self.1
    }
}

impl Field for (&[u8], &[u8]) {
    fn name(&self) -> &[u8] {
        self.0
    }

    fn value(&self) -> &[u8] {
        self.1
    }
}

/// The value of the first header called `name` (ASCII case-insensitive).
pub(crate) fn header<'a, F: Field>(headers: &'a [F], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|f| f.name().eq_ignore_ascii_case(name.as_bytes()))
        .map(Field::value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_matched_case_insensitively_in_lists() {
        assert!(has_token(b"keep-alive, Upgrade", "upgrade"));
        assert!(has_token(b"  CLOSE ", "close"));
        assert!(has_token(b"a,,close", "close"));
        assert!(!has_token(b"closed", "close"));
        assert!(!has_token(b"", "close"));
    }
}
