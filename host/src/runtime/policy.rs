//! Per-plugin policy: the optional `NAME.toml` next to `NAME.wasm`.
//!
//! ```toml
//! routes = ["/api", "/v1/api"]        # mount prefixes instead of /NAME
//!
//! [limits]
//! cpu_deadline_ms = 500               # per request or event
//! handler_timeout_ms = 10000          # wall-clock time per request or event, waits included
//! memory_limit_mib = 32               # at most the server's --memory-limit-mib
//! kv_max_bytes = 16777216             # keys plus values in this plugin's key-value store
//! max_concurrency = 8                 # calls in flight at once; past it: 503
//! max_body_bytes = 1048576            # past it: 413 before the body is read
//!
//! [capabilities]                      # all off by default
//! env = ["LANG", "GREETING=hello"]    # pass a host variable, or set one
//! dirs = [{ host = "data", guest = "/data", writable = false }]  # host: inside the plugins dir
//! network = ["127.0.0.1:5432"]        # outbound TCP allowed to exactly these addresses
//! precise_clocks = true               # clocks at full resolution (default: 100 µs steps)
//!
//! [instances]
//! mode = "reuse"                      # or "fresh": a new instance for every request
//! recycle_after = 10000               # replace a reused instance after this many calls
//! recycle_growth_mib = 8              # ...or once its memory grew this much past its start
//! ```
//!
//! Unknown keys and bad values are refused with the file, the line and the key; the plugin is
//! then refused too, so on a reload the previous version and its policy keep serving.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::limits::Limits;

/// What a plugin may do and use, after defaults and validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Mount prefixes (`""` for the fallback).
    pub routes: Vec<String>,
    pub cpu_deadline: Duration,
    /// Wall-clock time per call, waits included.
    pub handler_timeout: Duration,
    pub memory_bytes: usize,
    /// Bytes (keys plus values) the plugin's key-value namespace may hold.
    pub kv_max_bytes: usize,
    /// Calls in flight at once, if limited.
    pub max_concurrency: Option<usize>,
    pub max_body_bytes: u64,
    /// Environment variables the plugin sees.
    pub env: Vec<(String, String)>,
    pub dirs: Vec<Preopen>,
    /// Outbound TCP destinations allowed.
    pub network: Vec<SocketAddr>,
    /// Clocks at full resolution instead of [`crate::limits::GUEST_CLOCK_RESOLUTION`] steps.
    pub precise_clocks: bool,
    /// A fresh instance for every call.
    pub fresh_instances: bool,
    /// Replace a reused instance after this many calls.
    pub recycle_after: Option<u64>,
    /// Replace a reused instance whose linear memory grew more than this past its start.
    pub recycle_growth_bytes: usize,
    /// The policy file, if there was one.
    pub source: Option<PathBuf>,
}

/// A host directory made visible to the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

