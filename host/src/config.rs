//! The configuration of `ankh serve`: every server setting, declared once in [`SETTINGS`],
//! layered defaults, then the config file (`ankh.toml`), then flags (see [`crate::settings`]
//! for what is derived from each declaration).
//!
//! Adding a setting is one entry here, with its default a constant in [`crate::limits`], plus
//! the field it sets and the code that uses it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::LazyLock;

pub(crate) use crate::kv::KvBackend;
use crate::limits::{self, HasLimits, Limits, WORKERS_PER_CORE};
use crate::settings::{
    self, Flag, Flags, Kind, Origin, Override, Setting, SettingsError, Unit, Value, parse_into, set,
};

/// The file read when `--config` is not given, if it exists in the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "ankh.toml";

/// The log level when neither the config nor `RUST_LOG` gives one.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// Where the server listens when nothing says otherwise.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Where `--admin` without a value listens.
pub(crate) const DEFAULT_ADMIN: &str = "127.0.0.1:9090";

/// The plugins directory when nothing says otherwise.
pub(crate) const DEFAULT_PLUGINS_DIR: &str = "plugins";

/// The data directory when nothing says otherwise: next to the config file, or in the working
/// directory without one.
pub(crate) const DEFAULT_DATA_DIR: &str = "data";

/// Whether WebSocket topics and connections span processes, and through which Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pubsub {
    /// Through the key-value store's Redis when `kv` is one, else not.
    Auto,
    /// This process alone.
    Off,
    /// Through this Redis server.
    Redis(String),
}

impl std::str::FromStr for Pubsub {
    type Err = String;

    /// `auto`, `off` or a Redis URL.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Pubsub::Auto),
            "off" => Ok(Pubsub::Off),
            url if url.contains("://") => {
                crate::kv::redis::check_url(url)?;
                Ok(Pubsub::Redis(url.to_owned()))
            }
            _ => Err("expected `auto`, `off` or a redis:// URL".to_owned()),
        }
    }
}

impl std::fmt::Display for Pubsub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pubsub::Auto => f.write_str("auto"),
            Pubsub::Off => f.write_str("off"),
            Pubsub::Redis(url) => f.write_str(url),
        }
    }
}

/// Everything `ankh serve` needs to start.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub plugins_dir: PathBuf,
    /// Durable state: the key-value database.
    pub data_dir: PathBuf,
    /// Which key-value backend.
    pub kv: KvBackend,
    /// Cross-process WebSockets.
    pub pubsub: Pubsub,
    /// Bind with `SO_REUSEPORT`, so that several processes share the port.
    pub reuse_port: bool,
    /// Let a plugin mount a route nested in another plugin's.
    pub allow_nested_routes: bool,
    /// Processes `ankh serve` runs (1: this one; more: a supervisor of that many).
    pub processes: usize,
    pub workers: usize,
    /// Event loops (I/O threads), each with its own connections.
    pub io_threads: usize,
    pub limits: Limits,
    /// Use wasmtime's pooling instance allocator.
    pub pooling: bool,
    /// Serve WASI 0.3 components.
    pub wasi_p3: bool,
    /// Watch the plugins directory and hot-reload what changes.
    pub watch: bool,
    /// Keep compiled plugins in `cache_dir`.
    pub cache: bool,
    /// Where compiled plugins are cached (`None`: no cache). Absolute.
    pub cache_dir: Option<PathBuf>,
    /// Where the admin endpoints (`/healthz`, `/readyz`, `/metrics`) listen, if anywhere.
    pub admin: Option<SocketAddr>,
    /// Where to write the listening address once the server accepts connections.
    pub ready_file: Option<PathBuf>,
    /// The secrets file or directory plugins' values are read from (see
    /// [`crate::runtime::engine::values`]).
    pub secrets: Option<PathBuf>,
    /// Where spans are exported (OTLP over HTTP), if anywhere (see [`crate::trace`]).
    pub otlp_endpoint: Option<crate::trace::Endpoint>,
    /// The share of new traces recorded (0 to 1); a request's `traceparent` decides for it.
    pub trace_sample: f64,
    /// Plugins' values given in the config file (`[[values]]`): plugin, name, value. The
    /// runtime starts from these and reads the file again when it changes.
    pub values: Vec<BTreeMap<String, String>>,
    /// What goes to stderr, and how.
    pub log: LogConfig,
    /// The config file that was read, if any.
    pub source: Option<PathBuf>,
}

/// The log on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// One JSON object per line instead of readable text.
    pub json: bool,
    /// One line per request, target `ankh::access`.
    pub access_log: bool,
    /// A `tracing` filter (`info`, `warn,ankh::reload=debug`, ...). `RUST_LOG`, when set,
    /// replaces it.
    pub level: String,
}

impl HasLimits for ServeConfig {
    fn limits(&self) -> &Limits {
        &self.limits
    }
    fn limits_mut(&mut self) -> &mut Limits {
        &mut self.limits
    }
}

impl ServeConfig {
    /// A configuration before its settings land: every field is given its value by its
    /// setting (the declared default, then the file, then the flags) in [`ServeConfig::resolve`],
    /// so none of these values is ever seen.
    fn unset() -> ServeConfig {
        ServeConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 0)),
            plugins_dir: PathBuf::new(),
            data_dir: PathBuf::new(),
            kv: KvBackend::Memory,
            pubsub: Pubsub::Off,
            reuse_port: false,
            allow_nested_routes: false,
            processes: 0,
            workers: 0,
            io_threads: 0,
            limits: Limits::default(),
            pooling: false,
            wasi_p3: false,
            watch: false,
            cache: false,
            cache_dir: None,
            admin: None,
            ready_file: None,
            secrets: None,
            otlp_endpoint: None,
            trace_sample: 1.0,
            values: Vec::new(),
            log: LogConfig {
                json: false,
                access_log: false,
                level: String::new(),
            },
            source: None,
        }
    }
}

