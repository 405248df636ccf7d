//! The command line: readable errors and exit codes for `serve`, `--help`, `--version`, and
//! `ankh build` from a fresh plugin crate to a served response.

use std::process::{Command, Output};

use crate::harness::{BUILD_PATIENCE, Options, TempDir, ankh_bin, plugins};

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

#[test]
fn serve_logs_what_it_loaded() {
    let s = Options::default().plugin(plugins::HELLO).start();
    let log = s.log();
    assert!(log.contains("loaded in"), "{log}");
    assert!(log.contains("plugin=hello mount=/hello"), "{log}");
}

/// The README's ten-line plugin, read from the README itself, so what it shows is what this
/// test builds and serves.
fn ten_line_plugin() -> String {
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(readme).unwrap();
    let section = &readme[readme.find("## A ten-line plugin").unwrap()..];
    let start = section.find("```rust\n").unwrap() + "```rust\n".len();
    let code = &section[start..start + section[start..].find("```").unwrap()];
    let lines = code.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(
        lines <= 10,
        "the README's ten-line plugin has {lines} lines"
    );
    code.to_owned()
}

fn new_crate(root: &std::path::Path, name: &str, lib_rs: &str) {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\nankh-guest = {{ path = {:?} }}\n\n[workspace]\n",
            sdk.canonicalize().unwrap().display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), lib_rs).unwrap();
}

#[test]
fn build_then_serve_a_new_plugin() {
    let src = TempDir::new("build-src");
    let out = TempDir::new("build-out");
    new_crate(src.path(), "greeter", &ten_line_plugin());
    let result = Command::new(ankh_bin())
        .arg("build")
        .arg(src.path())
        .arg("--out")
        .arg(out.path())
        .env("CARGO_TARGET_DIR", crate_target_dir())
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", stderr(&result));
    let wasm = out.path().join("greeter.wasm");
    assert!(wasm.is_file());
    assert!(String::from_utf8_lossy(&result.stdout).contains("built greeter"));
    let s = Options::default().plugin(wasm.to_str().unwrap()).start();
    assert_eq!(
        s.get("/greeter"),
        (200, "Hello from a new plugin!".to_owned())
    );
    assert_eq!(s.get("/greeter/greet/Ada"), (200, "Hello, Ada!".to_owned()));
}

#[test]
fn build_shows_compile_errors_as_cargo_does() {
    let src = TempDir::new("build-bad");
    new_crate(src.path(), "broken", "this is not rust\n");
    let result = Command::new(ankh_bin())
        .arg("build")
        .arg(src.path())
        .env("CARGO_TARGET_DIR", crate_target_dir())
        .output()
        .unwrap();
    assert!(!result.status.success());
    let err = stderr(&result);
    assert!(err.contains("error: expected one of"), "{err}");
    assert!(err.contains("src/lib.rs:1"), "{err}");
    assert!(err.contains("cargo build failed"), "{err}");
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

/// One target directory for every crate these tests build, kept between runs.
fn crate_target_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("ankh-cli-build-target")
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
    let metrics = crate::admin::scrape(crate::admin::admin_addr(&s));
    for (class, count) in [("2xx", 8.0), ("5xx", 8.0)] {
        let name = "ankh_plugin_responses_total";
        let labels = [("plugin", "badanswer"), ("class", class)];
        assert_eq!(
            crate::admin::value(&metrics, name, &labels),
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
        "exports:\n  ankh:plugin/packed-handler@0.2.0\n  ankh:plugin/handler@0.2.0\n  ankh:plugin/websocket-handler@0.2.0",
        "world:    ankh:plugin@0.2.0 (requests as two buffers, answers as one: packed-handler)",
        "wasi:cli/stdout@0.2",
        "cpu deadline:  750 ms per call",
        "verdict:  accepted",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
    }
    let refused = Command::new(ankh_bin())
        .args(["check", plugins::NOWORLD, "--no-cache"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let out = String::from_utf8_lossy(&refused.stdout);
    assert!(
        out.contains("verdict:  refused:")
            && out.contains("no exported instance named `ankh:plugin/handler@0.2.0`"),
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
        .start_with_env("RUST_LOG", None);
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
        .start_with_env("RUST_LOG", None);
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
fn new_then_build_then_serve_then_request() {
    let dir = TempDir::new("new");
    let out = Command::new(ankh_bin())
        .args(["new", "greeter", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("created"));
    // The template's own test passes.
    let test = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["test", "--quiet", "--manifest-path"])
        .arg(dir.path().join("greeter/Cargo.toml"))
        .env("CARGO_TARGET_DIR", crate_target_dir())
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        stderr(&test)
    );
    // It builds untouched, and serves.
    let built = TempDir::new("new-out");
    let build = Command::new(ankh_bin())
        .arg("build")
        .arg(dir.path())
        .arg("--out")
        .arg(built.path())
        .env("CARGO_TARGET_DIR", crate_target_dir())
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", stderr(&build));
    let wasm = built.path().join("greeter.wasm");
    let s = Options::default().plugin(wasm.to_str().unwrap()).start();
    assert_eq!(s.get("/greeter"), (200, "greeter is running\n".to_owned()));
    let (status, body) = s.get("/greeter/hello/Ada");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"greeting": "Hello, Ada!", "plugin": "greeter"})
    );
    // Refusals: a bad name, an existing crate.
    let bad = ankh_in(dir.path(), &["new", "Bad Name"]);
    assert!(!bad.status.success() && stderr(&bad).contains("invalid plugin name"));
    let again = Command::new(ankh_bin())
        .args(["new", "greeter", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!again.status.success() && stderr(&again).contains("already exists"));
}

fn ankh_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(ankh_bin())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn dev_rebuilds_on_save_and_keeps_serving_through_errors() {
    let dir = TempDir::new("dev");
    let made = Command::new(ankh_bin())
        .args(["new", "devplug", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let options = Options {
        command: vec![
            "dev".into(),
            dir.path().to_str().unwrap().into(),
            "--debug".into(),
        ],
        env: vec![(
            "CARGO_TARGET_DIR".into(),
            crate_target_dir().to_str().unwrap().into(),
        )],
        ..Options::default()
    };
    // The server answers at once; the first build (cold: minutes) is swapped in when done.
    let s = options.start();
    s.eventually_within(BUILD_PATIENCE, "/devplug", |st, body| {
        st == 200 && body == "devplug is running\n"
    });
    // Save an edit: rebuilt and swapped in.
    let lib = dir.path().join("devplug/src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, source.replace("is running", "was edited")).unwrap();
    s.eventually("/devplug", |st, body| {
        st == 200 && body == "devplug was edited\n"
    });
    s.wait_for_log("ankh dev: rebuilt devplug");
    // Save a mistake: the compiler's error is shown, the last good version keeps serving.
    std::fs::write(&lib, "this is not rust\n").unwrap();
    let log = s.wait_for_log("failed to build");
    assert!(log.contains("error"), "{log}");
    assert_eq!(s.get("/devplug"), (200, "devplug was edited\n".to_owned()));
}
