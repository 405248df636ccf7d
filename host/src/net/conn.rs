//! A client connection: HTTP/1.1 until an upgrade, WebSocket after it. The two are separate
//! types ([`HttpConn`], [`WsConnection`]); at the upgrade the HTTP one is consumed and its
//! parts go on to the WebSocket one (hyper's `into_inner`, tungstenite's `DoneReading`).

use std::io::{Read, Write};
use std::net::Shutdown;

use super::http::HttpConn;
use super::ws_conn::WsConnection;
use crate::message::ConnId;

/// A byte stream a connection runs on: a TCP socket in the server, memory in tests and the
/// fuzzer.
pub trait Transport: Read + Write {
    /// Ends our sending side (TCP FIN), keeping the receiving side open.
    fn shutdown_write(&self);
}

impl Transport for mio::net::TcpStream {
    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Whether the event loop should keep the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Open,
    Closed,
}

/// One client connection, on either side of its upgrade.
pub(crate) enum Conn<S> {
    Http(Box<HttpConn<S>>),
    WebSocket(Box<WsConnection<S>>),
}

impl<S: Transport> Conn<S> {
    pub(crate) fn id(&self) -> ConnId {
        match self {
            Conn::Http(c) => c.id,
            Conn::WebSocket(c) => c.id,
        }
    }

    /// Moves the connection to another slot of the loop's table.
    pub(crate) fn set_id(&mut self, id: ConnId) {
        match self {
            Conn::Http(c) => c.id = id,
            Conn::WebSocket(c) => c.id = id,
        }
    }

    pub(crate) fn stream_mut(&mut self) -> &mut S {
        match self {
            Conn::Http(c) => &mut c.stream,
            Conn::WebSocket(c) => &mut c.stream,
        }
    }

    /// Bytes read and written since last asked (for `/metrics`).
    pub(crate) fn take_bytes(&mut self) -> (u64, u64) {
        match self {
            Conn::Http(c) => (c.take_bytes_in(), std::mem::take(&mut c.bytes_out)),
            Conn::WebSocket(c) => (c.take_bytes_in(), std::mem::take(&mut c.bytes_out)),
        }
    }

    /// The connection is going away: a call working on its request is cancelled.
    pub(crate) fn abandon(&mut self) {
        if let Conn::Http(c) = self {
            c.abandon();
        }
    }

    /// When its deadlines next need a look.
    pub(crate) fn next_check(&self, limits: &crate::limits::Limits) -> super::timers::Check {
        match self {
            Conn::Http(c) => c.next_check(limits),
            Conn::WebSocket(c) => c.next_check(),
        }
    }

    /// The WebSocket id, once upgraded.
    pub(crate) fn ws_id(&self) -> Option<crate::message::WsId> {
        match self {
            Conn::Http(_) => None,
            Conn::WebSocket(c) => Some(c.ws_id()),
        }
    }
}
