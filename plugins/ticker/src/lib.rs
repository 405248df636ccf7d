//! Build: `cd plugins && cargo build --release --target wasm32-wasip2`, then open <http://localhost:8080/ticker>, or `curl -N localhost:8080/ticker/events`.
//!
//! Server-Sent Events: responses streamed one event at a time, which a browser's
//! `EventSource` reads as they come and, when a stream ends, resumes after the last event it
//! saw (it reconnects with `Last-Event-ID`).
//!
//! - `GET /ticker` (or `/ticker/`): a page that shows both streams below
//! - `GET /ticker/events?count=N&interval_ms=M&retry_ms=R`: N events (default 5, at most
//!   1000), M ms apart (default 1000, at most 60,000), then the stream ends. Their ids are
//!   consecutive integers that continue after the request's `Last-Event-ID` (0 when it has
//!   none, or one that is not a number), and their data is `{"n": ID, "resumed": BOOL}`, where
//!   `resumed` says whether the request carried `Last-Event-ID`. The first event sets the
//!   client's reconnection delay to R ms (default 500, at most 60,000), so an `EventSource`
//!   is soon back for the next N.
//! - `GET /ticker/chat?prompt=TEXT&interval_ms=M`: a canned answer that quotes TEXT, word by
//!   word, each word an event of type `token`, M ms apart (default 80, at most 5000), then an
//!   event of type `done` with `{"tokens": COUNT}`, and the stream ends: the way a language
//!   model's tokens reach a browser.
//!
//! A query parameter that is not an integer in its range is a `400`, as is a missing or blank
//! `prompt`; nothing is streamed then.
//!
//! Between events the handler sleeps: a plugin's sleep suspends its call on the host without
//! holding a thread, so a thousand open streams cost a thousand suspended calls, not threads.

use std::ops::RangeInclusive;
use std::time::Duration;

use ankh_guest::prelude::*;
use ankh_guest::sse::{self, Event, EventStream};
use serde_json::json;

const PAGE: &str = include_str!("ticker.html");

/// Events one `/events` response sends when `count` is not given, and the most it may ask for.
const DEFAULT_COUNT: u64 = 5;
const MAX_COUNT: u64 = 1000;

/// The wait between two events of `/events`, in milliseconds: when `interval_ms` is not given,
/// and at most.
const DEFAULT_INTERVAL_MS: u64 = 1000;
const MAX_INTERVAL_MS: u64 = 60_000;

/// The reconnection delay the first event of an `/events` response sets, in milliseconds: when
/// `retry_ms` is not given (short, where browsers default to seconds), and at most.
const DEFAULT_RETRY_MS: u64 = 500;
const MAX_RETRY_MS: u64 = 60_000;

/// The wait between two tokens of `/chat`, in milliseconds: when `interval_ms` is not given,
/// and at most.
const DEFAULT_TOKEN_INTERVAL_MS: u64 = 80;
const MAX_TOKEN_INTERVAL_MS: u64 = 5_000;

/// The most of a prompt the answer quotes, in characters.
const MAX_PROMPT_CHARS: usize = 200;

/// The longest an `/events` stream stays silent: a longer wait sends a comment this often. The
/// host ends a stream that sends nothing for a minute (by default), and so may a proxy.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `raw` as an integer in `range`, or `default` when there is no `raw`; `None` when `raw` is
/// not such an integer.
fn bounded(raw: Option<&str>, default: u64, range: RangeInclusive<u64>) -> Option<u64> {
    match raw {
        None => Some(default),
        Some(raw) => raw.parse().ok().filter(|n| range.contains(n)),
    }
}

/// The query parameter `name` as an integer in `range` (`default` when it is absent), or a
/// `400` that says what it must be.
fn number(
    req: &Request,
    name: &str,
    default: u64,
    range: RangeInclusive<u64>,
) -> Result<u64, Response> {
    bounded(req.query_param(name).as_deref(), default, range.clone()).ok_or_else(|| {
        Response::bad_request(format!(
            "`{name}` must be an integer from {} to {}",
            range.start(),
            range.end()
        ))
    })
}

/// The id after which a stream resumes: the client's `Last-Event-ID`, or 0 when it sent none or
/// one that is not a number (an id this plugin never gave out).
fn resume_after(last_event_id: Option<&str>) -> u64 {
    last_event_id.and_then(|id| id.parse().ok()).unwrap_or(0)
}

/// What an `/events` request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ticks {
    /// The id of the last event the client saw; the first one sent is the next.
    after: u64,
    /// Whether the request carried `Last-Event-ID`.
    resumed: bool,
    count: u64,
    interval: Duration,
    retry_ms: u64,
}

