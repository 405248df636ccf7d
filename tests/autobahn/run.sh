#!/usr/bin/env bash
# WebSocket conformance: the Autobahn TestSuite's fuzzingclient against the wsecho plugin.
#
# Usage: tests/autobahn/run.sh [PATH/TO/wsecho.wasm]
#
# What it does, from the repository root:
#   1. Makes (or reuses) a Python 2.7 virtualenv at target/autobahn-venv with the versions
#      pinned in tests/autobahn/requirements.txt (autobahntestsuite is Python 2 code). The
#      Python 2.7 interpreter is $AUTOBAHN_PYTHON2, else ~/.pyenv/versions/2.7.18/bin/python,
#      else python2.7 on PATH; virtualenv<20.22 (the last that creates 2.7 envs) is installed
#      with python3's pip into target/autobahn-tools. The venv is rebuilt when
#      requirements.txt changes.
#   2. Builds wsecho (cargo build --release --target wasm32-wasip2 -p wsecho in plugins/)
#      unless a .wasm path is given.
#   3. Starts target/release/ankh serve on a free loopback port (--listen 127.0.0.1:0, the
#      address is read from --ready-file) with --ws-max-message-bytes 20000000 (the 9.* cases
#      send messages of up to 16 MiB; the default cap is 64 KiB) and
#      --max-send-buffer-bytes 67108864. It does not build the host: build it first with
#      cargo build --release -p ankh.
#   4. Writes target/autobahn-report/spec.json (all cases: "cases": ["*"], no exclusions;
#      AUTOBAHN_CASES / AUTOBAHN_EXCLUDE, JSON lists, override) and runs
#      wstest -m fuzzingclient. The HTML/JSON reports go to target/autobahn-report/ (index.html
#      and index.json; one JSON file per case with the wire log); the server's log is
#      target/autobahn-report/server.log.
#   5. Stops the server with SIGTERM and prints how many cases got each "behavior" and
#      "behaviorClose" (from index.json), then every case that is not OK.
#
# Exit status: 0 when every case's behavior and behaviorClose is OK, except the three cases
# the suite itself always reports INFORMATIONAL (7.1.6, 7.13.1, 7.13.2: "actual events are
# undefined by the spec"); of those, 7.1.6 must show the server's answers to both messages
# before its Close (the echo of a Close waits for the plugin). 1 when any case is anything
# else (FAILED, NON-STRICT, UNIMPLEMENTED, WRONG CODE, UNCLEAN, ...); 2 for a setup error (no
# host binary, no Python 2.7, server did not start, ...).
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TARGET="$ROOT/target"
VENV="$TARGET/autobahn-venv"
TOOLS="$TARGET/autobahn-tools"
REPORT="$TARGET/autobahn-report"
REQS="$ROOT/tests/autobahn/requirements.txt"
ANKH="$TARGET/release/ankh"

die() {
    echo "autobahn: $*" >&2
    exit 2
}

[ -x "$ANKH" ] || {
    echo "build it first: cargo build --release -p ankh" >&2
    exit 2
}

# --- 1. the Python 2.7 virtualenv with wstest
py2=${AUTOBAHN_PYTHON2:-}
if [ -z "$py2" ]; then
    for c in "$HOME/.pyenv/versions/2.7.18/bin/python" "$(command -v python2.7 || true)"; do
        if [ -n "$c" ] && [ -x "$c" ]; then
            py2=$c
            break
        fi
    done
fi
[ -n "$py2" ] && [ -x "$py2" ] || die "no Python 2.7 found (set AUTOBAHN_PYTHON2)"

req_sum=$(sha256sum "$REQS" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/wstest" ] || [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$req_sum" ]; then
    echo "--- creating $VENV"
    if ! PYTHONPATH="$TOOLS" python3 -c 'import virtualenv' 2>/dev/null; then
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS" 'virtualenv<20.22'
    fi
    rm -rf "$VENV"
    PYTHONPATH="$TOOLS" python3 -m virtualenv --quiet -p "$py2" "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-python-version-warning -r "$REQS"
    echo "$req_sum" >"$VENV/.requirements.sha256"
fi
export PYTHONWARNINGS=ignore # cryptography's "Python 2 is no longer supported" warning

