//! Scheduled jobs for the scheduler's tests: each run leaves its trace in the plugin's
//! key-value store, which a route reads back.
//!
//! Jobs (the policy declares the schedules; each name maps to one of these):
//! - `count`, `count-*`: counts the run in `runs` and in `tick:DUE_MS` (so a tick run twice
//!   shows as 2), then sleeps `sleep_ms` (a configuration value, default 0)
//! - `fail`: fails with a message that holds the value `token` (a secret, masked by the host)
//! - `trap`: panics
//! - `burn`: computes for `burn_ms` (a configuration value, default 100) of its clock
//! - `forge`: fails with a message that forges a log line after a newline, holds a terminal
//!   escape, and runs on for 100,000 bytes
//!
//! Routes:
//! - `GET /jobsprobe/ticks` → `DUE COUNT` lines for every tick that ran, sorted, then
//!   `runs N`

use ankh_guest::prelude::*;

fn count(job: &schedule::Job) -> schedule::JobResult {
    let err = |e: kv::KvError| e.to_string();
    kv::increment("runs", 1).map_err(err)?;
    kv::increment(&format!("tick:{:016}", job.due_ms), 1).map_err(err)?;
    let sleep_ms: u64 = config::get("sleep_ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if sleep_ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(sleep_ms));
    }
    Ok(())
}

fn jobs() -> schedule::Jobs {
    schedule::Jobs::new()
        .on("count", count)
        .on("count-b", count)
        .on("fail", |_job| {
            Err(format!(
                "the API said no to token {}",
                config::get("token").unwrap_or_default()
            ))
        })
        .on("trap", |_job| panic!("a job that traps"))
        .on("burn", |_job| {
            let ms: u64 = config::get("burn_ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(100);
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < std::time::Duration::from_millis(ms) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            Ok(())
        })
        .on("forge", |_job| {
            Err(format!(
                "quiet\n2026-12-06T00:00:00.000000Z  INFO ankh::access: GET /forged 200 \x1b[2J{}",
                "y".repeat(100_000)
            ))
        })
}

fn ticks(_req: &Request) -> Result<Response, String> {
    let mut out = String::new();
    for key in kv::list_keys("tick:") {
        let key = key.map_err(|e| e.to_string())?;
        let n = kv::get_string(&key)
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        let due = key.trim_start_matches("tick:").trim_start_matches('0');
        out.push_str(&format!("{due} {n}\n"));
    }
    let runs = kv::get_string("runs")
        .map_err(|e| e.to_string())?
        .unwrap_or_else(|| "0".into());
    out.push_str(&format!("runs {runs}\n"));
    Ok(Response::text(out))
}

fn router() -> Router {
    Router::new().get("/ticks", ticks)
}

ankh_guest::export_plugin!(router, jobs = jobs);
