#!/usr/bin/env bash
# Runs the main job with its defaults and checks the acceptance bar from its JSON summary:
# every node >= 95 % on all ten classes with sync on (its working weights), every node's shared model
# (the anchor) >= 95 %, near chance-per-partition with sync off, and regression floors on the bytes:
# >= 178x fewer wire bytes than dense fp32 every step and >= 360x fewer payload bytes (measured on
# 2026-11-30 with the defaults, Q8 values and PACKED indices, 10 % every 20 steps, every node holding
# its residual aside (DF-GEN-240): 0.983 shared on every node, 0.983-0.986 working weights, 181.4x on
# the wire, 367.5x payload; the simulator's 181.6x for the same seed, and in seeds 0..9 every shared
# model and every node's working weights >= 0.981: bench/sweep_converge.py cells). Issue 11's 3-node bar is 100x. The run is in lockstep
# rounds (delta_fabric_demo.rounds), so its accuracies and payload bytes do not depend on machine
# load; the wire count also holds Zenoh's keep-alives, a fraction of a percent.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-demo-out}
.venv/bin/delta-fabric demo --output "$out" "${@:2}"
.venv/bin/python - "$out/summary.json" <<'PY'
import json, sys, pathlib
s = json.load(open(sys.argv[1]))
runs = s["runs"]
sync = [n["accuracy"] for n in runs["sync"]["nodes"]]
nosync = [n["accuracy"] for n in runs.get("nosync", {"nodes": []})["nodes"]]
comp = s["bytes"]["compression"]
wire = s["bytes"].get("wire_compression")
wire_txt = f"{wire:.1f}x" if wire else "not measured (no ss)"
shared = [n.get("shared_accuracy") for n in runs["sync"]["nodes"]]
shared_known = [a for a in shared if a is not None]  # a Burn node does not report its shared model
print(f"demo: sync on {sync}, shared model {shared}, sync off {nosync}, compression {comp:.1f}x, "
      f"on the wire {wire_txt}, "
      f"wall {s['wall_s']} s")
problems = []
if min(sync) < 0.95:
    problems.append(f"a node ended below 95 % with sync on: {sync}")
if nosync and max(nosync) > 0.6:
    problems.append(f"sync off should stay near one partition's share: {nosync}")
if shared_known and min(shared_known) < 0.95:
    problems.append(f"a node's shared model ended below 95 %: {shared}")
if comp is None or comp < 360:
    problems.append(f"compression {comp} < 360x (regression floor under the 367.4x measured)")
if wire is not None and wire < 178:
    problems.append(f"wire compression {wire:.1f} < 178x (regression floor under the 181.4x measured)")
if not s.get("plot") or not pathlib.Path(s["plot"]).is_file():
    problems.append("plot missing")
for p in problems:
    print("demo check FAILED:", p)
print("demo check: 1 passed, 0 failed" if not problems else "demo check: 0 passed, 1 failed")
sys.exit(1 if problems else 0)
PY
