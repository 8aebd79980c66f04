#!/usr/bin/env bash
# The main job: set up (first run only) and train a 3-node label-skewed cluster on loopback Zenoh.
# Extra arguments go to `delta-fabric demo` (e.g. --frameworks torch,torch,burn, --json, --steps 600).
# A PyTorch-only run needs no Rust toolchain; a run with Burn nodes builds df-node with cargo first.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DELTA_FABRIC_VENV:-.venv}
case " $* " in
  *burn*)
    scripts/setup.sh --demo --rust
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target}
    echo "demo: building the Rust node df-node (first time takes several minutes)" >&2
    (cd interop && cargo build --locked -p df-node --bin df-node)
    export PATH="$CARGO_TARGET_DIR/debug:$PATH"
    ;;
  *) scripts/setup.sh --demo ;;
esac
exec "$VENV/bin/python" -m delta_fabric.cli demo "$@"
