//! Found by a hostile plugin and a slow client, second round (issue 32): each attack run over
//! real sockets, with what must hold while it runs. Each test is named after the finding.

use std::io::{BufReader, Write};
use std::time::{Duration, Instant};

use crate::harness::{Options, plugins, read_response};

/// The time `GET path` takes on a connection of its own, and its status.
fn timed_get(s: &crate::harness::TestServer, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let (status, _) = s.get(path);
    (status, started.elapsed())
}

// See: issue 32, finding 2: one client pipelining 1,100 requests to a handler that answers
// and then sleeps 20 s pinned every call slot of the server, and `/hello` took 14.6 s.
#[test]
fn issue32_2_one_plugin_cannot_hold_every_call_slot() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .plugin(plugins::HELLO)
        .start();
    let mut conn = s.connect();
    let mut pipeline = Vec::new();
    for _ in 0..1100 {
        pipeline.extend_from_slice(b"GET /probe/early?ms=20000 HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    conn.write_all(&pipeline).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let (mut answered, mut refused) = (0, 0);
    for _ in 0..1100 {
        let r = read_response(&mut reader, false);
        match r.status {
            200 => answered += 1,
            503 => {
                assert_eq!(r.header("retry-after"), Some("1"));
                refused += 1;
            }
            other => panic!("unexpected {other}: {}", r.text()),
        }
    }
    // The plugin got its share of the server's calls (a quarter of --max-calls), no more:
    // each of those answered and sleeps on; the rest were refused at once.
    assert_eq!(answered, ankh::limits::MAX_CONCURRENCY, "{refused} refused");
    assert_eq!(answered + refused, 1100);
    // With all of them still sleeping, another plugin answers at once, again and again.
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let (status, took) = timed_get(&s, "/hello");
        assert_eq!(status, 200);
        slowest = slowest.max(took);
    }
    eprintln!("/hello beside 256 sleeping calls: slowest of 20 took {slowest:?}");
    assert!(slowest < Duration::from_millis(500), "{slowest:?}");
    // And the greedy plugin itself is refused, not queued behind its own sleepers.
    let (status, _) = timed_get(&s, "/probe/ok");
    assert_eq!(status, 503);
}

