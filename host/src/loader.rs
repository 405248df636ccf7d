//! Loading plugins, at start and on every reload: each load on a thread of its own, so one
//! plugin whose start code is slow never delays another plugin, a reload, or the server's
//! start.
//!
//! A load compiles the file (host work, bounded by its size) and then instantiates it once to
//! prove it starts (guest work, bounded by the plugin's CPU deadline and handler timeout). A
//! plugin name has at most one load in flight: a newer version asked for meanwhile waits for it
//! and replaces it, and intermediate versions are skipped.
//!
//! At start the server waits for every plugin to compile, and for each to start for at most
//! [`PLUGIN_START_GRACE`]; it then mounts what started, in a fixed order (plugins mounted at
//! their own name first, then those whose policy picks routes, each by name), so which plugin
//! holds a contested route does not depend on timing. A plugin still starting after that is
//! mounted when it has started, like a hot reload.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::limits::PLUGIN_START_GRACE;
use crate::runtime::engine::Runtime;
use crate::runtime::engine::plugin::{LoadError, Plugin, version_digest};
use crate::runtime::engine::registry::{Registry, mounts, prefix_for};

/// The plugin name for a path, if it is a `.wasm` file with a usable name.
pub fn plugin_name(path: &Path) -> Option<&str> {
    if path.extension()? != "wasm" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    let valid = !stem.is_empty()
        && !stem.starts_with('.')
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    valid.then_some(stem)
}

/// A `.wasm` file whose name cannot be a plugin name (hidden files, an editor's, are not
/// reported).
pub(crate) fn unusable_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm")
        && plugin_name(path).is_none()
        && !path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'))
}

/// Logs a file that is ignored for its name.
pub(crate) fn warn_unusable_name(path: &Path) {
    tracing::warn!(
        path = %path.display(),
        "ignored: a plugin file name may only use letters, digits, '-', '_' and '.'"
    );
}

/// What to do with a plugin name next.
#[derive(Debug)]
enum Action {
    /// `startup`: one of the start batch, counted in [`State::compiling`] and
    /// [`State::starting`]; `bytes`: the file's size when it was read for its digest.
    Load {
        path: PathBuf,
        startup: bool,
        bytes: u64,
    },
    Unmount(PathBuf),
}

/// One plugin name's loads.
#[derive(Debug, Default)]
struct Slot {
    /// A load or unmount is running on its thread.
    busy: bool,
    /// The latest action asked for while busy; older ones are skipped.
    next: Option<Action>,
    /// The digest of the version last tried: mounted, or refused while another kept serving.
    digest: Option<u64>,
    /// Its file, once a load was asked for.
    path: Option<PathBuf>,
}

#[derive(Default)]
struct State {
    slots: HashMap<String, Slot>,
    /// While the server is starting: loads whose outcome waits to be mounted in order.
    startup: Option<Vec<Finished>>,
    /// Loads of the start batch still compiling, and still starting.
    compiling: usize,
    starting: usize,
}

/// A load that has run its course.
struct Finished {
    name: String,
    path: PathBuf,
    result: Result<Plugin, LoadError>,
}

/// Loads plugins on their own threads and mounts them.
pub(crate) struct Loads {
    runtime: Arc<Runtime>,
    registry: Arc<Registry>,
    state: Mutex<State>,
    changed: Condvar,
}

impl std::fmt::Debug for Loads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loads").finish_non_exhaustive()
    }
}

