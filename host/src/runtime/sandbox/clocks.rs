//! The clocks a plugin reads: coarsened by default, as browsers coarsen `performance.now()`.
//!
//! Plugins of different owners share one process, its caches and its cores. A clock with
//! nanosecond resolution is the instrument of cache-timing side channels between them, so by
//! default both `wasi:clocks` clocks are rounded down to [`crate::limits::GUEST_CLOCK_RESOLUTION`] (the
//! resolution browsers settled on for pages that are not cross-origin isolated). A plugin whose
//! policy sets `precise_clocks = true` reads the host's clocks unchanged.
//!
//! Rounding down keeps the monotonic clock monotonic, and sleeps are unaffected: a duration
//! asked of `subscribe-duration` is honoured to the nanosecond by the guest timer.

use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

#[cfg(test)]
use crate::limits::GUEST_CLOCK_RESOLUTION;

/// The origin of every plugin's monotonic clock, so instants agree across instances.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn round_down(ns: u128, resolution: Duration) -> u128 {
    let step = resolution.as_nanos().max(1);
    ns - ns % step
}

/// The monotonic clock, in nanoseconds since the host started, at `resolution`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Monotonic {
    pub resolution: Duration,
}

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        u64::try_from(self.resolution.as_nanos()).unwrap_or(u64::MAX)
    }

    fn now(&self) -> u64 {
        let ns = round_down(EPOCH.elapsed().as_nanos(), self.resolution);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// The wall clock, since the Unix epoch, at `resolution`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wall {
    pub resolution: Duration,
}

impl HostWallClock for Wall {
    fn resolution(&self) -> Duration {
        self.resolution
    }

    fn now(&self) -> Duration {
        let since = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let ns = round_down(since.as_nanos(), self.resolution);
        Duration::new(
            u64::try_from(ns / 1_000_000_000).unwrap_or(u64::MAX),
            (ns % 1_000_000_000) as u32,
        )
    }
}

/// The clocks of a plugin whose limits say `resolution` (see
/// [`crate::runtime::sandbox::guest_limits::GuestLimits::clock_resolution`]).
pub(crate) fn at_resolution(resolution: Duration) -> (Monotonic, Wall) {
    (Monotonic { resolution }, Wall { resolution })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_clocks_move_in_whole_steps_and_never_back() {
        let (mono, wall) = at_resolution(GUEST_CLOCK_RESOLUTION);
        let step = GUEST_CLOCK_RESOLUTION.as_nanos() as u64;
        let mut last = 0;
        for _ in 0..10_000 {
            let now = mono.now();
            assert_eq!(now % step, 0);
            assert!(now >= last);
            last = now;
            assert_eq!(wall.now().as_nanos() % u128::from(step), 0);
        }
        assert_eq!(mono.resolution(), step);
    }

    #[test]
    fn precise_clocks_are_the_hosts() {
        let (mono, _) = at_resolution(Duration::from_nanos(1));
        let step = GUEST_CLOCK_RESOLUTION.as_nanos() as u64;
        assert!((0..10_000).any(|_| mono.now() % step != 0));
    }
}
