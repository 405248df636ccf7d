//! When each connection's deadlines are next looked at: a hashed timing wheel of ticks.
//!
//! A connection says when it next needs its clocks checked ([`Check`]): at an instant (an
//! idle keep-alive connection at its idle timeout, an idle WebSocket at its next ping), at
//! the next tick (while it sends, receives a body or streams, whose progress is sampled each
//! tick), or never (a request with a worker, whose deadlines are the call's). The loop visits
//! only the connections whose time came, so an idle connection costs nothing between its
//! deadlines, however many there are (the loop used to visit every connection every tick).
//!
//! A connection that needs an earlier check gets a second entry; the wheel remembers each
//! slot's earliest, and an entry that is not it is dropped when its bucket comes round. A
//! check that comes early does no harm: the connection finds nothing due and says when it
//! next needs one. A connection that goes takes its earliest entry with it (a scan of one
//! bucket, once per connection, and only of a bucket of up to [`FORGET_SCAN`]), and a bucket
//! that held many entries gives the room back once they are gone: after a burst of ten
//! thousand connections the wheel holds none of theirs.

use std::time::{Duration, Instant};

/// When a connection next needs its deadlines checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing can become due until something else happens to it.
    Never,
    /// At the next tick.
    Soon,
    /// At the first tick at or after this instant.
    At(Instant),
}

impl Check {
    /// `wait` after `since` (never, should that be past the end of time).
    pub(crate) fn after(since: Instant, wait: Duration) -> Check {
        since.checked_add(wait).map_or(Check::Never, Check::At)
    }
}

/// Buckets in the wheel: with 100 ms ticks, a deadline less than 102.4 s away is visited only
/// when it is due; a later one is passed over once per turn.
const BUCKETS: usize = 1024;

/// A closing connection's entry is looked for in buckets up to this long.
const FORGET_SCAN: usize = 512;

/// A bucket keeps room for this many entries whatever it held before.
const BUCKET_KEEP: usize = 64;

