"""Probes for tests/test_routers.py, run inside a namespace "host" with ``ip netns exec``.

    python tests/cluster_probe.py open CONFIG NODE NS [SECONDS]  # a library node: open, wait for a peer
    python tests/cluster_probe.py listen CONFIG NS VICTIM OWN SECONDS  # count puts on two delta keys
    python tests/cluster_probe.py spoof CONFIG NS VICTIM OWN SECONDS   # put on VICTIM's key, then OWN's

``open`` prints ``joined <peers>`` (exit 0), or the library's error message (exit 3). ``spoof`` puts
``spoof`` on the victim's delta key and then ``own`` on its own, again and again: the two go over one
session and one route, in order, so a listener that got an ``own`` would have got the ``spoof`` before
it, had the router let it through. ``listen`` prints ``ready`` once subscribed, then one JSON line
``{"own": n, "spoof": m}`` after its first ``own`` put (or after SECONDS).
"""

from __future__ import annotations

import json
import sys
import threading
import time


def _open(config: str, node: int, ns: str, seconds: float = 8.0) -> int:
    from delta_fabric.transports.base import TransportError
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    try:
        with ZenohTransport(ZenohOptions(node_id=node, namespace=ns, config_file=config)) as t:
            peers = t.wait_for_peers(1, timeout=seconds)
            print(f"joined {sorted(peers)}", flush=True)
            return 0
    except TransportError as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return 3


def _keys(ns: str, victim: int, own: int) -> tuple[str, str]:
    return f"{ns}/v1/delta/{victim:016x}", f"{ns}/v1/delta/{own:016x}"


def _listen(config: str, ns: str, victim: int, own: int, seconds: float) -> int:
    import zenoh

    vkey, okey = _keys(ns, victim, own)
    counts = {"own": 0, "spoof": 0}
    got = threading.Event()
    lock = threading.Lock()

    def on_sample(sample: zenoh.Sample) -> None:
        key = str(sample.key_expr)
        with lock:
            if key == vkey and sample.payload.to_bytes() == b"spoof":
                counts["spoof"] += 1
            elif key == okey and sample.payload.to_bytes() == b"own":
                counts["own"] += 1
                got.set()

    with zenoh.open(zenoh.Config.from_file(config)) as session:
        session.declare_subscriber(f"{ns}/v1/delta/*", on_sample)
        print("ready", flush=True)
        got.wait(seconds)
        with lock:
            print(json.dumps(counts), flush=True)
    return 0


def _spoof(config: str, ns: str, victim: int, own: int, seconds: float) -> int:
    import zenoh

    vkey, okey = _keys(ns, victim, own)
    deadline = time.monotonic() + seconds
    n = 0
    with zenoh.open(zenoh.Config.from_file(config)) as session:
        while time.monotonic() < deadline:
            session.put(vkey, b"spoof")
            session.put(okey, b"own")
            n += 1
            time.sleep(0.05)
    print(f"spoofed {n} times", flush=True)
    return 0


def main(argv: list[str]) -> int:
    cmd, config, *rest = argv
    if cmd == "open":
        return _open(config, int(rest[0], 0), rest[1], *(float(x) for x in rest[2:3]))
    if cmd in ("listen", "spoof"):
        ns, victim, own, seconds = rest[0], int(rest[1], 0), int(rest[2], 0), float(rest[3])
        return (_listen if cmd == "listen" else _spoof)(config, ns, victim, own, seconds)
    raise SystemExit(f"unknown probe {cmd!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
