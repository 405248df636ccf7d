//! The configuration of `ankh serve`: defaults, then the config file (`ankh.toml`), then flags.
//!
//! [`FileConfig`] is the file as written (every key optional, unknown keys refused);
//! [`Overrides`] are the flags given on the command line; [`ServeConfig::resolve`] layers them
//! over the defaults of [`crate::limits`] and validates the result. An error names where the
//! bad value came from: the file, line and key, or the flag.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::limits::{Limits, WORKERS_PER_CORE};

/// The file read when `--config` is not given, if it exists in the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "ankh.toml";

/// Everything `ankh serve` needs to start.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub plugins_dir: PathBuf,
    pub workers: usize,
    pub limits: Limits,
    /// Use wasmtime's pooling instance allocator.
    pub pooling: bool,
    /// Watch the plugins directory and hot-reload what changes.
    pub watch: bool,
    /// Where compiled plugins are cached (`None`: no cache).
    pub cache_dir: Option<PathBuf>,
    /// Where the admin endpoints (`/healthz`, `/readyz`, `/metrics`) listen, if anywhere.
    pub admin: Option<SocketAddr>,
    /// Where to write the listening address once the server accepts connections.
    pub ready_file: Option<PathBuf>,
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

/// The log level when neither the config nor `RUST_LOG` gives one.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// `ankh.toml`. Every key is optional; unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    listen: Option<Spanned<String>>,
    plugins: Option<Spanned<PathBuf>>,
    workers: Option<Spanned<u64>>,
    pooling: Option<Spanned<bool>>,
    watch: Option<Spanned<bool>>,
    cache: Option<Spanned<bool>>,
    cache_dir: Option<Spanned<PathBuf>>,
    admin: Option<Spanned<String>>,
    ready_file: Option<Spanned<PathBuf>>,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    timeouts: FileTimeouts,
    #[serde(default)]
    log: FileLog,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    format: Option<Spanned<String>>,
    access_log: Option<Spanned<bool>>,
    level: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_head_bytes: Option<Spanned<u64>>,
    max_headers: Option<Spanned<u64>>,
    max_target_bytes: Option<Spanned<u64>>,
    max_body_bytes: Option<Spanned<u64>>,
    queue_depth: Option<Spanned<u64>>,
    cpu_deadline_ms: Option<Spanned<u64>>,
    memory_limit_mib: Option<Spanned<u64>>,
    handler_timeout_ms: Option<Spanned<u64>>,
    kv_max_bytes: Option<Spanned<u64>>,
    max_connections: Option<Spanned<u64>>,
    max_send_buffer_bytes: Option<Spanned<u64>>,
    ws_max_message_bytes: Option<Spanned<u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTimeouts {
    idle_ms: Option<Spanned<u64>>,
    head_ms: Option<Spanned<u64>>,
    request_ms: Option<Spanned<u64>>,
    send_ms: Option<Spanned<u64>>,
    drain_ms: Option<Spanned<u64>>,
    ws_ping_ms: Option<Spanned<u64>>,
    ws_pong_ms: Option<Spanned<u64>>,
}

/// Values given as flags; `None` where the flag was not given.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub plugins: Option<PathBuf>,
    pub workers: Option<u64>,
    pub no_pooling: bool,
    pub no_watch: bool,
    pub no_cache: bool,
    pub cache_dir: Option<PathBuf>,
    pub admin: Option<String>,
    pub ready_file: Option<PathBuf>,
    pub max_head_bytes: Option<u64>,
    pub max_headers: Option<u64>,
    pub max_body_bytes: Option<u64>,
    pub queue_depth: Option<u64>,
    pub cpu_deadline_ms: Option<u64>,
    pub memory_limit_mib: Option<u64>,
    pub handler_timeout_ms: Option<u64>,
    pub kv_max_bytes: Option<u64>,
    pub max_connections: Option<u64>,
    pub max_send_buffer_bytes: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub head_timeout_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
    pub send_timeout_ms: Option<u64>,
    pub drain_timeout_ms: Option<u64>,
    pub ws_max_message_bytes: Option<u64>,
    pub ws_ping_interval_ms: Option<u64>,
    pub ws_pong_timeout_ms: Option<u64>,
    pub log_format: Option<String>,
    pub no_access_log: bool,
    pub log_level: Option<String>,
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
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{origin}: {message}")]
    Value { origin: String, message: String },
}

