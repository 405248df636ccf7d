//! When a plugin call must end before the guest says so: at its wall-clock deadline, or when
//! the client that asked for it has gone.
//!
//! The CPU deadline (see [`crate::runtime::sandbox::caps::CpuBudget`]) only counts time the guest spends
//! running; a guest that sleeps or waits is not charged for it. A [`Watch`] bounds the whole
//! call in wall-clock time and lets the I/O thread cancel it. It is enforced in two places:
//! - every wait of the guest goes through the host (`wasi:io/poll`, `pollable.block`, the
//!   blocking stream calls; see [`crate::runtime::sandbox::waits`]), which races the wait against [`Watch::stopped`];
//! - the epoch callback, which finds a guest that computes instead of waiting.
//!
//! Either way the call traps, the instance is discarded, and the worker is free at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub(crate) use crate::message::Cancel;
use crate::runtime::sandbox::timer::Deadline;

/// Why a call was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The call ran past its wall-clock deadline (`handler_timeout_ms`).
    TimedOut(Duration),
    /// The client of the request disconnected.
    Cancelled,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::TimedOut(limit) => write!(f, "exceeded its handler timeout of {limit:?}"),
            Stop::Cancelled => f.write_str("was cancelled: the client disconnected"),
        }
    }
}

/// The error a guest's wait (or its epoch check) returns once the call is stopped: a trap.
#[derive(Debug, thiserror::Error)]
#[error("call stopped: {0}")]
pub(crate) struct Stopped(pub Stop);

/// The bounds of the call running in a store.
#[derive(Debug)]
pub(crate) struct Watch {
    /// The plugin's handler timeout: each call gets this much wall-clock time.
    pub timeout: Duration,
    deadline: Option<Instant>,
    cancel: Option<Cancel>,
    /// Why the current call was stopped, once it was.
    stopped: Option<Stop>,
}

impl Watch {
    pub(crate) fn new(timeout: Duration) -> Self {
        Watch {
            timeout,
            deadline: None,
            cancel: None,
            stopped: None,
        }
    }

    /// Starts the clock of a new call (or an instantiation), optionally cancellable.
    pub(crate) fn arm(&mut self, cancel: Option<Cancel>) {
        self.deadline = Instant::now().checked_add(self.timeout);
        self.cancel = cancel;
        self.stopped = None;
    }

    /// Why the call was stopped, if it was.
    pub(crate) fn stopped_by(&self) -> Option<Stop> {
        self.stopped
    }

    /// Checks the bounds now (the epoch callback); records and returns why the call must stop.
    pub(crate) fn check(&mut self, now: Instant) -> Option<Stop> {
        if self.stopped.is_none() {
            // A streaming call whose client left is told so by its next write (`closed`),
            // so that it can end on its own; its waits still stop it, and so does its CPU
            // deadline if it computes on and never writes again.
            if self
                .cancel
                .as_ref()
                .is_some_and(|c| c.is_cancelled() && !c.is_streaming())
            {
                self.stopped = Some(Stop::Cancelled);
            } else if self.deadline.is_some_and(|d| now >= d) && !self.streaming() {
                self.stopped = Some(Stop::TimedOut(self.timeout));
            }
        }
        self.stopped
    }

    /// Whether the call's response is streaming, which suspends its deadline.
    fn streaming(&self) -> bool {
        self.cancel.as_ref().is_some_and(Cancel::is_streaming)
    }

    /// Records why a wait ended the call.
    pub(crate) fn record(&mut self, stop: Stop) {
        self.stopped.get_or_insert(stop);
    }

    /// A future that completes when the call must stop; races every guest wait.
    pub(crate) fn stopped(&self) -> Stopping {
        let remaining = self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        Stopping {
            deadline: remaining.map(Deadline::after),
            timeout: self.timeout,
            cancel: self.cancel.clone(),
            grace: None,
        }
    }
}

/// While a call's response streams, how often a passed deadline looks again whether the
/// stream has ended (then the call stops).
const STREAMING_RECHECK: Duration = Duration::from_secs(1);

/// A streaming call whose client left: for how long after that its waits may still end on
/// their own before the call is stopped. The wait for room to write ends at once (the write
/// fails), so the guest learns `closed` and can end; a wait for anything else is stopped once
/// this has passed since the client left.
const STREAMING_CANCEL_GRACE: Duration = Duration::from_millis(100);

/// See [`Watch::stopped`].
pub(crate) struct Stopping {
    deadline: Option<Deadline>,
    timeout: Duration,
    cancel: Option<Cancel>,
    /// Started when a streaming call is cancelled: see [`STREAMING_CANCEL_GRACE`].
    grace: Option<Deadline>,
}

