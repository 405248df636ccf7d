//! The HTTP vocabulary a handler works with: the [`Request`] it reads, the [`Response`] it
//! builds (whole, or streamed through a [`BodyWriter`]) and the [`Outcome`] it returns.
//!
//! These wrap the WIT records in [`crate::wit`]; converting to and from them is free of
//! surprises (no header is added or dropped), so the host sees exactly what the handler built.

mod outcome;
mod request;
mod response;
mod stream;

pub use outcome::{IntoOutcome, Outcome};
pub use request::{JsonError, Request};
pub use response::Response;
pub use stream::{BodyWriter, StreamError};
