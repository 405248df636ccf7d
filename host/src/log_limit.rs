//! Warnings that clients or plugins can trigger at will (one per request, per message, per
//! connection) are rate-limited: at most [`BURST`] lines per [`REPEAT_INTERVAL`] per call
//! site, each saying how many like it were left out before it. A flood of bad traffic costs a
//! few log lines a second, not one per event, and an occasional one is always logged.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The window over which one call site may log [`BURST`] lines.
pub(crate) const REPEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Lines one call site may log per [`REPEAT_INTERVAL`].
pub(crate) const BURST: u64 = 10;

static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The state of one call site: use it as a `static`.
#[derive(Debug)]
pub(crate) struct LogLimit {
    /// Milliseconds after [`START`] at which the current window began.
    window_ms: AtomicU64,
    /// Lines asked for in the current window.
    count: AtomicU64,
    suppressed: AtomicU64,
    /// Lines allowed per window.
    burst: u64,
}

impl Default for LogLimit {
    fn default() -> Self {
        Self::new()
    }
}

impl LogLimit {
    pub(crate) const fn new() -> Self {
        Self::with_burst(BURST)
    }

    /// A limit of `burst` lines per [`REPEAT_INTERVAL`].
    pub(crate) const fn with_burst(burst: u64) -> Self {
        LogLimit {
            window_ms: AtomicU64::new(0),
            count: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            burst,
        }
    }

    /// `Some(n)` when a line may be written now, `n` being how many were left out since the
    /// last one; `None` (and one more left out) otherwise.
    pub(crate) fn allow(&self) -> Option<u64> {
        let now = START.elapsed().as_millis() as u64;
        let window = self.window_ms.load(Ordering::Relaxed);
        if now >= window + REPEAT_INTERVAL.as_millis() as u64
            && self
                .window_ms
                .compare_exchange(window, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.count.store(0, Ordering::Relaxed);
        }
        if self.count.fetch_add(1, Ordering::Relaxed) < self.burst {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// `tracing::warn!` at most once per [`REPEAT_INTERVAL`] for this call site, with a
/// `suppressed` field counting the lines left out before it.
macro_rules! warn_limited {
    ($($arg:tt)+) => {{
        static LIMIT: $crate::log_limit::LogLimit = $crate::log_limit::LogLimit::new();
        if let Some(suppressed) = LIMIT.allow() {
            tracing::warn!(suppressed, $($arg)+);
        }
    }};
}

/// `tracing::error!`, rate-limited like [`warn_limited!`].
macro_rules! error_limited {
    ($($arg:tt)+) => {{
        static LIMIT: $crate::log_limit::LogLimit = $crate::log_limit::LogLimit::new();
        if let Some(suppressed) = LIMIT.allow() {
            tracing::error!(suppressed, $($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rest_is_counted_until_the_next_window() {
        let limit = LogLimit::new();
        for _ in 0..BURST {
            assert_eq!(limit.allow(), Some(0));
        }
        for _ in 0..1000 {
            assert_eq!(limit.allow(), None);
        }
        // As if the window had passed.
        limit.window_ms.store(0, Ordering::Relaxed);
        let _ = START.elapsed();
        std::thread::sleep(REPEAT_INTERVAL);
        assert_eq!(limit.allow(), Some(1000));
        assert_eq!(limit.allow(), Some(0));
    }
}
