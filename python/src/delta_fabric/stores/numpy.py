"""`NumpyStore`: named float NumPy arrays as the active weights, updated in place.

Pass arrays that share memory with your framework's tensors (``tensor.numpy()`` on CPU, ...) or copy
them in and out around `Fabric.step`. Every array must be a writable floating array (f16, f32, f64,
...); values travel as f32 (DF-MAN-4). Without ``layout`` the mapping's keys are the canonical names
(DF-MAN-1) and shapes are canonical; with a `CanonicalLayout` the keys are its native keys and its
permutations apply.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.layout import CanonicalLayout
from delta_fabric.manifest import Manifest
from delta_fabric.store import StoreError, check_flat, check_sparse

__all__ = ["NumpyStore"]


class NumpyStore:
    """A `delta_fabric.store.WeightStore` over named float NumPy arrays (in place)."""

    framework = "numpy"

    def __init__(
        self, arrays: Mapping[Any, NDArray[Any]], layout: CanonicalLayout | None = None
    ) -> None:
        for key, a in arrays.items():
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{key!r}: expected a NumPy array, got {type(a).__name__}")
            if not np.issubdtype(a.dtype, np.floating):
                raise TypeError(f"{key!r}: dtype {a.dtype} is not floating")
            if not a.flags.writeable:
                raise ValueError(f"{key!r}: array is read-only")
        if layout is None:
            layout = CanonicalLayout((k, k, a.shape) for k, a in arrays.items())
        elif set(layout.keys) != set(arrays):
            raise StoreError("the arrays' keys differ from the layout's")
        self.layout = layout
        self.arrays: dict[Hashable, NDArray[Any]] = {k: arrays[k] for k in layout.keys}
        # a flat view of each C-contiguous array (None: updated through coordinates)
        self._flat = {
            k: (a.reshape(-1) if a.flags.c_contiguous else None) for k, a in self.arrays.items()
        }
        self.gathers = 0

    @property
    def manifest(self) -> Manifest:
        return self.layout.manifest

    def gather(self, indices: NDArray[np.uint32] | None = None) -> NDArray[np.float32]:
        if indices is None:
            self.gathers += 1
            return self.layout.to_canonical(self.arrays)
        check_sparse(self.manifest, indices)
        out = np.empty(indices.size, dtype=np.float32)
        for s in self.layout.locate(indices):
            a = self.arrays[s.key]
            out[s.lo : s.hi] = a.reshape(-1)[s.native]
        return out

    def apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        check_sparse(self.manifest, indices, values)
        for s in self.layout.locate(indices):
            a, flat, v = self.arrays[s.key], self._flat[s.key], values[s.lo : s.hi]
            if flat is not None:
                if a.dtype == np.float32:
                    flat[s.native] = flat[s.native] + v  # fl32(active + agg), DF-RCV-7
                else:
                    flat[s.native] = (flat[s.native].astype(np.float32) + v).astype(a.dtype)
            else:
                coords = np.unravel_index(s.native, a.shape)
                a[coords] = (a[coords].astype(np.float32) + v).astype(a.dtype)

    def load(self, flat: NDArray[np.float32]) -> None:
        native = self.layout.from_canonical(check_flat(self.manifest, flat))
        for key, a in self.arrays.items():
            a[...] = native[key].astype(a.dtype)
