#!/usr/bin/env bash
# Records what each wasi:http test component answers under `wasmtime serve` 48, into
# tests/components/fixtures/NAME.json; tests/wasi_http.rs then checks that ankh answers the
# same corpus the same way.
#
#   tests/components/record-fixtures.sh
#
# Uses $ANKH_WASMTIME, else `wasmtime` on PATH if it is 48.x, else installs wasmtime-cli
# 48.0.8 with cargo into target/wasmtime-cli (about ten minutes on two cores; only what
# `wasmtime serve` needs is built). Needs what the tests need for the Python and JavaScript
# components (see .ci/run).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
wasmtime=${ANKH_WASMTIME:-}
if [ -z "$wasmtime" ] && command -v wasmtime >/dev/null && wasmtime --version | grep -q '^wasmtime 48\.'; then
    wasmtime=$(command -v wasmtime)
fi
if [ -z "$wasmtime" ]; then
    wasmtime=$root/target/wasmtime-cli/bin/wasmtime
    if [ ! -x "$wasmtime" ]; then
        cargo install wasmtime-cli --version 48.0.8 --locked --root "$root/target/wasmtime-cli" \
            --no-default-features \
            --features serve,run,cranelift,pooling-allocator,parallel-compilation,cache,config,component-model,component-model-async,logging
    fi
fi
(cd tests/components/js-hello && npm ci --no-audit --no-fund --silent)
# The components are built as the tests build them; CI=1 makes a missing toolchain an error.
CI=1 ANKH_WASMTIME=$wasmtime cargo test -p ankh --test toolchains \
    wasi_http::record_fixtures -- --ignored --exact --nocapture
