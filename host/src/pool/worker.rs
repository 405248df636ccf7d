//! One worker thread: an executor of plugin calls.
//!
//! It takes a job from the shared queue and starts its call ([`super::call`]): the first poll
//! runs the guest until it finishes or first waits. A call that waits (a sleep, a socket, a
//! key-value commit: every wait of a guest goes through the host) is suspended on its fiber,
//! and the worker takes the next job or resumes another call. When a wait is over, its waker
//! pushes the call onto this worker's ready list, and the worker polls it again.
//!
//! - A call stays on the worker that started it: its fiber and instance are polled by one
//!   thread, and a wake-up is a push onto that worker's list (measured against a shared ready
//!   queue that any worker serves: see the README).
//! - Calls in flight across all workers are bounded by `max_calls`: a worker takes a permit
//!   ([`CallSlots`]) before it takes a job, and the call gives it back when it is over. While
//!   none is free a worker only resumes its own calls, and new jobs wait in the queue.
//! - The worker serves its calls' deadlines itself (`runtime::timer::Local`): it sleeps no
//!   longer than the earliest, and fires the due ones when it wakes.
//! - A guest that computes yields its thread at an epoch tick when other calls of its worker
//!   are ready or due, or jobs wait in the queue (see `runtime::exec::others_ready`), so a
//!   long computation delays them by at most one tick: a handler that computes never stalls
//!   the others, however few the workers.
//!
//! Nothing a plugin does can end this loop.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use slab::Slab;

use super::call::{Call, Fallback};
use crate::message::{Compressed, DeflateWindow, WsEvent, WsMessage};
use crate::pool::job::{EventJob, Job};
use crate::pool::reply::{Inflated, Replies};
use crate::proto::frame::Violation;
use crate::proto::ws_deflate::{Codec, InflateError};
use crate::runtime::state::WsLink;
use crate::runtime::timer::Local;

/// How long a worker with calls in flight but no deadline sleeps before it looks again
/// (their waits wake it; this only bounds a wait that nothing would end).
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// A call in flight: its future (the guest on a fiber, suspended or not), and how to answer
/// for it should the host panic while running it.
struct Task {
    future: Pin<Box<dyn Future<Output = ()> + Send>>,
    waker: Waker,
    generation: u64,
    fallback: Fallback,
}

/// A task's place in the slab and the generation it was started in: a late wake-up of a
/// finished call must not poll the call that took its slot since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TaskId {
    slot: usize,
    generation: u64,
}

/// The calls of one worker that are ready to resume, pushed by their wakers from any thread.
struct ReadyList {
    ids: Mutex<Vec<TaskId>>,
    /// True while `ids` is not empty: read by the epoch check of a computing guest (see
    /// [`crate::runtime::exec::others_ready`]).
    any: Arc<AtomicBool>,
    /// One token wakes the worker when it waits for a job or a wake-up.
    signal: Sender<()>,
}

/// The waker of one call of one worker.
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
            // The worker takes every id at once, so one token per batch is enough.
            let _ = self.ready.signal.try_send(());
        }
    }
}

/// The bound on calls in flight across the workers: `max_calls` permits, each a token in a
/// channel (a semaphore whose waits can be selected with others). Calls in flight are counted
/// in [`Metrics::calls_in_flight`](crate::metrics::Metrics).
pub(super) struct CallSlots {
    permits: Receiver<()>,
    give_back: Sender<()>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl CallSlots {
    pub(super) fn new(max_calls: usize, metrics: Arc<crate::metrics::Metrics>) -> Self {
        let (give_back, permits) = crossbeam_channel::bounded(max_calls.max(1));
        for _ in 0..max_calls.max(1) {
            let _ = give_back.send(());
        }
        CallSlots {
            permits,
            give_back,
            metrics,
        }
    }

    fn in_flight(&self) -> &AtomicI64 {
        &self.metrics.calls_in_flight
    }

    fn release(&self) {
        let _ = self.give_back.try_send(());
    }
}

pub(super) struct Worker {
    /// The event loops' reply queues; a reply goes to the loop of its connection.
    reply: Replies,
    link: WsLink,
    slots: Arc<CallSlots>,
    /// Inflates compressed WebSocket messages (its inflater is made on first use).
    codec: Codec,
    tasks: Slab<Task>,
    /// A permit taken for the next job (see [`CallSlots`]).
    permit: bool,
    /// Bumped for every call started.
    generation: u64,
    ready: Arc<ReadyList>,
    wakeups: Receiver<()>,
    /// Taken from `ready.ids` each round (the two swap, so neither allocates).
    due: Vec<TaskId>,
}

impl Worker {
    pub(super) fn new(reply: Replies, link: WsLink, slots: Arc<CallSlots>) -> Self {
        let (signal, wakeups) = crossbeam_channel::bounded(1);
        Worker {
            reply,
            link,
            slots,
            codec: Codec::default(),
            tasks: Slab::new(),
            permit: false,
            generation: 0,
            ready: Arc::new(ReadyList {
                ids: Mutex::new(Vec::new()),
                any: Arc::new(AtomicBool::new(false)),
                signal,
            }),
            wakeups,
            due: Vec::new(),
        }
    }

