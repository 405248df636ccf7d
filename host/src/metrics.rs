//! Counters for `/metrics`, in the Prometheus text format.
//!
//! Everything is an atomic updated where the event happens. Per-plugin figures are kept by
//! plugin name, so they carry across reloads; scraping reads them without locks on the
//! request path.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// Upper bounds of the request-latency histogram, in seconds.
const LATENCY_BUCKETS_SECS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

/// A family of figures: name, help, type, and how to read one of `T` (a plugin's figures, or
/// one origin's of a plugin).
type Family<T = PluginMetrics> = (&'static str, &'static str, &'static str, fn(&T) -> String);

/// Server-wide figures, and the per-plugin ones by name.
#[derive(Debug, Default)]
pub struct Metrics {
    pub connections_open: AtomicI64,
    pub connections_total: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Plugin calls started and not finished: running, or suspended in a wait.
    pub calls_in_flight: AtomicI64,
    /// WebSocket messages the server compressed (a publish counts once).
    ws_deflated: AtomicU64,
    /// Compressed WebSocket messages from clients, inflated.
    ws_inflated: AtomicU64,
    /// Compressed WebSocket frames sent (a publish counts once per subscriber).
    ws_compressed_frames: AtomicU64,
    plugins: Mutex<BTreeMap<String, Arc<PluginMetrics>>>,
    /// Each event loop's figures, once the loops exist.
    io_loops: OnceLock<Box<[IoLoop]>>,
    /// The key-value store's counters, once a store is attached.
    kv: Mutex<Option<Arc<crate::kv::Stats>>>,
}

/// One event loop's figures.
#[derive(Debug, Default)]
pub(crate) struct IoLoop {
    /// Connections this loop owns (counted from the moment loop 0 hands one over).
    connections: AtomicI64,
    /// Time spent handling readiness, replies and timers, rather than waiting in `poll`.
    busy_ns: AtomicU64,
    /// Plugin calls this loop started itself rather than queueing them for the workers.
    calls_started: AtomicU64,
    /// Of those, the calls still computing at an epoch tick, moved to the workers.
    calls_handed_on: AtomicU64,
}

impl IoLoop {
    pub(crate) fn opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn open(&self) -> i64 {
        self.connections.load(Ordering::Relaxed)
    }

    pub(crate) fn call_started(&self) {
        self.calls_started.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn call_handed_on(&self) {
        self.calls_handed_on.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn busy(&self, spent: Duration) {
        self.busy_ns
            .fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// One plugin's figures, across its versions.
#[derive(Debug, Default)]
pub struct PluginMetrics {
    /// Responses by status class: 1xx to 5xx.
    responses: [AtomicU64; 5],
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_SECS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    pub traps: AtomicU64,
    pub deadline_hits: AtomicU64,
    /// Calls stopped at their wall-clock deadline.
    pub timeouts: AtomicU64,
    /// Calls dropped or stopped because their client disconnected.
    pub cancellations: AtomicU64,
    pub memory_high_water_bytes: AtomicU64,
    /// Linear memory of this plugin's live instances, together.
    pub instance_memory_bytes: AtomicI64,
    /// Instances replaced because their memory grew past `recycle_growth_mib`.
    pub memory_recycles: AtomicU64,
    pub live_instances: AtomicI64,
    /// Instances made since start (for a request, an event, or a WASI 0.3 component's
    /// requests).
    pub instances_created: AtomicU64,
    /// Outbound HTTP requests by origin (`scheme://host:port`; at most
    /// [`OUTBOUND_ORIGINS_COUNTED`](crate::limits::OUTBOUND_ORIGINS_COUNTED), then `other`).
    outbound: Mutex<BTreeMap<String, OriginStats>>,
    /// Runs of its schedules, by schedule name.
    schedules: Mutex<BTreeMap<String, ScheduleStats>>,
    /// Instances kept between calls.
    pub idle_instances: AtomicI64,
    /// Calls started and not finished: running, or suspended in a wait.
    pub calls_in_flight: AtomicI64,
    pub reloads: AtomicU64,
    /// Log lines dropped over [`GUEST_LOG_LINES_PER_SECOND`](crate::limits::GUEST_LOG_LINES_PER_SECOND).
    pub log_lines_dropped: AtomicU64,
    /// Streamed responses whose body has not ended.
    pub streams_open: AtomicI64,
    /// Bytes of streamed bodies sent (framing and coding included).
    pub streamed_bytes: AtomicU64,
    /// Bytes of its streamed responses the host holds: handed over, not yet written.
    pub stream_held_bytes: Arc<AtomicI64>,
    /// Streamed responses that did not reach their end.
    pub streams_unfinished: AtomicU64,
    /// CPU time its calls used, and its policy's cap on it.
    pub cpu: CpuMeter,
    /// Requests refused and job ticks skipped while its CPU allowance was spent.
    pub cpu_throttled: AtomicU64,
}

/// CPU time of one plugin's calls, measured on the threads that run them (each thread's own
/// CPU clock, read once per round of calls and shared by their wall time: see `pool::cpu`),
/// and the policy's
/// cap on it, `limits.cpu_ms_per_minute`: a bucket that holds a minute's allowance, is
/// charged what each call used, and refills at the allowance's rate. While it is empty the
/// plugin's requests get 503 with the seconds until it is not.
#[derive(Debug, Default)]
pub struct CpuMeter {
    used_ns: AtomicU64,
    cap: Mutex<Option<CpuBucket>>,
}

#[derive(Debug)]
struct CpuBucket {
    per_minute: Duration,
    /// Nanoseconds left; below zero once a call used more than was left.
    left_ns: i128,
    at: std::time::Instant,
}

impl CpuBucket {
    fn refill(&mut self, now: std::time::Instant) {
        let full = self.per_minute.as_nanos() as i128;
        let earned = now.duration_since(self.at).as_nanos() as i128 * full / 60_000_000_000;
        self.left_ns = (self.left_ns + earned).min(full);
        self.at = now;
    }
}

impl CpuMeter {
    /// A call ran for `cpu` of its thread's CPU time.
    pub(crate) fn charge(&self, cpu: Duration) {
        let ns = cpu.as_nanos() as u64;
        self.used_ns.fetch_add(ns, Ordering::Relaxed);
        if let Some(bucket) = self
            .cap
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            bucket.left_ns -= i128::from(ns);
        }
    }

    /// CPU time used since start.
    pub fn used(&self) -> Duration {
        Duration::from_nanos(self.used_ns.load(Ordering::Relaxed))
    }

    /// Sets the cap (a new version's policy); an unchanged cap keeps what is left of it.
    pub(crate) fn set_cap(&self, per_minute: Option<Duration>) {
        let mut cap = self.cap.lock().unwrap_or_else(PoisonError::into_inner);
        match (cap.as_mut(), per_minute) {
            (Some(bucket), Some(per_minute)) if bucket.per_minute == per_minute => {}
            (_, Some(per_minute)) => {
                *cap = Some(CpuBucket {
                    per_minute,
                    left_ns: per_minute.as_nanos() as i128,
                    at: std::time::Instant::now(),
                })
            }
            (_, None) => *cap = None,
        }
    }

    /// `None` while the plugin may run; else the whole seconds until its allowance is back
    /// above zero (at least 1).
    pub(crate) fn exhausted(&self) -> Option<u32> {
        let mut cap = self.cap.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = cap.as_mut()?;
        bucket.refill(std::time::Instant::now());
        if bucket.left_ns > 0 {
            return None;
        }
        let rate = bucket.per_minute.as_nanos().max(1) as i128;
        let wait_ns = (1 - bucket.left_ns) * 60_000_000_000 / rate;
        Some(
            u32::try_from((wait_ns + 999_999_999) / 1_000_000_000)
                .unwrap_or(u32::MAX)
                .max(1),
        )
    }
}

/// Outbound requests to one origin.
#[derive(Debug, Default, Clone, Copy)]
struct OriginStats {
    requests: u64,
    errors: u64,
    duration_us: u64,
}

/// The runs of one schedule.
#[derive(Debug, Default, Clone, Copy)]
struct ScheduleStats {
    runs: u64,
    failures: u64,
    skips: u64,
    duration_us: u64,
}

/// What became of one tick of a schedule, for its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tick {
    /// It ran for this long; `ok`: the job said it succeeded.
    Ran { took: Duration, ok: bool },
    /// It did not run here or anywhere: a run was still going, the plugin or the queue was
    /// full, the store could not be asked, or the server stopped first.
    Skipped,
}

impl PluginMetrics {
    /// The seconds until the plugin's CPU allowance refills, when it is spent: the call
    /// asked for is refused, and counted as throttled.
    pub(crate) fn cpu_throttle(&self) -> Option<u32> {
        let seconds = self.cpu.exhausted()?;
        self.cpu_throttled.fetch_add(1, Ordering::Relaxed);
        Some(seconds)
    }

    /// A tick of schedule `name` ran or was skipped. Schedules are declared (at most
    /// [`SCHEDULES_PER_PLUGIN`](crate::limits::SCHEDULES_PER_PLUGIN) a version), so the
    /// names are bounded by the policies a plugin was loaded with.
    pub(crate) fn schedule(&self, name: &str, tick: Tick) {
        let mut map = self
            .schedules
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let stats = map.entry(name.to_owned()).or_default();
        match tick {
            Tick::Ran { took, ok } => {
                stats.runs += 1;
                stats.failures += u64::from(!ok);
                stats.duration_us += took.as_micros() as u64;
            }
            Tick::Skipped => stats.skips += 1,
        }
    }

    /// Schedule `name` exists: its counters are shown, at zero, before its first tick.
    pub(crate) fn schedule_declared(&self, name: &str) {
        let mut map = self
            .schedules
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(name.to_owned()).or_default();
    }

    /// An outbound request to `origin` ended (`ok`: a response head arrived) after `took`.
    pub(crate) fn outbound(&self, origin: &str, took: Duration, ok: bool) {
        let mut map = self.outbound.lock().unwrap_or_else(PoisonError::into_inner);
        let key = if map.contains_key(origin) || map.len() < crate::limits::OUTBOUND_ORIGINS_COUNTED
        {
            origin
        } else {
            "other"
        };
        let stats = map.entry(key.to_owned()).or_default();
        stats.requests += 1;
        stats.errors += u64::from(!ok);
        stats.duration_us += took.as_micros() as u64;
    }

    /// A response went out, `elapsed` after its request was complete.
    pub(crate) fn response(&self, status: u16, elapsed: Duration) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[class].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        for (bound, bucket) in LATENCY_BUCKETS_SECS.iter().zip(&self.latency_buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// An instance asked for `bytes` of linear memory.
    pub(crate) fn memory(&self, bytes: usize) {
        self.memory_high_water_bytes
            .fetch_max(bytes as u64, Ordering::Relaxed);
    }
}

impl Metrics {
    /// Keeps figures for `loops` event loops (once; later calls change nothing).
    pub(crate) fn set_io_loops(&self, loops: usize) {
        let _ = self
            .io_loops
            .set((0..loops.max(1)).map(|_| IoLoop::default()).collect());
    }

    /// The figures of event loop `shard`.
    pub(crate) fn io_loop(&self, shard: usize) -> &IoLoop {
        static UNCOUNTED: IoLoop = IoLoop {
            connections: AtomicI64::new(0),
            busy_ns: AtomicU64::new(0),
            calls_started: AtomicU64::new(0),
            calls_handed_on: AtomicU64::new(0),
        };
        self.io_loops
            .get()
            .and_then(|loops| loops.get(shard))
            .unwrap_or(&UNCOUNTED)
    }

    /// Shows the key-value store's counters too.
    pub(crate) fn attach_kv(&self, stats: Arc<crate::kv::Stats>) {
        *self.kv.lock().unwrap_or_else(PoisonError::into_inner) = Some(stats);
    }

    /// The figures of plugin `name`, created on first use.
    pub(crate) fn plugin(&self, name: &str) -> Arc<PluginMetrics> {
        let mut plugins = self.plugins.lock().unwrap_or_else(PoisonError::into_inner);
        plugins.entry(name.to_owned()).or_default().clone()
    }

    /// What permessage-deflate did since last reported.
    pub(crate) fn ws_deflate(&self, deflated: u64, inflated: u64, compressed_frames: u64) {
        self.ws_deflated.fetch_add(deflated, Ordering::Relaxed);
        self.ws_inflated.fetch_add(inflated, Ordering::Relaxed);
        self.ws_compressed_frames
            .fetch_add(compressed_frames, Ordering::Relaxed);
    }

    /// The exposition text. `websockets` and `queued` are read by the caller at scrape time.
    pub(crate) fn render(&self, websockets: usize, queued: usize) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        gauge(
            "ankh_connections_open",
            "Open client connections.",
            "gauge",
            self.connections_open.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "ankh_connections_total",
            "Client connections accepted.",
            "counter",
            self.connections_total.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "ankh_websockets_open",
            "Open WebSocket connections.",
            "gauge",
            websockets.to_string(),
        );
        gauge(
            "ankh_queue_depth",
            "Requests waiting for a worker.",
            "gauge",
            queued.to_string(),
        );
        gauge(
            "ankh_calls_in_flight",
            "Plugin calls started and not finished: running, or waiting without holding a thread.",
            "gauge",
            self.calls_in_flight.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "ankh_bytes_in_total",
            "Bytes read from clients.",
            "counter",
            self.bytes_in.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "ankh_bytes_out_total",
            "Bytes written to clients.",
            "counter",
            self.bytes_out.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "ankh_ws_messages_deflated_total",
            "WebSocket messages compressed by the server (a publish to many subscribers counts once).",
            "counter",
            self.ws_deflated.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "ankh_ws_compressed_frames_total",
            "Compressed WebSocket frames sent (a publish counts once per subscriber).",
            "counter",
            self.ws_compressed_frames
                .load(Ordering::Relaxed)
                .to_string(),
        );
        gauge(
            "ankh_ws_messages_inflated_total",
            "Compressed WebSocket messages received and inflated.",
            "counter",
            self.ws_inflated.load(Ordering::Relaxed).to_string(),
        );
        let kv = self
            .kv
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(kv) = kv {
            gauge(
                "ankh_kv_writes_total",
                "Key-value writes applied (a batch counts once).",
                "counter",
                kv.writes.load(Ordering::Relaxed).to_string(),
            );
            gauge(
                "ankh_kv_commits_total",
                "Key-value transactions committed to disk; writes / commits is the mean group commit.",
                "counter",
                kv.commits.load(Ordering::Relaxed).to_string(),
            );
            gauge(
                "ankh_kv_unavailable_total",
                "Key-value calls answered unavailable (the store could not be read or written).",
                "counter",
                kv.unavailable.load(Ordering::Relaxed).to_string(),
            );
        }
        if let Some(traces) = crate::trace::stats() {
            gauge(
                "ankh_trace_spans_exported_total",
                "Spans the OTLP collector took.",
                "counter",
                traces.exported.load(Ordering::Relaxed).to_string(),
            );
            gauge(
                "ankh_trace_spans_dropped_total",
                "Spans dropped: the exporter's queue was full, or their batch could not be sent.",
                "counter",
                traces.dropped.load(Ordering::Relaxed).to_string(),
            );
            gauge(
                "ankh_trace_export_failures_total",
                "Batches of spans the collector did not take (refused, unreachable, too slow).",
                "counter",
                traces.failed_batches.load(Ordering::Relaxed).to_string(),
            );
        }

        let family = |out: &mut String, name: &str, help: &str, kind: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        if let Some(loops) = self.io_loops.get() {
            // One family with a sample per loop.
            let per_loop = |out: &mut String,
                            name: &str,
                            help: &str,
                            kind: &str,
                            value: &dyn Fn(&IoLoop) -> String| {
                family(out, name, help, kind);
                for (shard, l) in loops.iter().enumerate() {
                    let _ = writeln!(out, "{name}{{loop=\"{shard}\"}} {}", value(l));
                }
            };
            per_loop(
                &mut out,
                "ankh_io_loop_connections",
                "Open client connections by event loop.",
                "gauge",
                &|l| l.open().to_string(),
            );
            per_loop(
                &mut out,
                "ankh_io_loop_busy_seconds_total",
                "Time each event loop spent working rather than waiting for readiness.",
                "counter",
                &|l| format!("{:.6}", l.busy_ns.load(Ordering::Relaxed) as f64 / 1e9),
            );
            per_loop(
                &mut out,
                "ankh_io_loop_calls_started_total",
                "Plugin calls each event loop started itself rather than queueing them for the workers.",
                "counter",
                &|l| l.calls_started.load(Ordering::Relaxed).to_string(),
            );
            per_loop(
                &mut out,
                "ankh_io_loop_calls_handed_on_total",
                "Calls an event loop started that were still computing at an epoch tick, and moved to the workers.",
                "counter",
                &|l| l.calls_handed_on.load(Ordering::Relaxed).to_string(),
            );
        }

        let plugins = self.plugins.lock().unwrap_or_else(PoisonError::into_inner);
        family(
            &mut out,
            "ankh_plugin_responses_total",
            "Responses by plugin and status class.",
            "counter",
        );
        for (plugin, m) in plugins.iter() {
            for (i, count) in m.responses.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "ankh_plugin_responses_total{{plugin=\"{plugin}\",class=\"{}xx\"}} {}",
                    i + 1,
                    count.load(Ordering::Relaxed)
                );
            }
        }
        family(
            &mut out,
            "ankh_plugin_request_duration_seconds",
            "Time from a complete request to its response.",
            "histogram",
        );
        for (plugin, m) in plugins.iter() {
            for (bound, bucket) in LATENCY_BUCKETS_SECS.iter().zip(&m.latency_buckets) {
                let _ = writeln!(
                    out,
                    "ankh_plugin_request_duration_seconds_bucket{{plugin=\"{plugin}\",le=\"{bound}\"}} {}",
                    bucket.load(Ordering::Relaxed)
                );
            }
            let count = m.latency_count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "ankh_plugin_request_duration_seconds_bucket{{plugin=\"{plugin}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                out,
                "ankh_plugin_request_duration_seconds_sum{{plugin=\"{plugin}\"}} {}",
                m.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "ankh_plugin_request_duration_seconds_count{{plugin=\"{plugin}\"}} {count}"
            );
        }
        let per_plugin: [Family; 19] = [
            (
                "ankh_plugin_traps_total",
                "Calls that trapped.",
                "counter",
                |m| m.traps.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_log_lines_dropped_total",
                "Log lines dropped over the plugin's rate of lines a second.",
                "counter",
                |m| m.log_lines_dropped.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_deadline_hits_total",
                "Calls stopped at their CPU deadline.",
                "counter",
                |m| m.deadline_hits.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_timeouts_total",
                "Calls stopped at their wall-clock deadline (handler timeout).",
                "counter",
                |m| m.timeouts.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_cancellations_total",
                "Requests dropped or stopped because their client disconnected.",
                "counter",
                |m| m.cancellations.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_memory_high_water_bytes",
                "Largest linear memory an instance asked for.",
                "gauge",
                |m| {
                    m.memory_high_water_bytes
                        .load(Ordering::Relaxed)
                        .to_string()
                },
            ),
            ("ankh_plugin_instances", "Live instances.", "gauge", |m| {
                m.live_instances.load(Ordering::Relaxed).to_string()
            }),
            (
                "ankh_plugin_instances_created_total",
                "Instances made since start.",
                "counter",
                |m| m.instances_created.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_instances_idle",
                "Instances kept between calls (instances.max_idle).",
                "gauge",
                |m| m.idle_instances.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_calls_in_flight",
                "Calls started and not finished: running, or waiting without holding a thread.",
                "gauge",
                |m| m.calls_in_flight.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_instance_memory_bytes",
                "Linear memory of the plugin's live instances, together.",
                "gauge",
                |m| m.instance_memory_bytes.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_memory_recycles_total",
                "Instances replaced after a call because their memory grew past recycle_growth_mib.",
                "counter",
                |m| m.memory_recycles.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_streams_open",
                "Streamed responses whose body has not ended.",
                "gauge",
                |m| m.streams_open.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_stream_buffered_bytes",
                "Bytes of streamed response bodies the host holds: handed over by the plugin, not yet written to their clients.",
                "gauge",
                |m| m.stream_held_bytes.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_streamed_bytes_total",
                "Bytes of streamed response bodies handed to the connection (framing and coding included).",
                "counter",
                |m| m.streamed_bytes.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_streams_unfinished_total",
                "Streamed responses that did not reach their end: the client left, a stream time limit passed, or the handler failed or broke the body's framing.",
                "counter",
                |m| m.streams_unfinished.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_cpu_seconds_total",
                "CPU time the plugin's calls used, measured on the threads that ran them (WASI 0.3 components' instances are not counted).",
                "counter",
                |m| format!("{:.6}", m.cpu.used().as_secs_f64()),
            ),
            (
                "ankh_plugin_cpu_throttled_total",
                "Requests answered 503 because the plugin had used its CPU allowance (limits.cpu_ms_per_minute).",
                "counter",
                |m| m.cpu_throttled.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ankh_plugin_reloads_total",
                "Times a new version replaced the running one.",
                "counter",
                |m| m.reloads.load(Ordering::Relaxed).to_string(),
            ),
        ];
        let outbound: [Family<OriginStats>; 3] = [
            (
                "ankh_outbound_requests_total",
                "Outbound HTTP requests by plugin and origin.",
                "counter",
                |o| o.requests.to_string(),
            ),
            (
                "ankh_outbound_errors_total",
                "Outbound HTTP requests that got no response (refused, timed out, failed).",
                "counter",
                |o| o.errors.to_string(),
            ),
            (
                "ankh_outbound_request_duration_seconds_total",
                "Time outbound HTTP requests took until their response head, together.",
                "counter",
                |o| (o.duration_us as f64 / 1e6).to_string(),
            ),
        ];
        let schedules: [Family<ScheduleStats>; 4] = [
            (
                "ankh_schedule_runs_total",
                "Runs of a plugin's schedule in this process (a tick runs in one process of those sharing a store).",
                "counter",
                |s| s.runs.to_string(),
            ),
            (
                "ankh_schedule_failures_total",
                "Runs that failed: the job returned an error, trapped or ran out of time.",
                "counter",
                |s| s.failures.to_string(),
            ),
            (
                "ankh_schedule_skips_total",
                "Ticks not run: the previous run was still going (overlap), the plugin or the queue was full, or the store could not be asked.",
                "counter",
                |s| s.skips.to_string(),
            ),
            (
                "ankh_schedule_run_seconds_total",
                "Time the runs took, together.",
                "counter",
                |s| (s.duration_us as f64 / 1e6).to_string(),
            ),
        ];
        let plugins = &*plugins;
        by_key(&mut out, plugins, "schedule", &schedules, |m| &m.schedules);
        by_key(&mut out, plugins, "origin", &outbound, |m| &m.outbound);
        for (name, help, kind, value) in per_plugin {
            family(&mut out, name, help, kind);
            for (plugin, m) in plugins.iter() {
                let _ = writeln!(out, "{name}{{plugin=\"{plugin}\"}} {}", value(m));
            }
        }
        out
    }
}

