"""JAX store: a DeltaFabric weight store over a Flax-style variables pytree (functional).

JAX arrays are immutable, so the store holds the current ``variables`` and replaces leaves when a
sparse aggregate arrives or a snapshot is loaded; the training loop hands its variables in and takes
the updated ones back (``variables = fabric.update(variables)``).

The canonical view (spec section 4.5, JAX/Flax rows under DF-MAN-6) is built by `flax_layout` from the
Flax Linen conventions, or given as an explicit table of `JaxLeaf` rows for any other pytree:

* ``params/<layer>/kernel`` of rank 2 (``nn.Dense``, ``[in, out]``) -> ``<layer>.weight`` ``[out, in]``;
* ``params/<layer>/kernel`` of rank 4 (``nn.Conv`` 2-D, HWIO) -> ``<layer>.weight`` OIHW, axes
  ``(3, 2, 0, 1)``;
* ``params/<layer>/bias`` -> ``<layer>.bias``; ``params/<layer>/scale`` -> ``<layer>.weight``;
* ``params/<layer>/embedding`` -> ``<layer>.weight`` (``nn.Embed``: same layout as PyTorch);
* ``batch_stats/<layer>/mean`` / ``var`` -> ``<layer>.running_mean`` / ``running_var`` (only with
  ``include_buffers``).

A floating leaf that none of these rules names (a kernel of another rank, an unknown leaf name or
collection) is refused with `UnmappableLeaf` (DF-MAN-12) rather than guessed; integer leaves are never
synchronised (DF-MAN-4). Layer paths are renamed with ``rename`` (Flax's ``Conv_0`` -> PyTorch's
``conv1``).

Values travel as f32. The sparse apply is ``active[i] = fl32(active[i] + v)`` (DF-RCV-7), bit-exact:
a jitted gather of the touched elements, the f32 add on the host (XLA's CPU backend flushes
subnormals to zero, DF-NUM-2 forbids it), a jitted scatter; f16/bf16 leaves are read as f32 and rounded
back to nearest even. Index counts are padded to a power of two (the padding is dropped out of range), so a leaf
compiles at most ``log2(size) + 1`` apply programs. Within one leaf, indices are int32: a leaf may
hold up to ``2**31 - 1`` elements (the manifest as a whole may hold up to ``2**32``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import DeltaFabricError
from delta_fabric.manifest import Manifest, TensorSpec

__all__ = ["JaxLeaf", "JaxStore", "UnmappableLeaf", "flax_layout", "leaf_paths"]

#: Largest leaf the int32 indexing of the sparse apply can address.
MAX_LEAF_SIZE = (1 << 31) - 1

Path = tuple[str, ...]


class UnmappableLeaf(DeltaFabricError, ValueError):
    """A leaf of the variables has no canonical PyTorch name and shape (DF-MAN-12): refused."""


@dataclass(frozen=True)
class JaxLeaf:
    """One row of the mapping: the leaf at ``path`` is canonical tensor ``name``.

    ``perm`` is the axis permutation from the native shape to the canonical one
    (``canonical = native.transpose(perm)``); ``None`` means the same layout.
    """

    path: Path
    name: str
    perm: tuple[int, ...] | None = None


def _key_str(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def leaf_paths(variables: Any) -> list[tuple[Path, Any]]:
    """Every leaf of ``variables`` with its path (dict keys, attribute names or sequence indices)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(variables)
    return [(tuple(_key_str(k) for k in kp), leaf) for kp, leaf in flat]


def _is_float(leaf: Any) -> bool:
    return bool(jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating))


#: Flax Linen leaf names of the ``params`` collection -> (canonical suffix, perm per kernel rank).
_KERNEL_PERMS: dict[int, tuple[int, ...]] = {2: (1, 0), 4: (3, 2, 0, 1)}
_PARAM_SUFFIX = {"bias": "bias", "scale": "weight", "embedding": "weight"}
_STAT_SUFFIX = {"mean": "running_mean", "var": "running_var"}


