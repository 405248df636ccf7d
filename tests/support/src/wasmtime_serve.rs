//! `wasmtime serve`, the reference server for `wasi:http` components: started on a free
//! loopback port, killed when dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::PATIENCE;

/// A running `wasmtime serve` of one component.
pub struct WasmtimeServe {
    child: Child,
    pub addr: SocketAddr,
}

impl WasmtimeServe {
    /// Serves `wasm` with the `wasmtime` binary `bin` (WASI's `cli` interfaces granted, as
    /// `wasmtime serve -S cli` does), and waits until it accepts connections.
    pub fn start(bin: &Path, wasm: &Path) -> WasmtimeServe {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut child = Command::new(bin)
            .args(["serve", "-S", "cli", "--addr"])
            .arg(addr.to_string())
            .arg(wasm)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("wasmtime serve");
        let started = Instant::now();
        // Its listening socket is the event: poll for it (it writes no ready file).
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("wasmtime serve exited before it listened: {status}");
            }
            assert!(
                started.elapsed() < PATIENCE,
                "wasmtime serve never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        WasmtimeServe { child, addr }
    }
}

impl Drop for WasmtimeServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
