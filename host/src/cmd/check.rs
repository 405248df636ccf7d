//! `ankh check FILE.wasm`: would the server accept this plugin, and on what terms? Compiles and
//! links the file exactly as `serve` would, without serving it, and prints its imports, its
//! exports and the limits it would run under.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use ankh::config::ServeConfig;
use ankh::loader::plugin_name;
use ankh::runtime::engine::plugin::Plugin;
use ankh::runtime::engine::policy::Policy;
use ankh::runtime::engine::registry::display_mount;
use ankh::runtime::engine::registry::prefix_for;
use ankh::runtime::engine::{Runtime, RuntimeConfig};

/// Whether the plugin loaded, and as a WASI 0.3 component (whose instances serve requests
/// side by side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loaded {
    No,
    Yes { p3: bool },
}

/// The report, and whether the plugin would be served.
#[derive(Debug)]
pub(crate) struct Report {
    pub text: String,
    pub accepted: bool,
}

/// Checks `path` under `config`'s limits.
pub(crate) fn check(path: &Path, config: &ServeConfig) -> anyhow::Result<Report> {
    let runtime = Runtime::new(
        RuntimeConfig {
            limits: config.limits.clone(),
            pooling: false,
            cache_dir: config.cache_dir.clone(),
            // Checking runs start code only: it must not touch (or lock) the server's data.
            store: ankh::kv::Store::memory(),
            wasi_p3: config.wasi_p3,
            // The values the server would give it (a required one missing refuses it there
            // too); their names are reported, never the values.
            values: std::sync::Arc::new(ankh::runtime::engine::values::Sources::new(
                config.secrets.clone(),
                config.source.clone(),
                &config.values,
            )?),
        },
        Default::default(),
    )
    .context("cannot set up the wasm runtime")?;
    let mut text = String::new();
    let name = plugin_name(path);
    let metadata =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if metadata.is_dir() {
        anyhow::bail!(
            "{} is a directory: check one plugin file (NAME.wasm) at a time",
            path.display()
        );
    }
    let _ = writeln!(
        text,
        "file:     {} ({})",
        path.display(),
        size(metadata.len())
    );
    match name {
        Some(name) => {
            let _ = writeln!(
                text,
                "plugin:   {name}, mounted at {}",
                display_mount(&prefix_for(name))
            );
        }
        None => {
            let _ = writeln!(
                text,
                "plugin:   none: the file name must be NAME.wasm, NAME of letters, digits, '-', '_', '.'"
            );
        }
    }
    // Imports and exports, whenever the file is a component at all.
    if let Some((imports, exports)) = runtime.interfaces(path) {
        let _ = writeln!(text, "imports:");
        for import in imports {
            let _ = writeln!(text, "  {import}");
        }
        let _ = writeln!(text, "exports:");
        for export in exports {
            let _ = writeln!(text, "  {export}");
        }
    }
    let loaded = name.map(|n| Plugin::load(&runtime, n, path));
    // The policy the plugin runs under (its world may change a default: a proxy component
    // gets a fresh instance per request), or the file's, when the plugin does not load.
    match (name, &loaded) {
        (_, Some(Ok(plugin))) => describe(
            &plugin.policy,
            Loaded::Yes { p3: plugin.is_p3() },
            &mut text,
        ),
        (Some(name), _) => match Policy::for_plugin(path, name, &config.limits) {
            Ok(policy) => describe(&policy, Loaded::No, &mut text),
            Err(e) => {
                let _ = writeln!(text, "policy:   {}", e.message);
            }
        },
        (None, _) => {}
    }
    let accepted = match (name, loaded) {
        (Some(_), Some(Ok(plugin))) => {
            let _ = writeln!(text, "world:    {}", plugin.world());
            let _ = writeln!(
                text,
                "verdict:  accepted (compiled and instantiated in {} ms)",
                plugin.load_time.as_millis()
            );
            true
        }
        (_, Some(Err(e))) => {
            let _ = writeln!(text, "verdict:  refused: {e}");
            false
        }
        _ => {
            let _ = writeln!(text, "verdict:  refused: not a usable plugin file name");
            false
        }
    };
    Ok(Report { text, accepted })
}

