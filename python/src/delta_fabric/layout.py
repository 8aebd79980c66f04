"""Canonical layout: the map between a framework's native tensors and the manifest's flat vector.

A framework binding describes its tensors once, as a table of rows ``(key, name, native_shape, perm)``:

* ``key``: how the framework finds the tensor (a ``state_dict`` key, a pytree path tuple, ...), any
  hashable value;
* ``name``: the canonical name (DF-MAN-1; what every other framework calls it, spec section 4.5);
* ``native_shape``: the tensor's shape in the framework;
* ``perm``: the axes permutation that turns the native tensor into the canonical one, in NumPy's
  ``transpose`` convention (``canonical = native.transpose(perm)``, canonical axis ``i`` is native axis
  ``perm[i]``); ``None`` for identity. Named helpers: `DENSE_IN_OUT` (a ``[in, out]`` kernel to the
  canonical ``[out, in]``), `CONV_HWIO` (an ``HWIO`` convolution kernel to ``OIHW``),
  `channels_last_kernel` (any ``(*spatial, in, out)`` kernel).

`CanonicalLayout` then gives the `Manifest`, whole-vector conversion both ways (`to_canonical`,
`from_canonical`) and the index map for sparse updates (`locate`: canonical flat indices -> per
tensor native flat indices, O(k), no O(N) table). A store is the table plus a few lines; see
`delta_fabric.stores.numpy` for one.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import DeltaFabricError
from delta_fabric.manifest import Manifest, TensorSpec

__all__ = [
    "CONV_HWIO",
    "DENSE_IN_OUT",
    "CanonicalLayout",
    "LayoutError",
    "LayoutRow",
    "NativeSlice",
    "channels_last_kernel",
]

#: A dense kernel stored ``[in, out]`` (Flax, Keras, TF) -> canonical ``[out, in]`` (PyTorch's).
DENSE_IN_OUT: tuple[int, ...] = (1, 0)
#: A 2-D convolution kernel stored ``HWIO`` (Flax, Keras, TF) -> canonical ``OIHW`` (PyTorch's).
CONV_HWIO: tuple[int, ...] = (3, 2, 0, 1)


def channels_last_kernel(ndim: int) -> tuple[int, ...]:
    """The perm of a ``(*spatial, in, out)`` kernel of ``ndim`` axes -> canonical
    ``(out, in, *spatial)``: ``channels_last_kernel(2) == DENSE_IN_OUT``,
    ``channels_last_kernel(4) == CONV_HWIO``, ``(3)`` for 1-D and ``(5)`` for 3-D convolutions."""
    if ndim < 2:
        raise LayoutError(f"a kernel has at least 2 axes, got {ndim}")
    return (ndim - 1, ndim - 2, *range(ndim - 2))


class LayoutError(DeltaFabricError, ValueError):
    """A layout table, or arrays given to a layout, do not fit (nothing was changed)."""


@dataclass(frozen=True)
class LayoutRow:
    """One tensor of a `CanonicalLayout` (see the module docstring)."""

    key: Hashable
    name: str
    native_shape: tuple[int, ...]
    perm: tuple[int, ...] | None = None

    @property
    def canonical_shape(self) -> tuple[int, ...]:
        if self.perm is None:
            return self.native_shape
        return tuple(self.native_shape[p] for p in self.perm)


@dataclass(frozen=True)
class NativeSlice:
    """The part of sorted canonical flat indices that falls in one tensor (see
    `CanonicalLayout.locate`): ``lo:hi`` is the range in the located array, ``native`` the row-major
    element indices in the tensor's *native* shape (int64, in the same order as the canonical ones)."""

    tensor: int
    key: Hashable
    lo: int
    hi: int
    native: NDArray[np.int64]


def _row(item: LayoutRow | Sequence[Any]) -> LayoutRow:
    if isinstance(item, LayoutRow):
        key, name, shape, perm = item.key, item.name, item.native_shape, item.perm
    else:
        if not 3 <= len(item) <= 4:
            raise LayoutError(f"a layout row is (key, name, native_shape[, perm]), got {item!r}")
        key, name, shape = item[0], item[1], item[2]
        perm = item[3] if len(item) == 4 else None
    try:
        hash(key)
    except TypeError:
        raise LayoutError(f"{name!r}: key {key!r} is not hashable") from None
    if not isinstance(name, str):
        raise LayoutError(f"canonical name must be str, got {type(name).__name__}")
    try:
        dims = tuple(shape)
    except TypeError:
        raise LayoutError(f"{name!r}: native shape {shape!r} is not a sequence") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or int(d) < 0:
            raise LayoutError(f"{name!r}: bad dimension {d!r} in native shape {dims!r}")
    dims = tuple(int(d) for d in dims)
    if perm is not None:
        p = tuple(perm)
        if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in p) or sorted(
            int(a) for a in p
        ) != list(range(len(dims))):
            raise LayoutError(
                f"{name!r}: perm {p!r} is not a permutation of the {len(dims)} native axes"
            )
        perm = None if p == tuple(range(len(dims))) else tuple(int(a) for a in p)
    return LayoutRow(key, name, dims, perm)


