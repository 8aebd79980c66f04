"""Network bindings of DeltaFabric: the :class:`Transport` contract, an in-process hub for tests, and the
Zenoh binding (spec section 9), imported on demand because it needs the optional ``eclipse-zenoh``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from delta_fabric.snapshot import SnapshotError, SnapshotErrorKind, SnapshotSource
from delta_fabric.transports.base import (
    DuplicateNodeError,
    PacketQueue,
    PeerTimeoutError,
    SnapshotProvider,
    Transport,
    TransportClosedError,
    TransportError,
    TransportStats,
    node_hex,
)
from delta_fabric.transports.memory import MemoryHub, MemoryTransport

if TYPE_CHECKING:
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

__all__ = [
    "DuplicateNodeError",
    "MemoryHub",
    "MemoryTransport",
    "PacketQueue",
    "PeerTimeoutError",
    "SnapshotError",
    "SnapshotErrorKind",
    "SnapshotProvider",
    "SnapshotSource",
    "Transport",
    "TransportClosedError",
    "TransportError",
    "TransportStats",
    "ZenohOptions",
    "ZenohTransport",
    "node_hex",
]


def __getattr__(name: str) -> Any:
    if name in ("ZenohOptions", "ZenohTransport"):
        from delta_fabric.transports import zenoh as _zenoh

        return getattr(_zenoh, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
