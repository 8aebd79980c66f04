"""An in-process transport hub for tests and single-process demos.

All transports created from one :class:`MemoryHub` form a cluster. ``publish`` delivers synchronously
into the bounded receive queues of the subscribed peers (all of them, or those that list the sender as a
neighbour), so delivery is deterministic. Fault injection, all deterministic for a given ``seed``:

- ``drop_rate``: each (packet, destination) delivery is dropped with this probability;
- ``duplicate_rate``: ... is delivered twice;
- ``reorder_rate``: ... is held back and delivered right after the next packet to that destination
  (or at that destination's next ``drain``);
- ``intercept(src, dst, packet) -> Sequence[bytes]``: full control (return ``[]`` to drop, several
  buffers to duplicate or replace); applied before the rates;
- ``snapshot_hook(server, chunk, buf) -> bytes``: rewrite snapshot chunk replies (corruption tests).

Liveliness: a transport is a live peer of every other transport of the hub from creation until
:meth:`MemoryTransport.close`, except while :meth:`MemoryHub.cut` separates the two (a partition:
neither sees the other live nor receives its packets, until :meth:`MemoryHub.heal`). Snapshot queries go through the same chunk encoding and verification as
over Zenoh (:mod:`delta_fabric.snapshot`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import ErrorCode
from delta_fabric.snapshot import (
    DEFAULT_CHUNK_SIZE,
    ChunkRequest,
    SnapshotError,
    SnapshotErrorKind,
    SnapshotServer,
    fetch_snapshot_from,
)
from delta_fabric.transports.base import (
    DEFAULT_QUEUE_BYTES,
    DEFAULT_QUEUE_CAPACITY,
    PacketQueue,
    PeerTimeoutError,
    SnapshotProvider,
    TransportClosedError,
    TransportStats,
    check_node_id,
)

__all__ = ["Intercept", "MemoryHub", "MemoryTransport", "SnapshotHook"]

Intercept = Callable[[int, int, bytes], Sequence[bytes]]
SnapshotHook = Callable[[int, int, bytes], bytes]


class MemoryHub:
    """The shared medium of a set of :class:`MemoryTransport`. Thread-safe."""

    def __init__(
        self,
        *,
        seed: int = 0,
        drop_rate: float = 0.0,
        duplicate_rate: float = 0.0,
        reorder_rate: float = 0.0,
        intercept: Intercept | None = None,
        snapshot_hook: SnapshotHook | None = None,
    ) -> None:
        for name, rate in (
            ("drop_rate", drop_rate),
            ("duplicate_rate", duplicate_rate),
            ("reorder_rate", reorder_rate),
        ):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {rate}")
        self.drop_rate = drop_rate
        self.duplicate_rate = duplicate_rate
        self.reorder_rate = reorder_rate
        self.intercept = intercept
        self.snapshot_hook = snapshot_hook
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._nodes: dict[int, MemoryTransport] = {}
        self._held: dict[int, bytes] = {}
        self._cuts: set[frozenset[int]] = set()

    def cut(self, a: int, b: int) -> None:
        """Partition ``a`` from ``b`` (both ways): each stops seeing the other live and its packets
        are not delivered (lost, as over a cut link), until :meth:`heal`. Ids need not be live."""
        a, b = check_node_id(a), check_node_id(b)
        if a == b:
            raise ValueError("a node cannot be cut from itself")
        with self._lock:
            self._cuts.add(frozenset((a, b)))
            self._changed.notify_all()

    def heal(self, a: int, b: int) -> None:
        """Ends the cut between ``a`` and ``b`` (nothing lost meanwhile is delivered)."""
        with self._lock:
            self._cuts.discard(frozenset((check_node_id(a), check_node_id(b))))
            self._changed.notify_all()

    def transport(
        self,
        node_id: int,
        *,
        neighbours: Sequence[int] | None = None,
        queue_capacity: int = DEFAULT_QUEUE_CAPACITY,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
    ) -> MemoryTransport:
        """A new transport for ``node_id`` on this hub (``ValueError`` if the id is already live)."""
        return MemoryTransport(
            self,
            node_id,
            neighbours=neighbours,
            queue_capacity=queue_capacity,
            queue_bytes=queue_bytes,
        )

    # internal -------------------------------------------------------------------------------------------
    def _join(self, t: MemoryTransport) -> None:
        with self._lock:
            if t.node_id in self._nodes:
                raise ValueError(f"node {t.node_id:016x} is already live on this hub")
            self._nodes[t.node_id] = t
            self._changed.notify_all()

    def _leave(self, t: MemoryTransport) -> None:
        with self._lock:
            if self._nodes.get(t.node_id) is t:
                del self._nodes[t.node_id]
            self._held.pop(t.node_id, None)
            self._changed.notify_all()

    def _live(self, me: int) -> frozenset[int]:
        """The live transports that ``me`` sees (itself excluded): not cut from it."""
        with self._lock:
            return frozenset(
                n for n in self._nodes if n != me and frozenset((n, me)) not in self._cuts
            )

    def _deliver(self, src: int, packet: bytes) -> None:
        with self._lock:
            for dst, t in sorted(self._nodes.items()):
                if dst == src or not t._subscribes_to(src) or frozenset((src, dst)) in self._cuts:
                    continue
                bufs: Sequence[bytes] = [packet]
                if self.intercept is not None:
                    bufs = [bytes(b) for b in self.intercept(src, dst, packet)]
                for buf in bufs:
                    if self.drop_rate and self._rng.random() < self.drop_rate:
                        continue
                    copies = (
                        2 if self.duplicate_rate and self._rng.random() < self.duplicate_rate else 1
                    )
                    for _ in range(copies):
                        self._push(dst, t, buf)

    def _push(self, dst: int, t: MemoryTransport, buf: bytes) -> None:
        held = self._held.pop(dst, None)
        if held is not None:
            t._queue.push(buf)
            t._queue.push(held)
        elif self.reorder_rate and self._rng.random() < self.reorder_rate:
            self._held[dst] = buf
        else:
            t._queue.push(buf)

    def _release_held(self, dst: int) -> None:
        with self._lock:
            held = self._held.pop(dst, None)
            t = self._nodes.get(dst)
            if held is not None and t is not None:
                t._queue.push(held)

    def _query(self, requester: int, server: int, chunk: int, chunk_size: int) -> bytes:
        with self._lock:
            t = None if frozenset((requester, server)) in self._cuts else self._nodes.get(server)
            srv = None if t is None else t._server
        if srv is None:
            raise SnapshotError(
                SnapshotErrorKind.NO_SERVER, f"node {server:016x} serves no snapshot"
            )
        try:
            buf = srv.answer({"chunk": str(chunk), "chunk_size": str(chunk_size)})
        except SnapshotError as exc:
            raise SnapshotError(SnapshotErrorKind.SERVER_ERROR, str(exc)) from exc
        if self.snapshot_hook is not None:
            buf = self.snapshot_hook(server, chunk, buf)
        return buf

    def _info(self, requester: int, server: int | None) -> dict[int, dict[str, Any]]:
        """The info objects (DF-ZEN-6) of ``server`` (None: every node ``requester`` sees) that
        serve one; a provider that fails answers nothing, as a Zenoh error reply does."""
        with self._lock:
            targets = [
                (n, t)
                for n, t in sorted(self._nodes.items())
                if n != requester
                and (server is None or n == server)
                and frozenset((requester, n)) not in self._cuts
            ]
        out: dict[int, dict[str, Any]] = {}
        for n, t in targets:  # outside the hub's lock: a provider takes its node's own lock
            provider = t._info_provider
            if provider is None:
                continue
            try:
                out[n] = {"node": f"{n:016x}", **provider()}
            except Exception:  # a failing provider answers nothing
                continue
        return out

    def _wait_changed(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)


class MemoryTransport:
    """One node on a :class:`MemoryHub`; implements :class:`~delta_fabric.transports.base.Transport`."""

    def __init__(
        self,
        hub: MemoryHub,
        node_id: int,
        *,
        neighbours: Sequence[int] | None = None,
        queue_capacity: int = DEFAULT_QUEUE_CAPACITY,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
    ) -> None:
        self._node_id = check_node_id(node_id)
        self._hub = hub
        self.neighbours: frozenset[int] | None = (
            None if neighbours is None else frozenset(check_node_id(n) for n in neighbours)
        )
        self._queue = PacketQueue(queue_capacity, queue_bytes)
        self._server: SnapshotServer | None = None
        self._info_provider: Callable[[], Mapping[str, Any]] | None = None
        self._closed = False
        self._published_packets = 0
        self._published_bytes = 0
        hub._join(self)

    @property
    def node_id(self) -> int:
        return self._node_id

    def _subscribes_to(self, src: int) -> bool:
        return self.neighbours is None or src in self.neighbours

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosedError(f"transport of node {self._node_id:016x} is closed")

    def publish(self, packet: bytes) -> None:
        self._check_open()
        data = bytes(packet)
        self._published_packets += 1
        self._published_bytes += len(data)
        self._hub._deliver(self._node_id, data)

    def drain(self, max_packets: int | None = None) -> list[bytes]:
        self._hub._release_held(self._node_id)
        return self._queue.drain(max_packets)

    def wait_for_packets(self, timeout: float) -> bool:
        self._hub._release_held(self._node_id)
        return self._queue.wait_nonempty(timeout)

    def peers(self) -> frozenset[int]:
        if self._closed:
            return frozenset()
        return self._hub._live(self._node_id)

    def wait_for_peers(
        self, n: int, timeout: float, *, expected: Collection[int] | None = None
    ) -> frozenset[int]:
        self._check_open()
        want = (
            frozenset(check_node_id(e) for e in expected)
            if expected is not None
            else self.neighbours
        )
        deadline = time.monotonic() + timeout
        while True:
            live = self.peers()
            if len(live) >= n and (expected is None or want is None or want <= live):
                return live
            left = deadline - time.monotonic()
            if left <= 0:
                missing = frozenset() if want is None else want - live
                raise PeerTimeoutError(n, live, missing, timeout)
            self._hub._wait_changed(min(left, 0.1))

    def serve_snapshot(self, provider: SnapshotProvider) -> None:
        self._check_open()
        self._server = SnapshotServer(self._node_id, provider)

    def fetch_snapshot(
        self,
        peer: int | None,
        fingerprint: bytes,
        timeout: float = 30.0,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        num_params: int | None = None,
        attempts: int = 3,
    ) -> tuple[NDArray[np.float32], int]:
        """See :meth:`Transport.fetch_snapshot`; ``num_params``: the joiner's N (checked against
        ``total``); ``attempts``: rounds over the candidate servers, with back-off (DF-ZEN-12)."""
        self._check_open()
        target = None if peer is None else check_node_id(peer)

        def candidates() -> list[int]:
            return [target] if target is not None else sorted(self.peers())

        def request_for(server: int) -> ChunkRequest:
            return lambda chunk, size, _left: self._hub._query(self._node_id, server, chunk, size)

        anchor, first = fetch_snapshot_from(
            request_for,
            candidates,
            fingerprint,
            timeout,
            chunk_size=chunk_size,
            num_params=num_params,
            attempts=attempts,
        )
        return anchor, first.incarnation

    def take_screened(self) -> dict[ErrorCode, int]:
        """The hub queues everything it delivers (no pre-queue screen): always ``{}``."""
        return {}

    def set_members(self, members: Collection[int] | None, *, live: bool = False) -> None:
        """Ignored: the hub has no pre-queue checks; the engine still applies DF-RCV-51."""

    def serve_info(self, provider: Callable[[], Mapping[str, Any]] | None) -> None:
        """Answer info queries (`info`) with ``{"node": <this id>, **provider()}``."""
        self._info_provider = provider

    def info(self, peer: int | None = None, timeout: float = 2.0) -> dict[int, dict[str, Any]]:
        """The info objects of ``peer`` (None: every live peer serving one) -> ``{node: info}``;
        answered at once (``timeout`` is not needed in process)."""
        self._check_open()
        return self._hub._info(self._node_id, None if peer is None else check_node_id(peer))

    @property
    def stats(self) -> TransportStats:
        rp, rb, dp, db, qp, qb = self._queue.counters()
        return TransportStats(
            published_packets=self._published_packets,
            published_bytes=self._published_bytes,
            received_packets=rp,
            received_bytes=rb,
            dropped_packets=dp,
            dropped_bytes=db,
            queued_packets=qp,
            queued_bytes=qb,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server = None
        self._info_provider = None
        self._hub._leave(self)

    def __enter__(self) -> MemoryTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
