//! Outbound HTTP from plugins (issue 15), against a local service that counts what reaches
//! it: denied by default, granted per plugin in its policy, names resolved by the host and
//! loopback refused unless granted literally, connections pooled and bounded, every wait cut
//! by a timeout, every body by a cap. Both worlds: ankh's own (the SDK's `http` client in the
//! `probe` plugin, raw `wasi:http` in `hostile`) and `wasi:http/proxy` (`httpwstd`).

use std::time::{Duration, Instant};

use crate::harness::{Options, TestServer, plugins};
use crate::metrics::{admin_addr, scrape, value};
use crate::upstream::{HELLO, Mode, Upstream};

/// A server with `plugin` (as `name`) granted `grants`, and `args` more.
fn serve_granted(
    name: &str,
    plugin: &str,
    grants: &[String],
    args: &[(&str, String)],
) -> TestServer {
    let list: Vec<String> = grants.iter().map(|g| format!("{g:?}")).collect();
    let policy = format!("[capabilities]\nhttp = [{}]\n", list.join(", "));
    serve_with_policy(name, plugin, &policy, args)
}

/// `plugin` served as `name` under `policy`, with the server's `args` and an admin listener.
fn serve_with_policy(
    name: &str,
    plugin: &str,
    policy: &str,
    args: &[(&str, String)],
) -> TestServer {
    let mut options = Options::default()
        .plugin_as(name, plugin)
        .file(&format!("{name}.toml"), policy.as_bytes())
        .flag("--admin", "127.0.0.1:0");
    for (flag, value) in args {
        options = options.flag(flag, value);
    }
    options.start()
}

#[test]
fn a_granted_origin_is_reached_and_counted() {
    let up = Upstream::start(Mode::Hello);
    let s = serve_granted("probe", plugins::PROBE, &[up.origin()], &[]);
    let (status, body) = s.get(&format!("/probe/fetch?url={}/x", up.origin()));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, format!("status 200 bytes {}\n{HELLO}", HELLO.len()));
    assert_eq!(up.requests(), 1);

    // The proxy world calls out the same way, under its own grant.
    let s2 = serve_granted("httpwstd", plugins::HTTPWSTD, &[up.origin()], &[]);
    let (status, body) = s2.get(&format!("/httpwstd/fetch?url={}/y", up.origin()));
    assert_eq!(
        (status, body.as_str()),
        (200, format!("status 200\n{HELLO}").as_str())
    );

    // Per plugin and origin on /metrics.
    let m = scrape(admin_addr(&s));
    let origin = up.origin();
    let labels = [("plugin", "probe"), ("origin", origin.as_str())];
    assert_eq!(value(&m, "ankh_outbound_requests_total", &labels), 1.0);
    assert_eq!(value(&m, "ankh_outbound_errors_total", &labels), 0.0);
    assert!(value(&m, "ankh_outbound_request_duration_seconds_total", &labels) > 0.0);
}

#[test]
fn what_is_not_granted_never_opens_a_connection() {
    let up = Upstream::start(Mode::Hello);
    let other = Upstream::start(Mode::Hello);
    // probe may call `other` only; httpwstd, nothing at all.
    let s = Options::default()
        .plugin(plugins::PROBE)
        .file(
            "probe.toml",
            format!("[capabilities]\nhttp = [\"{}\"]\n", other.origin()).as_bytes(),
        )
        .plugin(plugins::HTTPWSTD)
        .plugin(plugins::HOSTILE)
        .start();
    let (status, body) = s.get(&format!("/probe/fetch?url={}/", up.origin()));
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("not granted"), "{body}");
    let (status, body) = s.get(&format!("/httpwstd/fetch?url={}/", up.origin()));
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("HttpRequestDenied"), "{body}");
    let (_, body) = s.get(&format!("/hostile/http-flood?url={}/&n=50", up.origin()));
    assert_eq!(body, "ok 0 failed 50");
    // The cloud metadata address, and a scheme or port the grant does not name.
    for url in [
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("https://{}/", other.addr),
        format!("http://127.0.0.1:{}/", other.addr.port() ^ 1),
    ] {
        let (status, body) = s.get(&format!("/probe/fetch?url={url}"));
        assert_eq!(status, 502, "{url}: {body}");
    }
    s.wait_for_log("outbound HTTP refused");
    assert_eq!(up.accepted(), 0, "a refused call reached the service");
    assert_eq!(other.accepted(), 0);
}