impl Ticks {
    /// Reads the query and `Last-Event-ID`, or answers `400`.
    fn from_request(req: &Request) -> Result<Ticks, Response> {
        let last_event_id = sse::last_event_id(req);
        Ok(Ticks {
            after: resume_after(last_event_id),
            resumed: last_event_id.is_some(),
            count: number(req, "count", DEFAULT_COUNT, 1..=MAX_COUNT)?,
            interval: Duration::from_millis(number(
                req,
                "interval_ms",
                DEFAULT_INTERVAL_MS,
                0..=MAX_INTERVAL_MS,
            )?),
            retry_ms: number(req, "retry_ms", DEFAULT_RETRY_MS, 0..=MAX_RETRY_MS)?,
        })
    }

    /// The ids to send, in order (fewer than `count` only if they would pass `u64::MAX`).
    fn ids(&self) -> impl Iterator<Item = u64> {
        (1..=self.count).map_while(|i| self.after.checked_add(i))
    }

    /// Streams the events, pausing between them, then ends the stream.
    fn send(&self, req: &Request) -> Result<(), StreamError> {
        let mut events = sse::start(req)?;
        for (i, id) in self.ids().enumerate() {
            let data = json!({"n": id, "resumed": self.resumed}).to_string();
            let mut event = Event::data(data).id(id.to_string());
            if i == 0 {
                event = event.retry(self.retry_ms);
            } else {
                pause(&mut events, self.interval)?;
            }
            events.send(&event)?;
        }
        events.finish()
    }
}

/// Sleeps for `interval`, sending a comment every [`KEEP_ALIVE`] of it, so that a long wait
/// does not look like a dead stream (and a client that left is noticed before it ends).
fn pause(events: &mut EventStream, interval: Duration) -> Result<(), StreamError> {
    let mut left = interval;
    while left > KEEP_ALIVE {
        std::thread::sleep(KEEP_ALIVE);
        events.comment("keep-alive")?;
        left -= KEEP_ALIVE;
    }
    std::thread::sleep(left);
    Ok(())
}

/// `GET /events`.
fn events(req: &Request) -> Result<Outcome, Response> {
    let ticks = Ticks::from_request(req)?;
    // An error means the client left or the host cut the stream: it is over either way, and
    // the client reconnects if it wants more.
    let _ = ticks.send(req);
    Ok(Outcome::Done)
}

/// `prompt` on one line: runs of whitespace become one space, and it is cut at
/// [`MAX_PROMPT_CHARS`].
fn one_line(prompt: &str) -> String {
    let words: Vec<&str> = prompt.split_whitespace().collect();
    let line: String = words.join(" ").chars().take(MAX_PROMPT_CHARS).collect();
    line.trim_end().to_owned()
}

/// The canned answer to `prompt` (a line from [`one_line`]).
fn answer(prompt: &str) -> String {
    format!(
        "You asked: \"{prompt}\". I am no language model, only a plugin that streams a canned \
         answer one word at a time, the way a model streams its tokens: each word is an event \
         of type token, and an event of type done ends the answer."
    )
}

/// Splits `text` into the tokens of a word-by-word stream: each token is a word with the
/// whitespace before it (as model tokens carry their leading space), so the tokens joined
/// give `text` back. Whitespace at the end is a token of its own.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let word = rest.len() - rest.trim_start().len();
        let end = rest[word..]
            .find(char::is_whitespace)
            .map_or(rest.len(), |at| word + at);
        let (token, tail) = rest.split_at(end);
        rest = tail;
        Some(token)
    })
}

/// Streams `text` token by token, `interval` apart, then the `done` event.
fn send_answer(req: &Request, text: &str, interval: Duration) -> Result<(), StreamError> {
    let mut events = sse::start(req)?;
    let mut sent = 0;
    for token in tokens(text) {
        if sent > 0 {
            std::thread::sleep(interval);
        }
        events.send(&Event::data(token).event("token"))?;
        sent += 1;
    }
    let done = json!({ "tokens": sent }).to_string();
    events.send(&Event::data(done).event("done"))?;
    events.finish()
}

/// `GET /chat`.
fn chat(req: &Request) -> Result<Outcome, Response> {
    let prompt = req
        .query_param("prompt")
        .map(|prompt| one_line(&prompt))
        .filter(|prompt| !prompt.is_empty())
        .ok_or_else(|| Response::bad_request("missing query parameter `prompt`"))?;
    let interval = Duration::from_millis(number(
        req,
        "interval_ms",
        DEFAULT_TOKEN_INTERVAL_MS,
        0..=MAX_TOKEN_INTERVAL_MS,
    )?);
    // As in `events`: an error means the stream is over.
    let _ = send_answer(req, &answer(&prompt), interval);
    Ok(Outcome::Done)
}

fn router() -> Router {
    Router::new()
        .get("/", |_req| Response::html(PAGE))
        .get("/events", events)
        .get("/chat", chat)
}

ankh_guest::export_plugin!(router);

#[cfg(test)]
mod tests {
    use super::*;
    use ankh_guest::testing;