def flax_layout(
    variables: Any,
    *,
    include_buffers: bool = False,
    rename: Mapping[str, str] | None = None,
) -> list[JaxLeaf]:
    """The mapping of a Flax Linen variables pytree (see the module docstring for the rules).

    ``rename`` maps a native layer path (its parts joined with ``.``, e.g. ``"Conv_0"`` or
    ``"encoder.Dense_1"``) to its canonical path (``"conv1"``); unlisted layers keep their path.
    Raises `UnmappableLeaf` for a floating leaf no rule names.
    """
    renames = dict(rename or {})
    rows: list[JaxLeaf] = []
    for path, leaf in leaf_paths(variables):
        if not _is_float(leaf):
            continue  # DF-MAN-4: integer and boolean leaves are never synchronised
        where = "/".join(path)
        if len(path) < 3 or path[0] not in ("params", "batch_stats"):
            raise UnmappableLeaf(
                f"{where}: not a params/<layer>/<leaf> or batch_stats/<layer>/<leaf> leaf; "
                "give an explicit JaxLeaf table for this pytree (DF-MAN-12)"
            )
        collection, layer, leaf_name = path[0], ".".join(path[1:-1]), path[-1]
        canonical_layer = renames.get(layer, layer)
        ndim = jnp.ndim(leaf)
        if collection == "batch_stats":
            if leaf_name not in _STAT_SUFFIX:
                raise UnmappableLeaf(f"{where}: unknown batch statistic {leaf_name!r} (DF-MAN-12)")
            if include_buffers:
                rows.append(JaxLeaf(path, f"{canonical_layer}.{_STAT_SUFFIX[leaf_name]}"))
            continue
        if leaf_name == "kernel":
            perm = _KERNEL_PERMS.get(ndim)
            if perm is None:
                raise UnmappableLeaf(
                    f"{where}: a kernel of rank {ndim} (only Dense [in,out] and 2-D Conv HWIO "
                    "kernels are mapped; give an explicit JaxLeaf row) (DF-MAN-12)"
                )
            rows.append(JaxLeaf(path, f"{canonical_layer}.weight", perm))
        elif leaf_name in _PARAM_SUFFIX:
            rows.append(JaxLeaf(path, f"{canonical_layer}.{_PARAM_SUFFIX[leaf_name]}"))
        else:
            raise UnmappableLeaf(f"{where}: unknown parameter {leaf_name!r} (DF-MAN-12)")
    return rows


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@jax.jit
def _take(leaf: jax.Array, idx: jax.Array) -> jax.Array:
    """``leaf.flat[idx]`` (a copy of the bits; padding indices out of range read 0)."""
    return leaf.reshape(-1).at[idx].get(mode="fill", fill_value=0)


@jax.jit
def _put(leaf: jax.Array, idx: jax.Array, vals: jax.Array) -> jax.Array:
    """``leaf.flat[idx] = vals`` (a copy of the bits; padding indices out of range are dropped)."""
    return leaf.reshape(-1).at[idx].set(vals, mode="drop").reshape(leaf.shape)


@dataclass
class _Tensor:
    spec: TensorSpec
    leaf_index: int  # position among the pytree's leaves
    perm: tuple[int, ...] | None
    inverse: tuple[int, ...] | None
    native_shape: tuple[int, ...]
    native_index: NDArray[np.int64] | None  # canonical local -> native flat (None: identity)


