//! Builds the example plugins (`plugins/`) and the misbehaving test plugins (`tests/plugins/`)
//! for wasm32-wasip2, and generates a constant with the path of each `.wasm` file, so the tests
//! always run against plugins built from the current sources.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    // tests/support -> the repository root.
    let root = manifest_dir
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("wasm-plugins");

    let workspaces = [root.join("plugins"), root.join("tests/plugins")];
    for dir in &workspaces {
        watch(dir);
    }
    watch(&root.join("guest-sdk"));
    watch(&root.join("wit"));

    let mut consts = String::new();
    for ws in &workspaces {
        build(ws, &target_dir);
        for name in members(ws) {
            let wasm = target_dir
                .join(TARGET)
                .join("release")
                .join(format!("{}.wasm", name.replace('-', "_")));
            assert!(wasm.is_file(), "{} was not built", wasm.display());
            writeln!(
                consts,
                "/// `{name}.wasm`, built from source.\npub const {}: &str = {:?};",
                name.to_uppercase().replace('-', "_"),
                wasm.display().to_string()
            )
            .unwrap();
        }
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("plugins.rs");
    std::fs::write(out, consts).unwrap();
}

/// Re-run when sources change, but not when build outputs do.
fn watch(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "target" || name.ends_with(".wasm") || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            watch(&path);
        } else {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The package names of a plugin workspace's members (`members = [...]` in its Cargo.toml).
fn members(ws: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(ws).unwrap().flatten() {
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

fn build(ws: &Path, target_dir: &Path) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--target", TARGET, "--manifest-path"])
        .arg(ws.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    // The outer build's settings (clippy's wrapper, flags, the host target) must not leak
    // into the wasm build.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let leaks = (key.starts_with("CARGO_") && key != "CARGO_HOME")
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
            .contains(&key.as_str());
        if leaks {
            cmd.env_remove(&key);
        }
    }
    let status = cmd.status().expect("running cargo for the wasm plugins");
    if !status.success() {
        panic!(
            "building the plugins in {} failed; is the target installed? `rustup target add {TARGET}`",
            ws.display()
        );
    }
}
