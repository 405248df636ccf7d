#!/usr/bin/env bash
# The benchmark report in one command: builds the release host, runs the micro benchmarks
# (criterion), the HTTP load comparison (wrk against ankh and hyper) and the key-value store's
# (file against memory, restarts), suspended calls (10,000 at once) and wasi:http (proxy
# components against wasmtime serve, outbound calls), then writes target/bench-report/README.md with SVG charts
# beside it. About 8 minutes once built.
#
#   benches/report.sh            # full rounds
#   benches/report.sh --quick    # shorter load rounds, for a look
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "needs wrk: apt-get install wrk" >&2; exit 2; }
cargo build --release -p ankh
cargo bench -p benches --bench micro
cargo bench -p benches --bench load -- "$@"
cargo bench -p benches --bench kv -- "$@"
cargo bench -p benches --bench waits
cargo bench -p benches --bench wasi_http -- "$@"
cargo bench -p benches --bench report