/// Where a value came from, for error messages.
struct Origin<'a> {
    file: Option<(&'a Path, &'a str)>,
}

impl Origin<'_> {
    /// `ankh.toml:7: limits.queue_depth` for a file value, `--queue-depth` for a flag.
    fn describe<T>(&self, flag: &str, key: &str, from_file: Option<&Spanned<T>>) -> String {
        match (from_file, self.file) {
            (Some(spanned), Some((path, text))) => {
                let line = text[..spanned.span().start.min(text.len())]
                    .lines()
                    .count()
                    .max(1);
                format!("{}:{line}: {key}", path.display())
            }
            _ => flag.to_owned(),
        }
    }
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn read(path: &Path) -> Result<(FileConfig, String), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        let file = toml::from_str(&text).map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        Ok((file, text))
    }
}

/// `$XDG_CACHE_HOME/ankh`, else `$HOME/.cache/ankh`.
fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("ankh"))
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

/// `IP:PORT`, or `NAME:PORT` resolved as every server resolves its listen address (the
/// first IPv4 address of the name, else its first address).
fn resolve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    if !text.contains(':') {
        return Err("no port".to_owned());
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|e| e.to_string())?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| "the name has no address".to_owned())
}

/// Picks a flag over a file value over nothing, remembering which.
fn pick<T: Clone>(flag: Option<T>, file: Option<&Spanned<T>>) -> (Option<T>, Option<&Spanned<T>>) {
    match flag {
        Some(v) => (Some(v), None),
        None => (file.map(|s| s.get_ref().clone()), file),
    }
}

