//! Scheduled jobs as a plugin's policy declares them (`[[schedule]]`), and when each is due.
//!
//! ```toml
//! [[schedule]]
//! name = "digest"                 # [a-z][a-z0-9_-]*, each once
//! cron = "*/5 * * * *"            # minute hour day-of-month month day-of-week (seconds first, optional)
//! tz = "Europe/Paris"             # the cron's time zone (default UTC)
//! overlap = "skip"                # a run still going when the next is due: skip it (or "queue" one)
//! catch_up = false                # after downtime, run the last missed tick once
//!
//! [[schedule]]
//! name = "refresh"
//! every = "30s"                   # or a fixed interval: ms, s, m, h; ticks are multiples of it since the epoch
//! ```
//!
//! A tick is named by the time it is due, in milliseconds since the Unix epoch: every process
//! computes the same ticks from the same declaration, which is what lets them agree, through
//! the store, on which one runs each (see [`crate::scheduler`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::limits::{SCHEDULE_MIN_INTERVAL, SCHEDULES_PER_PLUGIN};

/// What a run still going when the next tick is due makes of that tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// The tick is skipped, and counted.
    Skip,
    /// The tick waits for the run to end, up to the tick after it (one waits at a time; a
    /// third is skipped).
    Queue,
}

/// When a schedule is due.
#[derive(Debug, Clone)]
pub enum When {
    /// A cron expression in a time zone.
    Cron {
        cron: Box<croner::Cron>,
        tz: jiff::tz::TimeZone,
    },
    /// Every interval, at its multiples since the epoch.
    Every(Duration),
}

/// One schedule of a plugin.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub name: String,
    pub when: When,
    pub overlap: Overlap,
    /// After downtime, run the last missed tick once (else missed ticks are not run).
    pub catch_up: bool,
    /// The declaration as written (for `ankh check`, `--print-config` and comparisons).
    row: BTreeMap<String, String>,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.row == other.row
    }
}

impl Eq for Schedule {}

impl Schedule {
    /// The declaration as the policy file gives it.
    pub(crate) fn row(&self) -> BTreeMap<String, String> {
        self.row.clone()
    }

    /// A line that says when it runs, for `ankh check` and logs.
    pub fn describe(&self) -> String {
        match &self.when {
            When::Cron { .. } => format!(
                "cron \"{}\" in {}",
                self.row["cron"],
                self.row.get("tz").map_or("UTC", String::as_str)
            ),
            When::Every(_) => format!("every {}", self.row["every"]),
        }
    }

    /// The first tick strictly after `after_ms` (milliseconds since the epoch); `None` when
    /// there is none (a cron that matches no date).
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        match &self.when {
            When::Every(every) => {
                let every = every.as_millis() as u64;
                Some((after_ms / every + 1) * every)
            }
            When::Cron { cron, tz } => {
                let at = jiff::Timestamp::from_millisecond(i64::try_from(after_ms).ok()?).ok()?;
                let next = cron
                    .find_next_occurrence(&at.to_zoned(tz.clone()), false)
                    .ok()?;
                u64::try_from(next.timestamp().as_millisecond()).ok()
            }
        }
    }

    /// The last tick at or before `at_ms`, if any (for a catch-up).
    pub fn last_at_or_before(&self, at_ms: u64) -> Option<u64> {
        match &self.when {
            When::Every(every) => {
                let every = every.as_millis() as u64;
                Some(at_ms / every * every)
            }
            When::Cron { cron, tz } => {
                let at = jiff::Timestamp::from_millisecond(i64::try_from(at_ms).ok()?).ok()?;
                let last = cron
                    .find_previous_occurrence(&at.to_zoned(tz.clone()), true)
                    .ok()?;
                u64::try_from(last.timestamp().as_millisecond()).ok()
            }
        }
    }

    /// How far apart its ticks are, at least roughly (for how long a tick's claim is kept).
    pub fn period(&self, from_ms: u64) -> Duration {
        match &self.when {
            When::Every(every) => *every,
            When::Cron { .. } => {
                let first = self.next_after(from_ms);
                let second = first.and_then(|f| self.next_after(f));
                match (first, second) {
                    (Some(a), Some(b)) => Duration::from_millis(b - a),
                    _ => Duration::from_secs(3600),
                }
            }
        }
    }
}