impl Loads {
    pub(crate) fn new(runtime: Arc<Runtime>, registry: Arc<Registry>) -> Arc<Loads> {
        Arc::new(Loads {
            runtime,
            registry,
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loads every plugin directly inside `dir`, and returns once each has compiled and
    /// started, or after [`PLUGIN_START_GRACE`] for those still starting.
    pub(crate) fn load_dir(self: &Arc<Self>, dir: &Path) -> std::io::Result<()> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        paths.sort();
        self.lock().startup = Some(Vec::new());
        for path in paths {
            if unusable_name(&path) {
                warn_unusable_name(&path);
                continue;
            }
            if plugin_name(&path).is_some() {
                self.load(&path);
            }
        }
        self.finish_startup(PLUGIN_START_GRACE);
        Ok(())
    }

    /// Waits for the start batch (see [`Loads::load_dir`]), then mounts what finished in a
    /// fixed order.
    fn finish_startup(&self, grace: Duration) {
        let mut state = self.lock();
        while state.compiling > 0 {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let until = Instant::now() + grace;
        while state.starting > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let mut finished = state.startup.take().unwrap_or_default();
        if state.starting > 0 {
            tracing::warn!(
                plugins = state.starting,
                "still starting after {} ms: serving without them; each is mounted once it has started",
                grace.as_millis()
            );
        }
        drop(state);
        // Plugins at their own name first, then those whose policy picks routes.
        finished.sort_by(|a, b| {
            let own = |f: &Finished| {
                f.result
                    .as_ref()
                    .is_ok_and(|p| p.policy.routes == [prefix_for(&f.name).to_string()])
            };
            own(b).cmp(&own(a)).then(a.name.cmp(&b.name))
        });
        for f in finished {
            self.settle(f);
        }
    }

    /// Loads (or reloads) the plugin at `path`, unless this exact version was tried already.
    pub(crate) fn load(self: &Arc<Self>, path: &Path) {
        let Some(name) = plugin_name(path) else {
            return;
        };
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        // Its values are part of its version: a change to them reloads it.
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            version_digest(path, &bytes).hash(&mut h);
            self.runtime.config.values.fingerprint(name).hash(&mut h);
            h.finish()
        };
        let mut state = self.lock();
        let startup = state.startup.is_some();
        let slot = state.slots.entry(name.to_owned()).or_default();
        slot.path = Some(path.to_owned());
        if slot.digest == Some(digest) {
            return;
        }
        slot.digest = Some(digest);
        if startup {
            state.compiling += 1;
            state.starting += 1;
        }
        let path = path.to_owned();
        let size = bytes.len() as u64;
        self.run(
            state,
            name,
            Action::Load {
                path,
                startup,
                bytes: size,
            },
        );
    }

    /// Loads again every plugin a load was asked for whose version (code, policy or values)
    /// changed since.
    pub(crate) fn reload_all(self: &Arc<Self>) {
        let paths: Vec<PathBuf> = self
            .lock()
            .slots
            .values()
            .filter_map(|slot| slot.path.clone())
            .collect();
        for path in paths {
            if path.exists() {
                self.load(&path);
            }
        }
    }

    /// Unmounts the plugin whose file was `path`, after any load of it in flight.
    pub(crate) fn unmount(self: &Arc<Self>, path: &Path) {
        let Some(name) = plugin_name(path) else {
            return;
        };
        let state = self.lock();
        self.run(state, name, Action::Unmount(path.to_owned()));
    }

    /// Runs `action` for `name` on a thread of its own, or queues it behind the one running.
    fn run(self: &Arc<Self>, mut state: MutexGuard<'_, State>, name: &str, action: Action) {
        let slot = state.slots.entry(name.to_owned()).or_default();
        if slot.busy {
            slot.next = Some(action);
            return;
        }
        slot.busy = true;
        drop(state);
        let this = self.clone();
        let thread_name = name.to_owned();
        let spawned = std::thread::Builder::new()
            .name(format!("ankh-load-{name}"))
            .spawn(move || this.work(thread_name, action));
        if let Err(e) = spawned {
            tracing::error!(plugin = name, "cannot start a loading thread: {e}");
            let mut state = self.lock();
            if let Some(slot) = state.slots.get_mut(name) {
                slot.busy = false;
                slot.digest = None;
            }
        }
    }

    /// The loading thread of one plugin name: runs actions until none is queued.
    fn work(&self, name: String, mut action: Action) {
        loop {
            match action {
                Action::Load {
                    path,
                    startup,
                    bytes,
                } => self.load_now(&name, path, startup, bytes),
                Action::Unmount(path) => {
                    if let Some(slot) = self.lock().slots.get_mut(&name) {
                        slot.digest = None;
                    }
                    if self.registry.remove(&name) {
                        tracing::info!(plugin = %name, path = %path.display(), "unmounted: the file was removed");
                    }
                }
            }
            let mut state = self.lock();
            let slot = state.slots.entry(name.clone()).or_default();
            match slot.next.take() {
                Some(next) => action = next,
                None => {
                    slot.busy = false;
                    return;
                }
            }
        }
    }

    fn load_now(&self, name: &str, path: PathBuf, startup: bool, bytes: u64) {
        // Said when it starts: compiling a large component takes seconds.
        tracing::info!(plugin = %name, bytes, "loading");
        let compiled = Plugin::compile(&self.runtime, name, &path);
        if startup {
            let mut state = self.lock();
            state.compiling -= 1;
            self.changed.notify_all();
        }
        let result = compiled.and_then(|mut plugin| plugin.start().map(|()| plugin));
        let finished = Finished {
            name: name.to_owned(),
            path,
            result,
        };
        let mut state = self.lock();
        if startup {
            state.starting -= 1;
        }
        if let Some(batch) = &mut state.startup {
            batch.push(finished);
            self.changed.notify_all();
            return;
        }
        drop(state);
        self.settle(finished);
    }

    /// Mounts a loaded plugin, or says why not.
    fn settle(&self, finished: Finished) {
        let Finished { name, path, result } = finished;
        let replacing = self.registry.by_name(&name).is_some();
        let plugin = match result {
            Ok(plugin) => plugin,
            Err(e) => {
                self.refused(&name, &path, replacing, &e.to_string());
                return;
            }
        };
        let ms = plugin.load_time.as_millis();
        let cached = match plugin.cached {
            Some(cached) => {
                if cached {
                    "true"
                } else {
                    "false"
                }
            }
            None => "unknown",
        };
        let mount = mounts(&plugin.policy.routes);
        let metrics = plugin.metrics.clone();
        match self.registry.insert(Arc::new(plugin)) {
            Ok(()) => {
                if replacing {
                    metrics
                        .reloads
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                tracing::info!(
                    plugin = %name,
                    mount = %mount,
                    path = %path.display(),
                    cached = %cached,
                    "{} in {ms} ms",
                    if replacing { "replaced" } else { "loaded" }
                );
            }
            Err(conflict) => {
                let why = format!(
                    "plugin `{name}` is refused: {conflict}, which keeps it (a route is served by the plugin that mounted it first)"
                );
                self.refused(&name, &path, replacing, &why);
            }
        }
    }

    fn refused(&self, name: &str, path: &Path, replacing: bool, why: &str) {
        if replacing {
            tracing::error!(path = %path.display(), "refused: {why}; the previous version keeps serving");
        } else {
            // Not mounted: the next change of the file retries it, even with the same content
            // (a granted directory, or a contested route, may have become free meanwhile).
            if let Some(slot) = self.lock().slots.get_mut(name) {
                slot.digest = None;
            }
            tracing::error!(path = %path.display(), "refused: {why}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{plugin_name, unusable_name};
    use std::path::Path;

    #[test]
    fn names_come_from_the_file_stem() {
        assert_eq!(plugin_name(Path::new("/p/hello.wasm")), Some("hello"));
        assert_eq!(plugin_name(Path::new("/p/my-app_2.wasm")), Some("my-app_2"));
        assert_eq!(plugin_name(Path::new("/p/hello.txt")), None);
        assert_eq!(plugin_name(Path::new("/p/.hidden.wasm")), None);
        assert_eq!(plugin_name(Path::new("/p/sp ace.wasm")), None);
        assert!(unusable_name(Path::new("/p/sp ace.wasm")));
        assert!(!unusable_name(Path::new("/p/.hidden.wasm")));
        assert!(!unusable_name(Path::new("/p/hello.wasm")));
        assert!(!unusable_name(Path::new("/p/notes.txt")));
    }
}
