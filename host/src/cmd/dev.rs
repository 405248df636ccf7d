//! `ankh dev`: serve a directory of plugin crates at once, build them all, and rebuild a crate
//! whenever one of its source files is saved. Each built `NAME.wasm` is renamed into place, so
//! the server's hot reload swaps it in; a build that fails leaves the previous version serving.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Context;
use notify::event::ModifyKind;
use notify::{EventKind, RecursiveMode, Watcher};

use super::build as builder;

/// How long sources must be quiet before a rebuild starts (editors save in bursts).
const SETTLE: Duration = Duration::from_millis(300);

/// Builds every crate in `src` into `src`, then rebuilds each crate whose sources change, on
/// this thread, until the watcher fails. The watcher starts first, so a save made during the
/// first build (which may take minutes with a cold cache) is not missed. Cargo's output goes
/// to the terminal as it is.
pub(crate) fn watch_and_rebuild(src: &Path, release: bool) -> anyhow::Result<()> {
    let src = std::fs::canonicalize(src)
        .with_context(|| format!("plugin source directory {} does not exist", src.display()))?;
    let (tx, rx) = mpsc::channel::<notify::Result<notify::Event>>();
    let mut watcher = notify::recommended_watcher(move |e| {
        let _ = tx.send(e);
    })?;
    watch_sources(&mut watcher, &src, &src)?;
    if let Err(e) = builder::build(&src, &src, release) {
        eprintln!("ankh dev: the first build failed ({e:#}); serving what is there");
    }
    let mut dirty: HashMap<PathBuf, Instant> = HashMap::new();
    loop {
        match rx.recv_timeout(SETTLE / 3) {
            Ok(Ok(event)) if changes_content(&event.kind) => {
                if matches!(event.kind, EventKind::Create(_)) {
                    for path in event.paths.iter().filter(|p| p.is_dir()) {
                        if let Err(e) = watch_sources(&mut watcher, &src, path) {
                            tracing::warn!("cannot watch {}: {e}", path.display());
                        }
                    }
                }
                for path in event.paths {
                    if let Some(krate) = crate_of(&src, &path) {
                        dirty.insert(krate, Instant::now());
                    }
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("source watcher error: {e}"),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        let ready: Vec<PathBuf> = dirty
            .iter()
            .filter(|(_, t)| t.elapsed() >= SETTLE)
            .map(|(p, _)| p.clone())
            .collect();
        for krate in ready {
            dirty.remove(&krate);
            rebuild(&src, &krate, release);
        }
    }
}

/// Watches the sources under `dir` (`src` itself, a crate in it, or a directory in a crate),
/// and nothing else: not `target/` (cargo's output, which churns through thousands of files
/// during a build), not hidden directories, not directories beside the crates.
fn watch_sources(watcher: &mut impl Watcher, src: &Path, dir: &Path) -> notify::Result<()> {
    let Ok(rel) = dir.strip_prefix(src) else {
        return Ok(());
    };
    let skipped =
        |name: &std::ffi::OsStr| name == "target" || name.to_string_lossy().starts_with('.');
    if rel.components().any(|c| skipped(c.as_os_str())) {
        return Ok(());
    }
    match rel.components().count() {
        // `src`: new crates appear here.
        0 => {
            watcher.watch(dir, RecursiveMode::NonRecursive)?;
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if entry.path().join("Cargo.toml").is_file() {
                    watch_sources(watcher, src, &entry.path())?;
                }
            }
        }
        // A crate: its Cargo.toml here, its sources in its directories but `target/`.
        1 => {
            watcher.watch(dir, RecursiveMode::NonRecursive)?;
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if entry.path().is_dir() {
                    watch_sources(watcher, src, &entry.path())?;
                }
            }
        }
        2 => watcher.watch(dir, RecursiveMode::Recursive)?,
        // Inside a watched directory already.
        _ => {}
    }
    Ok(())
}

/// Whether an event can change what a build produces: a file created, written, renamed or
/// removed. Opening, reading and closing a file, or changing only its metadata, cannot: cargo
/// itself opens every crate's `Cargo.toml` on each build, so counting those would rebuild
/// forever.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Any => true,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(_) | EventKind::Other => false,
    }
}

/// The crate directory a changed source file belongs to: a direct subdirectory of `src` with
/// a Cargo.toml. Build outputs (`target/`, `.wasm` files, and the `Cargo.lock` cargo writes)
/// are not sources.
fn crate_of(src: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(src).ok()?;
    let first = rel.components().next()?;
    if rel.components().any(|c| c.as_os_str() == "target")
        || path.extension().is_some_and(|e| e == "wasm" || e == "tmp")
        || path.file_name().is_some_and(|n| n == "Cargo.lock")
        || rel.components().count() < 2
    {
        return None;
    }
    let krate = src.join(first);
    krate.join("Cargo.toml").is_file().then_some(krate)
}

fn rebuild(src: &Path, krate: &Path, release: bool) {
    let name = krate
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    eprintln!("ankh dev: {name} changed, rebuilding…");
    let started = Instant::now();
    match builder::build_matching(src, src, release, |dir| dir == krate) {
        Ok(built) => {
            for b in built {
                eprintln!(
                    "ankh dev: rebuilt {} in {:.1} s; swapping it in",
                    b.name,
                    started.elapsed().as_secs_f64()
                );
            }
        }
        Err(e) => eprintln!(
            "ankh dev: {name} failed to build ({e:#}); the previous version keeps serving"
        ),
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, RemoveKind, RenameMode,
    };

    use super::*;

    #[test]
    fn only_content_changes_count() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Access(AccessKind::Read),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::WriteTime)),
            EventKind::Other,
        ] {
            assert!(!changes_content(&kind), "{kind:?}");
        }
        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Any),
        ] {
            assert!(changes_content(&kind), "{kind:?}");
        }
    }
}