class JaxStore:
    """A functional weight store over a JAX variables pytree (see the module docstring).

    ``layout`` defaults to `flax_layout` of ``variables`` (with ``include_buffers`` and
    ``rename``). ``variables`` is the current pytree (a new object after every `apply` or `load`);
    `set_variables` hands in the training loop's newest one.
    """

    framework = "jax"

    def __init__(
        self,
        variables: Any,
        layout: Sequence[JaxLeaf] | None = None,
        *,
        include_buffers: bool = False,
        rename: Mapping[str, str] | None = None,
    ) -> None:
        rows = (
            list(layout)
            if layout is not None
            else flax_layout(variables, include_buffers=include_buffers, rename=rename)
        )
        paths = leaf_paths(variables)
        by_path = {p: i for i, (p, _) in enumerate(paths)}
        seen: dict[Path, str] = {}
        specs: list[TensorSpec] = []
        rows_by_name: dict[str, tuple[JaxLeaf, int]] = {}
        for row in rows:
            where = "/".join(row.path)
            if row.path not in by_path:
                raise UnmappableLeaf(f"{where}: no such leaf in the variables")
            if row.path in seen:
                raise UnmappableLeaf(f"{where}: mapped twice ({seen[row.path]!r}, {row.name!r})")
            seen[row.path] = row.name
            leaf = paths[by_path[row.path]][1]
            if not _is_float(leaf):
                raise UnmappableLeaf(f"{where}: dtype {jnp.asarray(leaf).dtype} is not floating")
            shape = tuple(int(d) for d in jnp.shape(leaf))
            if math.prod(shape) > MAX_LEAF_SIZE:
                raise UnmappableLeaf(f"{where}: {math.prod(shape)} elements, more than 2**31 - 1")
            if row.perm is not None and sorted(row.perm) != list(range(len(shape))):
                raise UnmappableLeaf(
                    f"{where}: {row.perm} is not a permutation of {len(shape)} axes"
                )
            canonical = shape if row.perm is None else tuple(shape[a] for a in row.perm)
            specs.append(TensorSpec(row.name, canonical))
            rows_by_name[row.name] = (row, by_path[row.path])
        if not specs:
            raise UnmappableLeaf("the variables hold no floating leaf to synchronise")
        self.manifest = Manifest(specs)  # refuses duplicate names and N > 2**32 (DF-MAN-1, -7)
        self._tensors: list[_Tensor] = []
        for spec in self.manifest.tensors:
            row, li = rows_by_name[spec.name]
            native = tuple(int(d) for d in jnp.shape(paths[li][1]))
            perm = None if row.perm is None or row.perm == tuple(range(len(native))) else row.perm
            index: NDArray[np.int64] | None = None
            inverse = None
            if perm is not None:
                grid = np.arange(math.prod(native), dtype=np.int64).reshape(native)
                index = np.ascontiguousarray(grid.transpose(perm)).reshape(-1)
                inverse = tuple(int(a) for a in np.argsort(perm))
            self._tensors.append(_Tensor(spec, li, perm, inverse, native, index))
        self._offsets = np.asarray(self.manifest.offsets, dtype=np.int64)
        self._treedef: Any = jax.tree_util.tree_structure(variables)
        self._leaves: list[Any] = [leaf for _, leaf in paths]
        self.gathers = 0

    # -- the variables ----------------------------------------------------------------------------
    @property
    def variables(self) -> Any:
        """The current variables (rebuilt with the updated leaves)."""
        return jax.tree_util.tree_unflatten(self._treedef, self._leaves)

    def set_variables(self, variables: Any) -> None:
        """Take the training loop's newest variables (same structure, shapes and dtypes)."""
        leaves, treedef = jax.tree_util.tree_flatten(variables)
        if treedef != self._treedef:
            raise ValueError(f"variables have another structure: {treedef} != {self._treedef}")
        for t in self._tensors:
            new, old = leaves[t.leaf_index], self._leaves[t.leaf_index]
            if jnp.shape(new) != jnp.shape(old) or jnp.asarray(new).dtype != jnp.asarray(old).dtype:
                raise ValueError(
                    f"{t.spec.name}: leaf changed from {jnp.shape(old)} {jnp.asarray(old).dtype} "
                    f"to {jnp.shape(new)} {jnp.asarray(new).dtype}"
                )
        self._leaves = list(leaves)

    # -- the store operations -----------------------------------------------------------------------
    def gather(self, indices: NDArray[Any] | None = None) -> NDArray[np.float32]:
        """The canonical flat f32 view (DF-MAN-3), or only the values at sorted ``indices``."""
        self.gathers += 1
        if indices is None:
            host = jax.device_get([self._leaves[t.leaf_index] for t in self._tensors])
            out = np.empty(self.manifest.num_params, dtype=np.float32)
            for i, (t, a) in enumerate(zip(self._tensors, host, strict=True)):
                arr = np.asarray(a).astype(np.float32, copy=False)
                if t.perm is not None:
                    arr = arr.transpose(t.perm)
                out[self._offsets[i] : self._offsets[i + 1]] = arr.reshape(-1)
            return out
        idx = np.asarray(indices)
        picked = np.empty(idx.shape[0], dtype=np.float32)
        for sl in self.manifest.locate(idx):
            t = self._tensors[sl.tensor]
            native = sl.local if t.native_index is None else t.native_index[sl.local]
            leaf = np.asarray(jax.device_get(self._leaves[t.leaf_index])).reshape(-1)
            picked[sl.start : sl.stop] = leaf[native].astype(np.float32)
        return picked

    def apply(self, indices: NDArray[Any], values: NDArray[np.float32]) -> None:
        """``active[i] = fl32(active[i] + v)`` for sorted unique flat ``indices`` (DF-RCV-7)."""
        vals = np.asarray(values, dtype=np.float32)
        for sl in self.manifest.locate(np.asarray(indices)):
            t = self._tensors[sl.tensor]
            native = sl.local if t.native_index is None else t.native_index[sl.local]
            k = native.shape[0]
            size = _pow2(k)
            idx = np.full(size, t.spec.numel, dtype=np.int32)  # padding: out of range, dropped
            idx[:k] = native
            leaf = self._leaves[t.leaf_index]
            cur = np.asarray(jax.device_get(_take(leaf, idx)))
            new = np.zeros(size, dtype=cur.dtype)
            # The f32 add runs on the host: XLA's CPU backend flushes subnormals to zero, which
            # DF-NUM-2 forbids; gather and scatter only move bits.
            total = cur[:k].astype(np.float32) + vals[sl.start : sl.stop]
            new[:k] = total.astype(cur.dtype)  # round to nearest even back to f16/bf16 (DF-MAN-4)
            self._leaves[t.leaf_index] = _put(leaf, idx, new)

    def load(self, flat: NDArray[np.float32]) -> None:
        """Overwrite every synchronised leaf from a canonical flat f32 vector (a snapshot)."""
        src = np.asarray(flat, dtype=np.float32)
        if src.shape != (self.manifest.num_params,):
            raise ValueError(f"expected {self.manifest.num_params} values, got shape {src.shape}")
        for i, t in enumerate(self._tensors):
            canon = src[self._offsets[i] : self._offsets[i + 1]].reshape(t.spec.shape)
            native = canon if t.inverse is None else canon.transpose(t.inverse)
            old = self._leaves[t.leaf_index]
            # convert on the host (RNE, subnormals kept), then move the bits to the device
            new = jnp.asarray(np.ascontiguousarray(native).astype(jnp.asarray(old).dtype))
            sharding = getattr(old, "sharding", None)
            self._leaves[t.leaf_index] = jax.device_put(new, sharding) if sharding else new

    def layout(self) -> list[JaxLeaf]:
        """The rows in canonical order (native path, canonical name, permutation)."""
        paths = [p for p, _ in leaf_paths(self.variables)]
        return [JaxLeaf(paths[t.leaf_index], t.spec.name, t.perm) for t in self._tensors]
