//! The `ankh` command: parse the command line, run the command, turn errors into an exit code.

use std::process::ExitCode;
use std::sync::OnceLock;

mod cmd;

use ankh::config::{DEFAULT_LOG_LEVEL, LogConfig};
use ankh::net::event_loop::{Ended, StopHandle};
use ankh::server::Server;
use clap::Parser;
use cmd::cli::{Cli, Command};
use cmd::log_writer::LogWriter;
use tracing_subscriber::EnvFilter;

/// mimalloc rather than glibc's allocator: requests allocate and free on one thread and
/// are freed on another (a worker builds a response, an event loop drops it), where glibc's
/// arenas spent 11-15% of the server's CPU (`malloc_consolidate`, `_int_free`) under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The log's writer, once logging started: flushed before the process exits.
static LOG: OnceLock<LogWriter> = OnceLock::new();

fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    cmd::processes::follow_supervisor();
    let cli = Cli::parse();
    let result = run(cli);
    if let Some(log) = LOG.get() {
        log.flush();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the log on stderr. `RUST_LOG`, when set, replaces the configured filter.
fn init_logging(log: &LogConfig) {
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    if !log.access_log {
        filter = filter.add_directive("ankh::access=off".parse().expect("a valid directive"));
    }
    // Colour only for a person at a terminal: a log file or a pipe gets plain text, and
    // NO_COLOR (https://no-color.org) turns it off everywhere.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // Access lines are batched (see `cmd::log_writer`); everything else is written at once.
    let writer = LOG
        .get_or_init(|| {
            if log.access_log {
                LogWriter::batching()
            } else {
                LogWriter::direct()
            }
        })
        .clone();
    // Access lines formatted directly (see `ankh::access`), except for a person at a
    // coloured terminal, who gets them in colour like every other line.
    if log.access_log && !colour {
        let access = writer.clone();
        ankh::access::install(ankh::access::Sink {
            json: log.json,
            write: Box::new(move |line| access.append_access(line)),
        });
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(writer);
    if log.json {
        logs.json().init();
    } else {
        logs.init();
    }
}

/// The log of commands that read no server configuration.
fn default_logging() {
    init_logging(&LogConfig {
        json: false,
        access_log: false,
        level: DEFAULT_LOG_LEVEL.to_owned(),
    });
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let print = args.print_config;
            let config = args.into_config()?;
            if print {
                print!("{}", config.to_toml());
                return Ok(());
            }
            init_logging(&config.log);
            if let Some(file) = &config.source {
                tracing::info!(file = %file.display(), "configuration read");
            }
            if config.processes > 1 {
                #[cfg(target_os = "linux")]
                return cmd::processes::supervise(&config, std::env::args().skip(1).collect());
                #[cfg(not(target_os = "linux"))]
                anyhow::bail!(
                    "--processes is only supported on Linux; run the processes with --reuse-port yourself"
                );
            }
            let server = Server::bind(&config)?;
            let mounted = server.registry.snapshot().len();
            handle_signals(server.stop_handle(), server.values_handle())?;
            tracing::info!(
                workers = config.workers,
                io_threads = config.io_threads,
                plugins = mounted,
                pooling = server.runtime.pooling,
                "listening on http://{}",
                server.local_addr
            );
            if let Some(admin) = server.admin_addr {
                tracing::info!("admin endpoints on http://{admin} (/healthz, /readyz, /metrics)");
            }
            match server.run()? {
                Ended::Drained => tracing::info!("drained: every connection finished"),
                Ended::ForceClosed(n) => {
                    tracing::warn!("drain deadline passed: closed {n} connections still open")
                }
                Ended::Stopped => tracing::info!("stopped"),
            }
            Ok(())
        }
        Command::Check(args) => {
            let config = args.serve.into_config()?;
            init_logging(&config.log);
            let report = cmd::check::check(&args.file, &config)?;
            print!("{}", report.text);
            if report.accepted {
                Ok(())
            } else {
                anyhow::bail!("{} would be refused", args.file.display())
            }
        }
        Command::Dev(args) => {
            let config = args.serve.into_dev_config(&args.src)?;
            init_logging(&config.log);
            // Serve at once; the first build runs on the dev thread and its results are
            // swapped in by hot reload as they land.
            let server = Server::bind(&config)?;
            handle_signals(server.stop_handle(), server.values_handle())?;
            let (src, release) = (args.src.clone(), !args.debug);
            std::thread::Builder::new()
                .name("ankh-dev".into())
                .spawn(move || {
                    if let Err(e) = cmd::dev::watch_and_rebuild(&src, release) {
                        tracing::error!("source watcher stopped: {e:#}");
                    }
                })?;
            tracing::info!(
                "listening on http://{} (building {}, then rebuilding on save)",
                server.local_addr,
                args.src.display()
            );
            server.run()?;
            Ok(())
        }
        Command::Run(args) => {
            let mut config = args.serve.into_config()?;
            init_logging(&config.log);
            // Its own server, quiet: no port of the real one's, no admin, no watching.
            config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            config.admin = None;
            config.watch = false;
            config.ready_file = None;
            config.processes = 1;
            config.reuse_port = false;
            let server = Server::bind(&config)?;
            let run = server.scheduler().run_now(&args.plugin, &args.schedule)?;
            match run.outcome {
                Ok(()) => {
                    println!(
                        "{} {}: ok in {} ms (run {})",
                        args.plugin,
                        args.schedule,
                        run.took.as_millis(),
                        run.id
                    );
                    Ok(())
                }
                Err(why) => anyhow::bail!(
                    "{} {} failed after {} ms (run {}): {why}",
                    args.plugin,
                    args.schedule,
                    run.took.as_millis(),
                    run.id
                ),
            }
        }
        Command::New(args) => {
            default_logging();
            let root = cmd::new::create(&args.name, &args.dir, args.sdk.as_deref(), args.schedule)?;
            println!(
                "created {}: build it with `ankh build {}`, then serve it at /{}\n\
                 (a crate of its own, with its own Cargo.lock and target/: its first build \
                 compiles its dependencies, a minute or two; later builds take seconds)",
                root.display(),
                args.dir.display(),
                args.name
            );
            Ok(())
        }
        Command::Build(args) => {
            default_logging();
            let out = args.out.unwrap_or_else(|| args.src.clone());
            let built = cmd::build::build(&args.src, &out, !args.debug)?;
            for b in &built {
                println!(
                    "built {} -> {} ({} KiB)",
                    b.name,
                    b.path.display(),
                    b.bytes / 1024
                );
            }
            Ok(())
        }
    }
}

/// SIGTERM or SIGINT starts a graceful drain; a second one stops at once. SIGHUP reads the
/// plugins' values again.
fn handle_signals(handle: StopHandle, values: ankh::server::ValuesHandle) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new()
        .name("ankh-signals".into())
        .spawn(move || {
            let mut stops = 0;
            for signal in signals.forever() {
                if signal == SIGHUP {
                    tracing::info!("SIGHUP received: reading plugins' values again");
                    values.reread("SIGHUP");
                    continue;
                }
                let n = stops;
                stops += 1;
                let name = if signal == SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                if n == 0 {
                    tracing::info!("{name} received: draining (again to stop at once)");
                    handle.drain();
                } else {
                    tracing::warn!("{name} received again: stopping now");
                    handle.stop();
                }
            }
        })?;
    Ok(())
}
