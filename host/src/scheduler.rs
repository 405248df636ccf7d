//! Scheduled jobs: one thread that knows when each plugin's schedules are due (their
//! `[[schedule]]`, see [`crate::runtime::engine::schedules`]) and hands each due run to the
//! worker pool as a call of the plugin's `scheduled.run`, under the plugin's usual limits.
//!
//! **Once per tick across processes.** Every process that serves the plugin computes the same
//! ticks, and each asks the store, before it runs one, to claim it: a compare-and-swap of
//! `tick/PLUGIN/SCHEDULE/DUE` from absent (a Redis `SET NX` when the store is Redis), kept long
//! enough to outlive any clock skew between them. The one that claims it runs it; the others
//! do nothing. A second claim, `run/PLUGIN/SCHEDULE`, is held while a run goes on (and expires
//! after the plugin's `handler_timeout_ms` plus a margin, so a process killed in a run frees
//! its schedule): a tick that finds it held, in this process or another, is skipped and
//! counted, or waits for it (`overlap = "queue"`). The claims live in a namespace of the store
//! no plugin can name.
//!
//! So with one store (the default file store, or one Redis behind any number of processes)
//! a tick runs at most once, and exactly once while some process is up to run it. A process
//! killed in a run loses that run (it is not retried: a retry could run it twice).
//!
//! **Misses.** Ticks that pass while no process is up are not run, unless the schedule says
//! `catch_up = true`: then, when the plugin loads, the last tick missed since the last run
//! (`last/PLUGIN/SCHEDULE` in the store) runs once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::blocking::block_on;
use crate::kv::{KvError, Namespace, now};
use crate::limits::{
    SCHEDULE_QUEUE_RETRY, SCHEDULE_RESCAN, SCHEDULE_RUN_CLAIM_MARGIN, SCHEDULE_TICK_CLAIM_MIN,
};
use crate::metrics::{PluginMetrics, Tick};
use crate::pool::WorkerPool;
use crate::pool::job::{Job, RunDone, RunOutcome, ScheduledJob};
use crate::runtime::engine::plugin::Plugin;
use crate::runtime::engine::registry::Registry;
use crate::runtime::engine::schedules::{Overlap, Schedule};

/// The store namespace of the claims: a name no plugin can have (`:` is not allowed in one).
const CLAIMS: &str = "ankh:schedules";

/// Bytes the claims may hold in the store: a claim is about 100 bytes, and a process holds
/// a few per schedule at a time.
const CLAIMS_QUOTA: usize = 16 << 20;

/// Runs plugins' schedules. Cloned into `ankh run` and the server; the ticking thread starts
/// with [`Scheduler::start`].
#[derive(Clone, Debug)]
pub struct Scheduler(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    registry: Arc<Registry>,
    pool: WorkerPool,
    claims: Namespace,
    /// What a claim holds: this process.
    owner: Vec<u8>,
    /// Ids for runs, as requests have (the node number in the top bits).
    ids: AtomicU64,
}

/// A run ended: what the ticking thread hears.
struct Finished {
    key: Key,
    due_ms: u64,
    id: u64,
    outcome: RunOutcome,
}

/// A plugin's schedule: (plugin, schedule).
type Key = (Arc<str>, String);

/// The state of one schedule on the ticking thread.
struct Entry {
    plugin: Arc<Plugin>,
    schedule: Schedule,
    /// The next tick, `None` once a cron is never due again.
    next_due: Option<u64>,
    /// A run started here and not finished.
    running: Option<Instant>,
    /// A tick waiting for the run before it (`overlap = "queue"`).
    queued: Option<u64>,
}

impl Scheduler {
    /// A scheduler for the plugins in `registry`, running them on `pool`, claiming ticks in
    /// `store`. `node`: this process's number (for run ids).
    pub(crate) fn new(
        registry: Arc<Registry>,
        pool: WorkerPool,
        store: &crate::kv::Store,
        node: u32,
    ) -> Scheduler {
        let first = (u64::from(node) << crate::message::LOCAL_ID_BITS)
            | (1 << (crate::message::LOCAL_ID_BITS - 1));
        Scheduler(Arc::new(Shared {
            registry,
            pool,
            claims: store.namespace(CLAIMS, crate::kv::Bounds::with_quota(CLAIMS_QUOTA)),
            owner: format!("pid {}", std::process::id()).into_bytes(),
            ids: AtomicU64::new(first),
        }))
    }

    /// Starts the thread that runs the schedules when they are due.
    pub(crate) fn start(&self) -> std::io::Result<()> {
        let shared = self.0.clone();
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name("ankh-scheduler".into())
            .spawn(move || Ticking::new(shared, tx).run(&rx))
            .map(drop)
    }

