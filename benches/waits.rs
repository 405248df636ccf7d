//! Waits that hold no thread (`cargo bench -p benches --bench waits`, after `cargo build
//! --release -p ankh`):
//!
//! 1. **Memory per suspended call.** ankh at its defaults but for `--max-calls` four times
//!    the sleepers (one plugin may hold a quarter of the server's calls, `max_concurrency`)
//!    and a queue as deep as the burst; 2,000 clients each ask `/bench/sleep?ms=10000` at
//!    once. (10,000 until 2026-12-07: a plugin's share would then be 40,000 calls, more
//!    instance slots than the pooling allocator could reserve here, and on demand, instance
//!    10,000 did not get its mappings.) Once `/metrics` says all 2,000 calls
//!    are in flight (each suspended, holding an instance and a fiber stack), the server's
//!    resident memory is read and compared with what it held before; `/bench/` is asked ten
//!    times meanwhile (its latency, beside the same on the idle server). Then every client must
//!    get its answer. Where the memory went is read from `/proc/PID/smaps`: the growth of
//!    each mapping, largest first (the pooling allocator's reservations for linear memories
//!    and fiber stacks, the allocator's heap, ...).
//! 2. **Suspend and resume.** A call that sleeps 1 ms, 100 connections at once: the cost of a
//!    wait that suspends (req/s, and the server's CPU per request from `/proc`), against the
//!    same requests that do not sleep, in the same run.
//!
//! Results go to stdout and `target/bench-results/waits.json`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use benches::{Ankh, get, metric};
use serde_json::json;

const SLEEPERS: usize = 2_000;
const SLEEP_MS: u64 = 10_000;
/// Threads opening the sleepers' connections.
const OPENERS: usize = 8;

/// User plus system CPU time of the server, in seconds (clock ticks are 1/100 s on Linux).
fn cpu_secs(ankh: &Ankh) -> f64 {
    ankh.cpu_ticks() as f64 / 100.0
}

/// One request on a connection of its own; its latency.
fn timed_get(addr: SocketAddr, path: &str) -> Duration {
    let started = Instant::now();
    let body = get(addr, path);
    assert!(!body.is_empty());
    started.elapsed()
}

fn scrape(ankh: &Ankh, name: &str) -> f64 {
    metric(&get(ankh.admin_addr(), "/metrics"), name)
}

