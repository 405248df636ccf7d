//! A wake-up at a precise instant for an event loop: a `timerfd` in the loop's poll.
//!
//! `epoll_wait` takes its timeout in whole milliseconds (mio rounds up), so a loop that slept
//! until the earliest deadline of its calls would end a guest's 10 ms sleep up to 1 ms late.
//! The alarm is armed with nanoseconds instead, and only when the earliest deadline changes:
//! under load, when the loop is awake anyway, it costs at most one `timerfd_settime` per batch
//! of deadlines. Elsewhere than Linux the poll's own timeout serves, a millisecond coarser.

use std::io;
use std::time::Instant;

use mio::{Registry, Token};

/// A loop's alarm clock.
#[derive(Debug)]
pub(super) struct Alarm {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
    /// When it is set to ring; `None` once it rang or was never set.
    armed: Option<Instant>,
}

#[cfg(target_os = "linux")]
impl Alarm {
    /// An alarm that rings as readiness of `token` in `registry`.
    pub(super) fn new(registry: &Registry, token: Token) -> io::Result<Alarm> {
        use rustix::time::{TimerfdClockId, TimerfdFlags, timerfd_create};
        use std::os::fd::AsRawFd;
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        registry.register(
            &mut mio::unix::SourceFd(&fd.as_raw_fd()),
            token,
            mio::Interest::READABLE,
        )?;
        Ok(Alarm { fd, armed: None })
    }

    /// Makes sure the alarm rings at `at` or earlier (an alarm set for earlier rings anyway,
    /// and a needless wake-up costs less than a second system call per deadline).
    pub(super) fn ring_by(&mut self, at: Instant) {
        use rustix::time::{Itimerspec, TimerfdTimerFlags, Timespec, timerfd_settime};
        if self.armed.is_some_and(|armed| armed <= at) {
            return;
        }
        let after = at.saturating_duration_since(Instant::now());
        if after.is_zero() {
            // Due already: the loop does not wait at all.
            return;
        }
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let spec = Itimerspec {
            it_interval: zero,
            it_value: Timespec {
                tv_sec: after.as_secs() as _,
                tv_nsec: after.subsec_nanos().into(),
            },
        };
        match timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec) {
            Ok(_) => self.armed = Some(at),
            Err(e) => tracing::debug!("timerfd_settime failed: {e}"),
        }
    }

    /// The alarm rang: clears it.
    pub(super) fn rang(&mut self) {
        let mut expirations = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut expirations);
        self.armed = None;
    }
}

#[cfg(not(target_os = "linux"))]
impl Alarm {
    pub(super) fn new(_registry: &Registry, _token: Token) -> io::Result<Alarm> {
        Ok(Alarm { armed: None })
    }

    pub(super) fn ring_by(&mut self, at: Instant) {
        self.armed = Some(at);
    }

    pub(super) fn rang(&mut self) {
        self.armed = None;
    }
}
