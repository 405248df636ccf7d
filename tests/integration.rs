//! End-to-end tests of ankh: the `ankh` binary cargo built for this test run, plugins built
//! from source (by `tests/support/build.rs`), and real clients over loopback TCP. One module
//! per feature; acceptance points of `shared/acceptance.md` are named `aNN_...` after their
//! number.
//!
//! Two more test binaries hold what is slow by nature: `toolchains` (cargo, componentize-py,
//! componentize-js, Chromium, Node and Python clients) and `scaleout` (several processes,
//! Redis and nginx).

#![allow(unreachable_pub)] // one test binary: `pub` only shares items between its modules

// The shared harness: the server launcher and clients, metrics, WebSocket frames, services.
use ankh_test_support::{harness, metrics, otlp, upstream, ws};

// Request parsing and framing: A1-A8, A11-A13, A16.
mod http1;
// Keep-alive, pipelining and connection lifetime: A17-A21.
mod keepalive;
// Responses: Content-Length, HEAD, status line, Date, errors, early responses, gzip,
// 100-continue, concurrency: A26-A38.
mod responses;
// Routing between plugins and inside them (A40), and the example plugins.
mod routing;
// Fault containment and sandbox limits: A61-A64, A67, A72.
mod sandbox;
// WebSockets: handshake, framing, events, sending, topics, close, liveness: A44-A58.
mod websocket;
// Hot reload: drop in, replace, delete, under load, across WebSockets: A68-A71.
mod reload;
// Per-plugin policy: routes, limits, capabilities, instance modes: A61-A66, A72 per plugin.
mod policy;
// The admin listener: /healthz, /readyz, /metrics scraped and parsed.
mod admin;
// The command line: errors, exit codes, --help and --print-config, the operators' guide.
mod cli;
// Hostile and broken clients, limits, timeouts, graceful drain, load and fault runs: A22-A25,
// A59, A60.
mod hardening;
// Isolation between plugins, and bounds on every resource a plugin or client can grow.
mod isolation;
// The second hostile round: grants, call slots, the admin port, the event loop, memory.
mod hostile;
// Logs a person can read: colour, one event per failure, access lines of host answers.
mod logs;
// The runtime alone: a plugin called with no socket, I/O thread or pool.
mod runtime;
// Plugin state that survives: the durable key-value store, wasi:keyvalue, 0.1.0 plugins,
// crashes and full disks.
mod kv;
// WebSocket compression (permessage-deflate): negotiation, frames, bombs, publish.
mod compression;
// Several event loops: connections spread and kept, messages across loops.
mod shards;
// Waits that hold no thread: sleeping, cancelled, bounded and computing calls, commits.
mod waits;
// Outbound HTTP from plugins: grants, address rules, pooling, timeouts, caps.
mod outbound;
// Streamed responses: pieces as they are written, trailers, backpressure, clients that leave.
mod streaming;
// Configuration values and secrets (wasi:config/store), issue 36.
mod config;
// Scheduled jobs: ticks, failures, overlap, `ankh run`, issue 36.
mod schedules;
// Traces: traceparent in and out, spans to a real OTLP receiver, across processes, issue 36.
mod traces;