impl Future for Stopping {
    type Output = Stop;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Stop> {
        let this = self.get_mut();
        if let Some(cancel) = &this.cancel
            && cancel.poll_fired(cx).is_ready()
        {
            if !cancel.is_streaming() {
                return Poll::Ready(Stop::Cancelled);
            }
            // From the cancellation, not from this wait: a guest that waits again and again
            // is stopped all the same.
            let grace = this.grace.get_or_insert_with(|| {
                let since = cancel.fired_at().map_or(Duration::ZERO, |at| at.elapsed());
                Deadline::after(STREAMING_CANCEL_GRACE.saturating_sub(since))
            });
            if grace.poll_ready(cx).is_ready() {
                return Poll::Ready(Stop::Cancelled);
            }
        }
        while let Some(deadline) = &mut this.deadline
            && deadline.poll_ready(cx).is_ready()
        {
            if !this.cancel.as_ref().is_some_and(Cancel::is_streaming) {
                return Poll::Ready(Stop::TimedOut(this.timeout));
            }
            // The response streams: the connection bounds the call now. Look again later,
            // in case the stream ends while the call goes on.
            this.deadline = Some(Deadline::after(STREAMING_RECHECK));
        }
        Poll::Pending
    }
}

/// Runs `work` until it completes or `stop` does, whichever is first.
pub(crate) async fn race<T>(work: impl Future<Output = T>, stop: Stopping) -> Result<T, Stop> {
    let mut work = std::pin::pin!(work);
    let mut stop = std::pin::pin!(stop);
    std::future::poll_fn(move |cx| {
        // The stop signal first: a wait that is always ready must not starve it.
        if let Poll::Ready(reason) = stop.as_mut().poll(cx) {
            return Poll::Ready(Err(reason));
        }
        work.as_mut().poll(cx).map(Ok)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::blocking::block_on;

    #[test]
    fn a_wait_ends_at_the_deadline() {
        let mut watch = Watch::new(Duration::from_millis(30));
        watch.arm(None);
        let started = Instant::now();
        let r = block_on(race(std::future::pending::<()>(), watch.stopped()));
        assert_eq!(r, Err(Stop::TimedOut(Duration::from_millis(30))));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(watch.check(Instant::now()).is_some());
    }

    #[test]
    fn cancelling_ends_a_wait_from_another_thread() {
        let mut watch = Watch::new(Duration::from_secs(3600));
        let cancel = Cancel::default();
        watch.arm(Some(cancel.clone()));
        assert_eq!(watch.check(Instant::now()), None);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            cancel.cancel();
        });
        let r = block_on(race(std::future::pending::<()>(), watch.stopped()));
        assert_eq!(r, Err(Stop::Cancelled));
        t.join().unwrap();
        assert_eq!(watch.check(Instant::now()), Some(Stop::Cancelled));
        // A new call starts clean.
        watch.arm(None);
        assert_eq!(watch.check(Instant::now()), None);
    }

    #[test]
    fn a_streaming_call_whose_client_left_runs_on_to_its_next_write_but_waits_stop() {
        let mut watch = Watch::new(Duration::from_secs(3600));
        let cancel = Cancel::default();
        watch.arm(Some(cancel.clone()));
        cancel.set_streaming(true);
        cancel.cancel();
        // Computing: not stopped, so its next write can tell it `closed`.
        assert_eq!(watch.check(Instant::now()), None);
        // Waiting: stopped after a grace in which a wait that ends on its own (its write
        // failing) would end first.
        let started = Instant::now();
        let r = block_on(race(std::future::pending::<()>(), watch.stopped()));
        assert_eq!(r, Err(Stop::Cancelled));
        assert!(started.elapsed() >= STREAMING_CANCEL_GRACE);
        let r = block_on(race(std::future::ready(7), watch.stopped()));
        assert_eq!(r, Ok(7));
        // Once the stream is over, the cancellation stops it anywhere.
        cancel.set_streaming(false);
        assert_eq!(watch.check(Instant::now()), Some(Stop::Cancelled));
    }

    #[test]
    fn a_streaming_call_outlives_its_deadline_until_the_stream_ends() {
        let mut watch = Watch::new(Duration::from_millis(20));
        let cancel = Cancel::default();
        watch.arm(Some(cancel.clone()));
        cancel.set_streaming(true);
        let stopping = watch.stopped();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(watch.check(Instant::now()), None);
        let ender = cancel.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ender.set_streaming(false);
        });
        // The wait goes on past the deadline while the stream does, and ends after it.
        let started = Instant::now();
        let r = block_on(race(std::future::pending::<()>(), stopping));
        assert_eq!(r, Err(Stop::TimedOut(Duration::from_millis(20))));
        assert!(started.elapsed() >= Duration::from_millis(50));
        t.join().unwrap();
        assert!(watch.check(Instant::now()).is_some());
    }

    #[test]
    fn work_that_completes_wins() {
        let mut watch = Watch::new(Duration::from_secs(3600));
        watch.arm(None);
        assert_eq!(block_on(race(async { 7 }, watch.stopped())), Ok(7));
    }
}
