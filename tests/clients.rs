//! Clients nobody here wrote: Node's `fetch`, `node:http` and `WebSocket`, and Python's
//! websocket-client, where a defect was seen with them (issue 12), each scenario 20 times in a
//! row, all 20 right; and Node's `WebSocket` and Python's `websockets` negotiating
//! compression (issue 16).
//!
//! Needs Node.js (Debian's `nodejs`) and, for the Python clients, `websocket-client` and
//! `websockets` in `target/py-venv` (see `tests/clients/requirements.txt`; `.ci/run` installs
//! them). Without them a test says what is missing and passes, except under CI (`CI` set),
//! where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{Options, plugins};

const TRIES: usize = 20;

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients")
}

/// `true` when `what` can run; otherwise skips (or, under CI, fails) naming the package.
fn available(what: &str, ok: bool, package: &str) -> bool {
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what} missing under CI (install {package})"
        );
        eprintln!("skipping: {what} not found (install {package}; see .ci/run)");
    }
    ok
}

fn node() -> bool {
    let ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    available("node", ok, "Debian's nodejs")
}

/// The Python that has websocket-client, if any.
fn python_with_websocket_client() -> Option<PathBuf> {
    python_with("websocket", "websocket-client")
}

/// The Python in `target/py-venv` that can import `module` (of `package`), if any.
fn python_with(module: &str, package: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let python = root.join("target/py-venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    available(
        &format!("{package} in target/py-venv"),
        ok,
        "tests/clients/requirements.txt into target/py-venv",
    )
    .then_some(python)
}

/// Runs a client script and returns its lines, failing the test if it failed.
fn run(command: &mut Command) -> Vec<String> {
    let out = command.output().expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().map(str::to_owned).collect()
}

// See: issue 12, item 1. Before: Node's fetch saw EPIPE in 18 of 20 tries, node:http in 19.
#[test]
fn issue12_1_node_clients_read_the_413_while_they_are_still_uploading() {
    if !node() {
        return;
    }
    let s = Options::default().plugin(plugins::ECHO).start();
    let url = s.url("/echo");
    // 20 MB against the default 16 MiB limit: declared up front, and streamed chunked.
    for mode in ["fetch", "http", "stream"] {
        let lines = run(Command::new("node")
            .arg(scripts().join("upload.mjs"))
            .args([&url, &TRIES.to_string(), "20000000", mode]));
        assert_eq!(lines, vec!["413"; TRIES], "{mode}:\n{}", s.log());
    }
    // And the server kept serving.
    assert_eq!(s.get("/echo").0, 200);
}

// See: issue 12, item 2. Before: Node saw 1006 or an unclean close, websocket-client raised
// BrokenPipeError in 20 of 20 tries and never saw 1009.
#[test]
fn issue12_2_clients_see_1009_and_a_clean_close_for_a_message_too_big() {
    let s = Options::default().plugin(plugins::WSECHO).start();
    let url = format!("ws://{}/wsecho", s.addr);
    if node() {
        let lines = run(Command::new("node")
            .arg("--experimental-websocket")
            .arg(scripts().join("ws_big.mjs"))
            .args([&url, &TRIES.to_string(), "4000000"]));
        assert_eq!(lines, vec!["1009 clean"; TRIES], "{}", s.log());
    }
    if let Some(python) = python_with_websocket_client() {
        let lines = run(Command::new(python).arg(scripts().join("ws_big.py")).args([
            &url,
            &TRIES.to_string(),
            "4000000",
        ]));
        assert_eq!(lines, vec!["1009"; TRIES], "{}", s.log());
    }
}

// See: issue 16. Node's own WebSocket (undici) offers permessage-deflate: it is agreed, and
// long, binary, incompressible and short messages all come back unchanged. undici inflates
// what it receives but sends its own messages uncompressed (RFC 7692 lets each message
// choose): the server's counters show its answers went out compressed and nothing needed
// inflating.
#[test]
fn issue16_node_negotiates_compression_and_every_message_round_trips() {
    if !node() {
        return;
    }
    let s = Options::default()
        .plugin(plugins::WSECHO)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let lines = run(Command::new("node")
        .arg("--experimental-websocket")
        .arg(scripts().join("ws_deflate.mjs"))
        .arg(format!("ws://{}/wsecho", s.addr)));
    assert_eq!(
        lines,
        vec![
            "extensions: permessage-deflate; server_no_context_takeover",
            "echo ok 4",
            "close 1000"
        ],
        "{}",
        s.log()
    );
    let metrics = crate::metrics::scrape_when(
        crate::metrics::admin_addr(&s),
        "ankh_ws_compressed_frames_total",
        2.0,
    );
    let value = |name| crate::metrics::value(&metrics, name, &[]);
    // The long text and the compressible binary; the noise and the short text went plain.
    assert_eq!(value("ankh_ws_compressed_frames_total"), 2.0);
    assert_eq!(value("ankh_ws_messages_deflated_total"), 2.0);
}

// See: issue 16. Python's `websockets` compresses what it sends with its context kept across
// messages (as browsers do), so the server inflates each message against the window of what
// came before: 51 messages, every echo exact, every one of them inflated.
#[test]
fn issue16_python_websockets_compresses_with_context_takeover_both_ways() {
    let Some(python) = python_with("websockets", "websockets") else {
        return;
    };
    let s = Options::default()
        .plugin(plugins::WSECHO)
        .flag("--ws-max-message-bytes", 1 << 20)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let lines = run(Command::new(python)
        .arg(scripts().join("ws_deflate.py"))
        .arg(format!("ws://{}/wsecho", s.addr)));
    assert_eq!(
        lines,
        vec![
            "extensions: permessage-deflate; server_no_context_takeover",
            "echo ok 51"
        ],
        "{}",
        s.log()
    );
    let admin = crate::metrics::admin_addr(&s);
    crate::metrics::scrape_when(admin, "ankh_ws_messages_inflated_total", 51.0);
    let metrics = crate::metrics::scrape_when(admin, "ankh_ws_compressed_frames_total", 51.0);
    let value = |name| crate::metrics::value(&metrics, name, &[]);
    assert_eq!(value("ankh_ws_messages_inflated_total"), 51.0);
    assert_eq!(value("ankh_ws_compressed_frames_total"), 51.0);
}
