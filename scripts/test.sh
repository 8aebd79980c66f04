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
export PATH="$CARGO_TARGET_DIR/debug:$PATH"   # df-node, df-driver (dependencies are built at opt-level 2); examples/own_model for tests/test_burn_example.py

step "rust: tests"
(cd interop && cargo test --locked --workspace -q)

step "python: pytest"
pytest -q tests

step "conformance suite"
delta-fabric conformance run --output conformance-out

step "demo acceptance (label-skewed, 3 nodes)"
scripts/check_demo.sh

echo; echo "all checks passed in $(( $(date +%s) - t0 ))s"