/// The plugins' values a config file gives (its `[[values]]` rows), read again when the file
/// changes or on SIGHUP. Its errors name the file and the line, never a value.
pub(crate) fn file_values(path: &Path) -> anyhow::Result<Vec<BTreeMap<String, String>>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let given = settings::load_file(&SETTINGS, path, &text).map_err(|e| match e {
        // The parser quotes the offending line, which may hold a value: only where.
        SettingsError::Syntax { path, .. } => {
            anyhow::anyhow!("{} is not valid TOML", path.display())
        }
        other => anyhow::anyhow!("{other}"),
    })?;
    Ok(given
        .into_iter()
        .find_map(|(key, value, _)| match (key, value) {
            ("values", Value::Tables(rows)) => Some(rows),
            _ => None,
        })
        .unwrap_or_default())
}

/// A bad configuration value, with where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The OS error is part of the message and not a `source`, so that a chain-printing
    /// reporter (`{:#}`) does not print it twice.
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Setting(#[from] SettingsError),
}

/// A number limit: `$field` of [`Limits`], given in `$unit`, which a policy may override as
/// `$policy` says. Expands inside [`limit_settings`], whose configuration type is `C`.
macro_rules! limit {
    ($key:literal, $flag:literal, $unit:ident, $min:expr, $max:expr, $default:expr, $doc:literal,
     $policy:expr, $field:ident) => {
        LimitSetting {
            policy: $policy,
            setting: Setting {
                key: $key,
                flag: Flag::Value {
                    long: $flag,
                    short: None,
                },
                kind: Kind::Number {
                    unit: Unit::$unit,
                    min: $min,
                    max: $max,
                },
                doc: $doc,
                default: || Value::Number(to_number(&$default, Unit::$unit)),
                apply: |c: &mut C, v| {
                    set(
                        &mut c.limits_mut().$field,
                        from_number(v.number(), Unit::$unit),
                    )
                },
                read: |c: &C| Value::Number(to_number(&c.limits().$field, Unit::$unit)),
            },
        }
    };
}

/// How a field holds a number given in a unit.
trait InUnit: Sized {
    fn from_number(n: u64, unit: Unit) -> Self;
    fn to_number(&self, unit: Unit) -> u64;
}

impl InUnit for usize {
    fn from_number(n: u64, unit: Unit) -> Self {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        match unit {
            Unit::Mib => n.saturating_mul(1 << 20),
            _ => n,
        }
    }
    fn to_number(&self, unit: Unit) -> u64 {
        let n = *self as u64;
        match unit {
            Unit::Mib => n >> 20,
            _ => n,
        }
    }
}

impl InUnit for u64 {
    fn from_number(n: u64, _unit: Unit) -> Self {
        n
    }
    fn to_number(&self, _unit: Unit) -> u64 {
        *self
    }
}

impl InUnit for Duration {
    fn from_number(n: u64, _unit: Unit) -> Self {
        Duration::from_millis(n)
    }
    fn to_number(&self, _unit: Unit) -> u64 {
        u64::try_from(self.as_millis()).unwrap_or(u64::MAX)
    }
}

fn from_number<T: InUnit>(n: u64, unit: Unit) -> T {
    T::from_number(n, unit)
}

fn to_number<T: InUnit>(v: &T, unit: Unit) -> u64 {
    v.to_number(unit)
}

/// The largest time setting: a day.
const MAX_MS: u64 = 86_400_000;

/// The largest deadline of a call: an hour.
const MAX_CALL_MS: u64 = 3_600_000;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn default_workers() -> u64 {
    (cores() * WORKERS_PER_CORE) as u64
}

/// `$XDG_CACHE_HOME/ankh`, else `$HOME/.cache/ankh`.
fn default_cache_dir() -> Value {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map_or(Value::Unset, |base| Value::Path(base.join("ankh")))
}

fn valid_log_filter(text: &str) -> Result<(), String> {
    tracing_subscriber::EnvFilter::try_new(text)
        .map(drop)
        .map_err(|e| format!("invalid log filter {text:?}: {e}"))
}

fn address(text: &'static str) -> Value {
    settings::resolve(text).map_or(Value::Unset, Value::Address)
}

/// Every setting of `ankh serve`, in the order `--help` and `--print-config` show them: the
/// server's own, then its limits.
pub static SETTINGS: LazyLock<Vec<Setting<ServeConfig>>> = LazyLock::new(|| {
    SERVER
        .iter()
        .cloned()
        .chain(limit_settings().into_iter().map(|l| l.setting))
        .collect()
});

