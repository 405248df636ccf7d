//! The test harness: starts the real `ankh` binary on 127.0.0.1:0 over a temporary plugins
//! directory, and talks to it over real sockets. The benches start the release binary through
//! it too ([`Options::bin`], [`Options::log_to_file`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Paths of every plugin built by `build.rs`.
pub mod plugins {
    include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
}

/// How long any single wait in a test may take before the test fails (never a pass condition).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How long a test waits for a cargo build of a plugin crate with a cold target directory,
/// while other tests build too.
pub const BUILD_PATIENCE: Duration = Duration::from_secs(600);

/// The `ankh` binary of this build (`target/<profile>/ankh`).
pub fn ankh_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let bin = profile_dir.join(format!("ankh{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (or `cargo build -p ankh` first)",
        bin.display()
    );
    bin
}

/// Runs `command` to its end: whether it succeeded, and its stdout and stderr together.
pub fn output_text(command: &mut std::process::Command) -> (bool, String) {
    let out = command.output().expect("the command starts");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The job probe's `/jobsprobe/ticks` answer read: `(due_ms, times run)` for each tick that
/// ran, and the runs it counted.
pub fn job_ticks(body: &str) -> (Vec<(u64, u64)>, u64) {
    let mut ticks = Vec::new();
    let mut runs = 0;
    for line in body.lines() {
        let (a, b) = line.split_once(' ').expect("`DUE COUNT` or `runs N`");
        if a == "runs" {
            runs = b.parse().unwrap();
        } else {
            ticks.push((a.parse().unwrap(), b.parse().unwrap()));
        }
    }
    (ticks, runs)
}

/// The compiled-plugin cache every test server shares (under the target directory, so tests
/// never touch the user's own cache).
pub fn test_cache_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("ankh-test-cache")
}

