//! The admin listener: health, readiness, and Prometheus metrics that a real text-format
//! parser accepts and whose counters move.

use crate::harness::{Options, plugins};
use crate::metrics::{admin_addr, admin_get, scrape, value};

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
