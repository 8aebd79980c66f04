"""`JaxStore`: a functional weight store over a JAX variables pytree (Flax Linen style or any other).

JAX arrays are immutable, so the store holds the current variables and replaces leaves when a sparse
aggregate arrives or a snapshot is loaded; the training loop hands its variables in and takes the
updated ones back (`delta_fabric.store.FunctionalStore`)::

    store = JaxStore(variables, include_buffers=True)
    with Fabric(store, transport, config, node_id=7) as fabric:
        for x, y in batches:
            variables, opt_state = train_step(variables, opt_state, x, y)
            variables = fabric.update(variables)

The canonical view (spec section 4.5, JAX/Flax rows under DF-MAN-6) is a
`delta_fabric.layout.CanonicalLayout` whose keys are leaf paths (tuples of dict keys). `flax_layout`
builds it from the Flax Linen conventions; any other pytree passes its own layout:

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
the f32 add runs on the host (XLA's CPU backend flushes subnormals to zero, DF-NUM-2 forbids it);
f16/bf16 leaves are read as f32 and rounded back to nearest even. Leaves of up to `HOST_APPLY_MAX`
elements make the round trip whole; larger ones move only the touched elements with a jitted gather
and scatter, their index counts padded to a power of two (at least `MIN_BUCKET`; the padding is
dropped out of range), so such a leaf compiles at most ``log2(size) - 5`` programs of each. Within one leaf, indices are int32: a leaf may
hold up to ``2**31 - 1`` elements (the manifest as a whole may hold up to ``2**32``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray

from delta_fabric.layout import CONV_HWIO, DENSE_IN_OUT, CanonicalLayout, LayoutError, LayoutRow
from delta_fabric.manifest import Manifest
from delta_fabric.store import StoreError, check_flat, check_sparse

__all__ = ["JaxStore", "UnmappableLeaf", "flax_layout", "leaf_paths"]

#: Largest leaf the int32 indexing of the sparse apply can address.
MAX_LEAF_SIZE = (1 << 31) - 1
#: Leaves of up to this many elements are updated by a round trip through the host (no XLA
#: compilation at all); larger ones move only the touched elements (jitted gather and scatter).
HOST_APPLY_MAX = 1 << 16
#: Smallest padded index count of the jitted gather and scatter (fewer programs to compile).
MIN_BUCKET = 64

Path = tuple[str, ...]


class UnmappableLeaf(LayoutError):
    """A leaf of the variables has no canonical PyTorch name and shape (DF-MAN-12): refused."""


def _key_str(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def leaf_paths(variables: Any) -> list[tuple[Path, Any]]:
    """Every leaf of ``variables`` with its path (dict keys, attribute names or sequence indices as
    strings), in the pytree's leaf order."""
    flat, _ = jax.tree_util.tree_flatten_with_path(variables)
    return [(tuple(_key_str(k) for k in kp), leaf) for kp, leaf in flat]


def _dtype(leaf: Any) -> np.dtype[Any]:
    dtype = getattr(leaf, "dtype", None)  # arrays: no conversion (this runs on every update)
    return np.dtype(dtype) if dtype is not None else np.asarray(leaf).dtype


def _is_float(leaf: Any) -> bool:
    return bool(jnp.issubdtype(_dtype(leaf), jnp.floating))


def _shape(leaf: Any) -> tuple[int, ...]:
    shape = getattr(leaf, "shape", None)
    return tuple(int(d) for d in (shape if shape is not None else np.shape(leaf)))


#: Flax Linen leaf names of the ``params`` collection -> canonical suffix; kernels by rank.
_KERNEL_PERMS: dict[int, tuple[int, ...]] = {2: DENSE_IN_OUT, 4: CONV_HWIO}
_PARAM_SUFFIX = {"bias": "bias", "scale": "weight", "embedding": "weight"}
_STAT_SUFFIX = {"mean": "running_mean", "var": "running_var"}


