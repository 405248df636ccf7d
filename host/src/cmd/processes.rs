//! `ankh serve --processes N`: this process becomes a small supervisor of N `ankh serve`
//! processes that share one port through `SO_REUSEPORT` (the kernel spreads new connections
//! over them) and one Redis (state, topics, connections).
//!
//! Why processes and not only threads: one process is bounded by its file descriptor limit
//! (20,000 here, and not raisable), and one process is one failure domain. The supervisor
//! holds the port (a bound socket that never listens, so a child restarted on port 0's
//! choice gets the same port), starts each child with the same command line plus
//! `--processes 1 --reuse-port --listen ADDR`, restarts a child that dies (at most once a
//! second each), writes the ready file once every child is ready, and passes SIGTERM,
//! SIGINT (and SIGHUP) on, so a drain drains every child. An `--admin` port P gives child i port P + i.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use ankh::config::ServeConfig;

/// Set in each child to the supervisor's pid: the child ends when the supervisor does.
const SUPERVISOR_ENV: &str = "ANKH_SUPERVISOR_PID";

/// In a child of `--processes`: asks the kernel for SIGTERM (a drain) when the supervisor
/// dies, however it dies, so that no child outlives it; and ends at once if it already has.
pub(crate) fn follow_supervisor() {
    use rustix::process::{Signal, getppid, set_parent_process_death_signal};
    let Some(expected) = std::env::var(SUPERVISOR_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return;
    };
    let _ = set_parent_process_death_signal(Some(Signal::TERM));
    // Asked after the fork: the supervisor may have died in between.
    if getppid().map(|p| p.as_raw_nonzero().get()) != Some(expected) {
        eprintln!("error: the supervising ankh ({expected}) has gone");
        std::process::exit(1);
    }
}

/// How often the supervisor looks at its children.
const POLL: Duration = Duration::from_millis(100);

/// How long the children may take to be ready before the start fails.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The shortest time between two starts of one child.
const RESTART_EVERY: Duration = Duration::from_secs(1);

/// One child: how to start it, and the running process.
struct Seat {
    index: usize,
    args: Vec<String>,
    child: Child,
    started: Instant,
}

/// Runs `config.processes` children until a signal stops them; `args` is this process's
/// command line after the program name.
pub(crate) fn supervise(config: &ServeConfig, args: Vec<String>) -> anyhow::Result<()> {
    let n = config.processes;
    let (reservation, listen) = reserve(config.listen)?;
    let program = std::env::current_exe().context("cannot find this program to start it again")?;
    let scratch = Scratch::new()?;
    let stopping = Arc::new(AtomicBool::new(false));
    let mut seats = Vec::with_capacity(n);
    for index in 0..n {
        let mut child_args = args.clone();
        child_args.extend([
            "--processes".to_owned(),
            "1".to_owned(),
            "--reuse-port".to_owned(),
            "--listen".to_owned(),
            listen.to_string(),
            "--ready-file".to_owned(),
            ready_path(&scratch.0, index).display().to_string(),
        ]);
        if let Some(admin) = config.admin {
            let port = if admin.port() == 0 {
                0
            } else {
                admin
                    .port()
                    .checked_add(index as u16)
                    .with_context(|| format!("--admin {admin}: no port left for process {index}"))?
            };
            child_args.extend([
                "--admin".to_owned(),
                SocketAddr::new(admin.ip(), port).to_string(),
            ]);
        }
        let child = spawn(&program, &child_args)?;
        seats.push(Seat {
            index,
            args: child_args,
            child,
            started: Instant::now(),
        });
    }
    forward_signals(&stopping, seats.iter().map(|s| s.child.id()).collect())?;
    // Ready when every child is.
    let deadline = Instant::now() + START_TIMEOUT;
    while (0..n).any(|i| !ready_path(&scratch.0, i).exists()) {
        for seat in &mut seats {
            if let Some(status) = seat.child.try_wait()? {
                bail!(
                    "process {} of {n} exited while starting ({status}); its log is above",
                    seat.index
                );
            }
        }
        if Instant::now() > deadline {
            bail!("the {n} processes were not ready within {START_TIMEOUT:?}");
        }
        std::thread::sleep(POLL);
    }
    // The ready files have served: a child started again is not waited for. The directory
    // goes now rather than at the end, which a supervisor killed with SIGKILL never reaches.
    drop(scratch);
    for seat in &mut seats {
        if let Some(at) = seat.args.iter().rposition(|a| a == "--ready-file") {
            seat.args.drain(at..at + 2);
        }
    }
    tracing::info!(processes = n, "listening on http://{listen} (SO_REUSEPORT)");
    if let Some(path) = &config.ready_file {
        ankh::server::write_ready_file(path, listen)
            .with_context(|| format!("cannot write ready file {}", path.display()))?;
    }
    // Until told to stop: restart a child that dies.
    loop {
        let stop = stopping.load(Ordering::Acquire);
        let mut running = 0;
        for seat in &mut seats {
            match seat.child.try_wait()? {
                None => running += 1,
                Some(_) if stop => {}
                Some(status) => {
                    if seat.started.elapsed() < RESTART_EVERY {
                        running += 1;
                        continue;
                    }
                    tracing::warn!(
                        process = seat.index,
                        "process {} exited ({status}): starting it again",
                        seat.child.id()
                    );
                    seat.child = spawn(&program, &seat.args)?;
                    seat.started = Instant::now();
                    running += 1;
                    children().push(seat.child.id());
                }
            }
        }
        if stop && running == 0 {
            break;
        }
        std::thread::sleep(POLL);
    }
    drop(reservation);
    tracing::info!("every process has ended");
    Ok(())
}

