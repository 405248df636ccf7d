//! The calls one thread drives: a slab of futures, each with its own waker, and the list of
//! those woken since they were last polled. A worker thread has one ([`super::worker`]), and
//! so does an event loop that starts calls itself ([`super::inline`]).
//!
//! A call's future is started once ([`running`]) and may move between threads while it is
//! suspended ([`Running`] is `Send`): a wake-up that arrives for it at its old thread finds
//! its slot empty or reused (the generation tells) and does nothing.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use slab::Slab;

use super::call::{Call, Fallback};
use super::job::{EventJob, Job};
use super::reply::{Inflated, Replies};
use super::worker::CallSlots;
use crate::message::{Compressed, DeflateWindow, WsEvent, WsMessage};
use crate::proto::frame::Violation;
use crate::proto::ws_deflate::{Codec, InflateError};
use crate::ws_router::WsRouter;

/// A call in flight, wherever it is polled: its future (the guest on a fiber, suspended or
/// not), and how to answer for it should the host panic while running it. It holds one of
/// the pool's call permits (see [`CallSlots`]) until it is over.
pub(crate) struct Running {
    future: Pin<Box<dyn Future<Output = ()> + Send>>,
    fallback: Fallback,
    /// The plugin's counters: each stretch the call runs is charged to its CPU meter.
    metrics: Arc<crate::metrics::PluginMetrics>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

/// A job made a call, with a permit already taken for it. A compressed message is inflated
/// here with `codec`, off the I/O thread; one that breaks a rule never reaches the plugin,
/// and the I/O thread fails its connection.
pub(super) fn running(
    job: Job,
    reply: &Replies,
    link: &Arc<WsRouter>,
    codec: &mut Codec,
    slots: &CallSlots,
) -> Running {
    let metrics;
    let (fallback, future): (Fallback, Pin<Box<dyn Future<Output = ()> + Send>>) = match job {
        Job::Request(job) => {
            metrics = job.plugin.metrics.clone();
            let fallback = Fallback::for_request(&job);
            let call = Call::new(job.plugin.clone(), reply.clone(), link.clone());
            (fallback, Box::pin(call.serve(job)))
        }
        Job::Event(job) => {
            let fallback = Fallback::for_event(&job);
            let EventJob {
                conn,
                ws,
                plugin,
                event,
                slot,
            } = job;
            let (event, inflated) = match event {
                WsEvent::Compressed(compressed) => {
                    let (message, window) = inflate(codec, compressed);
                    let result = message.as_ref().map(drop).map_err(|v| *v);
                    let inflated = Inflated { window, result };
                    (message.ok().map(WsEvent::Message), Some(inflated))
                }
                event => (Some(event), None),
            };
            metrics = plugin.metrics.clone();
            let call = Call::new(plugin, reply.clone(), link.clone());
            // The plugin's call slot is held until the event is delivered.
            let deliver = async move {
                let _slot = slot;
                call.deliver(conn, ws, event, inflated).await;
            };
            (fallback, Box::pin(deliver))
        }
        Job::Scheduled(job) => {
            metrics = job.plugin.metrics.clone();
            let fallback = Fallback::Scheduled {
                plugin: job.plugin.name.clone(),
                schedule: job.schedule.clone(),
            };
            let call = Call::new(job.plugin.clone(), reply.clone(), link.clone());
            (fallback, Box::pin(call.run_job(job)))
        }
        Job::Resume(running) => return running,
    };
    slots.in_flight().fetch_add(1, Ordering::Relaxed);
    Running {
        future,
        fallback,
        metrics,
    }
}

/// A compressed message inflated against the client's window (which it grows), within its
/// limit, and checked for UTF-8 if it is text.
fn inflate(
    codec: &mut Codec,
    compressed: Compressed,
) -> (Result<WsMessage, Violation>, Option<DeflateWindow>) {
    let Compressed {
        text,
        payload,
        max,
        mut window,
    } = compressed;
    let failures = codec.counts.failures;
    let inflated = codec.inflate(&payload, window.as_mut(), max);
    if codec.counts.failures > failures {
        tracing::error!(
            "the deflate library panicked (a bug there); the inflater was replaced and the connection failed (1007)"
        );
    }
    let message = inflated
        .map_err(|e| match e {
            InflateError::TooBig => Violation::TooBig,
            InflateError::Corrupt => Violation::BadCompression,
        })
        .and_then(|bytes| {
            if text {
                String::from_utf8(bytes)
                    .map(WsMessage::Text)
                    .map_err(|_| Violation::InvalidUtf8)
            } else {
                Ok(WsMessage::Binary(bytes))
            }
        });
    (message, window)
}

struct Task {
    running: Running,
    waker: Waker,
    generation: u64,
}

/// A task's place in the slab and the generation it was started in: a late wake-up of a
/// finished call must not poll the call that took its slot since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TaskId {
    slot: usize,
    generation: u64,
}

