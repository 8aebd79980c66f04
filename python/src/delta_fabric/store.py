"""The weight-store seam: what a framework binding implements so that `delta_fabric.fabric.Fabric`
can keep its weights in sync.

A store owns (or wraps) the node's *active* weights, the ones the optimizer trains, and shows them to
the node in the manifest's canonical flat layout (DF-MAN-3): one f32 vector of N values, tensors in
canonical order, each tensor row-major in its canonical shape. How the framework lays them out
natively (transposed kernels, HWIO convolutions, bf16 leaves, GPU memory...) is the store's business;
`delta_fabric.layout.CanonicalLayout` does the bookkeeping for the common cases.

The contract (every method may be called from the training thread only; the node serialises them):

* ``manifest``: the `Manifest` (names, canonical shapes, fingerprint), fixed for the store's life;
* ``framework``: a short name reported to peers in snapshot info (``"torch"``, ``"jax"``, ...);
* ``gather(indices=None)``: a *fresh* f32 array: the whole canonical vector (N values) when
  ``indices`` is None, else only the values at ``indices`` (sorted, unique ``uint32`` flat indices),
  in that order. Called once per sync step (O(N)) and never on other steps;
* ``apply(indices, values)``: ``active[i] = fl32(active[i] + values[j])`` for sorted, unique ``uint32``
  flat indices (DF-RCV-7), touching only those elements (O(k)). Stores whose native dtype is not f32
  read the element as f32, add in f32 and round back (DF-MAN-4);
* ``load(flat)``: overwrite every weight from a canonical flat f32 vector of N values (bootstrap from
  a snapshot, DF-ZEN-5);
* ``running_stats()`` (optional, 1.1): the canonical names of the synchronised tensors that are
  running statistics (updated by the forward pass, not by the optimizer: BatchNorm running mean and
  variance). A node that holds its residual aside exempts them (DF-GEN-244). A store without the
  method has none; read it through `running_stats`.

OPTIONAL, Python only (no counterpart in ``df_fabric::store`` yet): ``gather_parts()``, the canonical
vector as one flat f32 array per manifest tensor, in canonical order (views of the live tensors where
they are f32 in host memory). `Fabric` calls it, when the store has it, instead of ``gather()`` at a
sync step and hands the parts to `Engine.generate`, which only reads them before returning: no copy of
the whole model per sync. It is not part of the `WeightStore` protocol; a store without it works
unchanged. `delta_fabric.stores.torch.TorchStore` has it.

Functional frameworks (JAX: arrays are immutable, the training loop owns the current pytree)
implement `FunctionalStore` on top: ``state()`` returns the current native state and
``set_state(state)`` replaces it (same structure and shapes). `Fabric.update` then does
``set_state(state); step(); return state()``, so the loop reads ``variables = fabric.update(variables)``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import DeltaFabricError
from delta_fabric.manifest import Manifest

__all__ = [
    "FunctionalStore",
    "StoreError",
    "WeightStore",
    "check_flat",
    "check_sparse",
    "running_stats",
]


class StoreError(DeltaFabricError, ValueError):
    """A store was given input that does not match its manifest (nothing was changed)."""


@runtime_checkable
class WeightStore(Protocol):
    """The active weights of one node in the canonical flat layout (see the module docstring)."""

    @property
    def manifest(self) -> Manifest:
        """The manifest of the synchronised tensors (DF-MAN)."""
        ...

    @property
    def framework(self) -> str:
        """Short framework name, reported to peers (``"torch"``, ``"numpy"``, ``"jax"``...)."""
        ...

    def gather(self, indices: NDArray[np.uint32] | None = None) -> NDArray[np.float32]:
        """A fresh f32 array: the canonical vector (N values), or only the values at ``indices``."""
        ...

    def apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        """``active[i] = fl32(active[i] + values)`` for sorted unique flat indices (DF-RCV-7). O(k)."""
        ...

    def load(self, flat: NDArray[np.float32]) -> None:
        """Overwrite every weight from a canonical flat f32 vector of N values."""
        ...


@runtime_checkable
class FunctionalStore(WeightStore, Protocol):
    """A `WeightStore` whose weights live in immutable native values owned by the training loop."""

    def state(self) -> Any:
        """The current native state (for JAX: the variables pytree), after applied updates."""
        ...

    def set_state(self, state: Any) -> None:
        """Replace the native state (same structure and shapes) before the node reads or updates it."""
        ...


def running_stats(store: WeightStore) -> tuple[str, ...]:
    """The store's running-statistics tensors (its optional ``running_stats()``; none without it),
    each a name of its manifest (`StoreError` otherwise)."""
    fn = getattr(store, "running_stats", None)
    if fn is None:
        return ()
    names = tuple(str(n) for n in fn())
    known = set(store.manifest.names)
    for n in names:
        if n not in known:
            raise StoreError(f"running_stats names {n!r}, which is not a tensor of the manifest")
    return names


def check_flat(manifest: Manifest, flat: NDArray[Any]) -> NDArray[np.float32]:
    """``flat`` as a 1-D f32 array of N values (`StoreError` otherwise); a helper for ``load``."""
    a = np.asarray(flat)
    if a.dtype != np.float32 or a.shape != (manifest.num_params,):
        raise StoreError(
            f"expected a float32 vector of {manifest.num_params} values, "
            f"got {a.dtype} of shape {a.shape}"
        )
    return a


def check_sparse(
    manifest: Manifest, indices: NDArray[Any], values: NDArray[Any] | None = None
) -> None:
    """`StoreError` unless ``indices`` are sorted, unique ``uint32`` flat indices below N and
    ``values`` (when given) is f32 of the same length; a helper for ``gather`` and ``apply``. O(k)."""
    idx = np.asarray(indices)
    if idx.dtype != np.uint32 or idx.ndim != 1:
        raise StoreError(f"indices must be a 1-D uint32 array, got {idx.dtype} {idx.shape}")
    if idx.size:
        if idx.size > 1 and not bool(np.all(idx[1:] > idx[:-1])):
            raise StoreError("indices must be strictly increasing")
        if int(idx[-1]) >= manifest.num_params:
            raise StoreError(f"index {int(idx[-1])} out of range (N = {manifest.num_params})")
    if values is not None:
        v = np.asarray(values)
        if v.dtype != np.float32 or v.shape != idx.shape:
            raise StoreError(
                f"values must be float32 of shape {idx.shape}, got {v.dtype} {v.shape}"
            )
