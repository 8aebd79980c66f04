"""Selection and apply cost on N = 10,000,000 f32, as ratios to one memory copy of N f32 (same run).

Run: ``.venv/bin/python bench/bench_selection.py [--n N] [--repeat R]``. Prints a table; asserts nothing
(timings on a shared machine are informative only). Targets: exact selection <= 12 copies, fast <= 4.

The baseline is measured interleaved with the work: every repetition of an operation is followed by
one copy of N f32 into a preallocated buffer, and each row's ratio divides the operation's median by
the median of the copies timed beside it. A machine whose load changes during the run moves both
(the ``copy ms`` column shows it), not only the numerator.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from delta_fabric.selection import Selector


def median_times(
    fn: Callable[[], object], baseline: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """Medians of ``fn`` and of ``baseline``, run alternately ``repeat`` times each."""
    times: list[float] = []
    base: list[float] = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        baseline()
        base.append(time.perf_counter() - t)
    return statistics.median(times), statistics.median(base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    n, rep = args.n, args.repeat
    rng = np.random.default_rng(0)
    d = rng.standard_normal(n, dtype=np.float32)
    d[rng.random(n) < 0.1] = 0.0  # some untouched parameters
    dst = np.empty_like(d)

    def copy() -> None:
        np.copyto(dst, d)

    copy()  # warm-up: pages of dst touched
    rows: list[tuple[str, float, float, str]] = []

    def measure(name: str, fn: Callable[[], object], repeat: int = rep, note: str = "") -> None:
        t, c = median_times(fn, copy, max(repeat, 3))
        rows.append((name, t, c, note))

    sel = Selector(n)
    for pct in (1, 5):
        k = math.ceil(n * pct / 100)
        for fast in (False, True):
            got = sel.select(d, k, fast=fast)  # warm up, and record the path taken
            note = f"path={sel.last_path}, |S|={got.size}"
            measure(
                f"{'fast' if fast else 'exact'} k={pct}%",
                lambda k=k, f=fast: sel.select(d, k, fast=f),
                note=note,
            )
    k_small = math.ceil(n * 0.0001)  # too few for the sample: the group-max path
    sel.select(d, k_small)
    measure(
        "exact k=0.01%",
        lambda: sel.select(d, k_small),
        note=f"path={sel.last_path}",
    )
    k1 = math.ceil(n * 0.01)
    measure("np.argpartition k=1%", lambda: np.argpartition(np.abs(d), n - k1), repeat=3)
    measure("np.argsort (full sort)", lambda: np.argsort(np.abs(d), kind="stable"), repeat=1)

    # apply of k entries: what a receiver does to its anchor and its active weights (O(k))
    anchor = np.zeros(n, dtype=np.float32)
    for pct in (1, 5):
        k = math.ceil(n * pct / 100)
        idx = np.sort(rng.choice(n, k, replace=False)).astype(np.uint32)
        vals = rng.standard_normal(k, dtype=np.float32)

        def apply(idx: np.ndarray = idx, vals: np.ndarray = vals) -> None:
            anchor[idx] = anchor[idx] + vals

        measure(f"apply k={pct}% (fancy index add)", apply)

    # a full engine receive of one packet with k = 1 % (decode, checks, damping, aggregation, anchor)
    manifest = Manifest.from_named_shapes({"w": (n,)})
    sender = Engine(manifest, SyncConfig.v1_0(ratio=0.01), 1, 1)
    active = d.copy()
    packets = sender.pack(sender.generate(active), [])
    rx = Engine(manifest, SyncConfig.v1_0(), 2, 1)

    def receive() -> None:
        rx.state = type(rx.state)(2)  # fresh window each time: every entry is new
        rx.receive(packets)

    measure("engine.receive k=1% (decode+apply)", receive)
    gen_engine = Engine(manifest, SyncConfig.v1_0(ratio=0.01), 3, 1)

    def generate() -> None:
        gen_engine.anchor[:] = 0.0
        gen_engine.generate(active)

    measure("engine.generate k=1% (incl. reset)", generate, repeat=3)

    print(f"N = {n:,} f32; copies: one np.copyto of N f32, timed after every repetition of the row")
    print(f"{'operation':40s} {'ms':>9s} {'copy ms':>8s} {'copies':>8s}  notes")
    for name, t, c, note in rows:
        print(f"{name:40s} {t * 1e3:9.2f} {c * 1e3:8.2f} {t / c:8.2f}  {note}")


if __name__ == "__main__":
    main()
