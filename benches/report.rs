//! Writes the benchmark report: `target/bench-report/README.md` with SVG charts beside it,
//! from what the `micro` (criterion, `target/criterion`), `load`
//! (`target/bench-results/load.json`) and `kv` (`target/bench-results/kv.json`) benchmarks last
//! measured. `benches/report.sh` runs them all; this one alone re-renders the report from the
//! last results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The micro benchmarks: group, candidate, baseline, what the pair measures.
const MICRO: &[(&str, &str, &str, &str)] = &[
    (
        "parse",
        "ankh",
        "httparse",
        "request head: ankh's validated, owned parse vs bare httparse",
    ),
    (
        "encode",
        "ankh",
        "format",
        "response head + body: appends into a reused buffer vs format!",
    ),
    (
        "gzip",
        "ankh",
        "flate2-default",
        "4.6 KB JSON body: ankh's level vs flate2's default",
    ),
    (
        "plugin",
        "instantiate-pooling",
        "instantiate-on-demand",
        "a fresh instance: pooling allocator vs on demand",
    ),
];

fn main() {
    let root = benches::root();
    let out = root.join("target/bench-report");
    std::fs::create_dir_all(&out).unwrap();
    let mut md = String::new();
    writeln!(md, "# ankh benchmark report\n").unwrap();
    writeln!(
        md,
        "Every figure has its baseline beside it, measured in the same run on the same \
         machine; read the ratios, not the absolute numbers.\n"
    )
    .unwrap();

    match std::fs::read_to_string(root.join("target/bench-results/load.json")) {
        Ok(text) => load_section(&serde_json::from_str(&text).unwrap(), &out, &mut md),
        Err(_) => writeln!(
            md,
            "_No load results: run `cargo bench -p benches --bench load`._\n"
        )
        .unwrap(),
    }
    match std::fs::read_to_string(root.join("target/bench-results/kv.json")) {
        Ok(text) => kv_section(&serde_json::from_str(&text).unwrap(), &mut md),
        Err(_) => writeln!(
            md,
            "_No key-value results: run `cargo bench -p benches --bench kv`._\n"
        )
        .unwrap(),
    }
    match std::fs::read_to_string(root.join("target/bench-results/waits.json")) {
        Ok(text) => waits_section(&serde_json::from_str(&text).unwrap(), &mut md),
        Err(_) => writeln!(
            md,
            "_No results for suspended calls: run `cargo bench -p benches --bench waits`._\n"
        )
        .unwrap(),
    }
    match std::fs::read_to_string(root.join("target/bench-results/wasi_http.json")) {
        Ok(text) => wasi_http_section(&serde_json::from_str(&text).unwrap(), &mut md),
        Err(_) => writeln!(
            md,
            "_No wasi:http results: run `cargo bench -p benches --bench wasi_http`._\n"
        )
        .unwrap(),
    }
    micro_section(&root.join("target/criterion"), &out, &mut md);

    let path = out.join("README.md");
    std::fs::write(&path, md).unwrap();
    println!("wrote {}", path.display());
}

