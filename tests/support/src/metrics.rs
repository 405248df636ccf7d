//! The admin listener as a test reads it: its address from the server's log, and `/metrics`
//! parsed by a real Prometheus text-format parser.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::harness::TestServer;

/// The admin listener's address ([`TestServer::admin_addr`]).
pub fn admin_addr(s: &TestServer) -> SocketAddr {
    s.admin_addr()
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

/// Polls `/metrics` until `check` holds for the value of `name` (with `labels`).
pub fn wait_metric(
    admin: SocketAddr,
    name: &str,
    labels: &[(&str, &str)],
    check: impl Fn(f64) -> bool,
) {
    let started = std::time::Instant::now();
    loop {
        let v = value(&scrape(admin), name, labels);
        if check(v) {
            return;
        }
        assert!(
            started.elapsed() < crate::harness::PATIENCE,
            "{name} {labels:?} never got there (last: {v})"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
