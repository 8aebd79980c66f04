#!/usr/bin/env bash
# The main job: set up (first run only) and train a 3-node label-skewed cluster on loopback Zenoh.
# Extra arguments go to `delta-fabric demo` (e.g. --frameworks torch,torch,burn, --json, --steps 600).
# A PyTorch-only run needs no Rust toolchain; a run with Burn nodes builds df-node with cargo first.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DELTA_FABRIC_VENV:-.venv}
# Burn nodes are asked for only by the value of --frameworks (not by any argument that contains
# "burn", such as --output burn-out); with --burn-bin the given binary is used and nothing is built.
burn=0
bin=0
prev=
for a in "$@"; do
  case "$prev" in --frameworks) [[ ",$a," == *,burn,* ]] && burn=1 ;; esac
  case "$a" in
    --frameworks=*) [[ ",${a#--frameworks=}," == *,burn,* ]] && burn=1 ;;
    --burn-bin | --burn-bin=*) bin=1 ;;
  esac
  prev=$a
done
case "$burn$bin" in
  10)
    scripts/setup.sh --demo --rust
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target}
    echo "demo: building the Rust node df-node (first time takes several minutes)" >&2
    (cd interop && cargo build --locked -p df-node --bin df-node)
    export PATH="$CARGO_TARGET_DIR/debug:$PATH"
    ;;
  *) scripts/setup.sh --demo ;;
esac
exec "$VENV/bin/python" -m delta_fabric.cli demo "$@"
