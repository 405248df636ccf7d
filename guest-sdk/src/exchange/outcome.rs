//! [`Outcome`], what a handler decided, and [`IntoOutcome`], which lets a handler return a
//! [`Response`], a string, an `Outcome` or a `Result` of any of these.

use crate::Response;
use crate::wit;

/// What a request handler decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Write this response.
    Respond(Response),
    /// Switch the connection to the WebSocket protocol; events then go to the plugin's
    /// [`WebSocketHandler`](crate::ws::WebSocketHandler).
    Upgrade {
        /// The subprotocol chosen from the client's `Sec-WebSocket-Protocol` offer, if any.
        protocol: Option<String>,
        /// Extra headers for the `101 Switching Protocols` response.
        headers: Vec<(String, Vec<u8>)>,
    },
    /// The response was already sent with [`Request::respond`](crate::Request::respond). If it
    /// was not, the host answers `500`.
    Done,
}

impl Outcome {
    /// Accepts a WebSocket upgrade with no subprotocol and no extra headers.
    pub fn upgrade() -> Self {
        Self::Upgrade {
            protocol: None,
            headers: Vec::new(),
        }
    }
}

impl From<Outcome> for wit::Outcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Respond(response) => Self::Respond(response.into_raw()),
            Outcome::Upgrade { protocol, headers } => Self::Upgrade(wit::Upgrade {
                protocol,
                headers: headers
                    .into_iter()
                    .map(|(name, value)| wit::Header { name, value })
                    .collect(),
            }),
            Outcome::Done => Self::Done,
        }
    }
}

/// Anything a handler may return.
///
/// Implemented for [`Response`], [`Outcome`], `&str` and `String` (a `200` text response),
/// [`JsonError`](crate::JsonError) (a `400`) and `Result<T, E>` where both sides are
/// `IntoOutcome`, so a handler can bail out early with `?`:
///
/// ```
/// use ankh_guest::{Request, Response};
///
/// fn double(req: &Request) -> Result<Response, Response> {
///     let n: i64 = req
///         .query_param("n")
///         .and_then(|n| n.parse().ok())
///         .ok_or_else(|| Response::bad_request("n must be an integer"))?;
///     Ok(Response::text((n * 2).to_string()))
/// }
/// # let _ = double;
/// ```
pub trait IntoOutcome {
    /// Converts `self` into the outcome handed to the host.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoOutcome for Response {
    fn into_outcome(self) -> Outcome {
        Outcome::Respond(self)
    }
}

impl IntoOutcome for &str {
    fn into_outcome(self) -> Outcome {
        Outcome::Respond(Response::text(self))
    }
}

impl IntoOutcome for String {
    fn into_outcome(self) -> Outcome {
        Outcome::Respond(Response::text(self))
    }
}

impl<T: IntoOutcome, E: IntoOutcome> IntoOutcome for Result<T, E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(value) => value.into_outcome(),
            Err(err) => err.into_outcome(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!("hi".into_outcome(), Outcome::Respond(Response::text("hi")));
        assert_eq!(
            String::from("hi").into_outcome(),
            Outcome::Respond(Response::text("hi"))
        );
        let err: Result<&str, Response> = Err(Response::not_found());
        assert_eq!(err.into_outcome(), Outcome::Respond(Response::not_found()));
        assert_eq!(Outcome::Done.into_outcome(), Outcome::Done);
    }

    #[test]
    fn upgrade_to_wit() {
        let outcome = Outcome::Upgrade {
            protocol: Some("chat".to_owned()),
            headers: vec![("X-A".to_owned(), b"1".to_vec())],
        };
        let wit::Outcome::Upgrade(upgrade) = wit::Outcome::from(outcome) else {
            panic!("expected an upgrade");
        };
        assert_eq!(upgrade.protocol.as_deref(), Some("chat"));
        assert_eq!(upgrade.headers[0].name, "X-A");
    }
}
