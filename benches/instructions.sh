#!/usr/bin/env bash
# What one request costs the whole server in user-space instructions, counted by callgrind:
# a number the machine's noise does not move, where wall-clock runs scatter by ±10-15%.
# Serves the `bench` plugin with each ankh binary in turn under valgrind, sends N hello-world
# requests over one keep-alive connection (curl), counting only those, and prints
# instructions per request (the kernel's share, `recv` and `send`, is not counted).
#
#   benches/instructions.sh [-n REQUESTS] [-p PATH] [-P WASM [-t POLICY]] [-a FLAGS] [-H HEADER] [-b BYTES] [-o DIR] BIN...
#
# -P serves another component as index.wasm instead, with no policy, or with the policy file
# -t (a grant for an outbound call: `-P probe.wasm -t probe.toml -p "/fetch?url=..."`). -a
# gives the server more flags (`-a "--otlp-endpoint http://127.0.0.1:4318"`); -H sends a header with each request
# (`-H "traceparent: 00-...-01"`); -b POSTs a body of BYTES bytes with each. -o keeps each
# binary's profile as DIR/NAME.callgrind, for `callgrind_annotate` (by function, where the
# instructions went).
#
# Needs valgrind and curl (Debian packages of the same names). Takes about a minute per binary.
set -euo pipefail
requests=4000 path=/ other="" policy="" flags="" header="" body="" keep=""
while getopts "n:p:P:t:a:H:b:o:" opt; do
    case $opt in
        n) requests=$OPTARG ;; p) path=$OPTARG ;; P) other=$OPTARG ;; t) policy=$OPTARG ;;
        a) flags=$OPTARG ;; H) header=$OPTARG ;; b) body=$OPTARG ;; o) keep=$OPTARG ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-n REQUESTS] [-p PATH] [-P WASM [-t POLICY]] [-a FLAGS] [-H HEADER] [-b BYTES] [-o DIR] BIN..." >&2; exit 2; }
for tool in valgrind callgrind_control callgrind_annotate curl; do
    command -v $tool >/dev/null || { echo "needs $tool (apt-get install valgrind curl)" >&2; exit 2; }
done
root=$(cd "$(dirname "$0")/.." && pwd)
# Where ankh-test-support's build script builds the plugins (every cargo build of the tests or
# benches refreshes it).
plugins_target=${CARGO_TARGET_DIR:-$root/target}/wasm-plugins
wasm=$plugins_target/wasm32-wasip2/release/bench.wasm
if [ -n "$other" ]; then wasm=$(realpath "$other"); fi
[ -f "$wasm" ] || cargo build --release --target wasm32-wasip2 --manifest-path "$root/plugins/Cargo.toml" --target-dir "$plugins_target" -p bench
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/plugins"
cp "$wasm" "$work/plugins/index.wasm"
post=()
if [ -n "$body" ]; then
    head -c "$body" /dev/zero | tr '\0' x >"$work/body"
    post=(-H "content-type: text/plain" --data-binary "@$work/body")
fi
if [ -n "$policy" ]; then cp "$policy" "$work/plugins/index.toml"
elif [ -z "$other" ]; then cp "$root/plugins/bench.toml" "$work/plugins/index.toml"; fi

for bin in "$@"; do
    bin=$(realpath "$bin")
    rm -rf "$work/run" && mkdir "$work/run"
    (cd "$work/run" && exec valgrind --tool=callgrind --callgrind-out-file=out.%p \
        "$bin" serve --plugins "$work/plugins" --listen 127.0.0.1:0 --ready-file ready \
        --no-watch --cache-dir "$work/cache" --workers 2 $flags 2>log >/dev/null) &
    pid=$!
    for _ in $(seq 1200); do [ -s "$work/run/ready" ] && break; sleep 0.1; done
    url="http://$(cat "$work/run/ready")$path"
    # A numbered parameter of its own makes each request distinct for curl's globbing.
    case $path in *\?*) sep='&' ;; *) sep='?' ;; esac
    # Warm: the first calls instantiate the plugin and fill caches.
    curl -s -o /dev/null ${header:+-H "$header"} "${post[@]}" "$url${sep}warm=[1-200]"
    callgrind_control -z "$pid" >/dev/null 2>&1
    curl -s -o /dev/null ${header:+-H "$header"} "${post[@]}" "$url${sep}i=[1-$requests]"
    # With flags (an OTLP endpoint), the exporter's last batch leaves within half a second:
    # counted too.
    [ -z "$flags" ] || sleep 1
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid"; wait "$pid" 2>/dev/null || true
    profile=$(ls "$work"/run/out.*.1 | head -1)
    total=$(callgrind_annotate --auto=no "$profile" 2>/dev/null |
        awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    if [ -n "$keep" ]; then
        mkdir -p "$keep" && cp "$profile" "$keep/$(basename "$bin").callgrind"
    fi
    echo "$bin: $((total / requests)) instructions per request ($requests requests, $path${body:+, POST $body bytes})"
done
