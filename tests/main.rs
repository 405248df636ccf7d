//! End-to-end tests of ankh: the real `ankh` binary, plugins built from source by `build.rs`,
//! and real clients over loopback TCP. One module per feature; acceptance points of
//! `shared/acceptance.md` are named `aNN_...` after their number.

#![allow(unreachable_pub)] // one test binary: `pub` only shares items between its modules

// The harness: start a server, raw sockets, a client library, response parsing.
mod harness;
// A local HTTP service for plugins to call, counting its connections.
mod upstream;
// Real Redis and nginx, started by the tests.
mod services;

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
// The chat example in two headless Chromium pages.
mod browser;
// The command line: building plugins, what serve logs.
mod cli;
// A plugin written in Python (componentize-py) against the same WIT world.
mod python;
// Hostile and broken clients, limits, timeouts, graceful drain, load and fault runs: A22-A25,
// A59, A60.
mod hardening;
// Isolation between plugins, and bounds on every resource a plugin or client can grow: issue 11.
mod isolation;
// Real clients nobody here wrote (Node, Python), where they tripped: issue 12.
mod clients;
// Logs a person can read: colour, one event per failure, access lines of host answers.
mod logs;
// The runtime alone: a plugin called with no socket, I/O thread or pool.
mod runtime;
// Plugin state that survives: the durable key-value store, wasi:keyvalue, 0.1.0 plugins, crashes
// and full disks: issue 14.
mod kv;
// WebSocket compression (permessage-deflate): negotiation, frames, bombs, publish: issue 16.
mod compression;
// Several event loops: connections spread and kept, messages across loops: issue 17.
mod shards;
// Waits that hold no thread: sleeping, cancelled, bounded and computing calls, commits: issue 18.
mod waits;
// Standard wasi:http/proxy components from four toolchains, against wasmtime serve: issue 15.
mod wasi_http;
// Outbound HTTP from plugins: grants, address rules, pooling, timeouts, caps: issue 15.
mod outbound;
// Many processes as one application through Redis and nginx: state, topics, connections,
// kill -9 and a Redis outage: issue 19.
mod scaleout;