/// A file size as a person reads it: bytes below a KiB, KiB below a MiB, then MiB.
fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{} KiB", bytes.div_ceil(1024)),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// The policy in words. `loaded`: the plugin loaded, so its world has set how its instances
/// are used.
fn describe(policy: &Policy, loaded: Loaded, text: &mut String) {
    let from = policy
        .source
        .as_ref()
        .map_or("server defaults".to_owned(), |p| p.display().to_string());
    let _ = writeln!(text, "policy:   ({from})");
    let routes: Vec<&str> = policy
        .routes
        .iter()
        .map(|r| {
            if r.is_empty() {
                "(fallback)"
            } else {
                r.as_str()
            }
        })
        .collect();
    let _ = writeln!(text, "  routes:        {}", routes.join(", "));
    let _ = writeln!(
        text,
        "  cpu deadline:  {} ms per call",
        policy.limits.guest_cpu_deadline.as_millis()
    );
    let _ = writeln!(
        text,
        "  time limit:    {} ms per call, waits included",
        policy.limits.handler_timeout.as_millis()
    );
    let _ = writeln!(
        text,
        "  memory cap:    {} MiB per instance",
        policy.limits.guest_memory_bytes >> 20
    );
    let _ = writeln!(
        text,
        "  max body:      {} bytes",
        policy.limits.max_body_bytes
    );
    if let Some(warning) = memory_warning(
        policy.limits.guest_memory_bytes as u64,
        policy.limits.max_body_bytes,
    ) {
        let _ = writeln!(text, "  warning:       {warning}");
    }
    let _ = writeln!(
        text,
        "  key-value:     {} bytes at most",
        policy.limits.kv_max_bytes
    );
    let _ = writeln!(
        text,
        "  websockets:    {}",
        if policy.limits.ws_compression {
            "permessage-deflate when the client offers it"
        } else {
            "uncompressed (ws_compression = false)"
        }
    );
    let _ = writeln!(
        text,
        "  concurrency:   {} calls at once (requests and WebSocket events)",
        policy.limits.max_concurrency
    );
    if let Some(cpu) = policy.cpu_per_minute {
        let _ = writeln!(
            text,
            "  cpu:           {} ms per minute, all calls together (then 503 until it refills)",
            cpu.as_millis()
        );
    }
    let mode = match (policy.fresh_instances, policy.recycle_after) {
        // The world decides how instances are used, and a plugin that does not load has none.
        _ if loaded == Loaded::No => "none: the plugin does not load".to_owned(),
        (false, recycle) if loaded == (Loaded::Yes { p3: true }) => format!(
            "{} requests at once each, replaced after {} requests (WASI 0.3)",
            policy.concurrent_requests,
            recycle.unwrap_or(ankh::limits::P3_REUSE_REQUESTS as u64)
        ),
        (true, _) => "a fresh instance per request".to_owned(),
        (false, Some(n)) => format!("one per worker, replaced after {n} calls"),
        (false, None) => "one per worker, reused across requests".to_owned(),
    };
    let _ = writeln!(text, "  instances:     {mode}");
    let clocks = if policy.precise_clocks {
        "precise clocks"
    } else {
        "clocks (100 µs steps)"
    };
    let _ = writeln!(
        text,
        "  capabilities:  {clocks}, random, stdout/stderr (into the log)"
    );
    for (name, _) in &policy.env {
        let _ = writeln!(text, "                 env {name}");
    }
    for dir in &policy.dirs {
        let rw = if dir.writable {
            "read-write"
        } else {
            "read-only"
        };
        let _ = writeln!(
            text,
            "                 dir {} as {} ({rw})",
            dir.host.display(),
            dir.guest
        );
    }
    for addr in &policy.network {
        let _ = writeln!(text, "                 tcp to {addr}");
    }
    for grant in policy.http.iter() {
        let _ = writeln!(text, "                 http to {grant}");
    }
    if policy.env.is_empty()
        && policy.dirs.is_empty()
        && policy.network.is_empty()
        && policy.http.is_empty()
    {
        let _ = writeln!(
            text,
            "                 no filesystem, network or environment"
        );
    }
    // The values it reads: names and kinds, never a value.
    for value in &policy.config {
        let kind = match (value.secret, value.required, &value.default) {
            (true, true, _) => "secret, required".to_owned(),
            (true, false, _) => "secret".to_owned(),
            (false, true, _) => "required".to_owned(),
            (false, false, Some(_)) => "with a default".to_owned(),
            (false, false, None) => "optional".to_owned(),
        };
        let _ = writeln!(text, "  value:         {} ({kind})", value.name);
    }
    for schedule in &policy.schedules {
        let _ = writeln!(
            text,
            "  schedule:      {}: {}",
            schedule.name,
            schedule.describe()
        );
    }
}

/// A warning when an instance's memory cannot hold the largest body it may be sent twice:
/// once as the call receives it (the host writes the request into the instance) and once
/// more for whatever the handler makes of it (a parse, a copy, the response), with a MiB for
/// the plugin itself. Below that, the largest accepted bodies end in a trap and a 500.
fn memory_warning(memory_bytes: u64, max_body_bytes: u64) -> Option<String> {
    let needed = max_body_bytes.saturating_mul(2).saturating_add(1 << 20);
    (memory_bytes < needed).then(|| {
        format!(
            "the memory cap ({} MiB) cannot hold the largest body this plugin accepts ({} bytes) twice, \
             as a handler that reads it and answers needs (a request near the limit would fail with 500); \
             raise `memory_limit_mib` or lower `max_body_bytes` in its policy (at least {} MiB for this body limit)",
            memory_bytes >> 20,
            max_body_bytes,
            needed.div_ceil(1 << 20)
        )
    })
}

#[cfg(test)]
mod memory_tests {
    use super::memory_warning;

    #[test]
    fn a_cap_that_cannot_hold_the_body_twice_is_warned_about() {
        // The defaults: 64 MiB for 16 MiB bodies.
        assert_eq!(memory_warning(64 << 20, 16 << 20), None);
        let warning = memory_warning(16 << 20, 16 << 20).unwrap();
        assert!(warning.contains("(16 MiB)"), "{warning}");
        assert!(warning.contains("at least 33 MiB"), "{warning}");
    }
}
