#!/usr/bin/env bash
# The main job: set up (first run only) and train a 3-node label-skewed cluster on loopback Zenoh.
# Extra arguments go to `delta-fabric demo` (e.g. --frameworks torch,torch,burn, --json, --steps 600).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target}
case " $* " in
  *burn*) (cd interop && cargo build --locked -q --bins) && export PATH="$CARGO_TARGET_DIR/debug:$PATH" ;;
esac
exec .venv/bin/delta-fabric demo "$@"
