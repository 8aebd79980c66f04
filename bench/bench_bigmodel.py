#!/usr/bin/env python3
"""A bigger model (issue 11, item 5): 3 PyTorch nodes train a 1-10 M parameter MLP on the bundled
digits with the demo's sync settings, and the time spent in DeltaFabric is compared with the time spent
training, in the same run.

Model: ``Linear(64, W) -> ReLU -> Linear(W, W) -> ReLU -> Linear(W, 10)``; ``--width 1536`` gives
2,476,042 parameters. Data: the demo's label-skewed split of sklearn's digits (0-3 / 4-6 / 7-9).
Sync settings default to the demo's (``DEMO_DEFAULTS`` of ``delta_fabric_demo.lockstep``): ratio 0.10,
sync_interval 20, Q8 values with PACKED indices, relay policy NEEDED, alpha 1, averaging over the 3
nodes (DF-GEN-70) with SGD lr 0.05 (the demo's rule: 0.05 / 3 when summed, ``--average-over 1``),
momentum 0.9, batch 32 (``--batch``: the sync cost is per step, the training cost grows with
the batch). ``--ratio``, ``--interval``, ``--encoding``, ``--index-encoding``,
``--relay``, ``--average-over`` override them (the figures of closing-note-2 were taken with
``--ratio 0.05 --interval 10 --encoding F32 --index-encoding PLAIN --relay all``).

The nodes run in one process, one thread, in lockstep: at every step each node trains one batch, then
calls ``Fabric.step()``. Transport: ``--transport zenoh`` (default) opens one Zenoh session per node
over tcp/127.0.0.1 (scouting off, shared memory off) in a full mesh; before a node's step, the bench
waits until that node's transport has received every packet its peers published (a delivery barrier,
so that the run is the same as in memory; the wait is reported apart and is not counted as sync time).
``--transport memory`` uses `MemoryHub` (no network at all).

Reported:
- ``sync / train``: the time in ``Fabric.step()`` (drain, decode and checks, apply to the model,
  generation, encoding, publish) over the time in the training step (forward, backward, optimizer
  step), both summed over the run and the nodes; issue 11's target is sync time <= 10 % of step
  time;
- ``sync / step``: the same time over the training step plus it (the share of a node's step spent in
  DeltaFabric, the other reading of that target);
- the split of the sync time: ``receive`` (``Engine.receive``), ``generate``, ``pack`` (encoding), the
  rest (gathers and applies on the PyTorch tensors, publish, bookkeeping);
- per packet: receive and encode time, and the packet size; bytes per node per sync (``Fabric``'s
  bytes sent, own and relayed, divided by its syncs) against dense fp32 every sync;
- the test accuracy of every node at the end (a sanity check, not a claim: the run is short).

Times are the main thread's CPU time by default (``--clock cpu``): on a machine shared with other
jobs, wall time mostly measures the scheduler. Zenoh's own I/O threads are then not counted in the
sync time (``--clock wall`` counts what the main thread waits for).

The optional native kernels (``python/native``) are used when installed; ``DELTA_FABRIC_NATIVE=off``
measures the NumPy core alone (the header line says which ran).

Prints only; asserts nothing about timings. Usage:
``python bench/bench_bigmodel.py [--width 1536] [--steps 200] [--transport zenoh|memory] [--json F]
[--ratio R] [--interval K] [--encoding F32|F16|Q8] [--index-encoding PLAIN|PACKED] [--relay all|needed]
[--average-over C]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from delta_fabric.compact import IndexEncoding
from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.encodings import codec
from delta_fabric.fabric import Fabric
from delta_fabric.ports import free_ports
from delta_fabric.stores.torch import TorchStore
from delta_fabric_demo.data import load_split, partition
from delta_fabric_demo.lockstep import DEMO_DEFAULTS
from torch import nn

NODES = 3
BASE_LR = 0.05


def make_model(width: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, 10),
    )  # fmt: skip


class Timed:
    """Wraps a bound method and sums its time (``clock``) and calls."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.seconds = 0.0
        self.calls = 0
        self.clock: Callable[[], float] = time.perf_counter

    def __call__(self, *a: Any, **kw: Any) -> Any:
        t0 = self.clock()
        try:
            return self.fn(*a, **kw)
        finally:
            self.seconds += self.clock() - t0
            self.calls += 1


def transports(kind: str) -> tuple[list[Any], Callable[[], None]]:
    if kind == "memory":
        from delta_fabric.transports.memory import MemoryHub

        hub = MemoryHub()
        ts = [hub.transport(i + 1) for i in range(NODES)]
        return ts, lambda: None
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    ports = free_ports(NODES)
    ns = f"bench/bigmodel/{ports[0]}"
    ts = []
    for i in range(NODES):
        opts = ZenohOptions(
            node_id=i + 1,
            namespace=ns,
            listen=[f"tcp/127.0.0.1:{ports[i]}"],
            connect=[f"tcp/127.0.0.1:{p}" for p in ports[:i]],
            extra_config=[("transport/shared_memory/enabled", "false")],
        )
        ts.append(ZenohTransport(opts))
    for t in ts:
        t.wait_for_peers(NODES - 1, 20.0)

    def close() -> None:
        for t in ts:
            t.close()

    return ts, close


