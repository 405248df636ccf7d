#!/usr/bin/env bash
# Before/after for a hot-path change: serves the `bench` plugin (as index.wasm) with each
# ankh binary in turn, ROUNDS times, alternating, and prints each binary's median req/s and
# p99 under the same wrk load. Alternating rounds spread the machine's noise over all of them.
#
#   benches/ab.sh [-p PATH] [-c CONNECTIONS] [-w WORKERS] [-r ROUNDS] [-d SECONDS] BIN...
#
# Example: keep a copy of the old binary, rebuild, compare:
#   cp target/release/ankh /tmp/ankh-before && cargo build --release -p ankh
#   benches/ab.sh /tmp/ankh-before target/release/ankh
set -euo pipefail
path=/ conns=64 workers="" rounds=5 secs=3
while getopts "p:c:w:r:d:" opt; do
    case $opt in
        p) path=$OPTARG ;; c) conns=$OPTARG ;; w) workers=$OPTARG ;;
        r) rounds=$OPTARG ;; d) secs=$OPTARG ;; *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-p PATH] [-c N] [-w N] [-r N] [-d S] BIN..." >&2; exit 2; }
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
wasm=$root/plugins/target/wasm32-wasip2/release/bench.wasm
[ -f "$wasm" ] || cargo build --release --target wasm32-wasip2 --manifest-path "$root/plugins/Cargo.toml" -p bench
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/plugins" && cp "$wasm" "$work/plugins/index.wasm"

run_one() { # BIN -> "rps p99"
    rm -f "$work/ready"
    "$1" serve --plugins "$work/plugins" --listen 127.0.0.1:0 --ready-file "$work/ready" \
        --no-access-log --no-watch --cache-dir "$work/cache" ${workers:+--workers $workers} \
        2>"$work/log" &
    local pid=$!
    for _ in $(seq 600); do [ -s "$work/ready" ] && break; sleep 0.05; done
    local url="http://$(cat "$work/ready")$path"
    wrk -t2 -c"$conns" -d1s "$url" >/dev/null
    local out; out=$(wrk -t2 -c"$conns" -d"${secs}s" --latency "$url")
    kill $pid; wait $pid 2>/dev/null || true
    echo "$(awk '/Requests\/sec/ {print $2}' <<<"$out") $(awk '$1 == "99%" {print $2}' <<<"$out")"
}

declare -A results
for r in $(seq "$rounds"); do
    for bin in "$@"; do
        results[$bin]+="$(run_one "$bin")"$'\n'
    done
done
for bin in "$@"; do echo "$bin: $(awk 'NF {printf "%s ", $1}' <<<"${results[$bin]}")"; done
printf '%-40s %12s %10s   (%s, %d connections, %d x %ds rounds)\n' binary "median req/s" "p99" "$path" "$conns" "$rounds" "$secs"
for bin in "$@"; do
    median=$(sort -n <<<"${results[$bin]}" | awk 'NF' | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
    printf '%-40s %12.0f %10s\n' "$bin" ${median}
done
