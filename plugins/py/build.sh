#!/usr/bin/env bash
# Builds the Python example plugin (app.py) into a component for ankh's WIT world.
#
#   plugins/py/build.sh [OUT_DIR]     # writes OUT_DIR/py.wasm (default: plugins/)
#
# Needs componentize-py, found as $COMPONENTIZE_PY, else target/py-venv/bin/componentize-py,
# else on PATH. To install it:
#   python3 -m venv target/py-venv && target/py-venv/bin/pip install -r plugins/py/requirements.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "${1:-$here/..}" && cd "${1:-$here/..}" && pwd)

cpy=${COMPONENTIZE_PY:-}
if [ -z "$cpy" ] && [ -x "$root/target/py-venv/bin/componentize-py" ]; then
    cpy=$root/target/py-venv/bin/componentize-py
fi
cpy=${cpy:-componentize-py}
if ! command -v "$cpy" >/dev/null; then
    echo "build.sh: componentize-py not found; install it with" >&2
    echo "  python3 -m venv target/py-venv && target/py-venv/bin/pip install -r plugins/py/requirements.txt" >&2
    exit 127
fi

cd "$here"
# Written beside the target, then renamed into place: a server watching OUT_DIR swaps in a
# complete file, never a half-written one.
"$cpy" --wit-path "$root/wit" --world plugin componentize app --output "$out/.py.wasm.part"
mv "$out/.py.wasm.part" "$out/py.wasm"
echo "built py -> $out/py.wasm ($(( $(stat -c %s "$out/py.wasm") / 1024 )) KiB)"
