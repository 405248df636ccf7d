//! A streamed response: [`Request::stream`](crate::Request::stream) sends the head, and a
//! [`BodyWriter`] writes the body piece by piece as the handler produces it.
//!
//! Each write is a plain blocking call: it returns once the host has room for the bytes, so a
//! handler that writes faster than its client reads waits in `write` (holding no host thread)
//! and never piles the body up in memory. When the client is gone, `write` fails with
//! [`StreamError::Closed`], and every later write fails the same way: the handler should stop
//! and return. A handler that streams returns [`Outcome::Done`]; a `StreamError` converts to
//! it, so `?` works:
//!
//! ```no_run
//! use ankh_guest::prelude::*;
//!
//! fn count(req: &Request) -> Result<Outcome, StreamError> {
//!     let mut body = req.stream(Response::new(200).with_header("content-type", "text/plain"))?;
//!     for i in 0..10 {
//!         body.write(format!("{i}\n"))?;
//!     }
//!     body.finish()?;
//!     Ok(Outcome::Done)
//! }
//! # let _ = count;
//! ```

use crate::Outcome;
use crate::bindings::ankh::plugin::http;
use crate::exchange::IntoOutcome;
use crate::wit;

/// Why a streamed response, or one write of it, failed.
pub use http::StreamError;

/// The body of a streamed response, written piece by piece. Made by
/// [`Request::stream`](crate::Request::stream).
///
/// Dropping it ends the body as [`BodyWriter::finish`] would (so does returning from the
/// handler); a body shorter than a `content-length` its head declared is cut instead.
#[derive(Debug)]
pub struct BodyWriter {
    finished: bool,
}

impl BodyWriter {
    /// Sends the head of `head` (its status and headers), then its body, if it has one, as
    /// the first piece.
    pub(crate) fn start(head: crate::Response) -> Result<BodyWriter, StreamError> {
        let raw = head.into_raw();
        http::start(raw.status, &raw.headers)?;
        let mut writer = BodyWriter { finished: false };
        if !raw.body.is_empty() {
            writer.write(raw.body)?;
        }
        Ok(writer)
    }

    /// Writes the next piece of the body; returns once the host has room for it.
    ///
    /// An empty piece sends nothing. Pieces of any size are fine: the host splits big ones.
    pub fn write(&mut self, bytes: impl AsRef<[u8]>) -> Result<(), StreamError> {
        let bytes = bytes.as_ref();
        if bytes.is_empty() {
            return Ok(());
        }
        http::write(bytes)
    }

    /// Ends the body.
    pub fn finish(self) -> Result<(), StreamError> {
        self.finish_with_trailers(&[])
    }

    /// Ends the body with trailer fields, which reach the client when the body is chunked (an
    /// HTTP/1.1 client, no `content-length` declared) and are dropped otherwise.
    pub fn finish_with_trailers(mut self, trailers: &[(&str, &[u8])]) -> Result<(), StreamError> {
        self.finished = true;
        let trailers: Vec<wit::Header> = trailers
            .iter()
            .map(|(name, value)| wit::Header {
                name: (*name).to_owned(),
                value: value.to_vec(),
            })
            .collect();
        http::finish(&trailers)
    }
}

impl Drop for BodyWriter {
    fn drop(&mut self) {
        if !self.finished {
            // Nothing to tell anyone if it fails: the client is gone, or the body was cut.
            let _ = http::finish(&[]);
        }
    }
}

/// Lets `std::io` writers (a `serde_json` serializer, `write!`) produce the body.
impl std::io::Write for BodyWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        BodyWriter::write(self, buf).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A handler that streamed has answered (or the host answered for it): whatever failed, there
/// is nothing more to return than [`Outcome::Done`].
impl IntoOutcome for StreamError {
    fn into_outcome(self) -> Outcome {
        Outcome::Done
    }
}
