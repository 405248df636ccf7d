//! The command line: `ankh serve` and `ankh build`. Flags are parsed here and turned into
//! validated configuration; nothing else reads them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{DEFAULT_CONFIG_FILE, FileConfig, Overrides, ServeConfig};

/// ankh: an HTTP/1.1 and WebSocket application server whose handlers are sandboxed
/// WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "ankh", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
pub enum Command {
    /// Serve every NAME.wasm in the plugins directory at /NAME.
    Serve(ServeArgs),
    /// Build every plugin crate in a directory to NAME.wasm (wasm32-wasip2, release).
    Build(BuildArgs),
    /// Check that a NAME.wasm would be served: compile and link it against the plugin world,
    /// and print its imports, its exports and the limits it would run under. Exits non-zero
    /// with the reason when it would be refused.
    Check(CheckArgs),
    /// Serve a directory of plugin crates and rebuild each one when its sources change: build
    /// all, serve the results with hot reload, then rebuild and swap on every save.
    Dev(DevArgs),
    /// Create a plugin crate from a template (a router, a JSON route, a test) that builds with
    /// `ankh build` as it is.
    New(NewArgs),
}

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Directory of plugin crates; the built NAME.wasm files are written and served there.
    #[arg(value_name = "SRC", default_value = "plugins")]
    pub src: PathBuf,

    /// Build without optimisations (faster rebuilds).
    #[arg(long)]
    pub debug: bool,

    /// The server's settings (the same flags as `serve`; --plugins is SRC).
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name: it is served at /NAME.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// Where to create the crate (as DIR/NAME).
    #[arg(long, value_name = "DIR", default_value = "plugins")]
    pub dir: PathBuf,

    /// The guest SDK (`ankh-guest`) to depend on [default: the one next to this build's sources].
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The plugin file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The server configuration whose limits apply (the same flags as `serve`).
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Config file (TOML). Without this flag, ./ankh.toml is read if it exists. Flags override
    /// what the file says.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the effective configuration (defaults, file and flags combined) and exit.
    #[arg(long)]
    pub print_config: bool,

    /// Log format on stderr: `text` (one readable line per event) or `json` (one JSON object
    /// per line) [default: text; config: log.format].
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,

    /// Log filter, e.g. `info` or `warn,ankh::reload=debug` [default: info; config: log.level].
    /// RUST_LOG, when set, replaces it.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,

    /// Do not write an access-log line per request (target `ankh::access`) [config:
    /// log.access_log].
    #[arg(long)]
    pub no_access_log: bool,

    /// Directory of plugins: each NAME.wasm directly inside is served at /NAME, and
    /// index.wasm serves every path no other plugin matches [default: plugins].
    #[arg(long, short = 'p', value_name = "DIR")]
    pub plugins: Option<PathBuf>,

    /// Address to listen on (IP:PORT). Port 0 picks a free port; the log and the ready file
    /// say which [default: 127.0.0.1:8080].
    #[arg(long, short = 'l', value_name = "ADDR")]
    pub listen: Option<String>,

    /// Write the listening address to FILE once the server accepts connections (for scripts
    /// and orchestration: wait for the file, with a timeout).
    #[arg(long, value_name = "FILE")]
    pub ready_file: Option<PathBuf>,

    /// Worker threads that run handlers [default: 10 per CPU core]. Handlers may block, so
    /// size this for the number of requests you want in flight at once.
    #[arg(long, short = 'w', value_name = "N")]
    pub workers: Option<u64>,

    /// Requests that may wait for a free worker; past this, clients get 503 + Retry-After
    /// [default: 1024].
    #[arg(long, value_name = "N")]
    pub queue_depth: Option<u64>,

    /// Largest request body in bytes; a larger one gets 413 before it is read
    /// [default: 16777216].
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<u64>,

    /// Largest request head (request line + headers) in bytes; a larger one gets 431
    /// [default: 8192].
    #[arg(long, value_name = "BYTES")]
    pub max_head_bytes: Option<u64>,

    /// Most header fields per request; more get 431 [default: 100].
    #[arg(long, value_name = "N")]
    pub max_headers: Option<u64>,

    /// Open connections; the next one is accepted and closed at once [default: 10000].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u64>,

    /// Unsent response bytes a connection may hold before it is closed as not reading
    /// [default: 4194304].
    #[arg(long, value_name = "BYTES")]
    pub max_send_buffer_bytes: Option<u64>,

    /// Close a connection with no request in progress after this long [default: 30000].
    #[arg(long, value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,

    /// A request head must be complete this long after its first byte, or the client gets 408
    /// [default: 10000].
    #[arg(long, value_name = "MS")]
    pub head_timeout_ms: Option<u64>,

    /// A whole request (head and body) must arrive this long after its first byte, or the
    /// client gets 408 [default: 60000].
    #[arg(long, value_name = "MS")]
    pub request_timeout_ms: Option<u64>,

    /// Close a connection whose pending output makes no progress for this long
    /// [default: 30000].
    #[arg(long, value_name = "MS")]
    pub send_timeout_ms: Option<u64>,

    /// On SIGTERM/SIGINT, how long in-flight requests may take before everything still open
    /// is closed [default: 5000].
    #[arg(long, value_name = "MS")]
    pub drain_timeout_ms: Option<u64>,

    /// Largest WebSocket message a client may send; a frame declaring more is refused with
    /// Close 1009 before its payload is read [default: 65536].
    #[arg(long, value_name = "BYTES")]
    pub ws_max_message_bytes: Option<u64>,

    /// Ping a WebSocket that has been silent this long [default: 30000].
    #[arg(long, value_name = "MS")]
    pub ws_ping_interval_ms: Option<u64>,

    /// Close a pinged WebSocket that sends nothing back for this long [default: 30000].
    #[arg(long, value_name = "MS")]
    pub ws_pong_timeout_ms: Option<u64>,

    /// CPU time one handler call may use before it is stopped and the client gets 504.
    /// Time spent blocked (sleeping, waiting on I/O) does not count [default: 2000].
    #[arg(long, value_name = "MS")]
    pub cpu_deadline_ms: Option<u64>,

    /// Linear memory one plugin instance may grow to, in MiB; past it the request gets 500
    /// [default: 64].
    #[arg(long, value_name = "MIB")]
    pub memory_limit_mib: Option<u64>,

    /// Wall-clock time one handler call may take, waiting included; past it the call is
    /// stopped, the client gets 504 and the instance is replaced [default: 30000].
    #[arg(long, value_name = "MS")]
    pub handler_timeout_ms: Option<u64>,

    /// Bytes (keys plus values) one plugin's key-value store may hold; past it writes fail
    /// with `full` [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    pub kv_max_bytes: Option<u64>,

    /// Allocate instances on demand instead of from wasmtime's pooling allocator.
    #[arg(long)]
    pub no_pooling: bool,

    /// Do not watch the plugins directory: serve the plugins found at start, and never
    /// reload them.
    #[arg(long)]
    pub no_watch: bool,

    /// Where compiled plugins are cached, keyed by content and engine settings, so a restart
    /// with unchanged plugins does not recompile. Must be outside the plugins directory
    /// [default: $XDG_CACHE_HOME/ankh or ~/.cache/ankh].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Compile every plugin at load, without the disk cache.
    #[arg(long)]
    pub no_cache: bool,

    /// Serve /healthz, /readyz and /metrics (Prometheus text) on this address; keep it on
    /// loopback. Without a value: 127.0.0.1:9090. Off unless given.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9090")]
    pub admin: Option<String>,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Directory whose plugin crates (each a subdirectory with a Cargo.toml) are built; may
    /// itself be a cargo workspace.
    #[arg(value_name = "SRC", default_value = "plugins")]
    pub src: PathBuf,

    /// Where NAME.wasm files are written [default: SRC].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Build without optimisations (faster to compile, slower to run).
    #[arg(long)]
    pub debug: bool,
}

