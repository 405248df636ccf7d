//! The command line: readable errors and exit codes for `serve`, `check`, `build`,
//! `--help`, `--version` and `--print-config`; what `serve` logs; and the operators' guide
//! held to the binary. (Building plugin crates with cargo is in `cli_build`.)

use std::process::{Command, Output};

use crate::harness::{Options, TempDir, ankh_bin, plugins};

fn ankh(args: &[&str]) -> Output {
    Command::new(ankh_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The binary under test is the one cargo built for these tests, never an older one.
#[test]
fn the_binary_under_test_is_the_one_cargo_built() {
    assert_eq!(
        ankh_bin().canonicalize().unwrap(),
        std::path::Path::new(env!("CARGO_BIN_EXE_ankh"))
            .canonicalize()
            .unwrap()
    );
}

#[test]
fn serve_logs_what_it_loaded() {
    let s = Options::default().plugin(plugins::HELLO).start();
    let log = s.log();
    assert!(log.contains("loaded in"), "{log}");
    assert!(log.contains("plugin=hello mount=/hello"), "{log}");
}

#[test]
fn build_refuses_a_directory_without_crates() {
    let src = TempDir::new("build-empty");
    let out = ankh(&["build", src.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no plugin crates found"),
        "{}",
        stderr(&out)
    );
}

/// A component whose `packed-handler` export has another signature than the host calls is
/// refused at load with that reason, by `ankh check` and by the server, which serves the rest:
/// a wrong `handle-request`, and a wrong `handle` beside a right `handle-request` (never a
/// silent fall back to the one that fits).
#[test]
fn a_packed_handler_with_another_signature_is_refused_with_the_reason() {
    let cases = [
        (plugins::BADPACKED, "badpacked", "`handle-request: func("),
        (plugins::BADHANDLE, "badhandle", "`handle: func("),
    ];
    for (wasm, name, function) in cases {
        let out = Command::new(ankh_bin())
            .args(["check", wasm, "--no-cache"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{text}");
        assert!(
            text.contains("verdict:  refused:")
                && text.contains("`ankh:plugin/packed-handler@0.2.0` export has another signature")
                && text.contains(function),
            "{text}"
        );

        let s = Options::default()
            .plugin(wasm)
            .plugin(plugins::HELLO)
            .start();
        s.wait_for_log("packed-handler@0.2.0` export has another signature");
        assert_eq!(s.get(&format!("/{name}/")).0, 404);
        assert_eq!(s.get("/hello").0, 200);
    }
}

/// A component whose `packed-handler.handle` returns answers that break the packed layout:
/// each is answered 500 with the fault named (in the body and the log), the instance serves on
/// (no trap, no replacement), and `handle` is what the host calls when it is exported.
#[test]
fn a_malformed_packed_answer_is_a_500_that_names_the_fault() {
    let out = Command::new(ankh_bin())
        .args(["check", plugins::BADANSWER, "--no-cache"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("answers as one: packed-handler"), "{text}");

    let s = Options::default()
        .plugin(plugins::BADANSWER)
        .plugin(plugins::HELLO)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let good = s.request(b"GET /badanswer/good HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(good.status, 200);
    assert_eq!(good.body, b"packed answer", "the host called `handle`");
    assert_eq!(good.header("x-packed"), Some("yes"));
    let faults = [
        ("truncated", "malformed packed answer (truncated)"),
        (
            "lie",
            "malformed packed answer (a header count past the end)",
        ),
        ("kind", "malformed packed answer (an unknown kind)"),
        ("name", "header name \"\u{fffd}x\" is not a valid token"),
        ("trailing", "malformed packed answer (bytes after the end)"),
        ("empty", "malformed packed answer (truncated)"),
        (
            "value",
            "the value of header \"x-split\" contains a control character",
        ),
    ];
    for (path, fault) in faults {
        let (status, body) = s.get(&format!("/badanswer/{path}"));
        assert_eq!(status, 500, "/{path}: {body}");
        assert!(body.contains(fault), "/{path}: {body}");
        assert!(!body.contains("x-injected"), "/{path}: {body}");
        s.wait_for_log(fault);
        // The access line counts the 500 that was sent, not the status the plugin asked for.
        s.wait_for_log(&format!("GET /badanswer/{path} 500 "));
        assert_eq!(s.get("/badanswer/good"), (200, "packed answer".to_owned()));
    }
    // `done` without having responded is the plugin's mistake too, said as such.
    let (status, body) = s.get("/badanswer/done");
    assert_eq!(status, 500);
    assert!(body.contains("returned without responding"), "{body}");
    assert_eq!(s.get("/hello").0, 200);
    assert!(!s.log().contains("instance discarded"), "{}", s.log());
    // The metrics count what was sent: eight 200s of `/good`, eight 500s.
    let metrics = crate::metrics::scrape(crate::metrics::admin_addr(&s));
    for (class, count) in [("2xx", 8.0), ("5xx", 8.0)] {
        let name = "ankh_plugin_responses_total";
        let labels = [("plugin", "badanswer"), ("class", class)];
        assert_eq!(
            crate::metrics::value(&metrics, name, &labels),
            count,
            "{class}"
        );
    }
}

#[test]
fn check_reports_imports_exports_policy_and_verdict() {
    let ok = Command::new(ankh_bin())
        .args([
            "check",
            plugins::HELLO,
            "--cpu-deadline-ms",
            "750",
            "--no-cache",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{out}{}", stderr(&ok));
    for needle in [
        "plugin:   hello, mounted at /hello",
        "exports:\n  ankh:plugin/packed-handler@0.3.0\n  ankh:plugin/scheduled@0.3.0\n  ankh:plugin/handler@0.3.0\n  ankh:plugin/websocket-handler@0.3.0",
        "world:    ankh:plugin@0.3.0 (requests as two buffers, answers as one: packed-handler)",
        "wasi:cli/stdout@0.2",
        "cpu deadline:  750 ms per call",
        "verdict:  accepted",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
    }
    // At the defaults the memory cap holds the largest body; a body limit it cannot hold
    // twice is warned about (issue 33, finding 4).
    assert!(!out.contains("warning:"), "{out}");
    let tight = Command::new(ankh_bin())
        .args([
            "check",
            plugins::HELLO,
            "--max-body-bytes",
            "40000000",
            "--no-cache",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&tight.stdout);
    assert!(tight.status.success(), "{out}{}", stderr(&tight));
    assert!(
        out.contains("warning:       the memory cap (64 MiB) cannot hold the largest body")
            && out.contains("at least 78 MiB"),
        "{out}"
    );
    let refused = Command::new(ankh_bin())
        .args(["check", plugins::NOWORLD, "--no-cache"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let out = String::from_utf8_lossy(&refused.stdout);
    assert!(
        out.contains("verdict:  refused:")
            && out.contains("no exported instance named `ankh:plugin/handler@0.3.0`"),
        "{out}"
    );
    assert!(stderr(&refused).contains("would be refused"));
    let junk = TempDir::new("check");
    let path = junk.path().join("junk.wasm");
    std::fs::write(&path, b"nope").unwrap();
    let refused = Command::new(ankh_bin())
        .arg("check")
        .arg(&path)
        .arg("--no-cache")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stdout).contains("is not a WebAssembly file"));
}

#[test]
fn access_log_lines_and_json_logs() {
    let s = Options::default().plugin(plugins::HELLO).start();
    assert_eq!(s.get("/hello").0, 200);
    assert_eq!(s.get("/nowhere").0, 404);
    let log = s.wait_for_log("GET /nowhere 404");
    let line = log
        .lines()
        .find(|l| l.contains("GET /hello 200"))
        .expect("access line");
    for field in [
        "ankh::access",
        "remote=127.0.0.1:",
        "method=GET",
        "path=/hello",
        "status=200",
        "bytes=",
        "duration_us=",
        "plugin=hello",
        "request=",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    drop(s);

    let quiet = Options::default()
        .plugin(plugins::HELLO)
        .plugin(plugins::PROBE)
        .arg("--no-access-log")
        .rust_log(None)
        .start();
    assert_eq!(quiet.get("/hello").0, 200);
    // Proof the log would show it by now: a line logged after the access line would be.
    assert_eq!(quiet.get("/probe/log?marker=after").0, 200);
    quiet.wait_for_log("log after");
    assert!(!quiet.log().contains("ankh::access"), "{}", quiet.log());
    drop(quiet);

    let json = Options::default()
        .plugin(plugins::HELLO)
        .arg("--log-format")
        .arg("json")
        .start();
    assert_eq!(json.get("/hello").0, 200);
    let log = json.wait_for_log("\"status\":200");
    let line = log.lines().find(|l| l.contains("\"status\":200")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
    assert_eq!(v["target"], "ankh::access");
    assert_eq!(v["fields"]["path"], "/hello");
    assert_eq!(v["fields"]["plugin"], "hello");
}

#[test]
fn the_config_file_sets_the_log_format_level_and_access_log() {
    let dir = TempDir::new("log-config");
    let config = dir.path().join("ankh.toml");
    std::fs::write(
        &config,
        "[log]\nformat = \"json\"\naccess_log = false\nlevel = \"info,ankh::plugin=debug\"\n",
    )
    .unwrap();
    let s = Options::default()
        .plugin(plugins::HELLO)
        .arg("--config")
        .arg(config.to_str().unwrap())
        .rust_log(None)
        .start();
    assert_eq!(s.get("/hello").0, 200);
    let log = s.wait_for_log("configuration read");
    // Every line is JSON, and no access line was written for the request.
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert_ne!(v["target"], "ankh::access", "{line}");
    }
    drop(s);

    // A flag overrides the file; --print-config shows the result.
    let out = ankh(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--log-format",
        "text",
        "--print-config",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(
            "[log]\nformat = \"text\"\naccess_log = false\nlevel = \"info,ankh::plugin=debug\""
        ),
        "{printed}"
    );

    // A bad value is refused with file, line and key.
    std::fs::write(&config, "workers = 2\n[log]\nformat = \"xml\"\n").unwrap();
    let out = ankh(&["serve", "--config", config.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("ankh.toml:3: log.format: must be \"text\" or \"json\", got \"xml\""),
        "{err}"
    );
}

#[test]
fn serve_refuses_a_bad_address() {
    let dir = TempDir::new(line!().to_string().as_str());
    let out = ankh(&[
        "serve",
        "--listen",
        "not-an-address",
        "--plugins",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out)
            .contains("error: --listen: invalid address \"not-an-address\": expected IP:PORT"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn serve_refuses_a_missing_directory() {
    let out = ankh(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--plugins",
        "/nonexistent/ankh/plugins",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("plugins directory /nonexistent/ankh/plugins does not exist"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn serve_refuses_a_port_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = TempDir::new(line!().to_string().as_str());
    let out = ankh(&[
        "serve",
        "--listen",
        &addr,
        "--plugins",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "cannot listen on {addr}: the address is already in use"
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn serve_refuses_zero_workers() {
    let dir = TempDir::new(line!().to_string().as_str());
    let out = ankh(&[
        "serve",
        "--workers",
        "0",
        "--plugins",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("error: --workers: must be between 1 and 10000, got 0"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_documents_every_flag_and_version_prints() {
    let out = ankh(&["serve", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--plugins",
        "--listen",
        "--workers",
        "--queue-depth",
        "--max-body-bytes",
        "--max-head-bytes",
        "--max-headers",
        "--cpu-deadline-ms",
        "--memory-limit-mib",
        "--no-pooling",
    ] {
        assert!(help.contains(flag), "serve --help lacks {flag}:\n{help}");
    }
    let out = ankh(&["build", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--out") && help.contains("--debug"), "{help}");
    let out = ankh(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ankh {}", env!("CARGO_PKG_VERSION"))
    );
    let out = ankh(&["frobnicate"]);
    assert!(!out.status.success());
}

// See: issue 12, item 9.
#[test]
fn cli_messages_say_what_is_wrong() {
    let dir = TempDir::new(line!().to_string().as_str());
    let file = dir.path().join("eleven.wasm");
    std::fs::write(&file, "hello world").unwrap();
    let file = file.to_str().unwrap();
    // --plugins naming a file.
    let out = ankh(&["serve", "--plugins", file]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is a file, not a directory"),
        "{}",
        stderr(&out)
    );
    // check on a directory, and on a file that is not wasm at all.
    let out = ankh(&["check", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is a directory"), "{}", stderr(&out));
    let out = ankh(&["check", file]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success());
    assert!(stdout.contains("(11 bytes)"), "{stdout}");
    assert!(stdout.contains("is not a WebAssembly file"), "{stdout}");
    assert!(!stdout.contains("KiB"), "{stdout}");
    // A missing config file: the OS error once.
    let out = ankh(&["serve", "--config", "/nonexistent/ankh.toml"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    // A name resolves, as for every server: the server starts (and --print-config says where).
    let out = ankh(&[
        "serve",
        "--listen",
        "localhost:0",
        "--plugins",
        dir.path().to_str().unwrap(),
        "--print-config",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(printed.contains("listen = \"127.0.0.1:0\""), "{printed}");
}

// See: issue 13: `--help`, `--print-config` and the constants in limits.rs cannot drift apart,
// since each setting is declared once; this checks what the user sees against the declaration
// and against the constants themselves.
#[test]
fn help_and_print_config_show_the_real_defaults() {
    use ankh::config::SETTINGS;
    use ankh::settings::{Flag, Value};
    let dir = TempDir::new(line!().to_string().as_str());
    let help = String::from_utf8(ankh(&["serve", "--help"]).stdout).unwrap();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let out = ankh(&[
        "serve",
        "--print-config",
        "--plugins",
        dir.path().to_str().unwrap(),
        "--cache-dir",
        "/tmp/ankh-cli-cache",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: toml::Table = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let lookup = |key: &str| -> Option<toml::Value> {
        match key.split_once('.') {
            Some((section, key)) => printed.get(section)?.get(key).cloned(),
            None => printed.get(key).cloned(),
        }
    };
    for setting in SETTINGS.iter() {
        let default = (setting.default)();
        if let Flag::Value { long, .. } = setting.flag
            && default != Value::Unset
        {
            assert!(
                help.contains(&format!("--{long} ")),
                "--{long} missing from --help"
            );
            assert!(
                help.contains(&format!("[default: {}]", default.display())),
                "--{long}: the default {} is not in --help",
                default.display()
            );
        }
        if matches!(setting.key, "plugins" | "cache_dir") {
            continue; // given on the command line above
        }
        if let Value::Number(n) = default {
            assert_eq!(
                lookup(setting.key).and_then(|v| v.as_integer()),
                Some(n as i64),
                "{}",
                setting.key
            );
        }
    }
    // And the constants, by name.
    use ankh::limits;
    for (key, constant) in [
        ("limits.queue_depth", limits::QUEUE_DEPTH as i64),
        ("limits.max_body_bytes", limits::MAX_BODY_BYTES as i64),
        (
            "limits.memory_limit_mib",
            (limits::GUEST_MEMORY_BYTES >> 20) as i64,
        ),
        (
            "limits.cpu_deadline_ms",
            limits::GUEST_CPU_DEADLINE.as_millis() as i64,
        ),
        (
            "limits.handler_timeout_ms",
            limits::HANDLER_TIMEOUT.as_millis() as i64,
        ),
        ("timeouts.send_ms", limits::SEND_TIMEOUT.as_millis() as i64),
        (
            "timeouts.drain_ms",
            limits::DRAIN_TIMEOUT.as_millis() as i64,
        ),
    ] {
        assert_eq!(
            lookup(key).and_then(|v| v.as_integer()),
            Some(constant),
            "{key}"
        );
        assert!(help.contains(&format!("[default: {constant}]")), "{key}");
    }
}

// See: issue 13: `ankh dev` set the plugins directory after the check that keeps the compile
// cache out of the watched directory.
#[test]
fn dev_keeps_the_cache_out_of_the_directory_it_watches() {
    let dir = TempDir::new(line!().to_string().as_str());
    let cache = dir.path().join("cache");
    let out = ankh(&[
        "dev",
        dir.path().to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is inside the plugins directory"),
        "{}",
        stderr(&out)
    );
}

// The operators' guide (`docs/operations.md`) is what an operator reads: its configuration
// block, its command synopsis and its limits table must say what the binary does. Each is
// compared with the one declaration of settings.
fn operations_guide() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    std::fs::read_to_string(path).unwrap()
}

/// The first fenced block after `heading` whose fence line is exactly "```" + `lang`.
fn fenced_block<'a>(text: &'a str, heading: &str, lang: &str) -> &'a str {
    let section = &text[text.find(heading).unwrap_or_else(|| panic!("{heading}"))..];
    let fence = format!("```{lang}\n");
    let start = section.find(&fence).unwrap() + fence.len();
    let len = section[start..].find("```").unwrap();
    &section[start..start + len]
}

#[test]
fn the_operations_guide_shows_the_real_defaults_and_every_flag() {
    use ankh::config::SETTINGS;
    let guide = operations_guide();
    let documented: toml::Table =
        toml::from_str(fenced_block(&guide, "## Configuration", "toml")).unwrap();
    let dir = TempDir::new(line!().to_string().as_str());
    let out = ankh(&[
        "serve",
        "--print-config",
        "--plugins",
        "plugins",
        "--cache-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut printed: toml::Table = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    // The cache directory's default depends on $HOME; the guide says where it goes instead.
    printed.remove("cache_dir");
    // Workers and event loops follow the machine's cores: the guide shows a two-core machine,
    // and its two figures must agree with each other.
    for key in ["workers", "io_threads"] {
        assert!(printed.remove(key).is_some(), "{key} is printed");
    }
    let count = |key: &str| documented.get(key).and_then(toml::Value::as_integer);
    assert_eq!(
        count("workers"),
        count("io_threads").map(|cores| cores * ankh::limits::WORKERS_PER_CORE as i64),
        "the guide's workers are {} per core of its io_threads",
        ankh::limits::WORKERS_PER_CORE
    );
    for (key, value) in &printed {
        match value.as_table() {
            Some(section) => {
                for (name, value) in section {
                    assert_eq!(
                        documented.get(key).and_then(|s| s.get(name)),
                        Some(value),
                        "docs/operations.md's configuration block: {key}.{name}"
                    );
                }
            }
            None => assert_eq!(
                documented.get(key),
                Some(value),
                "docs/operations.md's configuration block: {key}"
            ),
        }
    }
    let synopsis = fenced_block(&guide, "## Command line", "");
    for setting in SETTINGS.iter() {
        let Some(long) = setting.long() else {
            continue;
        };
        assert!(
            synopsis.contains(&format!("[--{long}")),
            "--{long} is missing from docs/operations.md's command synopsis"
        );
    }
}

/// A default as the limits table writes it (`8 KiB`, `64 MiB`, `30 s`, `10,000`), in the
/// setting's own unit.
fn table_number(text: &str, unit: ankh::settings::Unit) -> Option<u64> {
    use ankh::settings::Unit;
    let text = text.trim();
    let digits: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    let n: u64 = digits.parse().ok()?;
    let suffix = text[text
        .find(|c: char| !(c.is_ascii_digit() || c == ','))
        .unwrap_or(text.len())..]
        .split_whitespace()
        .next()
        .filter(|unit| ["KiB", "MiB", "s", "ms"].contains(unit))
        .unwrap_or("");
    Some(match (unit, suffix) {
        (Unit::Bytes, "KiB") => n << 10,
        (Unit::Bytes, "MiB") => n << 20,
        (Unit::Mib, "MiB") => n,
        (Unit::Millis, "s") => n * 1000,
        (Unit::Millis, "ms") => n,
        (Unit::Count | Unit::Bytes, "") => n,
        _ => return None,
    })
}

#[test]
fn the_limits_table_shows_every_limit_with_its_real_default() {
    use ankh::config::SETTINGS;
    use ankh::settings::{Kind, Value};
    let guide = operations_guide();
    let section = &guide[guide.find("## Limits and defaults").unwrap()..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut checked = std::collections::BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (default, flag) = (cells[2], cells[3]);
        let Some(pattern) = flag.strip_prefix("`--").and_then(|f| f.strip_suffix('`')) else {
            continue;
        };
        // One flag, or a family written with `*` whose defaults are listed in its order.
        let (prefix, suffix) = pattern.split_once('*').unwrap_or((pattern, ""));
        let family: Vec<_> = SETTINGS
            .iter()
            .filter(|s| {
                s.long().is_some_and(|long| {
                    if pattern.contains('*') {
                        long.starts_with(prefix) && long.ends_with(suffix)
                    } else {
                        long == pattern
                    }
                })
            })
            .collect();
        assert!(
            !family.is_empty(),
            "the limits table names {flag}, which is no flag"
        );
        let defaults: Vec<&str> = default.split(" / ").collect();
        if default.contains("CPU cores") {
            // Follows the machine: only the per-core figure can be compared.
            assert!(
                default.starts_with(&format!("{} ×", ankh::limits::WORKERS_PER_CORE))
                    || default.starts_with("1 ×"),
                "{row}"
            );
            checked.extend(family.iter().map(|s| s.key));
            continue;
        }
        assert_eq!(defaults.len(), family.len(), "{row}");
        for (setting, text) in family.iter().zip(defaults) {
            let Kind::Number { unit, .. } = setting.kind else {
                panic!("{row}: {} is not a number", setting.key);
            };
            let Value::Number(real) = (setting.default)() else {
                panic!("{} has no default", setting.key);
            };
            assert_eq!(
                table_number(text, unit),
                Some(real),
                "docs/operations.md's limits table: {} says {text:?}",
                setting.key
            );
            checked.insert(setting.key);
        }
    }
    for setting in SETTINGS.iter() {
        let bounded = ["limits.", "timeouts.", "outbound."]
            .iter()
            .any(|p| setting.key.starts_with(p));
        assert!(
            !bounded || checked.contains(setting.key),
            "{} (--{}) is missing from docs/operations.md's limits table",
            setting.key,
            setting.long().unwrap_or("")
        );
    }
}