/// Families whose samples are labelled by plugin and by a key of a per-plugin map (an
/// outbound origin, a schedule): one sample per plugin and key, the key escaped for the
/// label.
fn by_key<T>(
    out: &mut String,
    plugins: &BTreeMap<String, Arc<PluginMetrics>>,
    label: &str,
    families: &[Family<T>],
    map: impl Fn(&PluginMetrics) -> &Mutex<BTreeMap<String, T>>,
) {
    for (name, help, kind, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (plugin, m) in plugins {
            let entries = map(m).lock().unwrap_or_else(PoisonError::into_inner);
            for (key, stats) in entries.iter() {
                let _ = writeln!(
                    out,
                    "{name}{{plugin=\"{plugin}\",{label}=\"{}\"}} {}",
                    key.replace('\\', "\\\\").replace('"', "\\\""),
                    value(stats)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        let p = m.plugin("hello");
        p.response(200, Duration::from_millis(3));
        p.response(503, Duration::from_secs(5));
        let text = m.render(2, 1);
        assert!(text.contains("ankh_plugin_responses_total{plugin=\"hello\",class=\"2xx\"} 1"));
        assert!(text.contains("ankh_plugin_responses_total{plugin=\"hello\",class=\"5xx\"} 1"));
        assert!(text.contains(
            "ankh_plugin_request_duration_seconds_bucket{plugin=\"hello\",le=\"0.005\"} 1"
        ));
        assert!(text.contains(
            "ankh_plugin_request_duration_seconds_bucket{plugin=\"hello\",le=\"+Inf\"} 2"
        ));
        assert!(text.contains("ankh_websockets_open 2"));
        assert!(text.contains("ankh_queue_depth 1"));
    }
}
