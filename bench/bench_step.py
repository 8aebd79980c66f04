"""Per-step overhead of `Fabric` over a `TorchStore` against a re-creation of the original design's
per-step round trip, in the same run.

"original (re-created)" is NOT the original's code (it is not in this repository and is not run): it is
`original_round_trip` below, written here after the original's per-step behaviour (O(N) copies of the
whole model on every step, spec/protocol.md Section 14 defect 8: ``state_dict`` -> NumPy flat -> copy
into a NumPy buffer that stands for its native ``Vec<f32>`` -> ``load_state_dict``), without its FFI
crossing or its Rust-side work.

1. Idle step (no sync, no traffic) as N grows: ``Fabric.step()`` vs the original per-step round trip
   ``state_dict -> NumPy -> (copy into the native buffer) -> load_state_dict``.
2. Applying k incoming entries (one packet from a peer per step) for several k at a fixed N: a
   constant per packet (decode, checks, relay encode) plus O(k), nothing O(N); compared with the
   original's per-step round trip at the same N.
3. A sync step (gather + top-k generation + pack) for reference.

Usage: ``python bench/bench_step.py [--sizes 1e5,1e6,1e7] [--apply-n 1e6] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.fabric import Fabric
from delta_fabric.stores.torch import TorchStore
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import Entry
from torch import nn

NEVER = 1 << 40  # sync_interval that never comes


def make_module(n: int) -> nn.Module:
    """A module with ~n parameters in a few tensors of mixed shapes (like a small MLP)."""
    m = nn.Module()
    rest = n
    shapes: list[tuple[int, ...]] = []
    width = max(1, int((n // 4) ** 0.5))
    for _ in range(3):
        rows = max(1, min(rest // width, width))
        shapes.append((rows, width))
        rest -= rows * width
    if rest > 0:
        shapes.append((rest,))
    for i, s in enumerate(shapes):
        m.register_parameter(f"p{i}", nn.Parameter(torch.randn(*s) * 0.01))
    return m


def timeit(fn: Callable[[], Any], *, min_time: float = 0.3, max_reps: int = 20000) -> float:
    """Median seconds per call over repeated batches."""
    fn()  # warm-up
    samples: list[float] = []
    start = time.perf_counter()
    reps = 0
    while (time.perf_counter() - start < min_time or len(samples) < 5) and reps < max_reps:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        reps += 1
    return statistics.median(samples)


def original_round_trip(module: nn.Module) -> Callable[[], None]:
    """A re-creation (not the original's code) of what the original did every step: state_dict ->
    NumPy flat -> native Vec (here a NumPy buffer) -> load_state_dict."""
    native = np.empty(sum(p.numel() for p in module.parameters()), dtype=np.float32)

    def step() -> None:
        sd = module.state_dict()
        flat = np.concatenate([t.detach().cpu().numpy().reshape(-1) for t in sd.values()])
        native[:] = flat  # into the Rust Vec<f32>
        out = {}
        off = 0
        for k, t in sd.items():
            n = t.numel()
            out[k] = torch.from_numpy(native[off : off + n].copy()).view(t.shape)
            off += n
        module.load_state_dict(out)

    return step


def fmt(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:8.1f} us"
    return f"{s * 1e3:8.2f} ms"


def bench_idle(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    print(
        "1) idle step (no sync, no traffic) vs the original's per-step state_dict round trip, "
        "re-created here (original_round_trip: not the original's code)"
    )
    print(f"{'N':>12} {'Fabric.step':>12} {'orig (re-created)':>18} {'ratio':>10}")
    for n in sizes:
        module = make_module(n)
        hub = MemoryHub()
        fab = Fabric.v1_0(
            TorchStore(module), hub.transport(1), SyncConfig.v1_0(sync_interval=NEVER), node_id=1
        )
        hub.transport(2)
        t_fab = timeit(fab.step)
        t_orig = timeit(original_round_trip(module), min_time=0.5, max_reps=50)
        rows.append({"N": fab.num_params, "fabric_s": t_fab, "original_recreated_s": t_orig})
        print(f"{fab.num_params:>12,} {fmt(t_fab):>12} {fmt(t_orig):>18} {t_orig / t_fab:>9.0f}x")
        del fab, module
    return rows


def bench_apply(n: int, ks: list[int]) -> list[dict[str, Any]]:
    print(f"\n2) apply k incoming entries at N = {n:,} (drain + receive + in-place apply + relay)")
    module = make_module(n)
    hub = MemoryHub()
    fab = Fabric.v1_0(
        TorchStore(module), hub.transport(1), SyncConfig.v1_0(sync_interval=NEVER), node_id=1
    )
    peer = hub.transport(2)
    n = fab.num_params
    t_orig = timeit(original_round_trip(module), min_time=0.5, max_reps=50)
    t_gather = timeit(fab.store.gather, min_time=0.3, max_reps=50)
    print(
        f"   original per-step round trip (re-created) at this N: {fmt(t_orig)}; "
        f"one gather: {fmt(t_gather)}"
    )
    print(f"{'k':>10} {'step':>12} {'marginal/entry':>15} {'vs orig (re-created)':>21}")
    rng = np.random.default_rng(0)
    sender = Engine(fab.manifest, SyncConfig.v1_0(), node_id=2, incarnation=1)

    def packet(k: int) -> bytes:
        e = Entry(
            origin=2,
            incarnation=1,
            seq=sender.next_seq,
            hops=0,
            indices=np.sort(rng.choice(n, size=k, replace=False)).astype(np.uint32),
            values=(rng.standard_normal(k) * 1e-3).astype(np.float32),
        )
        sender.next_seq += 1
        return sender.pack([e], [])[0]

    rows: list[dict[str, Any]] = []
    for k in ks:
        packets = [packet(k) for _ in range(12)]
        samples = []
        for pkt in packets:
            peer.publish(pkt)
            t0 = time.perf_counter()
            fab.step()
            samples.append(time.perf_counter() - t0)
        t = statistics.median(samples[1:])
        marginal = (t - rows[0]["step_s"]) / (k - rows[0]["k"]) if rows else float("nan")
        rows.append(
            {"k": k, "step_s": t, "marginal_per_entry_s": marginal, "original_recreated_s": t_orig}
        )
        m = f"{marginal * 1e9:>12.1f} ns" if rows[1:] else f"{'-':>15}"
        print(f"{k:>10,} {fmt(t):>12} {m} {t_orig / t:>11.1f}x")
    assert fab.stats()["receive"]["packets_rejected"] == 0
    assert fab.stats()["receive"]["entries_accepted"] == 12 * len(ks)
    return rows


def bench_sync(n: int) -> dict[str, Any]:
    module = make_module(n)
    hub = MemoryHub()
    fab = Fabric.v1_0(
        TorchStore(module), hub.transport(1), SyncConfig.v1_0(sync_interval=1), node_id=1
    )
    hub.transport(2)
    gen = torch.Generator().manual_seed(0)
    params = list(module.parameters())

    def step() -> None:
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn(p.shape, generator=gen), alpha=1e-3)
        fab.step()

    t = timeit(step, min_time=0.5, max_reps=30)
    print(f"\n3) sync step at N = {fab.num_params:,} (perturb + gather + top-5% + pack): {fmt(t)}")
    return {"N": fab.num_params, "sync_step_s": t}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1e5,1e6,1e7")
    p.add_argument("--apply-n", default="1e6")
    p.add_argument("--ks", default="10,100,1000,10000,100000")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    ks = [int(float(k)) for k in args.ks.split(",")]
    apply_n = int(float(args.apply_n))
    result = {
        "idle": bench_idle(sizes),
        "apply": bench_apply(apply_n, [k for k in ks if k <= apply_n]),
        "sync": bench_sync(apply_n),
    }
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
