//! The CPU time of calls, charged to their plugins' meters (`ankh_plugin_cpu_seconds_total`
//! and the policy's `cpu_ms_per_minute`) with a reading of the thread's CPU clock per round of
//! calls, not two per call.
//!
//! A thread's CPU clock is a system call on Linux, with no vDSO path: about 1.2 µs on the
//! project's VM, against 33 ns for the monotonic clock. Read before and after every stretch
//! of every call (one poll of its future), it cost an own-world hello 13% of its server CPU
//! (`benches/results/2026-12-07.md`). Here a thread times each stretch by the monotonic clock
//! and keeps it in the thread's open round; the round reads the CPU clock when its first
//! stretch begins and when it is settled, and shares the CPU time it measured among its
//! stretches by their wall time:
//!
//! ```text
//! charge = the stretch's wall time × min(1, the round's CPU time / the round's awake time)
//! ```
//!
//! A thread that is neither preempted nor blocked inside a call has as much CPU time as wall
//! time, and each stretch is charged its own duration; preemption, or a host call that blocks,
//! lowers the ratio for all the stretches of the round alike. The host's own work between
//! stretches (parsing, writing answers) is awake time charged to nobody. The thread's waits
//! (an event loop's poll, a worker's queue) are not awake time: the thread says when it
//! waits ([`pause`]) and when it wakes ([`resume`]).
//!
//! A round is settled once its stretches add up to [`ROUND_AWAKE`] (so a stretch that
//! computes for longer is charged when it ends, as each one was before), at a wait once it
//! has been awake that long or is older than [`ROUND_AGE`], before a thread waits with no
//! bound ([`settle`]), and when its thread ends. A meter lags the calls by about `ROUND_AGE`
//! at most.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cpu_time::ThreadTime;

use crate::metrics::PluginMetrics;

/// Awake time (or time in stretches) after which a round is settled: it bounds what a round
/// shares out, and how many readings of the CPU clock a busy thread makes (two per round).
pub(crate) const ROUND_AWAKE: Duration = Duration::from_millis(1);

/// Age after which a round is settled at its thread's next wait, however little it
/// computed: how long a meter (and the cap that reads it) may lag.
pub(crate) const ROUND_AGE: Duration = Duration::from_millis(100);

/// Plugins one round keeps apart; a round that meets one more is settled.
const ROUND_PLUGINS: usize = 8;

struct Round {
    /// The thread's CPU clock when the round's first stretch began.
    cpu_at: Duration,
    began: Instant,
    /// Awake time before the current awake spell.
    awake: Duration,
    /// When the current awake spell began; `None` while the thread waits.
    awake_since: Option<Instant>,
    /// The wall time of the round's stretches, all plugins together.
    stretched: Duration,
    /// Each plugin's meter and the wall time of its stretches in the round.
    charges: Vec<(Arc<PluginMetrics>, Duration)>,
}

impl Round {
    fn awake(&self, now: Instant) -> Duration {
        self.awake
            + self
                .awake_since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }

    /// Reads the CPU clock and charges each plugin its share.
    fn settle(&mut self, now: Instant) {
        let charges = std::mem::take(&mut self.charges);
        let Ok(cpu) = ThreadTime::try_now() else {
            return;
        };
        let cpu = cpu.as_duration().saturating_sub(self.cpu_at).as_nanos();
        let awake = self.awake(now).as_nanos().max(1);
        for (meter, wall) in charges {
            let charge = if cpu >= awake {
                wall
            } else {
                let ns = wall.as_nanos() * cpu / awake;
                Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
            };
            meter.cpu.charge(charge);
        }
    }
}

impl Drop for Round {
    /// The thread ends: what it still holds is charged.
    fn drop(&mut self) {
        if !self.charges.is_empty() {
            self.settle(Instant::now());
        }
    }
}

thread_local! {
    static ROUND: RefCell<Option<Round>> = const { RefCell::new(None) };
}

/// A stretch of a call begins on this thread: opens a round if none is open (one reading of
/// the CPU clock). Returns the stretch's start, for [`stretch_ends`].
pub(crate) fn stretch_begins() -> Instant {
    ROUND.with(|cell| {
        let mut cell = cell.borrow_mut();
        match cell.as_mut() {
            Some(round) => {
                let now = Instant::now();
                round.awake_since.get_or_insert(now);
                now
            }
            None => {
                // Without a CPU clock no round opens, and nothing is charged.
                let cpu = ThreadTime::try_now().ok();
                let now = Instant::now();
                *cell = cpu.map(|cpu| Round {
                    cpu_at: cpu.as_duration(),
                    began: now,
                    awake: Duration::ZERO,
                    awake_since: Some(now),
                    stretched: Duration::ZERO,
                    charges: Vec::new(),
                });
                now
            }
        }
    })
}

