//! Per-plugin policy: the optional `NAME.toml` next to `NAME.wasm`.
//!
//! ```toml
//! routes = ["/api", "/v1/api"]        # mount prefixes instead of /NAME
//! ws_compression = false              # decline permessage-deflate (default: the server's)
//!
//! [limits]
//! cpu_deadline_ms = 500               # per request or event
//! handler_timeout_ms = 10000          # wall-clock time per request or event, waits included
//! stream_idle_timeout_ms = 30000      # a streamed response with no piece for this long ends
//! stream_timeout_ms = 600000          # a streamed response's whole life (instead of handler_timeout_ms)
//! memory_limit_mib = 32               # at most the server's --memory-limit-mib
//! kv_max_bytes = 16777216             # keys plus values in this plugin's key-value store
//! max_concurrency = 8                 # calls in flight at once; past it: 503 (at most the server's)
//! max_body_bytes = 1048576            # past it: 413 before the body is read
//! cpu_ms_per_minute = 30000           # CPU per minute, all calls together; past it: 503
//!
//! [capabilities]                      # all off by default
//! env = ["LANG", "GREETING=hello"]    # pass a host variable, or set one
//! dirs = [{ host = "data", guest = "/data", writable = false }]  # host: inside the plugins dir
//! network = ["127.0.0.1:5432"]        # outbound TCP allowed to exactly these addresses
//! http = ["https://api.example.com", "https://*.example.org"]  # outbound HTTP to these origins
//! precise_clocks = true               # clocks at full resolution (default: 100 µs steps)
//!
//! [[config]]                          # a value the plugin reads (wasi:config/store)
//! name = "api_key"                    # [a-z][a-z0-9_]*, each once
//! secret = true                       # never logged or printed; no default in this file
//! required = true                     # missing: the plugin is refused, the others serve
//!
//! [[config]]
//! name = "greeting"
//! default = "hello"                   # when no source gives one (see engine::values)
//!
//! [[schedule]]                        # a job run on a schedule (see engine::schedules)
//! name = "digest"
//! cron = "*/5 * * * *"                # or every = "30s"
//! tz = "Europe/Paris"                 # default UTC
//!
//! [instances]
//! mode = "reuse"                      # or "fresh": a new instance for every request
//! recycle_after = 10000               # replace a reused instance after this many calls (WASI 0.3: 128)
//! concurrent = 16                     # requests a WASI 0.3 instance serves at once
//! recycle_growth_mib = 8              # ...or once its memory grew this much past its start
//! max_idle = 64                       # instances kept between calls (more are made on demand)
//! ```
//!
//! Unknown keys and bad values are refused with the file, the line and the key; the plugin is
//! then refused too, so on a reload the previous version and its policy keep serving. Every
//! key is declared once in [`SETTINGS`] and read by the same machinery as the server's own
//! configuration ([`crate::settings`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::sync::{Arc, LazyLock};

use crate::config::LimitSetting;
use crate::limits::{HasLimits, Limits};
use crate::settings::{self, Flag, Kind, Override, Setting, SettingsError, Unit, Value, set};

/// What a plugin may do and use, after defaults and validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Mount prefixes (`""` for the fallback).
    pub routes: Vec<String>,
    /// The plugin's limits: the server's, with the keys the policy may override
    /// ([`crate::config::limit_settings`]) as the file gives them.
    pub limits: Limits,
    /// Environment variables the plugin sees.
    pub env: Vec<(String, String)>,
    pub dirs: Vec<Preopen>,
    /// Outbound TCP destinations allowed.
    pub network: Vec<SocketAddr>,
    /// Origins outbound HTTP may reach.
    pub http: crate::runtime::host::grants::HttpGrants,
    /// Clocks at full resolution instead of [`crate::limits::GUEST_CLOCK_RESOLUTION`] steps.
    pub precise_clocks: bool,
    /// A fresh instance for every call.
    pub fresh_instances: bool,
    /// Whether the policy file set `instances.mode` (else the world's default applies:
    /// reuse for ankh's worlds, fresh for `wasi:http/proxy`).
    pub instances_mode_given: bool,
    /// Replace a reused instance after this many calls.
    pub recycle_after: Option<u64>,
    /// Replace a reused instance whose linear memory grew more than this past its start.
    pub recycle_growth_bytes: usize,
    /// Idle instances kept between calls.
    pub max_idle_instances: usize,
    /// Requests one instance of a WASI 0.3 component serves at once.
    pub concurrent_requests: usize,
    /// CPU time its calls may use per minute, all together (`limits.cpu_ms_per_minute`).
    pub cpu_per_minute: Option<std::time::Duration>,
    /// The configuration values it declares (`[[config]]`).
    pub config: Vec<crate::runtime::engine::values::Declared>,
    /// Its scheduled jobs (`[[schedule]]`).
    pub schedules: Vec<crate::runtime::engine::schedules::Schedule>,
    /// The policy file, if there was one.
    pub source: Option<PathBuf>,
    /// Entries of `capabilities.dirs` as written, checked once the file is read.
    dir_entries: Vec<std::collections::BTreeMap<String, String>>,
}

