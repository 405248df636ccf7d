//! The example pages in a real browser, driven by the scripts in `tests/browser`
//! (playwright-core and headless Chromium): two pages of the chat example exchange messages
//! through the server, over WebSockets that negotiated permessage-deflate; and the ticker
//! example's Server-Sent Events resume after the last event id when a stream ends.
//!
//! Needs Debian's `chromium`, Node.js and `npm ci` in `tests/browser` (`.ci/run` installs all
//! three). Without them a test reports what is missing and passes, except under CI (`CI`
//! set), where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{Options, TestServer, plugins};

/// What the browser tests need: Debian's Chromium, Node.js, and `tests/browser` with its node
/// modules installed.
struct Browser {
    chromium: String,
    dir: PathBuf,
}

impl Browser {
    /// The prerequisites, or `None` when one is missing outside CI (the test then passes,
    /// saying what is missing); under CI a missing one fails the test.
    fn find() -> Option<Browser> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser");
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let missing: Vec<&str> = [
            (!Path::new(&chromium).exists()).then_some("chromium"),
            (Command::new("node").arg("--version").output().is_err()).then_some("node"),
            (!dir.join("node_modules/playwright-core").exists())
                .then_some("npm ci in tests/browser"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !missing.is_empty() {
            assert!(
                std::env::var_os("CI").is_none(),
                "browser test prerequisites missing under CI: {missing:?}"
            );
            eprintln!("skipping a browser test, missing: {missing:?} (see .ci/run)");
            return None;
        }
        Some(Browser { chromium, dir })
    }

    /// Runs `node tests/browser/SCRIPT http://ADDR` against `s` to its end, and returns what it
    /// printed; fails the test, with its output and the server's log, when it fails.
    fn run(&self, script: &str, s: &TestServer) -> String {
        let out = Command::new("node")
            .arg(self.dir.join(script))
            .arg(format!("http://{}", s.addr))
            .env("CHROMIUM", &self.chromium)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}\n{}", s.log());
        stdout
    }
}

#[test]
fn two_browser_pages_chat_through_the_server() {
    let Some(browser) = Browser::find() else {
        return;
    };
    let s = Options::default()
        .plugin(plugins::CHAT)
        .flag("--workers", 4)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start();
    let stdout = browser.run("chat.mjs", &s);
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

#[test]
fn an_event_source_in_a_browser_resumes_after_the_last_event_id() {
    let Some(browser) = Browser::find() else {
        return;
    };
    let s = Options::default().plugin(plugins::TICKER).start();
    // The script's own EventSource asks for 3 events a connection and reads 9: the server ends
    // each stream after 3, and Chromium reconnects with `Last-Event-ID` 3, then 6.
    let stdout = browser.run("sse.mjs", &s);
    assert!(stdout.contains("ids: 1,2,3,4,5,6,7,8,9\n"), "{stdout}");
    assert!(stdout.contains("resumed: 4,5,6,7,8,9\n"), "{stdout}");
    assert!(stdout.contains("connections: 1,4,7\n"), "{stdout}");
    // The page's own ticker and its token-by-token answer worked too.
    assert!(stdout.contains("page list: id 1: "), "{stdout}");
    assert!(stdout.contains("page list at /ticker: id 1: "), "{stdout}");
    assert!(stdout.contains("answer status: done, "), "{stdout}");
    // Those were separate requests, each answered with a stream (the page's own ticker adds
    // more). A stream's access line is written when it ends, so wait for the last one.
    s.wait_for_log_count("GET /ticker/events 200", 3);
}
