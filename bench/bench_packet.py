#!/usr/bin/env python3
"""Per-packet cost of the Python receive path, stage by stage, against baselines measured in the same
run, interleaved (issue 11, item 5).

For each case, every repetition times, in this order: one memcpy of the packet's bytes
(``np.copyto`` between preallocated buffers: the baseline), one NumPy pass over the packet's values
(``np.multiply`` into a preallocated buffer), then the stages of receiving that packet:

- ``decode``: ``decode_packet`` (every context-free check of DF-RCV-20);
- ``validate``: ``validate_packet`` (fingerprint, hop limit, index range);
- ``receive``: ``Engine.receive`` of a fresh packet (fresh seqs, so every entry is accepted): decode,
  validate, admission (DF-RCV-2..4), damping and aggregation (DF-RCV-5, 6), the finite check
  (DF-RCV-50), the apply to the anchor and the relay entries (DF-RLY-1, 2);
- ``admit+apply``: ``receive`` minus ``decode`` and ``validate`` (derived, not timed alone);
- ``relay encode``: ``Engine.pack`` of the relay entries that receive produced (one packet);
- ``encode``: ``encode_packet`` of the decoded packet (what a sender pays for the same packet);
- ``publish``: ``MemoryTransport.publish`` to one subscriber (``--zenoh``: ``ZenohTransport.publish``
  to a subscriber over tcp/127.0.0.1, scouting off).

Cases: the demo's packet (one entry of 5 % of the demo CNN's 17,482 values), many small entries
(1,000 entries of 8 values, 100 origins), and a bigger model's packet (one entry of 5 % of 2.2 M
values). Printed: the median per stage in microseconds and its ratio to the memcpy baseline, and the
per-entry decode cost (many small entries against one entry of the same values). Prints only;
asserts nothing about timings.

The value and index encodings are F32 and PLAIN by default (the 1.0 wire); ``--encoding Q8
--index-encoding PACKED`` gives the demo's (section 6.8, 1.1): every packet, and the relay packets the
receiver encodes, use them.

Times are this thread's CPU time by default (``--clock cpu``, ``time.thread_time``: on a machine
shared with other jobs, wall time mostly measures the scheduler); ``--clock wall`` for wall time.

Usage: ``python bench/bench_packet.py [--repeat R] [--zenoh] [--clock cpu|wall] [--json FILE]
[--encoding F32|F16|BF16|Q8] [--index-encoding PLAIN|PACKED]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from delta_fabric.compact import IndexEncoding
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from delta_fabric.wire import (
    Entry,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
    validate_packet,
)

SENDER, RECEIVER = 1, 2
#: ``--clock cpu`` (default): this thread's CPU time (``time.thread_time``), which other processes
#: on a loaded machine do not inflate; ``--clock wall``: ``time.perf_counter``.
CLOCK: list[Callable[[], float]] = [time.thread_time]
#: the value and index encodings of every packet (``--encoding``, ``--index-encoding``)
WIRE: list[Any] = [ValueEncoding.F32, IndexEncoding.PLAIN]
STAGES = ("copy", "pass", "decode", "validate", "receive", "relay encode", "encode", "publish")


@dataclass
class Case:
    name: str
    num_params: int
    packets: list[bytes]  # one fresh packet per repetition (+1 warm-up)
    times: dict[str, list[float]] = field(default_factory=dict)


def demo_like(name: str, num_params: int, ratio: float, count: int) -> Case:
    """Packets a real sender `Engine` generates and packs: one own entry of ``ratio`` of the values."""
    manifest = Manifest.from_named_shapes({"w": (num_params,)})
    cfg = SyncConfig.v1_0(ratio=ratio, encoding=WIRE[0], index_encoding=WIRE[1])
    eng = Engine(manifest, cfg, SENDER, 1)
    rng = np.random.default_rng(0)
    active = eng.anchor.copy()
    out = []
    for _ in range(count):
        active += rng.standard_normal(num_params).astype(np.float32) * np.float32(1e-2)
        pkts = eng.pack(eng.generate(active), [])
        assert len(pkts) == 1
        out.append(pkts[0])
    return Case(name, num_params, out)


def many_entries(name: str, entries: int, values: int, origins: int, count: int) -> Case:
    """Packets of ``entries`` small entries (``values`` each) from ``origins`` origins, hops 1
    (relayed by the sender), each origin's seqs consecutive across packets."""
    num_params = 1 << 20
    rng = np.random.default_rng(1)
    fp = Manifest.from_named_shapes({"w": (num_params,)}).fingerprint
    out = []
    per_origin = entries // origins
    for r in range(count):
        es = []
        for j in range(entries):
            o = 100 + j % origins
            seq = 1 + r * per_origin + j // origins
            idx = np.sort(rng.choice(num_params, size=values, replace=False)).astype(np.uint32)
            es.append(Entry(o, 1, seq, 1, idx, rng.standard_normal(values).astype(np.float32)))
        out.append(encode_packet(Packet(SENDER, 1, fp, tuple(es), WIRE[0], index_encoding=WIRE[1])))
    return Case(name, num_params, out)


