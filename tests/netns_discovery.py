"""Zero-configuration discovery check: two nodes with the LAN default (multicast scouting, no endpoints)
find each other and exchange packets, inside a private network namespace so nothing leaves the machine.

Usage (as root, iproute2 installed):

    python tests/netns_discovery.py run           # create the namespace, run two nodes, clean up
    python tests/netns_discovery.py child ...     # one node (what `run` starts with `ip netns exec`)

The namespace has only its loopback interface, with multicast enabled and a route for 224.0.0.0/4, and
the nodes scout on interface ``lo``. ``run`` prints one JSON line per node and exits 0 on success.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass


class NetnsUnavailable(RuntimeError):
    """The network namespace could not be created (not root, no iproute2, no netns support)."""


@dataclass
class NodeResult:
    node: int
    ok: bool
    peers: list[int]
    received: list[str]
    elapsed_s: float
    error: str = ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def create_namespace(name: str) -> None:
    """``ip netns add`` plus loopback up, multicast on, multicast route; NetnsUnavailable on failure
    (the namespace is deleted again if a later step fails)."""
    if shutil.which("ip") is None:
        raise NetnsUnavailable("iproute2 (`ip`) is not installed")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise NetnsUnavailable("creating a network namespace needs root")
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise NetnsUnavailable(f"`ip netns add {name}` failed: {detail.strip()}") from exc
    try:
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "multicast", "on")
        _ip("netns", "exec", name, "ip", "route", "add", "224.0.0.0/4", "dev", "lo")
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as exc:
        delete_namespace(name)
        detail = getattr(exc, "stderr", "") or str(exc)
        raise NetnsUnavailable(f"configuring namespace {name} failed: {detail.strip()}") from exc


def delete_namespace(name: str) -> None:
    _ip("netns", "del", name, check=False)


def namespace_exists(name: str) -> bool:
    out = _ip("netns", "list", check=False).stdout
    return any(line.split()[0] == name for line in out.splitlines() if line.strip())


def run_child(
    node: int, other: int, namespace: str, timeout: float, multicast: bool = True
) -> NodeResult:
    """One node with the LAN default config (multicast scouting on ``lo``, no endpoints); with
    ``multicast=False`` the same without multicast scouting (the control: nobody is found)."""
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    t0 = time.monotonic()
    opts = ZenohOptions.lan_default(
        node,
        namespace=namespace,
        multicast_interface="lo",
        multicast_scouting=multicast,
    )
    received: list[str] = []
    with ZenohTransport(opts) as t:
        try:
            peers = t.wait_for_peers(1, timeout, expected=[other])
        except TimeoutError as exc:
            return NodeResult(node, False, sorted(t.peers()), [], time.monotonic() - t0, str(exc))
        # the transport's screen (DF-ZEN-154) queues only payloads whose bytes 4 to 7 are DFP1
        hello = b"\0\0\0\0DFP1" + f"hello from {node:016x}".encode()
        want = f"hello from {other:016x}"
        deadline = time.monotonic() + timeout
        got_at: float | None = None
        # Publish until the other's hello is in, then one more second so the other gets ours too.
        while time.monotonic() < deadline and (got_at is None or time.monotonic() - got_at < 1.0):
            t.publish(hello)
            t.wait_for_packets(0.05)
            for p in t.drain():
                s = bytes(p[8:]).decode(errors="replace")
                if s not in received:
                    received.append(s)
                if s == want and got_at is None:
                    got_at = time.monotonic()
        ok = want in received
        return NodeResult(
            node,
            ok,
            sorted(peers),
            received,
            time.monotonic() - t0,
            "" if ok else "no packet",
        )


def run(
    timeout: float = 20.0, python: str = sys.executable, multicast: bool = True
) -> list[NodeResult]:
    """Create a namespace, run two child nodes in it, delete it (always). NetnsUnavailable when the
    namespace cannot be created."""
    name = f"dftest-{uuid.uuid4().hex[:8]}"
    create_namespace(name)
    procs: list[subprocess.Popen[str]] = []
    try:
        zen_ns = f"dftest/netns/{uuid.uuid4().hex[:8]}"
        for node, other in ((0xA1, 0xB2), (0xB2, 0xA1)):
            cmd = [
                "ip",
                "netns",
                "exec",
                name,
                python,
                os.path.abspath(__file__),
                "child",
            ]
            cmd += [
                "--node",
                str(node),
                "--other",
                str(other),
                "--namespace",
                zen_ns,
                "--timeout",
                str(timeout),
            ]
            if not multicast:
                cmd.append("--no-multicast")
            procs.append(
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
        results: list[NodeResult] = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=timeout * 2 + 10)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate(timeout=10)
            line = next((x for x in reversed(out.splitlines()) if x.startswith("{")), "")
            if line:
                results.append(NodeResult(**json.loads(line)))
            else:
                results.append(
                    NodeResult(0, False, [], [], 0.0, f"rc={p.returncode} stderr={err[-2000:]}")
                )
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        delete_namespace(name)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--timeout", type=float, default=20.0)
    c = sub.add_parser("child")
    c.add_argument("--node", type=int, required=True)
    c.add_argument("--other", type=int, required=True)
    c.add_argument("--namespace", required=True)
    c.add_argument("--timeout", type=float, default=20.0)
    c.add_argument(
        "--no-multicast",
        action="store_true",
        help="control run: multicast scouting off",
    )
    args = ap.parse_args(argv)
    if args.cmd == "child":
        res = run_child(args.node, args.other, args.namespace, args.timeout, not args.no_multicast)
        print(json.dumps(res.__dict__), flush=True)
        return 0 if res.ok else 1
    try:
        results = run(args.timeout)
    except NetnsUnavailable as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return 2
    for res in results:
        print(json.dumps(res.__dict__))
    return 0 if len(results) == 2 and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
