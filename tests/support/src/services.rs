//! Real services the tests start themselves: `redis-server` and nginx (Debian's `redis-server`
//! and `nginx-light`), each on a free loopback port with a temporary directory, stopped when
//! dropped. Outside CI a test whose service is missing skips with a message naming the
//! package; under CI (`CI` set) it fails.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{PATIENCE, TempDir};

/// Where `program` is installed: on `PATH`, or in the sbin directories a user's `PATH` may
/// lack (Debian puts nginx in /usr/sbin). `None` (after saying so) outside CI when it is
/// nowhere, and a failure under CI.
pub fn installed(program: &str, package: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{program} is missing under CI (apt-get install {package})"
        );
        eprintln!("skipping: {program} is not installed (apt-get install {package})");
    }
    found
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `addr` accepts a connection.
fn wait_accepting(addr: SocketAddr, what: &str) {
    let started = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            started.elapsed() < PATIENCE,
            "{what} never listened on {addr}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `redis-server` of the test's own, with an append-only file so that a stop and start
/// keeps its data (as a production Redis does), or without one ([`Redis::start_volatile`]).
pub struct Redis {
    program: PathBuf,
    child: Option<Child>,
    pub port: u16,
    dir: TempDir,
    /// Every write in the append-only file, fsynced, before Redis answers.
    durable: bool,
}

impl Redis {
    /// Starts one, or `None` (outside CI) when `redis-server` is not installed.
    pub fn start(tag: &str) -> Option<Redis> {
        Redis::start_with(tag, true)
    }

    /// [`Redis::start`] without the append-only file (nothing written to disk: a bench
    /// measures ankh, not Redis's fsync).
    pub fn start_volatile(tag: &str) -> Option<Redis> {
        Redis::start_with(tag, false)
    }

    fn start_with(tag: &str, durable: bool) -> Option<Redis> {
        let program = installed("redis-server", "redis-server")?;
        let dir = TempDir::new(&format!("redis-{tag}"));
        std::fs::create_dir_all(dir.path()).unwrap();
        let mut redis = Redis {
            program,
            child: None,
            port: free_port(),
            dir,
            durable,
        };
        redis.resume();
        Some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Stops the server (SIGTERM: it writes its data and exits), and waits until it has.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM");
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data, and waits until it answers.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new(&self.program)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", ""])
            .args(match self.durable {
                true => &["--appendonly", "yes", "--appendfsync", "always"][..],
                false => &["--appendonly", "no"],
            })
            .args(["--maxclients", "10000", "--dir"])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
        self.child = Some(child);
        let started = Instant::now();
        while self.command(&["PING"]).as_deref() != Some("+PONG") {
            assert!(started.elapsed() < PATIENCE, "redis-server never answered");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// One command over a fresh connection; the first line of the answer, if it answered.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(PATIENCE)).ok()?;
        let mut request = format!("*{}\r\n", args.len());
        for a in args {
            request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n") {
            stream.read_exact(&mut byte).ok()?;
            answer.push(byte[0]);
        }
        Some(String::from_utf8_lossy(&answer).trim_end().to_owned())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// nginx running the example configuration `host/deploy/nginx.conf`, with only its
/// addresses and prefix changed, in front of `upstreams`.
pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
    dir: TempDir,
}

/// The ankh processes' addresses in the example configuration.
const EXAMPLE_UPSTREAMS: [&str; 3] = ["127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"];

impl Nginx {
    /// Starts it, or `None` (outside CI) when nginx is not installed.
    pub fn start(upstreams: &[SocketAddr]) -> Option<Nginx> {
        let program = installed("nginx", "nginx-light")?;
        assert_eq!(upstreams.len(), EXAMPLE_UPSTREAMS.len());
        let dir = TempDir::new("nginx");
        for sub in ["logs", "temp"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../host/deploy/nginx.conf");
        let mut conf = std::fs::read_to_string(&example).unwrap();
        for (from, to) in EXAMPLE_UPSTREAMS.iter().zip(upstreams) {
            conf = conf.replace(&format!("server {from}"), &format!("server {to}"));
        }
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        conf = conf.replace("listen 127.0.0.1:8080;", &format!("listen {addr};"));
        // Two workers are enough here and keep the test's footprint small.
        conf = conf.replace("worker_processes auto;", "worker_processes 2;");
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(program)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .spawn()
            .expect("nginx");
        wait_accepting(addr, "nginx");
        Some(Nginx { child, addr, dir })
    }

    /// nginx's error log, for a failing test's message.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers too (SIGKILL would orphan them).
        signal(self.child.id(), "TERM");
        let _ = self.child.wait();
    }
}

/// Sends signal `name` (`TERM`, `KILL`, ...) to `pid`.
pub fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
}