impl ServeConfig {
    /// Layers the file (if any) and the flags over the defaults, and validates the result.
    /// `file` is the parsed file, its path and its text.
    pub fn resolve(
        file: Option<(FileConfig, &Path, &str)>,
        flags: Overrides,
    ) -> Result<ServeConfig, ConfigError> {
        let (cfg, origin, base) = match &file {
            Some((cfg, path, text)) => (
                Some(cfg),
                Origin {
                    file: Some((*path, *text)),
                },
                path.parent().map(Path::to_path_buf),
            ),
            None => (None, Origin { file: None }, None),
        };
        let empty = FileConfig::default();
        let f = cfg.unwrap_or(&empty);
        let err = |flag: &str, key: &str, spanned: Option<&Spanned<u64>>, message: String| {
            ConfigError::Value {
                origin: origin.describe(flag, key, spanned),
                message,
            }
        };
        // A number within `min..=max`, from the flag, the file or the default.
        let number = |flag: &str,
                      key: &str,
                      given: Option<u64>,
                      in_file: Option<&Spanned<u64>>,
                      default: u64,
                      min: u64,
                      max: u64|
         -> Result<u64, ConfigError> {
            let (value, spanned) = pick(given, in_file);
            let value = value.unwrap_or(default);
            if value < min || value > max {
                return Err(err(
                    flag,
                    key,
                    spanned,
                    format!("must be between {min} and {max}, got {value}"),
                ));
            }
            Ok(value)
        };

        let (listen, listen_span) = pick(flags.listen.clone(), f.listen.as_ref());
        let listen_text = listen.unwrap_or_else(|| "127.0.0.1:8080".to_owned());
        let listen = resolve(&listen_text).map_err(|why| ConfigError::Value {
            origin: origin.describe("--listen", "listen", listen_span),
            message: format!(
                "invalid address {listen_text:?}: expected IP:PORT or HOST:PORT, e.g. 127.0.0.1:8080 ({why})"
            ),
        })?;
        let relative_to_file = |p: PathBuf, from_file: bool| match (&base, from_file) {
            (Some(base), true) if p.is_relative() => base.join(p),
            _ => p,
        };
        let (plugins, plugins_span) = pick(flags.plugins.clone(), f.plugins.as_ref());
        let plugins_dir = relative_to_file(
            plugins.unwrap_or_else(|| PathBuf::from("plugins")),
            plugins_span.is_some(),
        );
        let (admin, admin_span) = pick(flags.admin.clone(), f.admin.as_ref());
        let admin = match admin {
            Some(text) => Some(resolve(&text).map_err(|why| ConfigError::Value {
                origin: origin.describe("--admin", "admin", admin_span),
                message: format!(
                    "invalid address {text:?}: expected IP:PORT or HOST:PORT, e.g. 127.0.0.1:9090 ({why})"
                ),
            })?),
            None => None,
        };
        let (ready, ready_span) = pick(flags.ready_file.clone(), f.ready_file.as_ref());
        let ready_file = ready.map(|p| relative_to_file(p, ready_span.is_some()));

        let cores = std::thread::available_parallelism().map_or(1, usize::from) as u64;
        let workers = number(
            "--workers",
            "workers",
            flags.workers,
            f.workers.as_ref(),
            cores * WORKERS_PER_CORE as u64,
            1,
            10_000,
        )?;
        let pooling = !flags.no_pooling && f.pooling.as_ref().is_none_or(|p| *p.get_ref());
        let watch = !flags.no_watch && f.watch.as_ref().is_none_or(|w| *w.get_ref());
        let cache_on = !flags.no_cache && f.cache.as_ref().is_none_or(|c| *c.get_ref());
        let (cache_dir, cache_span) = pick(flags.cache_dir.clone(), f.cache_dir.as_ref());
        // wasmtime's cache wants an absolute path: a relative one is taken from the working
        // directory here, once.
        let cache_dir = match cache_dir {
            Some(dir) => Some(relative_to_file(dir, cache_span.is_some())),
            None => default_cache_dir(),
        }
        .filter(|_| cache_on)
        .map(|dir| match std::env::current_dir() {
            Ok(cwd) if dir.is_relative() => cwd.join(dir),
            _ => dir,
        });
        if let Some(dir) = &cache_dir
            && inside(dir, &plugins_dir)
        {
            return Err(ConfigError::Value {
                origin: origin.describe("--cache-dir", "cache_dir", cache_span),
                message: format!(
                    "{} is inside the plugins directory; compiled code is never read from the watched directory",
                    dir.display()
                ),
            });
        }

        let l = &f.limits;
        let t = &f.timeouts;
        let d = Limits::default();
        let max_head_bytes = number(
            "--max-head-bytes",
            "limits.max_head_bytes",
            flags.max_head_bytes,
            l.max_head_bytes.as_ref(),
            d.max_head_bytes as u64,
            256,
            1 << 20,
        )?;
        let max_headers = number(
            "--max-headers",
            "limits.max_headers",
            flags.max_headers,
            l.max_headers.as_ref(),
            d.max_headers as u64,
            1,
            10_000,
        )?;
        let max_target_bytes = number(
            "--max-head-bytes",
            "limits.max_target_bytes",
            None,
            l.max_target_bytes.as_ref(),
            d.max_target_bytes as u64,
            16,
            1 << 20,
        )?;
        let max_body_bytes = number(
            "--max-body-bytes",
            "limits.max_body_bytes",
            flags.max_body_bytes,
            l.max_body_bytes.as_ref(),
            d.max_body_bytes,
            0,
            1 << 40,
        )?;
        let queue_depth = number(
            "--queue-depth",
            "limits.queue_depth",
            flags.queue_depth,
            l.queue_depth.as_ref(),
            d.queue_depth as u64,
            1,
            1 << 20,
        )?;
        let cpu_deadline_ms = number(
            "--cpu-deadline-ms",
            "limits.cpu_deadline_ms",
            flags.cpu_deadline_ms,
            l.cpu_deadline_ms.as_ref(),
            d.guest_cpu_deadline.as_millis() as u64,
            1,
            3_600_000,
        )?;
        let memory_limit_mib = number(
            "--memory-limit-mib",
            "limits.memory_limit_mib",
            flags.memory_limit_mib,
            l.memory_limit_mib.as_ref(),
            (d.guest_memory_bytes >> 20) as u64,
            1,
            4096,
        )?;
        let handler_timeout_ms = number(
            "--handler-timeout-ms",
            "limits.handler_timeout_ms",
            flags.handler_timeout_ms,
            l.handler_timeout_ms.as_ref(),
            d.handler_timeout.as_millis() as u64,
            1,
            3_600_000,
        )?;
        let kv_max_bytes = number(
            "--kv-max-bytes",
            "limits.kv_max_bytes",
            flags.kv_max_bytes,
            l.kv_max_bytes.as_ref(),
            d.kv_max_bytes as u64,
            0,
            1 << 40,
        )?;
        let max_connections = number(
            "--max-connections",
            "limits.max_connections",
            flags.max_connections,
            l.max_connections.as_ref(),
            d.max_connections as u64,
            1,
            10_000_000,
        )?;
        let max_send_buffer_bytes = number(
            "--max-send-buffer-bytes",
            "limits.max_send_buffer_bytes",
            flags.max_send_buffer_bytes,
            l.max_send_buffer_bytes.as_ref(),
            d.max_send_buffer_bytes as u64,
            1024,
            1 << 34,
        )?;
        let ms = |flag: &str,
                  key: &str,
                  given: Option<u64>,
                  in_file: Option<&Spanned<u64>>,
                  default: Duration| {
            number(
                flag,
                key,
                given,
                in_file,
                default.as_millis() as u64,
                1,
                86_400_000,
            )
            .map(Duration::from_millis)
        };
        let idle_timeout = ms(
            "--idle-timeout-ms",
            "timeouts.idle_ms",
            flags.idle_timeout_ms,
            t.idle_ms.as_ref(),
            d.idle_timeout,
        )?;
        let head_timeout = ms(
            "--head-timeout-ms",
            "timeouts.head_ms",
            flags.head_timeout_ms,
            t.head_ms.as_ref(),
            d.head_timeout,
        )?;
        let request_timeout = ms(
            "--request-timeout-ms",
            "timeouts.request_ms",
            flags.request_timeout_ms,
            t.request_ms.as_ref(),
            d.request_timeout,
        )?;
        let send_timeout = ms(
            "--send-timeout-ms",
            "timeouts.send_ms",
            flags.send_timeout_ms,
            t.send_ms.as_ref(),
            d.send_timeout,
        )?;
        let drain_timeout = ms(
            "--drain-timeout-ms",
            "timeouts.drain_ms",
            flags.drain_timeout_ms,
            t.drain_ms.as_ref(),
            d.drain_timeout,
        )?;

        let ws_max_message_bytes = number(
            "--ws-max-message-bytes",
            "limits.ws_max_message_bytes",
            flags.ws_max_message_bytes,
            l.ws_max_message_bytes.as_ref(),
            d.ws_max_message_bytes as u64,
            125,
            1 << 30,
        )?;
        let ws_ping_interval = ms(
            "--ws-ping-interval-ms",
            "timeouts.ws_ping_ms",
            flags.ws_ping_interval_ms,
            t.ws_ping_ms.as_ref(),
            d.ws_ping_interval,
        )?;
        let ws_pong_timeout = ms(
            "--ws-pong-timeout-ms",
            "timeouts.ws_pong_ms",
            flags.ws_pong_timeout_ms,
            t.ws_pong_ms.as_ref(),
            d.ws_pong_timeout,
        )?;
        let (format, format_span) = pick(flags.log_format.clone(), f.log.format.as_ref());
        let json = match format.as_deref().unwrap_or("text") {
            "text" => false,
            "json" => true,
            other => {
                return Err(ConfigError::Value {
                    origin: origin.describe("--log-format", "log.format", format_span),
                    message: format!("must be \"text\" or \"json\", got {other:?}"),
                });
            }
        };
        let access_log =
            !flags.no_access_log && f.log.access_log.as_ref().is_none_or(|a| *a.get_ref());
        let (level, level_span) = pick(flags.log_level.clone(), f.log.level.as_ref());
        let level = level.unwrap_or_else(|| DEFAULT_LOG_LEVEL.to_owned());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&level) {
            return Err(ConfigError::Value {
                origin: origin.describe("--log-level", "log.level", level_span),
                message: format!("invalid log filter {level:?}: {e}"),
            });
        }
        let log = LogConfig {
            json,
            access_log,
            level,
        };