fn kv_section(doc: &Value, md: &mut String) {
    writeln!(md, "## The key-value store\n").unwrap();
    writeln!(
        md,
        "Machine: {}. `GET /incr` (one durable `kv::increment` per request), {} connections, \
         medians of alternating rounds of {} s.\n",
        doc["machine"].as_str().unwrap_or("?"),
        doc["connections"],
        doc["round_seconds"]
    )
    .unwrap();
    writeln!(
        md,
        "| store | req/s | p50 ms | p99 ms | writes per commit |\n|---|---|---|---|---|"
    )
    .unwrap();
    for run in doc["increment"].as_array().into_iter().flatten() {
        let group = run["writes_per_commit"]
            .as_f64()
            .filter(|g| g.is_finite())
            .map_or(String::new(), |g| format!("{g:.1}"));
        writeln!(
            md,
            "| {} | {:.0} | {:.2} | {:.2} | {group} |",
            run["backend"].as_str().unwrap_or("?"),
            run["rps"].as_f64().unwrap_or(f64::NAN),
            run["p50_ms"].as_f64().unwrap_or(f64::NAN),
            run["p99_ms"].as_f64().unwrap_or(f64::NAN),
        )
        .unwrap();
    }
    let restart = &doc["restart"];
    writeln!(
        md,
        "\nFile over memory: {:.2} at the defaults, {:.2} with 64 workers. Restart with {} keys \
         ({:.0} MiB): {:.0} ms to the first request after a clean stop, {:.0} ms after `kill -9`, \
         {:.0} ms with an empty store.\n",
        doc["file_over_memory"].as_f64().unwrap_or(f64::NAN),
        doc["file_over_memory_64_workers"]
            .as_f64()
            .unwrap_or(f64::NAN),
        restart["keys"],
        restart["db_mib"].as_f64().unwrap_or(f64::NAN),
        restart["clean_ms"].as_f64().unwrap_or(f64::NAN),
        restart["after_kill_ms"].as_f64().unwrap_or(f64::NAN),
        restart["empty_ms"].as_f64().unwrap_or(f64::NAN),
    )
    .unwrap();
}

fn waits_section(doc: &Value, md: &mut String) {
    let s = &doc["sleepers"];
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    writeln!(md, "## Suspended calls\n").unwrap();
    writeln!(
        md,
        "Machine: {}. {} clients each asking `/sleep?ms={}` at once: all in flight after \
         {:.2} s; resident memory {:.1} MiB before, {:.1} MiB with them: **{:.1} KiB per \
         suspended call**. Hello world meanwhile: at most {:.2} ms (idle: {:.2} ms).\n",
        doc["machine"].as_str().unwrap_or("?"),
        s["calls"],
        s["sleep_ms"],
        f(&s["all_in_flight_s"]),
        f(&s["rss_before_kib"]) / 1024.0,
        f(&s["rss_with_calls_kib"]) / 1024.0,
        f(&s["kib_per_suspended_call"]),
        f(&s["hello_max_ms_while_sleeping"]),
        f(&s["hello_max_ms_idle"]),
    )
    .unwrap();
    writeln!(
        md,
        "| path, 100 connections | req/s | server CPU per request |\n|---|---|---|"
    )
    .unwrap();
    for row in doc["suspend_resume"].as_array().into_iter().flatten() {
        writeln!(
            md,
            "| `{}` | {:.0} | {:.1} µs |",
            row["path"].as_str().unwrap_or("?"),
            f(&row["rps"]),
            f(&row["cpu_us_per_request"]),
        )
        .unwrap();
    }
    writeln!(md).unwrap();
}

fn wasi_http_section(doc: &Value, md: &mut String) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    writeln!(md, "## wasi:http components and outbound calls\n").unwrap();
    writeln!(
        md,
        "Machine: {}. wrk, 64 connections, median of {} alternating rounds of {} s.\n",
        doc["machine"].as_str().unwrap_or("?"),
        doc["rounds"],
        doc["round_seconds"],
    )
    .unwrap();
    writeln!(md, "| server | req/s | p50 | p99 |\n|---|---|---|---|").unwrap();
    for section in ["hello", "outbound"] {
        for row in doc[section].as_array().into_iter().flatten() {
            writeln!(
                md,
                "| {} | {:.0} | {:.2} ms | {:.2} ms |",
                row["name"].as_str().unwrap_or("?"),
                f(&row["rps"]),
                f(&row["p50_ms"]),
                f(&row["p99_ms"]),
            )
            .unwrap();
        }
    }
    writeln!(md).unwrap();
}