    /// Runs `plugin`'s schedule `schedule` once, now, whatever its ticks (`ankh run`), and
    /// waits for it. No claim is taken: this is for development.
    pub fn run_now(&self, plugin: &str, schedule: &str) -> anyhow::Result<RunResult> {
        let shared = &self.0;
        let Some(p) = shared.registry.by_name(plugin) else {
            anyhow::bail!("no plugin `{plugin}` is loaded (see the log above for why)");
        };
        let Some(declared) = p.policy.schedules.iter().find(|s| s.name == schedule) else {
            let names: Vec<&str> = p.policy.schedules.iter().map(|s| s.name.as_str()).collect();
            anyhow::bail!(
                "plugin `{plugin}` declares no schedule `{schedule}` ({})",
                if names.is_empty() {
                    "it declares none: add [[schedule]] to its policy".to_owned()
                } else {
                    format!("it declares {}", names.join(", "))
                }
            );
        };
        let Some(slot) = p.try_enter() else {
            anyhow::bail!("plugin `{plugin}` is handling as many calls as it may");
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        let started = Instant::now();
        let id = shared.ids.fetch_add(1, Ordering::Relaxed);
        let job = ScheduledJob {
            plugin: p.clone(),
            schedule: Arc::from(declared.name.as_str()),
            due_ms: now(),
            id,
            slot,
            done: RunDone::new(move |outcome| {
                let _ = tx.send(outcome);
            }),
        };
        if shared
            .pool
            .submit_queued(Box::new(Job::Scheduled(job)))
            .is_err()
        {
            anyhow::bail!("the worker queue is full");
        }
        let outcome = rx.recv().unwrap_or(RunOutcome::NotRun);
        let took = started.elapsed();
        record(&p.metrics, schedule, &outcome, took);
        Ok(RunResult {
            id: format!("{id:016x}"),
            took,
            outcome: match outcome {
                RunOutcome::Ok => Ok(()),
                RunOutcome::Failed(why) => Err(said(&p, &why)),
                RunOutcome::NotRun => Err("the run did not happen".to_owned()),
            },
        })
    }
}

/// What a failed job said, as the log and `ankh run` show it: its secrets masked first (a
/// cut could split one), then control characters escaped (no forged lines) and the text cut
/// at a guest log line's length.
fn said(plugin: &Plugin, why: &str) -> String {
    crate::runtime::host::stdio::printable(&plugin.mask(why), crate::limits::GUEST_LOG_LINE_BYTES)
        .into_owned()
}

/// How a run of `ankh run` went.
#[derive(Debug)]
pub struct RunResult {
    /// The run's id, as its log lines carry it.
    pub id: String,
    pub took: Duration,
    /// The job's error, its secrets masked.
    pub outcome: Result<(), String>,
}

/// Counts a run's outcome.
fn record(metrics: &PluginMetrics, schedule: &str, outcome: &RunOutcome, took: Duration) {
    let tick = match outcome {
        RunOutcome::Ok => Tick::Ran { took, ok: true },
        RunOutcome::Failed(_) => Tick::Ran { took, ok: false },
        RunOutcome::NotRun => Tick::Skipped,
    };
    metrics.schedule(schedule, tick);
}

/// The ticking thread's state.
struct Ticking {
    shared: Arc<Shared>,
    finished: Sender<Finished>,
    entries: BTreeMap<Key, Entry>,
    /// The routing table the entries were made from.
    seen: Option<Arc<Vec<crate::runtime::engine::registry::Mount>>>,
}

impl Ticking {
    fn new(shared: Arc<Shared>, finished: Sender<Finished>) -> Self {
        Ticking {
            shared,
            finished,
            entries: BTreeMap::new(),
            seen: None,
        }
    }