/// A fresh, empty directory under the target directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let exe = std::env::current_exe().unwrap();
        let base = exe.parent().unwrap().join("ankh-test-dirs");
        let dir = base.join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `ANKH_TEST_IO_THREADS=N` runs every test server with `--io-threads N` (unless the test
/// sets it itself): CI runs the suite with 1 and with the default, one loop per core.
fn io_threads_override(args: &[String]) -> Vec<String> {
    match std::env::var("ANKH_TEST_IO_THREADS") {
        Ok(n) if !args.iter().any(|a| a == "--io-threads") => vec!["--io-threads".into(), n],
        _ => Vec::new(),
    }
}

/// A running `ankh serve`.
pub struct TestServer {
    child: Child,
    pub addr: SocketAddr,
    log: Log,
    /// The plugins directory the server watches.
    plugins: PathBuf,
    /// The plugins directory when the harness made it (removed when the server is dropped).
    _dir: Option<TempDir>,
    /// The data directory, when the harness made one (removed with the server).
    _data: Option<TempDir>,
}

/// Where a server's output goes.
enum Log {
    /// Read from pipes by two threads, as it comes.
    Captured(Arc<Mutex<String>>),
    /// Written by the server into `ankh.log` in a directory of its own (read when asked).
    File(TempDir),
}

impl Log {
    const FILE: &str = "ankh.log";
}

/// Options for [`TestServer`].
#[derive(Default)]
pub struct Options {
    /// `(name, path)`: the file at `path` is copied into the plugins directory as `name.wasm`.
    pub plugins: Vec<(String, String)>,
    /// `(file name, contents)` written into the plugins directory as they are.
    pub files: Vec<(String, Vec<u8>)>,
    pub args: Vec<String>,
    /// Run the server under `ulimit -n` of this many file descriptors.
    pub fd_limit: Option<u32>,
    /// `RUST_LOG` for the server: `info` unless set here; `Some(None)` leaves it unset, so
    /// the server's own default applies.
    pub rust_log: Option<Option<String>>,
    /// The command instead of `serve` (e.g. `dev SRC`).
    pub command: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Environment variables removed (the harness sets `NO_COLOR`, for one).
    pub env_removed: Vec<String>,
    /// The data directory (`--data-dir`); without it each server gets a fresh one of its own.
    pub data_dir: Option<PathBuf>,
    /// The binary (default: [`ankh_bin`], the `ankh` beside the test executable).
    pub bin: Option<PathBuf>,
    /// The compiled-plugin cache (`--cache-dir`; default: [`test_cache_dir`]).
    pub cache_dir: Option<PathBuf>,
    /// Serve this existing plugins directory (kept when the server stops) instead of a fresh
    /// one; `plugins` and `files` are still copied into it.
    pub plugins_dir: Option<PathBuf>,
    /// The server's stdout and stderr go into a file instead of pipes read by two threads
    /// (a load test's access log is then not read as it is written); [`TestServer::log`]
    /// reads the file.
    pub log_to_file: bool,
    /// How often the ready file is polled while the server starts (default: every 10 ms).
    pub ready_poll: Option<Duration>,
    /// How long the server may take to become ready (default: [`PATIENCE`]); a server that
    /// compiles large components cold needs more on two loaded cores.
    pub ready_patience: Option<Duration>,
}

impl Options {
    pub fn plugin(mut self, path: &str) -> Self {
        let name = Path::new(path)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        self.plugins.push((name, path.to_owned()));
        self
    }

    pub fn plugin_as(mut self, name: &str, path: &str) -> Self {
        self.plugins.push((name.to_owned(), path.to_owned()));
        self
    }

    pub fn file(mut self, name: &str, contents: &[u8]) -> Self {
        self.files.push((name.to_owned(), contents.to_vec()));
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_owned());
        self
    }

    /// Adds `--flag value`.
    pub fn flag(self, flag: &str, value: impl ToString) -> Self {
        self.arg(flag).arg(&value.to_string())
    }

    /// Starts the server with the environment variable `name` set to `value`.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the server without the environment variable `name`.
    pub fn env_remove(mut self, name: &str) -> Self {
        self.env_removed.push(name.to_owned());
        self
    }

    /// Keeps the server's durable state in `dir` (to start another server on the same data).
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_owned());
        self
    }

    pub fn fd_limit(mut self, n: u32) -> Self {
        self.fd_limit = Some(n);
        self
    }

    /// Runs `bin` instead of the `ankh` of this build (a bench runs `target/release/ankh`).
    pub fn bin(mut self, bin: &Path) -> Self {
        self.bin = Some(bin.to_owned());
        self
    }

    /// Caches compiled plugins in `dir` instead of the tests' shared cache.
    pub fn cache_dir(mut self, dir: &Path) -> Self {
        self.cache_dir = Some(dir.to_owned());
        self
    }

    /// Serves the plugins directory `dir`, which the caller made and keeps (to install into
    /// it while the server runs, or to start another server over the same directory).
    pub fn plugins_dir(mut self, dir: &Path) -> Self {
        self.plugins_dir = Some(dir.to_owned());
        self
    }

    /// Writes the server's output into a file rather than capturing it through pipes. The
    /// start-up then does not wait for the `listening on` line: read [`TestServer::log`]
    /// with [`TestServer::wait_for_log`].
    pub fn log_to_file(mut self) -> Self {
        self.log_to_file = true;
        self
    }

    /// Polls the ready file every `every` while the server starts (every millisecond when the
    /// start-up itself is timed).
    pub fn ready_poll(mut self, every: Duration) -> Self {
        self.ready_poll = Some(every);
        self
    }

    /// Gives the server `patience` to become ready (see [`Options::ready_patience`]).
    pub fn ready_within(mut self, patience: Duration) -> Self {
        self.ready_patience = Some(patience);
        self
    }

    pub fn start(self) -> TestServer {
        TestServer::start_with(self)
    }

    /// Runs the server with `RUST_LOG` set to `value`, or unset (`None`).
    pub fn rust_log(mut self, value: Option<&str>) -> Self {
        self.rust_log = Some(value.map(str::to_owned));
        self
    }
}

impl TestServer {
    /// Serves the given plugin files (by path) under their own names.
    pub fn start(plugins: &[&str]) -> TestServer {
        plugins
            .iter()
            .fold(Options::default(), |o, p| o.plugin(p))
            .start()
    }