def flax_layout(
    variables: Any,
    *,
    include_buffers: bool = False,
    rename: Mapping[str, str] | None = None,
) -> CanonicalLayout:
    """The canonical layout of a Flax Linen variables pytree (rules in the module docstring).

    ``rename`` maps a native layer path (its parts joined with ``.``, e.g. ``"Conv_0"`` or
    ``"encoder.Dense_1"``) to its canonical path (``"conv1"``); unlisted layers keep their path.
    Raises `UnmappableLeaf` for a floating leaf no rule names.
    """
    renames = dict(rename or {})
    rows: list[LayoutRow] = []
    for path, leaf in leaf_paths(variables):
        if not _is_float(leaf):
            continue  # DF-MAN-4: integer and boolean leaves are never synchronised
        where = "/".join(path)
        if len(path) < 3 or path[0] not in ("params", "batch_stats"):
            raise UnmappableLeaf(
                f"{where}: not a params/<layer>/<leaf> or batch_stats/<layer>/<leaf> leaf; "
                "pass a CanonicalLayout for this pytree (DF-MAN-12)"
            )
        collection, layer, leaf_name = path[0], ".".join(path[1:-1]), path[-1]
        canonical_layer = renames.get(layer, layer)
        shape = _shape(leaf)
        if collection == "batch_stats":
            if leaf_name not in _STAT_SUFFIX:
                raise UnmappableLeaf(f"{where}: unknown batch statistic {leaf_name!r} (DF-MAN-12)")
            if include_buffers:
                name = f"{canonical_layer}.{_STAT_SUFFIX[leaf_name]}"
                rows.append(LayoutRow(path, name, shape))
            continue
        if leaf_name == "kernel":
            perm = _KERNEL_PERMS.get(len(shape))
            if perm is None:
                raise UnmappableLeaf(
                    f"{where}: a kernel of rank {len(shape)} (only Dense [in,out] and 2-D Conv HWIO "
                    "kernels are mapped; pass a CanonicalLayout) (DF-MAN-12)"
                )
            rows.append(LayoutRow(path, f"{canonical_layer}.weight", shape, perm))
        elif leaf_name in _PARAM_SUFFIX:
            rows.append(LayoutRow(path, f"{canonical_layer}.{_PARAM_SUFFIX[leaf_name]}", shape))
        else:
            raise UnmappableLeaf(f"{where}: unknown parameter {leaf_name!r} (DF-MAN-12)")
    return CanonicalLayout(rows)


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


def _like(host: NDArray[Any], old: Any) -> Any:
    """``host`` as a JAX array placed like ``old`` (same sharding / device)."""
    new = jnp.asarray(host)
    sharding = getattr(old, "sharding", None)
    return jax.device_put(new, sharding) if sharding is not None else new


