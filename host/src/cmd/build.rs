//! `ankh build`: compile plugin crates to `NAME.wasm` components with cargo.
//!
//! Every crate directly under SRC (or SRC itself, if it is a crate) is built for
//! `wasm32-wasip2`, which yields a component directly. Cargo's own output goes to the
//! terminal unchanged, so a compile error reads exactly as `cargo build` shows it. Each result
//! is written next to its final name and renamed into place, so a server watching the output
//! directory never sees a half-written file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde::Deserialize;

/// The target plugins are built for.
pub(crate) const TARGET: &str = "wasm32-wasip2";

/// One built plugin.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    workspace_members: Vec<String>,
    workspace_root: PathBuf,
    target_directory: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Package {
    id: String,
    name: String,
    manifest_path: PathBuf,
    targets: Vec<Target>,
}

#[derive(Debug, Deserialize)]
struct Target {
    name: String,
    crate_types: Vec<String>,
}

/// A crate to build: its manifest, package name and library name.
#[derive(Debug)]
struct PluginCrate {
    manifest: PathBuf,
    package: String,
    lib: String,
    target_dir: PathBuf,
    /// The manifest cargo is invoked with: the workspace root's, so a workspace builds in one go.
    root_manifest: PathBuf,
}

/// Builds every plugin crate in `src` and writes `NAME.wasm` files into `out`.
pub(crate) fn build(src: &Path, out: &Path, release: bool) -> anyhow::Result<Vec<Built>> {
    build_matching(src, out, release, |_| true)
}

/// Builds the plugin crates in `src` whose directory `wanted` accepts.
pub(crate) fn build_matching(
    src: &Path,
    out: &Path,
    release: bool,
    wanted: impl Fn(&Path) -> bool,
) -> anyhow::Result<Vec<Built>> {
    if !src.is_dir() {
        bail!("plugin source directory {} does not exist", src.display());
    }
    check_target()?;
    let crates: Vec<PluginCrate> = find_crates(src)?
        .into_iter()
        .filter(|c| wanted(c.manifest.parent().unwrap_or(Path::new(""))))
        .collect();
    if crates.is_empty() {
        bail!(
            "no plugin crates found in {}: expected subdirectories with a Cargo.toml whose [lib] has crate-type = [\"cdylib\"]",
            src.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let profile = if release { "release" } else { "debug" };
    // Crates of one workspace are built by one cargo invocation.
    let mut by_manifest: Vec<(PathBuf, Vec<&PluginCrate>)> = Vec::new();
    for c in &crates {
        match by_manifest.iter_mut().find(|(m, _)| *m == c.root_manifest) {
            Some((_, list)) => list.push(c),
            None => by_manifest.push((c.root_manifest.clone(), vec![c])),
        }
    }
    for (manifest, list) in &by_manifest {
        let mut cmd = Command::new(cargo());
        cmd.arg("build")
            .arg("--target")
            .arg(TARGET)
            .arg("--manifest-path")
            .arg(manifest);
        if release {
            cmd.arg("--release");
        }
        for c in list {
            cmd.arg("-p").arg(&c.package);
        }
        let status = cmd
            .stdin(Stdio::null())
            .status()
            .context("cannot run cargo (is it on PATH?)")?;
        if !status.success() {
            bail!("cargo build failed for {} ({status})", manifest.display());
        }
    }
    let mut built = Vec::new();
    for c in &crates {
        let artifact = c
            .target_dir
            .join(TARGET)
            .join(profile)
            .join(format!("{}.wasm", c.lib));
        let dest = out.join(format!("{}.wasm", c.package));
        let tmp = out.join(format!(".{}.wasm.tmp", c.package));
        std::fs::copy(&artifact, &tmp)
            .with_context(|| format!("cannot copy {} to {}", artifact.display(), tmp.display()))?;
        std::fs::rename(&tmp, &dest)
            .with_context(|| format!("cannot move {} into place", dest.display()))?;
        let bytes = std::fs::metadata(&dest)?.len();
        built.push(Built {
            name: c.package.clone(),
            path: dest,
            bytes,
        });
    }
    Ok(built)
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// Fails with the command to run when the wasm target is missing. Only checked where rustup
/// manages the toolchain; otherwise cargo's own error will say it.
fn check_target() -> anyhow::Result<()> {
    let Ok(output) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output()
    else {
        return Ok(());
    };
    if !output.status.success() {
        return Ok(());
    }
    let installed = String::from_utf8_lossy(&output.stdout);
    if !installed.lines().any(|l| l.trim() == TARGET) {
        bail!(
            "the {TARGET} target is not installed; add it with:\n\n    rustup target add {TARGET}\n"
        );
    }
    Ok(())
}

/// The plugin crates in `src`: `src` itself if it is a package, else its direct
/// subdirectories that are packages with a `cdylib` library.
fn find_crates(src: &Path) -> anyhow::Result<Vec<PluginCrate>> {
    let mut manifests = Vec::new();
    if src.join("Cargo.toml").is_file() {
        manifests.push(src.join("Cargo.toml"));
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(src)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    manifests.extend(dirs.into_iter().map(|d| d.join("Cargo.toml")));

    let mut crates: Vec<PluginCrate> = Vec::new();
    for manifest in manifests {
        let meta = metadata(&manifest)?;
        let src_dir = std::fs::canonicalize(src)?;
        for pkg in &meta.packages {
            if !meta.workspace_members.contains(&pkg.id) {
                continue;
            }
            let pkg_dir = pkg.manifest_path.parent().unwrap_or(Path::new(""));
            let direct = pkg_dir == src_dir || pkg_dir.parent() == Some(src_dir.as_path());
            let lib = pkg
                .targets
                .iter()
                .find(|t| t.crate_types.iter().any(|k| k == "cdylib"));
            if let (true, Some(lib)) = (direct, lib) {
                if crates.iter().any(|c| c.manifest == pkg.manifest_path) {
                    continue;
                }
                crates.push(PluginCrate {
                    manifest: pkg.manifest_path.clone(),
                    package: pkg.name.clone(),
                    lib: lib.name.replace('-', "_"),
                    target_dir: meta.target_directory.clone(),
                    root_manifest: meta.workspace_root.join("Cargo.toml"),
                });
            }
        }
    }
    Ok(crates)
}

fn metadata(manifest: &Path) -> anyhow::Result<Metadata> {
    let output = Command::new(cargo())
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(manifest)
        .stdin(Stdio::null())
        .output()
        .context("cannot run cargo (is it on PATH?)")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed for {}:\n{}",
            manifest.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout)
        .with_context(|| format!("cannot read cargo metadata for {}", manifest.display()))
}
