//! Guest sleeps that last as long as asked, not a millisecond more.
//!
//! wasmtime-wasi backs `wasi:clocks/monotonic-clock.subscribe-{duration,instant}` with tokio's
//! timer, which rounds each deadline up to a whole millisecond and fires it from a reactor that
//! itself sleeps in whole milliseconds. A guest's `std::thread::sleep(10 ms)` took 11.6 ms at
//! the median under load, which capped a handler that waits 10 ms at 85% of its ceiling.
//!
//! [`super::waits`] replaces those two functions with [`subscribe`] (the rest of WASI is
//! untouched). A deadline is served by one timer thread that waits on a condition variable, a futex with a nanosecond
//! timeout, and wakes the waiting worker when the deadline passes. The pollable is an ordinary
//! [`Pollable`], so `wasi:io/poll` can wait on it together with sockets and streams.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::p2::{DynPollable, Pollable};

/// Above this many timer entries, those whose pollable is gone are dropped (and above twice
/// as many as were left live, so that many live entries do not make each insert a full scan).
const PRUNE_AT: usize = 4096;

/// A pollable that is ready `after` from now.
pub fn subscribe(
    table: &mut ResourceTable,
    after: Duration,
) -> wasmtime::Result<Resource<DynPollable>> {
    let deadline = table.push(Deadline::after(after))?;
    wasmtime_wasi::p2::subscribe(table, deadline)
}

/// When a guest's pollable becomes ready.
pub struct Deadline {
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
    pub fn after(after: Duration) -> Deadline {
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
            Some(slot) => *slot.waker.lock().unwrap() = Some(cx.waker().clone()),
            None => {
                let slot = Arc::new(Slot {
                    waker: Mutex::new(Some(cx.waker().clone())),
                });
                TIMER.insert(at, Arc::downgrade(&slot));
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

/// The timer thread's queue of deadlines.
struct Timer {
    entries: Mutex<BinaryHeap<Entry>>,
    /// The size at which the next insert prunes; changed only with `entries` locked.
    prune_at: AtomicUsize,
    changed: Condvar,
}

static TIMER: LazyLock<Arc<Timer>> = LazyLock::new(|| {
    let timer = Arc::new(Timer {
        entries: Mutex::new(BinaryHeap::new()),
        prune_at: AtomicUsize::new(PRUNE_AT),
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
    fn insert(&self, at: Instant, slot: Weak<Slot>) {
        let mut entries = self.entries.lock().unwrap();
        if entries.len() >= self.prune_at.load(AtomicOrdering::Relaxed) {
            entries.retain(|e| e.slot.strong_count() > 0);
            let next = PRUNE_AT.max(2 * entries.len());
            self.prune_at.store(next, AtomicOrdering::Relaxed);
        }
        let earliest = entries.peek().is_none_or(|e| at < e.at);
        entries.push(Entry { at, slot });
        drop(entries);
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let mut due = Vec::new();
        let mut entries = self.entries.lock().unwrap();
        loop {
            let now = Instant::now();
            while entries.peek().is_some_and(|e| e.at <= now) {
                due.extend(entries.pop().and_then(|e| e.slot.upgrade()));
            }
            if !due.is_empty() {
                drop(entries);
                for slot in due.drain(..) {
                    if let Some(waker) = slot.waker.lock().unwrap().take() {
                        waker.wake();
                    }
                }
                entries = self.entries.lock().unwrap();
                continue;
            }
            entries = match entries.peek() {
                None => self.changed.wait(entries).unwrap(),
                Some(next) => {
                    let wait = next.at - now;
                    self.changed.wait_timeout(entries, wait).unwrap().0
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
    fn dropped_deadlines_are_pruned() {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..PRUNE_AT * 2 {
            let mut d = Deadline::after(Duration::from_secs(3600));
            assert!(d.poll_ready(&mut cx).is_pending());
        }
        // Other tests may hold a few live entries of their own.
        assert!(TIMER.entries.lock().unwrap().len() <= PRUNE_AT + 16);
    }
}
