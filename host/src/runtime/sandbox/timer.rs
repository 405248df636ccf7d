//! Guest sleeps that last as long as asked, not a millisecond more.
//!
//! wasmtime-wasi backs `wasi:clocks/monotonic-clock.subscribe-{duration,instant}` with tokio's
//! timer, which rounds each deadline up to a whole millisecond and fires it from a reactor that
//! itself sleeps in whole milliseconds. A guest's `std::thread::sleep(10 ms)` took 11.6 ms at
//! the median under load, which capped a handler that waits 10 ms at 85% of its ceiling.
//!
//! [`crate::runtime::sandbox::waits`] replaces those two functions with [`subscribe`] (the rest of WASI is
//! untouched). The pollable is an ordinary [`Pollable`], so `wasi:io/poll` can wait on it
//! together with sockets and streams. A deadline is served where it is polled:
//! - on a worker thread, by the worker itself ([`Local`]): the worker sleeps no longer than its
//!   earliest deadline (a futex with a nanosecond timeout and 1 ns timer slack) and fires the
//!   due ones when it wakes, with no lock and no other thread. Many calls sleeping on one
//!   worker cost one wake-up per batch of due deadlines, not one hand-off per deadline from a
//!   timer thread (measured: 1,000 connections sleeping 10 ms spent half their CPU in
//!   those hand-offs);
//! - anywhere else (a plugin starting on the loader thread, tests), by one timer thread that
//!   waits on a condition variable and wakes the waiting thread when the deadline passes.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::p2::{DynPollable, Pollable};

/// Above this many timer entries, those whose pollable is gone are dropped (and above twice
/// as many as were left live, so that many live entries do not make each insert a full scan).
const PRUNE_AT: usize = 4096;

/// A pollable that is ready `after` from now.
pub(crate) fn subscribe(
    table: &mut ResourceTable,
    after: Duration,
) -> wasmtime::Result<Resource<DynPollable>> {
    let deadline = table.push(Deadline::after(after))?;
    wasmtime_wasi::p2::subscribe(table, deadline)
}

/// When a guest's pollable becomes ready.
pub(crate) struct Deadline {
    kind: Kind,
    /// Registered with the timer thread on the first poll that has to wait.
    slot: Option<Arc<Slot>>,
}

enum Kind {
    /// Zero or negative: ready, after one yield so that an I/O reactor polled in a busy loop
    /// still gets to run (as wasmtime-wasi does).
    Past {
        yielded: bool,
    },
    At(Instant),
    /// Too far ahead to represent: never ready.
    Never,
}

