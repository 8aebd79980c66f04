#!/usr/bin/env bash
# The project's test command: sets up everything from a fresh clone, then runs every check:
# Python lint/types/tests, Rust fmt/clippy/tests, the conformance suite and the demo's acceptance bar.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target}
export PATH="$PWD/.venv/bin:$PATH"
t0=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - t0 ))s)"; }

step setup
scripts/setup.sh --rust

step "python: ruff, mypy"
ruff check .
ruff format --check .
mypy   # mypy.ini: the library, conformance/harness and python/demo

step "rust: fmt, clippy, build"
(cd interop && cargo fmt --all --check)
(cd interop && cargo clippy --locked --workspace --all-targets -q -- -D warnings)
(cd interop && cargo build --locked --workspace --bins --examples -q)
(cd python/native && cargo fmt --check && cargo clippy --locked --release --all-targets -q -- -D warnings)
export PATH="$CARGO_TARGET_DIR/debug:$PATH"   # df-node, df-driver (dependencies are built at opt-level 2); examples/own_model for tests/test_burn_example.py

step "rust: tests"
(cd interop && cargo test --locked --workspace -q)

step "python: pytest"
python -c "import delta_fabric_native"   # built by setup (cargo is here): the tests below run with it
pytest -q tests

step "python: the NumPy core alone (DELTA_FABRIC_NATIVE=off): engine, codec and store tests, vectors"
DELTA_FABRIC_NATIVE=off pytest -q tests/test_engine_vectors.py tests/test_engine.py tests/test_compact.py \
  tests/test_wire.py tests/test_selection.py tests/test_fastpaths.py tests/test_hostile.py \
  tests/test_adapter_torch.py tests/test_averaging.py tests/test_relay_policy.py
DELTA_FABRIC_NATIVE=off delta-fabric conformance run --impl python --no-live --output conformance-out-numpy

step "conformance suite"
delta-fabric conformance run --output conformance-out

step "demo acceptance (label-skewed, 3 nodes)"
scripts/check_demo.sh

echo; echo "all checks passed in $(( $(date +%s) - t0 ))s"