/// The stretch that began at `began` ended: its wall time goes to `plugin`'s share of the
/// round, which is settled once its stretches add up to [`ROUND_AWAKE`].
pub(crate) fn stretch_ends(plugin: &Arc<PluginMetrics>, began: Instant) {
    ROUND.with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some(round) = cell.as_mut() else {
            return;
        };
        let now = Instant::now();
        let wall = now.saturating_duration_since(began);
        round.stretched += wall;
        if let Some((_, total)) = round
            .charges
            .iter_mut()
            .find(|(meter, _)| Arc::ptr_eq(meter, plugin))
        {
            *total += wall;
        } else {
            round.charges.push((plugin.clone(), wall));
        }
        if round.stretched >= ROUND_AWAKE || round.charges.len() > ROUND_PLUGINS {
            round.settle(now);
            *cell = None;
        }
    });
}

/// This thread waits for its next event from `now` on: the wait is not awake time. Settles
/// the round once it has been awake [`ROUND_AWAKE`] or is older than [`ROUND_AGE`].
pub(crate) fn pause(now: Instant) {
    ROUND.with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some(round) = cell.as_mut() else {
            return;
        };
        if let Some(since) = round.awake_since.take() {
            round.awake += now.saturating_duration_since(since);
        }
        if round.awake >= ROUND_AWAKE || now.saturating_duration_since(round.began) >= ROUND_AGE {
            round.settle(now);
            *cell = None;
        }
    });
}

/// This thread woke at `now` from a wait that [`pause`] announced.
pub(crate) fn resume(now: Instant) {
    ROUND.with(|cell| {
        if let Some(round) = cell.borrow_mut().as_mut() {
            round.awake_since.get_or_insert(now);
        }
    });
}

/// Settles this thread's round now: before a wait with no bound.
pub(crate) fn settle() {
    ROUND.with(|cell| {
        if let Some(mut round) = cell.borrow_mut().take() {
            round.settle(Instant::now());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    fn charged(meter: &PluginMetrics) -> Duration {
        meter.cpu.used()
    }

    fn stretch(meter: &Arc<PluginMetrics>, d: Duration) -> Duration {
        let began = stretch_begins();
        spin(d);
        let wall = began.elapsed();
        stretch_ends(meter, began);
        wall
    }

    #[test]
    fn a_round_shares_its_cpu_time_by_the_stretches_wall_time() {
        let a = Arc::new(PluginMetrics::default());
        let b = Arc::new(PluginMetrics::default());
        let cpu_before = ThreadTime::now();
        let mut wall_a = Duration::ZERO;
        let mut wall_b = Duration::ZERO;
        // Short stretches, as a loop serving hello world runs them: one round.
        for _ in 0..4 {
            wall_a += stretch(&a, Duration::from_micros(60));
            wall_b += stretch(&b, Duration::from_micros(20));
        }
        settle();
        let used = cpu_before.elapsed();
        let (ca, cb) = (charged(&a), charged(&b));
        assert!(ca + cb <= used, "charged {ca:?} + {cb:?} of {used:?} used");
        assert!(!cb.is_zero());
        // Both got the same share of their wall time (one round, one ratio; a thread
        // preempted past `ROUND_AWAKE` makes two rounds, hence the slack).
        let ratio = ca.as_secs_f64() / cb.as_secs_f64();
        let walls = wall_a.as_secs_f64() / wall_b.as_secs_f64();
        assert!(
            (ratio / walls - 1.0).abs() < 0.3,
            "charged {ratio:.2} : 1 for {walls:.2} : 1 of wall time"
        );
    }

    #[test]
    fn a_wait_between_stretches_is_not_charged_and_does_not_dilute_the_round() {
        let a = Arc::new(PluginMetrics::default());
        stretch(&a, Duration::from_micros(300));
        pause(Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        resume(Instant::now());
        stretch(&a, Duration::from_micros(300));
        settle();
        // 600 µs of computing, charged nearly whole. Were the 30 ms wait awake time, the
        // round's ratio would be about 0.02, and the charge some 12 µs.
        let c = charged(&a);
        assert!(c >= Duration::from_micros(100), "charged {c:?}");
        assert!(c <= Duration::from_millis(2), "charged {c:?}");
    }

    #[test]
    fn a_long_stretch_is_charged_when_it_ends_and_an_old_round_at_the_next_wait() {
        let a = Arc::new(PluginMetrics::default());
        stretch(&a, ROUND_AWAKE * 3);
        assert!(!charged(&a).is_zero(), "a long stretch was not charged");

        let b = Arc::new(PluginMetrics::default());
        stretch(&b, Duration::from_micros(50));
        // (Preempted past `ROUND_AWAKE`, the stretch was charged at its end already.)
        let open = charged(&b).is_zero();
        pause(Instant::now());
        assert_eq!(open, charged(&b).is_zero(), "a young round was settled");
        std::thread::sleep(ROUND_AGE + Duration::from_millis(10));
        resume(Instant::now());
        pause(Instant::now());
        assert!(!charged(&b).is_zero(), "an old round was not settled");
    }

    #[test]
    fn more_plugins_than_a_round_keeps_apart_are_all_charged() {
        let meters: Vec<_> = (0..ROUND_PLUGINS * 2 + 1)
            .map(|_| Arc::new(PluginMetrics::default()))
            .collect();
        for m in &meters {
            stretch(m, Duration::from_micros(20));
        }
        settle();
        for (n, m) in meters.iter().enumerate() {
            assert!(!charged(m).is_zero(), "plugin {n} was not charged");
        }
    }
}