        let limits = Limits {
            max_head_bytes: max_head_bytes as usize,
            max_target_bytes: (max_target_bytes as usize).min(max_head_bytes as usize),
            max_headers: max_headers as usize,
            max_body_bytes,
            queue_depth: queue_depth as usize,
            guest_cpu_deadline: Duration::from_millis(cpu_deadline_ms),
            guest_memory_bytes: (memory_limit_mib << 20) as usize,
            handler_timeout: Duration::from_millis(handler_timeout_ms),
            kv_max_bytes: kv_max_bytes as usize,
            max_connections: max_connections as usize,
            max_send_buffer_bytes: max_send_buffer_bytes as usize,
            idle_timeout,
            head_timeout,
            request_timeout,
            send_timeout,
            drain_timeout,
            ws_max_message_bytes: ws_max_message_bytes as usize,
            ws_ping_interval,
            ws_pong_timeout,
        };
        Ok(ServeConfig {
            listen,
            plugins_dir,
            workers: workers as usize,
            limits,
            pooling,
            watch,
            cache_dir,
            admin,
            ready_file,
            log,
            source: file.map(|(_, path, _)| path.to_owned()),
        })
    }

    /// The effective configuration in the config file's own format.
    pub fn to_toml(&self) -> String {
        #[derive(Serialize)]
        struct Out<'a> {
            listen: String,
            plugins: &'a Path,
            workers: usize,
            pooling: bool,
            watch: bool,
            cache: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_dir: Option<&'a Path>,
            #[serde(skip_serializing_if = "Option::is_none")]
            admin: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ready_file: Option<&'a Path>,
            limits: OutLimits,
            timeouts: OutTimeouts,
            log: OutLog<'a>,
        }
        #[derive(Serialize)]
        struct OutLog<'a> {
            format: &'static str,
            access_log: bool,
            level: &'a str,
        }
        #[derive(Serialize)]
        struct OutLimits {
            max_head_bytes: usize,
            max_headers: usize,
            max_target_bytes: usize,
            max_body_bytes: u64,
            queue_depth: usize,
            cpu_deadline_ms: u64,
            memory_limit_mib: usize,
            handler_timeout_ms: u64,
            kv_max_bytes: usize,
            max_connections: usize,
            max_send_buffer_bytes: usize,
            ws_max_message_bytes: usize,
        }
        #[derive(Serialize)]
        struct OutTimeouts {
            idle_ms: u64,
            head_ms: u64,
            request_ms: u64,
            send_ms: u64,
            drain_ms: u64,
            ws_ping_ms: u64,
            ws_pong_ms: u64,
        }
        let l = &self.limits;
        let out = Out {
            listen: self.listen.to_string(),
            plugins: &self.plugins_dir,
            workers: self.workers,
            pooling: self.pooling,
            watch: self.watch,
            cache: self.cache_dir.is_some(),
            cache_dir: self.cache_dir.as_deref(),
            admin: self.admin.map(|a| a.to_string()),
            ready_file: self.ready_file.as_deref(),
            limits: OutLimits {
                max_head_bytes: l.max_head_bytes,
                max_headers: l.max_headers,
                max_target_bytes: l.max_target_bytes,
                max_body_bytes: l.max_body_bytes,
                queue_depth: l.queue_depth,
                cpu_deadline_ms: l.guest_cpu_deadline.as_millis() as u64,
                memory_limit_mib: l.guest_memory_bytes >> 20,
                handler_timeout_ms: l.handler_timeout.as_millis() as u64,
                kv_max_bytes: l.kv_max_bytes,
                max_connections: l.max_connections,
                max_send_buffer_bytes: l.max_send_buffer_bytes,
                ws_max_message_bytes: l.ws_max_message_bytes,
            },
            timeouts: OutTimeouts {
                idle_ms: l.idle_timeout.as_millis() as u64,
                head_ms: l.head_timeout.as_millis() as u64,
                request_ms: l.request_timeout.as_millis() as u64,
                send_ms: l.send_timeout.as_millis() as u64,
                drain_ms: l.drain_timeout.as_millis() as u64,
                ws_ping_ms: l.ws_ping_interval.as_millis() as u64,
                ws_pong_ms: l.ws_pong_timeout.as_millis() as u64,
            },
            log: OutLog {
                format: if self.log.json { "json" } else { "text" },
                access_log: self.log.access_log,
                level: &self.log.level,
            },
        };
        toml::to_string(&out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_text(text: &str, flags: Overrides) -> Result<ServeConfig, String> {
        let path = Path::new("/etc/ankh/ankh.toml");
        let file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        ServeConfig::resolve(Some((file, path, text)), flags).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_without_a_file() {
        let c = ServeConfig::resolve(None, Overrides::default()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.plugins_dir, PathBuf::from("plugins"));
        assert_eq!(c.limits, Limits::default());
        assert!(c.pooling);
    }

    #[test]
    fn file_values_apply_and_flags_win() {
        let text = "listen = \"127.0.0.1:9000\"\nplugins = \"p\"\n[limits]\nqueue_depth = 7\n[timeouts]\nidle_ms = 1500\n";
        let c = from_text(text, Overrides::default()).unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.plugins_dir, PathBuf::from("/etc/ankh/p"));
        assert_eq!(c.limits.queue_depth, 7);
        assert_eq!(c.limits.idle_timeout, Duration::from_millis(1500));
        let flags = Overrides {
            queue_depth: Some(9),
            plugins: Some(PathBuf::from("q")),
            ..Overrides::default()
        };
        let c = from_text(text, flags).unwrap();
        assert_eq!(c.limits.queue_depth, 9);
        assert_eq!(c.plugins_dir, PathBuf::from("q"));
    }

    #[test]
    fn bad_values_name_file_line_and_key() {
        let e = from_text(
            "workers = 4\n\n[limits]\nqueue_depth = 0\n",
            Overrides::default(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "/etc/ankh/ankh.toml:4: limits.queue_depth: must be between 1 and 1048576, got 0"
        );
        // See: issue 12, item 9: names resolve, as for every server.
        let c = from_text("listen = \"localhost:9000\"\n", Overrides::default()).unwrap();
        assert!(c.listen.ip().is_loopback() && c.listen.port() == 9000);
        let e = from_text("listen = \"nope\"\n", Overrides::default()).unwrap_err();
        assert!(
            e.starts_with("/etc/ankh/ankh.toml:1: listen: invalid address"),
            "{e}"
        );
        let e = ServeConfig::resolve(
            None,
            Overrides {
                workers: Some(0),
                ..Overrides::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "--workers: must be between 1 and 10000, got 0");
    }

    #[test]
    fn a_relative_cache_dir_is_made_absolute() {
        let flags = Overrides {
            cache_dir: Some(PathBuf::from("cache")),
            ..Overrides::default()
        };
        let c = ServeConfig::resolve(None, flags).unwrap();
        let dir = c.cache_dir.unwrap();
        assert!(
            dir.is_absolute() && dir.ends_with("cache"),
            "{}",
            dir.display()
        );
    }

    #[test]
    fn log_keys_apply_and_are_checked() {
        let c = ServeConfig::resolve(None, Overrides::default()).unwrap();
        assert_eq!(
            c.log,
            LogConfig {
                json: false,
                access_log: true,
                level: "info".into()
            }
        );
        let text = "[log]\nformat = \"json\"\naccess_log = false\nlevel = \"warn\"\n";
        let c = from_text(text, Overrides::default()).unwrap();
        assert!(c.log.json && !c.log.access_log);
        assert_eq!(c.log.level, "warn");
        let flags = Overrides {
            log_format: Some("text".into()),
            log_level: Some("debug".into()),
            ..Overrides::default()
        };
        let c = from_text(text, flags).unwrap();
        assert!(!c.log.json);
        assert_eq!(c.log.level, "debug");
        let e = from_text("[log]\nlevel = \"info,=[\"\n", Overrides::default()).unwrap_err();
        assert!(
            e.starts_with("/etc/ankh/ankh.toml:2: log.level: invalid log filter"),
            "{e}"
        );
        let e = from_text("[log]\ncolour = true\n", Overrides::default()).unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
    }

    #[test]
    fn unknown_keys_are_refused_with_their_line() {
        let e = from_text(
            "workers = 4\n[limits]\nmax_heads = 3\n",
            Overrides::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("line 3") && e.contains("unknown field `max_heads`"),
            "{e}"
        );
    }

    #[test]
    fn the_printed_config_reads_back_the_same() {
        let c = ServeConfig::resolve(None, Overrides::default()).unwrap();
        let text = c.to_toml();
        let again = from_text(&text, Overrides::default()).unwrap();
        assert_eq!(again.limits, c.limits);
        assert_eq!(again.listen, c.listen);
    }
}