/// A host directory made visible to the plugin.
#[derive(Debug, Clone)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
    /// The directory, opened when the policy was read: every instance is given this one,
    /// whatever happens to `host` afterwards.
    pub opened: Arc<std::fs::File>,
}

impl PartialEq for Preopen {
    fn eq(&self, other: &Self) -> bool {
        (&self.host, &self.guest, self.writable) == (&other.host, &other.guest, other.writable)
    }
}

impl Eq for Preopen {}

/// A policy file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PolicyError {
    pub message: String,
}

/// The name whose plugin serves every path no other plugin matches.
pub(crate) const INDEX: &str = "index";

/// The mount prefix of a plugin that names none: `/NAME`, or `""` (every path) for the
/// index plugin.
pub fn prefix_for(name: &str) -> std::sync::Arc<str> {
    if name == INDEX {
        std::sync::Arc::from("")
    } else {
        std::sync::Arc::from(format!("/{name}"))
    }
}

/// A number key of the policy alone (the server has no such setting). No default of its
/// own: a key the file does not give keeps the policy's default.
macro_rules! policy_number {
    ($key:literal, $unit:ident, $min:expr, $max:expr, $doc:literal, |$p:ident, $n:ident| $apply:expr, |$r:ident| $read:expr) => {
        Setting {
            key: $key,
            flag: Flag::None,
            kind: Kind::Number {
                unit: Unit::$unit,
                min: $min,
                max: $max,
            },
            doc: $doc,
            default: || Value::Unset,
            apply: |$p: &mut Policy, v| {
                let $n = v.number();
                $apply;
                Ok(())
            },
            read: |$r: &Policy| $read,
        }
    };
}

/// The server's limits a policy may override, each with its rule
/// ([`crate::config::limit_settings`]: `Lower` or `Any`).
static LIMITS: LazyLock<Vec<LimitSetting<Policy>>> = LazyLock::new(|| {
    crate::config::limit_settings()
        .into_iter()
        .filter(|l| l.policy != Override::Never)
        .collect()
});

/// Every key a policy file may hold: the policy's own, then the server limits it may
/// override.
pub(crate) static SETTINGS: LazyLock<Vec<Setting<Policy>>> = LazyLock::new(|| {
    OWN.iter()
        .cloned()
        .chain(LIMITS.iter().map(|l| l.setting.clone()))
        .collect()
});

