//! The chat example in a real browser: two headless Chromium pages, driven by
//! `tests/browser/chat.mjs` (playwright-core), exchange messages through the server, over
//! WebSockets that negotiated permessage-deflate.
//!
//! Needs Debian's `chromium`, Node.js and `npm ci` in `tests/browser` (`.ci/run` installs all
//! three). Without them the test reports what is missing and passes, except under CI (`CI`
//! set), where it fails.

use std::path::Path;
use std::process::Command;

use crate::harness::{Options, plugins};

#[test]
fn two_browser_pages_chat_through_the_server() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let missing: Vec<&str> = [
        (!Path::new(&chromium).exists()).then_some("chromium"),
        (Command::new("node").arg("--version").output().is_err()).then_some("node"),
        (!dir.join("node_modules/playwright-core").exists()).then_some("npm ci in tests/browser"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !missing.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "browser test prerequisites missing under CI: {missing:?}"
        );
        eprintln!("skipping the browser test, missing: {missing:?} (see .ci/run)");
        return;
    }
    let s = Options::default()
        .plugin(plugins::CHAT)
        .flag("--workers", 4)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let out = Command::new("node")
        .arg(dir.join("chat.mjs"))
        .arg(format!("http://{}", s.addr))
        .env("CHROMIUM", &chromium)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}\n{}", s.log());
    assert!(
        stdout.contains("alice: hello from alice") && stdout.contains("bob: hi alice, bob here"),
        "{stdout}"
    );
    // Issue 16: Chromium negotiated permessage-deflate, and the long line crossed compressed.
    assert!(
        stdout.contains("extensions: permessage-deflate; server_no_context_takeover"),
        "{stdout}"
    );
    assert!(stdout.contains("bob: a long line 0123456789"), "{stdout}");
    // Chromium compresses what it sends (the server inflated it), and the server compressed
    // the long line it relayed to both pages.
    let admin = crate::metrics::admin_addr(&s);
    crate::metrics::scrape_when(admin, "ankh_ws_messages_inflated_total", 1.0);
    crate::metrics::scrape_when(admin, "ankh_ws_compressed_frames_total", 2.0);
}