# --- 2. the wsecho plugin
if [ $# -ge 1 ]; then
    WASM=$1
else
    echo "--- building wsecho"
    (cd plugins && cargo build --release --target wasm32-wasip2 -p wsecho)
    WASM="$ROOT/plugins/target/wasm32-wasip2/release/wsecho.wasm"
fi
[ -f "$WASM" ] || die "no plugin at $WASM"

# --- 3. the server
rm -rf "$REPORT"
mkdir -p "$REPORT"
WORK=$(mktemp -d)
SERVER_PID=
SERVER_STATUS=
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        SERVER_STATUS=0
        wait "$SERVER_PID" 2>/dev/null || SERVER_STATUS=$?
        SERVER_PID=
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir "$WORK/plugins"
cp "$WASM" "$WORK/plugins/wsecho.wasm"
NO_COLOR=1 "$ANKH" serve --plugins "$WORK/plugins" --listen 127.0.0.1:0 --ready-file "$WORK/ready" \
    --ws-max-message-bytes 20000000 --max-send-buffer-bytes 67108864 \
    >"$REPORT/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 300); do
    [ -s "$WORK/ready" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || {
        cat "$REPORT/server.log" >&2
        die "the server exited before it was ready"
    }
    sleep 0.1
done
[ -s "$WORK/ready" ] || die "the server did not write its ready file within 30 s"
ADDR=$(head -n1 "$WORK/ready")
URL="ws://$ADDR/wsecho"
echo "--- server at $URL (pid $SERVER_PID)"

# --- 4. the fuzzingclient
cases=${AUTOBAHN_CASES:-'["*"]'}
exclude=${AUTOBAHN_EXCLUDE:-'[]'}
cat >"$REPORT/spec.json" <<EOF
{
    "outdir": "$REPORT",
    "servers": [{"agent": "ankh-wsecho", "url": "$URL"}],
    "cases": $cases,
    "exclude-cases": $exclude,
    "exclude-agent-cases": {}
}
EOF
echo "--- wstest -m fuzzingclient (reports in $REPORT)"
start=$(date +%s)
(cd "$WORK" && "$VENV/bin/wstest" -m fuzzingclient -s "$REPORT/spec.json") >"$REPORT/wstest.log" 2>&1 || {
    tail -n 30 "$REPORT/wstest.log" >&2
    die "wstest failed (log: $REPORT/wstest.log)"
}
echo "--- wstest took $(($(date +%s) - start)) s"

kill -0 "$SERVER_PID" 2>/dev/null || echo "autobahn: WARNING: the server exited during the run (see $REPORT/server.log)" >&2

# --- 5. stop the server, summarize
cleanup
trap - EXIT
[ "$SERVER_STATUS" = 0 ] || echo "autobahn: WARNING: the server exited with status $SERVER_STATUS after SIGTERM" >&2

python3 - "$REPORT/index.json" <<'EOF'
import collections, json, os, sys

index = json.load(open(sys.argv[1]))
cases = {}
for agent in index.values():
    cases.update(agent)

def key(case_id):
    return [int(p) for p in case_id.split(".")]

# The suite marks these INFORMATIONAL whatever happens.
always_informational = {"7.1.6", "7.13.1", "7.13.2"}
behavior = collections.Counter(c["behavior"] for c in cases.values())
close = collections.Counter(c["behaviorClose"] for c in cases.values())
print("%d cases" % len(cases))
print("behavior:      " + ", ".join("%s %d" % kv for kv in sorted(behavior.items())))
print("behaviorClose: " + ", ".join("%s %d" % kv for kv in sorted(close.items())))

bad = 0
for case_id in sorted(cases, key=key):
    c = cases[case_id]
    if c["behavior"] == "OK" and c["behaviorClose"] == "OK":
        continue
    ok = {"INFORMATIONAL"} if case_id in always_informational else set()
    fail = c["behavior"] not in ok or c["behaviorClose"] not in ok
    try:
        detail = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), c["reportfile"])))
        result = "%s / %s" % (detail.get("result"), detail.get("resultClose"))
    except (IOError, OSError, ValueError, KeyError):
        detail = {}
        result = "(no per-case report)"
    if case_id == "7.1.6":
        # A 256 KiB message, "Hello World!", then Close: both echoes must precede our Close.
        got = [e[1] for e in detail.get("received", []) if e[0] == "message"]
        in_order = len(got) == 2 and got[1] == "Hello World!" and c.get("remoteCloseCode") == 1000
        fail = fail or not in_order
        result += " (both messages echoed before the Close)" if in_order else " (messages lost)"
    bad += fail
    print("%s %-8s behavior=%s behaviorClose=%s remoteCloseCode=%s: %s" % (
        "FAIL" if fail else "    ", case_id, c["behavior"], c["behaviorClose"],
        c.get("remoteCloseCode"), result))
print("%d passed, %d failed" % (len(cases) - bad, bad))
sys.exit(1 if bad else 0)
EOF
