//! The runtime alone: a plugin called through `ankh::runtime` with no socket, no I/O thread
//! and no worker pool (the seam of issue 13). What the runtime needs from the rest of the host
//! is two traits, here implemented by the test.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankh::access::Access;
use ankh::hub::Hub;
use ankh::limits::Limits;
use ankh::message::{Cancel, Outbound, WsId};
use ankh::proto::request::parse;
use ankh::proto::{Status, Version};
use ankh::runtime::call::{CallContext, Origin, Responder};
use ankh::runtime::engine::{Runtime, RuntimeConfig};
use ankh::runtime::exec::block_on;
use ankh::runtime::incoming::Incoming;
use ankh::runtime::instance::{Instance, InvokeError};
use ankh::runtime::packed::{Answer, Returned};
use ankh::runtime::plugin::Plugin;
use ankh::runtime::state::{WsLink, WsOut};

use crate::harness::{plugins, test_cache_dir};

/// A response as sent: the bytes, and whether the connection closes after them.
type Sent = (Vec<u8>, bool);

/// Keeps what the runtime would have sent to a client.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<Sent>>>);

impl Responder for Kept {
    fn respond(&mut self, bytes: Vec<u8>, close: bool) {
        self.0.lock().unwrap().push((bytes, close));
    }
}

/// No WebSockets here.
#[derive(Debug)]
struct NoSockets;

impl WsOut for NoSockets {
    fn send(&self, _: usize, _: WsId, _: Outbound) {}
    fn close(&self, _: usize, _: WsId, _: u16, _: String) {}
    fn publish(&self, _: Vec<(usize, WsId)>, _: Outbound) {}
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
        remote: "127.0.0.1:1".parse().unwrap(),
    }
}

fn call(name: &str, kept: &Kept) -> CallContext {
    let origin = Origin {
        request_id: 1,
        version: Version::Http11,
        head: false,
        keep_alive: true,
        accept_encoding: None,
        access: Access {
            remote: "127.0.0.1:1".parse().unwrap(),
            method: "GET".into(),
            path: "/".into(),
            received: std::time::Instant::now(),
            metrics: None,
        },
    };
    CallContext::new(origin, name.into(), Box::new(kept.clone()))
}

fn instance(runtime: &Runtime, name: &str, wasm: &str) -> Instance {
    let plugin = Arc::new(Plugin::load(runtime, name, Path::new(wasm)).unwrap());
    let link = WsLink {
        hub: Arc::new(Hub::default()),
        out: Arc::new(NoSockets),
        cluster: None,
    };
    block_on(Instance::new(&plugin, link))
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
        call("hello", &kept),
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
    assert!(!call.responded());
    assert!(kept.0.lock().unwrap().is_empty());
}

#[test]
fn the_runtime_alone_enforces_a_calls_limits_and_its_cancellation() {
    let runtime = runtime(Duration::from_millis(100));
    let mut spin = instance(&runtime, "spin", plugins::SPIN);
    let kept = Kept::default();
    let (outcome, _) = block_on(spin.handle_request(
        &mut request("/spin/loop", "/spin"),
        call("spin", &kept),
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
    let (outcome, _) = block_on(probe.handle_request(&mut req, call("probe", &kept), cancel));
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