impl Deadline {
    pub(crate) fn after(after: Duration) -> Deadline {
        let kind = if after.is_zero() {
            Kind::Past { yielded: false }
        } else {
            match Instant::now().checked_add(after) {
                Some(at) => Kind::At(at),
                None => Kind::Never,
            }
        };
        Deadline { kind, slot: None }
    }

    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = match &mut self.kind {
            Kind::Past { yielded: true } => return Poll::Ready(()),
            Kind::Past { yielded } => {
                *yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Kind::Never => return Poll::Pending,
            Kind::At(at) => *at,
        };
        if Instant::now() >= at {
            return Poll::Ready(());
        }
        match &self.slot {
            Some(slot) => {
                *slot.waker.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(cx.waker().clone())
            }
            None => {
                let slot = Arc::new(Slot {
                    waker: Mutex::new(Some(cx.waker().clone())),
                });
                if !Local::insert(at, Arc::downgrade(&slot)) {
                    TIMER.insert(at, Arc::downgrade(&slot));
                }
                self.slot = Some(slot);
            }
        }
        // The timer may have fired between the check above and storing the waker; it only
        // fires once the deadline has passed, so looking at the clock again settles it.
        if Instant::now() >= at {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Pollable for Deadline {
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(std::future::poll_fn(move |cx| self.poll_ready(cx)))
    }
}

/// Whom to wake. Dropped with its [`Deadline`]; the timer holds only a weak reference.
struct Slot {
    waker: Mutex<Option<Waker>>,
}

struct Entry {
    at: Instant,
    slot: Weak<Slot>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Earliest first in a max-heap.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

/// Deadlines in order, earliest first, with the dropped ones pruned now and then.
struct Heap {
    entries: BinaryHeap<Entry>,
    /// The size at which the next insert prunes.
    prune_at: usize,
}

impl Heap {
    const fn new() -> Self {
        Heap {
            entries: BinaryHeap::new(),
            prune_at: PRUNE_AT,
        }
    }

    /// Adds a deadline; true if it is now the earliest.
    fn insert(&mut self, at: Instant, slot: Weak<Slot>) -> bool {
        if self.entries.len() >= self.prune_at {
            self.entries.retain(|e| e.slot.strong_count() > 0);
            self.prune_at = PRUNE_AT.max(2 * self.entries.len());
        }
        let earliest = self.entries.peek().is_none_or(|e| at < e.at);
        self.entries.push(Entry { at, slot });
        earliest
    }

    /// Moves the slots due by `now` (and still wanted) into `due`.
    fn take_due(&mut self, now: Instant, due: &mut Vec<Arc<Slot>>) {
        while self.entries.peek().is_some_and(|e| e.at <= now) {
            due.extend(self.entries.pop().and_then(|e| e.slot.upgrade()));
        }
    }

    /// The earliest deadline still wanted (dropped ones in front are discarded: a thread must
    /// not wake for a wait that is over).
    fn next(&mut self) -> Option<Instant> {
        while self.entries.peek()?.slot.strong_count() == 0 {
            self.entries.pop();
        }
        self.entries.peek().map(|e| e.at)
    }
}

fn wake_all(due: &mut Vec<Arc<Slot>>) {
    for slot in due.drain(..) {
        let waker = slot
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

thread_local! {
    /// The deadlines of this thread, when it serves them itself (see [`Local`]).
    static LOCAL: RefCell<Option<Heap>> = const { RefCell::new(None) };
}

/// The deadlines of a thread that serves them itself: an executor that sleeps no longer than
/// [`Local::next`] and calls [`Local::fire`] when it wakes. Deadlines polled on such a thread
/// are kept there; the calls waiting on them are polled there too.
pub(crate) struct Local;

impl Local {
    /// From now on, deadlines polled on this thread are served by it. Also sets the thread's
    /// timer slack to 1 ns, so that its timed sleeps end on time.
    pub(crate) fn install() {
        LOCAL.with(|l| *l.borrow_mut() = Some(Heap::new()));
        #[cfg(target_os = "linux")]
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    }

    /// Keeps a deadline on this thread; false if the thread does not serve its own.
    fn insert(at: Instant, slot: Weak<Slot>) -> bool {
        LOCAL.with(|l| match l.try_borrow_mut().as_deref_mut() {
            Ok(Some(heap)) => {
                heap.insert(at, slot);
                true
            }
            _ => false,
        })
    }

    /// This thread's earliest deadline.
    pub(crate) fn next() -> Option<Instant> {
        LOCAL.with(|l| l.borrow_mut().as_mut().and_then(Heap::next))
    }

    /// Whether a deadline of this thread has passed (a computing guest then yields).
    pub(crate) fn due(now: Instant) -> bool {
        Self::next().is_some_and(|at| at <= now)
    }

    /// Wakes whatever waits on this thread's deadlines that passed by `now`.
    pub(crate) fn fire(now: Instant) {
        let mut due = Vec::new();
        LOCAL.with(|l| {
            if let Some(heap) = l.borrow_mut().as_mut() {
                heap.take_due(now, &mut due);
            }
        });
        // Outside the borrow: a waker may poll, and polling may insert.
        wake_all(&mut due);
    }
}

/// The timer thread's queue of deadlines, for threads that do not serve their own.
struct Timer {
    heap: Mutex<Heap>,
    changed: Condvar,
}

static TIMER: LazyLock<Arc<Timer>> = LazyLock::new(|| {
    let timer = Arc::new(Timer {
        heap: Mutex::new(Heap::new()),
        changed: Condvar::new(),
    });
    let run = timer.clone();
    std::thread::Builder::new()
        .name("ankh-timer".into())
        .spawn(move || {
            // The kernel may delay a sleeping thread's wake-up by its timer slack (50 µs by
            // default) to batch wake-ups; this thread exists to wake on time.
            #[cfg(target_os = "linux")]
            let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
            run.run()
        })
        .expect("cannot start the guest timer thread");
    timer
});

impl Timer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Heap> {
        self.heap.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, at: Instant, slot: Weak<Slot>) {
        let earliest = self.lock().insert(at, slot);
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let mut due = Vec::new();
        let mut heap = self.lock();
        loop {
            let now = Instant::now();
            heap.take_due(now, &mut due);
            if !due.is_empty() {
                drop(heap);
                wake_all(&mut due);
                heap = self.lock();
                continue;
            }
            heap = match heap.next() {
                None => self
                    .changed
                    .wait(heap)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(next) => {
                    self.changed
                        .wait_timeout(heap, next - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;
    use std::thread::Thread;

    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    /// Polls each deadline until one is ready; returns its index.
    fn first_ready(deadlines: &mut [Deadline]) -> usize {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            for (i, d) in deadlines.iter_mut().enumerate() {
                if d.poll_ready(&mut cx).is_ready() {
                    return i;
                }
            }
            std::thread::park();
        }
    }

    #[test]
    fn a_deadline_is_never_early() {
        for ms in [1, 5, 20] {
            let started = Instant::now();
            first_ready(&mut [Deadline::after(Duration::from_millis(ms))]);
            assert!(started.elapsed() >= Duration::from_millis(ms));
        }
    }

    #[test]
    fn the_earlier_of_two_deadlines_wins() {
        let mut both = [
            Deadline::after(Duration::from_secs(30)),
            Deadline::after(Duration::from_millis(5)),
        ];
        assert_eq!(first_ready(&mut both), 1);
    }

    #[test]
    fn zero_yields_once_and_never_waits_forever() {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut zero = Deadline::after(Duration::ZERO);
        assert!(zero.poll_ready(&mut cx).is_pending());
        assert!(zero.poll_ready(&mut cx).is_ready());
        let mut never = Deadline::after(Duration::MAX);
        assert!(never.poll_ready(&mut cx).is_pending());
    }

    #[test]
    fn a_thread_that_serves_its_own_deadlines_fires_them_itself() {
        Local::install();
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let started = Instant::now();
        let mut d = Deadline::after(Duration::from_millis(5));
        assert!(d.poll_ready(&mut cx).is_pending());
        let at = Local::next().expect("kept on this thread");
        assert!(at >= started + Duration::from_millis(5));
        assert!(!Local::due(started));
        // Nothing else fires it: only this thread, once it is due.
        Local::fire(at - Duration::from_millis(1));
        assert!(d.poll_ready(&mut cx).is_pending());
        while Instant::now() < at {
            std::thread::sleep(at - Instant::now());
        }
        Local::fire(Instant::now());
        assert!(d.poll_ready(&mut cx).is_ready());
        assert_eq!(Local::next(), None);
    }

    #[test]
    fn dropped_deadlines_are_pruned() {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..PRUNE_AT * 2 {
            let mut d = Deadline::after(Duration::from_secs(3600));
            assert!(d.poll_ready(&mut cx).is_pending());
        }
        // Other tests may hold a few live entries of their own.
        assert!(TIMER.lock().entries.len() <= PRUNE_AT + 16);
    }
}