/// The `[[schedule]]` entries of a policy, checked: a name `[a-z][a-z0-9_-]*` (at most 64),
/// each once, at most [`SCHEDULES_PER_PLUGIN`]; exactly one of `cron` and `every`; a known
/// time zone; an interval of at least [`SCHEDULE_MIN_INTERVAL`].
pub(crate) fn declare(rows: &[BTreeMap<String, String>]) -> Result<Vec<Schedule>, String> {
    if rows.len() > SCHEDULES_PER_PLUGIN {
        return Err(format!(
            "{} schedules declared; at most {SCHEDULES_PER_PLUGIN}",
            rows.len()
        ));
    }
    let mut out: Vec<Schedule> = Vec::with_capacity(rows.len());
    for row in rows {
        let name = row["name"].clone();
        if !valid_name(&name) {
            return Err(format!(
                "{name:?} is not a schedule name: use lower-case letters, digits, '-' and '_', starting with a letter (at most 64)"
            ));
        }
        if out.iter().any(|s| s.name == name) {
            return Err(format!("schedule {name} is declared twice"));
        }
        let when = match (row.get("cron"), row.get("every")) {
            (Some(cron), None) => {
                let tz = match row.get("tz") {
                    None => jiff::tz::TimeZone::UTC,
                    Some(tz) => jiff::tz::TimeZone::get(tz).map_err(|_| {
                        format!("schedule {name}: {tz:?} is not a time zone of the IANA database (say \"Europe/Paris\", \"UTC\")")
                    })?,
                };
                let cron = croner::parser::CronParser::builder()
                    .seconds(croner::parser::Seconds::Optional)
                    .build()
                    .parse(cron)
                    .map_err(|e| {
                        format!("schedule {name}: {cron:?} is not a cron expression: {e}")
                    })?;
                When::Cron {
                    cron: Box::new(cron),
                    tz,
                }
            }
            (None, Some(every)) => {
                if row.contains_key("tz") {
                    return Err(format!(
                        "schedule {name}: tz applies to a cron expression, not to every"
                    ));
                }
                let every = parse_interval(every)
                    .ok_or_else(|| format!("schedule {name}: {every:?} is not an interval: write a number and ms, s, m or h (\"30s\", \"5m\")"))?;
                if every < SCHEDULE_MIN_INTERVAL {
                    return Err(format!(
                        "schedule {name}: every {every:?} is shorter than {SCHEDULE_MIN_INTERVAL:?}"
                    ));
                }
                When::Every(every)
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "schedule {name} gives both cron and every: give one"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "schedule {name} gives neither cron nor every: give one"
                ));
            }
        };
        let overlap = match row.get("overlap").map(String::as_str) {
            None | Some("skip") => Overlap::Skip,
            Some("queue") => Overlap::Queue,
            Some(other) => {
                return Err(format!(
                    "schedule {name}: overlap {other:?} is not \"skip\" or \"queue\""
                ));
            }
        };
        let schedule = Schedule {
            name: name.clone(),
            when,
            overlap,
            catch_up: row.get("catch_up").is_some_and(|v| v == "true"),
            row: row.clone(),
        };
        if schedule.next_after(crate::kv::now()).is_none() {
            return Err(format!("schedule {name}: its cron expression is never due"));
        }
        out.push(schedule);
    }
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// `250ms`, `30s`, `5m`, `2h`.
fn parse_interval(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let ms = match unit.trim() {
        "ms" => n,
        "s" => n.checked_mul(1000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    (ms > 0).then(|| Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(pairs: &[(&str, &str)]) -> Result<Schedule, String> {
        let row = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        declare(&[row]).map(|mut v| v.remove(0))
    }

    /// 2026-12-06T10:07:30Z.
    const AT: u64 = 1_796_551_650_000;

    #[test]
    fn intervals_tick_at_their_multiples_since_the_epoch() {
        let s = one(&[("name", "tick"), ("every", "30s")]).unwrap();
        assert_eq!(s.next_after(AT), Some(AT + 30_000));
        assert_eq!(s.next_after(AT + 1), Some(AT + 30_000));
        assert_eq!(s.last_at_or_before(AT + 29_999), Some(AT));
        assert_eq!(s.period(AT), Duration::from_secs(30));
        assert_eq!(parse_interval("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_interval("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_interval("5"), None);
        assert_eq!(parse_interval("0s"), None);
        assert_eq!(parse_interval("s"), None);
    }

    #[test]
    fn a_cron_is_evaluated_in_its_time_zone() {
        // 09:00 in Paris is 08:00 UTC in December.
        let s = one(&[
            ("name", "morning"),
            ("cron", "0 9 * * *"),
            ("tz", "Europe/Paris"),
        ])
        .unwrap();
        let next = s.next_after(AT).unwrap();
        let utc = jiff::Timestamp::from_millisecond(next as i64).unwrap();
        assert_eq!(utc.to_string(), "2026-12-07T08:00:00Z");
        assert_eq!(s.period(AT), Duration::from_secs(86_400));
        // Every five minutes, in UTC.
        let s = one(&[("name", "five"), ("cron", "*/5 * * * *")]).unwrap();
        assert_eq!(s.next_after(AT), Some(AT + 150_000));
        assert_eq!(s.last_at_or_before(AT), Some(AT - 150_000));
        assert_eq!(s.describe(), "cron \"*/5 * * * *\" in UTC");
    }

    #[test]
    fn bad_declarations_are_refused_with_the_reason() {
        let refused = |pairs: &[(&str, &str)], needle: &str| {
            let e = one(pairs).unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        refused(
            &[("name", "x"), ("cron", "61 * * * *")],
            "not a cron expression",
        );
        refused(
            &[("name", "x"), ("cron", "* * * * *"), ("tz", "Mars/Base")],
            "not a time zone",
        );
        refused(&[("name", "x")], "neither cron nor every");
        refused(
            &[("name", "x"), ("cron", "* * * * *"), ("every", "1s")],
            "both",
        );
        refused(&[("name", "x"), ("every", "10ms")], "shorter than");
        refused(
            &[("name", "x"), ("every", "1s"), ("tz", "UTC")],
            "tz applies",
        );
        refused(&[("name", "X"), ("every", "1s")], "not a schedule name");
        refused(
            &[("name", "x"), ("every", "1s"), ("overlap", "pile")],
            "overlap",
        );
        let row = |name: &str| {
            BTreeMap::from([
                ("name".to_owned(), name.to_owned()),
                ("every".to_owned(), "1s".to_owned()),
            ])
        };
        let e = declare(&[row("a"), row("a")]).unwrap_err();
        assert!(e.contains("declared twice"), "{e}");
        let many: Vec<_> = (0..=SCHEDULES_PER_PLUGIN)
            .map(|i| row(&format!("s{i}")))
            .collect();
        assert!(declare(&many).unwrap_err().contains("at most"));
    }
}
