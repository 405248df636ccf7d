//! What the I/O thread hands the pool: a [`Job`], a complete request or an event of a
//! WebSocket connection, with everything a worker needs to run it.

use std::sync::Arc;

use crate::message::{Cancel, ConnId, WsEvent, WsId};
use crate::runtime::engine::incoming::Incoming;
use crate::runtime::engine::plugin::Plugin;

/// Work for a worker: a request, or an event of a WebSocket connection, or a call an event
/// loop started and hands on because its guest computes (see [`super::inline`]).
#[derive(Debug)]
pub(crate) enum Job {
    Request(RequestJob),
    Event(EventJob),
    Resume(super::tasks::Running),
}

/// One request for a worker.
#[derive(Debug)]
pub(crate) struct RequestJob {
    pub conn: ConnId,
    /// The request's position on its connection; replies for other positions are stale.
    pub seq: u64,
    pub plugin: Arc<Plugin>,
    /// The request itself, as the plugin's instance takes it.
    pub request: Incoming,
    /// When the request was complete, for the access log's duration.
    pub received: std::time::Instant,
    /// The plugin's call slot, held until the request is handled.
    pub slot: Option<crate::runtime::engine::plugin::InFlight>,
    /// Fired by the I/O thread when the client disconnects: the call ends at once.
    pub cancel: Cancel,
}

/// One event of a WebSocket connection. The I/O thread hands a connection's events out one
/// at a time, so they reach the plugin in order and never concurrently.
#[derive(Debug)]
pub(crate) struct EventJob {
    pub conn: ConnId,
    pub ws: WsId,
    /// The plugin's current version: after a reload, events go to the new one.
    pub plugin: Arc<Plugin>,
    pub event: WsEvent,
    /// The plugin's call slot, held until the event is handled.
    pub slot: crate::runtime::engine::plugin::InFlight,
}