    pub fn start_with(options: Options) -> TestServer {
        let own_dir = match options.plugins_dir {
            Some(_) => None,
            None => Some(TempDir::new("serve")),
        };
        let dir = options
            .plugins_dir
            .clone()
            .or(own_dir.as_ref().map(|d| d.path().to_owned()))
            .unwrap();
        for (name, src) in &options.plugins {
            std::fs::copy(src, dir.join(format!("{name}.wasm"))).unwrap();
        }
        for (name, contents) in &options.files {
            std::fs::write(dir.join(name), contents).unwrap();
        }
        let ready = dir.with_extension("ready");
        let _ = std::fs::remove_file(&ready);
        let bin = options.bin.clone().unwrap_or_else(ankh_bin);
        let mut command = match options.fd_limit {
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin);
                c
            }
            None => Command::new(bin),
        };
        if options.command.is_empty() {
            command.arg("serve");
        } else {
            command.args(&options.command);
        }
        command.envs(options.env.iter().map(|(k, v)| (k, v)));
        // Every server has its own data directory (two cannot share one): the one asked for,
        // or a fresh one removed with the server.
        let data = match &options.data_dir {
            Some(_) => None,
            None if options.args.iter().any(|a| a == "--data-dir") => None,
            None => Some(TempDir::new("data")),
        };
        if let Some(path) = options
            .data_dir
            .as_deref()
            .or(data.as_ref().map(TempDir::path))
        {
            command.arg("--data-dir").arg(path);
        }
        let cache = options.cache_dir.clone().unwrap_or_else(test_cache_dir);
        command
            .arg("--plugins")
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--ready-file")
            .arg(&ready)
            .args(
                (!options.args.iter().any(|a| a == "--cache-dir"))
                    .then(|| ["--cache-dir".into(), cache.into_os_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(&options.args)
            .args(io_threads_override(&options.args))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        let log_dir = options.log_to_file.then(|| TempDir::new("log"));
        match &log_dir {
            Some(log_dir) => {
                let file = std::fs::File::create(log_dir.path().join(Log::FILE)).unwrap();
                command.stdout(file.try_clone().unwrap()).stderr(file);
            }
            None => {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        match &options.rust_log {
            None => {
                command.env("RUST_LOG", "info");
            }
            Some(Some(value)) => {
                command.env("RUST_LOG", value);
            }
            Some(None) => {
                command.env_remove("RUST_LOG");
            }
        }
        for name in &options.env_removed {
            command.env_remove(name);
        }
        let mut child = command.spawn().expect("starting ankh");
        let log = match log_dir {
            Some(log_dir) => Log::File(log_dir),
            None => {
                let log = Arc::new(Mutex::new(String::new()));
                for stream in [
                    Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
                    Box::new(child.stderr.take().unwrap()),
                ] {
                    let log = log.clone();
                    std::thread::spawn(move || {
                        let reader = BufReader::new(stream);
                        for line in reader.lines() {
                            let Ok(line) = line else { break };
                            let mut log = log.lock().unwrap();
                            log.push_str(&line);
                            log.push('\n');
                        }
                    });
                }
                Log::Captured(log)
            }
        };
        let mut server = TestServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            plugins: dir,
            _dir: own_dir,
            _data: data,
        };
        // Readiness: the ready file appears once the server accepts, or we give up after a
        // wall-clock timeout (acceptance 60).
        let poll = options.ready_poll.unwrap_or(Duration::from_millis(10));
        let patience = options.ready_patience.unwrap_or(PATIENCE);
        server.addr = match wait_ready(&ready, &mut server.child, patience, poll) {
            Ok(addr) => addr,
            Err(why) => panic!("ankh did not become ready: {why}\n{}", server.log()),
        };
        let _ = std::fs::remove_file(&ready);
        // The server logs what it loaded and where it listens before it writes the ready file;
        // wait until the reader threads have those lines too, so a test reads a complete
        // start-up log.
        if matches!(server.log, Log::Captured(_)) {
            server.wait_for_log("listening on");
        }
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        match &self.log {
            Log::Captured(log) => log.lock().unwrap().clone(),
            Log::File(dir) => {
                std::fs::read_to_string(dir.path().join(Log::FILE)).unwrap_or_default()
            }
        }
    }

    /// The admin listener's address, from the log (start the server with
    /// `--admin 127.0.0.1:0`); fails after [`PATIENCE`].
    pub fn admin_addr(&self) -> SocketAddr {
        let log = self.wait_for_log("admin endpoints on http://");
        log.split("admin endpoints on http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no admin address in the log:\n{log}"))
    }

    /// Waits until the log contains `needle`; fails the test after [`PATIENCE`].
    pub fn wait_for_log(&self, needle: &str) -> String {
        self.wait_for_log_count(needle, 1)
    }

    /// Waits until the log contains `needle` at least `count` times.
    pub fn wait_for_log_count(&self, needle: &str, count: usize) -> String {
        let started = Instant::now();
        loop {
            let log = self.log();
            if log.matches(needle).count() >= count {
                return log;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "log never contained {needle:?} {count} times:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A connected raw socket with a read timeout of [`PATIENCE`].
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Sends `bytes` on a new connection and reads until the server closes it.
    pub fn raw(&self, bytes: &[u8]) -> String {
        let mut s = self.connect();
        s.write_all(bytes).unwrap();
        String::from_utf8_lossy(&read_to_close(&mut s)).into_owned()
    }

    /// Sends one request on a new connection and reads one response.
    pub fn request(&self, bytes: &[u8]) -> Response {
        let mut s = self.connect();
        s.write_all(bytes).unwrap();
        read_response(&mut BufReader::new(s), false)
    }

    /// Sends `bytes` on a new connection each time until the answer is 503, at most `tries`
    /// times; every answer before it must be 200. Returns the 503 (a cap that refuses once
    /// spent: the CPU allowance of `limits.cpu_ms_per_minute`).
    pub fn until_refused(&self, bytes: &[u8], tries: usize) -> Response {
        for _ in 0..tries {
            let resp = self.request(bytes);
            if resp.status == 503 {
                return resp;
            }
            assert_eq!(resp.status, 200, "{}", resp.text());
        }
        panic!("never refused after {tries} requests");
    }

    /// GET `path` with the client library.
    pub fn get(&self, path: &str) -> (u16, String) {
        let mut resp = agent().get(&self.url(path)).call().unwrap();
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap())
    }

    /// The plugins directory the server watches.
    pub fn plugins_dir(&self) -> &Path {
        &self.plugins
    }

    /// Drops `src` into the plugins directory as `name.wasm` the way a careful deployer does:
    /// written under a temporary name, then renamed into place.
    pub fn install(&self, name: &str, src: &str) {
        let tmp = self.plugins_dir().join(format!(".{name}.wasm.tmp"));
        std::fs::copy(src, &tmp).unwrap();
        std::fs::rename(&tmp, self.plugins_dir().join(format!("{name}.wasm"))).unwrap();
    }

    /// Polls `path` until `check` accepts the answer; fails after [`PATIENCE`].
    pub fn eventually(&self, path: &str, check: impl Fn(u16, &str) -> bool) -> (u16, String) {
        self.eventually_within(PATIENCE, path, check)
    }

    /// [`TestServer::eventually`] with a bound of its own (a cold cargo build takes longer).
    pub fn eventually_within(
        &self,
        patience: Duration,
        path: &str,
        check: impl Fn(u16, &str) -> bool,
    ) -> (u16, String) {
        let started = Instant::now();
        loop {
            let (status, body) = self.get(path);
            if check(status, &body) {
                return (status, body);
            }
            assert!(
                started.elapsed() < patience,
                "{path} never answered as expected; last: {status} {body:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal to the server (`TERM`, `INT`, ...).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Stops the server with SIGTERM (a clean shutdown) and waits until it has exited.
    pub fn terminate(mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit()
    }

    /// Waits for the server to exit; fails the test after [`PATIENCE`].
    pub fn wait_exit(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "ankh did not exit:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Open file descriptors of the server process.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }

    /// Resident memory of the server process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid()).expect("the server runs")
    }

    /// CPU time (user + system) the server has used, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        cpu_ticks(self.pid()).expect("the server runs")
    }
}

/// Resident memory of process `pid` in KiB (`VmRSS`), or `None` if it is gone.
pub fn rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// CPU time (user + system) process `pid` has used, in clock ticks (1/100 s on Linux), or
/// `None` if it is gone.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split(' ').collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- ankh log ---\n{}", self.log());
        }
    }
}

/// Waits for `ankh serve --ready-file` to write its address, looking every `poll`, for at
/// most `timeout` of wall clock time; fails early if the process exits.
pub fn wait_ready(
    path: &Path,
    child: &mut Child,
    timeout: Duration,
    poll: Duration,
) -> Result<SocketAddr, String> {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text
                .trim()
                .parse()
                .map_err(|e| format!("ready file holds {text:?}: {e}"));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("ankh exited with {status}"));
        }
        if started.elapsed() >= timeout {
            return Err(format!("no ready file after {timeout:?}"));
        }
        std::thread::sleep(poll);
    }
}

