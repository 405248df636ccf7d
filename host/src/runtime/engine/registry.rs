//! Which plugin serves which path.
//!
//! `NAME.wasm` is mounted at `/NAME` and serves that path and everything below it; `index.wasm`
//! serves what no other plugin matches. The longest matching prefix wins. Readers take a
//! snapshot (an `Arc` of the table); a writer builds a new table and swaps it in, so a request
//! keeps the version it started with.
//!
//! A prefix is held by one plugin at a time: a plugin whose routes claim a prefix another
//! plugin holds (its policy names `/hello` while `hello` is mounted, or a second fallback), or
//! one nested inside it (`/hello/x`, or `/api` while another holds `/api/v1`), is refused as a
//! whole, and the holder keeps serving. Which one holds it therefore never depends on reload
//! order: the first to mount it keeps it until it is unmounted. Nested routes are allowed
//! when the server says so (`allow_nested_routes`); the longest prefix then wins.

use std::sync::{Arc, PoisonError, RwLock};

use crate::runtime::engine::plugin::Plugin;

pub use crate::runtime::engine::policy::prefix_for;

/// A plugin and the prefix it is mounted at.
#[derive(Debug, Clone)]
pub struct Mount {
    /// `/NAME`, or `""` for the index plugin.
    pub prefix: Arc<str>,
    pub plugin: Arc<Plugin>,
}

/// A plugin's route is held by another plugin, or nested in one of its routes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Conflict {
    #[error(
        "its route {} is already served by plugin `{holder}`",
        display_mount(prefix)
    )]
    Held { prefix: String, holder: Arc<str> },
    #[error(
        "its route {} is nested with plugin `{holder}`'s route {} (the server's allow_nested_routes lets routes nest)",
        display_mount(prefix),
        display_mount(held)
    )]
    Nested {
        prefix: String,
        holder: Arc<str>,
        held: String,
    },
}

/// The routing table.
#[derive(Debug, Default)]
pub struct Registry {
    table: RwLock<Arc<Vec<Mount>>>,
    /// Whether a plugin may mount a route nested in another plugin's.
    allow_nested: bool,
}

impl Registry {
    /// An empty table; `allow_nested`: a plugin may mount a route below (or above) another
    /// plugin's.
    pub(crate) fn new(allow_nested: bool) -> Registry {
        Registry {
            table: RwLock::default(),
            allow_nested,
        }
    }

    /// Looks up the plugin for `path`.
    pub(crate) fn route(&self, path: &str) -> Option<Mount> {
        let table = self.snapshot();
        table.iter().find(|m| matches(&m.prefix, path)).cloned()
    }

    /// The current version of the plugin called `name`.
    pub(crate) fn by_name(&self, name: &str) -> Option<Arc<Plugin>> {
        self.snapshot()
            .iter()
            .find(|m| &*m.plugin.name == name)
            .map(|m| m.plugin.clone())
    }

    /// All mounts, longest prefix first.
    pub fn snapshot(&self) -> Arc<Vec<Mount>> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Mounts `plugin` at the prefixes of its policy (`/NAME` by default), replacing any
    /// plugin of the same name, unless one of those prefixes is held by another plugin.
    pub(crate) fn insert(&self, plugin: Arc<Plugin>) -> Result<(), Conflict> {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        let mut next: Vec<Mount> = table
            .iter()
            .filter(|m| m.plugin.name != plugin.name)
            .cloned()
            .collect();
        for route in &plugin.policy.routes {
            if let Some(held) = next.iter().find(|m| &*m.prefix == route) {
                return Err(Conflict::Held {
                    prefix: route.clone(),
                    holder: held.plugin.name.clone(),
                });
            }
            if !self.allow_nested
                && let Some(held) = next.iter().find(|m| nested(&m.prefix, route))
            {
                return Err(Conflict::Nested {
                    prefix: route.clone(),
                    holder: held.plugin.name.clone(),
                    held: held.prefix.to_string(),
                });
            }
        }
        for route in &plugin.policy.routes {
            next.push(Mount {
                prefix: Arc::from(route.as_str()),
                plugin: plugin.clone(),
            });
        }
        // Longest prefix first, so the first match is the most specific one.
        next.sort_by(|a, b| {
            b.prefix
                .len()
                .cmp(&a.prefix.len())
                .then(a.prefix.cmp(&b.prefix))
        });
        *table = Arc::new(next);
        Ok(())
    }

    /// Unmounts the plugin called `name`. Returns whether it was mounted.
    pub(crate) fn remove(&self, name: &str) -> bool {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        let before = table.len();
        let next: Vec<Mount> = table
            .iter()
            .filter(|m| &*m.plugin.name != name)
            .cloned()
            .collect();
        let removed = next.len() != before;
        *table = Arc::new(next);
        removed
    }
}

/// A plugin's mounts for the log: `/hello`, `/a,/b`, `/ (fallback)`.
pub(crate) fn mounts(routes: &[String]) -> String {
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

/// Whether one of two different prefixes lies below the other (`/a` and `/a/b`; the fallback
/// `""` nests with nothing: it serves what no prefix matches).
fn nested(a: &str, b: &str) -> bool {
    let below = |inner: &str, outer: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
    };
    !a.is_empty() && !b.is_empty() && (below(a, b) || below(b, a))
}

/// `/hello` matches `/hello`, `/hello/` and `/hello/x`, not `/helloworld`; `""` matches all.
fn matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.is_empty() || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Drops, in every mounted plugin, the idle instances unused for
/// [`INSTANCE_IDLE_TIMEOUT`](crate::limits::INSTANCE_IDLE_TIMEOUT). Old versions' pools go with the versions themselves.
pub(crate) fn trim_idle(registry: &Registry) -> usize {
    let now = std::time::Instant::now();
    registry
        .snapshot()
        .iter()
        .map(|mount| {
            mount
                .plugin
                .instances
                .trim(now, crate::limits::INSTANCE_IDLE_TIMEOUT)
        })
        .sum()
}

/// Runs [`trim_idle`] every `every` on a thread of its own, until `registry` is gone.
pub(crate) fn start_trimming(
    registry: std::sync::Weak<Registry>,
    every: std::time::Duration,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ankh-trim".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                let trimmed = trim_idle(&registry);
                if trimmed > 0 {
                    tracing::debug!(trimmed, "idle instances dropped");
                }
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn prefixes_match_on_segment_boundaries() {
        assert!(matches("/hello", "/hello"));
        assert!(matches("/hello", "/hello/"));
        assert!(matches("/hello", "/hello/a/b"));
        assert!(!matches("/hello", "/helloworld"));
        assert!(!matches("/hello", "/hell"));
        assert!(matches("", "/anything"));
    }
}