/// Gives back most of a bucket's room once it holds less than a quarter of it.
fn shrink(bucket: &mut Vec<Entry>) {
    if bucket.capacity() > BUCKET_KEEP && bucket.len() * 4 < bucket.capacity() {
        bucket.shrink_to((bucket.len() * 2).max(BUCKET_KEEP));
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    slot: usize,
    serial: u64,
    tick: u64,
}

/// The ticks of one event loop's connections.
#[derive(Debug)]
pub(crate) struct Wheel {
    origin: Instant,
    period_ns: u64,
    /// The last tick whose bucket was visited.
    now: u64,
    buckets: Vec<Vec<Entry>>,
    /// Per slot: its earliest entry.
    scheduled: Vec<Scheduled>,
}

/// A slot's earliest entry (tick 0: none).
#[derive(Debug, Clone, Copy)]
struct Scheduled {
    serial: u64,
    tick: u64,
    /// Any instant after this one falls on `tick` or later: a connection that asks for one
    /// (an idle connection after every exchange) is answered by one comparison.
    covers_after: Instant,
}

impl Wheel {
    pub(crate) fn new(origin: Instant, period: Duration) -> Self {
        Wheel {
            origin,
            period_ns: (period.as_nanos() as u64).max(1),
            now: 0,
            buckets: vec![Vec::new(); BUCKETS],
            scheduled: Vec::new(),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// The first tick at or after `at`, and after the last one visited.
    fn tick_of(&self, at: Instant) -> u64 {
        self.nanos(at).div_ceil(self.period_ns).max(self.now + 1)
    }

    /// The connection in `slot` (with `serial`) needs a check: an entry is added only if it
    /// comes before the one the slot has.
    pub(crate) fn schedule(&mut self, slot: usize, serial: u64, check: Check) {
        if slot >= self.scheduled.len() {
            let none = Scheduled {
                serial: 0,
                tick: 0,
                covers_after: self.origin,
            };
            self.scheduled.resize(slot + 1, none);
        }
        let was = self.scheduled[slot];
        let standing = was.serial == serial && was.tick != 0;
        let tick = match check {
            Check::Never => return,
            Check::Soon => self.now + 1,
            Check::At(at) if standing && at > was.covers_after => return,
            Check::At(at) => self.tick_of(at),
        };
        if standing && was.tick <= tick {
            return;
        }
        self.scheduled[slot] = Scheduled {
            serial,
            tick,
            covers_after: self.origin + Duration::from_nanos((tick - 1) * self.period_ns),
        };
        self.buckets[(tick % BUCKETS as u64) as usize].push(Entry { slot, serial, tick });
    }

    /// The connection in `slot` has gone: its earliest entry goes now, any other when its
    /// bucket comes round.
    pub(crate) fn forget(&mut self, slot: usize) {
        let Some(s) = self.scheduled.get_mut(slot) else {
            return;
        };
        let (serial, tick) = (s.serial, s.tick);
        s.tick = 0;
        if tick == 0 {
            return;
        }
        let bucket = &mut self.buckets[(tick % BUCKETS as u64) as usize];
        // Closing a crowd of connections that share a tick must not cost the square of it:
        // past this many, the entry stays until its bucket comes round.
        if bucket.len() > FORGET_SCAN {
            return;
        }
        if let Some(i) = bucket
            .iter()
            .position(|e| (e.slot, e.serial, e.tick) == (slot, serial, tick))
        {
            bucket.swap_remove(i);
            shrink(bucket);
        }
    }

    /// Visits every tick up to `now`, and appends the connections (slot, serial) whose check
    /// is due to `due`. Each is unscheduled: it schedules itself again after its check.
    pub(crate) fn advance(&mut self, now: Instant, due: &mut Vec<(usize, u64)>) {
        let target = self.nanos(now) / self.period_ns;
        if target <= self.now {
            return;
        }
        // After a long pause every bucket is visited once.
        let first = self.now.max(target.saturating_sub(BUCKETS as u64)) + 1;
        for tick in first..=target {
            let bucket = &mut self.buckets[(tick % BUCKETS as u64) as usize];
            let scheduled = &mut self.scheduled;
            bucket.retain(|e| {
                if e.tick > target {
                    return true;
                }
                if let Some(s) = scheduled.get_mut(e.slot)
                    && (s.serial, s.tick) == (e.serial, e.tick)
                {
                    s.tick = 0;
                    due.push((e.slot, e.serial));
                }
                false
            });
            shrink(bucket);
        }
        self.now = target;
    }

    /// Entries held, stale ones included (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.iter().map(Vec::len).sum()
    }

    /// Room for entries, in entries (for tests).
    #[cfg(test)]
    fn room(&self) -> usize {
        self.buckets.iter().map(Vec::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_millis(100);

    fn due(w: &mut Wheel, at: Instant) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        w.advance(at, &mut out);
        out
    }

    #[test]
    fn a_deadline_is_visited_at_the_first_tick_at_or_after_it() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        w.schedule(3, 1, Check::At(t0 + Duration::from_millis(250)));
        assert!(due(&mut w, t0 + Duration::from_millis(299)).is_empty());
        assert_eq!(due(&mut w, t0 + Duration::from_millis(300)), vec![(3, 1)]);
        // Unscheduled once due.
        assert!(due(&mut w, t0 + Duration::from_secs(5)).is_empty());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn an_exact_tick_is_not_rounded_up() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        w.schedule(0, 1, Check::At(t0 + Duration::from_millis(200)));
        assert_eq!(due(&mut w, t0 + Duration::from_millis(200)), vec![(0, 1)]);
    }

    #[test]
    fn soon_is_the_next_tick_and_the_past_is_too() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        assert!(due(&mut w, t0 + Duration::from_millis(450)).is_empty());
        w.schedule(1, 1, Check::Soon);
        w.schedule(2, 1, Check::At(t0));
        let mut got = due(&mut w, t0 + Duration::from_millis(500));
        got.sort();
        assert_eq!(got, vec![(1, 1), (2, 1)]);
    }

    #[test]
    fn only_the_earliest_entry_of_a_slot_counts() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        w.schedule(5, 1, Check::At(t0 + Duration::from_secs(60)));
        w.schedule(5, 1, Check::At(t0 + Duration::from_secs(1)));
        // A later one is ignored: the earlier stands.
        w.schedule(5, 1, Check::At(t0 + Duration::from_secs(30)));
        assert_eq!(w.len(), 2);
        assert_eq!(due(&mut w, t0 + Duration::from_secs(1)), vec![(5, 1)]);
        // The 60 s entry is stale: dropped when its bucket comes, never reported.
        assert!(due(&mut w, t0 + Duration::from_secs(61)).is_empty());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn an_instant_on_the_tick_before_is_not_taken_for_a_later_one() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        w.schedule(2, 1, Check::At(t0 + Duration::from_millis(1000)));
        // Within the same tick: nothing added.
        w.schedule(2, 1, Check::At(t0 + Duration::from_millis(901)));
        assert_eq!(w.len(), 1);
        // On the tick before: an earlier entry.
        w.schedule(2, 1, Check::At(t0 + Duration::from_millis(900)));
        assert_eq!(w.len(), 2);
        assert_eq!(due(&mut w, t0 + Duration::from_millis(900)), vec![(2, 1)]);
    }

    #[test]
    fn a_slot_reused_by_another_connection_does_not_inherit_the_old_entry() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        w.schedule(7, 1, Check::At(t0 + Duration::from_secs(1)));
        w.forget(7);
        w.schedule(7, 2, Check::At(t0 + Duration::from_secs(2)));
        assert!(due(&mut w, t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(due(&mut w, t0 + Duration::from_secs(2)), vec![(7, 2)]);
    }

    #[test]
    fn deadlines_beyond_one_turn_and_long_pauses() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        // 10 minutes: the bucket comes round several times first.
        w.schedule(1, 1, Check::At(t0 + Duration::from_secs(600)));
        w.schedule(2, 1, Check::At(t0 + Duration::from_secs(3)));
        for s in 1..600 {
            let got = due(&mut w, t0 + Duration::from_secs(s));
            assert_eq!(got.is_empty(), s != 3, "at {s} s: {got:?}");
        }
        assert_eq!(due(&mut w, t0 + Duration::from_secs(600)), vec![(1, 1)]);
        // A loop that did not look for a long while finds everything due at once.
        w.schedule(3, 1, Check::At(t0 + Duration::from_secs(700)));
        w.schedule(4, 1, Check::At(t0 + Duration::from_secs(900)));
        let mut got = due(&mut w, t0 + Duration::from_secs(1000));
        got.sort();
        assert_eq!(got, vec![(3, 1), (4, 1)]);
    }

    #[test]
    fn a_connection_that_goes_takes_its_entry_and_a_burst_gives_its_room_back() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, P);
        // Ten thousand connections, each idle until 30 s from now (spread over 100 ticks, as
        // over 10 s of arrivals), then all gone.
        for slot in 0..10_000 {
            let at = t0 + Duration::from_secs(30) + Duration::from_millis(slot as u64 % 100 * 100);
            w.schedule(slot, 1, Check::At(at));
        }
        assert_eq!(w.len(), 10_000);
        for slot in 0..10_000 {
            w.forget(slot);
        }
        assert_eq!(w.len(), 0);
        assert!(w.room() <= BUCKETS * BUCKET_KEEP, "{}", w.room());
        // Spread over the wheel, then due: visiting their buckets gives the room back.
        for slot in 0..10_000 {
            let at = t0 + Duration::from_millis(100 * (slot as u64 % 50) + 100);
            w.schedule(slot, 2, Check::At(at));
        }
        assert_eq!(due(&mut w, t0 + Duration::from_secs(6)).len(), 10_000);
        assert!(w.room() <= BUCKETS * BUCKET_KEEP, "{}", w.room());
        // A crowd on one tick is not scanned for: its entries go when their bucket comes.
        for slot in 0..2_000 {
            w.schedule(slot, 3, Check::At(t0 + Duration::from_secs(20)));
        }
        for slot in 0..2_000 {
            w.forget(slot);
        }
        assert!(w.len() > 1_000, "{}", w.len());
        assert!(due(&mut w, t0 + Duration::from_secs(20)).is_empty());
        assert_eq!(w.len(), 0);
        assert!(w.room() <= BUCKETS * BUCKET_KEEP, "{}", w.room());
    }
}