/// An HTTP client that reports every status as a response, not an error.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(PATIENCE))
        .build()
        .into()
}

/// One parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub status_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The trailer fields of a chunked body.
    pub trailers: Vec<(String, String)>,
}

impl Response {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response (skipping interim 1xx responses only if `skip_interim`). `head`: the
/// request was HEAD, so no body follows whatever Content-Length says.
pub fn read_response_opts(r: &mut impl BufRead, head: bool, skip_interim: bool) -> Response {
    loop {
        let mut status_line = String::new();
        r.read_line(&mut status_line)
            .expect("reading a status line");
        assert!(
            !status_line.is_empty(),
            "connection closed before a response"
        );
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                break;
            }
            let (n, v) = line.split_once(':').expect("header line with a colon");
            headers.push((n.to_owned(), v.trim().to_owned()));
        }
        let mut resp = Response {
            status,
            status_line: status_line.trim_end().to_owned(),
            headers,
            body: Vec::new(),
            trailers: Vec::new(),
        };
        if (100..200).contains(&status) {
            if skip_interim {
                continue;
            }
            return resp;
        }
        if head || status == 204 || status == 304 {
            return resp;
        }
        if resp
            .header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
        {
            (resp.body, resp.trailers) = read_chunked(r);
        } else if let Some(len) = resp.header("content-length") {
            let len: usize = len.parse().unwrap();
            resp.body = vec![0; len];
            r.read_exact(&mut resp.body).unwrap();
        } else {
            r.read_to_end(&mut resp.body).unwrap();
        }
        return resp;
    }
}

