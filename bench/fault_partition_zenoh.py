"""Full form of the partition fault over real Zenoh (issue 12 items 3 and 9): two nodes on loopback,
a user-space TCP proxy cuts their link for ``--cut-seconds`` (default 30 s, one sync round every
``--cut-seconds / --cut-rounds`` s during the cut) and restores it; with and without anti-entropy.
Writes a JSON report: spread per round, rounds from the heal to the clean level, reconnect time,
counters, peak memory, longest round. CI runs the reduced form (tests/test_repair_zenoh.py).

    nice -n 10 python bench/fault_partition_zenoh.py --out fault_partition_zenoh.json
"""

from __future__ import annotations

import argparse
import json
import sys

from delta_fabric_demo.faults import partition_scenario


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", default="fault_partition_zenoh.json")
    ap.add_argument("--cut-seconds", type=float, default=30.0)
    ap.add_argument("--cut-rounds", type=int, default=300)
    a = ap.parse_args(argv)
    report = {}
    for repair in (False, True):
        r = partition_scenario(repair=repair, cut_rounds=a.cut_rounds, cut_seconds=a.cut_seconds)
        report["repair" if repair else "no_repair"] = r.to_json()
        print(
            f"repair={repair}: spread at heal {r.spread[r.heal_round - 1]:.3g}, final "
            f"{r.spread[-1]:.3g} (clean level {r.bound:.3g}), rounds to clean {r.rounds_to_clean}, "
            f"reconnect {r.reconnect_s} s, longest round {r.longest_round_s:.2f} s, "
            f"peak RSS {r.peak_rss_mib:.0f} MiB",
            flush=True,
        )
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
