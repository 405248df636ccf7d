//! `ankh check FILE.wasm`: would the server accept this plugin, and on what terms? Compiles and
//! links the file exactly as `serve` would, without serving it, and prints its imports, its
//! exports and the limits it would run under.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use wasmtime::component::Component;

use crate::config::ServeConfig;
use crate::loader::{display_mount, plugin_name};
use crate::runtime::engine::{Runtime, RuntimeConfig};
use crate::runtime::plugin::Plugin;
use crate::runtime::registry::prefix_for;

/// The report, and whether the plugin would be served.
#[derive(Debug)]
pub struct Report {
    pub text: String,
    pub accepted: bool,
}

/// Checks `path` under `config`'s limits.
pub fn check(path: &Path, config: &ServeConfig) -> anyhow::Result<Report> {
    let runtime = Runtime::new(RuntimeConfig {
        workers: 1,
        memory_bytes: config.limits.guest_memory_bytes,
        cpu_deadline: config.limits.guest_cpu_deadline,
        pooling: false,
        cache_dir: config.cache_dir.clone(),
    })
    .context("cannot set up the wasm runtime")?;
    let mut text = String::new();
    let name = plugin_name(path);
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    let _ = writeln!(
        text,
        "file:     {} ({} KiB)",
        path.display(),
        size.div_ceil(1024)
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
    if let Ok(component) = Component::from_file(&runtime.engine, path) {
        let ty = component.component_type();
        let _ = writeln!(text, "imports:");
        for (import, _) in ty.imports(&runtime.engine) {
            let _ = writeln!(text, "  {import}");
        }
        let _ = writeln!(text, "exports:");
        for (export, _) in ty.exports(&runtime.engine) {
            let _ = writeln!(text, "  {export}");
        }
    }
    let limits = &config.limits;
    let _ = writeln!(text, "policy:");
    let _ = writeln!(
        text,
        "  cpu deadline:  {} ms per call",
        limits.guest_cpu_deadline.as_millis()
    );
    let _ = writeln!(
        text,
        "  memory cap:    {} MiB per instance",
        limits.guest_memory_bytes >> 20
    );
    let _ = writeln!(text, "  max body:      {} bytes", limits.max_body_bytes);
    let _ = writeln!(
        text,
        "  instances:     one per worker, reused across requests"
    );
    let _ = writeln!(
        text,
        "  capabilities:  clocks, random, stdout/stderr (into the log); no filesystem, network or environment"
    );
    let accepted = match (name, name.map(|n| Plugin::load(&runtime, n, path))) {
        (Some(_), Some(Ok(plugin))) => {
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
