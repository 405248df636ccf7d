#!/usr/bin/env bash
# Before/after for a hot-path change: serves the `bench` plugin (as index.wasm, with its
# policy plugins/bench.toml) with each ankh binary in turn, ROUNDS times, alternating, and
# prints each binary's median req/s and p99 under the same wrk load. Alternating rounds spread
# the machine's noise over all of them. Servers run as a user runs them (access log on, to a
# file) unless -q turns the access log off.
#
#   benches/ab.sh [-p PATH] [-c CONNECTIONS] [-w WORKERS] [-r ROUNDS] [-d SECONDS] [-q] [-P WASM [-t POLICY]] [-b BYTES] BIN...
#
# -P serves another component as index.wasm instead, with no policy (a wasi:http component
# built by the tests, say: target/wasm-plugins/wasm32-wasip2/release/httpecho.wasm), or with
# the policy file -t (a grant for an outbound call: `-P probe.wasm -t probe.toml -p
# "/fetch?url=http://127.0.0.1:PORT/"`, with a server of one's own on PORT). -b
# POSTs a body of BYTES bytes with each request (the `echo` example answers it back:
# `-P target/wasm-plugins/wasm32-wasip2/release/echo.wasm -b 1024`).
#
# A binary older than a key of the policy refuses the plugin; it is then served without the
# policy (said on stderr). Such binaries predate coarse clocks, so they read precise clocks,
# which is what the policy asks for.
#
# Example: keep a copy of the old binary, rebuild, compare:
#   cp target/release/ankh /tmp/ankh-before && cargo build --release -p ankh
#   benches/ab.sh /tmp/ankh-before target/release/ankh
set -euo pipefail
path=/ conns=64 workers="" rounds=5 secs=3 quiet="" other="" own_policy="" body=""
while getopts "p:c:w:r:d:qP:t:b:" opt; do
    case $opt in
        p) path=$OPTARG ;; c) conns=$OPTARG ;; w) workers=$OPTARG ;;
        r) rounds=$OPTARG ;; d) secs=$OPTARG ;; q) quiet=1 ;; P) other=$OPTARG ;;
        t) own_policy=$OPTARG ;; b) body=$OPTARG ;; *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-p PATH] [-c N] [-w N] [-r N] [-d S] [-q] [-P WASM [-t POLICY]] [-b BYTES] BIN..." >&2; exit 2; }
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
# Where ankh-test-support's build script builds the plugins (every cargo build of the tests or
# benches refreshes it).
plugins_target=${CARGO_TARGET_DIR:-$root/target}/wasm-plugins
wasm=$plugins_target/wasm32-wasip2/release/bench.wasm
[ -n "$other" ] || [ -f "$wasm" ] || cargo build --release --target wasm32-wasip2 --manifest-path "$root/plugins/Cargo.toml" --target-dir "$plugins_target" -p bench
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
policy=$root/plugins/bench.toml
if [ -n "$other" ]; then wasm=$(realpath "$other"); policy=${own_policy:+$(realpath "$own_policy")}; fi

# -b: a wrk script that POSTs the body.
script=()
if [ -n "$body" ]; then
    printf 'wrk.method = "POST"\nwrk.body = string.rep("x", %d)\nwrk.headers["Content-Type"] = "text/plain"\n' \
        "$body" >"$work/post.lua"
    script=(-s "$work/post.lua")
fi

start() { # BIN DIR: sets $pid, returns once the server listens
    rm -f "$work/ready"
    # From the work directory, so the default data directory (./data) is a scratch one, for
    # binaries old and new alike.
    local bin; bin=$(realpath "$1")
    (cd "$work" && exec "$bin" serve --plugins "$2" --listen 127.0.0.1:0 --ready-file "$work/ready" \
        ${quiet:+--no-access-log} --no-watch --cache-dir "$work/cache" \
        ${workers:+--workers $workers} 2>"$work/log") &
    pid=$!
    for _ in $(seq 600); do [ -s "$work/ready" ] && break; sleep 0.05; done
}

# One plugins directory per binary: with the policy if that binary accepts it.
declare -A dirs
n=0
for bin in "$@"; do
    n=$((n + 1)); dir=$work/plugins-$n; mkdir "$dir"; cp "$wasm" "$dir/index.wasm"
    [ -f "$policy" ] && cp "$policy" "$dir/index.toml"
    start "$bin" "$dir"
    status=$(curl -s -o /dev/null -w '%{http_code}' "http://$(cat "$work/ready")$path" || true)
    kill $pid; wait $pid 2>/dev/null || true
    if [ "$status" != 200 ] && [ -f "$dir/index.toml" ]; then
        echo "$bin: refuses $(basename "$policy") (an older binary): served without it" >&2
        rm "$dir/index.toml"
    fi
    dirs[$bin]=$dir
done

run_one() { # BIN -> "rps p99"
    start "$1" "${dirs[$1]}"
    local url="http://$(cat "$work/ready")$path"
    wrk -t2 -c"$conns" -d1s "${script[@]}" "$url" >/dev/null
    local out; out=$(wrk -t2 -c"$conns" -d"${secs}s" --latency "${script[@]}" "$url")
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
printf '%-40s %12s %10s   (%s%s, %d connections, %d x %ds rounds, access log %s)\n' binary "median req/s" "p99" \
    "$path" "${body:+, POST $body bytes}" "$conns" "$rounds" "$secs" "$([ -n "$quiet" ] && echo off || echo on)"
for bin in "$@"; do
    median=$(sort -n <<<"${results[$bin]}" | awk 'NF' | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
    printf '%-40s %12.0f %10s\n' "$bin" ${median}
done
