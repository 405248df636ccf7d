//! What the I/O thread hands the pool: a [`Job`], a complete request or an event of a
//! WebSocket connection, with everything a worker needs to run it.

use std::sync::Arc;

use crate::message::{Cancel, ConnId, WsEvent, WsId};
use crate::runtime::engine::incoming::Incoming;
use crate::runtime::engine::plugin::Plugin;

/// Work for a worker: a request, or an event of a WebSocket connection, or a run of a
/// schedule, or a call an event loop started and hands on because its guest computes (see
/// [`super::inline`]).
#[derive(Debug)]
pub(crate) enum Job {
    Request(RequestJob),
    Event(EventJob),
    Scheduled(ScheduledJob),
    Resume(super::tasks::Running),
}

/// One run of a plugin's schedule (see [`crate::scheduler`]).
#[derive(Debug)]
pub(crate) struct ScheduledJob {
    pub plugin: Arc<Plugin>,
    pub schedule: Arc<str>,
    /// The tick: when the run was due, in milliseconds since the epoch.
    pub due_ms: u64,
    /// Tags the plugin's log lines, as a request's id does.
    pub id: u64,
    /// The plugin's call slot, held until the run is over.
    pub slot: crate::runtime::engine::plugin::InFlight,
    /// Told how the run went, once.
    pub done: RunDone,
}

/// How a run of a schedule went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunOutcome {
    Ok,
    /// The job returned an error, trapped, or ran out of time: why.
    Failed(String),
    /// It never ran: the server stopped first, or the host failed.
    NotRun,
}

/// Tells the scheduler how a run went: once, by [`RunDone::report`], or as
/// [`RunOutcome::NotRun`] when dropped unreported (a job taken back while draining, or a
/// call the host dropped).
pub(crate) struct RunDone(Option<Box<dyn FnOnce(RunOutcome) + Send>>);

impl RunDone {
    pub(crate) fn new(report: impl FnOnce(RunOutcome) + Send + 'static) -> Self {
        RunDone(Some(Box::new(report)))
    }

    pub(crate) fn report(mut self, outcome: RunOutcome) {
        if let Some(report) = self.0.take() {
            report(outcome);
        }
    }
}

impl Drop for RunDone {
    fn drop(&mut self) {
        if let Some(report) = self.0.take() {
            report(RunOutcome::NotRun);
        }
    }
}

impl std::fmt::Debug for RunDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunDone")
    }
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
