"""NumPy adapter: keep named float NumPy arrays in sync (a generic binding for any framework).

The arrays are the active weights and are updated in place: pass arrays that share memory with your
framework's tensors (e.g. ``tensor.numpy()`` on CPU, JAX/TF host buffers you copy back) or copy them
in and out around `NumpyFabric.step`. Every array must be a writable floating array (f16, f32, f64,
...); values travel as f32 (DF-MAN). Canonical names are the mapping's keys (they must follow
DF-MAN-1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.adapters._base import DEFAULT_MAX_DRAIN, Bootstrap, FabricBase
from delta_fabric.config import SyncConfig
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.transports.base import Transport

__all__ = ["NumpyFabric"]


class NumpyFabric(FabricBase):
    """A DeltaFabric node over named float NumPy arrays (updated in place).

    Same behaviour as the PyTorch `delta_fabric.adapters.torch.Fabric`: call `step` after every
    local update; ``bootstrap`` / `join` load a live peer's snapshot into the arrays.
    """

    def __init__(
        self,
        arrays: Mapping[str, NDArray[Any]],
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        bootstrap: Bootstrap = False,
        bootstrap_timeout: float = 10.0,
        fast_selection: bool = False,
        max_drain: int = DEFAULT_MAX_DRAIN,
        track_hops: bool = False,
    ) -> None:
        cfg = config if config is not None else SyncConfig()
        super().__init__(
            transport,
            cfg,
            node_id=node_id,
            incarnation=incarnation,
            fast_selection=fast_selection,
            max_drain=max_drain,
            track_hops=track_hops,
            framework="numpy",
        )
        for name, a in arrays.items():
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{name!r}: expected a NumPy array, got {type(a).__name__}")
            if not np.issubdtype(a.dtype, np.floating):
                raise TypeError(f"{name!r}: dtype {a.dtype} is not floating")
            if not a.flags.writeable:
                raise ValueError(f"{name!r}: array is read-only")
        manifest = Manifest(TensorSpec(n, tuple(a.shape)) for n, a in arrays.items())
        self._arrays: list[NDArray[Any]] = [arrays[n] for n in manifest.names]
        self._offsets = np.asarray(manifest.offsets, dtype=np.int64)
        self._flat_views: list[NDArray[Any] | None] = [
            a.reshape(-1) if a.flags.c_contiguous else None for a in self._arrays
        ]
        self.gathers = 0
        self._init_engine(manifest, bootstrap, bootstrap_timeout)

    @classmethod
    def join(
        cls,
        arrays: Mapping[str, NDArray[Any]],
        transport: Transport,
        config: SyncConfig | None = None,
        *,
        node_id: int,
        incarnation: int | None = None,
        timeout: float = 10.0,
        track_hops: bool = False,
    ) -> NumpyFabric:
        """Late join / restart: load a live peer's snapshot into the arrays, fresh incarnation."""
        return cls(
            arrays,
            transport,
            config,
            node_id=node_id,
            incarnation=incarnation,
            bootstrap=True,
            bootstrap_timeout=timeout,
            track_hops=track_hops,
        )

    @property
    def arrays(self) -> dict[str, NDArray[Any]]:
        return dict(zip(self.manifest.names, self._arrays, strict=True))

    def _gather(self) -> NDArray[np.float32]:
        self.gathers += 1
        out = np.empty(self.manifest.num_params, dtype=np.float32)
        for i, a in enumerate(self._arrays):
            out[self._offsets[i] : self._offsets[i + 1]] = a.reshape(-1)
        return out

    def _apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        bounds = np.searchsorted(indices, self._offsets, side="left")
        for i, a in enumerate(self._arrays):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            if lo == hi:
                continue
            local = indices[lo:hi].astype(np.int64) - self._offsets[i]
            v = values[lo:hi]
            flat = self._flat_views[i]
            if flat is not None:
                if a.dtype == np.float32:
                    flat[local] = flat[local] + v  # fl32(active + agg), DF-RCV-7
                else:
                    flat[local] = (flat[local].astype(np.float32) + v).astype(a.dtype)
            else:
                coords = np.unravel_index(local, a.shape)
                a[coords] = (a[coords].astype(np.float32) + v).astype(a.dtype)

    def _load(self, flat: NDArray[np.float32]) -> None:
        for i, a in enumerate(self._arrays):
            a[...] = flat[self._offsets[i] : self._offsets[i + 1]].reshape(a.shape).astype(a.dtype)

    def active_vector(self) -> NDArray[np.float32]:
        return self._gather()
