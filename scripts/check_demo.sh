#!/usr/bin/env bash
# Runs the main job with its defaults and checks the acceptance bar from its JSON summary:
# every node >= 90 % on all ten classes with sync on, near chance-per-partition with sync off,
# at least 30x fewer bytes than a dense fp32 exchange every step (payload), at least 12x on the wire
# (where ss can count it: a regression floor under the 16.1x measured on 2026-11-30, with relays on;
# issue 11's target of 100x on the wire is NOT met yet), and the plot written. The run is in lockstep rounds (delta_fabric_demo.rounds), so
# its accuracies do not depend on machine load.
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
print(f"demo: sync on {sync}, sync off {nosync}, compression {comp:.1f}x, on the wire {wire_txt}, "
      f"wall {s['wall_s']} s")
problems = []
if min(sync) < 0.90:
    problems.append(f"a node ended below 90 % with sync on: {sync}")
if nosync and max(nosync) > 0.6:
    problems.append(f"sync off should stay near one partition's share: {nosync}")
if comp is None or comp < 30:
    problems.append(f"compression {comp} < 30x")
if wire is not None and wire < 12:
    problems.append(f"wire compression {wire:.1f} < 12x (regression floor; issue 11's target is 100x)")
if not s.get("plot") or not pathlib.Path(s["plot"]).is_file():
    problems.append("plot missing")
for p in problems:
    print("demo check FAILED:", p)
print("demo check: 1 passed, 0 failed" if not problems else "demo check: 0 passed, 1 failed")
sys.exit(1 if problems else 0)
PY
