//! The tests that need a toolchain or a client from outside this repository: cargo itself
//! (building plugin crates, `ankh new`, `ankh dev`), componentize-py and componentize-js
//! (plugins and wasi:http components in Python and JavaScript), `wasmtime serve` as the
//! reference for wasi:http components, Chromium, and Node and Python clients. Outside CI a
//! test whose tool is missing says which and skips; under CI it fails.

#![allow(unreachable_pub)] // one test binary: `pub` only shares items between its modules

use ankh_test_support::{harness, metrics, upstream, wasmtime_serve};

// Plugin crates built with cargo: `ankh build`, `ankh new`, `ankh dev`.
mod cli_build;
// The chat and ticker (Server-Sent Events) examples in headless Chromium.
mod browser;
// A plugin written in Python (componentize-py) against the same WIT world.
mod python;
// Standard wasi:http/proxy components from four toolchains, against wasmtime serve.
mod wasi_http;
// WASI 0.3 components (wasi:http/service) from Rust toolchains, against wasmtime serve 49.
mod wasi_p3;
// Real clients nobody here wrote (Node, Python), where they tripped.
mod clients;