/// The settings of the server alone (not its [limits](limit_settings)).
static SERVER: &[Setting<ServeConfig>] = &[
    Setting {
        key: "listen",
        flag: Flag::Value {
            long: "listen",
            short: Some('l'),
        },
        kind: Kind::Address,
        doc: "Address to listen on (IP:PORT, or HOST:PORT, resolved). Port 0 picks a free port; the log and the ready file say which",
        default: || address(DEFAULT_LISTEN),
        apply: |c, v| {
            if let Some(a) = v.address() {
                c.listen = a;
            }
            Ok(())
        },
        read: |c| Value::Address(c.listen),
    },
    Setting {
        key: "plugins",
        flag: Flag::Value {
            long: "plugins",
            short: Some('p'),
        },
        kind: Kind::Path,
        doc: "Directory of plugins: each NAME.wasm directly inside is served at /NAME, and index.wasm serves every path no other plugin matches. In the file, relative to the file",
        default: || Value::Path(PathBuf::from(DEFAULT_PLUGINS_DIR)),
        apply: |c, v| set(&mut c.plugins_dir, v.path().unwrap_or_default()),
        read: |c| Value::Path(c.plugins_dir.clone()),
    },
    Setting {
        key: "data_dir",
        flag: Flag::Value {
            long: "data-dir",
            short: None,
        },
        kind: Kind::Path,
        doc: "Directory of durable state: plugins' key-value data (kv.redb). Created if missing; one ankh process at a time. By default `data` next to the config file (or in the working directory without one); in the file, relative to the file",
        default: || Value::Path(PathBuf::from(DEFAULT_DATA_DIR)),
        apply: |c, v| set(&mut c.data_dir, v.path().unwrap_or_default()),
        read: |c| Value::Path(c.data_dir.clone()),
    },
    Setting {
        key: "kv",
        flag: Flag::Value {
            long: "kv",
            short: None,
        },
        kind: Kind::Text,
        doc: "Where plugins' key-value data lives: `file` (a crash-safe database in the data directory; a write a plugin saw succeed is on disk), `memory` (lost when the server stops: for tests and throwaway runs), or `redis://[:PASSWORD@]HOST:PORT[/DB]` (`rediss://` for TLS): a Redis server that several ankh processes share",
        default: || Value::Text(KvBackend::File.to_string()),
        apply: |c, v| parse_into(&mut c.kv, &v.text()),
        read: |c| Value::Text(c.kv.to_string()),
    },
    Setting {
        key: "pubsub",
        flag: Flag::Value {
            long: "pubsub",
            short: None,
        },
        kind: Kind::Text,
        doc: "WebSocket topics and connections across processes: `auto` (through the key-value store's Redis when --kv is a redis:// URL, else off), `off`, or a redis:// URL. A publish then reaches every process's subscribers, and ws::send and close reach a connection on any process",
        default: || Value::Text(Pubsub::Auto.to_string()),
        apply: |c, v| parse_into(&mut c.pubsub, &v.text()),
        read: |c| Value::Text(c.pubsub.to_string()),
    },
    Setting {
        key: "reuse_port",
        flag: Flag::On("reuse-port"),
        kind: Kind::Switch,
        doc: "Bind the listener with SO_REUSEPORT, so that several ankh processes on this host share the port and the kernel spreads connections over them",
        default: || Value::Bool(false),
        apply: |c, v| set(&mut c.reuse_port, v.bool()),
        read: |c| Value::Bool(c.reuse_port),
    },
    Setting {
        key: "allow_nested_routes",
        flag: Flag::On("allow-nested-routes"),
        kind: Kind::Switch,
        doc: "Let a plugin's policy mount a route nested in another plugin's (/hello/x beside /hello; the longest prefix wins). Without it such a route is refused like an equal one",
        default: || Value::Bool(false),
        apply: |c, v| set(&mut c.allow_nested_routes, v.bool()),
        read: |c| Value::Bool(c.allow_nested_routes),
    },
    Setting {
        key: "processes",
        flag: Flag::Value {
            long: "processes",
            short: None,
        },
        kind: Kind::Number {
            unit: Unit::Count,
            min: 1,
            max: 64,
        },
        doc: "Processes to run: more than 1 makes this one a supervisor of that many `ankh serve` processes sharing the port (SO_REUSEPORT), each restarted should it die; they share state through --kv redis://, which this requires",
        default: || Value::Number(1),
        apply: |c, v| set(&mut c.processes, from_number(v.number(), Unit::Count)),
        read: |c| Value::Number(c.processes as u64),
    },
    Setting {
        key: "workers",
        flag: Flag::Value {
            long: "workers",
            short: Some('w'),
        },
        kind: Kind::Number {
            unit: Unit::Count,
            min: 1,
            max: 10_000,
        },
        doc: "Worker threads that run handlers (10 per CPU core by default). Handlers may block, so size this for the number of requests you want in flight at once",
        default: || Value::Number(default_workers()),
        apply: |c, v| set(&mut c.workers, from_number(v.number(), Unit::Count)),
        read: |c| Value::Number(c.workers as u64),
    },
    Setting {
        key: "io_threads",
        flag: Flag::Value {
            long: "io-threads",
            short: None,
        },
        kind: Kind::Number {
            unit: Unit::Count,
            min: 1,
            max: 256,
        },
        doc: "Event loops that own the sockets (one per CPU core by default); a connection stays on one loop for life. 1 is Mummy's single I/O thread",
        default: || Value::Number(cores() as u64),
        apply: |c, v| set(&mut c.io_threads, from_number(v.number(), Unit::Count)),
        read: |c| Value::Number(c.io_threads as u64),
    },
    Setting {
        key: "pooling",
        flag: Flag::Off("no-pooling"),
        kind: Kind::Switch,
        doc: "Allocate instances on demand instead of from wasmtime's pooling allocator",
        default: || Value::Bool(true),
        apply: |c, v| set(&mut c.pooling, v.bool()),
        read: |c| Value::Bool(c.pooling),
    },
    Setting {
        key: "wasi_p3",
        flag: Flag::Off("no-wasi-p3"),
        kind: Kind::Switch,
        doc: "Refuse WASI 0.3 components (wasi:http/handler@0.3), whose support wasmtime marks experimental; on by default, as in wasmtime serve",
        default: || Value::Bool(true),
        apply: |c, v| set(&mut c.wasi_p3, v.bool()),
        read: |c| Value::Bool(c.wasi_p3),
    },
    Setting {
        key: "watch",
        flag: Flag::Off("no-watch"),
        kind: Kind::Switch,
        doc: "Do not watch the plugins directory: serve the plugins found at start, and never reload them",
        default: || Value::Bool(true),
        apply: |c, v| set(&mut c.watch, v.bool()),
        read: |c| Value::Bool(c.watch),
    },
    Setting {
        key: "cache",
        flag: Flag::Off("no-cache"),
        kind: Kind::Switch,
        doc: "Compile every plugin at load, without the disk cache",
        default: || Value::Bool(true),
        apply: |c, v| set(&mut c.cache, v.bool()),
        read: |c| Value::Bool(c.cache),
    },
    Setting {
        key: "cache_dir",
        flag: Flag::Value {
            long: "cache-dir",
            short: None,
        },
        kind: Kind::Path,
        doc: "Where compiled plugins are cached, keyed by content and engine settings, so a restart with unchanged plugins does not recompile. Must be outside the plugins directory ($XDG_CACHE_HOME/ankh or ~/.cache/ankh by default)",
        default: default_cache_dir,
        apply: |c, v| set(&mut c.cache_dir, v.path()),
        read: |c| c.cache_dir.clone().map_or(Value::Unset, Value::Path),
    },
    Setting {
        key: "admin",
        flag: Flag::OptionalValue {
            long: "admin",
            missing: DEFAULT_ADMIN,
        },
        kind: Kind::Address,
        doc: "Serve /healthz, /readyz and /metrics (Prometheus text) on this address; keep it on loopback. Without a value: 127.0.0.1:9090. Off unless given",
        default: || Value::Unset,
        apply: |c, v| set(&mut c.admin, v.address()),
        read: |c| c.admin.map_or(Value::Unset, Value::Address),
    },
    Setting {
        key: "ready_file",
        flag: Flag::Value {
            long: "ready-file",
            short: None,
        },
        kind: Kind::Path,
        doc: "Write the listening address to this file once the server accepts connections (for scripts and orchestration: wait for the file, with a timeout)",
        default: || Value::Unset,
        apply: |c, v| set(&mut c.ready_file, v.path()),
        read: |c| c.ready_file.clone().map_or(Value::Unset, Value::Path),
    },
    Setting {
        key: "secrets",
        flag: Flag::Value {
            long: "secrets",
            short: None,
        },
        kind: Kind::Path,
        doc: "Plugins' secret values: a TOML file with a table per plugin, or a directory of DIR/PLUGIN/NAME files; refused while its group or others may read it (re-read on SIGHUP and when it changes)",
        default: || Value::Unset,
        apply: |c, v| set(&mut c.secrets, v.path()),
        read: |c| c.secrets.clone().map_or(Value::Unset, Value::Path),
    },
    Setting {
        key: "otlp_endpoint",
        flag: Flag::Value {
            long: "otlp-endpoint",
            short: None,
        },
        kind: Kind::Text,
        doc: "Export traces there: OTLP over HTTP (protobuf), `http://HOST[:PORT][/PATH]` (port 4318 and /v1/traces by default), typically a collector beside the server; requests without a traceparent then start a trace. Off by default: a traceparent a request carries is still logged and passed on",
        default: || Value::Unset,
        apply: |c, v| {
            c.otlp_endpoint = match v {
                Value::Text(text) => Some(text.parse()?),
                _ => None,
            };
            Ok(())
        },
        read: |c| {
            c.otlp_endpoint
                .as_ref()
                .map_or(Value::Unset, |e| Value::Text(e.to_string()))
        },
    },
    Setting {
        key: "trace_sample",
        flag: Flag::Value {
            long: "trace-sample",
            short: None,
        },
        kind: Kind::Fraction,
        doc: "With --otlp-endpoint, the share of new traces whose spans are exported (0 to 1: 0.01 records one in a hundred, chosen by trace id, the same in every process); a request whose traceparent says sampled or not decides for itself. Unrecorded traces still get an id, logged and passed on",
        default: || Value::Text("1".into()),
        apply: |c, v| {
            if let Value::Text(text) = v {
                c.trace_sample = text
                    .parse()
                    .map_err(|_| format!("must be a number from 0 to 1, got {text:?}"))?;
            }
            Ok(())
        },
        read: |c| Value::Text(c.trace_sample.to_string()),
    },
    Setting {
        key: "values",
        flag: Flag::None,
        kind: Kind::Tables {
            keys: &["plugin", "name", "value"],
            optional: &[],
        },
        doc: "Plugins' configuration values, each { plugin, name, value } (a plugin reads those its policy declares); never printed",
        default: || Value::Unset,
        apply: |c, v| {
            if let Value::Tables(rows) = v {
                c.values = rows;
            }
            Ok(())
        },
        // Which plugin has which value, not the value: it may be a secret.
        read: |c| {
            Value::Tables(
                c.values
                    .iter()
                    .map(|row| {
                        let mut row = row.clone();
                        row.insert("value".to_owned(), "(not shown)".to_owned());
                        row
                    })
                    .collect(),
            )
        },
    },
    Setting {
        key: "log.format",
        flag: Flag::Value {
            long: "log-format",
            short: None,
        },
        kind: Kind::Choice(&["text", "json"]),
        doc: "Log format on stderr: `text` (one readable line per event) or `json` (one JSON object per line)",
        default: || Value::Text("text".to_owned()),
        apply: |c, v| set(&mut c.log.json, v.text() == "json"),
        read: |c| Value::Text(if c.log.json { "json" } else { "text" }.to_owned()),
    },
    Setting {
        key: "log.access_log",
        flag: Flag::Off("no-access-log"),
        kind: Kind::Switch,
        doc: "Do not write an access-log line per request (target `ankh::access`)",
        default: || Value::Bool(true),
        apply: |c, v| set(&mut c.log.access_log, v.bool()),
        read: |c| Value::Bool(c.log.access_log),
    },
    Setting {
        key: "log.level",
        flag: Flag::Value {
            long: "log-level",
            short: None,
        },
        kind: Kind::Text,
        doc: "Log filter, e.g. `info` or `warn,ankh::reload=debug`. RUST_LOG, when set, replaces it",
        default: || Value::Text(DEFAULT_LOG_LEVEL.to_owned()),
        apply: |c, v| {
            let level = v.text();
            valid_log_filter(&level)?;
            set(&mut c.log.level, level)
        },
        read: |c| Value::Text(c.log.level.clone()),
    },
];

