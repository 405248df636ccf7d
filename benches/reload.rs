//! Hot-reload figures (`cargo bench -p benches --bench reload`, after
//! `cargo build --release -p ankh`), each with a baseline measured in the same run:
//!
//! 1. From renaming a plugin (about 100 KB) into the plugins directory to the first response
//!    from it, with a cold cache. Baseline: compiling the same file in this process
//!    (`Component::new`), the work a reload cannot avoid.
//! 2. Start-up with 10 plugins: from spawning `ankh serve` to the first served request, with
//!    a warm cache against a cold one.

use std::path::Path;
use std::time::{Duration, Instant};

use ankh_test_support::harness::{TempDir, plugins};

/// The plugins, built from source by `ankh-test-support`.
const PLUGINS: [(&str, &str); 4] = [
    ("echo", plugins::ECHO),
    ("todo", plugins::TODO),
    ("chat", plugins::CHAT),
    ("bench", plugins::BENCH),
];
const ROUNDS: usize = 5;

/// GETs `path` until it answers 200; returns when it did.
fn until_ok(addr: std::net::SocketAddr, path: &str, deadline: Duration) -> Instant {
    use std::io::{Read, Write};
    let started = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            let _ = write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
            );
            let mut reply = String::new();
            let _ = s.read_to_string(&mut reply);
            if reply.starts_with("HTTP/1.1 200") {
                return Instant::now();
            }
        }
        assert!(started.elapsed() < deadline, "{path} never answered 200");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn main() {
    let engine = {
        let mut c = wasmtime::Config::new();
        c.wasm_component_model(true).epoch_interruption(true);
        wasmtime::Engine::new(&c).unwrap()
    };

    // 1. Rename to first response, cold cache, against compiling alone.
    println!(
        "| plugin | size | rename → first response (median of {ROUNDS}) | compile alone | ratio |"
    );
    println!("|---|---|---|---|---|");
    for (name, wasm) in PLUGINS {
        let wasm = Path::new(wasm);
        let size = std::fs::metadata(wasm).unwrap().len();
        let mut reloads = Vec::new();
        let mut compiles = Vec::new();
        for round in 0..ROUNDS {
            let dir = TempDir::new(&format!("reload-{name}-{round}"));
            let cache = TempDir::new(&format!("reload-{name}-{round}-cache"));
            let server = benches::serve(dir.path(), cache.path(), &["--workers", "4"]);
            let tmp = dir.path().join(format!(".{name}.tmp"));
            std::fs::copy(wasm, &tmp).unwrap();
            let started = Instant::now();
            std::fs::rename(&tmp, dir.path().join(format!("{name}.wasm"))).unwrap();
            let path = if name == "todo" {
                "/todo/items".to_owned()
            } else {
                format!("/{name}")
            };
            let answered = until_ok(server.addr, &path, Duration::from_secs(30));
            reloads.push(answered - started);
            drop(server);
            let bytes = std::fs::read(wasm).unwrap();
            let t = Instant::now();
            wasmtime::component::Component::new(&engine, &bytes).unwrap();
            compiles.push(t.elapsed());
        }
        reloads.sort();
        compiles.sort();
        let (r, c) = (reloads[ROUNDS / 2], compiles[ROUNDS / 2]);
        println!(
            "| {name} | {} KB | {:.0} ms | {:.0} ms | {:.2} |",
            size / 1000,
            r.as_secs_f64() * 1000.0,
            c.as_secs_f64() * 1000.0,
            r.as_secs_f64() / c.as_secs_f64()
        );
    }

    // 2. Start-up with 10 plugins: warm cache against cold.
    let dir = TempDir::new("reload-ten");
    for i in 0..10 {
        let (_, src) = PLUGINS[i % PLUGINS.len()];
        std::fs::copy(src, dir.path().join(format!("p{i}.wasm"))).unwrap();
    }
    let cache = TempDir::new("reload-ten-cache");
    let cache = cache.path();
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..ROUNDS {
        let _ = std::fs::remove_dir_all(cache);
        let t = Instant::now();
        let server = benches::serve(dir.path(), cache, &["--workers", "4"]);
        cold.push(until_ok(server.addr, "/p0/x", Duration::from_secs(60)) - t);
        drop(server);
        // The cache is now warm.
        let t = Instant::now();
        let server = benches::serve(dir.path(), cache, &["--workers", "4"]);
        warm.push(until_ok(server.addr, "/p0/x", Duration::from_secs(60)) - t);
        drop(server);
    }
    cold.sort();
    warm.sort();
    let (c, w) = (cold[ROUNDS / 2], warm[ROUNDS / 2]);
    println!();
    println!(
        "| start-up with 10 plugins, spawn → first response (median of {ROUNDS}) | warm cache | cold cache | ratio |"
    );
    println!("|---|---|---|---|");
    println!(
        "| `ankh serve` | {:.0} ms | {:.0} ms | {:.2} |",
        w.as_secs_f64() * 1000.0,
        c.as_secs_f64() * 1000.0,
        w.as_secs_f64() / c.as_secs_f64()
    );
}