fn load_section(doc: &Value, out: &Path, md: &mut String) {
    writeln!(md, "## HTTP load\n").unwrap();
    writeln!(
        md,
        "Machine: {}. Generator: `{}`, keep-alive, best of {} rounds of {} s per server.\n",
        doc["machine"].as_str().unwrap_or("?"),
        doc["generator"].as_str().unwrap_or("wrk"),
        doc["rounds"],
        doc["round_seconds"]
    )
    .unwrap();
    writeln!(
        md,
        "| endpoint | connections | server | req/s | p50 ms | p90 ms | p99 ms | vs hyper, same threads | of ceiling |\n|---|---|---|---|---|---|---|---|---|"
    )
    .unwrap();
    let scenarios = doc["scenarios"].as_array().cloned().unwrap_or_default();
    for s in &scenarios {
        let runs = s["runs"].as_array().cloned().unwrap_or_default();
        let base = runs
            .get(1)
            .and_then(|r| r["rps"].as_f64())
            .unwrap_or(f64::NAN);
        for r in &runs {
            let rps = r["rps"].as_f64().unwrap_or(0.0);
            let ceiling = s["ceiling"]
                .as_f64()
                .map_or("".to_owned(), |c| format!("{:.1}%", 100.0 * rps / c));
            writeln!(
                md,
                "| `{}` | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                s["path"].as_str().unwrap_or("?"),
                s["connections"],
                r["server"].as_str().unwrap_or("?"),
                rps,
                r["p50_ms"].as_f64().unwrap_or(f64::NAN),
                r["p90_ms"].as_f64().unwrap_or(f64::NAN),
                r["p99_ms"].as_f64().unwrap_or(f64::NAN),
                rps / base,
                ceiling
            )
            .unwrap();
        }
    }
    writeln!(md).unwrap();
    // The ratios round by round (results written before they existed have none).
    for s in &scenarios {
        let r = &s["ratio_per_round"];
        let text = |k: &str| {
            format!(
                "{:.2} ({:.2}-{:.2})",
                r[k]["median"].as_f64().unwrap_or(f64::NAN),
                r[k]["min"].as_f64().unwrap_or(f64::NAN),
                r[k]["max"].as_f64().unwrap_or(f64::NAN)
            )
        };
        if r.is_object() {
            writeln!(
                md,
                "- `{}`, {} connections, ankh / hyper round by round, median (range): {} same threads, {} against its best",
                s["path"].as_str().unwrap_or("?"),
                s["connections"],
                text("same_threads"),
                text("best")
            )
            .unwrap();
        }
    }
    writeln!(md).unwrap();
    for s in &scenarios {
        let name = s["endpoint"].as_str().unwrap_or("?");
        let runs = s["runs"].as_array().cloned().unwrap_or_default();
        let file = format!("load-{}.svg", slug(name));
        let throughput: Vec<Bar> = runs
            .iter()
            .enumerate()
            .map(|(series, r)| Bar {
                series,
                label: r["server"].as_str().unwrap_or("?").to_owned(),
                value: r["rps"].as_f64().unwrap_or(0.0),
                text: format!("{:.0} req/s", r["rps"].as_f64().unwrap_or(0.0)),
            })
            .collect();
        let latency: Vec<Bar> = runs
            .iter()
            .enumerate()
            .flat_map(|(series, r)| {
                ["p50_ms", "p90_ms", "p99_ms"].map(|p| Bar {
                    series,
                    label: format!("{} {}", r["server"].as_str().unwrap_or("?"), &p[..3]),
                    value: r[p].as_f64().unwrap_or(0.0),
                    text: format!("{:.2} ms", r[p].as_f64().unwrap_or(0.0)),
                })
            })
            .collect();
        let svg = chart(
            &format!(
                "{} ({} connections): {}",
                s["path"].as_str().unwrap_or("?"),
                s["connections"],
                s["simulates"].as_str().unwrap_or("")
            ),
            &[("throughput", &throughput), ("latency", &latency)],
        );
        std::fs::write(out.join(&file), svg).unwrap();
        writeln!(md, "![{name}]({file})\n").unwrap();
    }
}

