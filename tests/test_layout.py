"""`CanonicalLayout`: native tensors <-> the canonical flat vector, with permutations (DF-MAN)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from delta_fabric.errors import DeltaFabricError
from delta_fabric.layout import (
    CONV_HWIO,
    DENSE_IN_OUT,
    CanonicalLayout,
    LayoutError,
    LayoutRow,
    channels_last_kernel,
)
from delta_fabric.manifest import Manifest
from delta_fabric.stores.numpy import NumpyStore
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray


def flax_like() -> CanonicalLayout:
    return CanonicalLayout(
        [
            (("params", "Conv_0", "kernel"), "conv1.weight", (3, 3, 1, 4), CONV_HWIO),
            (("params", "Conv_0", "bias"), "conv1.bias", (4,)),
            (("params", "Dense_0", "kernel"), "fc1.weight", (6, 5), DENSE_IN_OUT),
            (("params", "Dense_0", "bias"), "fc1.bias", (5,), None),
        ]
    )


def native_arrays(layout: CanonicalLayout, seed: int = 0) -> dict[Any, NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    return {r.key: rng.standard_normal(r.native_shape).astype(np.float32) for r in layout.rows}


def test_named_permutations() -> None:
    assert channels_last_kernel(2) == DENSE_IN_OUT == (1, 0)
    assert channels_last_kernel(4) == CONV_HWIO == (3, 2, 0, 1)
    assert channels_last_kernel(3) == (2, 1, 0)  # WIO -> OIW
    with pytest.raises(LayoutError):
        channels_last_kernel(1)


def test_manifest_has_canonical_names_and_shapes() -> None:
    # REQ: DF-MAN-2
    lay = flax_like()
    assert lay.manifest == Manifest.from_named_shapes(
        {"conv1.weight": (4, 1, 3, 3), "conv1.bias": (4,), "fc1.weight": (5, 6), "fc1.bias": (5,)}
    )
    assert lay.keys[0] == ("params", "Conv_0", "bias")  # canonical order: conv1.bias first


def test_to_canonical_is_the_transpose() -> None:
    lay = flax_like()
    arrs = native_arrays(lay)
    flat = lay.to_canonical(arrs)
    views = lay.manifest.split(flat)
    k = arrs[("params", "Conv_0", "kernel")]
    np.testing.assert_array_equal(views["conv1.weight"], k.transpose(3, 2, 0, 1))
    np.testing.assert_array_equal(views["fc1.weight"], arrs[("params", "Dense_0", "kernel")].T)
    np.testing.assert_array_equal(views["fc1.bias"], arrs[("params", "Dense_0", "bias")])


@st.composite
def layouts(draw: st.DrawFn) -> CanonicalLayout:
    n = draw(st.integers(1, 4))
    rows = []
    for i in range(n):
        shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
        perm = tuple(draw(st.permutations(range(len(shape)))))
        rows.append(LayoutRow(f"k{i}", f"t{draw(st.integers(0, 999))}.{i}", shape, perm))
    return CanonicalLayout(rows)


@given(layouts(), st.integers(0, 2**32 - 1))
@settings(max_examples=150, deadline=None)
def test_round_trip(lay: CanonicalLayout, seed: int) -> None:
    arrs = native_arrays(lay, seed)
    flat = lay.to_canonical(arrs)
    assert flat.dtype == np.float32 and flat.shape == (lay.num_params,)
    back = lay.from_canonical(flat)
    for key, a in arrs.items():
        assert back[key].shape == a.shape and back[key].flags.c_contiguous
        np.testing.assert_array_equal(back[key], a)
    np.testing.assert_array_equal(lay.to_canonical(back), flat)


@given(layouts(), st.integers(0, 2**32 - 1), st.data())
@settings(max_examples=150, deadline=None)
def test_sparse_apply_equals_dense_apply(
    lay: CanonicalLayout, seed: int, data: st.DataObject
) -> None:
    """REQ: DF-RCV-7: applying an aggregate through the native index map changes exactly the
    canonical elements, by fl32(active + agg), as the same apply on the canonical vector."""
    n = lay.num_params
    arrs = native_arrays(lay, seed)
    store = NumpyStore(arrs, lay)
    dense = lay.to_canonical(arrs)
    idx = np.array(
        sorted(data.draw(st.sets(st.integers(0, max(0, n - 1)), max_size=n))) if n else [],
        dtype=np.uint32,
    )
    vals = np.random.default_rng(seed).standard_normal(idx.size).astype(np.float32)
    np.testing.assert_array_equal(store.gather(idx), dense[idx])
    store.apply(idx, vals)
    dense[idx] = dense[idx] + vals
    np.testing.assert_array_equal(store.gather(), dense)


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([("a", "x", (2, 3), (0, 0))], "permutation"),
        ([("a", "x", (2, 3), (0, 1, 2))], "permutation"),
        ([("a", "x", (2, 3), (0, True))], "permutation"),
        ([("a", "x", (2, -1))], "dimension"),
        ([("a", "x", (2, 1.5))], "dimension"),
        ([("a", "x", 3)], "sequence"),
        ([("a", "x", (2,)), ("a", "y", (2,))], "duplicate native keys"),
        ([("a", "x", (2,)), ("b", "x", (2,))], "duplicate tensor names"),
        ([("a", "", (2,))], "empty"),
        ([("a", "bad\nname", (2,))], "control"),
        ([(["unhashable"], "x", (2,))], "hashable"),
        ([("a", 7, (2,))], "must be str"),
        ([("a", "x")], "layout row"),
    ],
)
def test_bad_tables_raise_typed_errors(rows: list[Any], match: str) -> None:
    # REQ: DF-MAN-1
    with pytest.raises(LayoutError, match=match) as info:
        CanonicalLayout(rows)
    assert isinstance(info.value, DeltaFabricError) and isinstance(info.value, ValueError)


def test_bad_arrays_raise_and_change_nothing() -> None:
    lay = flax_like()
    arrs = native_arrays(lay)
    out = np.zeros(lay.num_params, dtype=np.float32)
    wrong = dict(arrs)
    wrong[("params", "Dense_0", "kernel")] = np.zeros(
        (5, 6), dtype=np.float32
    )  # canonical, not native
    with pytest.raises(LayoutError, match="native shape"):
        lay.to_canonical(wrong)
    missing = dict(arrs)
    del missing[("params", "Conv_0", "bias")]
    with pytest.raises(LayoutError, match="missing"):
        lay.to_canonical(missing, out=out)
    with pytest.raises(LayoutError):
        lay.to_canonical(arrs, out=np.zeros(3, dtype=np.float32))
    with pytest.raises(LayoutError):
        lay.from_canonical(np.zeros(lay.num_params + 1, dtype=np.float32))
    for bad in ([3, 1], [0, lay.num_params], [[1]]):
        with pytest.raises(LayoutError):
            list(lay.locate(np.asarray(bad)))


def test_native_index_matches_the_transpose() -> None:
    lay = flax_like()
    key = ("params", "Conv_0", "kernel")
    r = lay.row(key)
    native = np.arange(np.prod(r.native_shape)).reshape(r.native_shape)
    canonical = native.transpose(r.perm).reshape(-1)
    local = np.arange(canonical.size)
    np.testing.assert_array_equal(lay.native_index(key, local), canonical)