/// Reads a chunked body to its end: the body, and the trailer fields.
pub fn read_chunked(r: &mut impl BufRead) -> (Vec<u8>, Vec<(String, String)>) {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).expect("a chunk size line");
        assert!(
            size.ends_with("\r\n"),
            "the chunked body ended early: {size:?}"
        );
        let size = size.trim_end().split(';').next().unwrap_or_default();
        let size =
            usize::from_str_radix(size, 16).unwrap_or_else(|_| panic!("bad chunk size {size:?}"));
        if size == 0 {
            break;
        }
        let at = body.len();
        body.resize(at + size, 0);
        r.read_exact(&mut body[at..]).expect("a chunk's data");
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).expect("a chunk's CRLF");
        assert_eq!(&crlf, b"\r\n", "a chunk's data is followed by CRLF");
    }
    let mut trailers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("a trailer line");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return (body, trailers);
        }
        let (n, v) = line.split_once(':').expect("a trailer line with a colon");
        trailers.push((n.to_owned(), v.trim().to_owned()));
    }
}

/// Reads one final response.
pub fn read_response(r: &mut impl BufRead, head: bool) -> Response {
    read_response_opts(r, head, true)
}

/// Reads until EOF (or a reset, which also counts as closed).
pub fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("read failed before the server closed the connection: {e}"),
        }
    }
}

/// True when the server closed the connection: a read returns EOF (or a reset).
pub fn is_closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// The value of field `name` in a text log line (`... name=VALUE ...`), as written.
pub fn log_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(&format!(" {name}="))
        .nth(1)?
        .split_whitespace()
        .next()
}
