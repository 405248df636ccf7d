//! Scheduled jobs: functions the host runs on the schedules the plugin's policy declares.
//!
//! The policy (`NAME.toml`) says when; the plugin says what, with a [`Jobs`] table passed to
//! [`export_plugin!`](crate::export_plugin):
//!
//! ```toml
//! [[schedule]]
//! name = "digest"
//! cron = "0 8 * * MON-FRI"     # minute hour day month weekday
//! tz = "Europe/Paris"
//!
//! [[schedule]]
//! name = "expire"
//! every = "5m"
//! ```
//!
//! ```
//! use ankh_guest::prelude::*;
//!
//! fn router() -> Router {
//!     Router::new().get("/", |_req| "hello")
//! }
//!
//! fn jobs() -> schedule::Jobs {
//!     schedule::Jobs::new()
//!         .on("digest", |job| {
//!             log::info(&format!("digest due at {} ms", job.due_ms));
//!             Ok(())
//!         })
//!         .on("expire", |_job| {
//!             kv::delete("session:old").map_err(|e| e.to_string())?;
//!             Ok(())
//!         })
//! }
//!
//! ankh_guest::export_plugin!(router, jobs = jobs);
//! ```
//!
//! The README's example, which reads a secret, calls a granted API with it and keeps the
//! answer, every morning:
//!
//! ```no_run
//! use ankh_guest::prelude::*;
//!
//! fn refresh(_job: &schedule::Job) -> schedule::JobResult {
//!     let key = config::get("api_key").ok_or("api_key is not set")?;
//!     let rates = http::send(
//!         http::Request::get("https://api.example.com/rates")
//!             .header("authorization", format!("Bearer {key}")),
//!     )
//!     .map_err(|e| e.to_string())?;
//!     kv::set("rates", rates.body).map_err(|e| e.to_string())
//! }
//!
//! fn router() -> Router {
//!     Router::new().get("/", |_req| kv::get_string("rates").ok().flatten().unwrap_or_default())
//! }
//!
//! ankh_guest::export_plugin!(router, jobs = || schedule::Jobs::new().on("refresh", refresh));
//! ```
//!
//! A run is a call like a request: the plugin's CPU deadline, memory cap and wall-clock
//! timeout apply, and it may use the key-value store, outbound HTTP and its configuration
//! values. An `Err` is logged with its message and counted as a failed run
//! (`ankh_schedule_failures_total`). Each tick runs once across the processes that share
//! the plugin's store, and a tick that comes while the run before it still goes is skipped
//! (or waits, with `overlap = "queue"`). `ankh run PLUGIN SCHEDULE` runs a job once, now.

use crate::bindings::exports::ankh::plugin::scheduled;

/// One run: which schedule, and when it was due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The schedule's name, as the policy declares it.
    pub schedule: String,
    /// When the run was due, in milliseconds since the Unix epoch (for `ankh run`: when it
    /// was asked for).
    pub due_ms: u64,
    /// Unique within the running host; the host's log lines about this run carry it.
    pub id: String,
}

/// What a job function returns: `Err` with a message when the run failed.
pub type JobResult = Result<(), String>;

type JobFn = Box<dyn Fn(&Job) -> JobResult>;

/// The plugin's job functions, by schedule name.
#[derive(Default)]
pub struct Jobs {
    jobs: Vec<(String, JobFn)>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.jobs.iter().map(|(name, _)| name))
            .finish()
    }
}

impl Jobs {
    /// No jobs.
    pub fn new() -> Self {
        Jobs::default()
    }

    /// Runs `job` for the schedule called `name` (a later `on` for the same name replaces it).
    pub fn on(mut self, name: &str, job: impl Fn(&Job) -> JobResult + 'static) -> Self {
        self.jobs.retain(|(n, _)| n != name);
        self.jobs.push((name.to_owned(), Box::new(job)));
        self
    }

    /// Runs the function for `job.schedule`; an error when there is none.
    pub fn run(&self, job: &Job) -> JobResult {
        match self.jobs.iter().find(|(name, _)| *name == job.schedule) {
            Some((_, f)) => f(job),
            None => Err(format!(
                "this plugin has no job for schedule `{}` (add it with Jobs::on)",
                job.schedule
            )),
        }
    }
}

/// The glue of `export_plugin!`: builds the table once per instance and runs the job.
#[doc(hidden)]
pub fn run_export(jobs: fn() -> Jobs, job: scheduled::Job) -> JobResult {
    thread_local! {
        static JOBS: std::cell::OnceCell<Jobs> = const { std::cell::OnceCell::new() };
    }
    let job = Job {
        schedule: job.schedule,
        due_ms: job.due_ms,
        id: job.id,
    };
    JOBS.with(|cell| cell.get_or_init(jobs).run(&job))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> Job {
        Job {
            schedule: name.into(),
            due_ms: 1,
            id: "0".into(),
        }
    }

    #[test]
    fn a_job_runs_by_its_schedule_name() {
        let jobs = Jobs::new()
            .on("a", |_| Ok(()))
            .on("b", |j| Err(format!("b failed at {}", j.due_ms)))
            .on("a", |_| Err("replaced".into()));
        assert_eq!(jobs.run(&job("a")), Err("replaced".into()));
        assert_eq!(jobs.run(&job("b")), Err("b failed at 1".into()));
        assert!(
            jobs.run(&job("c"))
                .unwrap_err()
                .contains("no job for schedule `c`")
        );
        assert_eq!(format!("{jobs:?}"), "[\"b\", \"a\"]");
    }
}
