//! Hot reload: the plugins directory is watched, and a new or changed `NAME.wasm` is compiled
//! off the I/O thread and off the workers, then swapped in. Requests that start after the swap
//! use it; requests already running finish on the version they started with; workers drop
//! their old instances the next time they meet the plugin. Deleting the file unmounts it.
//!
//! Writers rarely write atomically, so events are debounced: a file is looked at only once it
//! has been quiet for [`DEBOUNCE`] and its size and modification time held still across that
//! time. A burst of writes coalesces to its final state. A file renamed into place is complete
//! by construction and is loaded at once. A file that fails to compile, link or
//! instantiate is refused with the reason, and the previous version keeps serving.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use notify::event::{ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::loader::plugin_name;
use crate::runtime::engine::Runtime;
use crate::runtime::plugin::{Plugin, version_digest};
use crate::runtime::registry::Registry;

/// How long a file must be quiet (no events, same size and time) before it is loaded.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// Keeps the watcher alive; dropping it stops watching.
pub struct Reloader {
    _watcher: notify::RecommendedWatcher,
    _thread: JoinHandle<()>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").finish_non_exhaustive()
    }
}

/// What the reload thread knows about one file.
#[derive(Debug, Default)]
struct Pending {
    last_event: Option<Instant>,
    /// Size and modification time at the last look, to see that the writer is done.
    seen: Option<(u64, SystemTime)>,
}

/// Starts watching `dir`. The content hash of each plugin mounted at start is remembered, so an
/// event that changes nothing does not reload it.
pub fn watch(
    runtime: Arc<Runtime>,
    registry: Arc<Registry>,
    dir: &Path,
) -> anyhow::Result<Reloader> {
    let (tx, rx) = mpsc::channel::<notify::Result<notify::Event>>();
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    })
    .context("cannot start the file watcher")?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    let thread = std::thread::Builder::new()
        .name("ankh-reload".into())
        .spawn(move || {
            let mut state = State {
                runtime,
                registry,
                pending: HashMap::new(),
                hashes: HashMap::new(),
            };
            // The versions mounted at start, as they were when loaded (not as the files are
            // now: a change made meanwhile must still count as a change). Plugins refused at
            // start get no digest, so any event retries them.
            for mount in state.registry.snapshot().iter() {
                state
                    .hashes
                    .insert(mount.plugin.name.to_string(), mount.plugin.digest);
            }
            state.run(&rx);
        })
        .context("cannot start the reload thread")?;
    Ok(Reloader {
        _watcher: watcher,
        _thread: thread,
    })
}

/// Size and modification time, to tell whether a writer is still at work.
fn stat(path: &Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
}

struct State {
    runtime: Arc<Runtime>,
    registry: Arc<Registry>,
    pending: HashMap<PathBuf, Pending>,
    /// The digest of the version last tried under each plugin name: the one mounted, or a
    /// replacement that was refused (so the same bytes are not tried again). Keyed by name,
    /// not path: the watcher may spell a path differently (absolute) from the loader.
    hashes: HashMap<String, u64>,
}

impl State {
    fn run(&mut self, rx: &mpsc::Receiver<notify::Result<notify::Event>>) {
        loop {
            match rx.recv_timeout(DEBOUNCE / 2) {
                // Opening or reading a file (the loader does both) changes nothing. Not a
                // `continue`: a steady stream of reads must not hold back `settle` below.
                Ok(Ok(event)) if matches!(event.kind, EventKind::Access(_)) => {
                    tracing::trace!(?event, "watch event ignored");
                }
                Ok(Ok(event)) => {
                    tracing::trace!(?event, "watch event");
                    let now = Instant::now();
                    // A file renamed into place is complete: no need to wait for it to settle.
                    let renamed_in = matches!(
                        event.kind,
                        EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
                    );
                    for path in event.paths {
                        // A policy file stands for its plugin: changing it reloads the plugin.
                        let path = if path.extension().is_some_and(|e| e == "toml") {
                            path.with_extension("wasm")
                        } else {
                            path
                        };
                        if plugin_name(&path).is_some() {
                            let entry = self.pending.entry(path.clone()).or_default();
                            entry.last_event = Some(now);
                            if renamed_in {
                                entry.last_event = None;
                                entry.seen = stat(&path);
                            }
                        }
                    }
                }
                Ok(Err(e)) => tracing::warn!("file watcher error: {e}"),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.settle(Instant::now());
        }
    }

    /// Acts on every file that has been quiet long enough.
    fn settle(&mut self, now: Instant) {
        let quiet: Vec<PathBuf> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                p.last_event
                    .is_none_or(|t| now.duration_since(t) >= DEBOUNCE)
            })
            .map(|(path, _)| path.clone())
            .collect();
        for path in quiet {
            let metadata = std::fs::metadata(&path).ok().filter(|m| m.is_file());
            let Some(metadata) = metadata else {
                self.pending.remove(&path);
                self.unmount(&path);
                continue;
            };
            let now_seen = (
                metadata.len(),
                metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            );
            let entry = self.pending.get_mut(&path).expect("pending entry");
            if entry.seen != Some(now_seen) {
                // Still changing (or first look): look again after another quiet period.
                entry.seen = Some(now_seen);
                entry.last_event = Some(now);
                continue;
            }
            self.pending.remove(&path);
            self.load(&path);
        }
    }

    fn load(&mut self, path: &Path) {
        let Some(name) = plugin_name(path) else {
            return;
        };
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        let digest = version_digest(path, &bytes);
        if self.hashes.get(name) == Some(&digest) {
            return;
        }
        self.hashes.insert(name.to_owned(), digest);
        let replacing = self.registry.by_name(name).is_some();
        match Plugin::load(&self.runtime, name, path) {
            Ok(plugin) => {
                let ms = plugin.load_time.as_millis();
                let cached = plugin.cached;
                let mount = crate::loader::mounts(&plugin.policy.routes);
                if replacing {
                    plugin
                        .metrics
                        .reloads
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                self.registry.insert(Arc::new(plugin));
                tracing::info!(
                    plugin = name,
                    mount = %mount,
                    path = %path.display(),
                    cached,
                    "{} in {ms} ms",
                    if replacing { "replaced" } else { "loaded" }
                );
            }
            Err(e) if replacing => {
                tracing::error!(path = %path.display(), "refused: {e}; the previous version keeps serving");
            }
            Err(e) => {
                // Not mounted: the next event retries it, even with the same content (a
                // granted directory may have appeared meanwhile).
                self.hashes.remove(name);
                tracing::error!(path = %path.display(), "refused: {e}");
            }
        }
    }

    fn unmount(&mut self, path: &Path) {
        let Some(name) = plugin_name(path) else {
            return;
        };
        self.hashes.remove(name);
        if self.registry.remove(name) {
            tracing::info!(plugin = name, path = %path.display(), "unmounted: the file was removed");
        }
    }
}
