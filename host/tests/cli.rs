//! The `ankh` command line on its own: readable errors and exit codes for `serve`, `--help`
//! and `--version`. (Serving and building plugins end to end is tested in `tests/`.)

use std::path::PathBuf;
use std::process::{Command, Output};

fn ankh(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ankh"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An empty directory that exists for the length of a test.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("ankh-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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
