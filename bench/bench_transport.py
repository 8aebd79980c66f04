#!/usr/bin/env python3
"""Throughput of the DeltaFabric Zenoh transport against raw Zenoh, 1 MB messages on loopback.

Usage: .venv/bin/python bench/bench_transport.py [--size BYTES] [--count N] [--warmup W] [--runs R]

Two processes (sender here, receiver in a child process), two Zenoh sessions on tcp/127.0.0.1 with
scouting off, as two nodes would run.

Cases, run interleaved ``--runs`` times:

- ``raw``: ``Publisher.put`` of ``size`` bytes (congestion control BLOCK, reliable) -> subscriber
  callback that takes the payload's length (nothing copied into Python). The baseline.
- ``raw+copy``: the same, the callback copies the payload into a Python ``bytes``.
- ``df drain``: ``ZenohTransport.publish`` of encoded packets of ``size`` bytes (one F32 entry) -> the
  transport's callback copies each into its bounded queue -> the receiver loop takes them with
  ``drain()``.
- ``df drain+decode``: the same, and every packet is decoded with ``decode_packet``. The target case.

The receiver times the ``count`` messages after ``warmup`` messages (first to last arrival, or to the
last drain/decode). Reported: MB/s (1 MB = 1e6 bytes) per run, best and median per case, and the ratios
to ``raw``.

Where the time goes (measured on the 2-core development machine): ``decode_packet`` of a 1 MB packet
(125,000 values) takes about 0.35 ms of CPU under the GIL; every received packet is a fresh 1 MB
``bytes`` object, and when several wait in the queue glibc returns freed buffers to the kernel and page-
faults them back (about 0.3-0.5 ms per MB); ``--tune-malloc`` shows the effect. Prints only; asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

import numpy as np

NS = "bench/transport"
FP = hashlib.sha256(b"bench-transport").digest()


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def zenoh_config(listen: list[str], connect: list[str]) -> Any:
    import zenoh

    c = zenoh.Config()
    c.insert_json5("mode", '"peer"')
    c.insert_json5("listen/endpoints", json.dumps(listen))
    c.insert_json5("connect/endpoints", json.dumps(connect))
    c.insert_json5("scouting/multicast/enabled", "false")
    c.insert_json5("scouting/gossip/enabled", "false")
    return c


def _matching(publisher: Any) -> bool:
    # `Publisher.matching_status` is typed `-> bool` in zenoh's stubs but is a MatchingStatus object.
    return bool(publisher.matching_status.matching)


def make_packet(size: int) -> bytes:
    """An encoded packet of exactly ``size`` bytes (one F32 entry), found by adjusting the value count."""
    from delta_fabric.wire import Entry, Packet, encode_packet

    def enc(n: int) -> bytes:
        rng = np.random.default_rng(0)
        idx = np.sort(rng.choice(max(n * 4, 16), size=n, replace=False)).astype(np.uint32)
        vals = rng.standard_normal(n).astype(np.float32)
        return encode_packet(Packet(1, 1, FP, (Entry(1, 1, 1, 0, idx, vals),)))

    n = max(1, (size - 200) // 8)
    buf = enc(n)
    while len(buf) > size and n > 1:
        n -= max(1, (len(buf) - size) // 8)
        buf = enc(n)
    return buf


# ------------------------------------------------------------------------------------------------------
# Receivers (child process)
# ------------------------------------------------------------------------------------------------------


def _raw_receiver(listen: str, total: int, warmup: int, conn: Any, copy: bool = False) -> None:
    import zenoh

    session: Any = zenoh.open(zenoh_config([listen], []))
    state = {"n": 0, "bytes": 0, "t0": 0.0, "t1": 0.0}
    done = threading.Event()

    def on_sample(sample: zenoh.Sample) -> None:
        n = len(sample.payload.to_bytes()) if copy else len(sample.payload)
        state["n"] += 1
        if state["n"] == warmup:
            state["t0"] = time.perf_counter()
        elif state["n"] > warmup:
            state["bytes"] += n
        if state["n"] == total:
            state["t1"] = time.perf_counter()
            done.set()

    sub: Any = session.declare_subscriber(f"{NS}/raw", on_sample)
    conn.send("ready")
    ok = done.wait(300)
    conn.send(
        {
            "ok": ok,
            "n": state["n"],
            "bytes": state["bytes"],
            "seconds": state["t1"] - state["t0"],
        }
    )
    sub.undeclare()
    session.close()


def _df_receiver(listen: str, total: int, warmup: int, conn: Any, decode: bool = True) -> None:
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport
    from delta_fabric.wire import decode_packet

    opts = ZenohOptions(
        node_id=2,
        namespace=NS,
        listen=[listen],
        queue_capacity=4096,
        queue_bytes=1 << 31,
    )
    with ZenohTransport(opts) as t:
        conn.send("ready")
        n = values = nbytes = 0
        t0 = t1 = 0.0
        deadline = time.monotonic() + 300
        while n + t.stats.dropped_packets < total and time.monotonic() < deadline:
            t.wait_for_packets(0.5)
            for p in t.drain():
                k = decode_packet(p).num_values if decode else 0
                n += 1
                if n == warmup:
                    t0 = time.perf_counter()
                elif n > warmup:
                    nbytes += len(p)
                    values += k
        t1 = time.perf_counter()
        conn.send(
            {
                "ok": n == total,
                "n": n,
                "bytes": nbytes,
                "values": values,
                "dropped": t.stats.dropped_packets,
                "seconds": t1 - t0,
            }
        )


# ------------------------------------------------------------------------------------------------------
# Senders
# ------------------------------------------------------------------------------------------------------


def _wait(conn: Any, timeout: float) -> Any:
    if not conn.poll(timeout):
        raise TimeoutError("receiver did not answer")
    return conn.recv()


def run_raw(size: int, count: int, warmup: int, copy: bool = False) -> dict[str, Any]:
    import zenoh

    port = free_port()
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(
        target=_raw_receiver,
        args=(f"tcp/127.0.0.1:{port}", warmup + count, warmup, child),
    )
    proc.start()
    try:
        assert _wait(parent, 60) == "ready"
        session: Any = zenoh.open(zenoh_config([], [f"tcp/127.0.0.1:{port}"]))
        try:
            pub: Any = session.declare_publisher(
                f"{NS}/raw",
                congestion_control=zenoh.CongestionControl.BLOCK,
                reliability=zenoh.Reliability.RELIABLE,
            )
            deadline = time.monotonic() + 30
            while not _matching(pub):
                if time.monotonic() > deadline:
                    raise TimeoutError("no matching subscriber")
                time.sleep(0.01)
            payload = bytes(np.random.default_rng(1).bytes(size))
            for _ in range(warmup + count):
                pub.put(payload)
            result: dict[str, Any] = _wait(parent, 300)
            pub.undeclare()
        finally:
            session.close()
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    return result


def run_df(size: int, count: int, warmup: int, decode: bool = True) -> dict[str, Any]:
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    port = free_port()
    packet = make_packet(size)
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(
        target=_df_receiver,
        args=(f"tcp/127.0.0.1:{port}", warmup + count, warmup, child),
    )
    proc.start()
    try:
        assert _wait(parent, 60) == "ready"
        opts = ZenohOptions(node_id=1, namespace=NS, connect=[f"tcp/127.0.0.1:{port}"])
        with ZenohTransport(opts) as t:
            t.wait_for_peers(1, 30)
            deadline = time.monotonic() + 30
            while not _matching(t._publisher):
                if time.monotonic() > deadline:
                    raise TimeoutError("no matching subscriber")
                time.sleep(0.01)
            for _ in range(warmup + count):
                t.publish(packet)
            result: dict[str, Any] = _wait(parent, 300)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    result["packet_bytes"] = len(packet)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--size",
        type=int,
        default=1_000_000,
        help="message size in bytes (default 1 MB)",
    )
    ap.add_argument("--count", type=int, default=300, help="timed messages per run")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--tune-malloc",
        action="store_true",
        help="run the receivers with MALLOC_MMAP_THRESHOLD_=32 MiB and MALLOC_TRIM_THRESHOLD_=1 GiB "
        "(glibc then reuses freed 1 MB buffers instead of returning them to the kernel)",
    )
    args = ap.parse_args(argv)
    if args.tune_malloc:  # read by glibc at process start: applies to the spawned receivers
        os.environ["MALLOC_MMAP_THRESHOLD_"] = str(32 << 20)
        os.environ["MALLOC_TRIM_THRESHOLD_"] = str(1 << 30)

    def mbps(r: dict[str, Any]) -> float:
        return float(r["bytes"]) / r["seconds"] / 1e6 if r["ok"] and r["seconds"] > 0 else 0.0

    cases: dict[str, Callable[[], dict[str, Any]]] = {
        "raw": lambda: run_raw(args.size, args.count, args.warmup),
        "raw+copy": lambda: run_raw(args.size, args.count, args.warmup, copy=True),
        "df drain": lambda: run_df(args.size, args.count, args.warmup, decode=False),
        "df drain+decode": lambda: run_df(args.size, args.count, args.warmup, decode=True),
    }
    rates: dict[str, list[float]] = {k: [] for k in cases}
    print(
        f"payload {args.size} bytes, {args.count} timed messages after {args.warmup} warm-up, loopback TCP"
    )
    for run in range(args.runs):  # interleaved, so load changes hit every case alike
        line = []
        for name, fn in cases.items():
            r = fn()
            rates[name].append(mbps(r))
            extra = f" (dropped {r['dropped']})" if r.get("dropped") else ""
            line.append(f"{name} {rates[name][-1]:7.0f}{extra}")
        print(f"run {run + 1}: " + " | ".join(line) + "  MB/s")
    best = {k: max(v) for k, v in rates.items()}
    med = {k: statistics.median(v) for k, v in rates.items()}
    print("case                 best MB/s  median MB/s")
    for k in cases:
        print(f"{k:<20} {best[k]:9.0f}  {med[k]:11.0f}")

    def ratio(a: dict[str, float], num: str, den: str) -> float:
        return a[num] / a[den] if a[den] else 0.0

    print(
        "ratio deltafabric (publish -> drain + decode) / raw (put -> callback): "
        f"best {ratio(best, 'df drain+decode', 'raw'):.2f}, median {ratio(med, 'df drain+decode', 'raw'):.2f} "
        "(target >= 0.5)"
    )
    print(
        "ratio deltafabric (publish -> drain) / raw (put -> callback): "
        f"best {ratio(best, 'df drain', 'raw'):.2f}, median {ratio(med, 'df drain', 'raw'):.2f}; "
        f"vs raw+copy: best {ratio(best, 'df drain', 'raw+copy'):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
