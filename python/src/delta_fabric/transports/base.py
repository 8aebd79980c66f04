"""The transport contract every DeltaFabric network binding fulfils, and the pieces they share.

A transport moves opaque packet bytes (already encoded by :mod:`delta_fabric.wire`) between the nodes of
one cluster, tracks which peers are alive, and serves / fetches anchor snapshots for late joiners. It
never decodes packets: the sans-IO :class:`~delta_fabric.engine.Engine` does.

Receive path: packets land in a bounded, thread-safe :class:`PacketQueue` (filled from the network
thread, never blocking it) and the training loop takes them with :meth:`Transport.drain`, which never
blocks either.

Overflow policy (both bounds, packets and bytes): **drop the oldest packet of the largest sender** until
the new one fits (DF-ZEN-152: each sender has its share, so a flood evicts only its own packets), and
count them in :attr:`TransportStats.dropped_packets` / ``dropped_bytes``. Rationale: the
receive callback must never block (blocking it would stall the network thread and, through congestion
control BLOCK, the *senders'* training steps), and every delta is additive, so no packet is worth more
than another; dropping the oldest keeps the queue's content the most recent traffic, which is also what
the replay window (DF-RCV-3) favours. A single packet larger than the byte bound is still accepted when
the queue is empty, so the bound never makes a packet undeliverable.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import ConfigurationError, DeltaFabricError, ErrorCode
from delta_fabric.snapshot import SnapshotSource

__all__ = [
    "DEFAULT_QUEUE_BYTES",
    "DEFAULT_QUEUE_CAPACITY",
    "DuplicateNodeError",
    "PacketQueue",
    "PeerTimeoutError",
    "SnapshotProvider",
    "TokenBuckets",
    "Transport",
    "TransportClosedError",
    "TransportError",
    "TransportStats",
    "ZenohConfigError",
    "check_node_id",
    "node_hex",
]

#: Default bound on queued packets per transport.
DEFAULT_QUEUE_CAPACITY = 1024
#: Default bound on queued bytes per transport (16 maximum-size packets).
DEFAULT_QUEUE_BYTES = 256 * 1024 * 1024

_U64_MAX = (1 << 64) - 1

#: What :meth:`Transport.serve_snapshot` takes: called on the network thread for each snapshot request
#: (at chunk 0; later chunks of the same request reuse the same snapshot), must be thread-safe.
SnapshotProvider = Callable[[], SnapshotSource]


class TransportError(DeltaFabricError):
    """A transport operation failed (not a protocol rejection)."""


class TransportClosedError(TransportError):
    """The transport was used after :meth:`Transport.close`."""


class DuplicateNodeError(TransportError, ConfigurationError):
    """Another live node of the namespace already uses this node id (DF-ZEN-7: ids are unique); seen
    through its liveliness token when the transport opened. ``node_id`` and ``namespace`` say which."""

    def __init__(self, node_id: int, namespace: str) -> None:
        self.node_id = node_id
        self.namespace = namespace
        super().__init__(
            f"node id {node_hex(node_id)} is already used by a live node of namespace {namespace!r}: "
            "give every node its own id (DELTA_FABRIC_NODE_ID, or leave it unset for a random one)"
        )


class ZenohConfigError(TransportError, ConfigurationError):
    """The Zenoh configuration (a ``--zenoh-config`` / ``DELTA_FABRIC_ZENOH_CONFIG`` file, or an
    endpoint) cannot be loaded; the message names the file and Zenoh's reason, on one line."""


class PeerTimeoutError(TransportError, TimeoutError):
    """:meth:`Transport.wait_for_peers` ran out of time.

    ``present``: the live peers at the deadline; ``needed``: how many were awaited; ``missing``: the ids
    known to be expected but absent (the configured neighbours, or the ``expected`` argument), empty when
    the transport cannot know who should be there; ``missing_count``: how many more peers were needed.
    ``detail``: the transport's diagnosis (likely causes, captured log lines), appended to the message.
    """

    def __init__(
        self,
        needed: int,
        present: frozenset[int],
        missing: frozenset[int],
        timeout: float,
        detail: str = "",
    ) -> None:
        self.detail = detail
        self.needed = needed
        self.present = present
        self.missing = missing
        self.timeout = timeout
        self.missing_count = max(0, needed - len(present))
        who = ", ".join(node_hex(m) for m in sorted(missing)) if missing else "unknown ids"
        have = ", ".join(node_hex(p) for p in sorted(present)) or "none"
        super().__init__(
            f"waited {timeout:.3g}s for {needed} peer(s), {len(present)} present ({have}); "
            f"missing {self.missing_count}: {who}" + (f"\n{detail}" if detail else "")
        )


