//! The epoch ticker: one thread per engine that advances its epoch every tick, so that a
//! running guest reaches its epoch callback (CPU accounting, the CPU and wall-clock deadlines,
//! yielding to other calls).
//!
//! Only a guest that runs needs ticks. A ticker that saw no guest run for
//! [`QUIET_TICKS_BEFORE_REST`] ticks rests (parks) until a call starts or resumes, so an idle
//! server wakes for nothing (it used to wake a hundred times a second, per engine: most of
//! what an idle process cost). Every call's start ([`Ticks::want`] in the CPU budget's reset),
//! resumption and epoch callback say that ticks are wanted; a guest that computes reaches its
//! callback at every tick, so its ticker never rests under it.
//!
//! Why a resting ticker cannot leave a guest unchecked: every store's epoch deadline is set
//! one tick ahead, and only where ticks are also wanted (a call's start, a resumption, the
//! callback itself). The ticker rests only after [`QUIET_TICKS_BEFORE_REST`] ticks with no
//! want, so by then every deadline has passed: any guest that runs again (a WASI 0.3 guest
//! resuming inside wasmtime's event loop included) reaches its callback at once, which wakes
//! the ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use wasmtime::Engine;

/// Ticks with no guest seen before the ticker rests: a second at 10 ms ticks.
const QUIET_TICKS_BEFORE_REST: u32 = 100;

/// Whether a ticker's ticks are wanted, shared by the ticker and its engine's stores.
#[derive(Debug, Default)]
pub(crate) struct Ticks {
    /// A guest ran (or a call started) since the ticker last looked.
    wanted: AtomicBool,
    /// The ticker is resting, or about to.
    resting: AtomicBool,
    stop: AtomicBool,
    ticker: std::sync::OnceLock<Thread>,
}

impl Ticks {
    /// A guest runs, or is about to: the ticker ticks (and wakes, if it rests). One relaxed
    /// load while it ticks already.
    #[inline]
    pub(crate) fn want(&self) {
        if !self.wanted.load(Ordering::Relaxed) {
            self.wanted.store(true, Ordering::SeqCst);
            if self.resting.load(Ordering::SeqCst)
                && let Some(ticker) = self.ticker.get()
            {
                ticker.unpark();
            }
        }
    }
}

/// Advances an engine's epoch every `period` while guests run, until dropped.
pub(crate) struct EpochTicker {
    ticks: Arc<Ticks>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EpochTicker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochTicker").finish_non_exhaustive()
    }
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine, period: Duration) -> std::io::Result<Self> {
        let ticks = Arc::new(Ticks::default());
        let shared = ticks.clone();
        let thread = std::thread::Builder::new()
            .name("ankh-epoch".into())
            .spawn(move || run(&engine, period, &shared))?;
        let _ = ticks.ticker.set(thread.thread().clone());
        Ok(EpochTicker {
            ticks,
            thread: Some(thread),
        })
    }

    /// What this engine's stores tell the ticker.
    pub(crate) fn ticks(&self) -> Arc<Ticks> {
        self.ticks.clone()
    }
}

fn run(engine: &Engine, period: Duration, ticks: &Ticks) {
    let mut quiet = 0;
    while !ticks.stop.load(Ordering::Relaxed) {
        std::thread::sleep(period);
        engine.increment_epoch();
        if ticks.wanted.swap(false, Ordering::SeqCst) {
            quiet = 0;
            continue;
        }
        quiet += 1;
        if quiet < QUIET_TICKS_BEFORE_REST {
            continue;
        }
        // Said before looking once more: a call that starts now either is seen here, or
        // sees `resting` and unparks (parking after an unpark returns at once).
        ticks.resting.store(true, Ordering::SeqCst);
        tracing::debug!("epoch ticker: no guest ran for {quiet} ticks, resting");
        while !ticks.wanted.load(Ordering::SeqCst) && !ticks.stop.load(Ordering::SeqCst) {
            std::thread::park();
        }
        ticks.resting.store(false, Ordering::SeqCst);
        quiet = 0;
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.ticks.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits (bounded) until `done`.
    fn until(what: &str, done: impl Fn() -> bool) {
        let started = std::time::Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(10), "never: {what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn an_idle_ticker_rests_and_a_call_wakes_it() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).unwrap();
        let ticker = EpochTicker::start(engine, Duration::from_micros(100)).unwrap();
        let ticks = ticker.ticks();
        until("rests with no guest", || {
            ticks.resting.load(Ordering::SeqCst)
        });
        ticks.want();
        until("ticks again once wanted", || {
            !ticks.resting.load(Ordering::SeqCst)
        });
        // That it never rests under a guest that computes is tested with a real one
        // (`sandbox::a62_a_runaway_loop_is_stopped_after_the_server_was_idle`): a timed loop
        // here would fail whenever a loaded machine paused this thread.
        drop(ticker);
    }
}