class Publisher:
    """``publish`` through a memory hub or two Zenoh transports on tcp/127.0.0.1."""

    def __init__(self, zenoh: bool) -> None:
        self._close: list[Callable[[], None]] = []
        self.kind = "memory"
        if zenoh:
            import socket

            from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            ns = f"bench/packet/{port}"
            rx = ZenohTransport(
                ZenohOptions(RECEIVER, namespace=ns, listen=[f"tcp/127.0.0.1:{port}"])
            )
            tx = ZenohTransport(
                ZenohOptions(SENDER, namespace=ns, connect=[f"tcp/127.0.0.1:{port}"])
            )
            self._close += [tx.close, rx.close]
            self.tx: Any = tx
            self.rx: Any = rx
            self.kind = "zenoh tcp/127.0.0.1"
        else:
            from delta_fabric.transports.memory import MemoryHub

            hub = MemoryHub()
            self.tx = hub.transport(SENDER)
            self.rx = hub.transport(RECEIVER)
        time.sleep(0.5 if zenoh else 0.0)

    def publish(self, pkt: bytes) -> None:
        self.tx.publish(pkt)

    def drain(self) -> None:
        self.rx.drain()

    def close(self) -> None:
        for f in self._close:
            f()


def run_case(case: Case, repeat: int, pub: Publisher) -> None:
    manifest = Manifest.from_named_shapes({"w": (case.num_params,)})
    recv = Engine(manifest, SyncConfig.v1_0(encoding=WIRE[0], index_encoding=WIRE[1]), RECEIVER, 1)
    fixed = case.packets[0]
    pkt0 = decode_packet(fixed)
    values = np.concatenate([e.values for e in pkt0.entries])
    src = np.frombuffer(fixed, dtype=np.uint8)
    dst = np.empty_like(src)
    vout = np.empty_like(values)
    alpha = np.float32(0.5)
    t: dict[str, list[float]] = {s: [] for s in STAGES}
    clock = CLOCK[0]
    for r, buf in enumerate(case.packets):
        t0 = clock()
        np.copyto(dst, src)
        t1 = clock()
        np.multiply(values, alpha, out=vout)
        t2 = clock()
        p = decode_packet(fixed)
        t3 = clock()
        validate_packet(p, fingerprint=recv.fingerprint, num_params=case.num_params, hop_limit=16)
        t4 = clock()
        res = recv.receive([buf])
        t5 = clock()
        out = recv.pack([], res.relay)
        t6 = clock()
        encode_packet(p)
        t7 = clock()
        pub.publish(fixed)
        t8 = clock()
        pub.drain()
        assert res.outcomes == [None] and len(out) == 1, (res.outcomes, len(out))
        if r == 0:
            continue  # warm-up
        for s, dt in zip(
            STAGES,
            (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t8 - t7),
            strict=True,
        ):
            t[s].append(dt)
    case.times = t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=30, help="repetitions per case (median reported)")
    ap.add_argument("--zenoh", action="store_true", help="publish through Zenoh on tcp/127.0.0.1")
    ap.add_argument("--json", default=None, help="also write the medians (s) to this file")
    ap.add_argument(
        "--clock", choices=("cpu", "wall"), default="cpu", help="thread CPU or wall time"
    )
    ap.add_argument(
        "--encoding", choices=[e.name for e in ValueEncoding], default="F32",
        help="value encoding of every packet",
    )  # fmt: skip
    ap.add_argument(
        "--index-encoding", choices=[e.name for e in IndexEncoding], default="PLAIN",
        help="index encoding of every packet",
    )  # fmt: skip
    args = ap.parse_args()
    WIRE[:] = [ValueEncoding[args.encoding], IndexEncoding[args.index_encoding]]
    CLOCK[0] = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    n = args.repeat + 1
    cases = [
        demo_like("demo: 1 entry x 874", 17_482, 0.05, n),
        many_entries("1000 entries x 8", 1000, 8, 100, n),
        demo_like("bigger: 1 entry x 112k", 2_240_000, 0.05, min(n, 12)),
    ]
    one_entry_8000 = many_entries("1 entry x 8000", 1, 8000, 1, n)
    pub = Publisher(args.zenoh)
    try:
        for c in [*cases, one_entry_8000]:
            run_case(c, args.repeat if c.num_params < 2_000_000 else min(args.repeat, 11), pub)
    finally:
        pub.close()
    med = {c.name: {s: statistics.median(v) for s, v in c.times.items()} for c in cases}
    print(
        f"wire: {args.encoding} + {args.index_encoding}; publish: {pub.kind}; clock: {args.clock}; medians over repetitions, us (ratio to one "
        "memcpy of the packet)"
    )
    print(f"{'stage':<14}" + "".join(f"{c.name:>28}" for c in cases))
    sizes = "".join(f"{len(c.packets[0]):>22} bytes" for c in cases)
    print(f"{'packet':<14}{sizes}")
    for s in (*STAGES[:5], "admit+apply", *STAGES[5:]):
        row = f"{s:<14}"
        for c in cases:
            m = med[c.name]
            v = m["receive"] - m["decode"] - m["validate"] if s == "admit+apply" else m[s]
            row += f"{v * 1e6:>17.1f} ({v / m['copy']:>7.1f}x)"
        print(row)
    many = med["1000 entries x 8"]
    one = {s: statistics.median(v) for s, v in one_entry_8000.times.items()}
    per_entry = (many["decode"] - one["decode"]) / 999
    per_entry_rx = (many["receive"] - one["receive"]) / 999
    print(
        f"per-entry cost (1000 x 8 values against 1 x 8000): decode {per_entry * 1e6:.2f} us, "
        f"receive {per_entry_rx * 1e6:.2f} us, relay encode "
        f"{(many['relay encode'] - one['relay encode']) / 999 * 1e6:.2f} us "
        f"(memcpy of the packet: {many['copy'] * 1e6:.1f} us)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "encoding": args.encoding,
                    "index_encoding": args.index_encoding,
                    "publish": pub.kind,
                    "clock": args.clock,
                    "medians_s": med,
                    "one_entry_8000": one,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
