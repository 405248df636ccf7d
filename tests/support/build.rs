//! Builds the example plugins (`plugins/`) and the misbehaving test plugins (`tests/plugins/`)
//! for wasm32-wasip2, and generates a constant with the path of each `.wasm` file, so the tests
//! always run against plugins built from the current sources.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

// The builder the library exports too (`ankh_test_support::build_plugins`); a build script
// cannot depend on its own crate, so it compiles the file itself.
#[allow(dead_code, unreachable_pub)]
#[path = "src/build_plugins.rs"]
mod build_plugins;

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    // tests/support -> the repository root.
    let root = manifest_dir
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let target_dir = build_plugins::target_dir(&root);

    let workspaces = [root.join("plugins"), root.join("tests/plugins")];
    for dir in &workspaces {
        watch(dir);
    }
    watch(&root.join("guest-sdk"));
    watch(&root.join("wit"));

    let mut consts = String::new();
    for ws in &workspaces {
        let built = build_plugins::build(ws, &target_dir, &[]);
        for name in build_plugins::members(ws) {
            let wasm = built.join(build_plugins::wasm_file(&name));
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
