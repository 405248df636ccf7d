//! Running a plugin call to completion from synchronous code.
//!
//! Plugin calls are futures (wasmtime runs each on a fiber, suspended while the guest waits;
//! see [`crate::pool`] for the executor the workers run). Outside the workers (loading a
//! plugin, tests, benchmarks) one call at a time is simply driven on the calling thread.

use std::cell::{Cell, OnceCell};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

/// Drives `future` on this thread, parking it while the future waits, with wasmtime-wasi's
/// tokio runtime as the ambient one (WASI's sockets and files need a reactor).
pub fn block_on<F: Future>(future: F) -> F::Output {
    wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| crate::blocking::block_on(future))
}

/// What the executor of a thread tells the epoch checks of the guests it runs.
pub(crate) struct Executor {
    /// True while calls of this executor are ready to resume.
    pub ready: Arc<AtomicBool>,
    /// Whether work is waiting that this executor could start (a job in the queue).
    pub waiting: Box<dyn Fn() -> bool>,
    /// Whether this thread is an event loop, which hands a call that yields on to the
    /// workers (see [`leave_loop`]).
    pub event_loop: bool,
}

thread_local! {
    static EXECUTOR: OnceCell<Executor> = const { OnceCell::new() };
    /// Set when a guest on this thread gave its thread up at an epoch tick while computing.
    static YIELDED: Cell<bool> = const { Cell::new(false) };
}

/// A guest on this thread is giving its thread up at an epoch tick, still computing.
pub(crate) fn note_yield() {
    YIELDED.with(|y| y.set(true));
}

/// Whether a guest yielded at an epoch tick since the last call (and forgets it): an
/// executor that hands computing calls on asks after each poll.
pub(crate) fn take_yield() -> bool {
    YIELDED.with(|y| y.replace(false))
}

/// Tells this thread's epoch checks about its executor (once per thread).
pub(crate) fn set_executor(executor: Executor) {
    EXECUTOR.with(|cell| {
        let _ = cell.set(executor);
    });
}

/// Whether this thread is an event loop (its executor hands yielding calls on).
pub(crate) fn on_event_loop() -> bool {
    EXECUTOR.with(|cell| cell.get().is_some_and(|e| e.event_loop))
}

/// Moves the call off its event loop before host work that would hold the loop: collecting
/// or compressing a large body. An epoch tick moves a call whose *guest* computes; the host's
/// own work is never interrupted by one, so a guest that answers a big body quickly would
/// leave that work to the loop. On a loop this yields once, as a guest computing at a tick
/// does, and the loop hands the call to the workers (where their queue is full it stays and
/// goes on here); anywhere else it is ready at once.
pub(crate) async fn leave_loop() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded || !on_event_loop() {
            return Poll::Ready(());
        }
        yielded = true;
        note_yield();
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

/// Whether a guest that is still computing at an epoch tick should give its thread up: other
/// calls of this thread's executor are ready to resume, their deadlines have passed, or work
/// waits to be started. Its call then resumes after them, so a guest that computes for long
/// shares its thread (a tick at a time) instead of holding it until it is done.
pub(crate) fn others_ready() -> bool {
    EXECUTOR.with(|cell| {
        cell.get()
            .is_some_and(|e| e.ready.load(Ordering::Relaxed) || (e.waiting)())
    }) || crate::runtime::sandbox::timer::Local::due(std::time::Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn waits_for_a_wake_from_another_thread() {
        let started = Instant::now();
        let timer = crate::runtime::sandbox::timer::Deadline::after(Duration::from_millis(5));
        let mut timer = timer;
        block_on(std::future::poll_fn(|cx| timer.poll_ready(cx)));
        assert!(started.elapsed() >= Duration::from_millis(5));
    }
}
