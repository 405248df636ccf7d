#!/usr/bin/env bash
# Builds the Python wasi:http/proxy test component (app.py) with componentize-py.
#
#   tests/components/py-http/build.sh OUT_DIR     # writes OUT_DIR/pyhttp.wasm
#
# componentize-py is found as $COMPONENTIZE_PY, else target/py-venv/bin/componentize-py, else
# on PATH (plugins/py/requirements.txt pins it; .ci/run installs it).
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
"$cpy" -d "$here/../wit" -w proxy componentize app --output "$out/.pyhttp.wasm.part"
mv "$out/.pyhttp.wasm.part" "$out/pyhttp.wasm"