    pub(super) fn run(mut self, rx: Receiver<Box<Job>>) {
        let queue = rx.clone();
        crate::runtime::exec::set_executor(crate::runtime::exec::Executor {
            ready: self.ready.any.clone(),
            waiting: Box::new(move || !queue.is_empty()),
        });
        Local::install();
        // WASI's sockets and files need a tokio reactor to register with.
        wasmtime_wasi::runtime::with_ambient_tokio_runtime(move || self.serve(&rx));
    }

    /// Takes a permit, then a job, resuming this worker's calls whenever they are woken or
    /// their deadlines pass in between. Returns when the queue is closed.
    fn serve(&mut self, rx: &Receiver<Box<Job>>) {
        loop {
            Local::fire(Instant::now());
            self.resume_ready();
            // Whatever waits in the queue starts now, as far as permits go: a guest that
            // yielded its thread for them resumes after.
            loop {
                if !self.permit {
                    self.permit = self.slots.permits.try_recv().is_ok();
                }
                if !self.permit {
                    break;
                }
                match rx.try_recv() {
                    Ok(job) => self.start(*job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            if self.tasks.is_empty() {
                // Nothing to resume: wait for a permit and a job.
                if !self.permit {
                    self.permit = self.slots.permits.recv().is_ok();
                }
                match rx.recv() {
                    Ok(job) => self.start(*job),
                    Err(_) => return,
                }
                continue;
            }
            // Sleep no longer than the earliest deadline of this worker's calls.
            let timeout =
                Local::next().map_or(IDLE_WAKE, |at| at.saturating_duration_since(Instant::now()));
            if self.permit {
                crossbeam_channel::select! {
                    recv(rx) -> job => match job {
                        Ok(job) => self.start(*job),
                        Err(_) => return,
                    },
                    recv(self.wakeups) -> _ => {}
                    default(timeout) => {}
                }
            } else {
                crossbeam_channel::select! {
                    recv(self.slots.permits) -> permit => self.permit = permit.is_ok(),
                    recv(self.wakeups) -> _ => {}
                    default(timeout) => {}
                }
            }
        }
    }

    /// Polls every call that was woken since the last round.
    fn resume_ready(&mut self) {
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
            self.poll(id);
        }
        self.due = due;
    }

    /// Starts a call with the permit this worker holds: its first poll runs the guest until
    /// it finishes or first waits.
    fn start(&mut self, job: Job) {
        debug_assert!(self.permit, "a call starts with a permit");
        self.permit = false;
        let (fallback, future): (Fallback, Pin<Box<dyn Future<Output = ()> + Send>>) = match job {
            Job::Request(job) => {
                let fallback = Fallback::for_request(&job);
                let call = Call::new(job.plugin.clone(), self.reply.clone(), self.link.clone());
                (fallback, Box::pin(call.serve(job)))
            }
            Job::Event(job) => {
                let fallback = Fallback::for_event(&job);
                let EventJob {
                    conn,
                    ws,
                    plugin,
                    event,
                } = job;
                // A compressed message is inflated here, off the I/O thread; one that breaks
                // a rule never reaches the plugin, and the I/O thread fails its connection.
                let (event, inflated) = match event {
                    WsEvent::Compressed(compressed) => {
                        let (message, window) = self.inflate(compressed);
                        let result = message.as_ref().map(drop).map_err(|v| *v);
                        let inflated = Inflated { window, result };
                        (message.ok().map(WsEvent::Message), Some(inflated))
                    }
                    event => (Some(event), None),
                };
                let call = Call::new(plugin, self.reply.clone(), self.link.clone());
                (fallback, Box::pin(call.deliver(conn, ws, event, inflated)))
            }
        };
        self.slots.in_flight().fetch_add(1, Ordering::Relaxed);
        self.generation += 1;
        let entry = self.tasks.vacant_entry();
        let id = TaskId {
            slot: entry.key(),
            generation: self.generation,
        };
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            ready: self.ready.clone(),
        }));
        entry.insert(Task {
            future,
            waker,
            generation: id.generation,
            fallback,
        });
        self.poll(id);
    }

    /// Runs call `id` until it finishes or waits. A late wake-up (of a call already done)
    /// finds nothing to do.
    fn poll(&mut self, id: TaskId) {
        let Some(task) = self.tasks.get_mut(id.slot) else {
            return;
        };
        if task.generation != id.generation {
            return;
        }
        let waker = task.waker.clone();
        let mut cx = Context::from_waker(&waker);
        let polled = catch_unwind(AssertUnwindSafe(|| task.future.as_mut().poll(&mut cx)));
        if let Ok(Poll::Pending) = polled {
            return;
        }
        let task = self.tasks.remove(id.slot);
        self.slots.in_flight().fetch_sub(1, Ordering::Relaxed);
        self.slots.release();
        if polled.is_err() {
            // A bug in the host, not in the plugin: answer for the call. Its instance went
            // with the future.
            task.fallback.answer(&self.reply);
        }
    }

    /// A compressed message inflated against the client's window (which it grows), within its
    /// limit, and checked for UTF-8 if it is text.
    fn inflate(
        &mut self,
        compressed: Compressed,
    ) -> (Result<WsMessage, Violation>, Option<DeflateWindow>) {
        let Compressed {
            text,
            payload,
            max,
            mut window,
        } = compressed;
        let failures = self.codec.counts.failures;
        let inflated = self.codec.inflate(&payload, window.as_mut(), max);
        if self.codec.counts.failures > failures {
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
}
