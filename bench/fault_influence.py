"""Bounded influence on the demo task (issue 12 item 8), in the deterministic lockstep simulator: a
member whose deltas reach the others scaled 100x, with and without the bound on every node, and the
bound's cost when nobody misbehaves, against the clean run. Each run in its own process (its own peak
memory). Writes a JSON report.

    nice -n 10 python bench/fault_influence.py --out fault_influence.json [--steps 900] [--factor 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from delta_fabric_demo.lockstep import SimConfig

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", default="fault_influence.json")
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--skip-clean", action="store_true", help="reuse no clean run (report only)")
    a = ap.parse_args(argv)
    s = a.steps
    runs = {
        "clean": SimConfig(steps=s),
        "clean+bound": SimConfig(steps=s, influence=a.factor),
        "attack100": SimConfig(steps=s, attack_scale=100.0),
        "attack100+bound": SimConfig(steps=s, attack_scale=100.0, influence=a.factor),
    }
    if a.skip_clean:
        del runs["clean"]
    report: dict[str, Any] = {}
    for name, cfg in runs.items():
        out = subprocess.run(
            [sys.executable, str(HERE / "fault_repair.py"), "--one", json.dumps(asdict(cfg))],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        report[name] = r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{name:16s} final {r['final']} mean {r['final_mean']:.4f} "
            f"clipped {r.get('influence_clipped')} rss {r['peak_rss_mib']:.0f} MiB {r['wall_s']} s",
            flush=True,
        )
    if "clean" in report:
        clean = report["clean"]["final"]
        for r in report.values():
            # the others' cost: node 0 is the misbehaving member
            r["others_points_vs_clean"] = [
                round(100 * (x - c), 2) for x, c in zip(r["final"][1:], clean[1:], strict=True)
            ]
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
