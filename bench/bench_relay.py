#!/usr/bin/env python3
"""Duplicate arrivals per accepted entry, relay policy ALL (1.0) against NEEDED (1.1, spec 8.6).

Usage: .venv/bin/python bench/bench_relay.py [--rounds R] [--nodes 3,5,8] [--params N]

A lock-step simulation of sans-IO engines (`delta_fabric.engine.Engine`) behind a topology-aware
router: in every round each node receives the packets its in-neighbours published in the previous
round (one receive step), then generates (own entry, hops 0) and publishes its own and relay entries.
Topologies: ``mesh`` (everyone hears everyone), ``ring`` (each node hears both neighbours) and
``line`` (a path: the two ends have one neighbour each). Both policies run on the same deltas.

Reported per topology, size and policy: the duplicate-arrival ratio (entries dropped as ``own_origin``
or ``duplicate``, over accepted entries, all nodes together), the same ratio over the last half of the
rounds (steady state, after the advertisements are known), relay entries sent per own entry, packet
bytes sent per own entry, and whether every node accepted every entry of every other node. The run
fails (exit 1) if an entry did not reach every node. A last line gives the per-node cost of
``Engine.receive`` + ``Engine.pack`` per sync round in a mesh of 3 with the demo CNN's size, ALL against
NEEDED, measured interleaved in the same run (NEEDED drops the relay re-encoding). Prints only; asserts
no timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np
from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest

TOPOLOGIES = ("mesh", "ring", "line")


def in_neighbours(topology: str, n: int) -> list[set[int]]:
    """For each node index, the indices whose packets it hears."""
    if topology == "mesh":
        return [set(range(n)) - {i} for i in range(n)]
    if topology == "ring":
        return [{(i - 1) % n, (i + 1) % n} - {i} for i in range(n)]
    if topology == "line":
        return [{j for j in (i - 1, i + 1) if 0 <= j < n} for i in range(n)]
    raise ValueError(topology)


@dataclass
class Outcome:
    ratio: float
    ratio_steady: float
    relays_per_own: float
    bytes_per_own: float
    delivered: bool


def simulate(topology: str, n: int, policy: RelayPolicy, rounds: int, params: int) -> Outcome:
    manifest = Manifest.from_named_shapes({"w": (params,)})
    cfg = SyncConfig.v1_0(ratio=0.01, relay_policy=policy, hop_limit=max(16, n))
    ids = [0x100 + i for i in range(n)]
    engines = [Engine(manifest, cfg, ids[i], 1) for i in range(n)]
    hears = in_neighbours(topology, n)
    rng = np.random.default_rng(7)
    actives = [np.zeros(params, dtype=np.float32) for _ in range(n)]
    # DF-RLY-63: a NEEDED node publishes an empty advertisement when it starts
    outboxes: list[list[bytes]] = [
        [a] if (a := eng.advertisement()) is not None else [] for eng in engines
    ]
    generated: set[tuple[int, int]] = set()  # (origin, seq)
    received: list[set[tuple[int, int]]] = [set() for _ in range(n)]
    own = relays = sent_bytes = 0
    half_drops = half_accepted = 0
    for r in range(rounds):
        inboxes = [[p for j in sorted(hears[i]) for p in outboxes[j]] for i in range(n)]
        new_out: list[list[bytes]] = []
        for i, eng in enumerate(engines):
            before = eng.counters.copy()
            res = eng.receive(inboxes[i])
            res.apply_to(actives[i])
            for a in res.accepted:
                received[i].add((a.origin, a.seq))
            actives[i] += rng.standard_normal(params).astype(np.float32) * np.float32(1e-2)
            mine = eng.generate(actives[i])
            for e in mine:
                generated.add((e.origin, e.seq))
            own += len(mine)
            relays += len(res.relay)
            out = eng.pack(mine, res.relay)
            if not out and (adv := eng.advertisement()) is not None:
                out = [adv]  # DF-RLY-63: at least one packet per sync round
            sent_bytes += sum(len(p) for p in out)
            new_out.append(out)
            if r >= rounds // 2:
                c = eng.counters
                half_drops += sum(c.drops.values()) - sum(before.drops.values())
                half_accepted += c.entries_accepted - before.entries_accepted
        outboxes = new_out
    # drain: let the last entries travel (no new entries) until nothing is left in flight
    for _ in range(n + 2):
        inboxes = [[p for j in sorted(hears[i]) for p in outboxes[j]] for i in range(n)]
        new_out = []
        for i, eng in enumerate(engines):
            res = eng.receive(inboxes[i])
            for a in res.accepted:
                received[i].add((a.origin, a.seq))
            relays += len(res.relay)
            out = eng.pack([], res.relay)
            sent_bytes += sum(len(p) for p in out)
            new_out.append(out)
        outboxes = new_out
    drops = sum(sum(e.counters.drops.values()) for e in engines)
    accepted = sum(e.counters.entries_accepted for e in engines)
    delivered = all(received[i] == {g for g in generated if g[0] != ids[i]} for i in range(n))
    return Outcome(
        drops / max(accepted, 1),
        half_drops / max(half_accepted, 1),
        relays / max(own, 1),
        sent_bytes / max(own, 1),
        delivered,
    )


def receive_cost(n: int, rounds: int, params: int, ratio: float) -> tuple[float, float]:
    """Median seconds of ``Engine.receive`` + ``Engine.pack`` per node and round in a full mesh, ALL
    and NEEDED, measured round by round interleaved (same deltas, same machine state); the median
    over rounds resists the load of a shared machine."""
    manifest = Manifest.from_named_shapes({"w": (params,)})
    ids = [0x100 + i for i in range(n)]
    sims = {}
    for pol in (RelayPolicy.ALL, RelayPolicy.NEEDED):
        cfg = SyncConfig.v1_0(ratio=ratio, relay_policy=pol)
        engines = [Engine(manifest, cfg, ids[i], 1) for i in range(n)]
        out = [[a] if (a := e.advertisement()) is not None else [] for e in engines]
        sims[pol] = (engines, [np.zeros(params, dtype=np.float32) for _ in range(n)], out)
    spent: dict[RelayPolicy, list[float]] = {pol: [] for pol in sims}
    rng = np.random.default_rng(11)
    for _ in range(rounds):
        steps = [rng.standard_normal(params).astype(np.float32) * np.float32(1e-2) for _ in ids]
        for pol, (engines, actives, out) in sims.items():
            new_out = []
            round_time = 0.0
            for i, eng in enumerate(engines):
                inbox = [p for j in range(n) if j != i for p in out[j]]
                t0 = time.perf_counter()
                res = eng.receive(inbox)
                t1 = time.perf_counter()
                res.apply_to(actives[i])
                actives[i] += steps[i]
                own = eng.generate(actives[i])
                t2 = time.perf_counter()
                pk = eng.pack(own, res.relay)
                t3 = time.perf_counter()
                round_time += (t1 - t0) + (t3 - t2)
                new_out.append(pk)
            sims[pol] = (engines, actives, new_out)
            spent[pol].append(round_time / n)
    skip = 2  # the first rounds carry no relay yet under either policy
    return (
        float(np.median(spent[RelayPolicy.ALL][skip:])),
        float(np.median(spent[RelayPolicy.NEEDED][skip:])),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--nodes", default="3,5,8", help="comma-separated cluster sizes")
    ap.add_argument("--params", type=int, default=2000, help="N of the simulated model")
    args = ap.parse_args()
    try:
        sizes = [int(x) for x in args.nodes.split(",")]
    except ValueError:
        print("bench_relay.py: --nodes must be comma-separated integers", file=sys.stderr)
        return 2
    if args.rounds < 2 or args.params < 1 or any(s < 2 for s in sizes):
        print("bench_relay.py: need --rounds >= 2, --params >= 1, sizes >= 2", file=sys.stderr)
        return 2
    print(
        f"{args.rounds} rounds, N = {args.params}, ratio 0.01 (k = {int(np.ceil(args.params * 0.01))})"
    )
    hdr = (
        "topology nodes | dup ratio ALL  NEEDED | steady ALL  NEEDED | relays/own ALL  NEEDED"
        " | bytes/own ALL  NEEDED | all delivered"
    )
    print(hdr)
    print("-" * len(hdr))
    ok = True
    for topo in TOPOLOGIES:
        for n in sizes:
            a = simulate(topo, n, RelayPolicy.ALL, args.rounds, args.params)
            b = simulate(topo, n, RelayPolicy.NEEDED, args.rounds, args.params)
            ok = ok and a.delivered and b.delivered
            print(
                f"{topo:8} {n:5} | {a.ratio:13.3f} {b.ratio:7.3f} | {a.ratio_steady:10.3f}"
                f" {b.ratio_steady:7.3f} | {a.relays_per_own:14.2f} {b.relays_per_own:7.2f}"
                f" | {a.bytes_per_own:13.0f} {b.bytes_per_own:7.0f} | {a.delivered} {b.delivered}"
            )
    if not ok:
        print("FAILED: some entry did not reach every node", file=sys.stderr)
        return 1
    # per-node receive + pack cost in a mesh of 3 (the demo CNN's N = 17290, 5 %: k = 865)
    a, b = receive_cost(3, max(12, args.rounds // 2), 17290, 0.05)
    print(
        f"mesh of 3, N = 17290, k = 865: receive + pack per node and round (median): ALL"
        f" {a * 1e3:.3f} ms, NEEDED {b * 1e3:.3f} ms (NEEDED / ALL = {b / a:.2f}; interleaved)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
