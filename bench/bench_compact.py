#!/usr/bin/env python3
"""Bytes per (index, value) pair of one packet and decode cost, 1.0 encodings against the compact
encodings of spec section 6.8 (1.1: PACKED indices, Q8 values), on real packets.

Usage: .venv/bin/python bench/bench_compact.py [--params N] [--densities 0.01,0.05,0.2] [--rounds R]

For each density, one own entry of ``k = density * N`` values (the top-k of a Gaussian delta, so the
indices are spread as a real selection spreads them) is put into one packet, encoded and decoded with
`delta_fabric.wire` in each combination: PLAIN + F32 / F16 (1.0), PACKED + F32 / F16 / Q8, PLAIN + Q8.
Reported: packet bytes per value and the ratio to PLAIN + F32; the relative error of Q8 (RMS over RMS);
and the decode time of each packet per value as a ratio to PLAIN + F32, measured in the same run,
interleaved (every round decodes every variant once, in a rotating order; the median over the rounds
is kept). A second table does the same for a packet of 200 small entries (the per-entry cost). Prints
only.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time

import numpy as np
from delta_fabric.compact import IndexEncoding
from delta_fabric.encodings import ValueEncoding
from delta_fabric.wire import Entry, Packet, decode_packet, encode_packet

FP = hashlib.sha256(b"bench").digest()
F32, F16, Q8 = ValueEncoding.F32, ValueEncoding.F16, ValueEncoding.Q8
PLAIN, PACKED = IndexEncoding.PLAIN, IndexEncoding.PACKED
VARIANTS = [
    ("PLAIN+F32", F32, PLAIN),
    ("PLAIN+F16", F16, PLAIN),
    ("PLAIN+Q8", Q8, PLAIN),
    ("PACKED+F32", F32, PACKED),
    ("PACKED+F16", F16, PACKED),
    ("PACKED+Q8", Q8, PACKED),
]


def packets(entries: tuple[Entry, ...]) -> list[bytes]:
    out = []
    for _, enc, ie in VARIANTS:
        buf = encode_packet(Packet(0xA1, 1, FP, entries, enc, index_encoding=ie))
        got = decode_packet(buf)  # the real decoder, and a check of the round trip
        assert all(
            g.indices.tolist() == e.indices.tolist()
            for g, e in zip(got.entries, entries, strict=True)
        )
        out.append(buf)
    return out


def decode_times(bufs: list[bytes], rounds: int) -> list[float]:
    """Median decode time of each packet, interleaved in a rotating order."""
    times: list[list[float]] = [[] for _ in bufs]
    for r in range(rounds):
        for j in range(len(bufs)):
            i = (j + r) % len(bufs)
            t0 = time.perf_counter()
            decode_packet(bufs[i])
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--params", type=int, default=1_000_000, help="N of the model")
    ap.add_argument("--densities", default="0.01,0.05,0.2")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved decode rounds")
    args = ap.parse_args()
    try:
        densities = [float(x) for x in args.densities.split(",")]
    except ValueError:
        print("bench_compact.py: --densities must be comma-separated numbers", file=sys.stderr)
        return 2
    if args.params < 100 or not all(0 < d <= 1 for d in densities) or args.rounds < 1:
        print(
            "bench_compact.py: need --params >= 100, densities in (0, 1], --rounds >= 1",
            file=sys.stderr,
        )
        return 2
    rng = np.random.default_rng(0)
    n = args.params
    delta = rng.standard_normal(n).astype(np.float32)
    names = [v[0] for v in VARIANTS]
    print(f"N = {n}; one entry of k = density * N values per packet")
    print("bytes per value (ratio to PLAIN+F32):")
    print("density       k | " + " ".join(f"{x:>14}" for x in names) + " | Q8 rel. err")
    decode_rows = []
    for dens in densities:
        k = max(1, int(n * dens))
        idx = np.sort(np.argpartition(-np.abs(delta), k - 1)[:k]).astype(np.uint32)
        vals = delta[idx]
        bufs = packets((Entry(0xB2, 1, 1, 0, idx, vals),))
        base = len(bufs[0])
        q8 = decode_packet(bufs[2]).entries[0].values
        err = float(np.sqrt(np.mean((q8 - vals) ** 2)) / np.sqrt(np.mean(vals**2)))
        cells = " ".join(f"{len(b) / k:5.2f} ({base / len(b):3.1f}x)".rjust(14) for b in bufs)
        print(f"{dens:7.2%} {k:7d} | {cells} | {err:.4f}")
        t = decode_times(bufs, args.rounds)
        decode_rows.append((f"{dens:7.2%} {k:7d}", [x / k * 1e9 for x in t], t[0]))
    # many small entries: the per-entry cost
    small = tuple(
        Entry(
            0xB2 + j,
            1,
            1,
            0,
            np.sort(rng.choice(n, 50, replace=False)).astype(np.uint32),
            rng.standard_normal(50).astype(np.float32),
        )
        for j in range(200)
    )
    t = decode_times(packets(small), args.rounds)
    decode_rows.append(("200 x 50 values", [x / 200 * 1e9 for x in t], t[0]))
    print(
        "\ndecode time, ns per value (per entry for the last row), and ratio to PLAIN+F32 (interleaved):"
    )
    print("packet          | " + " ".join(f"{x:>14}" for x in names))
    for label, per, _ in decode_rows:
        cells = " ".join(f"{p:6.0f} ({p / per[0]:3.1f}x)".rjust(14) for p in per)
        print(f"{label:15} | {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