/// The calls of one thread that are ready to resume, pushed by their wakers from any thread.
struct ReadyList {
    ids: Mutex<Vec<TaskId>>,
    /// True while `ids` is not empty: read by the epoch check of a computing guest (see
    /// [`crate::runtime::sandbox::exec::others_ready`]).
    any: Arc<AtomicBool>,
    /// Wakes the thread when the first id of a batch arrives.
    signal: Box<dyn Fn() + Send + Sync>,
}

/// The waker of one call.
struct TaskWaker {
    id: TaskId,
    ready: Arc<ReadyList>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut ids = self
            .ready
            .ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let first = ids.is_empty();
        ids.push(self.id);
        self.ready.any.store(true, Ordering::Relaxed);
        drop(ids);
        if first {
            // The thread takes every id at once, so one signal per batch is enough.
            (self.ready.signal)();
        }
    }
}

/// How a poll left a call.
pub(super) enum Polled {
    /// Finished, or still waiting here.
    Stays,
    /// It was computing at an epoch tick, and this thread hands such calls on: here it is.
    Computing(Running),
}

/// The calls one thread drives.
pub(super) struct Tasks {
    slab: Slab<Task>,
    /// Bumped for every call taken in.
    generation: u64,
    ready: Arc<ReadyList>,
    /// Taken from `ready.ids` each round (the two swap, so neither allocates).
    due: Vec<TaskId>,
    reply: Replies,
    slots: Arc<CallSlots>,
    /// Whether a call still computing at an epoch tick leaves this thread (an event loop's).
    hand_off_computing: bool,
}

impl Tasks {
    /// `signal` wakes the thread when a call of it is woken (from any thread, this one too).
    pub(super) fn new(
        reply: Replies,
        slots: Arc<CallSlots>,
        signal: Box<dyn Fn() + Send + Sync>,
        hand_off_computing: bool,
    ) -> Self {
        Tasks {
            slab: Slab::new(),
            generation: 0,
            ready: Arc::new(ReadyList {
                ids: Mutex::new(Vec::new()),
                any: Arc::new(AtomicBool::new(false)),
                signal,
            }),
            due: Vec::new(),
            reply,
            slots,
            hand_off_computing,
        }
    }