def barrier(ts: list[Any], i: int, timeout: float) -> float:
    """Wait until transport ``i`` received every packet the others published; returns the wait."""
    if not hasattr(ts[i], "stats"):
        return 0.0
    t0 = time.perf_counter()
    deadline = t0 + timeout
    want = sum(t.stats.published_packets for j, t in enumerate(ts) if j != i)
    while ts[i].stats.received_packets < want:
        if time.perf_counter() > deadline:
            raise SystemExit(f"node {i + 1}: packets not delivered within {timeout} s")
        time.sleep(0.0005)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--width", type=int, default=1536, help="hidden width W (1536: 2.48 M params)")
    ap.add_argument("--steps", type=int, default=200, help="local steps per node")
    ap.add_argument("--transport", choices=("zenoh", "memory"), default="zenoh")
    ap.add_argument("--ratio", type=float, default=DEMO_DEFAULTS["ratio"], help="%(default)s")
    ap.add_argument(
        "--interval", type=int, default=DEMO_DEFAULTS["interval"], help="sync_interval, %(default)s"
    )
    ap.add_argument(
        "--encoding", choices=("F32", "F16", "Q8"), default=DEMO_DEFAULTS["encoding"],
        help="value encoding, %(default)s",
    )  # fmt: skip
    ap.add_argument(
        "--index-encoding", choices=("PLAIN", "PACKED"), default=DEMO_DEFAULTS["index_encoding"],
        help="%(default)s",
    )  # fmt: skip
    ap.add_argument(
        "--relay", choices=("all", "needed"), default=DEMO_DEFAULTS["relay_policy"].lower(),
        help="relay policy, %(default)s",
    )  # fmt: skip
    ap.add_argument(
        "--average-over", type=int, default=NODES,
        help="SyncConfig.average_over (1: summed, lr 0.05 / 3), %(default)s",
    )  # fmt: skip
    ap.add_argument("--batch", type=int, default=32, help="samples per local step, %(default)s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: the main thread's CPU time (not inflated by other jobs on the machine; Zenoh's "
        "own threads are not counted); wall: wall time",
    )
    args = ap.parse_args()
    if args.width < 1 or args.steps < 1 or args.batch < 1:
        print("bench_bigmodel: --width, --steps and --batch must be >= 1", file=sys.stderr)
        return 2
    try:
        cfg = SyncConfig.v1_0(
            ratio=args.ratio,
            sync_interval=args.interval,
            alpha=1.0,
            average_over=args.average_over,
            relay_policy=RelayPolicy.parse(args.relay),
            encoding=codec(args.encoding).encoding,
            index_encoding=IndexEncoding.parse(args.index_encoding),
        )
    except (TypeError, ValueError) as exc:
        print(f"bench_bigmodel: {exc}", file=sys.stderr)
        return 2
    lr = BASE_LR if args.average_over > 1 else BASE_LR / NODES
    torch.set_num_threads(1)
    digits = load_split(args.seed)
    parts = partition(digits.train, NODES, "skewed", args.seed)
    ts, close = transports(args.transport)
    models = [make_model(args.width, args.seed) for _ in range(NODES)]
    params = sum(p.numel() for p in models[0].parameters())
    fabrics = [
        Fabric.v1_0(TorchStore(m, False), t, cfg, node_id=i + 1)
        for i, (m, t) in enumerate(zip(models, ts, strict=True))
    ]
    timers: dict[str, list[Timed]] = {"receive": [], "generate": [], "pack": []}
    for f in fabrics:
        for name in timers:
            t = Timed(getattr(f.engine, name))
            setattr(f.engine, name, t)
            timers[name].append(t)
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9) for m in models]
    rngs = [np.random.default_rng(args.seed * 100 + i) for i in range(NODES)]
    xs = [torch.from_numpy(p.x) for p in parts]
    ys = [torch.from_numpy(p.y.astype(np.int64)) for p in parts]
    loss_fn = nn.CrossEntropyLoss()
    train_s = sync_s = wait_s = 0.0
    sync_step_s: list[float] = []
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    for ts_ in timers.values():
        for t in ts_:
            t.clock = clock
    try:
        for step in range(1, args.steps + 1):
            for i in range(NODES):
                wait_s += barrier(ts, i, 30.0)
                b = torch.from_numpy(rngs[i].integers(0, ys[i].numel(), size=args.batch))
                t0 = clock()
                opts[i].zero_grad()
                loss_fn(models[i](xs[i][b]), ys[i][b]).backward()
                opts[i].step()
                t1 = clock()
                fabrics[i].step()
                t2 = clock()
                train_s += t1 - t0
                sync_s += t2 - t1
                if step % cfg.sync_interval == 0:
                    sync_step_s.append(t2 - t1)
        for i in range(NODES):  # the last relays
            wait_s += barrier(ts, i, 30.0)
            fabrics[i].poll()
        accepted = [f.accepted_by_origin() for f in fabrics]
        with torch.no_grad():
            xt, yt = (
                torch.from_numpy(digits.test.x),
                torch.from_numpy(digits.test.y.astype(np.int64)),
            )
            acc = [float((m(xt).argmax(1) == yt).float().mean()) for m in models]
        syncs = [f.syncs for f in fabrics]
        sent = [f.bytes_sent for f in fabrics]
        pkts_rx = sum(f.engine.counters.packets_received for f in fabrics)
        pkts_tx = sum(f.packets_sent for f in fabrics)
    finally:
        for f in fabrics:
            f.close(close_transport=False)
        close()
    rx = sum(t.seconds for t in timers["receive"])
    gen = sum(t.seconds for t in timers["generate"])
    pack = sum(t.seconds for t in timers["pack"])
    dense = 4 * params
    nat = fabrics[0].engine.native
    simd = str(getattr(nat, "SIMD", "?")) if nat is not None else ""
    per_sync = [s / max(n, 1) for s, n in zip(sent, syncs, strict=True)]
    out = {
        "params": params,
        "width": args.width,
        "steps": args.steps,
        "transport": args.transport,
        "clock": args.clock,
        "relay": args.relay,
        "ratio": args.ratio,
        "interval": args.interval,
        "encoding": args.encoding,
        "index_encoding": args.index_encoding,
        "average_over": args.average_over,
        "batch": args.batch,
        "native": fabrics[0].engine.native is not None,
        "native_simd": simd,
        "train_s": train_s,
        "sync_s": sync_s,
        "sync_over_train": sync_s / train_s,
        "sync_over_step": sync_s / (train_s + sync_s),
        "receive_s": rx,
        "generate_s": gen,
        "pack_s": pack,
        "other_s": sync_s - rx - gen - pack,
        "delivery_wait_s": wait_s,
        "train_ms_per_step": 1e3 * train_s / (args.steps * NODES),
        "sync_ms_per_sync_step": 1e3 * float(np.median(sync_step_s)) if sync_step_s else 0.0,
        "packets_received": pkts_rx,
        "packets_sent": pkts_tx,
        "receive_ms_per_packet": 1e3 * rx / max(pkts_rx, 1),
        "pack_ms_per_packet": 1e3 * pack / max(pkts_tx, 1),
        "bytes_per_packet": sum(sent) / max(pkts_tx, 1),
        "bytes_per_node_per_sync": per_sync,
        "dense_fp32_bytes": dense,
        "accepted_by_origin": [{f"{k:x}": v for k, v in a.items()} for a in accepted],
        "accuracy": acc,
    }
    print(
        f"{NODES} nodes, MLP width {args.width}: {params:,} params, {args.steps} steps, batch {args.batch}, "
        f"transport {args.transport}, relay {args.relay}, torch threads 1, clock {args.clock}; "
        f"ratio {args.ratio}, every {args.interval}, {args.encoding}+{args.index_encoding}, "
        f"average_over {args.average_over}; native kernels "
        f"{'on, built for ' + simd if simd else 'off'} (DELTA_FABRIC_NATIVE)"
    )
    print(
        f"sync / train: {100 * sync_s / train_s:.1f} %  (train {out['train_ms_per_step']:.2f} "
        f"ms/step; Fabric.step {1e3 * sync_s / (args.steps * NODES):.2f} ms/step on average, "
        f"{out['sync_ms_per_sync_step']:.1f} ms median on a sync step)"
    )
    print(
        f"sync / step (train + sync): {100 * out['sync_over_step']:.1f} %  (the same times: the "
        "share of a node's step spent in DeltaFabric)"
    )
    print(
        f"sync time split: receive {100 * rx / sync_s:.0f} %, generate {100 * gen / sync_s:.0f} %, "
        f"pack {100 * pack / sync_s:.0f} %, other (tensor gather/apply, publish) "
        f"{100 * out['other_s'] / sync_s:.0f} %; delivery wait (not counted) {wait_s:.2f} s"
    )
    print(
        f"per packet: receive {out['receive_ms_per_packet']:.2f} ms, encode "
        f"{out['pack_ms_per_packet']:.2f} ms, {out['bytes_per_packet']:,.0f} bytes; bytes per node "
        f"per sync {np.mean(per_sync):,.0f} (dense fp32: {dense:,}, {dense / np.mean(per_sync):.1f}x)"
    )
    print(f"accepted entries by origin: {out['accepted_by_origin']}")
    print(f"test accuracy at the end: {[round(a, 3) for a in acc]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
