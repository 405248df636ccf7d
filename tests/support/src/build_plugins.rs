//! Plugins built from source: `cargo build --release --target wasm32-wasip2` of a plugin
//! workspace (`plugins/`, `tests/plugins/`), run from a build script or a test or bench.
//!
//! Written once for both callers: `build.rs` compiles this file as a module of its own
//! (`#[path]`; a build script cannot depend on its own crate), and the library exports it as
//! [`crate::build_plugins`].

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The plugins' target.
pub const TARGET: &str = "wasm32-wasip2";

/// Where the plugins of both workspaces are built: `wasm-plugins` under the target directory
/// (`$CARGO_TARGET_DIR`, or `target` in the repository root `root`).
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("wasm-plugins")
}

/// The file a plugin package builds to, in the directory [`build`] returns: `my-plugin`
/// becomes `my_plugin.wasm`.
pub fn wasm_file(package: &str) -> String {
    format!("{}.wasm", package.replace('-', "_"))
}

/// The package names of a plugin workspace's members (`name = ...` in each member's
/// Cargo.toml), sorted.
pub fn members(workspace: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(workspace).unwrap().flatten() {
        let manifest = entry.path().join("Cargo.toml");
        let name = std::fs::read_to_string(&manifest).ok().and_then(|text| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|n| n.trim_matches('"').to_owned())
        });
        names.extend(name);
    }
    names.sort();
    names
}

/// Builds `packages` (all members when empty) of the plugin workspace `workspace` for
/// [`TARGET`] in release mode into `target_dir`, and returns the directory the `.wasm` files
/// are in. Panics when the build fails.
pub fn build(workspace: &Path, target_dir: &Path, packages: &[&str]) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--target", TARGET, "--manifest-path"])
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    for package in packages {
        cmd.args(["-p", package]);
    }
    // The outer build's settings (clippy's wrapper, flags, the host target) must not leak
    // into the wasm build.
    for (key, _) in std::env::vars_os() {
        if leaks(&key) {
            cmd.env_remove(&key);
        }
    }
    let status = cmd.status().expect("running cargo for the wasm plugins");
    if !status.success() {
        panic!(
            "building the plugins in {} failed; is the target installed? `rustup target add {TARGET}`",
            workspace.display()
        );
    }
    target_dir.join(TARGET).join("release")
}

/// Whether the environment variable `key`, set by the cargo that runs us (for a build
/// script, a test or a bench), would change the plugins' build.
fn leaks(key: &OsStr) -> bool {
    let key = key.to_string_lossy();
    (key.starts_with("CARGO_") && key != "CARGO_HOME")
        || key.starts_with("RUSTC")
        || key.starts_with("RUSTDOC")
        || [
            "RUSTFLAGS",
            "TARGET",
            "HOST",
            "OUT_DIR",
            "PROFILE",
            "OPT_LEVEL",
            "DEBUG",
            "NUM_JOBS",
        ]
        .contains(&key.as_ref())
}
