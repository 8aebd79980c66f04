"""Faults of issue 12 item 3 on the demo task, in the deterministic lockstep simulator
(`delta_fabric_demo.lockstep`): a partition that heals, and link delay with stalls, each with and
without anti-entropy (gap repair, spec section 7.9), against the clean run. Writes a JSON report.

Each configuration runs in its own process, so its peak memory (ru_maxrss) is its own. Verdicts are
in steps and sync intervals, not wall time: the simulator has no clock and its result is bit-for-bit
reproducible. Usage::

    nice -n 10 python bench/fault_repair.py --out fault_repair.json [--steps 900]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

from delta_fabric_demo.lockstep import SimConfig, run_sim


def one(cfg_json: str) -> dict[str, Any]:
    kw = json.loads(cfg_json)
    kw["cut"] = tuple(kw["cut"])
    kw["sync_extra"] = tuple(tuple(x) for x in kw["sync_extra"])
    cfg = SimConfig(**kw)
    t0 = time.perf_counter()
    res = run_sim(cfg)
    heal = cfg.cut[1]
    return {
        "config": {
            k: v
            for k, v in asdict(cfg).items()
            if k
            in (
                "steps",
                "interval",
                "cut",
                "repair",
                "delay",
                "stall_rate",
                "stall_steps",
                "nodes",
                "attack_scale",
                "influence",
                "seed",
                "include_buffers",
            )
        },
        "final": res.final,
        "final_min": res.final_min,
        "final_mean": sum(res.final) / len(res.final),
        "spread_final": res.spread_curve[-1][1],
        "spread_20_intervals_after_heal": res.spread_at(heal + 20 * cfg.interval) if heal else None,
        "spread_max": max(v for _, v in res.spread_curve),
        "repair_counters": res.repair_counters,
        "influence_clipped": res.influence_clipped,
        "min_running_var": res.min_running_var,
        "nonfinite": res.nonfinite,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", default="fault_repair.json")
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one)))
        return 0
    s = a.steps
    cut = (s // 3, 2 * s // 3)
    runs = {
        "clean": SimConfig(steps=s),
        "partition": SimConfig(steps=s, cut=cut),
        "partition+repair": SimConfig(steps=s, cut=cut, repair=True),
        "delay+stalls": SimConfig(steps=s, delay=2, stall_rate=0.1, stall_steps=20),
        "delay+stalls+repair": SimConfig(
            steps=s, delay=2, stall_rate=0.1, stall_steps=20, repair=True
        ),
    }
    report: dict[str, Any] = {}
    for name, cfg in runs.items():
        out = subprocess.run(
            [sys.executable, __file__, "--one", json.dumps(asdict(cfg))],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        report[name] = json.loads(out.strip().splitlines()[-1])
        r = report[name]
        print(
            f"{name:22s} final min {r['final_min']:.4f} mean {r['final_mean']:.4f} "
            f"spread {r['spread_final']:.3g} rss {r['peak_rss_mib']:.0f} MiB {r['wall_s']} s",
            flush=True,
        )
    clean = report["clean"]["final_mean"]
    for r in report.values():
        r["points_vs_clean"] = round(100 * (r["final_mean"] - clean), 2)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
