//! A request as the host hands it to a plugin: parsed and routed, in the host's own form.
//! Each way into a guest takes it as it needs it: `packed-handler` reads the head in place
//! and moves the body (see [`crate::runtime::engine::packed`]); the `handler` record, `on-open` and a wasi:http
//! component borrow the WIT record ([`Incoming::lend`]), which takes the fields without
//! copying the headers and gives them back ([`Incoming::restore`]).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::proto::Version;
use crate::proto::request::RequestHead;
use crate::runtime::bindings::types;

/// One request for a plugin.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// Unique within this process: shown to the client on errors and in every log line.
    pub id: u64,
    pub head: RequestHead,
    /// The prefix the plugin was reached under (`""` for the index plugin).
    pub mount: Arc<str>,
    /// Moved into the guest by the call that takes it: empty afterwards.
    pub body: Vec<u8>,
    /// Instead of `body`, the body as it arrives, for a plugin that reads it so (a wasi:http
    /// component; see [`crate::net::http::Route::streams_body`]).
    pub inflow: Option<crate::message::Inflow>,
    pub remote: SocketAddr,
    /// Its trace, when it carries a `traceparent` or ankh exports spans.
    pub trace: Option<Box<crate::trace::RequestTrace>>,
}

impl Incoming {
    /// The WIT record of the request. The query, headers and body move into it; hand it back
    /// with [`Incoming::restore`] to keep the headers for what follows the call (an
    /// upgrade's handshake).
    pub(crate) fn lend(&mut self) -> types::Request {
        types::Request {
            id: crate::text::hex_id(self.id),
            method: self.head.method.to_string(),
            path: self.head.path.to_string(),
            mount: self.mount.to_string(),
            query: std::mem::take(&mut self.head.query),
            headers: std::mem::take(&mut self.head.headers)
                .into_iter()
                .map(|(name, value)| types::Header { name, value })
                .collect(),
            body: std::mem::take(&mut self.body),
            remote_addr: crate::text::address_text(self.remote),
            version: match self.head.version {
                Version::Http10 => types::HttpVersion::Http10,
                Version::Http11 => types::HttpVersion::Http11,
            },
        }
    }

    /// Takes back the query and headers of a record made by [`Incoming::lend`]. The body
    /// stays with the record: a call may have consumed it.
    pub(crate) fn restore(&mut self, record: types::Request) {
        self.head.query = record.query;
        self.head.headers = record
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::proto::Status;
    use crate::proto::request::parse;

    pub(crate) fn incoming(raw: &[u8], body: &[u8]) -> Incoming {
        let Ok(Status::Complete(head, _)) = parse(raw, &Limits::default()) else {
            panic!("a complete head");
        };
        Incoming {
            id: 0x2a,
            head,
            mount: "/m".into(),
            body: body.to_vec(),
            inflow: None,
            remote: "10.0.0.7:4242".parse().unwrap(),
            trace: None,
        }
    }

    #[test]
    fn the_record_carries_every_field_and_gives_the_headers_back() {
        let mut request = incoming(
            b"POST /m/a?x=1 HTTP/1.0\r\nHost: h\r\nX-Bin: \xff\r\nContent-Length: 2\r\n\r\n",
            b"hi",
        );
        let record = request.lend();
        assert_eq!(record.id, "000000000000002a");
        assert_eq!(
            (record.method.as_str(), record.path.as_str()),
            ("POST", "/m/a")
        );
        assert_eq!(
            (record.mount.as_str(), record.query.as_str()),
            ("/m", "x=1")
        );
        assert_eq!(record.remote_addr, "10.0.0.7:4242");
        assert!(matches!(record.version, types::HttpVersion::Http10));
        assert_eq!(record.body, b"hi");
        let names: Vec<_> = record.headers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["Host", "X-Bin", "Content-Length"]);
        assert_eq!(record.headers[1].value, b"\xff");
        assert!(request.body.is_empty() && request.head.headers.is_empty());

        request.restore(record);
        assert_eq!(request.head.query, "x=1");
        assert_eq!(
            request.head.headers[1],
            ("X-Bin".to_owned(), b"\xff".to_vec())
        );
        assert!(request.body.is_empty(), "the body stays with the call");
    }
}
