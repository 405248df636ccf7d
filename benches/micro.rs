//! Micro benchmarks (criterion), each beside a baseline in the same group
//! (`cargo bench -p benches --bench micro`):
//!
//! - `parse`: a browser-like request head through `ankh::proto::request::parse` (httparse,
//!   framing, header validation, owned copies), against bare `httparse::Request::parse`;
//! - `encode`: a response head and body by direct appends into a reused buffer (ankh's
//!   `encode`, with its cached `Date`) against the same bytes built with `format!`;
//! - `gzip`: a typical 4 KiB JSON body, compressed at ankh's level (`GZIP_LEVEL`, 1) against flate2's
//!   default level (6);
//! - `plugin`: one `handle-request` call on a reused instance of the `bench` plugin, and one
//!   fresh instantiation with and without the pooling allocator;
//! - `config`: a call of `configprobe` that reads a configuration value 1,000 times against
//!   one that reads it none (one read is the difference over 1,000).
//!
//! Criterion writes its estimates under `target/criterion`; `benches/report.sh` reads them.

use std::hint::black_box;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use ankh::access::Access;
use ankh::limits::Limits;
use ankh::message::ConnId;
use ankh::pool::exchange::{Exchange, Origin, Responder};
use ankh::pool::reply::{Reply, ReplyTx, reply_channel};
use ankh::proto::encoding::{Coding, compress};
use ankh::proto::response::{RequestMeta, encode};
use ankh::proto::{Status, Version};
use ankh::runtime::engine::incoming::Incoming;
use ankh::runtime::engine::instance::Instance;
use ankh::runtime::engine::packed::Answer;
use ankh::runtime::engine::plugin::Plugin;
use ankh::runtime::engine::{Runtime, RuntimeConfig};
use ankh::runtime::sandbox::exec::block_on;
use ankh::ws_router::WsRouter;
use criterion::{Criterion, criterion_group, criterion_main};

const HEAD: &[u8] = b"GET /todo/items?sort=asc&page=2 HTTP/1.1\r\n\
Host: localhost:8080\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Connection: keep-alive\r\n\
Cookie: session=4f6c2b1e9a; theme=dark\r\n\
Upgrade-Insecure-Requests: 1\r\n\
Sec-Fetch-Dest: document\r\n\
Sec-Fetch-Mode: navigate\r\n\
Sec-Fetch-Site: none\r\n\
Priority: u=0, i\r\n\r\n";

fn parse(c: &mut Criterion) {
    let limits = Limits::default();
    let mut g = c.benchmark_group("parse");
    g.bench_function("ankh", |b| {
        b.iter(|| ankh::proto::request::parse(black_box(HEAD), &limits).unwrap())
    });
    g.bench_function("httparse", |b| {
        b.iter(|| {
            let mut headers = [httparse::EMPTY_HEADER; 100];
            let mut req = httparse::Request::new(&mut headers);
            black_box(req.parse(black_box(HEAD)).unwrap());
        })
    });
    g.finish();
}

fn encode_response(c: &mut Criterion) {
    let headers = vec![(
        "content-type".to_owned(),
        b"text/plain; charset=utf-8".to_vec(),
    )];
    let body = b"Hello, World!";
    let meta = RequestMeta {
        version: Version::Http11,
        head: false,
        keep_alive: true,
        accept_encoding: None,
    };
    let mut g = c.benchmark_group("encode");
    let mut out = Vec::with_capacity(256);
    g.bench_function("ankh", |b| {
        b.iter(|| {
            out.clear();
            encode(200, &headers, black_box(body), &meta, &mut out).unwrap();
            black_box(out.len());
        })
    });
    g.bench_function("format", |b| {
        b.iter(|| {
            let date = httpdate::fmt_http_date(std::time::SystemTime::now());
            let text = format!(
                "HTTP/1.1 {} {}\r\ndate: {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n\r\n",
                200,
                "OK",
                date,
                "text/plain; charset=utf-8",
                body.len()
            );
            let mut bytes = text.into_bytes();
            bytes.extend_from_slice(black_box(body));
            black_box(bytes);
        })
    });
    g.finish();
}

