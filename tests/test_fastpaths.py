"""The sync path's fast paths give what the paths they replace give, bit for bit, on random inputs.

- `Selector.select_delta` (one blocked pass over ``active - anchor``) against ``select(d)`` on the
  materialised ``d`` (DF-GEN-1, 3, 7);
- the engine's union of an aggregate's indices (`delta_fabric.engine._sorted_unique`, now an
  unstable sort) against ``np.unique`` and the stable sort it replaces;
- `Manifest.locate` with ``checked=True`` (the store's checks already made) against the checking
  path, and `TorchStore.gather` / `apply` against plain NumPy on the flat vector.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from delta_fabric import selection
from delta_fabric.engine import _sorted_unique
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.selection import Selector
from delta_fabric.stores.torch import TorchStore
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -0.5, 3.0, 1e-30, np.inf, -np.inf, np.nan, 7.25]


def _split(a: NDArray[np.float32], cuts: list[int]) -> list[NDArray[np.float32]]:
    bounds = sorted({min(max(c, 0), a.size) for c in cuts} | {0, a.size})
    return [a[x:y] for x, y in itertools.pairwise(bounds)] or [a]


def _bits(a: NDArray[np.float32]) -> list[int]:
    return [int(x) for x in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)]


def _check_select_delta(
    active: NDArray[np.float32],
    anchor: NDArray[np.float32],
    cuts: list[int],
    k: int,
    fast: bool,
    sample_min_n: int,
) -> str:
    n = active.size
    with np.errstate(invalid="ignore"):
        d = np.subtract(active, anchor)
    ref = Selector(n, sample_min_n=sample_min_n)
    want = ref.select(d, k, fast=fast)
    sel = Selector(n, sample_min_n=sample_min_n)
    got, dsel = sel.select_delta(_split(active, cuts), anchor, k, fast=fast)
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist(), (ref.last_path, sel.last_path)
    assert _bits(dsel) == _bits(d[want])
    assert sel.last_path == ref.last_path
    return sel.last_path


@st.composite
def _cases(draw: st.DrawFn) -> tuple[NDArray[np.float32], NDArray[np.float32], list[int], int]:
    n = draw(st.integers(1, 600))
    kind = draw(st.sampled_from(["special", "normal", "sparse", "periodic"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if kind == "special":
        active = rng.choice(np.array(_SPECIAL, dtype=np.float32), n)
        anchor = rng.choice(np.array(_SPECIAL[:9], dtype=np.float32), n)
    else:
        anchor = rng.standard_normal(n).astype(np.float32)
        step = rng.standard_normal(n).astype(np.float32)
        if kind == "sparse":
            step[rng.random(n) < 0.9] = 0.0
        elif kind == "periodic":  # aligned with a sample stride: the sample sees only zeros
            step[::2] = 0.0
        active = (anchor + step).astype(np.float32)
    cuts = draw(st.lists(st.integers(0, n), max_size=6))
    k = draw(st.integers(1, n + 3))
    return active, anchor, cuts, k


@given(_cases(), st.booleans(), st.sampled_from([1, 3, 64, 1 << 16]))
@settings(max_examples=300, deadline=None)
def test_select_delta_is_select_of_the_difference(
    case: tuple[NDArray[np.float32], NDArray[np.float32], list[int], int], fast: bool, block: int
) -> None:
    active, anchor, cuts, k = case
    saved = selection._BLOCK
    selection._BLOCK = block
    try:
        for sample_min_n in (0, 1 << 30):
            _check_select_delta(active, anchor, cuts, k, fast, sample_min_n)
    finally:
        selection._BLOCK = saved


@pytest.mark.parametrize("fast", [False, True])
def test_select_delta_large_inputs(fast: bool) -> None:
    n = 400_000
    rng = np.random.default_rng(11)
    anchor = rng.standard_normal(n).astype(np.float32)
    active = (anchor + rng.standard_normal(n).astype(np.float32)).astype(np.float32)
    active[rng.integers(0, n, 50_000)] = anchor[0]
    active[:1000] = anchor[:1000] + np.float32(0.25)  # ties
    active[5] = np.nan
    cuts = [64, 1000, 70_000, 300_001]
    paths = {
        _check_select_delta(active, anchor, cuts, k, fast, selection._SMALL_N)
        for k in (1, 37, 4_000, 20_000, 40_000, 150_000, n)
    }
    assert paths >= {"trim" if not fast else "sample", "all"}, paths


@pytest.mark.parametrize("fast", [False, True])
def test_select_delta_nothing_to_send_on_the_sample_path(fast: bool) -> None:
    # REQ: DF-GEN-8
    # active == anchor at N >= 2^17 (the sample path): no candidate, so no index and no value,
    # whatever the block structure (the empty concatenation of no selected block)
    n = selection._SMALL_N + 12_345
    anchor = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    for parts in ([anchor.copy()], [anchor[:70_000].copy(), anchor[70_000:].copy()]):
        for k in (100, n // 10):  # n // 10: the sample aims (its threshold is 0: "all")
            sel = Selector(n)
            idx, vals = sel.select_delta(parts, anchor, k, fast=fast)
            assert idx.size == 0 and vals.size == 0, (k, sel.last_path)


def test_select_delta_checks_arguments() -> None:
    sel = Selector(4)
    z = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError):
        sel.select_delta([z[:3]], z, 1)
    with pytest.raises(ValueError):
        sel.select_delta([z], np.zeros(5, dtype=np.float32), 1)
    with pytest.raises(ValueError):
        sel.select_delta([z.astype(np.float64)], z, 1)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        sel.select_delta([z], z, 0)


@given(
    st.lists(st.lists(st.integers(0, 5000), max_size=300), min_size=1, max_size=5),
)
@settings(max_examples=200, deadline=None)
def test_sorted_unique_is_the_stable_merge(lists: list[list[int]]) -> None:
    parts = [np.array(sorted(set(x)), dtype=np.uint32) for x in lists]
    got = _sorted_unique(parts)
    s = np.sort(np.concatenate(parts), kind="stable")  # the former path
    keep = np.empty(s.size, dtype=bool)
    keep[:1] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    assert got.dtype == np.uint32
    assert got.tolist() == s[keep].tolist() == np.unique(np.concatenate(parts)).tolist()


@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=6),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["u4", "u8", "i8", "i4"]),
)
@settings(max_examples=200, deadline=None)
def test_locate_checked_is_locate(sizes: list[int], seed: int, dtype: str) -> None:
    m = Manifest(TensorSpec(f"t{i}", (s,)) for i, s in enumerate(sizes))
    rng = np.random.default_rng(seed)
    n = m.num_params
    flat = np.flatnonzero(rng.random(n) < rng.random()).astype(dtype)
    want = m.locate(flat)
    got = m.locate(flat, checked=True)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.tensor, g.name, g.start, g.stop) == (w.tensor, w.name, w.start, w.stop)
        assert g.local.dtype == w.local.dtype == np.int64
        assert g.local.tolist() == w.local.tolist()


@given(st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
@settings(max_examples=60, deadline=None)
def test_torch_store_gather_and_apply_match_numpy(seed: int, density: float) -> None:
    torch.manual_seed(seed % 1000)
    module = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3))
    store = TorchStore(module)
    flat = store.gather()
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(rng.random(flat.size) < density).astype(np.uint32)
    assert _bits(store.gather(idx)) == _bits(flat[idx])
    vals = rng.standard_normal(idx.size).astype(np.float32)
    store.apply(idx, vals)
    want = flat.copy()
    want[idx] = want[idx] + vals
    assert _bits(store.gather()) == _bits(want)


def _leb128(values: list[int]) -> bytes:
    out = bytearray()
    for x in values:
        while x >= 0x80:
            out.append((x & 0x7F) | 0x80)
            x >>= 7
        out.append(x)
    return bytes(out)


_gap_lists = st.lists(
    st.one_of(st.integers(1, 127), st.integers(128, 1 << 20), st.integers(1 << 20, 1 << 27)),
    min_size=1,
    max_size=400,
)


@given(_gap_lists, st.integers(0, 1 << 20))
@settings(max_examples=300, deadline=None)
def test_varints_and_their_sums_match_leb128(gaps: list[int], first: int) -> None:
    # the varint codec's cumulative sums run without a type conversion (compact._varints,
    # _varint_sums, unpack_indices' one-byte path): same bytes and indices as plain LEB128
    from delta_fabric import compact

    values = [first, *gaps]
    idx = np.cumsum(np.array(values, dtype=np.uint64))
    if int(idx[-1]) >= 1 << 32:
        return
    v = np.array(values, dtype=np.uint32)
    assert compact._varints(v) == _leb128(values)
    assert compact._varints(v.astype(np.uint64)) == _leb128(values)
    data = np.frombuffer(_leb128(values), dtype=np.uint8)
    assert compact._varint_sums(data).tolist() == idx.tolist()
    assert compact._varint_sums(data).dtype == np.uint64
    got = compact.unpack_indices(bytes([compact.FORM_DELTA]) + _leb128(values))
    assert got.dtype == np.uint32 and got.tolist() == idx.tolist()
    u32 = idx.astype(np.uint32)
    assert compact.unpack_indices(compact.encode_indices(u32)).tolist() == idx.tolist()
    small = [first % 128, *(g % 127 + 1 for g in gaps)]  # one-byte varints only
    one = compact.unpack_indices(bytes([compact.FORM_DELTA]) + bytes(small))
    assert one.dtype == np.uint32 and one.tolist() == np.cumsum(small).tolist()
    assert (
        compact._varint_sums(np.array(small, dtype=np.uint8)).tolist() == np.cumsum(small).tolist()
    )


@given(
    st.integers(1, 3000),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=200, deadline=None)
def test_engine_union_is_the_sorted_unique(n: int, densities: list[float], seed: int) -> None:
    # Engine._union marks an N-value scratch when the parts hold N/8 indices or more, and sorts
    # otherwise: both give _sorted_unique's result as intp, and the scratch is clear afterwards
    from delta_fabric.config import SyncConfig
    from delta_fabric.engine import Engine

    rng = np.random.default_rng(seed)
    m = Manifest([TensorSpec("w", (n,))])
    eng = Engine(m, SyncConfig.v1_0(), 1, 1)
    parts = [np.flatnonzero(rng.random(n) < p).astype(np.uint32) for p in densities]
    parts = [p for p in parts if p.size] or [np.array([n - 1], dtype=np.uint32)]
    for _ in range(2):
        got = eng._union(parts)
        assert got.dtype == np.intp
        assert got.tolist() == _sorted_unique(parts).tolist()
        assert eng._mark is None or not bool(eng._mark.any())