class JaxStore:
    """A `delta_fabric.store.FunctionalStore` over a JAX variables pytree (see the module docstring).

    ``layout`` defaults to `flax_layout` of ``variables`` (with ``include_buffers`` and ``rename``);
    its keys are leaf paths as `leaf_paths` spells them. Every floating leaf the layout does not name
    is left alone (not synchronised); a layout key that is not a floating leaf of ``variables``, or a
    leaf of more than ``2**31 - 1`` elements, raises `UnmappableLeaf`.
    """

    framework = "jax"

    def __init__(
        self,
        variables: Any,
        layout: CanonicalLayout | None = None,
        *,
        include_buffers: bool = False,
        rename: Mapping[str, str] | None = None,
    ) -> None:
        if layout is None:
            layout = flax_layout(variables, include_buffers=include_buffers, rename=rename)
        if not layout.rows:
            raise UnmappableLeaf("the layout names no leaf: nothing to synchronise (DF-MAN-7)")
        paths = leaf_paths(variables)
        position = {p: i for i, (p, _) in enumerate(paths)}
        self._slot: dict[Hashable, int] = {}  # layout key -> position among the pytree's leaves
        for row in layout.rows:
            key: Any = row.key
            i = position.get(key) if isinstance(key, tuple) else None
            if i is None:
                raise UnmappableLeaf(f"{key!r} ({row.name}): no such leaf in the variables")
            leaf = paths[i][1]
            if not _is_float(leaf):
                raise UnmappableLeaf(f"{row.name}: dtype {_dtype(leaf)} is not floating")
            if _shape(leaf) != row.native_shape:
                raise UnmappableLeaf(
                    f"{row.name}: leaf shape {_shape(leaf)} != layout shape {row.native_shape}"
                )
            if math.prod(row.native_shape) > MAX_LEAF_SIZE:
                raise UnmappableLeaf(f"{row.name}: more than 2**31 - 1 elements in one leaf")
            self._slot[row.key] = i
        self.layout = layout
        #: the rows read from ``batch_stats`` (running statistics, DF-GEN-244)
        self._stats = tuple(
            row.name
            for row in layout.rows
            if isinstance(row.key, tuple) and row.key and row.key[0] == "batch_stats"
        )
        self._treedef: Any = jax.tree_util.tree_structure(variables)
        self._leaves: list[Any] = [leaf for _, leaf in paths]
        self.gathers = 0

    @property
    def manifest(self) -> Manifest:
        return self.layout.manifest

    def running_stats(self) -> tuple[str, ...]:
        """The tensors read from the ``batch_stats`` collection (BatchNorm running statistics):
        updated by the forward pass, not by the optimizer (the optional seam call, DF-GEN-244)."""
        return self._stats

    # -- the variables (FunctionalStore) ----------------------------------------------------------
    def state(self) -> Any:
        """The current variables (the pytree rebuilt with the updated leaves)."""
        return jax.tree_util.tree_unflatten(self._treedef, self._leaves)

    def set_state(self, state: Any) -> None:
        """Take the training loop's newest variables (same structure, shapes and dtypes, else
        `StoreError` and nothing changes)."""
        leaves, treedef = jax.tree_util.tree_flatten(state)
        if treedef != self._treedef:
            raise StoreError(f"variables have another structure: {treedef} != {self._treedef}")
        for row in self.layout.rows:
            i = self._slot[row.key]
            new, old = leaves[i], self._leaves[i]
            if _shape(new) != _shape(old) or _dtype(new) != _dtype(old):
                raise StoreError(
                    f"{row.name}: leaf changed from {_shape(old)} {_dtype(old)} "
                    f"to {_shape(new)} {_dtype(new)}"
                )
        self._leaves = list(leaves)

    @property
    def variables(self) -> Any:
        """Alias of `state`."""
        return self.state()

    # -- the store operations -----------------------------------------------------------------------
    def gather(self, indices: NDArray[np.uint32] | None = None) -> NDArray[np.float32]:
        """The canonical flat f32 view (DF-MAN-3), or only the values at sorted ``indices``."""
        if indices is None:
            self.gathers += 1
            host = jax.device_get([self._leaves[self._slot[k]] for k in self.layout.keys])
            return self.layout.to_canonical(dict(zip(self.layout.keys, host, strict=True)))
        check_sparse(self.manifest, indices)
        out = np.empty(indices.size, dtype=np.float32)
        for s in self.layout.locate(indices):
            leaf = np.asarray(jax.device_get(self._leaves[self._slot[s.key]]))
            out[s.lo : s.hi] = leaf.reshape(-1)[s.native].astype(np.float32)
        return out

    def apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        """``active[i] = fl32(active[i] + v)`` for sorted unique flat ``indices`` (DF-RCV-7).

        The f32 add runs on the host, in NumPy: XLA's CPU backend flushes subnormals to zero, which
        DF-NUM-2 forbids. A leaf of up to `HOST_APPLY_MAX` elements makes the round trip whole (no
        compilation); a larger one moves only the touched elements (jitted gather and scatter, which
        copy bits)."""
        check_sparse(self.manifest, indices, values)
        for s in self.layout.locate(indices):
            i = self._slot[s.key]
            leaf = self._leaves[i]
            vals = values[s.lo : s.hi]
            if self.layout.numel(s.key) <= HOST_APPLY_MAX:
                host = np.array(jax.device_get(leaf))  # a writable copy
                flat = host.reshape(-1)
                # read as f32, add in f32, round to nearest even back to f16/bf16 (DF-MAN-4)
                flat[s.native] = (flat[s.native].astype(np.float32) + vals).astype(host.dtype)
                self._leaves[i] = _like(host, leaf)
                continue
            k = s.hi - s.lo
            size = max(MIN_BUCKET, _pow2(k))
            idx = np.full(size, self.layout.numel(s.key), dtype=np.int32)  # padding: dropped
            idx[:k] = s.native
            cur = np.asarray(jax.device_get(_take(leaf, idx)))
            new = np.zeros(size, dtype=cur.dtype)
            new[:k] = (cur[:k].astype(np.float32) + vals).astype(cur.dtype)
            self._leaves[i] = _put(leaf, idx, new)

    def load(self, flat: NDArray[np.float32]) -> None:
        """Overwrite every synchronised leaf from a canonical flat f32 vector (a snapshot)."""
        native = self.layout.from_canonical(check_flat(self.manifest, flat))
        for key, arr in native.items():
            i = self._slot[key]
            old = self._leaves[i]
            # convert on the host (RNE, subnormals kept), then move the bits to the device
            self._leaves[i] = _like(arr.astype(_dtype(old)), old)
