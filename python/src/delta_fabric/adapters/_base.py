"""Framework-independent part of the adapters: the per-step loop around an `Engine` and a transport.

A framework adapter supplies three operations on its own weight storage, all in the manifest's
canonical flat layout (DF-MAN-3):

* ``_gather() -> NDArray[float32]``: the active vector (O(N), only on sync steps);
* ``_apply(indices, values)``: ``active[i] += values`` for sorted unique flat indices (O(k));
* ``_load(flat)``: overwrite every weight with a flat vector (bootstrap from a snapshot).

`FabricBase.step` drains the transport without waiting, hands what arrived to the engine (which
applies the aggregate to the anchor), applies the same aggregate to the active weights, generates on
every ``sync_interval``-th step and publishes own and relay packets. A step with no sync and no
traffic does O(1) work: one ``drain`` call that returns nothing, one modulo.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine, ReceiveResult, Snapshot
from delta_fabric.manifest import Manifest
from delta_fabric.snapshot import SnapshotError, SnapshotSource
from delta_fabric.state import Admission
from delta_fabric.transports.base import Transport
from delta_fabric.wire import decode_packet

__all__ = ["Bootstrap", "FabricBase", "SnapshotUnavailable", "default_incarnation"]

Bootstrap = bool | Literal["auto"]

#: Upper bound on packets taken from the transport in one step (the rest wait for the next step).
DEFAULT_MAX_DRAIN = 4096


class SnapshotUnavailable(RuntimeError):
    """A bootstrap was required but no live peer delivered a valid snapshot in time."""


def default_incarnation() -> int:
    """Microseconds since the Unix epoch (DF-RCV-4's recommendation; increasing across restarts)."""
    return max(1, time.time_ns() // 1000)


class FabricBase:
    """The adapter loop shared by the PyTorch and NumPy adapters (see module docstring).

    Subclasses call `_init_engine` once their tensors are known and implement `_gather`, `_apply`
    and `_load`.
    """

    manifest: Manifest
    engine: Engine

    def __init__(
        self,
        transport: Transport,
        config: SyncConfig,
        *,
        node_id: int,
        incarnation: int | None,
        fast_selection: bool = False,
        max_drain: int = DEFAULT_MAX_DRAIN,
        framework: str = "numpy",
        track_hops: bool = False,
    ) -> None:
        if max_drain < 1:
            raise ValueError("max_drain must be >= 1")
        self.transport = transport
        self.framework = framework
        self.config = config
        self.node_id = int(node_id)
        self._incarnation_arg = incarnation
        self.fast_selection = fast_selection
        self.track_hops = track_hops
        self.max_drain = max_drain
        self.steps = 0
        self.syncs = 0
        self.bytes_sent = 0
        self.packets_sent = 0
        self.own_entries_sent = 0
        self.own_values_sent = 0
        self.relay_entries_sent = 0
        self.relay_values_sent = 0
        self.values_received_applied = 0
        self.accepted_by_hops: dict[int, int] = {}
        self._origin_progress: dict[int, tuple[int, int]] = {}
        self.bootstrapped = False
        self.snapshots_served = 0
        self._lock = threading.Lock()  # guards the anchor against a concurrent snapshot request
        self._closed = False

    # ----------------------------------------------------------------------------------------------
    # hooks for subclasses
    def _gather(self) -> NDArray[np.float32]:
        raise NotImplementedError

    def _apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        raise NotImplementedError

    def _load(self, flat: NDArray[np.float32]) -> None:
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------------
    def _init_engine(
        self, manifest: Manifest, bootstrap: Bootstrap, bootstrap_timeout: float
    ) -> None:
        """Create the engine with anchor = current weights, or = a peer's snapshot (bootstrap)."""
        self.manifest = manifest
        snapshot: Snapshot | None = None
        if bootstrap is True or bootstrap == "auto":
            snapshot = self._fetch_snapshot(required=bootstrap is True, timeout=bootstrap_timeout)
        incarnation = self._incarnation_arg
        if incarnation is None:
            incarnation = default_incarnation()
        if snapshot is not None:
            self._load(snapshot.anchor)  # active = anchor = snapshot (DF-ZEN-5)
            self.engine = Engine.from_snapshot(
                manifest, self.config, self.node_id, incarnation, snapshot
            )
            self.bootstrapped = True
        else:
            self.engine = Engine(manifest, self.config, self.node_id, incarnation, self._gather())
        self.transport.serve_snapshot(self._snapshot_source)

    def _fetch_snapshot(self, *, required: bool, timeout: float) -> Snapshot | None:
        """A verified snapshot from any live peer (the transport checks chunks and the digest)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            remaining = deadline - time.monotonic()
            try:
                anchor, _server_incarnation = self.transport.fetch_snapshot(
                    None, self.manifest.fingerprint, timeout=max(0.05, remaining)
                )
            except (SnapshotError, TimeoutError, OSError) as exc:
                last = exc
            else:
                snap = Snapshot(
                    self.manifest.fingerprint, np.asarray(anchor, dtype=np.float32).copy()
                )
                if self._snapshot_ok(snap):
                    return snap
                last = ValueError("snapshot of the wrong size or with a non-finite value")
            if not required or time.monotonic() >= deadline:
                break
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        if required:
            raise SnapshotUnavailable(
                f"no valid snapshot from a live peer within {timeout:.1f}s: {last}"
            )
        return None

    def _snapshot_ok(self, snap: Snapshot) -> bool:
        a = np.asarray(snap.anchor)
        return (
            bytes(snap.fingerprint) == self.manifest.fingerprint
            and a.dtype == np.float32
            and a.shape == (self.manifest.num_params,)
            and bool(np.isfinite(a).all())
        )

    # ----------------------------------------------------------------------------------------------
    @property
    def incarnation(self) -> int:
        return self.engine.incarnation

    @property
    def num_params(self) -> int:
        return self.manifest.num_params

    @property
    def fingerprint(self) -> bytes:
        return self.manifest.fingerprint

    def snapshot(self) -> Snapshot:
        """A consistent copy of the anchor (safe to call from a transport thread)."""
        with self._lock:
            return self.engine.snapshot()

    def _snapshot_source(self) -> SnapshotSource:
        """The provider given to ``transport.serve_snapshot`` (runs on the network thread)."""
        with self._lock:  # SnapshotSource copies the anchor: a consistent state between two steps
            src = SnapshotSource(
                self.engine.incarnation,
                self.manifest.fingerprint,
                self.engine.anchor,
                self.framework,
            )
        self.snapshots_served += 1
        return src

    def step(self) -> int:
        """Call once after every local optimizer step. Returns the number of packets published.

        Never waits for packets (the transport's queue is drained as it is); only ``publish`` can
        block, under the transport's congestion control. O(1) when this is not a sync step and
        nothing arrived.
        """
        if self._closed:
            raise RuntimeError("fabric is closed")
        self.steps += 1
        packets: Sequence[bytes] = self.transport.drain(self.max_drain)
        sync = self.steps % self.config.sync_interval == 0
        if not packets and not sync:
            return 0
        return self._process(packets, sync)

    def poll(self) -> int:
        """Receive, apply and relay what is pending without generating (e.g. while idle or winding
        down); does not count as a step. Returns the number of packets published."""
        packets = self.transport.drain(self.max_drain)
        return self._process(packets, False) if packets else 0

    def sync_now(self) -> int:
        """Receive what is pending and generate now, regardless of the step count."""
        return self._process(self.transport.drain(self.max_drain), True)

    def _process(self, packets: Sequence[bytes], sync: bool) -> int:
        relay = []
        own = []
        with self._lock:
            if packets:
                res = self.engine.receive(packets)
                if self.track_hops:
                    self._count_hops(packets, res)
                if res.indices.size:
                    self._apply(res.indices, res.values)
                    self.values_received_applied += int(res.indices.size)
                relay = res.relay
            if sync:
                self.syncs += 1
                own = self.engine.generate(self._gather(), fast=self.fast_selection)
            out = self.engine.pack(own, relay) if (own or relay) else []
        for e in own:
            self.own_entries_sent += 1
            self.own_values_sent += int(e.indices.size)
        for e in relay:
            self.relay_entries_sent += 1
            self.relay_values_sent += int(e.indices.size)
        for pkt in out:
            self.transport.publish(pkt)
            self.bytes_sent += len(pkt)
            self.packets_sent += 1
        return len(out)

    def _count_hops(self, packets: Sequence[bytes], res: ReceiveResult) -> None:
        """Histogram of the hop count of accepted entries and the latest (incarnation, seq) accepted
        per origin (``track_hops``: tests, the demo's pacing and report). Costs a second decode of
        every accepted packet, hence off by default."""
        for buf, outcome, verdicts in zip(packets, res.outcomes, res.entry_outcomes, strict=False):
            if outcome is not None or Admission.ACCEPTED not in verdicts:
                continue
            pkt = decode_packet(buf, self.config.max_packet_size)
            for e, v in zip(pkt.entries, verdicts, strict=False):
                if v is not Admission.ACCEPTED:
                    continue
                self.accepted_by_hops[e.hops] = self.accepted_by_hops.get(e.hops, 0) + 1
                cur = self._origin_progress.get(e.origin)
                if cur is None or (e.incarnation, e.seq) > cur:
                    self._origin_progress[e.origin] = (e.incarnation, e.seq)

    def origin_progress(self) -> dict[int, tuple[int, int]]:
        """Latest ``(incarnation, seq)`` accepted from each origin (only with ``track_hops``)."""
        return dict(self._origin_progress)

    def stats(self) -> dict[str, Any]:
        """Counters: steps, syncs, bytes and packets sent, own/relayed entries, receive counters."""
        transport_stats = dataclasses.asdict(self.transport.stats)
        return {
            "node_id": f"{self.node_id:016x}",
            "incarnation": self.engine.incarnation,
            "num_params": self.num_params,
            "fingerprint": self.fingerprint.hex(),
            "bootstrapped": self.bootstrapped,
            "steps": self.steps,
            "syncs": self.syncs,
            "bytes_sent": self.bytes_sent,
            "packets_sent": self.packets_sent,
            "own_entries_sent": self.own_entries_sent,
            "own_values_sent": self.own_values_sent,
            "relay_entries_sent": self.relay_entries_sent,
            "relay_values_sent": self.relay_values_sent,
            "values_received_applied": self.values_received_applied,
            "accepted_by_hops": {str(h): n for h, n in sorted(self.accepted_by_hops.items())},
            "snapshots_served": self.snapshots_served,
            "receive": self.engine.counters.to_json(),
            "transport": transport_stats,
        }

    def close(self, *, close_transport: bool = False) -> None:
        """Stop stepping; optionally close the transport."""
        self._closed = True
        if close_transport:
            self.transport.close()