/// Binds `addr` with `SO_REUSEPORT` without listening: the port is chosen (for port 0) and
/// kept for the children, and no connection ever queues on this socket.
fn reserve(addr: SocketAddr) -> anyhow::Result<(socket2::Socket, SocketAddr)> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = socket
        .local_addr()?
        .as_socket()
        .context("the bound address is not an IP address")?;
    Ok((socket, local))
}

fn ready_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("ready.{index}"))
}

fn spawn(program: &Path, args: &[String]) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new(program)
        .args(args)
        .env(SUPERVISOR_ENV, std::process::id().to_string())
        // A group of its own: a Ctrl-C at the terminal reaches the supervisor alone, which
        // passes it on once.
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))
}

/// The children's ready files: a directory of the supervisor's, removed once they are ready. It
/// is made anew (never an existing one, whoever made it), readable by its owner alone, so
/// another user cannot hand the supervisor a directory, or ready files, of theirs; a name
/// taken already is tried again with another.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let mut attempt = 0;
        let dir = loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let dir = std::env::temp_dir()
                .join(format!("ankh-processes-{}-{nanos:08x}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", dir.display()));
                }
            }
        };
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The pids whose signals the supervisor passes on; the signal thread reads it.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn children() -> std::sync::MutexGuard<'static, Vec<u32>> {
    CHILDREN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Passes SIGTERM and SIGINT on to every child, and notes that the supervisor is stopping;
/// passes SIGHUP on (each child reads its plugins' values again).
fn forward_signals(stopping: &Arc<AtomicBool>, pids: Vec<u32>) -> anyhow::Result<()> {
    use rustix::process::{Pid, Signal, kill_process};
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    *children() = pids;
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let stopping = stopping.clone();
    std::thread::Builder::new()
        .name("ankh-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let (name, signal) = match signal {
                    SIGTERM => ("SIGTERM", Signal::TERM),
                    SIGINT => ("SIGINT", Signal::INT),
                    _ => ("SIGHUP", Signal::HUP),
                };
                if signal != Signal::HUP {
                    stopping.store(true, Ordering::Release);
                }
                tracing::info!("{name} received: passing it to every process");
                for pid in children().iter() {
                    if let Some(pid) = i32::try_from(*pid).ok().and_then(Pid::from_raw) {
                        let _ = kill_process(pid, signal);
                    }
                }
            }
        })?;
    Ok(())
}