/// A server limit, and whether a plugin's policy may give its own value.
#[derive(Debug)]
pub(crate) struct LimitSetting<C> {
    pub setting: Setting<C>,
    pub policy: Override,
}

/// Every limit, for any configuration that holds [`Limits`]: the server's, whose defaults are
/// the constants of [`crate::limits`], and a plugin policy's, whose defaults are the server's.
/// The one declaration of each limit: its key, flag, unit, range, default, doc line, and
/// whether a policy may override it.
pub(crate) fn limit_settings<C: HasLimits>() -> Vec<LimitSetting<C>> {
    vec![
        limit!(
            "limits.max_head_bytes",
            "max-head-bytes",
            Bytes,
            256,
            1 << 20,
            limits::MAX_HEAD_BYTES,
            "Largest request head (request line + headers) in bytes; a larger one gets 431",
            Override::Never,
            max_head_bytes
        ),
        limit!(
            "limits.max_headers",
            "max-headers",
            Count,
            1,
            10_000,
            limits::MAX_HEADERS,
            "Most header fields per request; more get 431",
            Override::Never,
            max_headers
        ),
        limit!(
            "limits.max_target_bytes",
            "max-target-bytes",
            Bytes,
            16,
            1 << 20,
            limits::MAX_TARGET_BYTES,
            "Largest request-target (path and query) in bytes, at most the head limit; a larger one gets 414",
            Override::Never,
            max_target_bytes
        ),
        limit!(
            "limits.max_body_bytes",
            "max-body-bytes",
            Bytes,
            0,
            1 << 40,
            limits::MAX_BODY_BYTES,
            "Largest request body in bytes; a larger one gets 413 before it is read",
            Override::Lower,
            max_body_bytes
        ),
        limit!(
            "limits.queue_depth",
            "queue-depth",
            Count,
            1,
            1 << 20,
            limits::QUEUE_DEPTH,
            "Requests that may wait for a free worker; past this, clients get 503 + Retry-After",
            Override::Never,
            queue_depth
        ),
        limit!(
            "limits.max_calls",
            "max-calls",
            Count,
            1,
            100_000,
            limits::MAX_CALLS,
            "Plugin calls in flight at once, running or waiting (a sleep, a socket); each holds an instance and a fiber stack. Past this, requests wait in the queue",
            Override::Never,
            max_calls
        ),
        limit!(
            "limits.max_concurrency",
            "max-concurrency",
            Count,
            1,
            1_000_000,
            limits::MAX_CONCURRENCY,
            "Calls one plugin may have in flight at once (requests, answered or not, and WebSocket events); past it its requests get 503 + Retry-After and its WebSocket events wait. By default a quarter of --max-calls, so that no plugin holds every call slot",
            Override::Lower,
            max_concurrency
        ),
        limit!(
            "limits.cpu_deadline_ms",
            "cpu-deadline-ms",
            Millis,
            1,
            MAX_CALL_MS,
            limits::GUEST_CPU_DEADLINE,
            "CPU time one handler call may use before it is stopped and the client gets 504. Time spent blocked (sleeping, waiting on I/O) does not count",
            Override::Any,
            guest_cpu_deadline
        ),
        limit!(
            "limits.handler_timeout_ms",
            "handler-timeout-ms",
            Millis,
            1,
            MAX_CALL_MS,
            limits::HANDLER_TIMEOUT,
            "Wall-clock time one handler call may take, waiting included; past it the call is stopped, the client gets 504 and the instance is replaced",
            Override::Any,
            handler_timeout
        ),
        limit!(
            "limits.memory_limit_mib",
            "memory-limit-mib",
            Mib,
            1,
            4096,
            limits::GUEST_MEMORY_BYTES,
            "Linear memory one plugin instance may grow to, in MiB; past it the request gets 500",
            Override::Lower,
            guest_memory_bytes
        ),
        limit!(
            "limits.kv_max_bytes",
            "kv-max-bytes",
            Bytes,
            0,
            1 << 40,
            limits::KV_MAX_BYTES,
            "Bytes (keys plus values) one plugin's key-value store may hold; past it writes fail with `full`",
            Override::Any,
            kv_max_bytes
        ),
        limit!(
            "limits.max_connections",
            "max-connections",
            Count,
            1,
            10_000_000,
            limits::MAX_CONNECTIONS,
            "Open connections; the next one is accepted and closed at once",
            Override::Never,
            max_connections
        ),
        limit!(
            "limits.max_send_buffer_bytes",
            "max-send-buffer-bytes",
            Bytes,
            1024,
            1 << 34,
            limits::MAX_SEND_BUFFER_BYTES,
            "Unsent bytes a connection may hold before it is closed as not reading",
            Override::Never,
            max_send_buffer_bytes
        ),
        limit!(
            "limits.ws_max_message_bytes",
            "ws-max-message-bytes",
            Bytes,
            125,
            1 << 30,
            limits::WS_MAX_MESSAGE_BYTES,
            "Largest WebSocket message a client or a plugin may send; a client's frame declaring more is refused with Close 1009 before its payload is read",
            Override::Never,
            ws_max_message_bytes
        ),
        limit!(
            "limits.max_response_bytes",
            "max-response-bytes",
            Bytes,
            1,
            1 << 40,
            limits::MAX_RESPONSE_BYTES,
            "Largest wasi:http/proxy response body read whole, where the call cannot stream it (served bodies past 64 KiB stream); past it the client gets 502",
            Override::Never,
            max_response_bytes
        ),
        limit!(
            "outbound.connect_timeout_ms",
            "outbound-connect-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::OUTBOUND_CONNECT_TIMEOUT,
            "Outbound HTTP from plugins: how long looking up a name and opening a connection may take",
            Override::Never,
            outbound_connect_timeout
        ),
        limit!(
            "outbound.first_byte_timeout_ms",
            "outbound-first-byte-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::OUTBOUND_FIRST_BYTE_TIMEOUT,
            "Outbound HTTP from plugins: how long the response head may take once the request is sent",
            Override::Never,
            outbound_first_byte_timeout
        ),
        limit!(
            "outbound.between_bytes_timeout_ms",
            "outbound-between-bytes-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::OUTBOUND_BETWEEN_BYTES_TIMEOUT,
            "Outbound HTTP from plugins: how long a response body may go without a byte",
            Override::Never,
            outbound_between_bytes_timeout
        ),
        limit!(
            "outbound.max_response_bytes",
            "outbound-max-response-bytes",
            Bytes,
            1,
            1 << 40,
            limits::OUTBOUND_MAX_RESPONSE_BYTES,
            "Outbound HTTP from plugins: the largest response body a plugin receives (a plugin's policy may set its own, to relay a large download)",
            Override::Any,
            outbound_max_response_bytes
        ),
        limit!(
            "outbound.connections_per_origin",
            "outbound-connections-per-origin",
            Count,
            1,
            limits::OUTBOUND_CONNECTIONS_PER_PLUGIN as u64,
            limits::OUTBOUND_CONNECTIONS_PER_ORIGIN,
            "Outbound HTTP from plugins: requests in flight, and connections open, from one plugin to one origin (a plugin's policy may set its own); a request past it waits for a place, within its call's deadline",
            Override::Any,
            outbound_connections_per_origin
        ),
        limit!(
            "timeouts.idle_ms",
            "idle-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::IDLE_TIMEOUT,
            "Close a connection with no request in progress after this long",
            Override::Never,
            idle_timeout
        ),
        limit!(
            "timeouts.head_ms",
            "head-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::HEAD_TIMEOUT,
            "A request head must be complete this long after its first byte, or the client gets 408",
            Override::Never,
            head_timeout
        ),
        limit!(
            "timeouts.request_ms",
            "request-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::REQUEST_TIMEOUT,
            "A request (head and body) must arrive this long after its first byte, plus a second per min-body-rate bytes of body received, or the client gets 408",
            Override::Never,
            request_timeout
        ),
        limit!(
            "timeouts.min_body_rate",
            "min-body-rate",
            Bytes,
            1,
            u64::MAX,
            limits::MIN_BODY_RATE,
            "Bytes per second a body must average once the request timeout has passed (a steady upload faster than this is never cut)",
            Override::Never,
            min_body_rate
        ),
        limit!(
            "timeouts.body_idle_ms",
            "body-idle-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::BODY_IDLE_TIMEOUT,
            "Cut a request body from which no byte arrives for this long (408)",
            Override::Never,
            body_idle_timeout
        ),
        limit!(
            "timeouts.send_ms",
            "send-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::SEND_TIMEOUT,
            "Close a connection whose pending output makes no progress for this long",
            Override::Never,
            send_timeout
        ),
        limit!(
            "limits.stream_idle_timeout_ms",
            "stream-idle-timeout-ms",
            Millis,
            1,
            MAX_CALL_MS,
            limits::STREAM_IDLE_TIMEOUT,
            "End a streamed response whose plugin writes nothing for this long (its connection closes, its call is stopped)",
            Override::Any,
            stream_idle_timeout
        ),
        limit!(
            "limits.stream_timeout_ms",
            "stream-timeout-ms",
            Millis,
            1,
            MAX_CALL_MS,
            limits::STREAM_TIMEOUT,
            "Longest a streamed response may last from its head; once a response streams, this bounds its call instead of handler_timeout_ms",
            Override::Any,
            stream_timeout
        ),
        limit!(
            "timeouts.drain_ms",
            "drain-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::DRAIN_TIMEOUT,
            "On SIGTERM/SIGINT, how long queued and in-flight requests may take before everything still open is closed",
            Override::Never,
            drain_timeout
        ),
        limit!(
            "timeouts.ws_ping_ms",
            "ws-ping-interval-ms",
            Millis,
            1,
            MAX_MS,
            limits::WS_PING_INTERVAL,
            "Ping a WebSocket that has been silent this long",
            Override::Never,
            ws_ping_interval
        ),
        limit!(
            "timeouts.ws_pong_ms",
            "ws-pong-timeout-ms",
            Millis,
            1,
            MAX_MS,
            limits::WS_PONG_TIMEOUT,
            "Close a pinged WebSocket that sends nothing back for this long",
            Override::Never,
            ws_pong_timeout
        ),
        LimitSetting {
            policy: Override::Any,
            setting: Setting {
                key: "ws_compression",
                flag: Flag::Off("no-ws-compression"),
                kind: Kind::Switch,
                doc: "Decline permessage-deflate: WebSocket messages go uncompressed (a plugin's policy can also turn it off for that plugin)",
                default: || Value::Bool(limits::WS_COMPRESSION),
                apply: |c: &mut C, v| set(&mut c.limits_mut().ws_compression, v.bool()),
                read: |c: &C| Value::Bool(c.limits().ws_compression),
            },
        },
    ]
}