    fn run(mut self, rx: &Receiver<Finished>) {
        loop {
            self.rescan();
            let now = now();
            let due: Vec<(Key, u64)> = self
                .entries
                .iter_mut()
                .filter_map(|(key, entry)| {
                    let due = entry.next_due.filter(|d| *d <= now)?;
                    entry.next_due = entry.schedule.next_after(now.max(due));
                    Some((key.clone(), due))
                })
                .collect();
            for (key, due) in due {
                self.fire(&key, due, false);
            }
            let queued: Vec<(Key, u64)> = self
                .entries
                .iter()
                .filter(|(_, e)| e.running.is_none())
                .filter_map(|(key, e)| Some((key.clone(), e.queued?)))
                .collect();
            for (key, due) in queued {
                self.retry_queued(&key, due);
            }
            let mut wait = SCHEDULE_RESCAN;
            let now = crate::kv::now();
            for entry in self.entries.values() {
                if let Some(due) = entry.next_due {
                    wait = wait.min(Duration::from_millis(due.saturating_sub(now)));
                }
                if entry.queued.is_some() {
                    wait = wait.min(SCHEDULE_QUEUE_RETRY);
                }
            }
            match rx.recv_timeout(wait) {
                Ok(done) => {
                    self.finish(done);
                    while let Ok(done) = rx.try_recv() {
                        self.finish(done);
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Follows the routing table: schedules of plugins loaded or reloaded since the last look
    /// get an entry (one whose declaration did not change keeps its state), those of plugins
    /// removed lose theirs.
    fn rescan(&mut self) {
        let table = self.shared.registry.snapshot();
        if self.seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &table)) {
            return;
        }
        let now = now();
        let mut kept = BTreeMap::new();
        let mut catch_ups = Vec::new();
        for mount in table.iter() {
            let plugin = &mount.plugin;
            if !plugin.runs_jobs() {
                continue;
            }
            for schedule in &plugin.policy.schedules {
                let key: Key = (plugin.name.clone(), schedule.name.clone());
                if kept.contains_key(&key) {
                    continue;
                }
                let entry = match self.entries.remove(&key) {
                    Some(mut old) if old.schedule == *schedule => {
                        old.plugin = plugin.clone();
                        old
                    }
                    old => {
                        tracing::info!(
                            plugin = %plugin.name,
                            schedule = %schedule.name,
                            "schedule {} of plugin `{}`: {}",
                            schedule.name,
                            plugin.name,
                            schedule.describe()
                        );
                        if schedule.catch_up && old.is_none() {
                            catch_ups.push(key.clone());
                        }
                        Entry {
                            plugin: plugin.clone(),
                            schedule: schedule.clone(),
                            next_due: schedule.next_after(now),
                            // A run of the version before goes on: it still counts.
                            running: old.as_ref().and_then(|o| o.running),
                            queued: None,
                        }
                    }
                };
                kept.insert(key, entry);
            }
        }
        self.entries = kept;
        self.seen = Some(table);
        for key in catch_ups {
            self.catch_up(&key, now);
        }
    }

    /// Runs the last tick missed since the last run, if one was (`catch_up = true`).
    fn catch_up(&mut self, key: &Key, now: u64) {
        let Some(entry) = self.entries.get(key) else {
            return;
        };
        let Some(missed) = entry.schedule.last_at_or_before(now) else {
            return;
        };
        let last = match block_on(self.shared.claims.get(&last_key(key))) {
            Ok(last) => last
                .and_then(|v| String::from_utf8(v).ok())
                .and_then(|v| v.parse::<u64>().ok()),
            Err(e) => {
                warn_limited!(plugin = %key.0, schedule = %key.1, "cannot read the schedule's last run for its catch-up: {e}");
                return;
            }
        };
        // Never run before (a new schedule): nothing was missed.
        if last.is_some_and(|last| last < missed) {
            tracing::info!(
                plugin = %key.0,
                schedule = %key.1,
                "schedule {} of plugin `{}`: catching up the tick due at {} ms",
                key.1,
                key.0,
                missed
            );
            self.fire(key, missed, true);
        }
    }

    /// A tick is due: claims it, then runs it unless a run is still going.
    fn fire(&mut self, key: &Key, due: u64, catching_up: bool) {
        let Some(entry) = self.entries.get(key) else {
            return;
        };
        let ttl = entry
            .schedule
            .period(due)
            .saturating_mul(2)
            .clamp(SCHEDULE_TICK_CLAIM_MIN, Duration::from_secs(3600));
        match self.claim(&tick_key(key, due), ttl) {
            Ok(true) => {}
            // Another process runs it (or ran it: a catch-up it made first).
            Ok(false) => {
                tracing::debug!(plugin = %key.0, schedule = %key.1, due, catching_up, "tick claimed by another process");
                return;
            }
            Err(e) => {
                self.skip(key, due, &format!("the store cannot be asked: {e}"));
                return;
            }
        }
        self.begin(key, due);
    }

    /// Starts the run of a claimed tick, or skips or queues it behind the run still going.
    fn begin(&mut self, key: &Key, due: u64) {
        let Some(entry) = self.entries.get(key) else {
            return;
        };
        let (running, overlap) = (entry.running.is_some(), entry.schedule.overlap);
        let ttl = entry.plugin.limits.handler_timeout + SCHEDULE_RUN_CLAIM_MARGIN;
        let busy = running || {
            match self.claim(&run_key(key), ttl) {
                Ok(claimed) => !claimed,
                Err(e) => {
                    self.skip(key, due, &format!("the store cannot be asked: {e}"));
                    return;
                }
            }
        };
        if !busy {
            self.start(key, due);
            return;
        }
        match overlap {
            Overlap::Skip => self.skip(key, due, "the run before it is still going"),
            Overlap::Queue => {
                let older = self
                    .entries
                    .get_mut(key)
                    .and_then(|e| e.queued.replace(due));
                if let Some(older) = older {
                    self.skip(key, older, "a later tick came while it waited");
                }
            }
        }
    }

    /// A queued tick asks again for the run claim.
    fn retry_queued(&mut self, key: &Key, due: u64) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        entry.queued = None;
        self.begin(key, due);
    }

    /// Hands the run to the pool (its run claim is held).
    fn start(&mut self, key: &Key, due: u64) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        // A plugin whose CPU allowance is spent runs no job, as it answers no request.
        if entry.plugin.metrics.cpu_throttle().is_some() {
            self.release(key);
            self.skip(
                key,
                due,
                "the plugin used its CPU time for now (limits.cpu_ms_per_minute)",
            );
            return;
        }
        let Some(slot) = entry.plugin.try_enter() else {
            self.release(key);
            self.skip(key, due, "the plugin is handling as many calls as it may");
            return;
        };
        let _ = block_on(
            self.shared
                .claims
                .set(last_key(key), due.to_string().into_bytes(), None),
        );
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        entry.running = Some(Instant::now());
        let finished = self.finished.clone();
        let done_key = key.clone();
        let id = self.shared.ids.fetch_add(1, Ordering::Relaxed);
        let job = ScheduledJob {
            plugin: entry.plugin.clone(),
            schedule: Arc::from(key.1.as_str()),
            due_ms: due,
            id,
            slot,
            done: RunDone::new(move |outcome| {
                let _ = finished.send(Finished {
                    key: done_key,
                    due_ms: due,
                    id,
                    outcome,
                });
            }),
        };
        // A full queue drops the job, whose `RunDone` then reports it not run.
        let _ = self
            .shared
            .pool
            .submit_queued(Box::new(Job::Scheduled(job)));
    }

    /// A run ended: counts it, frees its schedule.
    fn finish(&mut self, done: Finished) {
        self.release(&done.key);
        let Some(entry) = self.entries.get_mut(&done.key) else {
            return;
        };
        let took = entry.running.take().map_or(Duration::ZERO, |t| t.elapsed());
        let (plugin, schedule) = (&done.key.0, &done.key.1);
        let run = format!("{:016x}", done.id);
        match &done.outcome {
            RunOutcome::Ok => tracing::info!(
                %plugin,
                %schedule,
                due = done.due_ms,
                %run,
                took_ms = took.as_millis() as u64,
                "scheduled job ran"
            ),
            RunOutcome::Failed(why) => tracing::warn!(
                %plugin,
                %schedule,
                due = done.due_ms,
                %run,
                took_ms = took.as_millis() as u64,
                "scheduled job failed: {}",
                said(&entry.plugin, why)
            ),
            RunOutcome::NotRun => tracing::warn!(
                %plugin,
                %schedule,
                due = done.due_ms,
                %run,
                "scheduled job did not run: the worker queue was full or the server stopped"
            ),
        }
        record(&entry.plugin.metrics, schedule, &done.outcome, took);
    }

    /// Gives the schedule's run claim back.
    fn release(&self, key: &Key) {
        if let Err(e) = block_on(self.shared.claims.delete(run_key(key))) {
            warn_limited!(plugin = %key.0, schedule = %key.1, "cannot free the schedule in the store (it frees itself when its claim expires): {e}");
        }
    }

    /// A tick that will not run, counted, with why.
    fn skip(&self, key: &Key, due: u64, why: &str) {
        tracing::info!(plugin = %key.0, schedule = %key.1, due, "scheduled job skipped: {why}");
        if let Some(entry) = self.entries.get(key) {
            entry.plugin.metrics.schedule(&key.1, Tick::Skipped);
        }
    }

    /// Claims `key` for this process for `ttl`, if no one holds it.
    fn claim(&self, key: &str, ttl: Duration) -> Result<bool, KvError> {
        block_on(self.shared.claims.compare_and_swap(
            key.to_owned(),
            None,
            self.shared.owner.clone(),
            Some(ttl.as_millis().max(1) as u64),
        ))
    }
}

fn tick_key(key: &Key, due: u64) -> String {
    format!("tick/{}/{}/{due}", key.0, key.1)
}

fn run_key(key: &Key) -> String {
    format!("run/{}/{}", key.0, key.1)
}

fn last_key(key: &Key) -> String {
    format!("last/{}/{}", key.0, key.1)
}
