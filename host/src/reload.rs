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
//!
//! Loading itself happens on [`Loads`]' threads, one per plugin, so a slow plugin never holds
//! back another's reload.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use notify::event::{ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::loader::{Loads, plugin_name, unusable_name, warn_unusable_name};

/// How long a file must be quiet (no events, same size and time) before it is loaded.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(100);

/// Keeps the watcher alive; dropping it stops watching.
pub(crate) struct Reloader {
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

/// Starts watching `dir`; what settles there goes to `loads`, which knows the version of each
/// plugin it mounted, so an event that changes nothing does not reload it.
pub(crate) fn watch(loads: Arc<Loads>, dir: &Path) -> anyhow::Result<Reloader> {
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
                loads,
                pending: HashMap::new(),
                warned: HashSet::new(),
            };
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
    loads: Arc<Loads>,
    pending: HashMap<PathBuf, Pending>,
    /// Files already reported as ignored for their name.
    warned: HashSet<PathBuf>,
}

impl State {
    fn run(&mut self, rx: &mpsc::Receiver<notify::Result<notify::Event>>) {
        loop {
            // With nothing settling, the watcher sleeps until the next event.
            let next = if self.pending.is_empty() {
                rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                rx.recv_timeout(DEBOUNCE / 2)
            };
            match next {
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
                        if unusable_name(&path) {
                            if path.exists() && self.warned.insert(path.clone()) {
                                warn_unusable_name(&path);
                            }
                            continue;
                        }
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
                self.loads.unmount(&path);
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
            self.loads.load(&path);
        }
    }
}

/// Asks for plugins' values to be read again (what SIGHUP does).
#[derive(Debug, Clone)]
pub struct ValuesHandle(mpsc::Sender<ValuesEvent>);

impl ValuesHandle {
    /// Re-reads the secrets file and the config file's values; plugins whose values changed
    /// are reloaded.
    pub fn reread(&self, why: &'static str) {
        let _ = self.0.send(ValuesEvent::Asked(why));
    }
}

enum ValuesEvent {
    Asked(&'static str),
    File(notify::Result<notify::Event>),
}

/// Keeps the values' watcher and thread alive.
pub(crate) struct ValuesWatch {
    _watcher: Option<notify::RecommendedWatcher>,
    _thread: JoinHandle<()>,
}

impl std::fmt::Debug for ValuesWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValuesWatch").finish_non_exhaustive()
    }
}

/// Re-reads plugins' values (see [`crate::runtime::engine::values`]) when asked, and, with
/// `watch`, when the secrets file (or a file under the secrets directory) or the config file
/// changes; then reloads every plugin whose values changed, as a plugin file's change would.
pub(crate) fn watch_values(
    loads: Arc<Loads>,
    sources: Arc<crate::runtime::engine::values::Sources>,
    watch: bool,
) -> anyhow::Result<(ValuesWatch, ValuesHandle)> {
    let (tx, rx) = mpsc::channel::<ValuesEvent>();
    // Absolute, as the watcher's events name them.
    let files: Vec<PathBuf> = sources
        .files()
        .map(|f| std::path::absolute(f).unwrap_or_else(|_| f.to_owned()))
        .collect();
    let watcher = if watch && !files.is_empty() {
        let events = tx.clone();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = events.send(ValuesEvent::File(event));
        })
        .context("cannot start the file watcher")?;
        for file in &files {
            // Editors and secret managers replace files, so the directory is watched.
            let (target, mode) = if file.is_dir() {
                (file.clone(), RecursiveMode::Recursive)
            } else {
                let parent = file.parent().unwrap_or(Path::new("/"));
                (parent.to_owned(), RecursiveMode::NonRecursive)
            };
            watcher
                .watch(&target, mode)
                .with_context(|| format!("cannot watch {}", target.display()))?;
        }
        Some(watcher)
    } else {
        None
    };
    let thread = std::thread::Builder::new()
        .name("ankh-values".into())
        .spawn(move || {
            let relevant = |event: &notify::Event| {
                event.paths.iter().any(|p| {
                    files
                        .iter()
                        .any(|f| p == f || (f.is_dir() && p.starts_with(f)))
                })
            };
            while let Ok(first) = rx.recv() {
                let mut why = match first {
                    ValuesEvent::Asked(why) => why,
                    ValuesEvent::File(Ok(event)) if relevant(&event) => "a values file changed",
                    ValuesEvent::File(_) => continue,
                };
                // A burst of writes settles first; a SIGHUP within it is what it is said to be.
                loop {
                    match rx.recv_timeout(DEBOUNCE) {
                        Ok(ValuesEvent::Asked(asked)) => why = asked,
                        Ok(ValuesEvent::File(_)) => continue,
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                match sources.reread() {
                    Ok(()) => {
                        tracing::info!("plugins' values read again ({why})");
                        loads.reload_all();
                    }
                    Err(e) => tracing::error!(
                        "cannot read plugins' values again ({why}): {e:#}; the values read before stay"
                    ),
                }
            }
        })
        .context("cannot start the values thread")?;
    Ok((
        ValuesWatch {
            _watcher: watcher,
            _thread: thread,
        },
        ValuesHandle(tx),
    ))
}