/// Whether `path` is `dir` or below it, comparing absolute paths.
fn inside(path: &Path, dir: &Path) -> bool {
    let absolute = |p: &Path| {
        std::fs::canonicalize(p).unwrap_or_else(|_| {
            std::env::current_dir()
                .map(|cwd| cwd.join(p))
                .unwrap_or_else(|_| p.to_owned())
        })
    };
    absolute(path).starts_with(absolute(dir))
}

impl ServeConfig {
    /// Reads a config file's text.
    pub fn read_file(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })
    }

    /// Layers the file (its path and text, if any) and the flags over the defaults, and
    /// checks what no single setting can: settings that depend on each other.
    pub fn resolve(file: Option<(&Path, &str)>, flags: &Flags) -> Result<ServeConfig, ConfigError> {
        let from_file = match file {
            Some((path, text)) => settings::load_file(&SETTINGS, path, text)?,
            None => Vec::new(),
        };
        let from_flags = flags.parse(&SETTINGS)?;
        let mut config = ServeConfig::unset();
        let origins = settings::layer(&SETTINGS, &mut config, &[from_file, from_flags])?;
        config.source = file.map(|(path, _)| path.to_owned());
        config.finish(&origins)?;
        Ok(config)
    }

    /// The checks between settings, each error naming where the offending value came from.
    fn finish(&mut self, origins: &BTreeMap<&'static str, Origin>) -> Result<(), SettingsError> {
        let place = |key: &str| {
            origins
                .get(key)
                .map_or_else(|| key.to_owned(), |o| o.describe(key))
        };
        let l = &self.limits;
        if l.max_target_bytes > l.max_head_bytes {
            return Err(SettingsError::Value {
                place: place("limits.max_target_bytes"),
                message: format!(
                    "{} is more than limits.max_head_bytes ({}), which the target is part of",
                    l.max_target_bytes, l.max_head_bytes
                ),
            });
        }
        // A plugin's share of the call slots follows the server's, unless it is given.
        if matches!(
            origins.get("limits.max_concurrency"),
            None | Some(Origin::Default)
        ) {
            self.limits.max_concurrency = (self.limits.max_calls / 4).max(1);
        }
        // The data directory's default is next to the config file.
        if matches!(origins.get("data_dir"), None | Some(Origin::Default))
            && let Some(dir) = self.source.as_deref().and_then(Path::parent)
        {
            self.data_dir = dir.join(DEFAULT_DATA_DIR);
        }
        if self.kv == KvBackend::File && inside(&self.data_dir, &self.plugins_dir) {
            return Err(SettingsError::Value {
                place: place("data_dir"),
                message: format!(
                    "{} is inside the plugins directory {}; every commit would wake the plugin watcher",
                    self.data_dir.display(),
                    self.plugins_dir.display()
                ),
            });
        }
        if self.processes > 1 && !matches!(self.kv, KvBackend::Redis(_)) {
            return Err(SettingsError::Value {
                place: place("processes"),
                message: format!(
                    "{} processes need a store they can share: pass --kv redis://HOST:PORT (the file store is one process's, and memory would give each process its own data)",
                    self.processes
                ),
            });
        }
        if !self.cache {
            self.cache_dir = None;
        }
        // wasmtime's cache wants an absolute path: a relative one is taken from the working
        // directory here, once.
        if let Some(dir) = &self.cache_dir
            && dir.is_relative()
            && let Ok(cwd) = std::env::current_dir()
        {
            self.cache_dir = Some(cwd.join(dir));
        }
        if let Some(dir) = &self.cache_dir
            && inside(dir, &self.plugins_dir)
        {
            return Err(SettingsError::Value {
                place: place("cache_dir"),
                message: format!(
                    "{} is inside the plugins directory {}; compiled code is never read from the watched directory",
                    dir.display(),
                    self.plugins_dir.display()
                ),
            });
        }
        Ok(())
    }

    /// The Redis server that WebSocket topics and connections cross processes through, if any.
    pub(crate) fn pubsub_url(&self) -> Option<&str> {
        match (&self.pubsub, &self.kv) {
            (Pubsub::Redis(url), _) | (Pubsub::Auto, KvBackend::Redis(url)) => Some(url),
            _ => None,
        }
    }

    /// The effective configuration in the config file's own format.
    pub fn to_toml(&self) -> String {
        settings::to_toml(&SETTINGS, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(given: &[(&'static str, &str)]) -> Flags {
        Flags {
            given: given.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        }
    }

    fn from_text(text: &str, given: &[(&'static str, &str)]) -> Result<ServeConfig, String> {
        let path = Path::new("/etc/ankh/ankh.toml");
        ServeConfig::resolve(Some((path, text)), &flags(given)).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_without_a_file() {
        let c = ServeConfig::resolve(None, &Flags::default()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.plugins_dir, PathBuf::from("plugins"));
        assert_eq!(c.limits, Limits::default());
        assert!(c.pooling);
    }

    #[test]
    fn file_values_apply_and_flags_win() {
        let text = "listen = \"127.0.0.1:9000\"\nplugins = \"p\"\n[limits]\nqueue_depth = 7\n[timeouts]\nidle_ms = 1500\n";
        let c = from_text(text, &[]).unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.plugins_dir, PathBuf::from("/etc/ankh/p"));
        assert_eq!(c.limits.queue_depth, 7);
        assert_eq!(c.limits.idle_timeout, Duration::from_millis(1500));
        let c = from_text(text, &[("queue-depth", "9"), ("plugins", "q")]).unwrap();
        assert_eq!(c.limits.queue_depth, 9);
        assert_eq!(c.plugins_dir, PathBuf::from("q"));
    }

    #[test]
    fn bad_values_name_file_line_and_key() {
        let e = from_text("workers = 4\n\n[limits]\nqueue_depth = 0\n", &[]).unwrap_err();
        assert_eq!(
            e,
            "/etc/ankh/ankh.toml:4: limits.queue_depth: must be between 1 and 1048576, got 0"
        );
        // See: issue 12, item 9: names resolve, as for every server.
        let c = from_text("listen = \"localhost:9000\"\n", &[]).unwrap();
        assert!(c.listen.ip().is_loopback() && c.listen.port() == 9000);
        let e = from_text("listen = \"nope\"\n", &[]).unwrap_err();
        assert!(
            e.starts_with("/etc/ankh/ankh.toml:1: listen: invalid address"),
            "{e}"
        );
        let e = ServeConfig::resolve(None, &flags(&[("workers", "0")]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--workers: must be between 1 and 10000, got 0");
        let e = from_text("[limits]\nqueue_depth = \"many\"\n", &[]).unwrap_err();
        assert_eq!(
            e,
            "/etc/ankh/ankh.toml:2: limits.queue_depth: expected a whole number, found string"
        );
    }

    #[test]
    fn a_relative_cache_dir_is_made_absolute() {
        let c = ServeConfig::resolve(None, &flags(&[("cache-dir", "cache")])).unwrap();
        let dir = c.cache_dir.unwrap();
        assert!(
            dir.is_absolute() && dir.ends_with("cache"),
            "{}",
            dir.display()
        );
    }

    #[test]
    fn log_keys_apply_and_are_checked() {
        let c = ServeConfig::resolve(None, &Flags::default()).unwrap();
        assert_eq!(
            c.log,
            LogConfig {
                json: false,
                access_log: true,
                level: "info".into()
            }
        );
        let text = "[log]\nformat = \"json\"\naccess_log = false\nlevel = \"warn\"\n";
        let c = from_text(text, &[]).unwrap();
        assert!(c.log.json && !c.log.access_log);
        assert_eq!(c.log.level, "warn");
        let c = from_text(text, &[("log-format", "text"), ("log-level", "debug")]).unwrap();
        assert!(!c.log.json);
        assert_eq!(c.log.level, "debug");
        let e = from_text("[log]\nlevel = \"info,=[\"\n", &[]).unwrap_err();
        assert!(
            e.starts_with("/etc/ankh/ankh.toml:2: log.level: invalid log filter"),
            "{e}"
        );
        let e = from_text("[log]\ncolour = true\n", &[]).unwrap_err();
        assert!(
            e.starts_with(
                "/etc/ankh/ankh.toml:2: log.colour: unknown field `colour`, expected one of:"
            ),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_their_line() {
        let e = from_text("workers = 4\n[limits]\nmax_heads = 3\n", &[]).unwrap_err();
        assert!(
            e.starts_with("/etc/ankh/ankh.toml:3: limits.max_heads: unknown field `max_heads`"),
            "{e}"
        );
        let e = from_text("wrkers = 4\n", &[]).unwrap_err();
        assert!(
            e.starts_with("/etc/ankh/ankh.toml:1: wrkers: unknown field `wrkers`"),
            "{e}"
        );
    }

    #[test]
    fn a_trace_sample_is_a_share_from_0_to_1() {
        assert_eq!(from_text("", &[]).unwrap().trace_sample, 1.0);
        assert_eq!(
            from_text("trace_sample = 0.25\n", &[])
                .unwrap()
                .trace_sample,
            0.25
        );
        assert_eq!(
            from_text("trace_sample = 0\n", &[]).unwrap().trace_sample,
            0.0
        );
        let c = from_text("", &[("trace-sample", "0.01")]).unwrap();
        assert_eq!(c.trace_sample, 0.01);
        assert!(
            c.to_toml().contains("trace_sample = 0.01\n"),
            "{}",
            c.to_toml()
        );
        let e = from_text("trace_sample = 1.5\n", &[]).unwrap_err();
        assert_eq!(
            e,
            "/etc/ankh/ankh.toml:1: trace_sample: must be a number from 0 to 1, got \"1.5\""
        );
        let e = from_text("trace_sample = \"half\"\n", &[]).unwrap_err();
        assert_eq!(
            e,
            "/etc/ankh/ankh.toml:1: trace_sample: expected a number from 0 to 1, found string"
        );
        let e = ServeConfig::resolve(None, &flags(&[("trace-sample", "-1")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--trace-sample: must be a number from 0 to 1, got \"-1\""
        );
    }

    #[test]
    fn the_printed_config_reads_back_the_same() {
        let c = ServeConfig::resolve(None, &flags(&[("admin", "127.0.0.1:9999")])).unwrap();
        let text = c.to_toml();
        let again = from_text(&text, &[]).unwrap();
        assert_eq!(again.limits, c.limits);
        assert_eq!(again.listen, c.listen);
        assert_eq!(again.admin, c.admin);
    }

    // See: issue 13: one error message named the wrong flag.
    #[test]
    fn a_target_limit_error_names_its_own_flag() {
        let e = ServeConfig::resolve(None, &flags(&[("max-target-bytes", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--max-target-bytes: must be between 16"),
            "{e}"
        );
    }

    // See: issue 13: one value was clamped silently instead of refused.
    #[test]
    fn a_target_limit_over_the_head_limit_is_refused() {
        let e = from_text(
            "[limits]\nmax_head_bytes = 1024\nmax_target_bytes = 2048\n",
            &[],
        )
        .unwrap_err();
        assert_eq!(
            e,
            "/etc/ankh/ankh.toml:3: limits.max_target_bytes: 2048 is more than limits.max_head_bytes (1024), which the target is part of"
        );
    }

    #[test]
    fn help_shows_the_real_defaults_and_the_key() {
        let queue = SETTINGS
            .iter()
            .find(|s| s.key == "limits.queue_depth")
            .unwrap();
        let help = queue.help();
        assert!(
            help.contains(&format!("[default: {}]", limits::QUEUE_DEPTH)),
            "{help}"
        );
        assert!(help.contains("[config: limits.queue_depth]"), "{help}");
        let memory = SETTINGS
            .iter()
            .find(|s| s.key == "limits.memory_limit_mib")
            .unwrap();
        assert!(
            memory
                .help()
                .contains(&format!("[default: {}]", limits::GUEST_MEMORY_BYTES >> 20))
        );
    }
}
