//! Per-plugin policy (`NAME.toml`): routes, limits, capabilities and instance modes, with the
//! sandbox acceptance points holding for per-plugin values (A61-A66, A72).

use std::io::Write;

use crate::harness::{Options, TestServer, plugins};

fn with_policy(name: &str, wasm: &str, policy: &str) -> Options {
    Options::default()
        .plugin_as(name, wasm)
        .file(&format!("{name}.toml"), policy.as_bytes())
}

#[test]
fn routes_replace_the_default_mount() {
    let s = with_policy("api", plugins::ECHO, "routes = [\"/v1/api\", \"/x\"]\n").start();
    assert_eq!(s.get("/api").0, 404);
    let (status, body) = s.get("/v1/api/items");
    assert_eq!(status, 200);
    assert!(
        body.contains("\"mount\":\"/v1/api\"") && body.contains("\"route\":\"/items\""),
        "{body}"
    );
    assert!(s.get("/x").1.contains("\"mount\":\"/x\""));
}

#[test]
fn per_plugin_cpu_deadline_and_memory_cap() {
    let s = Options::default()
        .plugin(plugins::SPIN)
        .file("spin.toml", b"[limits]\ncpu_deadline_ms = 200\n")
        .plugin(plugins::ALLOC)
        .file("alloc.toml", b"[limits]\nmemory_limit_mib = 16\n")
        .start();
    let (status, body) = s.get("/spin/loop");
    assert_eq!(status, 504);
    assert!(body.contains("CPU deadline of 200ms"), "{body}");
    let (status, body) = s.get("/alloc/bomb");
    assert_eq!(status, 500);
    assert!(body.contains("memory cap of 16777216 bytes"), "{body}");
    assert_eq!(s.get("/alloc/ok").0, 200);
}

