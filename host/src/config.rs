//! The validated configuration of `ankh serve`. Built from the command line by [`crate::cli`];
//! nothing else reads raw flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::limits::{Limits, WORKERS_PER_CORE};

/// Everything `ankh serve` needs to start.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub plugins_dir: PathBuf,
    pub workers: usize,
    pub limits: Limits,
    /// Use wasmtime's pooling instance allocator.
    pub pooling: bool,
}

impl ServeConfig {
    /// The defaults: `127.0.0.1:8080`, `./plugins`, [`default_workers`], default limits.
    pub fn new(listen: SocketAddr, plugins_dir: PathBuf) -> Self {
        ServeConfig {
            listen,
            plugins_dir,
            workers: default_workers(),
            limits: Limits::default(),
            pooling: true,
        }
    }
}

/// [`WORKERS_PER_CORE`] threads per available core: enough that handlers blocked on a sleep or
/// a database do not stall the server.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from) * WORKERS_PER_CORE
}
