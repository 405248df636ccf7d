//! One worker thread: an executor of plugin calls.
//!
//! It takes a job from the shared queue and starts its call ([`super::call`]): the first poll
//! runs the guest until it finishes or first waits. (Most calls never get here: an event loop
//! starts a call itself when a permit is free, and hands it to the queue only once its guest
//! has computed for a tick; see [`super::inline`]. The worker then resumes it.) A call that waits (a sleep, a socket, a
//! key-value commit: every wait of a guest goes through the host) is suspended on its fiber,
//! and the worker takes the next job or resumes another call. When a wait is over, its waker
//! pushes the call onto this worker's ready list, and the worker polls it again.
//!
//! - A call stays on the worker that started or resumed it: its fiber and instance are polled
//!   by one thread, and a wake-up is a push onto that worker's list (measured against a shared
//!   ready queue that any worker serves: see the README). The calls themselves are kept by
//!   [`super::tasks::Tasks`].
//! - Calls in flight across all workers are bounded by `max_calls`: a worker takes a permit
//!   ([`CallSlots`]) before it takes a job, and the call gives it back when it is over. While
//!   none is free a worker only resumes its own calls, and new jobs wait in the queue.
//! - The worker serves its calls' deadlines itself (`runtime::sandbox::timer::Local`): it sleeps no
//!   longer than the earliest, and fires the due ones when it wakes.
//! - A guest that computes yields its thread at an epoch tick when other calls of its worker
//!   are ready or due, or jobs wait in the queue (see `runtime::sandbox::exec::others_ready`), so a
//!   long computation delays them by at most one tick: a handler that computes never stalls
//!   the others, however few the workers.
//!
//! Nothing a plugin does can end this loop.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::tasks::{Polled, Tasks, running};
use crate::pool::job::Job;
use crate::pool::reply::Replies;
use crate::proto::ws_deflate::Codec;
use crate::runtime::sandbox::timer::Local;
use crate::ws_router::WsRouter;

/// How long a worker with calls in flight but no deadline sleeps before it looks again
/// (their waits wake it; this only bounds a wait that nothing would end).
const IDLE_WAKE: Duration = Duration::from_secs(1);

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

    pub(super) fn in_flight(&self) -> &AtomicI64 {
        &self.metrics.calls_in_flight
    }

    pub(super) fn release(&self) {
        let _ = self.give_back.try_send(());
    }

    /// A permit if one is free now.
    pub(super) fn try_take(&self) -> bool {
        self.permits.try_recv().is_ok()
    }
}

pub(super) struct Worker {
    /// The event loops' reply queues; a reply goes to the loop of its connection.
    reply: Replies,
    link: Arc<WsRouter>,
    slots: Arc<CallSlots>,
    /// Inflates compressed WebSocket messages (its inflater is made on first use).
    codec: Codec,
    tasks: Tasks,
    /// A permit taken for the next job (see [`CallSlots`]).
    permit: bool,
    wakeups: Receiver<()>,
}

impl Worker {
    pub(super) fn new(reply: Replies, link: Arc<WsRouter>, slots: Arc<CallSlots>) -> Self {
        let (signal, wakeups): (Sender<()>, _) = crossbeam_channel::bounded(1);
        let signal = Box::new(move || {
            let _ = signal.try_send(());
        });
        Worker {
            tasks: Tasks::new(reply.clone(), slots.clone(), signal, false),
            reply,
            link,
            slots,
            codec: Codec::default(),
            permit: false,
            wakeups,
        }
    }

    pub(super) fn run(mut self, rx: Receiver<Box<Job>>) {
        let queue = rx.clone();
        crate::runtime::sandbox::exec::set_executor(crate::runtime::sandbox::exec::Executor {
            ready: self.tasks.ready_flag(),
            waiting: Box::new(move || !queue.is_empty()),
            event_loop: false,
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
                // Nothing to resume: wait for a permit and a job, for as long as it takes.
                super::cpu::settle();
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
            let now = Instant::now();
            let timeout = Local::next().map_or(IDLE_WAKE, |at| at.saturating_duration_since(now));
            super::cpu::pause(now);
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
            super::cpu::resume(Instant::now());
        }
    }

    /// Polls every call that was woken since the last round.
    fn resume_ready(&mut self) {
        self.tasks
            .resume_ready(|_, _| unreachable!("a worker keeps the calls it computes"));
    }

    /// Starts a job: its first poll runs the guest until it finishes or first waits. A new
    /// call takes the permit this worker holds; a call an event loop handed on brings its own.
    fn start(&mut self, job: Job) {
        if !matches!(job, Job::Resume(_)) {
            debug_assert!(self.permit, "a call starts with a permit");
            self.permit = false;
        }
        let running = running(job, &self.reply, &self.link, &mut self.codec, &self.slots);
        let Polled::Stays = self.tasks.spawn(running) else {
            unreachable!("a worker keeps the calls it computes")
        };
    }
}
