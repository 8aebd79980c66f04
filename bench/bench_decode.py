#!/usr/bin/env python3
"""Decode + validate throughput of the Python wire layer, against a memcpy of the same bytes.

Usage: .venv/bin/python bench/bench_decode.py [--values N] [--repeat R]

The headline case is one f32 packet carrying 1,000,000 (index, value) pairs in one entry (about 8
MB). Other rows show the cost per entry (many small entries) and of the 16-bit encodings (which
decode into new f32 arrays). Reported: best-of-R wall time, GB/s over the packet's bytes, and the
ratio to one memcpy of the same number of bytes (np.copyto between two preallocated buffers, and a
bytes() copy), measured in the same run. Prints only; asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable

import numpy as np
from delta_fabric.wire import (
    Entry,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
    validate_packet,
)

FP = hashlib.sha256(b"bench").digest()


def best_of(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def make_packet(total: int, entries: int, encoding: ValueEncoding) -> tuple[bytes, int]:
    rng = np.random.default_rng(0)
    num_params = total * 4
    idx = np.sort(rng.choice(num_params, size=total, replace=False)).astype(np.uint32)
    vals = rng.standard_normal(total).astype(np.float32)
    chunks = np.array_split(np.arange(total), entries)
    es = tuple(Entry(0x1000 + k, 1, k + 1, k % 4, idx[c], vals[c]) for k, c in enumerate(chunks))
    return encode_packet(Packet(1, 1, FP, es, encoding)), num_params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--values", type=int, default=1_000_000, help="(index, value) pairs per packet")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    n = args.values

    cases = [
        (f"f32, 1 entry x {n}", 1, ValueEncoding.F32),
        (f"f32, 1000 entries x {n // 1000}", 1000, ValueEncoding.F32),
        (f"f32, {n // 100} entries x 100", n // 100, ValueEncoding.F32),
        (f"f16, 1 entry x {n}", 1, ValueEncoding.F16),
        (f"bf16, 1 entry x {n}", 1, ValueEncoding.BF16),
    ]
    print(
        f"{'case':<28} {'bytes':>10} {'decode+validate':>16} {'GB/s':>7} "
        f"{'x np.copyto':>12} {'x bytes copy':>13}"
    )
    for name, entries, enc in cases:
        buf, num_params = make_packet(n, entries, enc)
        src = np.frombuffer(buf, dtype=np.uint8)
        dst = np.empty_like(src)
        t_copyto = best_of(lambda: np.copyto(dst, src), args.repeat)  # noqa: B023
        t_bytes = best_of(lambda: bytes(bytearray(buf)), args.repeat)  # noqa: B023

        def run() -> None:
            p = decode_packet(buf)  # noqa: B023
            validate_packet(p, fingerprint=FP, num_params=num_params, hop_limit=16)  # noqa: B023

        t = best_of(run, args.repeat)
        print(
            f"{name:<28} {len(buf):>10} {t * 1e3:>13.3f} ms {len(buf) / t / 1e9:>7.2f} "
            f"{t / t_copyto:>11.1f}x {t / t_bytes:>12.1f}x"
        )
        if entries == 1 and enc is ValueEncoding.F32:
            print(
                f"{'  memcpy of the same bytes':<28} {'':>10} {t_copyto * 1e3:>13.3f} ms "
                f"{len(buf) / t_copyto / 1e9:>7.2f}  (np.copyto; bytes copy {t_bytes * 1e3:.3f} ms)"
            )


if __name__ == "__main__":
    main()