#[test]
fn a_granted_name_that_resolves_to_loopback_is_refused_unless_the_address_is_granted() {
    let up = Upstream::start(Mode::Hello);
    let url = format!("/probe/fetch?url={}/", up.origin_by_name());
    let s = serve_granted("probe", plugins::PROBE, &[up.origin_by_name()], &[]);
    let (status, body) = s.get(&url);
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("prohibited"), "{body}");
    s.wait_for_log("not public");
    assert_eq!(up.accepted(), 0);
    drop(s);

    // Granting the address itself lets the name through.
    let s = serve_granted(
        "probe",
        plugins::PROBE,
        &[up.origin_by_name(), up.origin()],
        &[],
    );
    let (status, body) = s.get(&url);
    assert_eq!(status, 200, "{body}");
    assert_eq!(up.accepted(), 1);
}

#[test]
fn sequential_calls_to_one_origin_reuse_pooled_connections() {
    let up = Upstream::start(Mode::Hello);
    let s = serve_granted("probe", plugins::PROBE, &[up.origin()], &[]);
    let (status, body) = s.get(&format!("/probe/fetch?url={}/&n=1000", up.origin()));
    assert_eq!(status, 200, "{body}");
    assert_eq!(up.requests(), 1000);
    assert!(
        up.accepted() <= 4,
        "{} connections for 1,000 calls",
        up.accepted()
    );
}

/// A flood of `n` calls at once from the hostile plugin to a slow service, under `policy`
/// (beside the grant) and the server's `args`: at most `bound` reach it at once, and at most
/// `bound` connections are ever opened (every one stays for reuse).
fn flood_is_bounded(n: usize, bound: usize, policy: &str, args: &[(&str, String)]) {
    let up = Upstream::start(Mode::Slow(Duration::from_millis(100)));
    let policy = format!("[capabilities]\nhttp = [{:?}]\n{policy}", up.origin());
    let s = serve_with_policy("hostile", plugins::HOSTILE, &policy, args);
    let (status, body) = s.get(&format!("/hostile/http-flood?url={}/&n={n}", up.origin()));
    assert_eq!((status, body), (200, format!("ok {n} failed 0")));
    assert_eq!(up.requests(), n);
    assert!(
        up.most_busy() <= bound,
        "{} requests at once",
        up.most_busy()
    );
    assert!(up.accepted() <= bound, "{} connections", up.accepted());
}

#[test]
fn calls_in_flight_to_one_origin_are_bounded() {
    // The default: 64.
    flood_is_bounded(100, 64, "", &[]);
}

#[test]
fn the_bound_on_calls_to_one_origin_is_set_by_the_server_or_the_policy() {
    flood_is_bounded(
        32,
        8,
        "",
        &[("--outbound-connections-per-origin", "8".into())],
    );
    // A plugin's policy sets its own, below the server's or past it.
    flood_is_bounded(
        16,
        4,
        "[outbound]\nconnections_per_origin = 4\n",
        &[("--outbound-connections-per-origin", "8".into())],
    );
    flood_is_bounded(
        16,
        8,
        "[outbound]\nconnections_per_origin = 8\n",
        &[("--outbound-connections-per-origin", "4".into())],
    );
}

