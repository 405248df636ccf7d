//! Calls an event loop runs itself: the short path for a call that finishes or waits without
//! computing for long.
//!
//! When an event loop hands a job to the pool and a call permit is free, the loop starts the
//! call on its own thread instead (`try_start`): the guest runs until it finishes (its
//! response is queued for this very loop, which writes it right after the event that
//! started the call, with no thread woken), or until it waits (a sleep, a key-value commit,
//! an outbound request), in which case its fiber is suspended and the loop goes back to its
//! sockets. The loop resumes its calls when they are woken or their deadlines pass
//! ([`run_ready`]), and sleeps no longer than their earliest deadline ([`next_deadline`]).
//!
//! Mummy's rule still holds: a handler never stalls the other connections of its loop for
//! long. Waits hold no thread at all, and a guest still computing at an epoch tick yields
//! (`runtime::sandbox::exec::others_ready` is always true on a loop) and is handed on to the worker
//! pool, where it finishes beside the other CPU-bound calls. A loop is thus held by one guest
//! for at most one epoch tick.
//!
//! Where loops are fewer than cores, the workers are also how calls reach the other cores: a
//! loop that has spent [`LOOP_GUEST_BUDGET`](crate::limits::LOOP_GUEST_BUDGET) on guests
//! since its last poll queues the round's further calls for them.
//!
//! Jobs that carry their own work before the guest runs (a compressed WebSocket message to
//! inflate) and jobs that find no free permit go to the pool's queue as before.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};

use super::job::Job;
use super::reply::Replies;
use super::tasks::{Polled, Running, Tasks, running};
use super::worker::CallSlots;
use crate::message::WsEvent;
use crate::proto::ws_deflate::Codec;
use crate::runtime::sandbox::timer::Local;
use crate::ws_router::WsRouter;

/// What a loop needs to run calls: shared with the pool.
pub(super) struct Parts {
    pub reply: Replies,
    pub link: Arc<WsRouter>,
    pub slots: Arc<CallSlots>,
    /// The workers' queue, for calls handed on.
    pub queue: Sender<Box<Job>>,
    /// Where each loop counts the calls it starts and hands on.
    pub metrics: Arc<crate::metrics::Metrics>,
}

struct Inline {
    parts: Arc<Parts>,
    shard: usize,
    tasks: Tasks,
    /// Unused by the calls a loop starts (compressed messages go to the pool), but every
    /// call is made the same way.
    codec: Codec,
    /// Guest time per round this loop keeps for itself (`None`: all of it).
    budget: Option<Duration>,
    /// Guest time spent on calls started since the round began.
    spent: Duration,
}

thread_local! {
    static INLINE: RefCell<Option<Inline>> = const { RefCell::new(None) };
}

/// Makes this thread (event loop `shard`) run calls itself from now on. A call woken from
/// another thread wakes the loop through its reply queue's waker.
pub(super) fn install(parts: Arc<Parts>, shard: usize, budget: Option<Duration>) {
    let wake_loop = parts.reply.to(shard).clone();
    let signal = Box::new(move || {
        // On the loop itself, nothing to wake: it resumes its calls before it next waits.
        if !super::reply::on_loop(shard) {
            wake_loop.wake();
        }
    });
    let tasks = Tasks::new(parts.reply.clone(), parts.slots.clone(), signal, true);
    crate::runtime::sandbox::exec::set_executor(crate::runtime::sandbox::exec::Executor {
        ready: tasks.ready_flag(),
        // A guest computing on a loop always gives the loop back at a tick.
        waiting: Box::new(|| true),
        event_loop: true,
    });
    Local::install();
    INLINE.with(|cell| {
        *cell.borrow_mut() = Some(Inline {
            parts,
            shard,
            tasks,
            codec: Codec::default(),
            budget,
            spent: Duration::ZERO,
        })
    });
}

/// This loop is done: the calls it still holds (a stream cut at the drain's deadline) are
/// dropped now, while the thread's other locals (the access line's buffer, the log's clock)
/// are still there for what their ends write, rather than among the thread's locals at exit.
pub(crate) fn uninstall() {
    let inline = INLINE.with(|cell| cell.borrow_mut().take());
    drop(inline);
}

/// Starts `job` on this thread if it is an event loop that runs calls and a permit is free;
/// gives the job back otherwise.
pub(super) fn try_start(job: Box<Job>) -> Result<(), Box<Job>> {
    let eligible = match &*job {
        Job::Request(_) => true,
        Job::Event(e) => !matches!(e.event, WsEvent::Compressed(_)),
        Job::Scheduled(_) | Job::Resume(_) => false,
    };
    if !eligible {
        return Err(job);
    }
    INLINE.with(|cell| {
        // Already borrowed: a call running here submits work (none does today); the pool
        // takes it.
        let Ok(mut inline) = cell.try_borrow_mut() else {
            return Err(job);
        };
        let Some(inline) = inline.as_mut() else {
            return Err(job);
        };
        if inline.budget.is_some_and(|budget| inline.spent >= budget)
            || !inline.parts.slots.try_take()
        {
            return Err(job);
        }
        let started = inline.budget.map(|_| Instant::now());
        let parts = inline.parts.clone();
        let counts = parts.metrics.io_loop(inline.shard);
        counts.call_started();
        let running = running(
            *job,
            &parts.reply,
            &parts.link,
            &mut inline.codec,
            &parts.slots,
        );
        if let Polled::Computing(running) = inline.tasks.spawn(running) {
            counts.call_handed_on();
            hand_on(&parts.queue, &mut inline.tasks, running);
        }
        if let Some(started) = started {
            inline.spent += started.elapsed();
        }
        Ok(())
    })
}

/// A new round of the loop (it just polled): its guest budget is whole again.
pub(crate) fn new_round() {
    INLINE.with(|cell| {
        if let Ok(mut inline) = cell.try_borrow_mut()
            && let Some(inline) = inline.as_mut()
        {
            inline.spent = Duration::ZERO;
        }
    });
}

/// Fires this loop's due deadlines and resumes its calls that were woken.
pub(crate) fn run_ready() {
    Local::fire(Instant::now());
    INLINE.with(|cell| {
        let Ok(mut inline) = cell.try_borrow_mut() else {
            return;
        };
        let Some(inline) = inline.as_mut() else {
            return;
        };
        if inline.tasks.any_ready() {
            let parts = inline.parts.clone();
            let counts = parts.metrics.io_loop(inline.shard);
            inline.tasks.resume_ready(|tasks, running| {
                counts.call_handed_on();
                hand_on(&parts.queue, tasks, running)
            });
        }
    });
}

/// Whether calls of this loop wait to be resumed (the loop must not sleep).
pub(crate) fn any_ready() -> bool {
    INLINE.with(|cell| {
        cell.try_borrow()
            .ok()
            .is_some_and(|i| i.as_ref().is_some_and(|i| i.tasks.any_ready()))
    })
}

/// The earliest deadline of this loop's calls.
pub(crate) fn next_deadline() -> Option<Instant> {
    Local::next()
}

/// A call that computes goes to the workers; if their queue is full it stays here and
/// resumes at the next round.
fn hand_on(queue: &Sender<Box<Job>>, tasks: &mut Tasks, running: Running) {
    match queue.try_send(Box::new(Job::Resume(running))) {
        Ok(()) => {}
        Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
            let Job::Resume(running) = *job else {
                unreachable!("a resume was sent")
            };
            tasks.insert_ready(running);
        }
    }
}
