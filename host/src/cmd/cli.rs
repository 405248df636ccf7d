//! The command line: `ankh serve`, `build`, `check`, `dev`, `new` and `run`. Flags are parsed here and turned into
//! validated configuration; nothing else reads them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use ankh::config::{DEFAULT_CONFIG_FILE, SETTINGS, ServeConfig};
use ankh::settings::Flags;

/// ankh: an HTTP/1.1 and WebSocket application server whose handlers are sandboxed
/// WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "ankh", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
pub(crate) enum Command {
    /// Serve every NAME.wasm in the plugins directory at /NAME.
    // A flag given twice takes its last value: `--processes` starts each process with this
    // command line and its own `--listen`, `--ready-file`, `--admin` appended.
    #[command(args_override_self = true)]
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
    /// Run one scheduled job of a plugin now, once, and say how it went (for development).
    /// Loads the plugins directory as `serve` would, with the same store, without listening.
    /// Exits non-zero when the job fails.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The plugin (NAME of NAME.wasm in the plugins directory).
    #[arg(value_name = "PLUGIN")]
    pub plugin: String,

    /// The schedule, by the name its policy declares.
    #[arg(value_name = "SCHEDULE")]
    pub schedule: String,

    /// The server's settings (the same flags as `serve`).
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct DevArgs {
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
pub(crate) struct NewArgs {
    /// The plugin's name: it is served at /NAME.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// Where to create the crate (as DIR/NAME).
    #[arg(long, value_name = "DIR", default_value = "plugins")]
    pub dir: PathBuf,

    /// The guest SDK (`ankh-guest`) to depend on [default: the one next to this build's sources].
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,

    /// Add a scheduled job: its function in the crate, and its `[[schedule]]` (every minute)
    /// in DIR/NAME.toml, the policy `ankh build DIR` and `ankh dev DIR` put NAME.wasm beside.
    #[arg(long)]
    pub schedule: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The plugin file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The server configuration whose limits apply (the same flags as `serve`).
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Config file (TOML). Without this flag, ./ankh.toml is read if it exists. Flags override
    /// what the file says.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the effective configuration (defaults, file and flags combined) and exit.
    #[arg(long)]
    pub print_config: bool,

    /// One flag per server setting, each declared once in `config::SETTINGS`.
    #[command(flatten)]
    pub settings: SettingFlags,
}

/// The flags of the server settings (see [`ankh::settings`]): clap arguments built from
/// their declarations.
#[derive(Debug, Clone, Default)]
pub(crate) struct SettingFlags(pub Flags);

impl clap::FromArgMatches for SettingFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(SettingFlags(Flags::from_matches(&SETTINGS, matches)))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for SettingFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(Flags::args(&SETTINGS))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
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
    pub(crate) fn into_config(self) -> anyhow::Result<ServeConfig> {
        let path = match &self.config {
            Some(path) => Some(path.clone()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.is_file()),
        };
        let config = match path {
            Some(path) => {
                let text = ServeConfig::read_file(&path)?;
                ServeConfig::resolve(Some((&path, &text)), &self.settings.0)?
            }
            None => ServeConfig::resolve(None, &self.settings.0)?,
        };
        Ok(config)
    }

    /// The configuration of `ankh dev SRC`: SRC is the plugins directory, before any check
    /// that depends on it (the cache must stay out of it), and the directory is watched.
    pub(crate) fn into_dev_config(mut self, src: &std::path::Path) -> anyhow::Result<ServeConfig> {
        self.settings
            .0
            .given
            .push(("plugins", src.display().to_string()));
        let mut config = self.into_config()?;
        config.watch = true;
        Ok(config)
    }
}
