//! The admin listener: health, readiness, and Prometheus metrics that a real text-format
//! parser accepts and whose counters move.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::harness::{Options, TestServer, plugins};

pub fn admin_addr(s: &TestServer) -> SocketAddr {
    let log = s.wait_for_log("admin endpoints on http://");
    log.split("admin endpoints on http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap()
}

pub fn admin_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let status = reply[9..12].parse().unwrap();
    let body = reply.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

pub fn scrape(addr: SocketAddr) -> prometheus_parse::Scrape {
    let (status, body) = admin_get(addr, "/metrics");
    assert_eq!(status, 200);
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text")
}

pub fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let sample = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"));
    match sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => panic!("{name} is not a scalar"),
    }
}

/// Scrapes until the unlabelled metric `name` is at least `at_least` (counters can trail what
/// a client already saw by one pass of the I/O thread), then returns that scrape.
pub fn scrape_when(addr: SocketAddr, name: &str, at_least: f64) -> prometheus_parse::Scrape {
    let started = std::time::Instant::now();
    loop {
        let scrape = scrape(addr);
        let v = value(&scrape, name, &[]);
        if v >= at_least {
            return scrape;
        }
        assert!(
            started.elapsed() < crate::harness::PATIENCE,
            "{name} stayed at {v}, below {at_least}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn health_readiness_and_metrics_that_move() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .plugin(plugins::TRAP)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let admin = admin_addr(&s);
    assert_eq!(admin_get(admin, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(admin_get(admin, "/readyz"), (200, "ready\n".to_owned()));
    assert_eq!(admin_get(admin, "/nope").0, 404);

    let before = scrape(admin);
    let hello_2xx = value(
        &before,
        "ankh_plugin_responses_total",
        &[("plugin", "hello"), ("class", "2xx")],
    );
    for _ in 0..5 {
        assert_eq!(s.get("/hello").0, 200);
    }
    assert_eq!(s.get("/trap/panic").0, 500);
    let after = scrape(admin);
    assert_eq!(
        value(
            &after,
            "ankh_plugin_responses_total",
            &[("plugin", "hello"), ("class", "2xx")]
        ),
        hello_2xx + 5.0
    );
    assert_eq!(
        value(&after, "ankh_plugin_traps_total", &[("plugin", "trap")]),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "ankh_plugin_responses_total",
            &[("plugin", "trap"), ("class", "5xx")]
        ),
        1.0
    );
    assert!(value(&after, "ankh_connections_total", &[]) >= 6.0);
    assert!(value(&after, "ankh_bytes_in_total", &[]) > value(&before, "ankh_bytes_in_total", &[]));
    assert!(
        value(&after, "ankh_bytes_out_total", &[]) > value(&before, "ankh_bytes_out_total", &[])
    );
    assert!(value(&after, "ankh_plugin_instances", &[("plugin", "hello")]) >= 1.0);
    assert!(
        value(
            &after,
            "ankh_plugin_memory_high_water_bytes",
            &[("plugin", "hello")]
        ) > 0.0
    );
    // The latency histogram counted every hello response.
    let histogram = after
        .samples
        .iter()
        .find(|s| {
            s.metric == "ankh_plugin_request_duration_seconds"
                && s.labels.get("plugin") == Some("hello")
        })
        .expect("histogram");
    match &histogram.value {
        prometheus_parse::Value::Histogram(buckets) => {
            let inf = buckets
                .iter()
                .find(|b| b.less_than == f64::INFINITY)
                .unwrap();
            assert_eq!(inf.count, hello_2xx + 5.0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn readiness_needs_a_mounted_plugin() {
    let s = Options::default().arg("--admin").arg("127.0.0.1:0").start();
    let admin = admin_addr(&s);
    assert_eq!(admin_get(admin, "/healthz").0, 200);
    let (status, body) = admin_get(admin, "/readyz");
    assert_eq!(status, 503);
    assert!(body.contains("no plugin is mounted"));
    s.install("hello", plugins::HELLO);
    s.eventually("/hello", |st, _| st == 200);
    assert_eq!(admin_get(admin, "/readyz").0, 200);
}
