"""Compatibility shims over `delta_fabric.fabric.Fabric` and `delta_fabric.stores` (kept so that
older code keeps working; new code uses ``Fabric(store, transport, ...)``).

* `delta_fabric.adapters.torch.Fabric`: a PyTorch ``nn.Module`` (import it from its module; torch is
  imported only there);
* `delta_fabric.adapters.numpy.NumpyFabric`: named float NumPy arrays.
"""

from __future__ import annotations

from delta_fabric.adapters._base import (
    Bootstrap,
    FabricBase,
    SnapshotUnavailable,
    default_incarnation,
)
from delta_fabric.adapters.numpy import NumpyFabric

__all__ = ["Bootstrap", "FabricBase", "NumpyFabric", "SnapshotUnavailable", "default_incarnation"]
