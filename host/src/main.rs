//! The `ankh` command: parse the command line, run the command, turn errors into an exit code.

use std::process::ExitCode;

use ankh::cli::{Cli, Command};
use ankh::server::Server;
use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let config = args.into_config()?;
            let server = Server::bind(&config)?;
            let mounted = server.registry.snapshot().len();
            tracing::info!(
                workers = config.workers,
                plugins = mounted,
                pooling = server.runtime.pooling,
                "listening on http://{}",
                server.local_addr
            );
            server.run()
        }
        Command::Build(args) => {
            let out = args.out.unwrap_or_else(|| args.src.clone());
            let built = ankh::builder::build(&args.src, &out, !args.debug)?;
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
