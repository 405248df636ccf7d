#!/usr/bin/env bash
# Builds the Python WASI 0.3 wasi:http/service test component (app.py) with componentize-py.
#
#   tests/components/py-p3/build.sh OUT_DIR     # writes OUT_DIR/pyp3.wasm
#
# componentize-py is found as $COMPONENTIZE_PY, else target/py-venv/bin/componentize-py, else
# on PATH (plugins/py/requirements.txt pins it; .ci/run installs it). wit/ holds the
# wasi:http 0.3.0 `service` world as wasmtime-wasi-http 48.0.8 ships it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
cpy=${COMPONENTIZE_PY:-}
if [ -z "$cpy" ] && [ -x "$root/target/py-venv/bin/componentize-py" ]; then
    cpy=$root/target/py-venv/bin/componentize-py
fi
cpy=${cpy:-componentize-py}
cd "$here"
"$cpy" -d "$here/wit" -w service componentize app --output "$out/.pyp3.wasm.part"
mv "$out/.pyp3.wasm.part" "$out/pyp3.wasm"
