#!/usr/bin/env bash
# Builds a Python test component (DIR/app.py) with componentize-py, for world WORLD of the WIT
# in WIT (relative to DIR).
#
#   tests/components/build-py.sh DIR WIT WORLD NAME OUT_DIR     # writes OUT_DIR/NAME.wasm
#   tests/components/build-py.sh py-http ../wit proxy pyhttp OUT_DIR    (wasi:http/proxy, 0.2)
#   tests/components/build-py.sh py-p3 wit service pyp3 OUT_DIR        (wasi:http/service, 0.3)
#
# componentize-py is found as $COMPONENTIZE_PY, else target/py-venv/bin/componentize-py, else
# on PATH (plugins/py/requirements.txt pins it; .ci/run installs it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=$here/$1 wit=$2 world=$3 name=$4
out=$(mkdir -p "$5" && cd "$5" && pwd)
cpy=${COMPONENTIZE_PY:-}
if [ -z "$cpy" ] && [ -x "$root/target/py-venv/bin/componentize-py" ]; then
    cpy=$root/target/py-venv/bin/componentize-py
fi
cpy=${cpy:-componentize-py}
cd "$dir"
"$cpy" -d "$wit" -w "$world" componentize app --output "$out/.$name.wasm.part"
mv "$out/.$name.wasm.part" "$out/$name.wasm"
