#!/usr/bin/env python3
"""Throughput of the DeltaFabric Zenoh transport against raw Zenoh, 1 MB messages on loopback.

Usage: .venv/bin/python bench/bench_transport.py [--size BYTES] [--count N] [--warmup W] [--runs R]
       [--tune-malloc | --df-default-malloc] [--shm off|on]

Zenoh's shared memory is off by default in every session of the run (``--shm``) and the header line
says which way it was, read back from the session config.

Two processes (sender here, receiver in a child process), two Zenoh sessions on tcp/127.0.0.1 with
scouting off, as two nodes would run.

Cases, run interleaved ``--runs`` times:

Every case sends the same encoded packet of ``size`` bytes (one F32 entry) with the same publisher QoS
(congestion control BLOCK, reliable, priority DATA, express off), and every receiver must get every
packet (a df run that drops one counts as 0 MB/s and is flagged):

- ``raw``: ``Publisher.put`` -> subscriber callback that takes the payload's length (nothing copied
  into Python). The baseline.
- ``raw+copy``: the same, the callback copies the payload into a Python ``bytes``.
- ``raw+decode``: the same, the callback copies and decodes it with ``decode_packet``: the ceiling of
  any Python receiver that decodes.
- ``df drain``: ``ZenohTransport.publish`` -> the transport's callback copies each packet into its
  bounded queue -> the receiver loop takes them with ``wait_for_packets`` + ``drain()``. The
  transport against ``raw`` (target >= 0.5).
- ``df drain+decode``: the same, and every packet is decoded with ``decode_packet``.

The receiver times the ``count`` messages after ``warmup`` messages (first to last arrival, or to the
last drain/decode). Reported: MB/s (1 MB = 1e6 bytes) per run, best and median per case, the ratios,
and the time ``decode_packet`` took per packet in the df receiver.

Where the time goes (2-core development machine, see ``--df-default-malloc``): every received packet
is a fresh ``bytes`` allocated on the Zenoh callback thread and freed on the draining thread; with
glibc's default thresholds the heap top is trimmed back to the kernel when a few packets wait and
page-faulted in again, which costs about half the ``df drain`` throughput. The transport therefore
fixes the thresholds (``ZenohOptions.tune_malloc``, on by default). ``decode_packet`` of a 1 MB packet
(125,000 values) takes 0.2-0.4 ms of CPU alone and about twice that while the callback thread competes
for the GIL, which bounds the decode cases (``raw+decode`` as well). Prints only; asserts nothing
about timings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from delta_fabric.ports import free_port

NS = "bench/transport"
FP = hashlib.sha256(b"bench-transport").digest()


#: Zenoh's shared-memory transport, for every session of the run (raw and df, sender and receivers):
#: read from the environment so that the spawned receivers use the main process's ``--shm`` choice.
SHM_ENV = "DF_BENCH_ZENOH_SHM"
SHM_KEY = "transport/shared_memory/enabled"


def shm_config() -> list[tuple[str, str]]:
    return [(SHM_KEY, "true" if os.environ.get(SHM_ENV, "off") == "on" else "false")]


def zenoh_config(listen: list[str], connect: list[str]) -> Any:
    import zenoh

    c = zenoh.Config()
    for key, value in shm_config():
        c.insert_json5(key, value)
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


def _raw_receiver(listen: str, total: int, warmup: int, conn: Any, mode: str = "") -> None:
    import zenoh
    from delta_fabric.wire import decode_packet

    session: Any = zenoh.open(zenoh_config([listen], []))
    state = {"n": 0, "bytes": 0, "t0": 0.0, "t1": 0.0}
    done = threading.Event()

    def on_sample(sample: zenoh.Sample) -> None:
        if (
            mode == "decode"
        ):  # copy + decode in the callback: the ceiling of any receiver that decodes
            buf = sample.payload.to_bytes()
            decode_packet(buf)
            n = len(buf)
        elif mode == "copy":
            n = len(sample.payload.to_bytes())
        else:
            n = len(sample.payload)
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


def _df_receiver(
    listen: str, total: int, warmup: int, conn: Any, decode: bool = True, tune_malloc: bool = True
) -> None:
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport
    from delta_fabric.wire import decode_packet

    opts = ZenohOptions(
        node_id=2,
        namespace=NS,
        listen=[listen],
        queue_capacity=4096,
        queue_bytes=1 << 31,
        tune_malloc=tune_malloc,
        extra_config=shm_config(),
    )
    with ZenohTransport(opts) as t:
        conn.send("ready")
        n = values = nbytes = 0
        t0 = t1 = 0.0
        deadline = time.monotonic() + 300
        t_decode = 0.0
        while n + t.stats.dropped_packets < total and time.monotonic() < deadline:
            t.wait_for_packets(0.5)
            for p in t.drain():
                if decode:
                    a = time.perf_counter()
                    k = decode_packet(p).num_values
                    if n >= warmup:
                        t_decode += time.perf_counter() - a
                else:
                    k = 0
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
                "decode_seconds": t_decode,
                "malloc_tuned": t.malloc_tuned,
            }
        )


# ------------------------------------------------------------------------------------------------------
# Senders
# ------------------------------------------------------------------------------------------------------


def _wait(conn: Any, timeout: float) -> Any:
    if not conn.poll(timeout):
        raise TimeoutError("receiver did not answer")
    return conn.recv()


def run_raw(size: int, count: int, warmup: int, mode: str = "") -> dict[str, Any]:
    import zenoh

    port = free_port()
    payload = make_packet(size)  # the same bytes as the df cases (decodable for mode "decode")
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(
        target=_raw_receiver,
        args=(f"tcp/127.0.0.1:{port}", warmup + count, warmup, child, mode),
    )
    proc.start()
    try:
        assert _wait(parent, 60) == "ready"
        session: Any = zenoh.open(zenoh_config([], [f"tcp/127.0.0.1:{port}"]))
        try:
            pub: Any = session.declare_publisher(
                f"{NS}/raw",
                # the QoS of ZenohTransport's publisher (express off in both)
                congestion_control=zenoh.CongestionControl.BLOCK,
                priority=zenoh.Priority.DATA,
                reliability=zenoh.Reliability.RELIABLE,
            )
            deadline = time.monotonic() + 30
            while not _matching(pub):
                if time.monotonic() > deadline:
                    raise TimeoutError("no matching subscriber")
                time.sleep(0.01)
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


def run_df(
    size: int, count: int, warmup: int, decode: bool = True, tune_malloc: bool = True
) -> dict[str, Any]:
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    port = free_port()
    packet = make_packet(size)
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(
        target=_df_receiver,
        args=(f"tcp/127.0.0.1:{port}", warmup + count, warmup, child, decode, tune_malloc),
    )
    proc.start()
    try:
        assert _wait(parent, 60) == "ready"
        opts = ZenohOptions(
            node_id=1,
            namespace=NS,
            connect=[f"tcp/127.0.0.1:{port}"],
            extra_config=shm_config(),
        )
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
        help="run every receiver (raw ones too) with MALLOC_MMAP_THRESHOLD_=32 MiB and "
        "MALLOC_TRIM_THRESHOLD_=1 GiB (glibc then reuses freed 1 MB buffers instead of returning them "
        "to the kernel)",
    )
    ap.add_argument(
        "--df-default-malloc",
        action="store_true",
        help="open the df receivers with ZenohOptions(tune_malloc=False): glibc's default thresholds "
        "(the behaviour before the transport tuned them)",
    )
    ap.add_argument(
        "--shm",
        choices=("off", "on"),
        default="off",
        help="Zenoh's shared-memory transport in every session (default off: the bytes go through "
        "loopback TCP, as between two machines; 'on' lets Zenoh use it where the payload allows)",
    )
    args = ap.parse_args(argv)
    os.environ[SHM_ENV] = args.shm
    if args.tune_malloc:  # read by glibc at process start: applies to the spawned receivers
        os.environ["MALLOC_MMAP_THRESHOLD_"] = str(32 << 20)
        os.environ["MALLOC_TRIM_THRESHOLD_"] = str(1 << 30)

    def mbps(r: dict[str, Any]) -> float:
        return float(r["bytes"]) / r["seconds"] / 1e6 if r["ok"] and r["seconds"] > 0 else 0.0

    cases: dict[str, Callable[[], dict[str, Any]]] = {
        "raw": lambda: run_raw(args.size, args.count, args.warmup),
        "raw+copy": lambda: run_raw(args.size, args.count, args.warmup, mode="copy"),
        "raw+decode": lambda: run_raw(args.size, args.count, args.warmup, mode="decode"),
        "df drain": lambda: run_df(
            args.size, args.count, args.warmup, decode=False, tune_malloc=not args.df_default_malloc
        ),
        "df drain+decode": lambda: run_df(
            args.size, args.count, args.warmup, decode=True, tune_malloc=not args.df_default_malloc
        ),
    }
    rates: dict[str, list[float]] = {k: [] for k in cases}
    decode_ms: list[float] = []
    from importlib.metadata import PackageNotFoundError, version

    try:
        zenoh_version = version("eclipse-zenoh")
    except PackageNotFoundError:
        zenoh_version = "unknown"
    probe = zenoh_config([], [])
    print(
        f"payload {args.size} bytes, {args.count} timed messages after {args.warmup} warm-up, loopback "
        f"TCP; Zenoh shared memory {args.shm} in every session ({SHM_KEY} = "
        f"{probe.get_json(SHM_KEY)}, eclipse-zenoh {zenoh_version}); baselines: raw put "
        "-> callback, and raw put -> callback + copy into Python bytes (what the transport does)"
    )
    malloc_tuned: set[bool] = set()
    for run in range(args.runs):  # interleaved, so load changes hit every case alike
        line = []
        for name, fn in cases.items():
            r = fn()
            rates[name].append(mbps(r))
            extra = f" (dropped {r['dropped']})" if r.get("dropped") else ""
            if not r["ok"]:
                extra += f" (INCOMPLETE: {r['n']} received)"
            if "malloc_tuned" in r:
                malloc_tuned.add(bool(r["malloc_tuned"]))
            if r.get("decode_seconds"):
                decode_ms.append(r["decode_seconds"] / args.count * 1e3)
            line.append(f"{name} {rates[name][-1]:7.0f}{extra}")
        print(f"run {run + 1}: " + " | ".join(line) + "  MB/s")
    env_malloc = "environment MALLOC_*_THRESHOLD_" if args.tune_malloc else "glibc defaults"
    print(
        "df receivers: malloc thresholds "
        + ("fixed by the transport (tune_malloc)" if malloc_tuned == {True} else env_malloc)
        + f"; raw receivers: {env_malloc}"
    )
    best = {k: max(v) for k, v in rates.items()}
    med = {k: statistics.median(v) for k, v in rates.items()}
    print("case                 best MB/s  median MB/s")
    for k in cases:
        print(f"{k:<20} {best[k]:9.0f}  {med[k]:11.0f}")

    def ratio(a: dict[str, float], num: str, den: str) -> float:
        return a[num] / a[den] if a[den] else 0.0

    def both(num: str, den: str) -> str:
        return f"best {ratio(best, num, den):.2f}, median {ratio(med, num, den):.2f}"

    print(
        "ratio deltafabric (publish -> drain) / raw (put -> callback): "
        f"{both('df drain', 'raw')} (target >= 0.5); vs raw+copy: {both('df drain', 'raw+copy')}"
    )
    print(
        "ratio deltafabric (publish -> drain + decode) / raw (put -> callback): "
        f"{both('df drain+decode', 'raw')}; vs raw+decode (same decode in the callback): "
        f"{both('df drain+decode', 'raw+decode')}"
    )
    if decode_ms:
        print(
            f"decode_packet in the df receiver: median {statistics.median(decode_ms):.3f} ms per packet "
            f"(ceiling {args.size / statistics.median(decode_ms) / 1e3:.0f} MB/s from decoding alone)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
