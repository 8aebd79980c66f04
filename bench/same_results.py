#!/usr/bin/env python3
"""Digest of everything the Python receive and generate paths produce on a deterministic random
scenario, to show that a change to them keeps behaviour bit for bit (issue 11, item 5).

Run it once with the old code and once with the new, on the same seed, and compare the files:

    PYTHONPATH=OLD/python/src python bench/same_results.py --seed 0 --cases 60 --out old.txt
    PYTHONPATH=python/src     python bench/same_results.py --seed 0 --cases 60 --out new.txt
    cmp old.txt new.txt

Each case draws a manifest (1-4 tensors), a config (alpha, ratio, F32/F16/BF16/Q8, PLAIN/PACKED,
relay ALL/NEEDED, average_over 1 or 3, packet size limits that split entries, relay threshold) and
2-4 nodes. Every step, each node's active weights move (sometimes by 1e30, a NaN or 3e38, so that
DF-RCV-50 and DF-GEN-9 refuse), it receives its queue (sometimes with a duplicate and a corrupted
packet, shuffled), applies the aggregate, generates at random steps and packs. Node 0 keeps its
weights in a ``TorchStore`` in half of the cases (its ``gather`` as the receive's active view; its
``gather_parts``, when it has one, for the generation). A line per receive and per generation holds a
digest of the result: indices and values, outcomes, admissions, accepted headers, relay entries, the
packets' bytes, the anchor, the active weights and the counters. ``--big`` adds the bench_bigmodel
scale (2,476,042 values, Q8 + PACKED, NEEDED, 10 %): one- and two-packet receive steps through a
``TorchStore`` and the generation from its parts. Prints the number of steps and the outcomes seen.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

import numpy as np
import torch
from delta_fabric.compact import IndexEncoding
from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.encodings import ValueEncoding
from delta_fabric.engine import Engine, ReceiveResult
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.stores.torch import TorchStore
from torch import nn


class Digest:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.total = hashlib.sha256()
        self.stat = {
            "receives": 0,
            "multi_packet": 0,
            "accepted": 0,
            "rejected": 0,
            "non_finite": 0,
        }

    def feed(self, tag: str, *objs: Any) -> None:
        h = hashlib.sha256()
        for o in objs:
            if isinstance(o, np.ndarray):
                h.update(str(o.dtype).encode())
                h.update(np.ascontiguousarray(o).tobytes())
            elif isinstance(o, (bytes, bytearray)):
                h.update(bytes(o))
            else:
                h.update(repr(o).encode())
        d = h.hexdigest()[:16]
        self.total.update(d.encode())
        self.lines.append(f"{tag} {d}")

    def result(self, tag: str, res: ReceiveResult) -> None:
        acc = sum(1 for o in res.outcomes if o is None)
        s = self.stat
        s["receives"] += 1
        s["multi_packet"] += acc > 1
        s["accepted"] += acc
        s["rejected"] += len(res.rejected)
        s["non_finite"] += sum(1 for _, c in res.rejected if c.name == "NON_FINITE_RESULT")
        self.feed(
            tag,
            res.indices,
            res.values,
            [None if o is None else o.name for o in res.outcomes],
            [[v.name for v in o] for o in res.entry_outcomes],
            [(i, c.name) for i, c in res.rejected],
            [repr(a) for a in res.accepted],
            [
                (e.origin, e.incarnation, e.seq, e.hops, e.indices, np.asarray(e.values))
                for e in res.relay
            ],
        )


def module_of(man: Manifest, flat: np.ndarray) -> nn.Module:
    m = nn.Module()
    for name, arr in man.split(flat.copy()).items():
        m.register_parameter(name, nn.Parameter(torch.from_numpy(arr.copy())))
    return m


def case(dg: Digest, seed: int, c: int) -> None:
    rng = np.random.default_rng(seed * 100_003 + c)
    shapes = [
        tuple(int(x) for x in rng.integers(1, 40, size=int(rng.integers(1, 3))))
        for _ in range(int(rng.integers(1, 5)))
    ]
    man = Manifest(TensorSpec(f"t{i}", sh) for i, sh in enumerate(shapes))
    n = man.num_params
    cfg = SyncConfig.v1_0(
        alpha=float(rng.choice([1.0, 0.5, 0.3])),
        ratio=float(rng.choice([0.05, 0.3, 1.0])),
        encoding=list(ValueEncoding)[int(rng.integers(0, 4))],
        index_encoding=[IndexEncoding.PLAIN, IndexEncoding.PACKED][int(rng.integers(0, 2))],
        relay_policy=[RelayPolicy.ALL, RelayPolicy.NEEDED][int(rng.integers(0, 2))],
        average_over=int(rng.choice([1, 3])),
        max_packet_size=int(rng.choice([16_777_216, 400, 1200])),
        relay_threshold=float(rng.choice([1e-6, 0.05])),
    )
    nodes = int(rng.integers(2, 5))
    init = rng.standard_normal(n).astype(np.float32)
    engs = [Engine(man, cfg, i + 1, 1, init) for i in range(nodes)]
    acts = [init.copy() for _ in range(nodes)]
    store = TorchStore(module_of(man, init)) if rng.integers(0, 2) else None
    queue: list[list[bytes]] = [[] for _ in range(nodes)]
    for step in range(int(rng.integers(3, 12))):
        for i in range(nodes):  # local training
            delta = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e30])).astype(np.float32)
            r = rng.random()
            if r < 0.05:
                delta[int(rng.integers(0, n))] = np.nan
            elif r < 0.08:
                delta[int(rng.integers(0, n))] = np.float32(3e38)
            mask = rng.random(n) < rng.choice([0.1, 0.5, 1.0])
            with np.errstate(over="ignore", invalid="ignore"):
                acts[i][mask] = acts[i][mask] + delta[mask]
        for i in range(nodes):
            pk, queue[i] = queue[i], []
            if pk and rng.random() < 0.2:
                pk = [*pk, pk[int(rng.integers(0, len(pk)))]]
            if pk and rng.random() < 0.1:
                b = bytearray(pk[0])
                b[int(rng.integers(0, len(b)))] ^= 0xFF
                pk = [bytes(b), *pk]
            rng.shuffle(pk)  # type: ignore[arg-type]
            tag = f"c{c} s{step} n{i}"
            if i == 0 and store is not None:
                store.load(acts[0])
                res = engs[0].receive(pk, active=store.gather)
                if res.indices.size:
                    store.apply(res.indices, res.values)
                acts[0] = store.gather()
            else:
                res = engs[i].receive(pk, active=acts[i])
                res.apply_to(acts[i])
            dg.result(tag + " rx", res)
            own = []
            if rng.random() < 0.6:
                try:
                    if i == 0 and store is not None and hasattr(store, "gather_parts"):
                        store.load(acts[0])
                        own = engs[i].generate(store.gather_parts())
                    else:
                        own = engs[i].generate(acts[i])
                except ValueError as exc:
                    dg.feed(tag + " generate-error", str(exc))
                ci, cv = engs[i].last_correction
                if ci.size:
                    acts[i][ci] = acts[i][ci] + cv
            out = engs[i].pack(own, res.relay)
            dg.feed(tag + " out", *out, engs[i].anchor, acts[i], repr(engs[i].counters))
            for j in range(nodes):
                if j != i and rng.random() < 0.9:
                    queue[j].extend(out)


def big(dg: Digest, rounds: int) -> None:
    """bench_bigmodel's model and settings: one- and two-packet steps through a TorchStore."""
    torch.manual_seed(0)
    cfg = SyncConfig.v1_0(
        ratio=0.1,
        sync_interval=20,
        average_over=3,
        relay_policy=RelayPolicy.NEEDED,
        encoding=ValueEncoding.Q8,
        index_encoding=IndexEncoding.PACKED,
    )

    def mlp() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Linear(64, 1536), nn.ReLU(), nn.Linear(1536, 1536), nn.ReLU(), nn.Linear(1536, 10)
        )

    st = [TorchStore(mlp()) for _ in range(3)]
    en = [Engine(s.manifest, cfg, i + 1, 1, s.gather()) for i, s in enumerate(st)]
    g = torch.Generator().manual_seed(1)
    for r in range(rounds):
        for s in st:
            with torch.no_grad():
                for t in s.tensors.values():
                    t.add_(torch.randn(t.shape, generator=g) * 1e-3)
        pk: list[bytes] = []
        for i in (1, 2):
            act = st[i].gather_parts() if hasattr(st[i], "gather_parts") else st[i].gather()
            own = en[i].generate(act)
            ci, cv = en[i].last_correction
            st[i].apply(ci, cv)
            pk += en[i].pack(own, [])
        steps = [pk] if r % 2 else [pk[:1], pk[1:]]
        relay = []
        for j, part in enumerate(steps):
            res = en[0].receive(part, active=st[0].gather)
            st[0].apply(res.indices, res.values)
            dg.result(f"big r{r} step{j} rx", res)
            relay += res.relay
        out = en[0].pack(en[0].generate(st[0].gather()), relay)
        dg.feed(
            f"big r{r} out", *pk, *out, en[0].anchor, en[1].anchor, st[0].gather(), st[1].gather()
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--big", type=int, default=0, help="rounds at bench_bigmodel's scale")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dg = Digest()
    for c in range(args.cases):
        case(dg, args.seed, c)
    big(dg, args.big)
    with open(args.out, "w") as fh:
        fh.write("\n".join(dg.lines) + f"\nTOTAL {dg.total.hexdigest()}\n")
    print(f"{dg.stat}; TOTAL {dg.total.hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