    #[test]
    fn numbers_default_when_absent_and_must_be_in_range() {
        assert_eq!(bounded(None, 5, 1..=1000), Some(5));
        assert_eq!(bounded(Some("7"), 5, 1..=1000), Some(7));
        assert_eq!(bounded(Some("1000"), 5, 1..=1000), Some(1000));
        assert_eq!(bounded(Some("0"), 5, 0..=10), Some(0));
        for bad in [
            "0",
            "1001",
            "",
            "x",
            "-1",
            " 5",
            "5 ",
            "1e3",
            "99999999999999999999",
        ] {
            assert_eq!(bounded(Some(bad), 5, 1..=1000), None, "{bad:?}");
        }
    }

    #[test]
    fn a_stream_resumes_after_a_numeric_last_event_id_only() {
        assert_eq!(resume_after(None), 0);
        assert_eq!(resume_after(Some("5")), 5);
        assert_eq!(resume_after(Some("abc")), 0);
        assert_eq!(resume_after(Some("-3")), 0);
    }

    fn ticks(target: &str, last_event_id: Option<&str>) -> Result<Ticks, u16> {
        let mut request = testing::request("GET", target);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        Ticks::from_request(&request.build()).map_err(|bad| bad.status())
    }

    #[test]
    fn an_events_request_reads_its_query_and_last_event_id() {
        let fresh = ticks("/events", None).unwrap();
        assert_eq!(
            fresh,
            Ticks {
                after: 0,
                resumed: false,
                count: DEFAULT_COUNT,
                interval: Duration::from_millis(DEFAULT_INTERVAL_MS),
                retry_ms: DEFAULT_RETRY_MS,
            }
        );
        assert_eq!(fresh.ids().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);

        let resumed = ticks("/events?count=3&interval_ms=50&retry_ms=100", Some("5")).unwrap();
        assert_eq!((resumed.after, resumed.resumed), (5, true));
        assert_eq!(resumed.interval, Duration::from_millis(50));
        assert_eq!(resumed.retry_ms, 100);
        assert_eq!(resumed.ids().collect::<Vec<_>>(), [6, 7, 8]);

        // Not a number: counted from the start, but still a reconnection.
        let junk = ticks("/events?count=2", Some("abc")).unwrap();
        assert_eq!((junk.after, junk.resumed), (0, true));
        // An empty header is no id at all.
        assert!(!ticks("/events", Some("")).unwrap().resumed);
        // Ids stop short of overflowing.
        let last = ticks("/events", Some(&(u64::MAX - 2).to_string())).unwrap();
        assert_eq!(last.ids().collect::<Vec<_>>(), [u64::MAX - 1, u64::MAX]);
    }

    #[test]
    fn bad_numbers_are_a_400_before_anything_streams() {
        for target in [
            "/events?count=0",
            "/events?count=1001",
            "/events?count=many",
            "/events?interval_ms=60001",
            "/events?interval_ms=-1",
            "/events?retry_ms=soon",
            "/chat?prompt=hi&interval_ms=5001",
            "/chat?prompt=hi&interval_ms=",
            "/chat",
            "/chat?prompt=%20+%0A",
        ] {
            let response = testing::call(&router(), testing::request("GET", target));
            assert_eq!(response.status(), 400, "{target}: {}", response.text());
        }
        let response = testing::call(&router(), testing::request("GET", "/events?count=x"));
        assert_eq!(response.text(), "`count` must be an integer from 1 to 1000");
    }

    #[test]
    fn the_page_is_served_at_the_mount_point() {
        let response = testing::call(&router(), testing::request("GET", "/"));
        assert_eq!(response.status(), 200);
        assert!(
            response
                .header("content-type")
                .unwrap()
                .starts_with("text/html")
        );
        assert!(response.text().contains("new EventSource("));
    }

    #[test]
    fn tokens_are_words_with_their_leading_whitespace() {
        let split = |text| tokens(text).collect::<Vec<_>>();
        assert_eq!(split("Hello, big world"), ["Hello,", " big", " world"]);
        assert_eq!(split("  two  words\n"), ["  two", "  words", "\n"]);
        assert_eq!(split("one"), ["one"]);
        assert!(split("").is_empty());
        for text in ["a b", " x\ty\n\nz ", "é à ü", "   "] {
            assert_eq!(split(text).concat(), text, "{text:?}");
        }
    }

    #[test]
    fn the_answer_quotes_the_prompt_on_one_line() {
        assert_eq!(one_line("  what\n is\tSSE?  "), "what is SSE?");
        // Cut after a space, which is then dropped.
        assert_eq!(
            one_line(&"abc ".repeat(100)).chars().count(),
            MAX_PROMPT_CHARS - 1
        );
        assert_eq!(one_line(&"é".repeat(500)).chars().count(), MAX_PROMPT_CHARS);
        let text = answer(&one_line("what is SSE?"));
        assert!(text.starts_with("You asked: \"what is SSE?\"."), "{text}");
        assert!(tokens(&text).count() > 10);
    }
}
