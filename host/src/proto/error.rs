//! Why a request could not be parsed, each reason mapped to exactly one status code.

use std::fmt;

/// A protocol violation by the client. After any of these the connection is closed, because the
/// framing of whatever follows can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoError {
    /// The request line, a header line or the chunked framing is malformed.
    BadRequest(&'static str),
    /// The request head is over `max_head_bytes`, or has more than `max_headers` fields.
    HeadTooLarge,
    /// The request-target is over `max_target_bytes`.
    TargetTooLong,
    /// The body (declared or accumulated) is over `max_body_bytes`.
    BodyTooLarge,
    /// A transfer coding other than `chunked` was applied.
    UnsupportedTransferCoding,
    /// An `Expect` value other than `100-continue`.
    ExpectationFailed,
    /// The request line names an HTTP version other than 1.0 and 1.1.
    VersionNotSupported,
    /// The request head or body did not arrive within its deadline.
    Timeout,
}

impl ProtoError {
    /// The status code that answers this error.
    pub fn status(self) -> u16 {
        match self {
            ProtoError::BadRequest(_) => 400,
            ProtoError::HeadTooLarge => 431,
            ProtoError::TargetTooLong => 414,
            ProtoError::BodyTooLarge => 413,
            ProtoError::UnsupportedTransferCoding => 501,
            ProtoError::ExpectationFailed => 417,
            ProtoError::VersionNotSupported => 505,
            ProtoError::Timeout => 408,
        }
    }
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::BadRequest(why) => write!(f, "bad request: {why}"),
            ProtoError::HeadTooLarge => f.write_str("request header fields too large"),
            ProtoError::TargetTooLong => f.write_str("request-target too long"),
            ProtoError::BodyTooLarge => f.write_str("request body too large"),
            ProtoError::UnsupportedTransferCoding => {
                f.write_str("transfer coding other than chunked is not implemented")
            }
            ProtoError::ExpectationFailed => {
                f.write_str("only `Expect: 100-continue` is supported")
            }
            ProtoError::VersionNotSupported => f.write_str("HTTP version not supported"),
            ProtoError::Timeout => f.write_str("the request did not arrive in time"),
        }
    }
}

impl std::error::Error for ProtoError {}