    /// Set while calls of this thread are ready to resume.
    pub(super) fn ready_flag(&self) -> Arc<AtomicBool> {
        self.ready.any.clone()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Whether calls were woken since the last [`Tasks::resume_ready`].
    pub(super) fn any_ready(&self) -> bool {
        self.ready.any.load(Ordering::Relaxed)
    }

    /// Takes a call in and polls it: it runs until it finishes or waits.
    pub(super) fn spawn(&mut self, running: Running) -> Polled {
        let id = self.insert(running);
        self.poll(id)
    }

    /// Takes a call in to be polled at the next [`Tasks::resume_ready`].
    pub(super) fn insert_ready(&mut self, running: Running) {
        let id = self.insert(running);
        Waker::from(Arc::new(TaskWaker {
            id,
            ready: self.ready.clone(),
        }))
        .wake();
    }

    fn insert(&mut self, running: Running) -> TaskId {
        self.generation += 1;
        let entry = self.slab.vacant_entry();
        let id = TaskId {
            slot: entry.key(),
            generation: self.generation,
        };
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            ready: self.ready.clone(),
        }));
        entry.insert(Task {
            running,
            waker,
            generation: id.generation,
        });
        id
    }

    /// Polls every call that was woken since the last round; `computing` gets the calls this
    /// thread hands on.
    pub(super) fn resume_ready(&mut self, mut computing: impl FnMut(&mut Self, Running)) {
        {
            let mut ids = self
                .ready
                .ids
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            std::mem::swap(&mut *ids, &mut self.due);
            self.ready.any.store(false, Ordering::Relaxed);
        }
        let mut due = std::mem::take(&mut self.due);
        for id in due.drain(..) {
            if let Polled::Computing(running) = self.poll(id) {
                computing(self, running);
            }
        }
        self.due = due;
    }

    /// Runs call `id` until it finishes or waits. A late wake-up (of a call already done, or
    /// handed on) finds nothing to do.
    fn poll(&mut self, id: TaskId) -> Polled {
        let Some(task) = self.slab.get_mut(id.slot) else {
            return Polled::Stays;
        };
        if task.generation != id.generation {
            return Polled::Stays;
        }
        let waker = task.waker.clone();
        let mut cx = Context::from_waker(&waker);
        crate::runtime::sandbox::exec::take_yield();
        // The stretch is timed for the plugin's CPU meter (see [`super::cpu`]): what the call
        // used, guest and host work together, and none of the time it waits.
        let began = super::cpu::stretch_begins();
        let polled = catch_unwind(AssertUnwindSafe(|| {
            task.running.future.as_mut().poll(&mut cx)
        }));
        super::cpu::stretch_ends(&task.running.metrics, began);
        if let Ok(Poll::Pending) = polled {
            if self.hand_off_computing && crate::runtime::sandbox::exec::take_yield() {
                return Polled::Computing(self.slab.remove(id.slot).running);
            }
            return Polled::Stays;
        }
        let task = self.slab.remove(id.slot);
        self.slots.in_flight().fetch_sub(1, Ordering::Relaxed);
        self.slots.release();
        if polled.is_err() {
            // A bug in the host, not in the plugin: answer for the call. Its instance went
            // with the future.
            task.running.fallback.answer(&self.reply);
        }
        Polled::Stays
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ConnId;
    use crate::runtime::sandbox::exec::{Executor, leave_loop, set_executor};

    fn tasks(event_loop: bool) -> Tasks {
        let (tx, _rx) = super::super::reply::reply_channel(Arc::new(|| {}));
        set_executor(Executor {
            ready: Arc::new(AtomicBool::new(false)),
            waiting: Box::new(|| true),
            event_loop,
        });
        let metrics = Arc::new(crate::metrics::Metrics::default());
        Tasks::new(
            Replies::new(vec![tx]),
            Arc::new(CallSlots::new(4, metrics)),
            Box::new(|| {}),
            event_loop,
        )
    }

    fn call(future: impl Future<Output = ()> + Send + 'static) -> Running {
        Running {
            future: Box::pin(future),
            fallback: Fallback::Event {
                conn: ConnId {
                    shard: 0,
                    slot: 0,
                    serial: 1,
                },
                ws: 1,
                plugin: Arc::from("p"),
            },
            metrics: Default::default(),
        }
    }

    // See: issue 32, finding 4: host work on a big body leaves the event loop.
    #[test]
    fn a_call_that_leaves_the_loop_is_handed_on() {
        let mut tasks = tasks(true);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let polled = tasks.spawn(call(async move {
            leave_loop().await;
            flag.store(true, Ordering::Relaxed);
        }));
        let Polled::Computing(mut running) = polled else {
            panic!("the call stayed on the loop");
        };
        assert!(!done.load(Ordering::Relaxed), "the work ran on the loop");
        // Where it is polled next (a worker), it goes on at once.
        let waker = Waker::noop();
        let _ = running
            .future
            .as_mut()
            .poll(&mut Context::from_waker(waker));
        assert!(done.load(Ordering::Relaxed));
    }

    #[test]
    fn on_a_worker_leaving_the_loop_costs_nothing() {
        let mut tasks = tasks(false);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let polled = tasks.spawn(call(async move {
            leave_loop().await;
            flag.store(true, Ordering::Relaxed);
        }));
        assert!(matches!(polled, Polled::Stays));
        assert!(done.load(Ordering::Relaxed), "it did not wait");
    }
}
