//! Loading the plugins directory at start: every `NAME.wasm` directly inside it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::runtime::engine::Runtime;
use crate::runtime::plugin::Plugin;
use crate::runtime::registry::Registry;

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

/// The outcome of loading one file.
#[derive(Debug)]
pub struct Loaded {
    pub path: PathBuf,
    pub result: Result<Arc<Plugin>, String>,
}

/// Loads every plugin in `dir` into `registry`. A file that fails is logged and skipped; the
/// others are served.
pub fn load_dir(
    runtime: &Runtime,
    dir: &Path,
    registry: &Registry,
) -> std::io::Result<Vec<Loaded>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    paths.sort();
    let mut outcomes = Vec::new();
    for path in paths {
        let Some(name) = plugin_name(&path) else {
            tracing::warn!(path = %path.display(), "skipped: a plugin file name may only use letters, digits, '-', '_' and '.'");
            continue;
        };
        let result = match Plugin::load(runtime, name, &path) {
            Ok(plugin) => {
                tracing::info!(
                    plugin = %plugin.name,
                    mount = %mounts(&plugin.policy.routes),
                    path = %path.display(),
                    cached = plugin.cached,
                    "loaded in {} ms",
                    plugin.load_time.as_millis()
                );
                let plugin = Arc::new(plugin);
                registry.insert(plugin.clone());
                Ok(plugin)
            }
            Err(e) => {
                tracing::error!(path = %path.display(), "refused: {e}");
                Err(e.to_string())
            }
        };
        outcomes.push(Loaded { path, result });
    }
    Ok(outcomes)
}

/// A plugin's mounts for the log: `/hello`, `/a,/b`, `/ (fallback)`.
pub fn mounts(routes: &[String]) -> String {
    routes
        .iter()
        .map(|r| display_mount(r))
        .collect::<Vec<_>>()
        .join(",")
}

/// `/hello`, or `/` for the index plugin.
pub fn display_mount(prefix: &str) -> &str {
    if prefix.is_empty() {
        "/ (fallback)"
    } else {
        prefix
    }
}

#[cfg(test)]
mod tests {
    use super::plugin_name;
    use std::path::Path;

    #[test]
    fn names_come_from_the_file_stem() {
        assert_eq!(plugin_name(Path::new("/p/hello.wasm")), Some("hello"));
        assert_eq!(plugin_name(Path::new("/p/my-app_2.wasm")), Some("my-app_2"));
        assert_eq!(plugin_name(Path::new("/p/hello.txt")), None);
        assert_eq!(plugin_name(Path::new("/p/.hidden.wasm")), None);
        assert_eq!(plugin_name(Path::new("/p/sp ace.wasm")), None);
    }
}