// See: issue 32, finding 1: a plugin with a writable grant on `shared` replaced `shared/x`
// with a symbolic link to `..`; the next instance of a plugin granted `shared/x` then opened
// the plugins directory, where its ordinary writes could rewrite any policy.
#[test]
fn issue32_1_a_plugin_cannot_redirect_another_plugins_directory_grant() {
    let s = Options::default().plugin(plugins::HELLO).start();
    let dir = s.plugins_dir().to_owned();
    std::fs::create_dir_all(dir.join("shared/x")).unwrap();
    std::fs::write(
        dir.join("hostile.toml"),
        "[capabilities]\ndirs = [{ host = \"shared\", guest = \"/shared\", writable = true }]\n",
    )
    .unwrap();
    // A fresh instance for every request: each one is given its grant anew.
    std::fs::write(
        dir.join("probe.toml"),
        "[capabilities]\ndirs = [{ host = \"shared/x\", guest = \"/data\", writable = true }]\n[instances]\nmode = \"fresh\"\n",
    )
    .unwrap();
    s.install("hostile", plugins::HOSTILE);
    s.install("probe", plugins::PROBE);
    s.eventually("/probe/write?path=/data/before.txt", |st, body| {
        st == 200 && body == "wrote"
    });
    // The two load in either order: wait for the attacker too.
    s.wait_for_log("plugin=hostile mount=/hostile");
    assert!(dir.join("shared/x/before.txt").is_file());
    std::fs::remove_file(dir.join("shared/x/before.txt")).unwrap();

    // The attack: `shared/x` becomes a link to the plugins directory.
    assert_eq!(
        s.get("/hostile/redirect?grant=/shared&name=x&target=..").1,
        "redirected"
    );
    assert!(
        std::fs::symlink_metadata(dir.join("shared/x"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The victim's next instances still have the directory its grant opened (gone now), never
    // the plugins directory: nothing it writes lands there.
    for _ in 0..3 {
        let (status, body) = s.get("/probe/write?path=/data/evil.toml");
        assert_eq!(status, 200);
        assert!(body.starts_with("error"), "{body}");
    }
    assert!(!dir.join("evil.toml").exists());
    assert!(!dir.join("shared/evil.toml").exists());
    // Reloaded (its policy touched), the grant is refused: it names a link now.
    let policy = std::fs::read_to_string(dir.join("probe.toml")).unwrap();
    std::fs::write(dir.join("probe.toml"), policy + "\n").unwrap();
    let log = s.wait_for_log("a grant never follows a symbolic link");
    assert!(log.contains("probe.toml"), "{log}");
    assert_eq!(s.get("/hello").0, 200);
}

// See: issue 32, finding 3: the admin listener served one connection at a time with a 5 s
// timeout per read and no total deadline: a client sending a byte every 3 s kept /healthz and
// /readyz from answering for hours.
#[test]
fn issue32_3_slow_clients_do_not_hold_the_admin_port() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .flag("--admin", "127.0.0.1:0")
        .flag("--head-timeout-ms", 1500)
        .start();
    let admin = crate::metrics::admin_addr(&s);
    // Hundreds of clients that start a request and never finish it, each dripping a byte.
    let mut slow: Vec<std::net::TcpStream> = (0..300)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(admin).unwrap();
            c.write_all(b"GET /healthz HTTP/1.1\r\nHo").unwrap();
            c
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for round in 0..20 {
        for c in slow.iter_mut().skip(round % 3).step_by(3) {
            let _ = c.write_all(b"s");
        }
        let started = Instant::now();
        let (status, body) = crate::metrics::admin_get(admin, "/healthz");
        slowest = slowest.max(started.elapsed());
        assert_eq!((status, body.as_str()), (200, "ok\n"));
    }
    eprintln!("/healthz beside 300 dripping clients: slowest of 20 took {slowest:?}");
    assert!(slowest < Duration::from_millis(500), "{slowest:?}");
    // The head has a total deadline, as on the main port, however steadily bytes arrive:
    // every dripping client is answered 408 and closed.
    let mut first = &slow[0];
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut first, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
}

// See: issue 32, finding 4: a wasi:http component's response body was collected and gzipped
// on the event-loop thread: with one client fetching a 60 MiB gzip'd response in a loop,
// `/hello` on the same loop had a p90 of 215 ms. A call leaves its loop when its guest is
// still computing at an epoch tick; the host's own work (collecting a body, compressing it)
// is never interrupted by one, so a guest that answers a big body quickly left that work to
// the loop. Both kinds of plugin are run here: a component that writes a big body, and an
// own-world plugin that answers a body it keeps (so the guest's part is a copy, and the
// compression is all the host's). Two loops, as on this two-core machine by default; the
// big answers and /hello are on the same one (connections go to the least loaded loop, ties
// in turn: the first and the third connection share loop 0).
#[test]
fn issue32_4_a_big_response_is_made_off_the_event_loop() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .plugin(plugins::PROBE)
        .plugin(plugins::HELLO)
        // The kept body stays with its instance (which is otherwise replaced after a call
        // that grew its memory by 8 MiB).
        .file("probe.toml", b"[instances]\nrecycle_growth_mib = 1024\n")
        .flag("--io-threads", 2)
        .flag("--memory-limit-mib", 256)
        .start();
    let mut big_conn = s.connect();
    let _spacer = s.connect();
    let mut hello_conn = s.connect();
    let mut big_reader = BufReader::new(big_conn.try_clone().unwrap());
    let mut hello_reader = BufReader::new(hello_conn.try_clone().unwrap());
    for big in ["/probe/cached?n=16777216", "/httpecho/big?bytes=16777216"] {
        let request = format!("GET {big} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
        // The first answer makes the kept body; from then on it is the host's work.
        big_conn.write_all(request.as_bytes()).unwrap();
        assert_eq!(read_response(&mut big_reader, false).status, 200);
        // Five big answers in the pipeline, and /hello on the same loop meanwhile.
        for _ in 0..5 {
            big_conn.write_all(request.as_bytes()).unwrap();
        }
        let reading = std::thread::spawn(move || {
            for _ in 0..5 {
                let r = read_response(&mut big_reader, false);
                assert_eq!(r.status, 200);
                assert_eq!(r.header("content-encoding"), Some("gzip"));
            }
            big_reader
        });
        let mut took = Vec::new();
        while !reading.is_finished() {
            let started = Instant::now();
            hello_conn
                .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            assert_eq!(read_response(&mut hello_reader, false).status, 200);
            took.push(started.elapsed());
        }
        big_reader = reading.join().unwrap();
        took.sort();
        let (p90, worst) = (took[took.len() * 9 / 10], took[took.len() - 1]);
        eprintln!(
            "/hello beside gzip'd 16 MiB answers of {big}: p90 {p90:?}, worst {worst:?} ({} requests)",
            took.len()
        );
        // Compressing one of them takes about 15 ms here, and the finding's p90 was 215 ms;
        // on two shared cores /hello also waits for a core while a worker compresses.
        assert!(worst < Duration::from_millis(100), "{big}: worst {worst:?}");
    }
}

// See: issue 32, finding 6: user information in an outbound URL reached the upstream's
// `Host` header (`http://a:b@127.0.0.1:PORT/` gave `host: a:b@127.0.0.1:PORT`).
#[test]
fn issue32_6_an_outbound_url_with_credentials_is_refused() {
    use crate::upstream::{Mode, Upstream};
    let up = Upstream::start(Mode::Hello);
    let s = Options::default()
        .plugin(plugins::PROBE)
        .file(
            "probe.toml",
            format!("[capabilities]\nhttp = [\"{}\"]\n", up.origin()).as_bytes(),
        )
        .start();
    let with_credentials = format!("http://a:b@{}/", up.addr);
    let (status, body) = s.get(&format!("/probe/fetch?url={with_credentials}"));
    assert_eq!(status, 502, "{body}");
    s.wait_for_log("a URL with user information (user:password@) is refused");
    assert_eq!(up.accepted(), 0, "the request went out");
    // The same origin without them is reached.
    assert_eq!(s.get(&format!("/probe/fetch?url={}/", up.origin())).0, 200);
}

// See: issue 32, finding 6: a plugin filled its 64 metric labels for outbound origins with
// denied hostnames of its choosing.
#[test]
fn issue32_6_denied_calls_mint_no_metric_labels() {
    let s = Options::default()
        .plugin(plugins::PROBE)
        .flag("--admin", "127.0.0.1:0")
        .start();
    for i in 0..70 {
        let (status, _) = s.get(&format!("/probe/fetch?url=http://chosen-{i}.example/"));
        assert_eq!(status, 502);
    }
    let admin = crate::metrics::admin_addr(&s);
    let (_, text) = crate::metrics::admin_get(admin, "/metrics");
    assert!(!text.contains("chosen-"), "{text}");
    let m = crate::metrics::scrape(admin);
    let denied = [("plugin", "probe"), ("origin", "denied")];
    assert_eq!(
        crate::metrics::value(&m, "ankh_outbound_requests_total", &denied),
        70.0
    );
    assert_eq!(
        crate::metrics::value(&m, "ankh_outbound_errors_total", &denied),
        70.0
    );
}

// See: issue 32, finding 6: a policy took a route nested inside another plugin's mount
// (`routes = ["/hello/x"]`) silently, and served part of that plugin's paths.
#[test]
fn issue32_6_a_route_nested_in_another_plugins_is_refused_unless_allowed() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .plugin_as("aaa", plugins::ECHO)
        .file("aaa.toml", b"routes = [\"/hello/x\", \"/aaa\"]\n")
        .start();
    let log = s.wait_for_log("plugin `aaa` is refused");
    assert!(
        log.contains("plugin `aaa` is refused: its route /hello/x is nested with plugin `hello`'s route /hello"),
        "{log}"
    );
    // hello keeps its whole subtree (its own router answers /hello/x, not echo's).
    assert!(!s.get("/hello/x").1.contains("\"mount\""));
    assert_eq!(s.get("/aaa").0, 404);
    drop(s);
    // Where the operator allows nesting, the longest prefix wins.
    let s = Options::default()
        .plugin(plugins::HELLO)
        .plugin_as("aaa", plugins::ECHO)
        .file("aaa.toml", b"routes = [\"/hello/x\"]\n")
        .arg("--allow-nested-routes")
        .start();
    let (status, body) = s.get("/hello/x/y");
    assert_eq!(status, 200);
    assert!(body.contains("\"mount\":\"/hello/x\""), "{body}");
    assert_eq!(s.get("/hello").1, "Hello, World!");
}

// See: issue 32, finding 6: with RUST_BACKTRACE=1 set, a host error's backtrace (host file
// paths and all) reached the guest's error value, and from there the client's 502 body.
#[test]
fn issue32_6_a_host_error_reaches_the_guest_without_a_backtrace() {
    let s = Options {
        env: vec![("RUST_BACKTRACE".into(), "1".into())],
        ..Options::default()
    }
    .plugin(plugins::HOSTILE)
    .start();
    let (status, text) = s.get("/hostile/stream-error");
    assert_eq!(status, 200);
    // What went wrong, and nothing of the host's insides.
    assert!(text.to_lowercase().contains("body"), "{text}");
    for leak in ["backtrace", "Backtrace", ".rs:", "/root/", "cargo/registry"] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
}

// See: issue 32, finding 6: header values with whitespace around them were sent as the plugin
// wrote them, and a request-target with `"`, `{`, `}`, `<` or `>` was answered 200.
#[test]
fn issue32_6_values_are_trimmed_and_targets_are_checked() {
    let s = Options::default()
        .plugin(plugins::HOSTILE)
        .plugin(plugins::HELLO)
        .start();
    let reply = s.raw(b"GET /hostile/header?value=%20%20spaced%09%20 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(reply.contains("\r\nX-Hostile: spaced\r\n"), "{reply}");
    for target in ["/hello/\"x\"", "/hello/<x>", "/hello/{x}", "/hello?q=<x>"] {
        let reply = s.raw(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert!(reply.starts_with("HTTP/1.1 400 "), "{target}: {reply}");
    }
    // Braces in a query are what browsers send: served.
    assert!(
        s.raw(b"GET /hello?q={a} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .starts_with("HTTP/1.1 200 ")
    );
}

// See: issue 32, finding 6: a policy with an environment variable named twice, or a route
// that is a dot segment once percent-decoded (`/%2e%2e`), was accepted.
#[test]
fn issue32_6_a_policy_naming_a_variable_twice_or_a_dot_route_is_refused() {
    let s = Options::default()
        .plugin(plugins::HELLO)
        .plugin_as("twice", plugins::PROBE)
        .file("twice.toml", b"[capabilities]\nenv = [\"A=1\", \"A=2\"]\n")
        .plugin_as("dots", plugins::ECHO)
        .file("dots.toml", b"routes = [\"/%2e%2e\"]\n")
        .start();
    s.wait_for_log("twice.toml:2");
    let log = s.wait_for_log("dots.toml:1");
    assert!(
        log.contains("twice.toml:2: capabilities.env: A is given twice"),
        "{log}"
    );
    assert!(
        log.contains("dots.toml:1: routes: \"/%2e%2e\" is not a mount prefix"),
        "{log}"
    );
    assert_eq!(s.get("/twice/ok").0, 404);
    assert_eq!(s.get("/%2e%2e").0, 404);
    assert_eq!(s.get("/hello").0, 200);
}

// See: issue 33, finding 8: a chatty component's lines reached the log one INFO line each,
// with no rate limit per plugin. A plugin flooding its stdout and `log` gets its budget of
// lines a second, the rest counted and said in one warning; its neighbour's lines still pass.
#[test]
fn issue33_8_a_plugin_cannot_flood_the_log() {
    let s = Options::default()
        .plugin(plugins::HOSTILE)
        .plugin(plugins::PROBE)
        .flag("--admin", "127.0.0.1:0")
        .start();
    let flood: u32 = 20_000;
    assert_eq!(
        s.get(&format!("/hostile/chatty?lines={flood}")).1,
        format!("said {flood}")
    );
    // The next line to pass (in the next one-second window) says how many were dropped.
    const WARNING: &str = "log lines of this plugin were dropped";
    let asking = Instant::now();
    while !s.log().contains(WARNING) && asking.elapsed() < crate::harness::PATIENCE {
        assert_eq!(s.get("/hostile/chatty?lines=1").1, "said 1");
    }
    let log = s.wait_for_log(WARNING);
    let passed = log.matches("chatty ").count();
    assert!(
        passed < flood as usize,
        "{passed} of {} flooding lines reached the log",
        2 * flood
    );
    let scrape = crate::metrics::scrape(crate::metrics::admin_addr(&s));
    let dropped = crate::metrics::value(
        &scrape,
        "ankh_plugin_log_lines_dropped_total",
        &[("plugin", "hostile")],
    );
    assert!(dropped >= f64::from(flood), "{dropped}");
    // The budget is the plugin's own: another plugin's lines pass at once.
    assert_eq!(s.get("/probe/log?marker=neighbour").1, "logged");
    s.wait_for_log("stdout neighbour");
    s.wait_for_log("log neighbour");
}
