//! Configuration values and secrets (issue 36): a plugin reads the values its policy declares
//! through `wasi:config/store`, resolved from the environment, the secrets file, the server's
//! config file and the policy's default, in that order; sees no other plugin's; a secret never
//! reaches the server's output; changed values take effect without a restart.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::harness::{Options, TempDir, TestServer, ankh_bin, plugins};

/// A secret no output of the server may hold.
const SECRET: &str = "s3cr3t-Zq81-never-printed";

/// The probe's policy: one value of each kind.
const POLICY: &str = r#"
[[config]]
name = "greeting"
default = "hello"

[[config]]
name = "region"
required = true

[[config]]
name = "api_key"
secret = true
required = true

[[config]]
name = "optional"
"#;

/// Runs the `ankh` binary with `args` (and the probe's required region in its environment):
/// whether it succeeded, and its stdout and stderr together.
fn ankh(args: &[&str]) -> (bool, String) {
    crate::harness::output_text(
        std::process::Command::new(ankh_bin())
            .args(args)
            .env("ANKH_VAR_CONFIGPROBE__REGION", "from-env"),
    )
}

/// Writes `text` to `dir/name` with `mode`, and gives its path.
fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A server with the probe as `configprobe` (its policy above) and as `other` (declaring
/// `api_key` too), a secrets file and a config file.
fn start(secrets: &Path, config: &Path) -> TestServer {
    options(secrets, config).start()
}

fn options(secrets: &Path, config: &Path) -> Options {
    Options::default()
        .plugin(plugins::CONFIGPROBE)
        .file("configprobe.toml", POLICY.as_bytes())
        .plugin_as("other", plugins::CONFIGPROBE)
        .file("other.toml", b"[[config]]\nname = \"api_key\"\n")
        .flag("--secrets", secrets.display())
        .flag("--config", config.display())
        .env("ANKH_VAR_CONFIGPROBE__REGION", "from-env")
        .arg("--admin")
        .arg("127.0.0.1:0")
}

fn files(dir: &TempDir) -> (PathBuf, PathBuf) {
    let secrets = write(
        dir.path(),
        "secrets.toml",
        &format!(
            "[configprobe]\napi_key = \"{SECRET}\"\nregion = \"from-secrets\"\n\n[other]\napi_key = \"other-key\"\n"
        ),
        0o600,
    );
    let config = write(
        dir.path(),
        "ankh.toml",
        "[[values]]\nplugin = \"configprobe\"\nname = \"greeting\"\nvalue = \"from-config-file\"\n",
        0o644,
    );
    (secrets, config)
}

#[test]
fn values_come_from_their_sources_in_order_and_each_plugin_sees_its_own() {
    let dir = TempDir::new("values");
    let (secrets, config) = files(&dir);
    let s = start(&secrets, &config);
    // The environment before the secrets file, the config file before the default.
    assert_eq!(
        s.get("/configprobe/get?name=region"),
        (200, "from-env".into())
    );
    assert_eq!(s.get("/configprobe/get?name=api_key"), (200, SECRET.into()));
    assert_eq!(
        s.get("/configprobe/get?name=greeting"),
        (200, "from-config-file".into())
    );
    assert_eq!(s.get("/configprobe/get?name=optional").0, 404);
    // Only what it declared: not another plugin's, not an undeclared name.
    assert_eq!(s.get("/configprobe/get?name=undeclared").0, 404);
    assert_eq!(s.get("/other/get?name=api_key"), (200, "other-key".into()));
    assert_eq!(s.get("/other/get?name=region").0, 404);
    assert_eq!(s.get("/other/all"), (200, "api_key=other-key\n".into()));
    assert_eq!(
        s.get("/configprobe/all").1,
        format!("api_key={SECRET}\ngreeting=from-config-file\nregion=from-env\n")
    );
}

#[test]
fn a_missing_required_value_refuses_only_that_plugin() {
    let dir = TempDir::new("values");
    let secrets = write(dir.path(), "secrets.toml", "", 0o600);
    let s = Options::default()
        .plugin(plugins::CONFIGPROBE)
        .file("configprobe.toml", POLICY.as_bytes())
        .plugin(plugins::HELLO)
        .flag("--secrets", secrets.display())
        .start();
    let log = s.wait_for_log("the required value");
    assert!(
        log.contains("plugin configprobe: the required value region is given nowhere")
            && log.contains("ANKH_VAR_CONFIGPROBE__REGION"),
        "{log}"
    );
    assert_eq!(s.get("/configprobe/get?name=greeting").0, 404);
    assert_eq!(s.get("/hello").0, 200);
    // Once the values are given, SIGHUP serves it.
    write(
        dir.path(),
        "secrets.toml",
        "[configprobe]\nregion = \"eu\"\napi_key = \"k\"\n",
        0o600,
    );
    s.signal("HUP");
    s.eventually("/configprobe/get?name=region", |status, body| {
        status == 200 && body == "eu"
    });
}

#[test]
fn a_secrets_file_others_may_read_is_refused_with_its_reason() {
    let dir = TempDir::new("values");
    let secrets = write(dir.path(), "secrets.toml", "[p]\nkey = \"x\"\n", 0o644);
    let (ok, out) = ankh(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--kv",
        "memory",
        "--secrets",
        secrets.to_str().unwrap(),
        "--plugins",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("refusing to read the secrets at") && out.contains("chmod 600"),
        "{out}"
    );
}

/// Every output of a run in which the secret was read, logged, panicked with and reloaded:
/// the log, `/metrics`, `ankh check`, `--print-config`, and the errors of a refused plugin.
#[test]
fn a_secret_never_reaches_the_servers_output() {
    let dir = TempDir::new("values");
    let (secrets, config) = files(&dir);
    // Its spans are an output too.
    let otlp = crate::otlp::Receiver::start();
    let s = options(&secrets, &config)
        .flag("--otlp-endpoint", otlp.endpoint())
        .start();
    assert_eq!(s.get("/configprobe/get?name=api_key").1, SECRET);
    assert_eq!(
        s.get("/configprobe/leak?name=api_key"),
        (200, "logged".into())
    );
    let (status, panic_body) = s.get("/configprobe/panic?name=api_key");
    assert_eq!(status, 500);
    // Its lines were written, with the secret masked. Each comes its own way (the log import at
    // once, captured stdout and stderr when flushed, the trap after the answer), so wait for each.
    for line in [
        "log has ***",
        "stdout has *** in it",
        "stderr has ***, twice: ***",
        "panicking with ***",
    ] {
        s.wait_for_log(line);
    }
    // A reload of its values (the secret changed).
    let secret2 = format!("{SECRET}-2");
    write(
        dir.path(),
        "secrets.toml",
        &format!("[configprobe]\napi_key = \"{secret2}\"\n"),
        0o600,
    );
    s.signal("HUP");
    s.eventually("/configprobe/get?name=api_key", |_, body| body == secret2);
    let metrics = crate::metrics::admin_get(s.admin_addr(), "/metrics").1;

    let wasm = s.plugins_dir().join("configprobe.wasm");
    let (secrets_arg, config_arg) = (secrets.to_str().unwrap(), config.to_str().unwrap());
    let (_, check) = ankh(&[
        "check",
        wasm.to_str().unwrap(),
        "--secrets",
        secrets_arg,
        "--config",
        config_arg,
    ]);
    assert!(check.contains("api_key"), "{check}");
    let (_, printed) = ankh(&[
        "serve",
        "--secrets",
        secrets_arg,
        "--config",
        config_arg,
        "--print-config",
    ]);
    assert!(printed.contains("secrets = "), "{printed}");
    // A bad secrets file is refused by line, not by content.
    write(
        dir.path(),
        "secrets.toml",
        &format!("[configprobe]\napi_key = \"{SECRET}\n"),
        0o600,
    );
    let plugins_dir = dir.path().to_str().unwrap();
    let (_, broken) = ankh(&[
        "serve",
        "--secrets",
        secrets_arg,
        "--listen",
        "127.0.0.1:0",
        "--kv",
        "memory",
        "--plugins",
        plugins_dir,
    ]);
    assert!(broken.contains("not valid TOML (line 2)"), "{broken}");

    let log = s.log();
    // The panicking call's spans, with their error status, have arrived.
    let spans = otlp.wait_for(crate::harness::PATIENCE, |spans| {
        spans.iter().any(|s| {
            s.error
                && s.attribute("url.path")
                    .is_some_and(|p| p.starts_with("/configprobe/panic"))
        })
    });
    let spans = format!("{spans:#?}");
    for (what, text) in [
        ("log", &log),
        ("answer to the panicking call", &panic_body),
        ("spans", &spans),
        ("metrics", &metrics),
        ("check", &check),
        ("print-config", &printed),
        ("refusal", &broken),
    ] {
        assert!(
            !text.contains(SECRET),
            "the secret is in the {what}:\n{text}"
        );
    }
}

/// New values take effect without a restart when the secrets file changes, and on SIGHUP for
/// the config file; requests made meanwhile all succeed, on the old values or the new.
/// The bounds a policy or a source cannot pass: more than 256 values declared, or a value
/// over 64 KiB (here a secret, from the environment), refuse that plugin with the reason
/// (never the value), and the other plugins serve.
#[test]
fn too_many_values_or_too_long_a_value_refuse_only_that_plugin() {
    let many: String = (0..257)
        .map(|i| format!("[[config]]\nname = \"v{i}\"\ndefault = \"x\"\n"))
        .collect();
    let big = "Q".repeat(64 * 1024 + 1);
    let s = Options::default()
        .plugin_as("many", plugins::CONFIGPROBE)
        .file("many.toml", many.as_bytes())
        .plugin_as("big", plugins::CONFIGPROBE)
        .file(
            "big.toml",
            b"[[config]]\nname = \"api_key\"\nsecret = true\n",
        )
        .env("ANKH_VAR_BIG__API_KEY", &big)
        .plugin(plugins::HELLO)
        .start();
    let log = s.wait_for_log("257 values declared");
    assert!(log.contains("257 values declared; at most 256"), "{log}");
    let log = s.wait_for_log("value api_key is 65537 bytes, over 65536");
    assert!(!log.contains(&big[..64]), "the value reached the log");
    assert_eq!(s.get("/many/get?name=v0").0, 404);
    assert_eq!(s.get("/big/get?name=api_key").0, 404);
    assert_eq!(s.get("/hello").0, 200);
}

#[test]
fn changed_values_take_effect_without_a_restart_or_a_lost_request() {
    let dir = TempDir::new("values");
    let (secrets, config) = files(&dir);
    let s = start(&secrets, &config);
    assert_eq!(s.get("/other/get?name=api_key").1, "other-key");
    let addr = s.url("");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Four clients at once, each on its own keep-alive connection, for as long as it takes.
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            let addr = addr.clone();
            std::thread::spawn(move || {
                let agent = crate::harness::agent();
                let mut seen = std::collections::BTreeSet::new();
                for _ in 0..100_000 {
                    if stop.load(std::sync::atomic::Ordering::Acquire) {
                        break;
                    }
                    let response = agent
                        .get(&format!("{addr}/other/get?name=api_key"))
                        .call()
                        .unwrap();
                    assert_eq!(response.status(), 200);
                    let mut body = response.into_body();
                    seen.insert(body.read_to_string().unwrap());
                }
                seen
            })
        })
        .collect();
    // The secrets file is rewritten in place: the watcher sees it.
    write(
        dir.path(),
        "secrets.toml",
        &format!("[configprobe]\napi_key = \"{SECRET}\"\n\n[other]\napi_key = \"rotated\"\n"),
        0o600,
    );
    s.eventually("/other/get?name=api_key", |_, body| body == "rotated");
    // The config file's values, on SIGHUP.
    std::fs::write(
        &config,
        "[[values]]\nplugin = \"configprobe\"\nname = \"greeting\"\nvalue = \"hup\"\n",
    )
    .unwrap();
    s.signal("HUP");
    s.eventually("/configprobe/get?name=greeting", |_, body| body == "hup");
    stop.store(true, std::sync::atomic::Ordering::Release);
    let seen: std::collections::BTreeSet<String> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    assert!(seen.contains("rotated"), "{seen:?}");
    assert!(
        seen.iter().all(|v| v == "other-key" || v == "rotated"),
        "{seen:?}"
    );
    s.wait_for_log("plugins' values read again (SIGHUP)");
}