/// About 4 KiB of JSON: a page of a typical list endpoint.
fn json_body() -> Vec<u8> {
    let items: Vec<_> = (0..40)
        .map(|i| {
            serde_json::json!({
                "id": i,
                "title": format!("write the plugin number {i}"),
                "done": i % 3 == 0,
                "tags": ["work", "wasm"],
                "created": "2026-11-30T00:00:00Z",
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "items": items, "page": 2 })).unwrap()
}

fn gzip(c: &mut Criterion) {
    let body = json_body();
    let mut g = c.benchmark_group("gzip");
    g.bench_function("ankh", |b| {
        b.iter(|| black_box(compress(Coding::Gzip, black_box(&body))))
    });
    g.bench_function("flate2-default", |b| {
        b.iter(|| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(black_box(&body)).unwrap();
            black_box(e.finish().unwrap())
        })
    });
    g.finish();
    let ours = compress(Coding::Gzip, &body).len();
    println!(
        "gzip: {} bytes of JSON -> {ours} bytes at ankh's level",
        body.len()
    );
}

fn runtime(pooling: bool) -> Arc<Runtime> {
    let limits = Limits {
        max_calls: 64,
        ..Limits::default()
    };
    let config = RuntimeConfig {
        pooling,
        cache_dir: Some(benches::root().join("target/bench-cache")),
        ..RuntimeConfig::new(limits, ankh::kv::Store::memory())
    };
    Runtime::new(config, Default::default()).unwrap()
}

/// What the worker does with a response: hand it to the reply queue.
struct ToReplies(ReplyTx);

impl Responder for ToReplies {
    fn respond(&mut self, bytes: Vec<u8>, close: bool) {
        self.0.send(Reply::Response {
            conn: ConnId {
                shard: 0,
                slot: 0,
                serial: 0,
            },
            seq: 0,
            bytes,
            close,
        });
    }

    fn start(&mut self, _head: Vec<u8>, _flow: ankh::message::Flow) {
        unreachable!("the micro benchmark's plugins answer whole")
    }

    fn piece(&mut self, _bytes: Vec<u8>) {
        unreachable!("the micro benchmark's plugins answer whole")
    }

    fn end(&mut self, _last: Vec<u8>, _close: bool) {
        unreachable!("the micro benchmark's plugins answer whole")
    }
}

/// A request for a plugin call without a connection: the parsed head of `raw`, reached under
/// `mount`, and where its answer goes.
fn request(raw: &[u8], mount: &str) -> (Incoming, Origin) {
    let Ok(Status::Complete(head, _)) = ankh::proto::request::parse(raw, &Limits::default()) else {
        panic!("a complete head");
    };
    let remote: std::net::SocketAddr = "127.0.0.1:50000".parse().unwrap();
    let origin = Origin {
        request_id: 1,
        version: Version::Http11,
        head: false,
        keep_alive: true,
        accept_encoding: None,
        access: Access {
            remote,
            method: head.method.clone(),
            path: head.path.clone(),
            received: std::time::Instant::now(),
            metrics: None,
            trace: None,
        },
        stream: Default::default(),
    };
    let request = Incoming {
        id: 1,
        head,
        mount: mount.into(),
        body: Vec::new(),
        inflow: None,
        remote,
        trace: None,
    };
    (request, origin)
}