class CanonicalLayout:
    """Native tensors <-> the canonical flat f32 vector (see the module docstring).

    Rows are ``LayoutRow`` or ``(key, name, native_shape[, perm])`` tuples; their order does not
    matter (the manifest sorts by canonical name, DF-MAN-2). Raises `LayoutError` on duplicate keys,
    a perm that is not a permutation of the native axes, a bad shape or a bad canonical name
    (DF-MAN-1).
    """

    def __init__(self, rows: Iterable[LayoutRow | Sequence[Any]]) -> None:
        parsed = [_row(r) for r in rows]
        keys = [r.key for r in parsed]
        if len(set(keys)) != len(keys):
            dup = [k for k in dict.fromkeys(keys) if keys.count(k) > 1]
            raise LayoutError(f"duplicate native keys: {dup!r}")
        try:
            self.manifest = Manifest(TensorSpec(r.name, r.canonical_shape) for r in parsed)
        except (TypeError, ValueError) as exc:
            raise LayoutError(str(exc)) from exc
        by_name = {r.name: r for r in parsed}
        #: the rows in canonical (manifest) order
        self.rows: tuple[LayoutRow, ...] = tuple(by_name[n] for n in self.manifest.names)
        self._offsets = np.asarray(self.manifest.offsets, dtype=np.int64)
        self._pos = {r.key: i for i, r in enumerate(self.rows)}

    @classmethod
    def identity(cls, shapes: Mapping[str, Sequence[int]]) -> CanonicalLayout:
        """Every tensor under its canonical name, native shape = canonical shape."""
        return cls((name, name, tuple(shape)) for name, shape in shapes.items())

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """Native keys in canonical order."""
        return tuple(r.key for r in self.rows)

    @property
    def num_params(self) -> int:
        return self.manifest.num_params

    def row(self, key: Hashable) -> LayoutRow:
        return self.rows[self._pos[key]]

    def offset(self, key: Hashable) -> int:
        """The canonical flat offset of a tensor."""
        return int(self._offsets[self._pos[key]])

    # whole vectors ----------------------------------------------------------------------------
    def to_canonical(
        self, arrays: Mapping[Hashable, Any], out: NDArray[np.float32] | None = None
    ) -> NDArray[np.float32]:
        """The canonical flat f32 vector of native arrays (anything ``np.asarray`` takes), by key.
        O(N), one pass. `LayoutError` on a missing key or a wrong native shape."""
        n = self.num_params
        if out is None:
            out = np.empty(n, dtype=np.float32)
        elif out.dtype != np.float32 or out.shape != (n,):
            raise LayoutError(f"out must be a float32 vector of {n} values")
        for i, r in enumerate(self.rows):
            if r.key not in arrays:
                raise LayoutError(f"missing native tensor {r.key!r} ({r.name})")
            a = np.asarray(arrays[r.key])
            if a.shape != r.native_shape:
                raise LayoutError(
                    f"{r.name}: native shape {a.shape} != layout shape {r.native_shape}"
                )
            if r.perm is not None:
                a = a.transpose(r.perm)
            dst = out[self._offsets[i] : self._offsets[i + 1]].reshape(r.canonical_shape)
            np.copyto(dst, a, casting="unsafe")
        return out

    def from_canonical(self, flat: NDArray[Any]) -> dict[Hashable, NDArray[np.float32]]:
        """Native-shaped, C-contiguous f32 arrays (fresh) from a canonical flat vector, by key."""
        a = np.asarray(flat)
        if a.shape != (self.num_params,):
            raise LayoutError(f"expected {self.num_params} values, got shape {a.shape}")
        out: dict[Hashable, NDArray[np.float32]] = {}
        for i, r in enumerate(self.rows):
            part = a[self._offsets[i] : self._offsets[i + 1]].reshape(r.canonical_shape)
            if r.perm is not None:
                part = part.transpose(np.argsort(r.perm))
            out[r.key] = np.array(part, dtype=np.float32, order="C")  # a copy; keeps 0-d shapes
        return out

    # sparse -----------------------------------------------------------------------------------
    def native_index(self, key: Hashable, canonical_local: NDArray[Any]) -> NDArray[np.int64]:
        """Row-major native element indices of canonical row-major indices inside one tensor."""
        r = self.row(key)
        local = np.asarray(canonical_local, dtype=np.int64)
        if r.perm is None or local.size == 0:
            return local
        coords = np.unravel_index(local, r.canonical_shape)
        native = [coords[int(j)] for j in np.argsort(r.perm)]  # native axis a = canonical axis j
        return np.ravel_multi_index(tuple(native), r.native_shape).astype(np.int64)

    def locate(self, indices: NDArray[Any]) -> Iterator[NativeSlice]:
        """Split sorted canonical flat indices by tensor and map each part to native row-major
        indices. O(k + T log k); tensors without an index are skipped. `LayoutError` on indices that
        are not 1-D, ascending and below N."""
        idx = np.asarray(indices)
        if idx.ndim != 1:
            raise LayoutError("indices must be one-dimensional")
        if idx.size == 0:
            return
        if idx.size > 1 and bool(np.any(idx[1:] < idx[:-1])):
            raise LayoutError("indices must be ascending")
        if int(idx[0]) < 0 or int(idx[-1]) >= self.num_params:
            raise LayoutError(f"index out of range (N = {self.num_params})")
        bounds = np.searchsorted(idx, self._offsets, side="left")
        for i, r in enumerate(self.rows):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            if lo == hi:
                continue
            local = idx[lo:hi].astype(np.int64) - self._offsets[i]
            yield NativeSlice(i, r.key, lo, hi, self.native_index(r.key, local))

    def numel(self, key: Hashable) -> int:
        return math.prod(self.row(key).native_shape)