fn micro_section(criterion: &Path, out: &Path, md: &mut String) {
    writeln!(md, "## Micro benchmarks (criterion)\n").unwrap();
    writeln!(
        md,
        "| measures | candidate | baseline | candidate | baseline | ratio |\n|---|---|---|---|---|---|"
    )
    .unwrap();
    let mut bars = Vec::new();
    for &(group, candidate, baseline, what) in MICRO {
        let (Some(c), Some(b)) = (
            estimate(criterion, group, candidate),
            estimate(criterion, group, baseline),
        ) else {
            writeln!(md, "| {what} | _not measured_ | | | | |").unwrap();
            continue;
        };
        writeln!(
            md,
            "| {what} | `{group}/{candidate}` | `{group}/{baseline}` | {} | {} | {:.2} |",
            nanos(c),
            nanos(b),
            c / b
        )
        .unwrap();
        bars.push(Bar {
            series: 0,
            label: format!("{group}/{candidate}"),
            value: c / b,
            text: format!("{:.2} × ({} vs {})", c / b, nanos(c), nanos(b)),
        });
    }
    if let Some(call) = estimate(criterion, "plugin", "call-reused-instance") {
        writeln!(
            md,
            "\nOne `handle-request` call on a reused instance of the `bench` plugin: {}.",
            nanos(call)
        )
        .unwrap();
    }
    writeln!(md).unwrap();
    if !bars.is_empty() {
        let svg = chart(
            "time relative to the baseline (1.0 = as fast; lower is faster)",
            &[("ratio", &bars)],
        );
        std::fs::write(out.join("micro.svg"), svg).unwrap();
        writeln!(md, "![micro benchmarks](micro.svg)\n").unwrap();
    }
}

/// Criterion's mean estimate for `group/function`, in nanoseconds.
fn estimate(criterion: &Path, group: &str, function: &str) -> Option<f64> {
    let path: PathBuf = criterion
        .join(group)
        .join(function)
        .join("new/estimates.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn nanos(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

fn slug(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

struct Bar {
    label: String,
    value: f64,
    text: String,
    /// Picks the colour: the same server has the same colour in every panel.
    series: usize,
}

/// Horizontal bar charts stacked in one SVG, one panel per series, each scaled to its own
/// largest value.
fn chart(title: &str, panels: &[(&str, &[Bar])]) -> String {
    const WIDTH: f64 = 860.0;
    const LABEL: f64 = 230.0;
    const BAR_AREA: f64 = 440.0;
    const ROW: f64 = 22.0;
    const COLORS: [&str; 3] = ["#2f6fb0", "#d9822b", "#7a9e3b"];
    let height: f64 = 40.0
        + panels
            .iter()
            .map(|(_, bars)| 30.0 + ROW * bars.len() as f64)
            .sum::<f64>();
    let mut svg = String::new();
    writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
    )
    .unwrap();
    writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#fff"/><text x="10" y="22" font-size="14" font-weight="bold">{}</text>"##,
        escape(title)
    )
    .unwrap();
    let mut y = 40.0;
    for (name, bars) in panels {
        writeln!(
            svg,
            r##"<text x="10" y="{}" font-weight="bold" fill="#444">{}</text>"##,
            y + 16.0,
            escape(name)
        )
        .unwrap();
        y += 26.0;
        let max = bars.iter().map(|b| b.value).fold(0.0_f64, f64::max);
        for bar in bars.iter() {
            let w = if max > 0.0 {
                BAR_AREA * bar.value / max
            } else {
                0.0
            };
            let color = COLORS[bar.series % COLORS.len()];
            writeln!(
                svg,
                r##"<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{LABEL}" y="{}" width="{w:.1}" height="{}" fill="{color}"/><text x="{}" y="{}">{}</text>"##,
                LABEL - 8.0,
                y + 14.0,
                escape(&bar.label),
                y + 3.0,
                ROW - 6.0,
                LABEL + w + 6.0,
                y + 14.0,
                escape(&bar.text)
            )
            .unwrap();
            y += ROW;
        }
        y += 4.0;
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
