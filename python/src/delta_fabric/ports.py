"""Free TCP ports for nodes that listen later (launchers, tests, benchmarks).

``bind(("127.0.0.1", 0))`` hands out a port from the kernel's *ephemeral* range, the range it also
uses for the source ports of outgoing connections. A port picked that way and released, for a node
that starts a moment later, can meanwhile become the source port of another connection (Zenoh opens
several), and the node's listen then fails with ``EADDRINUSE``. The ports given here lie *below*
the ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range`` on Linux, else 32768), which the
kernel never hands out as source ports; each is checked free by binding it, and a process never
gets the same port twice from this module.
"""

from __future__ import annotations

import random
import socket
import threading
from contextlib import closing
from pathlib import Path

__all__ = ["ephemeral_low", "free_port", "free_ports"]

#: Ports below this are never chosen (privileged).
LOWEST = 1024
#: How wide the range below the ephemeral range that ports are drawn from is.
SPAN = 12000

_lock = threading.Lock()
_handed_out: set[int] = set()


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The lowest port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        low = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if LOWEST < low <= 65536 else 32768


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports, free on ``host`` now and below the ephemeral range. Raises
    `ValueError` for ``n < 0`` and `RuntimeError` when no free port is found in the range."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    hi = ephemeral_low() - 1
    lo = max(LOWEST, hi - SPAN)
    rng = random.Random()
    out: list[int] = []
    with _lock:
        for _ in range(50 * SPAN):
            if len(out) == n:
                return out
            port = rng.randint(lo, hi)
            if port in _handed_out:
                continue
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with closing(socket.socket(family, socket.SOCK_STREAM)) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            out.append(port)
        if len(out) == n:
            return out
    raise RuntimeError(f"no {n} free TCP ports on {host} in [{lo}, {hi}]")


def free_port(host: str = "127.0.0.1") -> int:
    """One port of `free_ports`."""
    return free_ports(1, host)[0]
