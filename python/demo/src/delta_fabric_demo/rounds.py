"""Lockstep rounds for the demo nodes: the result of a run no longer depends on scheduling.

A demo node generates once every ``sync_interval`` steps, so the ``r``-th generation of a node is
its entry with seq ``r`` (one entry per generation: the demo's model fits one packet). `RoundGate`
wraps the node's transport and hands the fabric only the packets whose entries all belong to
rounds the node has released, in a fixed order (round, then sender); `RoundGate.wait_round` blocks
until every expected origin's round ``r`` is held. The node releases round ``r`` right after its own
``r``-th generation, once every peer's round ``r`` is there: every node then applies the same
entries at the same local step, whatever the machine load, in a fixed order (so the same f32 sums),
except that a relayed copy of an entry may arrive before the direct one and be the copy accepted
(same values, another sender: the order of one f32 sum may change, a rounding-level difference).

Without the gate (``--max-lead N``), a packet is applied at whatever step it happens to arrive; under
load the steps at which peers' deltas land move, and so does the accuracy (issue 11: the CI demo
check failed on a loaded machine). This gate is the demo's; the protocol itself stays asynchronous.
It needs every origin's entries to arrive directly (a full mesh: the demo's default of 3 nodes);
relayed-only origins are not waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.transports.base import SnapshotProvider, Transport, TransportStats
from delta_fabric.wire import decode_packet
from numpy.typing import NDArray

__all__ = ["RoundGate"]


class RoundGate:
    """A `delta_fabric.transports.base.Transport` that holds packets of rounds not yet released."""

    def __init__(self, inner: Transport, max_packet_size: int) -> None:
        self.inner = inner
        self.max_packet_size = max_packet_size
        self.released = 0
        self._held: list[tuple[int, int, int, bytes]] = []  # (round, sender, arrival, packet)
        self._arrivals = 0
        self._seen: dict[int, int] = {}  # origin -> highest seq held or handed out

    # the gate -------------------------------------------------------------------------------------
    def _pull(self) -> None:
        for buf in self.inner.drain(None):
            self._arrivals += 1
            try:
                pkt = decode_packet(buf, self.max_packet_size)
            except DecodeError:  # the engine rejects and counts it: hand it out at once
                self._held.append((0, 0, self._arrivals, buf))
                continue
            top = 0
            for e in pkt.entries:
                top = max(top, e.seq)
                if e.seq > self._seen.get(e.origin, 0):
                    self._seen[e.origin] = e.seq
            self._held.append((top, pkt.sender, self._arrivals, buf))

    def has_round(self, origins: Collection[int], r: int) -> bool:
        """Whether round ``r`` of every origin in ``origins`` has arrived."""
        self._pull()
        return all(self._seen.get(o, 0) >= r for o in origins)

    def wait_round(self, origins: Collection[int], r: int, timeout: float) -> bool:
        """Block until `has_round` (True) or ``timeout`` s pass (False)."""
        deadline = time.monotonic() + timeout
        while not self.has_round(origins, r):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.inner.wait_for_packets(min(0.05, left))
        return True

    def release(self, r: int) -> None:
        """Packets whose entries all belong to rounds ``<= r`` may be drained from now on."""
        self.released = max(self.released, r)

    def release_all(self) -> None:
        self.released = 1 << 62

    # Transport ------------------------------------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self.inner.node_id

    def publish(self, packet: bytes) -> None:
        self.inner.publish(packet)

    def drain(self, max_packets: int | None = None) -> list[bytes]:
        self._pull()
        ready = sorted(h for h in self._held if h[0] <= self.released)
        if max_packets is not None:
            ready = ready[:max_packets]
        taken = {id(h) for h in ready}
        self._held = [h for h in self._held if id(h) not in taken]
        return [h[3] for h in ready]

    def wait_for_packets(self, timeout: float) -> bool:
        return self.inner.wait_for_packets(timeout)

    def peers(self) -> frozenset[int]:
        return self.inner.peers()

    def wait_for_peers(
        self, n: int, timeout: float, *, expected: Collection[int] | None = None
    ) -> frozenset[int]:
        return self.inner.wait_for_peers(n, timeout, expected=expected)

    def serve_snapshot(self, provider: SnapshotProvider) -> None:
        self.inner.serve_snapshot(provider)

    def fetch_snapshot(
        self, peer: int | None, fingerprint: bytes, timeout: float = 30.0
    ) -> tuple[NDArray[np.float32], int]:
        return self.inner.fetch_snapshot(peer, fingerprint, timeout)

    def take_screened(self) -> dict[ErrorCode, int]:
        return self.inner.take_screened()  # DF-ZEN-154: counted by the node

    def set_members(self, members: Collection[int] | None, *, live: bool = False) -> None:
        self.inner.set_members(members, live=live)

    def serve_info(self, provider: Callable[[], Mapping[str, Any]] | None) -> None:
        self.inner.serve_info(provider)

    def info(self, peer: int | None = None, timeout: float = 2.0) -> dict[int, dict[str, Any]]:
        return self.inner.info(peer, timeout)

    @property
    def stats(self) -> TransportStats:
        return self.inner.stats

    def close(self) -> None:
        self.inner.close()