fn plugin(c: &mut Criterion) {
    let wasm = std::path::Path::new(ankh_test_support::harness::plugins::BENCH);
    let (reply, replies) = reply_channel(Arc::new(|| {}));
    let hub = Arc::new(ankh::hub::Hub::default());
    let link = Arc::new(WsRouter::new(
        hub.clone(),
        Arc::new(ankh::pool::reply::Replies::new(vec![reply.clone()])),
        None,
    ));
    let pooled = runtime(true);
    let on_demand = runtime(false);
    // `ANKH_CALLS=N` (below) runs under valgrind, where the pooling allocator cannot reserve
    // its address space; a reused instance's call does not depend on the allocator.
    assert!(
        pooled.pooling || std::env::var_os("ANKH_CALLS").is_some(),
        "the pooling allocator is unavailable here"
    );
    let plugin = Arc::new(Plugin::load(&pooled, "bench", wasm).unwrap());
    let plugin_on_demand = Arc::new(Plugin::load(&on_demand, "bench", wasm).unwrap());

    let (request, origin) = request(
        b"GET /bench HTTP/1.1\r\nhost: localhost:8080\r\nuser-agent: wrk\r\n\r\n",
        "/bench",
    );

    let mut g = c.benchmark_group("plugin");
    let mut instance = block_on(Instance::new(&plugin, link.clone()))
        .map_err(|f| f.error)
        .unwrap();
    g.bench_function("call-reused-instance", |b| {
        // The request has no body, the one part a call may take from it: the same request
        // serves every call.
        let mut request = request.clone();
        let mut call_once = || {
            let call = Box::new(Exchange::new(
                origin.clone(),
                plugin.name.clone(),
                ToReplies(reply.clone()),
            ));
            let (outcome, _call) =
                block_on(instance.handle_request(&mut request, call, Default::default()));
            match outcome.unwrap().answer() {
                Ok(Answer::Respond { status, .. }) => assert_eq!(status, 200),
                _ => panic!("the bench plugin responds"),
            }
        };
        // `ANKH_CALLS=N`: make N calls and exit, for an instruction count that the machine's
        // noise does not move (`valgrind --tool=callgrind`, N and 10 calls, subtract).
        if let Some(n) = std::env::var("ANKH_CALLS")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
        {
            (0..n).for_each(|_| call_once());
            std::process::exit(0);
        }
        b.iter(call_once)
    });
    g.bench_function("instantiate-pooling", |b| {
        b.iter(|| {
            black_box(
                block_on(Instance::new(&plugin, link.clone()))
                    .map_err(|f| f.error)
                    .unwrap(),
            )
        })
    });
    g.bench_function("instantiate-on-demand", |b| {
        b.iter(|| {
            black_box(
                block_on(Instance::new(&plugin_on_demand, link.clone()))
                    .map_err(|f| f.error)
                    .unwrap(),
            )
        })
    });
    g.finish();
    drop(replies);
}

/// The cost of one configuration read (`wasi:config/store.get`, the SDK's `config::get`): a
/// call of `configprobe` that reads its value 1,000 times against one that reads it none;
/// the difference over 1,000 is one read (goal: at most 1 µs).
fn config(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("ankh-micro-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wasm = dir.join("configprobe.wasm");
    std::fs::copy(ankh_test_support::harness::plugins::CONFIGPROBE, &wasm).unwrap();
    std::fs::write(
        dir.join("configprobe.toml"),
        "[[config]]\nname = \"greeting\"\ndefault = \"hello\"\n",
    )
    .unwrap();
    let (reply, replies) = reply_channel(Arc::new(|| {}));
    let link = Arc::new(WsRouter::new(
        Arc::new(ankh::hub::Hub::default()),
        Arc::new(ankh::pool::reply::Replies::new(vec![reply.clone()])),
        None,
    ));
    let runtime = runtime(false);
    let plugin = Arc::new(Plugin::load(&runtime, "configprobe", &wasm).unwrap());
    let mut instance = block_on(Instance::new(&plugin, link))
        .map_err(|f| f.error)
        .unwrap();
    let mut g = c.benchmark_group("config");
    for reads in [0, 1000] {
        let raw = format!(
            "GET /configprobe/get?name=greeting&n={reads} HTTP/1.1\r\nhost: localhost\r\n\r\n"
        );
        let (mut request, origin) = request(raw.as_bytes(), "/configprobe");
        g.bench_function(format!("call-reading-{reads}"), |b| {
            b.iter(|| {
                let call = Box::new(Exchange::new(
                    origin.clone(),
                    plugin.name.clone(),
                    ToReplies(reply.clone()),
                ));
                let (outcome, _call) =
                    block_on(instance.handle_request(&mut request, call, Default::default()));
                match outcome.unwrap().answer() {
                    Ok(Answer::Respond { status, .. }) => assert_eq!(status, 200),
                    _ => panic!("configprobe responds"),
                }
            })
        });
    }
    g.finish();
    drop(replies);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = micro;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = parse, encode_response, gzip, plugin, config
}
criterion_main!(micro);
