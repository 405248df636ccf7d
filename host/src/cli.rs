//! The command line: `ankh serve` and `ankh build`. Flags are parsed here and turned into
//! validated configuration; nothing else reads them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::config::{ServeConfig, default_workers};

/// ankh: an HTTP/1.1 and WebSocket application server whose handlers are sandboxed
/// WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "ankh", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve every NAME.wasm in the plugins directory at /NAME.
    Serve(ServeArgs),
    /// Build every plugin crate in a directory to NAME.wasm (wasm32-wasip2, release).
    Build(BuildArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory of plugins: each NAME.wasm directly inside is served at /NAME, and
    /// index.wasm serves every path no other plugin matches.
    #[arg(long, short = 'p', value_name = "DIR", default_value = "plugins")]
    pub plugins: PathBuf,

    /// Address to listen on (IP:PORT). Port 0 picks a free port; the log says which.
    #[arg(
        long,
        short = 'l',
        value_name = "ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: String,

    /// Worker threads that run handlers [default: 10 per CPU core]. Handlers may block, so
    /// size this for the number of requests you want in flight at once.
    #[arg(long, short = 'w', value_name = "N")]
    pub workers: Option<usize>,

    /// Requests that may wait for a free worker; past this, clients get 503 + Retry-After.
    #[arg(long, value_name = "N", default_value_t = crate::limits::QUEUE_DEPTH)]
    pub queue_depth: usize,

    /// Largest request body in bytes; a larger one gets 413 before it is read.
    #[arg(long, value_name = "BYTES", default_value_t = crate::limits::MAX_BODY_BYTES)]
    pub max_body_bytes: u64,

    /// Largest request head (request line + headers) in bytes; a larger one gets 431.
    #[arg(long, value_name = "BYTES", default_value_t = crate::limits::MAX_HEAD_BYTES)]
    pub max_head_bytes: usize,

    /// Most header fields per request; more get 431.
    #[arg(long, value_name = "N", default_value_t = crate::limits::MAX_HEADERS)]
    pub max_headers: usize,

    /// CPU time one handler call may use before it is stopped and the client gets 504.
    /// Time spent blocked (sleeping, waiting on I/O) does not count.
    #[arg(long, value_name = "MS", default_value_t = crate::limits::GUEST_CPU_DEADLINE.as_millis() as u64)]
    pub cpu_deadline_ms: u64,

    /// Linear memory one plugin instance may grow to, in MiB; past it the request gets 500.
    #[arg(long, value_name = "MIB", default_value_t = (crate::limits::GUEST_MEMORY_BYTES >> 20) as u64)]
    pub memory_limit_mib: u64,

    /// Allocate instances on demand instead of from wasmtime's pooling allocator.
    #[arg(long)]
    pub no_pooling: bool,
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
    /// Validates the flags into a [`ServeConfig`].
    pub fn into_config(self) -> anyhow::Result<ServeConfig> {
        let listen: SocketAddr = self.listen.parse().with_context(|| {
            format!(
                "invalid --listen address {:?}: expected IP:PORT, e.g. 127.0.0.1:8080",
                self.listen
            )
        })?;
        let mut config = ServeConfig::new(listen, self.plugins);
        config.workers = self.workers.unwrap_or_else(default_workers);
        if config.workers == 0 {
            bail!("--workers must be at least 1");
        }
        if self.queue_depth == 0 {
            bail!("--queue-depth must be at least 1");
        }
        if self.cpu_deadline_ms == 0 {
            bail!("--cpu-deadline-ms must be at least 1");
        }
        if self.memory_limit_mib == 0 || self.memory_limit_mib > 4096 {
            bail!("--memory-limit-mib must be between 1 and 4096");
        }
        if self.max_headers == 0 || self.max_head_bytes < 64 {
            bail!("--max-headers must be at least 1 and --max-head-bytes at least 64");
        }
        let limits = &mut config.limits;
        limits.queue_depth = self.queue_depth;
        limits.max_body_bytes = self.max_body_bytes;
        limits.max_head_bytes = self.max_head_bytes;
        limits.max_target_bytes = limits.max_target_bytes.min(self.max_head_bytes);
        limits.max_headers = self.max_headers;
        limits.guest_cpu_deadline = Duration::from_millis(self.cpu_deadline_ms);
        limits.guest_memory_bytes = usize::try_from(self.memory_limit_mib << 20)?;
        config.pooling = !self.no_pooling;
        Ok(config)
    }
}