impl ServeArgs {
    /// Reads the config file (if any) and layers the flags over it into a validated
    /// [`ServeConfig`].
    pub fn into_config(self) -> anyhow::Result<ServeConfig> {
        let path = match &self.config {
            Some(path) => Some(path.clone()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.is_file()),
        };
        let flags = Overrides {
            listen: self.listen,
            plugins: self.plugins,
            workers: self.workers,
            no_pooling: self.no_pooling,
            no_watch: self.no_watch,
            no_cache: self.no_cache,
            cache_dir: self.cache_dir,
            admin: self.admin,
            ready_file: self.ready_file,
            max_head_bytes: self.max_head_bytes,
            max_headers: self.max_headers,
            max_body_bytes: self.max_body_bytes,
            queue_depth: self.queue_depth,
            cpu_deadline_ms: self.cpu_deadline_ms,
            memory_limit_mib: self.memory_limit_mib,
            handler_timeout_ms: self.handler_timeout_ms,
            kv_max_bytes: self.kv_max_bytes,
            max_connections: self.max_connections,
            max_send_buffer_bytes: self.max_send_buffer_bytes,
            idle_timeout_ms: self.idle_timeout_ms,
            head_timeout_ms: self.head_timeout_ms,
            request_timeout_ms: self.request_timeout_ms,
            send_timeout_ms: self.send_timeout_ms,
            drain_timeout_ms: self.drain_timeout_ms,
            ws_max_message_bytes: self.ws_max_message_bytes,
            ws_ping_interval_ms: self.ws_ping_interval_ms,
            ws_pong_timeout_ms: self.ws_pong_timeout_ms,
            log_format: self.log_format,
            no_access_log: self.no_access_log,
            log_level: self.log_level,
        };
        let config = match path {
            Some(path) => {
                let (file, text) = FileConfig::read(&path)?;
                ServeConfig::resolve(Some((file, &path, &text)), flags)?
            }
            None => ServeConfig::resolve(None, flags)?,
        };
        Ok(config)
    }
}