def check_node_id(node_id: int) -> int:
    """A node id must be an integer in ``[1, 2**64)`` (spec section 9)."""
    if isinstance(node_id, bool) or not isinstance(node_id, (int, np.integer)):
        raise TypeError(f"node id must be an int, got {type(node_id).__name__}")
    if not 1 <= int(node_id) <= _U64_MAX:
        raise ValueError(f"node id must be in [1, 2**64), got {node_id}")
    return int(node_id)


def node_hex(node_id: int) -> str:
    """The node id as 16 lowercase hex digits, as in the key expressions (DF-ZEN)."""
    return f"{check_node_id(node_id):016x}"


@dataclass(frozen=True)
class TransportStats:
    """Counters of one transport (a consistent copy; the live counters keep moving)."""

    published_packets: int = 0
    published_bytes: int = 0
    received_packets: int = 0
    received_bytes: int = 0
    dropped_packets: int = 0
    dropped_bytes: int = 0
    queued_packets: int = 0
    queued_bytes: int = 0
    #: Refused before the queue: on the delta key of a non-member (DF-ZEN-151).
    rejected_not_member: int = 0
    #: Refused before the queue: over the sender's rate limit (DF-ZEN-153).
    rate_limited: int = 0
    #: Snapshot queries answered with an error because they named no member (DF-ZEN-155).
    snapshot_refused: int = 0

    @property
    def packets_dropped(self) -> int:
        """The spec's name (DF-ZEN-17) for :attr:`dropped_packets`: received packets discarded unprocessed
        because the receive queue was full."""
        return self.dropped_packets


class TokenBuckets:
    """Per-sender token buckets (DF-ZEN-153): each sender may queue ``rate`` packets per second on
    average and ``burst`` at once; ``rate = 0`` turns the limit off. At most ``max_senders`` buckets
    are kept: a full bucket is the same as no bucket, so full ones are forgotten first, and while
    none is full every further sender shares one overflow bucket. Not thread-safe (the queue's lock
    guards it)."""

    def __init__(
        self,
        rate: float,
        burst: float,
        *,
        max_senders: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (rate >= 0.0 and rate != float("inf")):
            raise ValueError(f"rate must be a finite number >= 0, got {rate}")
        if rate > 0 and not burst >= 1.0:
            raise ValueError(f"burst must be >= 1 when a rate is set, got {burst}")
        self.rate = float(rate)
        self.burst = float(burst)
        self.max_senders = max_senders
        self._clock = clock
        self._buckets: dict[int, tuple[float, float]] = {}  # sender -> (tokens, time)

    def take(self, sender: int) -> bool:
        """One packet of ``sender``: True when its bucket holds a token (taken), False when over."""
        if self.rate <= 0:
            return True
        now = self._clock()
        buckets = self._buckets
        key = sender
        if key not in buckets and len(buckets) >= self.max_senders:
            self._forget_full(now)
            if len(buckets) >= self.max_senders:
                key = -1  # the shared overflow bucket
        tokens, t = buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - t) * self.rate)
        if tokens < 1.0:
            buckets[key] = (tokens, now)
            return False
        buckets[key] = (tokens - 1.0, now)
        return True

    def _forget_full(self, now: float) -> None:
        full = [
            s
            for s, (tokens, t) in self._buckets.items()
            if tokens + (now - t) * self.rate >= self.burst
        ]
        for s in full:
            del self._buckets[s]