/// A policy file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PolicyError {
    pub message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    routes: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    capabilities: FileCapabilities,
    #[serde(default)]
    instances: FileInstances,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    cpu_deadline_ms: Option<Spanned<u64>>,
    handler_timeout_ms: Option<Spanned<u64>>,
    memory_limit_mib: Option<Spanned<u64>>,
    kv_max_bytes: Option<Spanned<u64>>,
    max_concurrency: Option<Spanned<u64>>,
    max_body_bytes: Option<Spanned<u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCapabilities {
    #[serde(default)]
    env: Vec<Spanned<String>>,
    #[serde(default)]
    dirs: Vec<Spanned<FileDir>>,
    #[serde(default)]
    network: Vec<Spanned<String>>,
    precise_clocks: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDir {
    host: String,
    guest: String,
    #[serde(default)]
    writable: bool,
    /// A host path outside the plugins directory must say so.
    #[serde(default)]
    allow_outside: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileInstances {
    mode: Option<Spanned<String>>,
    recycle_after: Option<Spanned<u64>>,
    recycle_growth_mib: Option<Spanned<u64>>,
}

impl Policy {
    /// The policy of a plugin without a policy file: the server's limits, no capabilities.
    pub fn defaults(name: &str, limits: &Limits) -> Policy {
        Policy {
            routes: vec![super::registry::prefix_for(name).to_string()],
            cpu_deadline: limits.guest_cpu_deadline,
            handler_timeout: limits.handler_timeout,
            memory_bytes: limits.guest_memory_bytes,
            kv_max_bytes: limits.kv_max_bytes,
            max_concurrency: None,
            max_body_bytes: limits.max_body_bytes,
            env: Vec::new(),
            dirs: Vec::new(),
            network: Vec::new(),
            precise_clocks: false,
            fresh_instances: false,
            recycle_after: None,
            recycle_growth_bytes: crate::limits::INSTANCE_RECYCLE_GROWTH_BYTES,
            source: None,
        }
    }

    /// The policy for `wasm` (`NAME.wasm`): its `NAME.toml` if there is one, else defaults.
    pub fn for_plugin(wasm: &Path, name: &str, limits: &Limits) -> Result<Policy, PolicyError> {
        let path = wasm.with_extension("toml");
        let mut policy = Policy::defaults(name, limits);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(policy),
            Err(e) => {
                return Err(PolicyError {
                    message: format!("cannot read policy {}: {e}", path.display()),
                });
            }
        };
        let file: File = toml::from_str(&text).map_err(|e: toml::de::Error| PolicyError {
            message: format!(
                "invalid policy {}: {}",
                path.display(),
                e.to_string().trim_end()
            ),
        })?;
        let at = |span: std::ops::Range<usize>, key: &str| {
            let line = text[..span.start.min(text.len())].lines().count().max(1);
            format!("{}:{line}: {key}", path.display())
        };
        let bad = |span: std::ops::Range<usize>, key: &str, why: String| PolicyError {
            message: format!("{}: {why}", at(span, key)),
        };
        let base = wasm.parent().unwrap_or(Path::new("."));

        if let Some(routes) = &file.routes {
            for r in routes.get_ref() {
                if !valid_route(r) {
                    return Err(bad(
                        routes.span(),
                        "routes",
                        format!(
                            "{r:?} is not a mount prefix: use \"/name\" (no trailing slash) or \"\" for the fallback"
                        ),
                    ));
                }
            }
            if routes.get_ref().is_empty() {
                return Err(bad(
                    routes.span(),
                    "routes",
                    "must list at least one prefix".into(),
                ));
            }
            policy.routes = routes.get_ref().clone();
        }
        let l = &file.limits;
        // A number within `min..=max`.
        let within = |v: &Spanned<u64>, key: &str, min: u64, max: u64| {
            let n = *v.get_ref();
            if n < min || n > max {
                return Err(bad(
                    v.span(),
                    key,
                    format!("must be between {min} and {max}, got {n}"),
                ));
            }
            Ok(n)
        };
        if let Some(v) = &l.cpu_deadline_ms {
            let ms = within(v, "limits.cpu_deadline_ms", 1, MAX_DEADLINE_MS)?;
            policy.cpu_deadline = Duration::from_millis(ms);
        }
        if let Some(v) = &l.handler_timeout_ms {
            let ms = within(v, "limits.handler_timeout_ms", 1, MAX_DEADLINE_MS)?;
            policy.handler_timeout = Duration::from_millis(ms);
        }
        if let Some(v) = &l.kv_max_bytes {
            let bytes = within(v, "limits.kv_max_bytes", 0, MAX_KV_BYTES)?;
            policy.kv_max_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(v) = &l.memory_limit_mib {
            let bytes = usize::try_from(v.get_ref().saturating_mul(1 << 20)).unwrap_or(usize::MAX);
            if *v.get_ref() == 0 || bytes > limits.guest_memory_bytes {
                return Err(bad(
                    v.span(),
                    "limits.memory_limit_mib",
                    format!(
                        "must be between 1 and the server's --memory-limit-mib ({})",
                        limits.guest_memory_bytes >> 20
                    ),
                ));
            }
            policy.memory_bytes = bytes;
        }
        if let Some(v) = &l.max_concurrency {
            let n = within(v, "limits.max_concurrency", 1, MAX_CONCURRENCY)?;
            policy.max_concurrency = usize::try_from(n).ok();
        }
        if let Some(v) = &l.max_body_bytes {
            policy.max_body_bytes = within(v, "limits.max_body_bytes", 0, MAX_BODY_BYTES)?;
        }
        for v in &file.capabilities.env {
            let entry = v.get_ref();
            match entry.split_once('=') {
                Some((name, value)) if valid_env_name(name) => {
                    policy.env.push((name.to_owned(), value.to_owned()));
                }
                None if valid_env_name(entry) => {
                    if let Ok(value) = std::env::var(entry) {
                        policy.env.push((entry.clone(), value));
                    }
                }
                _ => {
                    return Err(bad(
                        v.span(),
                        "capabilities.env",
                        format!("{entry:?} is not NAME or NAME=value"),
                    ));
                }
            }
        }
        for d in &file.capabilities.dirs {
            let dir = d.get_ref();
            let host = base.join(&dir.host);
            if !host.is_dir() {
                return Err(bad(
                    d.span(),
                    "capabilities.dirs",
                    format!("{} is not a directory", host.display()),
                ));
            }
            if !dir.allow_outside && !inside(&host, base) {
                return Err(bad(
                    d.span(),
                    "capabilities.dirs",
                    format!(
                        "{} is outside the plugins directory (set allow_outside = true to grant it anyway)",
                        host.display()
                    ),
                ));
            }
            if !dir.guest.starts_with('/') {
                return Err(bad(
                    d.span(),
                    "capabilities.dirs",
                    format!("guest path {:?} must be absolute", dir.guest),
                ));
            }
            policy.dirs.push(Preopen {
                host,
                guest: dir.guest.clone(),
                writable: dir.writable,
            });
        }
        for n in &file.capabilities.network {
            let addr: SocketAddr = n.get_ref().parse().map_err(|_| {
                bad(
                    n.span(),
                    "capabilities.network",
                    format!("{:?} is not IP:PORT", n.get_ref()),
                )
            })?;
            policy.network.push(addr);
        }
        if let Some(v) = &file.capabilities.precise_clocks {
            policy.precise_clocks = *v.get_ref();
        }
        if let Some(mode) = &file.instances.mode {
            policy.fresh_instances = match mode.get_ref().as_str() {
                "reuse" => false,
                "fresh" => true,
                other => {
                    return Err(bad(
                        mode.span(),
                        "instances.mode",
                        format!("{other:?} is not \"reuse\" or \"fresh\""),
                    ));
                }
            };
        }
        if let Some(v) = &file.instances.recycle_after {
            if *v.get_ref() == 0 {
                return Err(bad(
                    v.span(),
                    "instances.recycle_after",
                    "must be at least 1".into(),
                ));
            }
            policy.recycle_after = Some(*v.get_ref());
        }
        if let Some(v) = &file.instances.recycle_growth_mib {
            let mib = within(v, "instances.recycle_growth_mib", 1, 1 << 16)?;
            policy.recycle_growth_bytes = usize::try_from(mib << 20).unwrap_or(usize::MAX);
        }
        policy.source = Some(path);
        Ok(policy)
    }
}

/// Largest `cpu_deadline_ms` and `handler_timeout_ms`: an hour.
const MAX_DEADLINE_MS: u64 = 3_600_000;

/// Largest `kv_max_bytes`: 1 TiB.
const MAX_KV_BYTES: u64 = 1 << 40;

/// Largest `max_concurrency`.
const MAX_CONCURRENCY: u64 = 1_000_000;

/// Largest `max_body_bytes` (the server's own bound applies too).
const MAX_BODY_BYTES: u64 = 1 << 40;

/// `""` (the fallback), or `/seg/seg` of path characters: no empty, `.` or `..` segment, no
/// trailing slash, no query or fragment, no whitespace or control character.
fn valid_route(route: &str) -> bool {
    if route.is_empty() {
        return true;
    }
    let Some(rest) = route.strip_prefix('/') else {
        return false;
    };
    rest.split('/').all(|seg| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%".contains(&b))
    })
}

/// Whether `path` is `dir` or inside it, after resolving `..` and symbolic links.
fn inside(path: &Path, dir: &Path) -> bool {
    match (std::fs::canonicalize(path), std::fs::canonicalize(dir)) {
        (Ok(path), Ok(dir)) => path.starts_with(dir),
        _ => false,
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Result<Policy, String> {
        let dir =
            std::env::temp_dir().join(format!("ankh-policy-{}-{}", std::process::id(), text.len()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("p.toml"), text).unwrap();
        let result =
            Policy::for_plugin(&dir.join("p.wasm"), "p", &Limits::default()).map_err(|e| e.message);
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    #[test]
    fn defaults_and_overrides() {
        let p = policy("routes = [\"/api\", \"\"]\n[limits]\ncpu_deadline_ms = 250\nmemory_limit_mib = 16\nmax_concurrency = 3\n[capabilities]\nenv = [\"X=1\"]\ndirs = [{ host = \"data\", guest = \"/data\" }]\nnetwork = [\"127.0.0.1:9\"]\n[instances]\nmode = \"fresh\"\n").unwrap();
        assert_eq!(p.routes, vec!["/api", ""]);
        assert_eq!(p.cpu_deadline, Duration::from_millis(250));
        assert_eq!(p.memory_bytes, 16 << 20);
        assert_eq!(p.max_concurrency, Some(3));
        assert_eq!(p.env, vec![("X".to_owned(), "1".to_owned())]);
        assert_eq!(p.dirs[0].guest, "/data");
        assert!(!p.dirs[0].writable);
        assert!(p.fresh_instances);
    }

    #[test]
    fn a_granted_directory_must_be_inside_the_plugins_directory() {
        // See: issue 11, item 12.
        for host in ["/", "../../..", ".."] {
            let e = policy(&format!(
                "[capabilities]\ndirs = [{{ host = {host:?}, guest = \"/h\" }}]\n"
            ))
            .unwrap_err();
            assert!(
                e.contains("p.toml:2: capabilities.dirs")
                    && e.contains("outside the plugins directory"),
                "{host}: {e}"
            );
        }
        let p = policy(
            "[capabilities]\ndirs = [{ host = \"/\", guest = \"/h\", allow_outside = true }]\n",
        )
        .unwrap();
        assert_eq!(p.dirs[0].host, PathBuf::from("/"));
        let p = policy("[capabilities]\nprecise_clocks = true\n[limits]\nkv_max_bytes = 10\nhandler_timeout_ms = 250\n").unwrap();
        assert!(p.precise_clocks);
        assert_eq!(p.kv_max_bytes, 10);
        assert_eq!(p.handler_timeout, Duration::from_millis(250));
    }

    #[test]
    fn bad_values_name_file_line_and_key() {
        let e = policy("[limits]\n\ncpu_deadline_ms = 0\n").unwrap_err();
        assert!(
            e.ends_with("p.toml:3: limits.cpu_deadline_ms: must be between 1 and 3600000, got 0"),
            "{e}"
        );
        // See: issue 11, item 12: no unbounded numbers.
        let e = policy("[limits]\ncpu_deadline_ms = 18446744073709551615\n").unwrap_err();
        assert!(
            e.contains("p.toml:2: limits.cpu_deadline_ms: must be between"),
            "{e}"
        );
        let e = policy("[limits]\nhandler_timeout_ms = 0\n").unwrap_err();
        assert!(e.contains("p.toml:2: limits.handler_timeout_ms"), "{e}");
        let e = policy("[limits]\nmemory_limit_mib = 100000\n").unwrap_err();
        assert!(e.contains("p.toml:2: limits.memory_limit_mib"), "{e}");
        let e = policy("routes = [\"api/\"]\n").unwrap_err();
        assert!(e.contains("p.toml:1: routes"), "{e}");
        for bad in [
            "/a\u{0}b", "/a\tb", "/a b", "/a/../b", "/a/./b", "/a//b", "/a?b", "/a#b", "/é",
        ] {
            let quoted = toml::Value::String(bad.to_owned()).to_string();
            let e = policy(&format!("routes = [{quoted}]\n")).unwrap_err();
            assert!(e.contains("p.toml:1: routes"), "{bad:?}: {e}");
        }
        let e = policy("[instances]\nmode = \"sometimes\"\n").unwrap_err();
        assert!(e.contains("p.toml:2: instances.mode"), "{e}");
        let e = policy("[capabilities]\ndirs = [{ host = \"missing\", guest = \"/m\" }]\n")
            .unwrap_err();
        assert!(
            e.contains("p.toml:2: capabilities.dirs") && e.contains("is not a directory"),
            "{e}"
        );
        let e = policy("[limits]\nmax_bodies = 3\n").unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("unknown field `max_bodies`"),
            "{e}"
        );
    }
}