/// The live instances of all plugins.
fn instances(ankh: &Ankh) -> f64 {
    get(ankh.admin_addr(), "/metrics")
        .lines()
        .filter(|l| l.starts_with("ankh_plugin_instances{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A mapping of a process: its address range, resident KiB and what it maps.
struct Mapping {
    from: u64,
    to: u64,
    rss_kib: u64,
    name: String,
}

/// The mappings of process `pid`, from `/proc/PID/smaps`.
fn mappings(pid: u32) -> Vec<Mapping> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if let Some((from, to)) = first.split_once('-')
            && let (Ok(from), Ok(to)) = (u64::from_str_radix(from, 16), u64::from_str_radix(to, 16))
        {
            let name = words.nth(4).unwrap_or("[anonymous]").to_owned();
            out.push(Mapping {
                from,
                to,
                rss_kib: 0,
                name,
            });
        } else if first == "Rss:"
            && let (Some(last), Some(kib)) = (out.last_mut(), words.next())
        {
            last.rss_kib = kib.parse().unwrap_or(0);
        }
    }
    out
}

/// Where resident memory grew from `before` to `after`, in KiB per call, largest first. A
/// mapping of `after` counts toward the mapping of `before` it lies in (the pooling
/// allocator's reservations are split into many once slots are made accessible), or
/// toward its own name if it is new.
fn growth(before: &[Mapping], after: &[Mapping], calls: usize) -> Vec<(String, f64)> {
    let describe = |m: &Mapping| {
        let kib = (m.to - m.from) / 1024;
        if kib >= 1 << 20 {
            format!("{} ({:.1} GiB)", m.name, kib as f64 / (1 << 20) as f64)
        } else {
            format!("{} ({:.1} MiB)", m.name, kib as f64 / 1024.0)
        }
    };
    let mut grown: Vec<(String, f64)> = Vec::new();
    let mut add = |key: String, kib: f64| match grown.iter_mut().find(|(k, _)| *k == key) {
        Some(entry) => entry.1 += kib,
        None => grown.push((key, kib)),
    };
    for b in before {
        add(describe(b), -(b.rss_kib as f64));
    }
    // smaps lists mappings by address: the one `a` may lie in is the last that starts at or
    // before it (there are tens of thousands with the calls in flight).
    for a in after {
        let key = before[..before.partition_point(|b| b.from <= a.from)]
            .last()
            .filter(|b| a.from < b.to)
            .map_or_else(|| format!("new: {}", a.name), describe);
        add(key, a.rss_kib as f64);
    }
    for entry in &mut grown {
        entry.1 /= calls as f64;
    }
    grown.sort_by(|a, b| b.1.total_cmp(&a.1));
    grown.truncate(6);
    grown
}

fn sleepers(plugin: &std::path::Path) -> serde_json::Value {
    let ankh = benches::start_ankh(
        plugin,
        "index.wasm",
        &[
            // Room for the sleepers, and for the requests asked while they sleep.
            // One plugin holds at most a quarter of them (its `max_concurrency`).
            "--max-calls",
            &(4 * (SLEEPERS + 64)).to_string(),
            // The burst arrives faster than calls start: room to queue it rather than 503.
            "--queue-depth",
            &SLEEPERS.to_string(),
            "--max-connections",
            "20000",
            "--admin",
            "127.0.0.1:0",
        ],
    );
    let addr = ankh.addr;
    // Warm: an instance, the caches, the allocator.
    let idle: Vec<Duration> = (0..10).map(|_| timed_get(addr, "/")).collect();
    let base = ankh.rss_kib();
    let maps_before = mappings(ankh.pid());
    let started = Instant::now();
    let openers: Vec<_> = (0..OPENERS)
        .map(|_| {
            std::thread::spawn(move || {
                (0..SLEEPERS / OPENERS)
                    .map(|_| {
                        let mut c = TcpStream::connect(addr).unwrap();
                        write!(c, "GET /sleep?ms={SLEEP_MS} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
                        c
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let clients: Vec<TcpStream> = openers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    // Every call started, and each has its instance.
    while scrape(&ankh, "ankh_calls_in_flight") < SLEEPERS as f64
        || instances(&ankh) < SLEEPERS as f64
    {
        assert!(
            started.elapsed() < Duration::from_millis(SLEEP_MS),
            "not all {SLEEPERS} calls were in flight before the first woke: {} in flight, {} instances",
            scrape(&ankh, "ankh_calls_in_flight"),
            instances(&ankh)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let all_in = started.elapsed();
    let full = ankh.rss_kib();
    let maps_full = mappings(ankh.pid());
    let instances = instances(&ankh);
    let busy: Vec<Duration> = (0..10).map(|_| timed_get(addr, "/")).collect();
    // Compared once the timed requests are done, so that they are asked while the calls sleep.
    let grown = growth(&maps_before, &maps_full, SLEEPERS);
    let mut ok = 0;
    for c in clients {
        let mut line = String::new();
        BufReader::new(c).read_line(&mut line).unwrap();
        ok += usize::from(line.starts_with("HTTP/1.1 200"));
    }
    let per_call = (full.saturating_sub(base)) as f64 / SLEEPERS as f64;
    let max_ms = |xs: &[Duration]| xs.iter().max().unwrap().as_secs_f64() * 1e3;
    println!(
        "{SLEEPERS} sleeping calls: all in flight after {:.2} s; RSS {:.1} MiB before, {:.1} MiB with them: {per_call:.1} KiB per suspended call ({instances} instances); {ok} answered 200",
        all_in.as_secs_f64(),
        base as f64 / 1024.0,
        full as f64 / 1024.0,
    );
    for (mapping, kib) in &grown {
        println!("  {kib:6.1} KiB per call: {mapping}");
    }
    println!(
        "hello while they sleep: at most {:.2} ms (idle server: at most {:.2} ms)",
        max_ms(&busy),
        max_ms(&idle)
    );
    assert_eq!(ok, SLEEPERS, "every sleeper is answered");
    json!({
        "calls": SLEEPERS,
        "sleep_ms": SLEEP_MS,
        "all_in_flight_s": all_in.as_secs_f64(),
        "rss_before_kib": base,
        "rss_with_calls_kib": full,
        "kib_per_suspended_call": per_call,
        "kib_per_call_by_mapping": grown,
        "hello_max_ms_while_sleeping": max_ms(&busy),
        "hello_max_ms_idle": max_ms(&idle),
    })
}

/// req/s and the server's CPU per request for `path`, 100 connections, `secs` seconds.
fn load(ankh: &Ankh, path: &str, secs: u64) -> (f64, f64) {
    let url = format!("http://{}{path}", ankh.addr);
    benches::wrk(&url, 100, Duration::from_secs(1));
    let before = cpu_secs(ankh);
    let run = benches::wrk(&url, 100, Duration::from_secs(secs));
    let used = cpu_secs(ankh) - before;
    (run.rps, used / (run.rps * secs as f64) * 1e6)
}

fn main() {
    let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(1024);
    assert!(
        limit as usize > SLEEPERS + 100,
        "a file descriptor limit of {limit} is too low for {SLEEPERS} connections"
    );
    let plugin = std::path::Path::new(ankh_test_support::harness::plugins::BENCH);
    let memory = sleepers(plugin);

    let ankh = benches::start_ankh(plugin, "index.wasm", &[]);
    let mut rows = Vec::new();
    for round in 0..3 {
        for path in ["/", "/sleep?ms=1"] {
            let (rps, cpu_us) = load(&ankh, path, 3);
            rows.push((round, path, rps, cpu_us));
        }
    }
    let median = |path: &str, pick: fn(&(usize, &str, f64, f64)) -> f64| {
        let mut xs: Vec<f64> = rows.iter().filter(|r| r.1 == path).map(pick).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let mut out = Vec::new();
    for path in ["/", "/sleep?ms=1"] {
        let (rps, cpu) = (median(path, |r| r.2), median(path, |r| r.3));
        println!(
            "{path:<12} 100 connections: {rps:>9.0} req/s, {cpu:6.1} µs of server CPU per request (median of 3)"
        );
        out.push(json!({"path": path, "rps": rps, "cpu_us_per_request": cpu}));
    }
    let doc = json!({
        "machine": benches::machine(),
        "sleepers": memory,
        "suspend_resume": out,
    });
    benches::write_results("waits.json", &doc);
}