class PacketQueue:
    """Bounded queue of received packets with one share per sender (DF-ZEN-152), safe to fill from
    any thread; :meth:`push` never blocks for longer than a few dict operations under a lock.

    ``sender``: who sent a packet as the transport sees it (the node id of the Zenoh key it came on;
    0 when the transport cannot tell). Overflow: the oldest packet of the sender holding the most
    queued packets (count bound) or bytes (byte bound) leaves, ties going to the sender whose oldest
    packet is the oldest; a sender that holds less than another is never evicted, so a flood from one
    sender evicts only its own packets once it holds more than any member. With a single sender this
    is drop-oldest. ``rate`` / ``burst``: the per-sender token bucket (`TokenBuckets`); packets over it
    are refused before the queue and counted in ``rate_limited``. :meth:`drain` returns packets in
    arrival order."""

    def __init__(
        self,
        capacity: int = DEFAULT_QUEUE_CAPACITY,
        max_bytes: int = DEFAULT_QUEUE_BYTES,
        *,
        rate: float = 0.0,
        burst: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        if max_bytes < 1:
            raise ValueError(f"queue byte bound must be >= 1, got {max_bytes}")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._buckets = TokenBuckets(rate, burst, clock=clock)
        # sender -> its queued (arrival number, packet), oldest first; byte totals per sender
        self._q: dict[int, deque[tuple[int, bytes]]] = {}
        self._sender_bytes: dict[int, int] = {}
        self._len = 0
        self._bytes = 0
        self._arrivals = 0
        self._lock = threading.Lock()
        self._nonempty = threading.Condition(self._lock)
        self.received_packets = 0
        self.received_bytes = 0
        self.dropped_packets = 0
        self.dropped_bytes = 0
        self.rate_limited = 0

    def _evict(self, by_bytes: bool) -> None:
        """Drop the oldest packet of the largest sender (see the class docstring)."""
        q, sb = self._q, self._sender_bytes
        victim = max(q, key=lambda s: (sb[s] if by_bytes else len(q[s]), -q[s][0][0]))
        dq = q[victim]
        _, old = dq.popleft()
        n = len(old)
        sb[victim] -= n
        if not dq:
            del q[victim], sb[victim]
        self._len -= 1
        self._bytes -= n
        self.dropped_packets += 1
        self.dropped_bytes += n

    def push(self, packet: bytes, sender: int = 0) -> bool:
        """Queue ``packet`` of ``sender``; False when the sender's rate limit refused it."""
        n = len(packet)
        with self._lock:
            self.received_packets += 1
            self.received_bytes += n
            if not self._buckets.take(sender):
                self.rate_limited += 1
                return False
            while self._len and self._len >= self.capacity:
                self._evict(by_bytes=False)
            while self._len and self._bytes + n > self.max_bytes:
                self._evict(by_bytes=True)
            was_empty = not self._len
            self._q.setdefault(sender, deque()).append((self._arrivals, packet))
            self._sender_bytes[sender] = self._sender_bytes.get(sender, 0) + n
            self._arrivals += 1
            self._len += 1
            self._bytes += n
            if was_empty:
                # waiters wait only for an empty queue to fill: no wake-up per packet
                self._nonempty.notify_all()
            return True

    def _pop_oldest(self) -> bytes:
        q = self._q
        sender = min(q, key=lambda s: q[s][0][0])
        dq = q[sender]
        _, pkt = dq.popleft()
        self._sender_bytes[sender] -= len(pkt)
        if not dq:
            del q[sender], self._sender_bytes[sender]
        self._len -= 1
        self._bytes -= len(pkt)
        return pkt

    def drain(self, max_packets: int | None = None) -> list[bytes]:
        if max_packets is not None and max_packets < 0:
            raise ValueError("max_packets must be >= 0")
        if not self._len:  # nothing queued (read without the lock: a packet that arrives
            return []  # meanwhile is drained at the next call, as if it arrived just after)
        with self._lock:
            if max_packets is None or max_packets >= self._len:
                items = [item for dq in self._q.values() for item in dq]
                items.sort(key=lambda item: item[0])
                self._q.clear()
                self._sender_bytes.clear()
                self._len = 0
                self._bytes = 0
                return [pkt for _, pkt in items]
            return [self._pop_oldest() for _ in range(max_packets)]

    def queued_by_sender(self) -> dict[int, int]:
        """Packets queued now per sender."""
        with self._lock:
            return {s: len(dq) for s, dq in self._q.items()}

    def wait_nonempty(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a packet is queued (for tests and demos, not the step)."""
        with self._nonempty:
            return self._nonempty.wait_for(lambda: bool(self._len), timeout=max(0.0, timeout))

    def __len__(self) -> int:
        with self._lock:
            return self._len

    def counters(self) -> tuple[int, int, int, int, int, int]:
        with self._lock:
            return (
                self.received_packets,
                self.received_bytes,
                self.dropped_packets,
                self.dropped_bytes,
                self._len,
                self._bytes,
            )


@runtime_checkable
class Transport(Protocol):
    """What the engine loop needs from a network binding (memory hub, Zenoh, ...)."""

    @property
    def node_id(self) -> int:
        """This node's id (non-zero u64)."""
        ...

    def publish(self, packet: bytes) -> None:
        """Send one encoded packet to the node's subscribers (reliable; may block under congestion)."""
        ...

    def drain(self, max_packets: int | None = None) -> list[bytes]:
        """Non-blocking: the queued packets in arrival order (at most ``max_packets``)."""
        ...

    def wait_for_packets(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a packet is queued; True if one is (tests, demos)."""
        ...

    def peers(self) -> frozenset[int]:
        """Node ids of the live peers (this node excluded). The node also reads this set as
        reachability: it sends gap repair requests only to origins in it (DF-RCV-230), so a transport
        whose ``peers()`` stays empty never gets a lost entry repaired."""
        ...

    def wait_for_peers(
        self, n: int, timeout: float, *, expected: Collection[int] | None = None
    ) -> frozenset[int]:
        """Block until at least ``n`` peers are live (all of ``expected`` when given, which then must
        hold at least ``n`` ids); returns the live set. Raises :class:`PeerTimeoutError` on timeout."""
        ...

    def serve_snapshot(self, provider: SnapshotProvider) -> None:
        """Answer snapshot (and info) queries of joiners with what ``provider`` returns (replaces any
        previous provider)."""
        ...

    def fetch_snapshot(
        self, peer: int | None, fingerprint: bytes, timeout: float = 30.0
    ) -> tuple[NDArray[np.float32], int]:
        """Fetch a verified anchor snapshot from ``peer`` (None: any live peer serving one) as
        ``(anchor, incarnation of the server)``. Raises
        :class:`~delta_fabric.snapshot.SnapshotError` (typed) on any fault or timeout."""
        ...

    def take_screened(self) -> dict[ErrorCode, int]:
        """Payloads refused before the receive queue since the last call, per code (DF-ZEN-154); the
        node adds them to its rejection counters (`Engine.count_rejected`). A transport that queues
        everything returns ``{}``; a wrapper MUST pass its inner transport's counts through."""
        ...

    def set_members(self, members: Collection[int] | None, *, live: bool = False) -> None:
        """The node's configured membership (DF-RCV-51) as the transport applies it before its queue
        (DF-ZEN-151) and to snapshot answers (DF-ZEN-155); ``live``: members must also hold a live
        token (DF-ZEN-150). A transport without pre-queue checks ignores it; a wrapper MUST pass it
        through."""
        ...

    def serve_info(self, provider: Callable[[], Mapping[str, Any]] | None) -> None:
        """Answer info queries (``delta-fabric status``) with ``provider()``; a transport without
        info queries ignores it; a wrapper MUST pass it through."""
        ...

    def info(self, peer: int | None = None, timeout: float = 2.0) -> dict[int, dict[str, Any]]:
        """The info objects (DF-ZEN-6) of ``peer`` (None: every live peer that serves one) as
        ``{node: info}``, waiting at most ``timeout`` seconds; this node is left out. A node uses
        them to finish (`delta_fabric.fabric.Fabric.finish`); a wrapper MUST pass it through."""
        ...

    @property
    def stats(self) -> TransportStats:
        """A copy of the counters."""
        ...

    def close(self) -> None:
        """Release everything; idempotent. Peers see this node disappear."""
        ...