#[test]
fn a_service_that_never_answers_is_cut_at_the_timeout() {
    let up = Upstream::start(Mode::Silent);
    let s = serve_granted(
        "probe",
        plugins::PROBE,
        &[up.origin()],
        &[("--outbound-first-byte-timeout-ms", "300".into())],
    );
    let started = Instant::now();
    let (status, body) = s.get(&format!("/probe/fetch?url={}/", up.origin()));
    assert_eq!(status, 504, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A guest asking for an hour gets the host's bound all the same.
    let s = serve_granted(
        "hostile",
        plugins::HOSTILE,
        &[up.origin()],
        &[("--outbound-first-byte-timeout-ms", "300".into())],
    );
    let (_, body) = s.get(&format!("/hostile/http-slow?url={}/", up.origin()));
    assert!(
        body.starts_with("error ConnectionReadTimeout") || body.contains("Timeout"),
        "{body}"
    );
}

#[test]
fn a_call_counts_against_the_request_deadline() {
    let up = Upstream::start(Mode::Silent);
    let s = Options::default()
        .plugin(plugins::PROBE)
        .file(
            "probe.toml",
            format!(
                "[capabilities]\nhttp = [\"{}\"]\n[limits]\nhandler_timeout_ms = 400\n",
                up.origin()
            )
            .as_bytes(),
        )
        .start();
    let started = Instant::now();
    let (status, _) = s.get(&format!("/probe/fetch?url={}/", up.origin()));
    assert_eq!(status, 504);
    // Cut by the handler's 400 ms, not the outbound 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.get("/probe/ok").0, 200);
}

#[test]
fn a_gibibyte_response_is_cut_at_the_cap() {
    let up = Upstream::start(Mode::Huge(1 << 30));
    let s = serve_granted(
        "probe",
        plugins::PROBE,
        &[up.origin()],
        &[("--outbound-max-response-bytes", (1 << 20).to_string())],
    );
    let (status, body) = s.get(&format!("/probe/fetch?url={}/", up.origin()));
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("too large"), "{body}");
    // The connection was dropped, not drained: the service stops far short of 1 GiB.
    let started = Instant::now();
    while up.open() > 0 {
        assert!(
            started.elapsed() < crate::harness::PATIENCE,
            "the connection stayed open"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(up.written() < 256 << 20, "{} bytes written", up.written());
    assert_eq!(s.get("/probe/ok").0, 200);
}

#[test]
fn https_goes_through_tls() {
    // A plain-HTTP service granted as https: the TLS handshake fails, and says so.
    let up = Upstream::start(Mode::Hello);
    let origin = format!("https://{}", up.addr);
    let s = serve_granted("probe", plugins::PROBE, std::slice::from_ref(&origin), &[]);
    let (status, body) = s.get(&format!("/probe/fetch?url={origin}/"));
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("Tls"), "{body}");
}

#[test]
fn check_lists_the_grants() {
    let dir = crate::harness::TempDir::new("grant");
    let wasm = dir.path().join("probe.wasm");
    std::fs::copy(plugins::PROBE, &wasm).unwrap();
    std::fs::write(
        dir.path().join("probe.toml"),
        "[capabilities]\nhttp = [\"https://api.example.com\", \"https://*.example.org\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(crate::harness::ankh_bin())
        .arg("check")
        .arg(&wasm)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("http to https://api.example.com"), "{text}");
    assert!(text.contains("http to https://*.example.org"), "{text}");
    assert!(!text.contains("no filesystem, network"), "{text}");
}

#[test]
fn bad_grants_are_refused_with_the_key() {
    for grant in [
        "ftp://example.com",
        "https://exa mple.com",
        "https://a.example/path",
        "*.example.org",
    ] {
        let dir = crate::harness::TempDir::new("grant");
        let wasm = dir.path().join("probe.wasm");
        std::fs::copy(plugins::PROBE, &wasm).unwrap();
        std::fs::write(
            dir.path().join("probe.toml"),
            format!("[capabilities]\nhttp = [\"{grant}\"]\n"),
        )
        .unwrap();
        let (ok, text) = crate::harness::output_text(
            std::process::Command::new(crate::harness::ankh_bin())
                .arg("check")
                .arg(&wasm)
                .env("NO_COLOR", "1"),
        );
        assert!(!ok, "{grant}: {text}");
        assert!(text.contains("capabilities.http"), "{grant}: {text}");
    }
}
