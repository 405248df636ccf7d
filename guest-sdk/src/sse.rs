//! Server-Sent Events: a streamed `text/event-stream` response, one [`Event`] at a time, for
//! a browser's `EventSource` or any SSE client.
//!
//! ```no_run
//! use ankh_guest::prelude::*;
//! use ankh_guest::sse::{self, Event};
//!
//! fn ticks(req: &Request) -> Result<Outcome, StreamError> {
//!     // Resume after the last event the client saw, when it reconnects.
//!     let from = sse::last_event_id(req).and_then(|id| id.parse().ok()).unwrap_or(0u64);
//!     let mut events = sse::start(req)?;
//!     for n in from + 1..=from + 10 {
//!         events.send(&Event::data(format!("tick {n}")).id(n.to_string()))?;
//!         std::thread::sleep(std::time::Duration::from_secs(1));
//!     }
//!     Ok(Outcome::Done)
//! }
//! # let _ = ticks;
//! ```
//!
//! Each event leaves as soon as it is sent (compressed or not: the host flushes after each
//! write). [`EventStream::comment`] sends a comment, which clients ignore, to keep an idle
//! stream from being cut by a proxy's or the host's idle timeout.

use crate::{BodyWriter, Request, Response, StreamError};

/// One event. `data` may span lines: each line becomes a `data:` field, and the client joins
/// them back with `\n`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    event: Option<String>,
    id: Option<String>,
    data: String,
    retry_ms: Option<u64>,
}

impl Event {
    /// An event carrying `data`, of the default type (`message`).
    pub fn data(data: impl Into<String>) -> Event {
        Event {
            data: data.into(),
            ..Event::default()
        }
    }

    /// Sets the event type (`addEventListener(type, …)` in a browser). Line breaks in it are
    /// replaced by spaces: they would end the field.
    pub fn event(mut self, event: impl Into<String>) -> Event {
        self.event = Some(one_line(event.into()));
        self
    }

    /// Sets the id the client sends back as `Last-Event-ID` when it reconnects. Line breaks
    /// and NUL (which makes a client ignore the id) are replaced by spaces.
    pub fn id(mut self, id: impl Into<String>) -> Event {
        self.id = Some(one_line(id.into()).replace('\0', " "));
        self
    }

    /// Tells the client how long to wait before reconnecting, in milliseconds.
    pub fn retry(mut self, ms: u64) -> Event {
        self.retry_ms = Some(ms);
        self
    }

    /// The event as it goes on the wire, ending with the blank line that dispatches it.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.data.len() + 32);
        if let Some(event) = &self.event {
            field(&mut out, "event", event);
        }
        if let Some(id) = &self.id {
            field(&mut out, "id", id);
        }
        if let Some(ms) = self.retry_ms {
            field(&mut out, "retry", &ms.to_string());
        }
        for line in lines(&self.data) {
            field(&mut out, "data", line);
        }
        out.push('\n');
        out
    }
}

/// `name: value\n`.
fn field(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push_str(": ");
    out.push_str(value);
    out.push('\n');
}

/// The lines of `text`, split as an SSE client splits them (at `\r\n`, `\n` or `\r`); an
/// empty text is one empty line, so an event with no data still carries a `data:` field.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let text = rest?;
        match text.find(['\r', '\n']) {
            Some(at) => {
                let skip = if text[at..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&text[at + skip..]);
                Some(&text[..at])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

fn one_line(text: String) -> String {
    if text.contains(['\r', '\n']) {
        text.replace(['\r', '\n'], " ")
    } else {
        text
    }
}

/// An open event stream. Dropping it ends the stream (the client may then reconnect).
#[derive(Debug)]
pub struct EventStream {
    body: BodyWriter,
}

impl EventStream {
    /// Sends `event`; returns once the host has room for it.
    pub fn send(&mut self, event: &Event) -> Result<(), StreamError> {
        self.body.write(event.encode())
    }

    /// Sends a comment (`: text`), which clients ignore: a keep-alive for an idle stream.
    pub fn comment(&mut self, text: &str) -> Result<(), StreamError> {
        let mut out = String::with_capacity(text.len() + 4);
        for line in lines(text) {
            out.push_str(": ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        self.body.write(out)
    }

    /// Ends the stream.
    pub fn finish(self) -> Result<(), StreamError> {
        self.body.finish()
    }
}

/// Starts an event stream in answer to `req`: `200`, `content-type: text/event-stream` and
/// `cache-control: no-store`.
pub fn start(req: &Request) -> Result<EventStream, StreamError> {
    start_with(req, head())
}

/// Starts an event stream with a head of the handler's own (say, with more headers);
/// `content-type` is set to `text/event-stream` whatever `head` says.
pub fn start_with(req: &Request, head: Response) -> Result<EventStream, StreamError> {
    let head = head.replace_header("content-type", "text/event-stream");
    Ok(EventStream {
        body: req.stream(head)?,
    })
}

/// The head [`start`] sends.
pub fn head() -> Response {
    Response::new(200)
        .with_header("content-type", "text/event-stream")
        .with_header("cache-control", "no-store")
}

/// The id of the last event the client received, which a reconnecting `EventSource` sends
/// as `Last-Event-ID`.
pub fn last_event_id(req: &Request) -> Option<&str> {
    req.header("last-event-id").filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_encodes_every_field_and_each_data_line() {
        let event = Event::data("one\ntwo\r\nthree\rfour")
            .event("tick")
            .id("7")
            .retry(1500);
        assert_eq!(
            event.encode(),
            "event: tick\nid: 7\nretry: 1500\ndata: one\ndata: two\ndata: three\ndata: four\n\n"
        );
    }

    #[test]
    fn empty_and_trailing_lines_are_kept() {
        assert_eq!(Event::data("").encode(), "data: \n\n");
        assert_eq!(Event::data("a\n").encode(), "data: a\ndata: \n\n");
        assert_eq!(Event::data("\n\nb").encode(), "data: \ndata: \ndata: b\n\n");
    }

    #[test]
    fn a_line_break_cannot_end_a_field_early() {
        let event = Event::data("x").event("a\nid: 9").id("1\r\n2\0");
        assert_eq!(event.encode(), "event: a id: 9\nid: 1  2 \ndata: x\n\n");
    }
}
