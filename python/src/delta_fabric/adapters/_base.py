"""Compatibility shim: the node loop now lives in `delta_fabric.fabric` (`Fabric` drives any
`delta_fabric.store.WeightStore`). ``FabricBase`` is `delta_fabric.fabric.Fabric`."""

from __future__ import annotations

from delta_fabric.fabric import (
    DEFAULT_MAX_DRAIN,
    Bootstrap,
    Fabric,
    SnapshotUnavailable,
    default_incarnation,
)

FabricBase = Fabric

__all__ = [
    "DEFAULT_MAX_DRAIN",
    "Bootstrap",
    "FabricBase",
    "SnapshotUnavailable",
    "default_incarnation",
]