/// The keys of a policy that are no server setting.
static OWN: &[Setting<Policy>] = &[
    Setting {
        key: "routes",
        flag: Flag::None,
        kind: Kind::List,
        doc: "Mount prefixes instead of /NAME (\"\" is the fallback)",
        default: || Value::Unset,
        apply: |p, v| {
            let routes = v.list();
            for (i, route) in routes.iter().enumerate() {
                check_route(route)?;
                if routes[..i].contains(route) {
                    return Err(format!("{route:?} is listed twice"));
                }
            }
            set(&mut p.routes, routes)
        },
        read: |p| Value::List(p.routes.clone()),
    },
    Setting {
        key: "capabilities.env",
        flag: Flag::None,
        kind: Kind::List,
        doc: "Environment variables: NAME passes the host's, NAME=value sets one; each name once",
        default: || Value::Unset,
        apply: |p, v| {
            let mut env: Vec<(String, String)> = Vec::new();
            let mut names: Vec<String> = Vec::new();
            for entry in v.list() {
                let (name, value) = match entry.split_once('=') {
                    Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
                    None => (entry.clone(), None),
                };
                if !valid_env_name(&name) {
                    return Err(format!("{entry:?} is not NAME or NAME=value"));
                }
                if names.contains(&name) {
                    return Err(format!("{name} is given twice"));
                }
                // A variable the host does not have is left out, as a shell would.
                if let Some(value) = value.or_else(|| std::env::var(&name).ok()) {
                    env.push((name.clone(), value));
                }
                names.push(name);
            }
            set(&mut p.env, env)
        },
        read: |p| Value::List(p.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
    },
    Setting {
        key: "config",
        flag: Flag::None,
        kind: Kind::Tables {
            keys: &["name", "default", "secret", "required"],
            optional: &["default", "secret", "required"],
        },
        doc: "Configuration values the plugin reads, each { name, default, secret, required }; resolved from the environment, the secrets file, the server's config file, then the default",
        default: || Value::Unset,
        apply: |p, v| {
            let Value::Tables(rows) = v else {
                return Ok(());
            };
            let declared = crate::runtime::engine::values::declare(&rows)?;
            set(&mut p.config, declared)
        },
        read: |p| Value::Tables(p.config.iter().map(|d| d.row()).collect()),
    },
    Setting {
        key: "schedule",
        flag: Flag::None,
        kind: Kind::Tables {
            keys: &["name", "cron", "every", "tz", "overlap", "catch_up"],
            optional: &["cron", "every", "tz", "overlap", "catch_up"],
        },
        doc: "Scheduled jobs, each { name, cron (with tz) or every, overlap = skip|queue, catch_up }; each tick runs once across the processes that share a store",
        default: || Value::Unset,
        apply: |p, v| {
            let Value::Tables(rows) = v else {
                return Ok(());
            };
            let declared = crate::runtime::engine::schedules::declare(&rows)?;
            set(&mut p.schedules, declared)
        },
        read: |p| Value::Tables(p.schedules.iter().map(|s| s.row()).collect()),
    },
    Setting {
        key: "capabilities.dirs",
        flag: Flag::None,
        kind: Kind::Tables {
            keys: &["host", "guest", "writable", "allow_outside"],
            optional: &["writable", "allow_outside"],
        },
        doc: "Host directories granted, each { host, guest, writable, allow_outside }; host inside the plugins directory unless allow_outside",
        default: || Value::Unset,
        apply: |p, v| {
            if let Value::Tables(rows) = v {
                p.dir_entries = rows;
            }
            Ok(())
        },
        read: |p| Value::Tables(p.dir_entries.clone()),
    },
    Setting {
        key: "capabilities.network",
        flag: Flag::None,
        kind: Kind::List,
        doc: "Outbound TCP allowed to exactly these IP:PORT addresses",
        default: || Value::Unset,
        apply: |p, v| {
            let network = v
                .list()
                .iter()
                .map(|a| {
                    a.parse::<SocketAddr>()
                        .map_err(|_| format!("{a:?} is not IP:PORT"))
                })
                .collect::<Result<_, _>>()?;
            set(&mut p.network, network)
        },
        read: |p| Value::List(p.network.iter().map(ToString::to_string).collect()),
    },
    Setting {
        key: "capabilities.http",
        flag: Flag::None,
        kind: Kind::List,
        doc: "Outbound HTTP allowed to these origins: \"https://host[:port]\", \"https://*.domain\"",
        default: || Value::Unset,
        apply: |p, v| {
            let grants = v
                .list()
                .iter()
                .map(|g| crate::runtime::host::grants::HttpGrant::parse(g))
                .collect::<Result<_, _>>()?;
            set(
                &mut p.http,
                crate::runtime::host::grants::HttpGrants::new(grants),
            )
        },
        read: |p| Value::List(p.http.iter().map(ToString::to_string).collect()),
    },
    Setting {
        key: "capabilities.precise_clocks",
        flag: Flag::None,
        kind: Kind::Switch,
        doc: "Clocks at full resolution (default: 100 µs steps)",
        default: || Value::Bool(false),
        apply: |p, v| set(&mut p.precise_clocks, v.bool()),
        read: |p| Value::Bool(p.precise_clocks),
    },
    Setting {
        key: "instances.mode",
        flag: Flag::None,
        kind: Kind::Choice(&["reuse", "fresh"]),
        doc: "reuse: instances serve call after call (one at a time); fresh: a new instance for every request (the default for wasi:http/proxy plugins)",
        default: || Value::Text("reuse".to_owned()),
        apply: |p, v| {
            p.fresh_instances = v.text() == "fresh";
            set(&mut p.instances_mode_given, true)
        },
        read: |p| Value::Text(if p.fresh_instances { "fresh" } else { "reuse" }.to_owned()),
    },
    policy_number!(
        "limits.cpu_ms_per_minute",
        Count,
        1,
        3_600_000,
        "CPU milliseconds the plugin's calls may use per minute, all calls together (60000: one core); past it its requests get 503 with Retry-After until the allowance refills",
        |p, n| p.cpu_per_minute = Some(std::time::Duration::from_millis(n)),
        |p| p
            .cpu_per_minute
            .map_or(Value::Unset, |d| Value::Number(d.as_millis() as u64))
    ),
    policy_number!(
        "instances.recycle_after",
        Count,
        1,
        1 << 40,
        "Replace a reused instance after this many calls",
        |p, n| p.recycle_after = Some(n),
        |p| p.recycle_after.map_or(Value::Unset, Value::Number)
    ),
    policy_number!(
        "instances.recycle_growth_mib",
        Mib,
        1,
        1 << 16,
        "Replace a reused instance after a call that grew its memory this much past its start",
        |p, n| p.recycle_growth_bytes = usize::try_from(n << 20).unwrap_or(usize::MAX),
        |p| Value::Number((p.recycle_growth_bytes >> 20) as u64)
    ),
    policy_number!(
        "instances.concurrent",
        Count,
        1,
        4096,
        "Requests one instance of a WASI 0.3 component serves at once (its event loop interleaves them)",
        |p, n| p.concurrent_requests = usize::try_from(n).unwrap_or(usize::MAX),
        |p| Value::Number(p.concurrent_requests as u64)
    ),
    policy_number!(
        "instances.max_idle",
        Count,
        0,
        100_000,
        "Idle instances kept between calls; a call that finds none gets a new one",
        |p, n| p.max_idle_instances = usize::try_from(n).unwrap_or(usize::MAX),
        |p| Value::Number(p.max_idle_instances as u64)
    ),
];

fn check_route(route: &str) -> Result<(), String> {
    if valid_route(route) {
        Ok(())
    } else {
        Err(format!(
            "{route:?} is not a mount prefix: use \"/name\" (no trailing slash, no dot segment, plain or percent-encoded) or \"\" for the fallback"
        ))
    }
}

impl HasLimits for Policy {
    fn limits(&self) -> &Limits {
        &self.limits
    }
    fn limits_mut(&mut self) -> &mut Limits {
        &mut self.limits
    }
}

impl Policy {
    /// The policy of a plugin without a policy file: the server's limits, no capabilities.
    pub(crate) fn defaults(name: &str, limits: &Limits) -> Policy {
        Policy {
            routes: vec![prefix_for(name).to_string()],
            limits: limits.clone(),
            env: Vec::new(),
            dirs: Vec::new(),
            network: Vec::new(),
            http: Default::default(),
            precise_clocks: false,
            fresh_instances: false,
            instances_mode_given: false,
            recycle_after: None,
            recycle_growth_bytes: crate::limits::INSTANCE_RECYCLE_GROWTH_BYTES,
            max_idle_instances: crate::limits::INSTANCES_IDLE_PER_PLUGIN,
            concurrent_requests: crate::limits::P3_CONCURRENT_REQUESTS,
            cpu_per_minute: None,
            config: Vec::new(),
            schedules: Vec::new(),
            source: None,
            dir_entries: Vec::new(),
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
        let given = settings::load_file(&SETTINGS, &path, &text).map_err(|e| PolicyError {
            message: match e {
                SettingsError::Syntax { path, message } => {
                    format!("invalid policy {}: {message}", path.display())
                }
                other => other.to_string(),
            },
        })?;
        let mut origins = std::collections::BTreeMap::new();
        for (key, value, origin) in given {
            if let Some(setting) = SETTINGS.iter().find(|s| s.key == key) {
                (setting.apply)(&mut policy, value).map_err(|message| PolicyError {
                    message: format!("{}: {message}", origin.describe(key)),
                })?;
                origins.insert(key, origin);
            }
        }
        let place = |key: &'static str| {
            origins
                .get(key)
                .map_or_else(|| key.to_owned(), |o: &settings::Origin| o.describe(key))
        };
        let bad = |key: &'static str, message: String| PolicyError {
            message: format!("{}: {message}", place(key)),
        };
        if policy.routes.is_empty() {
            return Err(bad("routes", "must list at least one prefix".into()));
        }
        // The one place a limit's override rule is enforced: a key that may only lower the
        // server's value is refused above it.
        let server = Policy::defaults(name, limits);
        for limit in LIMITS.iter().filter(|l| l.policy == Override::Lower) {
            let (ours, theirs) = ((limit.setting.read)(&policy), (limit.setting.read)(&server));
            if ours.number() > theirs.number() {
                return Err(bad(
                    limit.setting.key,
                    format!(
                        "{} is more than the server's {} ({}); a policy may only lower it",
                        ours.display(),
                        limit
                            .setting
                            .long()
                            .map_or_else(|| limit.setting.key.to_owned(), |l| format!("--{l}")),
                        theirs.display()
                    ),
                ));
            }
        }
        let base = wasm.parent().unwrap_or(Path::new("."));
        for entry in std::mem::take(&mut policy.dir_entries) {
            let host = base.join(&entry["host"]);
            let guest = entry["guest"].clone();
            let flag = |key: &str| entry.get(key).is_some_and(|v| v == "true");
            if !guest.starts_with('/') {
                return Err(bad(
                    "capabilities.dirs",
                    format!("guest path {guest:?} must be absolute"),
                ));
            }
            let opened = if flag("allow_outside") {
                // The operator's explicit choice: the path as given, links and all.
                open_dir(&host).map_err(|e| bad("capabilities.dirs", e))?
            } else {
                open_inside(base, Path::new(&entry["host"]))
                    .map_err(|e| bad("capabilities.dirs", e))?
            };
            policy.dirs.push(Preopen {
                host,
                guest,
                writable: flag("writable"),
                opened: Arc::new(opened),
            });
        }
        policy.source = Some(path);
        Ok(policy)
    }
}