#[test]
fn per_plugin_body_limit_answers_413_before_reading() {
    let s = with_policy("echo", plugins::ECHO, "[limits]\nmax_body_bytes = 100\n").start();
    let reply = s.raw(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
    let mut chunked =
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    chunked.extend_from_slice(b"65\r\n");
    let reply = s.raw(&chunked);
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
    let ok = s.request(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    assert_eq!(ok.status, 200);
}

#[test]
fn a72_max_concurrency_answers_503_with_retry_after() {
    let s = with_policy("probe", plugins::PROBE, "[limits]\nmax_concurrency = 1\n")
        .flag("--workers", 4)
        .start();
    let addr = s.addr;
    let busy = std::thread::spawn(move || {
        let agent = crate::harness::agent();
        agent
            .get(&format!("http://{addr}/probe/sleep?ms=1000"))
            .call()
            .unwrap()
            .status()
            .as_u16()
    });
    s.wait_for_log("sleeping 1000");
    let resp = s.request(b"GET /probe/status/200 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(resp.status, 503);
    assert_eq!(resp.header("retry-after"), Some("1"));
    assert_eq!(busy.join().unwrap(), 200);
    // The slot is free again.
    assert_eq!(s.get("/probe/status/200?body=free").1, "free");
}

#[test]
fn a66_nothing_is_granted_without_a_policy() {
    let s = TestServer::start(&[plugins::PROBE]);
    assert_eq!(s.get("/probe/env?name=HOME").1, "absent");
    assert!(s.get("/probe/file?path=/etc/passwd").1.starts_with("error"));
    assert!(
        s.get("/probe/write?path=/tmp/ankh-escape")
            .1
            .starts_with("error")
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    assert!(
        s.get(&format!("/probe/connect?addr={target}"))
            .1
            .starts_with("error")
    );
}

#[test]
fn a66_granted_env_dirs_and_network_and_no_escape() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed = listener.local_addr().unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let denied = other.local_addr().unwrap();
    let policy = format!(
        "[capabilities]\nenv = [\"GREETING=hello there\", \"HOME\"]\ndirs = [{{ host = \"data\", guest = \"/data\" }}, {{ host = \"scratch\", guest = \"/scratch\", writable = true }}]\nnetwork = [\"{allowed}\"]\n"
    );
    let s = {
        let o = with_policy("probe", plugins::PROBE, &policy);
        let s = o.plugin_as("hello", plugins::HELLO).start();
        // Create the directories in the server's plugins directory, then reload the plugin so
        // its policy can grant them.
        let dir = s.plugins_dir().to_owned();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::create_dir_all(dir.join("scratch")).unwrap();
        std::fs::write(dir.join("data/hello.txt"), "hello file").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("data/passwd")).unwrap();
        s.install("probe", plugins::PROBE);
        s
    };
    s.eventually("/probe/env?name=GREETING", |st, body| {
        st == 200 && body == "hello there"
    });
    assert_eq!(
        s.get("/probe/env?name=HOME").1,
        std::env::var("HOME").unwrap()
    );
    assert_eq!(s.get("/probe/env?name=PATH").1, "absent");
    assert_eq!(s.get("/probe/file?path=/data/hello.txt").1, "read 10");
    // Read-only: no writing there.
    assert!(
        s.get("/probe/write?path=/data/new.txt")
            .1
            .starts_with("error")
    );
    assert!(!s.plugins_dir().join("data/new.txt").exists());
    // Writable: the file appears on the host.
    assert_eq!(s.get("/probe/write?path=/scratch/new.txt").1, "wrote");
    assert_eq!(
        std::fs::read_to_string(s.plugins_dir().join("scratch/new.txt")).unwrap(),
        "written"
    );
    // No way out: not with `..`, not through a symlink, not outside the grants.
    for escape in [
        "/data/../../etc/passwd",
        "/data/passwd",
        "/etc/passwd",
        "/scratch/../data/hello.txt/../../x",
    ] {
        let body = s.get(&format!("/probe/file?path={escape}")).1;
        assert!(body.starts_with("error"), "{escape}: {body}");
    }
    assert_eq!(
        s.get(&format!("/probe/connect?addr={allowed}")).1,
        "connected"
    );
    assert!(
        s.get(&format!("/probe/connect?addr={denied}"))
            .1
            .starts_with("error")
    );
    drop(listener);
}

#[test]
fn instance_modes_fresh_and_recycled() {
    let s = Options::default()
        .plugin_as("fresh", plugins::TRAP)
        .file("fresh.toml", b"[instances]\nmode = \"fresh\"\n")
        .plugin_as("recycled", plugins::TRAP)
        .file("recycled.toml", b"[instances]\nrecycle_after = 2\n")
        .flag("--workers", 1)
        .start();
    for _ in 0..3 {
        assert_eq!(s.get("/fresh/ok").1, "ok 1");
    }
    let seen: Vec<String> = (0..5).map(|_| s.get("/recycled/ok").1).collect();
    assert_eq!(seen, ["ok 1", "ok 2", "ok 1", "ok 2", "ok 1"]);
}

#[test]
fn a_bad_policy_is_refused_with_file_line_and_key_and_the_old_one_stays() {
    let s = with_policy("probe", plugins::PROBE, "[limits]\nmax_concurrency = 0\n").start();
    let log = s.log();
    assert!(
        log.contains("probe.toml:2: limits.max_concurrency: must be between 1 and 1000000, got 0"),
        "{log}"
    );
    assert_eq!(s.get("/probe/status/200").0, 404);
    // A good policy loads it; a later bad one leaves the good one serving.
    let path = s.plugins_dir().join("probe.toml");
    std::fs::write(&path, "routes = [\"/p\"]\n").unwrap();
    s.eventually("/p/status/200?body=ok", |st, body| {
        st == 200 && body == "ok"
    });
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"routes = [\"/p\"]\n[limits]\nbogus = 1\n")
        .unwrap();
    drop(f);
    s.wait_for_log("the previous version keeps serving");
    assert!(s.log().contains("unknown field `bogus`"));
    assert_eq!(s.get("/p/status/200?body=still").1, "still");
}

/// CPU time per plugin (issue 36): measured on the threads that run its calls (a call that
/// sleeps costs next to none; one that computes costs what it computed), reported per plugin
/// in `/metrics`, and capped by `limits.cpu_ms_per_minute`: once the plugin has used its
/// allowance its requests get 503 with Retry-After, while the other plugins serve on.
#[test]
fn cpu_time_is_measured_per_plugin_and_capped_by_policy() {
    use crate::metrics::{admin_addr, scrape, value};
    let s = with_policy("spin", plugins::SPIN, "[limits]\ncpu_ms_per_minute = 300\n")
        .plugin(plugins::PROBE)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let cpu = |plugin: &str| {
        value(
            &scrape(admin_addr(&s)),
            "ankh_plugin_cpu_seconds_total",
            &[("plugin", plugin)],
        )
    };
    // Sleeping is not computing.
    assert_eq!(s.get("/probe/sleep?ms=300").0, 200);
    let slept = cpu("probe");
    assert!(slept < 0.1, "a 300 ms sleep was charged {slept} s");

    // Computing is, until the allowance is spent.
    let refused = s.until_refused(b"GET /spin/burn?ms=150 HTTP/1.1\r\nHost: a\r\n\r\n", 50);
    let used = cpu("spin");
    assert!(
        used >= 0.3,
        "refused after {used} s of CPU; the allowance is 0.3 s"
    );
    let retry: u64 = refused
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    assert!(
        refused.text().contains("limits.cpu_ms_per_minute"),
        "{}",
        refused.text()
    );
    assert!(
        value(
            &scrape(admin_addr(&s)),
            "ankh_plugin_cpu_throttled_total",
            &[("plugin", "spin")]
        ) >= 1.0
    );
    // The others serve on.
    assert_eq!(s.get("/probe/status/200?body=free").1, "free");
}
