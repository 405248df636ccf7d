//! The runtime alone: a plugin called through `ankh::runtime` with no socket, no I/O thread
//! and no worker pool (the seam of issue 13). What the runtime needs from the rest of the host
//! is two traits, `Respond` and `WebSockets`, here implemented by the test.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankh::limits::Limits;
use ankh::message::{Cancel, Outbound, WsId};
use ankh::proto::Status;
use ankh::proto::request::parse;
use ankh::runtime::bindings::types::WsError;
use ankh::runtime::engine::incoming::Incoming;
use ankh::runtime::engine::instance::{Instance, InvokeError};
use ankh::runtime::engine::packed::{Answer, Returned};
use ankh::runtime::engine::plugin::Plugin;
use ankh::runtime::engine::{Runtime, RuntimeConfig};
use ankh::runtime::host::http::{AlreadyResponded, Respond};
use ankh::runtime::host::websocket::{self, WebSockets};
use ankh::runtime::sandbox::exec::block_on;
use futures_util::future::{Either, ready};

use crate::harness::{plugins, test_cache_dir};

/// Keeps the statuses of the responses a call sent early (through `http.respond`).
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<u16>>>);

impl Respond for Kept {
    fn respond(
        &mut self,
        status: u16,
        _headers: &[(String, Vec<u8>)],
        _body: &[u8],
    ) -> Result<(), AlreadyResponded> {
        self.0.lock().unwrap().push(status);
        Ok(())
    }
}

/// No WebSockets here: every connection is closed.
#[derive(Debug)]
struct NoSockets;

impl WebSockets for NoSockets {
    fn send<'a>(&'a self, _: &'a str, _: WsId, _: Outbound) -> websocket::Answer<'a, ()> {
        Either::Left(ready(Err(WsError::Closed)))
    }
    fn close<'a>(&'a self, _: &'a str, _: WsId, _: u16, _: String) -> websocket::Answer<'a, ()> {
        Either::Left(ready(Err(WsError::Closed)))
    }
    fn subscribe(&self, _: &str, _: WsId, _: &str, _: (usize, usize)) -> Result<(), WsError> {
        Err(WsError::Closed)
    }
    fn unsubscribe(&self, _: &str, _: WsId, _: &str) -> Result<(), WsError> {
        Err(WsError::Closed)
    }
    fn publish<'a>(&'a self, _: &'a str, _: &'a str, _: Outbound) -> websocket::Answer<'a, u32> {
        Either::Left(ready(Ok(0)))
    }
}

fn runtime(cpu_deadline: Duration) -> Arc<Runtime> {
    let limits = Limits {
        max_calls: 64,
        guest_cpu_deadline: cpu_deadline,
        ..Limits::default()
    };
    let config = RuntimeConfig {
        pooling: false,
        cache_dir: Some(test_cache_dir()),
        ..RuntimeConfig::new(limits, ankh::kv::Store::memory())
    };
    Runtime::new(config, Default::default()).unwrap()
}

/// `GET path` for the plugin mounted at `mount`, parsed as the I/O thread parses it.
fn request(path: &str, mount: &str) -> Incoming {
    let raw = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    let Ok(Status::Complete(head, _)) = parse(raw.as_bytes(), &Limits::default()) else {
        panic!("a complete head");
    };
    Incoming {
        id: 1,
        head,
        mount: mount.into(),
        body: Vec::new(),
        inflow: None,
        remote: "127.0.0.1:1".parse().unwrap(),
        trace: None,
    }
}

fn instance(runtime: &Runtime, name: &str, wasm: &str) -> Instance {
    let plugin = Arc::new(Plugin::load(runtime, name, Path::new(wasm)).unwrap());
    block_on(Instance::new(&plugin, Arc::new(NoSockets)))
        .map_err(|f| f.error)
        .unwrap()
}

#[test]
fn a_plugin_answers_through_the_runtime_alone() {
    let runtime = runtime(Duration::from_secs(2));
    let mut hello = instance(&runtime, "hello", plugins::HELLO);
    let kept = Kept::default();
    let (outcome, call) = block_on(hello.handle_request(
        &mut request("/hello", "/hello"),
        Box::new(kept.clone()),
        Cancel::default(),
    ));
    // The SDK's plugins answer with a packed buffer, read in place.
    let returned = outcome.map_err(|f| f.error).unwrap();
    assert!(matches!(returned, Returned::Packed(_)), "{returned:?}");
    match returned.answer() {
        Ok(Answer::Respond { status, body, .. }) => {
            assert_eq!(status, 200);
            assert_eq!(body, b"Hello, World!");
        }
        _ => panic!("hello responds"),
    }
    // The response was not sent: `handle-request` returned it, the caller sends it.
    assert!(call.0.lock().unwrap().is_empty());
}

#[test]
fn the_runtime_alone_enforces_a_calls_limits_and_its_cancellation() {
    let runtime = runtime(Duration::from_millis(100));
    let mut spin = instance(&runtime, "spin", plugins::SPIN);
    let kept = Kept::default();
    let (outcome, _) = block_on(spin.handle_request(
        &mut request("/spin/loop", "/spin"),
        Box::new(kept.clone()),
        Cancel::default(),
    ));
    let Err(failure) = outcome else {
        panic!("a runaway loop fails");
    };
    assert!(
        matches!(failure.error, InvokeError::Deadline(_)),
        "{:?}",
        failure.error
    );
    // A call whose client already left stops at its first wait.
    let mut probe = instance(&runtime, "probe", plugins::PROBE);
    let cancel = Cancel::default();
    cancel.cancel();
    let mut req = request("/probe/sleep?ms=60000", "/probe");
    let started = std::time::Instant::now();
    let (outcome, _) = block_on(probe.handle_request(&mut req, Box::new(kept.clone()), cancel));
    let Err(failure) = outcome else {
        panic!("a cancelled call fails");
    };
    assert!(
        matches!(failure.error, InvokeError::Cancelled),
        "{:?}",
        failure.error
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}