/// `""` (the fallback), or `/seg/seg` of path characters: no empty, `.` or `..` segment (nor
/// one that is a dot segment once percent-decoded, like `%2e%2e`), no `%` but a valid escape,
/// no escaped `/`, no trailing slash, no query or fragment, no whitespace or control character.
fn valid_route(route: &str) -> bool {
    if route.is_empty() {
        return true;
    }
    let Some(rest) = route.strip_prefix('/') else {
        return false;
    };
    rest.split('/').all(|seg| {
        let plain = !seg.is_empty()
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%".contains(&b));
        plain
            && percent_decoded(seg).is_some_and(|decoded| {
                decoded != b"." && decoded != b".." && !decoded.contains(&b'/')
            })
    })
}

/// `seg` with its `%XX` escapes decoded; `None` if a `%` starts no valid escape.
fn percent_decoded(seg: &str) -> Option<Vec<u8>> {
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Opens the directory `path`, following links (a grant outside the plugins directory, by
/// the operator's choice).
fn open_dir(path: &Path) -> Result<std::fs::File, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.metadata() {
        Ok(m) if m.is_dir() => Ok(file),
        _ => Err(format!("{} is not a directory", path.display())),
    }
}

/// Opens directory `relative` below the plugins directory `base`, one component at a time,
/// never following a symbolic link (`O_NOFOLLOW`): a grant can only ever be a directory that
/// really is inside the plugins directory, whatever links a plugin with a writable grant has
/// made there. The plugins directory itself (which holds every plugin's policy) cannot be
/// granted.
fn open_inside(base: &Path, relative: &Path) -> Result<std::fs::File, String> {
    use rustix::fs::{Mode, OFlags, openat};
    use std::path::Component;
    let shown = base.join(relative);
    let outside = || {
        format!(
            "{} is outside the plugins directory (set allow_outside = true to grant it anyway)",
            shown.display()
        )
    };
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(outside());
            }
        }
    }
    if names.is_empty() {
        return Err(format!(
            "{} is the plugins directory itself, which holds every plugin's policy: grant a directory inside it",
            shown.display()
        ));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir: std::os::fd::OwnedFd = std::fs::File::open(base)
        .map_err(|e| format!("cannot open the plugins directory {}: {e}", base.display()))?
        .into();
    for name in names {
        dir = openat(&dir, name, flags, Mode::empty()).map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => format!(
                "{} is not a directory (a grant never follows a symbolic link)",
                shown.display()
            ),
            rustix::io::Errno::NOENT => format!("{} is not a directory", shown.display()),
            e => format!("cannot open {}: {e}", shown.display()),
        })?;
    }
    Ok(std::fs::File::from(dir))
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert_eq!(p.limits.guest_cpu_deadline, Duration::from_millis(250));
        assert_eq!(p.limits.guest_memory_bytes, 16 << 20);
        assert_eq!(p.limits.max_concurrency, 3);
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
        assert_eq!(p.limits.kv_max_bytes, 10);
        assert_eq!(p.limits.handler_timeout, Duration::from_millis(250));
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
            "/a\u{0}b",
            "/a\tb",
            "/a b",
            "/a/../b",
            "/a/./b",
            "/a//b",
            "/a?b",
            "/a#b",
            "/é",
            "/%2e%2e",
            "/%2E",
            "/a/%2e%2E/b",
            "/a%2fb",
            "/a%",
            "/a%zz",
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
            e.contains("p.toml:2: limits.max_bodies: unknown field `max_bodies`, expected one of:"),
            "{e}"
        );
    }

    // See: issue 32: a duplicate env key, and a route that is a dot segment once decoded,
    // were accepted.
    #[test]
    fn a_name_given_twice_is_refused() {
        let e = policy("[capabilities]\nenv = [\"A=1\", \"B=2\", \"A=3\"]\n").unwrap_err();
        assert!(
            e.ends_with("p.toml:2: capabilities.env: A is given twice"),
            "{e}"
        );
        let e = policy("routes = [\"/a\", \"/a\"]\n").unwrap_err();
        assert!(
            e.ends_with("p.toml:1: routes: \"/a\" is listed twice"),
            "{e}"
        );
        let p = policy("routes = [\"/a%20b\", \"/%7Euser\"]\n").unwrap();
        assert_eq!(p.routes, vec!["/a%20b", "/%7Euser"]);
    }

    // See: issue 31: the override rule of each limit is declared beside it and enforced in
    // one place; a limit that may only be lowered is refused above the server's.
    #[test]
    fn a_limit_a_policy_may_only_lower_is_refused_above_the_servers() {
        let e = policy("[limits]\nmemory_limit_mib = 65\n").unwrap_err();
        assert!(
            e.ends_with(
                "p.toml:2: limits.memory_limit_mib: 65 is more than the server's --memory-limit-mib (64); a policy may only lower it"
            ),
            "{e}"
        );
        let e = policy("[limits]\nmax_body_bytes = 16777217\n").unwrap_err();
        assert!(
            e.contains("p.toml:2: limits.max_body_bytes: 16777217 is more than the server's --max-body-bytes (16777216)"),
            "{e}"
        );
        let p = policy(
            "[limits]\nmemory_limit_mib = 16\nmax_body_bytes = 100\ncpu_deadline_ms = 60000\n",
        )
        .unwrap();
        assert_eq!(p.limits.guest_memory_bytes, 16 << 20);
        assert_eq!(p.limits.max_body_bytes, 100);
        // May raise: the CPU deadline.
        assert_eq!(p.limits.guest_cpu_deadline, Duration::from_secs(60));
        // Fixed: a server limit a policy may not name at all.
        let e = policy("[limits]\nmax_connections = 5\n").unwrap_err();
        assert!(
            e.contains("p.toml:2: limits.max_connections: unknown field `max_connections`"),
            "{e}"
        );
    }
}
