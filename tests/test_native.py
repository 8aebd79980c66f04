"""The OPTIONAL native kernels (`delta_fabric_native`, python/native) give the NumPy core's bits.

- `delta_fabric.native.kernels` and ``DELTA_FABRIC_NATIVE`` (never skipped: a missing extension
  with ``on`` and a bad value are `NativeError`);
- every kernel against its NumPy reference on random and hostile inputs (f32 results compared as
  bit patterns), and its argument checks (a refused call writes nothing);
- `compact.unpack_indices` / `encode_indices`, `Engine.receive` (the sparse aggregate, its switch
  to the dense scratch, DF-RCV-50 on the anchor and on the active weights given flat, as a function
  and as parts), `Engine.generate` (the selector's native candidate pass) and `TorchStore.apply`
  with the kernels on and off.

Every test but the first two needs the extension (fixture ``nat``: skipped without it).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
from delta_fabric import compact, native
from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.engine import Engine, NonFiniteDelta, ReceiveResult, _parts_add_finite
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.fabric import Fabric
from delta_fabric.manifest import Manifest
from delta_fabric.native import NativeError
from delta_fabric.selection import _SMALL_N, Selector, _trim_mask
from delta_fabric.wire import (
    Entry,
    IndexEncoding,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

ENV = "DELTA_FABRIC_NATIVE"

# --- the switch (never skipped) -------------------------------------------------------------------


def test_on_without_the_extension_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "delta_fabric_native", None)  # import raises ImportError
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv(ENV, "on")
    with pytest.raises(NativeError, match="not installed"):
        native.kernels()
    assert isinstance(NativeError("x"), ImportError)
    for value in ("auto", "", "off", "0", " OFF "):
        monkeypatch.setenv(ENV, value)
        assert native.kernels() is None
    monkeypatch.setenv(ENV, "1")
    with pytest.raises(NativeError):
        native.kernels()
    # an extension of another kernel API: refused with on, ignored with auto
    other = ModuleType("delta_fabric_native")
    other.API = native.API + 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "delta_fabric_native", other)
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv(ENV, "on")
    with pytest.raises(NativeError, match="kernel API"):
        native.kernels()
    monkeypatch.setenv(ENV, "auto")
    assert native.kernels() is None


def test_a_bad_mode_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv(ENV, "maybe")
    with pytest.raises(NativeError, match="maybe"):
        native.mode()
    with pytest.raises(NativeError, match="maybe"):
        native.kernels()
    monkeypatch.delenv(ENV)
    assert native.mode() == "auto"


def test_describe_says_whether_the_kernels_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``--version`` and the demo's summary print about the kernels, in every state."""
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv(ENV, "off")
    assert native.describe() == "off by DELTA_FABRIC_NATIVE"
    monkeypatch.setenv(ENV, "maybe")
    assert native.describe().startswith("error: DELTA_FABRIC_NATIVE='maybe'")
    monkeypatch.setenv(ENV, "auto")
    monkeypatch.setitem(sys.modules, "delta_fabric_native", None)
    assert native.describe() == "not installed"
    monkeypatch.setenv(ENV, "on")
    assert native.describe().startswith("error: DELTA_FABRIC_NATIVE=on but")
    other = ModuleType("delta_fabric_native")
    other.API = native.API + 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "delta_fabric_native", other)
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv(ENV, "auto")
    assert (
        native.describe() == f"not used: kernel API {native.API + 1}, this core needs {native.API}"
    )
    current = ModuleType("delta_fabric_native")
    current.API = native.API  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "delta_fabric_native", current)
    monkeypatch.setattr(native, "_loaded", {})
    assert native.describe() == "used"


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--nodes", "1", "--", sys.executable, "-c", "pass"],
        ["demo", "--steps", "2", "--output", "{tmp}"],
    ],
    ids=["run", "demo"],
)
def test_launchers_check_the_switch_before_any_node(tmp_path: Any, command: list[str]) -> None:
    """A bad DELTA_FABRIC_NATIVE is one line and exit 2 before a node starts (the nodes inherit it)."""
    env = {**os.environ, ENV: "maybe"}
    argv = [a.replace("{tmp}", str(tmp_path / "out")) for a in command]
    r = subprocess.run(
        [sys.executable, "-m", "delta_fabric.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "DELTA_FABRIC_NATIVE='maybe'" in r.stderr
    assert not (tmp_path / "out" / "logs").exists()  # no node was started


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    # ImportError, as `kernels` reads it: a missing or unloadable extension (the NumPy core only)
    mod = pytest.importorskip("delta_fabric_native", exc_type=ImportError)
    assert mod.API == native.API
    return mod


@contextmanager
def _mode(value: str) -> Iterator[None]:
    """``DELTA_FABRIC_NATIVE=value`` for the block (no monkeypatch: usable inside `given`)."""
    old = os.environ.get(ENV)
    os.environ[ENV] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = old


def _bits(a: NDArray[Any]) -> NDArray[np.uint32]:
    arr = np.asarray(a)
    assert arr.dtype == np.float32, arr.dtype
    return np.ascontiguousarray(arr).view(np.uint32)


def _same_bits(a: NDArray[Any], b: NDArray[Any]) -> None:
    ba, bb = _bits(a), _bits(b)
    assert ba.shape == bb.shape
    if not np.array_equal(ba, bb):
        bad = np.flatnonzero(ba != bb)[:8]
        raise AssertionError(f"bits differ at {bad.tolist()}: {ba[bad]} != {bb[bad]}")


def _same_sum(got: NDArray[Any], want: NDArray[Any], x: NDArray[Any], y: NDArray[Any]) -> None:
    """`_same_bits` for ``want = fl32(x + y)``, except where both ``x`` and ``y`` are NaN: there
    the result only has to be a NaN. IEEE 754 leaves open which operand's payload a sum of two NaNs
    carries, and NumPy itself gives either (its SIMD body and its scalar tail take the operands in
    opposite order: ``np.full(n, qnan) + np.full(n, snan)`` differs between n = 16 and n = 17)."""
    both = np.isnan(x) & np.isnan(y)
    assert np.isnan(got[both]).all()
    g = np.array(got, dtype=np.float32)
    g[both] = want[both]
    _same_bits(g, want)


_F32_MAX = float(np.finfo(np.float32).max)
_SPECIAL = np.concatenate(
    [
        np.array(
            [
                0.0,
                -0.0,
                1.0,
                -1.0,
                0.5,
                3.0,
                1e-30,
                1e-45,
                -1e-45,
                3.0e38,
                -3.0e38,
                _F32_MAX,
                -_F32_MAX,
                np.inf,
                -np.inf,
                np.nan,
            ],
            dtype=np.float32,
        ),
        # NaNs with a payload, a negative one and a signalling one
        np.array([0x7FC00001, 0xFFC00000, 0x7FA00000, 0xFF800001], dtype=np.uint32).view(
            np.float32
        ),
    ]
)
_FINITE_SPECIAL = _SPECIAL[np.isfinite(_SPECIAL)]


def _f32(rng: np.random.Generator, n: int, kind: str) -> NDArray[np.float32]:
    """``n`` f32 values: ``normal``, ``special`` (zeros, signed zeros, huge, inf, NaN payloads),
    ``mixed`` (normal with a tenth special) or ``finite`` (mixed without inf and NaN)."""
    if kind == "special":
        return rng.choice(_SPECIAL, n)
    a = rng.standard_normal(n).astype(np.float32)
    if kind in ("mixed", "finite"):
        pool = _SPECIAL if kind == "mixed" else _FINITE_SPECIAL
        m = rng.random(n) < 0.1
        a[m] = rng.choice(pool, int(m.sum()))
    return a


def _ascending(rng: np.random.Generator, n: int, k: int) -> NDArray[np.uint32]:
    """Up to ``k`` distinct indices ``< n``, ascending, u32."""
    if n == 0 or k == 0:
        return np.empty(0, dtype=np.uint32)
    return np.unique(rng.integers(0, n, k)).astype(np.uint32)


def _split(a: NDArray[np.float32], cuts: list[int]) -> list[NDArray[np.float32]]:
    """``a`` as consecutive views (empty parts kept: repeated cuts)."""
    bounds = [0, *sorted(min(max(c, 0), a.size) for c in cuts), a.size]
    return [a[x:y] for x, y in itertools.pairwise(bounds)]


def _index_as(ix: NDArray[np.uint32], kind: str) -> NDArray[Any]:
    return ix if kind == "u32" else ix.astype(np.intp)


_KINDS = st.sampled_from(["normal", "special", "mixed", "finite"])
_SEEDS = st.integers(0, 2**32 - 1)


# --- packed indices: varint_sums and varint_gaps --------------------------------------------------


def _leb(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


_TOKENS = st.one_of(
    st.integers(0, 127).map(_leb),
    st.integers(0, 2**32 - 1).map(_leb),
    st.sampled_from(
        [
            b"\x80",  # a continuation byte (truncated at the end)
            b"\x80\x00",  # overlong
            b"\xff\x00",  # overlong
            b"\x80\x80\x80\x80\x80\x01",  # 6 bytes
            b"\xff\xff\xff\xff\xff\xff\x7f",  # 7 bytes
            b"\xff\xff\xff\xff\x10",  # a 5th byte above 4 bits
            b"\x80\x80\x80\x80\x7f",
            b"\xff\xff\xff\xff\x0f",  # 2**32 - 1: two of them sum above 2**32
            b"\x80\x80\x80\x80\x01",  # 2**28
            b"\x00",  # a gap of 0
        ]
    ),
    st.binary(min_size=1, max_size=3),
)
_BODIES = st.one_of(
    st.lists(_TOKENS, max_size=40).map(b"".join),
    st.binary(max_size=64),
    st.lists(st.integers(0, 127), min_size=1, max_size=64).map(bytes),
)


def _unpack(packed: bytes, value: str) -> tuple[str, Any]:
    with _mode(value):
        try:
            got = compact.unpack_indices(packed)
        except DecodeError as exc:
            assert exc.code is ErrorCode.MALFORMED
            return "error", str(exc)
    assert got.dtype == np.uint32
    return "ok", got.tolist()


def _malformed(message: str) -> str:
    return str(DecodeError(ErrorCode.MALFORMED, message))


@given(_BODIES)
@settings(max_examples=400)
def test_varint_sums_is_the_numpy_decoder(nat: ModuleType, body: bytes) -> None:
    data = np.frombuffer(body, dtype=np.uint8)
    out = np.empty(max(data.size, 1), dtype=np.uint32)
    got = nat.varint_sums(data, out)
    want = _unpack(b"\x00" + body, "off")
    assert _unpack(b"\x00" + body, "on") == want
    if not body:
        assert got == 0
    elif got < 0:
        assert want == ("error", _malformed(compact._VARINT_FAULTS[-got]))
    else:
        assert want == ("ok", out[:got].tolist())
        # the same sums as the reference decoder (the one-byte fast path aside)
        assert compact._varint_sums(data).tolist() == want[1]


@given(_BODIES, st.sampled_from([b"\x00", b"\x01", b"\x07", b""]))
@settings(max_examples=150)
def test_unpack_indices_on_and_off(nat: ModuleType, body: bytes, form: bytes) -> None:
    packed = form + body
    assert _unpack(packed, "on") == _unpack(packed, "off")


def test_varint_sums_faults_in_order(nat: ModuleType) -> None:
    cases = {
        b"\x05\x80": -1,
        b"\x80\x80\x80\x80\x80\x01\x80\x00\x80": -1,  # truncated first
        b"\x80\x80\x80\x80\x80\x01": -2,
        b"\x80\x00\x80\x80\x80\x80\x80\x01": -2,  # too long before overlong, wherever they are
        b"\x80\x00": -3,
        b"\xff\xff\xff\xff\x10\x80\x00": -3,  # overlong before too big
        b"\xff\xff\xff\xff\x10": -4,
        b"\xff\xff\xff\xff\x0f\x01": -5,
        b"\xff\xff\xff\xff\x0f\x00": 2,  # 2**32 - 1 and a gap of 0
        b"\x01\x00\x00": 3,
    }
    for body, code in cases.items():
        out = np.zeros(len(body), dtype=np.uint32)
        assert nat.varint_sums(np.frombuffer(body, dtype=np.uint8), out) == code, body
        kind, what = _unpack(b"\x00" + body, "off")
        if code < 0:
            assert (kind, what) == ("error", _malformed(compact._VARINT_FAULTS[-code]))
        else:
            assert kind == "ok" and len(what) == code
    assert nat.varint_sums(np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint32)) == 0


@st.composite
def _index_sets(draw: st.DrawFn) -> NDArray[np.uint32]:
    rng = np.random.default_rng(draw(_SEEDS))
    kind = draw(st.sampled_from(["dense", "sparse", "huge", "one", "edges"]))
    size = draw(st.integers(1, 200))
    if kind == "dense":
        return np.unique(rng.integers(0, 2 * size, size)).astype(np.uint32)
    if kind == "sparse":
        return np.unique(rng.integers(0, 1 << 20, size)).astype(np.uint32)
    if kind == "huge":
        return np.unique(rng.integers(0, 1 << 32, size, dtype=np.uint64)).astype(np.uint32)
    if kind == "one":
        return np.array([draw(st.integers(0, 2**32 - 1))], dtype=np.uint32)
    return np.array([0, 127, 128, 16383, 16384, 2**21, 2**28, 2**32 - 1], dtype=np.uint32)


@given(_index_sets())
@settings(max_examples=300)
def test_varint_gaps_is_varints_of_gaps(nat: ModuleType, idx: NDArray[np.uint32]) -> None:
    out = np.full(5 * idx.size + 3, 0xAA, dtype=np.uint8)
    m = nat.varint_gaps(idx, out)
    want = compact._varints(compact._gaps(idx))
    assert out[:m].tobytes() == want
    assert (out[m:] == 0xAA).all()
    with _mode("on"):
        on = compact.encode_indices(idx)
    with _mode("off"):
        off = compact.encode_indices(idx)
    assert on == off
    assert compact.decode_indices(on).tolist() == idx.tolist()


# --- gathers and scatters -----------------------------------------------------------------------


@given(
    _SEEDS,
    _KINDS,
    _KINDS,
    st.integers(1, 300),
    st.integers(0, 300),
    st.sampled_from(["u32", "intp"]),
)
@settings(max_examples=200)
def test_gather_add_and_gather(
    nat: ModuleType, seed: int, ks: str, ka: str, n: int, m: int, ixk: str
) -> None:
    rng = np.random.default_rng(seed)
    src = _f32(rng, n, ks)
    ix = _index_as(rng.integers(0, n, m).astype(np.uint32), ixk)  # duplicates, any order
    a = _f32(rng, m, ka)
    out = np.full(m, 7.0, dtype=np.float32)
    finite = nat.gather_add(src, ix, a, out)
    with np.errstate(over="ignore", invalid="ignore"):
        want = src[ix] + a
    _same_sum(out, want, src[ix], a)
    assert finite is bool(np.isfinite(want).all())
    # the engine's call: src is the anchor, out a fresh array (aliasing a with out is well defined)
    x = src[ix]
    y = a.copy()
    nat.gather_add(src, ix, a, a)
    _same_sum(a, want, x, y)


@given(_SEEDS, _KINDS, st.integers(1, 200), st.integers(0, 300), st.sampled_from(["u32", "intp"]))
@settings(max_examples=200)
def test_scatter_last_write_wins(
    nat: ModuleType, seed: int, kind: str, n: int, m: int, ixk: str
) -> None:
    rng = np.random.default_rng(seed)
    dst = _f32(rng, n, "mixed")
    ix = _index_as(rng.integers(0, n, m).astype(np.uint32), ixk)  # duplicates: the last wins
    vals = _f32(rng, m, kind)
    want = dst.copy()
    want[ix] = vals
    nat.scatter(dst, ix, vals)
    _same_bits(dst, want)


@given(
    _SEEDS,
    st.integers(1, 200),
    st.integers(0, 300),
    st.sampled_from([*_SPECIAL.tolist(), 7.25, 0.1, 1e-50, 3.4028235677973366e38, 3.5e38]),
)
@settings(max_examples=100)
def test_scatter_value(nat: ModuleType, seed: int, n: int, m: int, value: float) -> None:
    rng = np.random.default_rng(seed)
    dst = _f32(rng, n, "mixed")
    ix = rng.integers(0, n, m).astype(np.uint32)
    want = dst.copy()
    with np.errstate(over="ignore"):
        want[ix] = np.float32(value)
    nat.scatter_value(dst, ix, value)  # a Python float, rounded to f32 as NumPy's assignment does
    _same_bits(dst, want)
    nat.scatter_value(dst, ix.astype(np.intp), -0.0)
    want[ix] = -0.0
    _same_bits(dst, want)


@given(
    _SEEDS,
    _KINDS,
    _KINDS,
    st.integers(1, 300),
    st.integers(0, 300),
    st.sampled_from(["u32", "intp"]),
)
@settings(max_examples=200)
def test_scatter_add_distinct(
    nat: ModuleType, seed: int, kd: str, kv: str, n: int, m: int, ixk: str
) -> None:
    rng = np.random.default_rng(seed)
    dst = _f32(rng, n, kd)
    ix = _index_as(_ascending(rng, n, m), ixk)
    vals = _f32(rng, ix.size, kv)
    want = dst.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        want[ix] = want[ix] + vals
    x = dst.copy()
    y = np.zeros(n, np.float32)
    y[ix] = vals
    nat.scatter_add(dst, ix, vals)
    _same_sum(dst, want, x, y)


# --- the active weights as parts ------------------------------------------------------------------


@given(
    _SEEDS,
    _KINDS,
    _KINDS,
    st.integers(1, 400),
    st.integers(0, 400),
    st.lists(st.integers(0, 400), max_size=6),
    st.sampled_from(["u32", "intp"]),
)
@settings(max_examples=200)
def test_check_sums_and_parts_scatter_add(
    nat: ModuleType,
    seed: int,
    kact: str,
    ka: str,
    n: int,
    m: int,
    cuts: list[int],
    ixk: str,
) -> None:
    rng = np.random.default_rng(seed)
    active = _f32(rng, n, kact)
    idx = _ascending(rng, n, m)
    a = _f32(rng, idx.size, ka)
    with np.errstate(over="ignore", invalid="ignore"):
        want_sum = active[idx] + a
    parts = [p.copy() for p in _split(active, cuts)]  # separate arrays, concatenation = active
    finite = bool(np.isfinite(want_sum).all())
    with np.errstate(over="ignore", invalid="ignore"):
        assert finite is _parts_add_finite(None, parts, idx, a)  # the NumPy fallback over parts
    # check_sums: the anchor's sums written, both sides' verdict
    anchor = _f32(rng, n, ka)
    with np.errstate(over="ignore", invalid="ignore"):
        anchor_sum = anchor[idx] + a
    out = np.full(idx.size, 7.0, dtype=np.float32)
    ok = nat.check_sums(anchor, parts, _index_as(idx, ixk), a, out)
    _same_sum(out, anchor_sum, anchor[idx], a)
    assert ok is (bool(np.isfinite(anchor_sum).all()) and finite)
    want = active.copy()
    want[idx] = want_sum
    y = np.zeros(n, np.float32)
    y[idx] = a
    nat.parts_scatter_add(parts, _index_as(idx, ixk), a)
    _same_sum(np.concatenate(parts), want, active, y)
    # views of one flat array as the parts (as TorchStore.host_parts gives)
    flat = active.copy()
    nat.parts_scatter_add(_split(flat, cuts), idx, a)
    _same_sum(flat, want, active, y)


# --- union ----------------------------------------------------------------------------------------


@given(
    _SEEDS,
    st.integers(1, 3000),
    st.integers(0, 6),
    st.sampled_from([0.0, 0.01, 0.05, 0.2, 1.0]),
)
@settings(max_examples=250)
def test_union_is_union1d(nat: ModuleType, seed: int, n: int, count: int, fill: float) -> None:
    rng = np.random.default_rng(seed)
    lists = [
        _ascending(rng, n, int(rng.integers(0, max(1, int(fill * n)) + 1))) for _ in range(count)
    ]
    total = sum(x.size for x in lists)
    out = np.full(total + 2, -7, dtype=np.intp)
    m = nat.union(lists, n, out)
    want = np.empty(0, dtype=np.uint32)
    for x in lists:
        want = np.union1d(want, x)
    assert out[:m].tolist() == want.astype(np.intp).tolist()
    assert (out[m:] == -7).all()


def test_union_regimes(nat: ModuleType) -> None:
    rng = np.random.default_rng(5)
    n = 10_000
    for count in (2, 3, 5):
        for size in (10, 200, 5000):  # 8 * total below n (a sort) and above (a mark per index)
            lists = [_ascending(rng, n, size) for _ in range(count)]
            lists.append(lists[0].copy())  # a repeated list
            out = np.empty(sum(x.size for x in lists), dtype=np.intp)
            m = nat.union(lists, n, out)
            want = np.unique(np.concatenate(lists))
            assert out[:m].tolist() == want.tolist(), (count, size)
    a, b = np.array([0, 5, 9], np.uint32), np.array([1, 5, 10], np.uint32)
    out = np.empty(6, dtype=np.intp)
    assert out[: nat.union([a, b], 11, out)].tolist() == [0, 1, 5, 9, 10]
    assert nat.union([], 11, np.empty(0, dtype=np.intp)) == 0
    assert out[: nat.union([b], 11, out)].tolist() == [1, 5, 10]


# --- merge_add -------------------------------------------------------------------------------------


def _check_merge(
    nat: ModuleType,
    n: int,
    a: NDArray[np.uint32],
    av: NDArray[np.float32],
    b: NDArray[np.uint32],
    bv: NDArray[np.float32],
    slack: int = 0,
) -> NDArray[np.float32]:
    """`merge_add` against the dense pass: ``agg = zeros(n); agg[a] = av + 0; agg[b] += bv``.
    Returns the merged values."""
    agg = np.zeros(n, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        agg[a] = av + np.float32(0.0)
        before = agg.copy()
        agg[b] = agg[b] + bv
    union = np.union1d(a, b).astype(np.uint32)
    add = np.zeros(n, dtype=np.float32)
    add[b] = bv
    room = a.size + b.size + slack
    o_idx = np.full(room, 0xDEAD, dtype=np.uint32)
    o_val = np.full(room, 7.0, dtype=np.float32)
    new = np.full(b.size, 7.0, dtype=np.float32)
    m = nat.merge_add(a, av, b, bv, o_idx, o_val, new)
    assert m == union.size
    assert o_idx[:m].tolist() == union.tolist()
    _same_sum(o_val[:m], agg[union], before[union], add[union])
    _same_sum(new, agg[b], before[b], bv)
    return o_val[:m]


@given(
    _SEEDS,
    _KINDS,
    _KINDS,
    st.integers(1, 3000),
    st.integers(0, 400),
    st.integers(0, 400),
)
@settings(max_examples=300)
def test_merge_add_is_the_dense_sum(
    nat: ModuleType, seed: int, ka: str, kb: str, n: int, ma: int, mb: int
) -> None:
    rng = np.random.default_rng(seed)
    a = _ascending(rng, n, ma)
    b = _ascending(rng, n, mb)
    if rng.random() < 0.3 and a.size:  # heavy overlap
        b = np.union1d(b, a[rng.random(a.size) < 0.7]).astype(np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        av = _f32(rng, a.size, ka) + np.float32(0.0)  # an aggregate never holds -0 (fl32(+0 + u))
    bv = _f32(rng, b.size, kb)
    _check_merge(nat, n, a, av, b, bv, int(rng.integers(0, 3)))


def test_merge_add_first_part_and_signed_zeros(nat: ModuleType) -> None:
    # an empty aggregate: fl32(+0 + u), so -0 becomes +0 (DF-RCV-6: the sums start at +0)
    u = np.array([-0.0, 0.0, -1.0, np.inf, -np.inf, np.nan, 1e-45], dtype=np.float32)
    b = np.arange(2, 2 * u.size + 2, 2, dtype=np.uint32)
    empty_i, empty_v = np.empty(0, np.uint32), np.empty(0, np.float32)
    got = _check_merge(nat, 20, empty_i, empty_v, b, u)
    assert not np.signbit(got[0])  # fl32(+0 + -0) = +0
    _same_bits(got, np.add(u, np.float32(0.0), dtype=np.float32))
    # -0 onto +0 and onto an index the aggregate lacks; inf + -inf is NaN; the aggregate alone kept
    a = np.array([2, 4, 6, 100], np.uint32)
    av = np.array([0.0, np.inf, 5.0, 3.0], np.float32)
    b2 = np.array([2, 4, 7], np.uint32)
    bv = np.array([-0.0, -np.inf, -0.0], np.float32)
    got = _check_merge(nat, 101, a, av, b2, bv)
    assert not np.signbit(got[0]) and np.isnan(got[1]) and got[2] == 5.0
    assert not np.signbit(got[3]) and got[4] == 3.0


# --- trim -----------------------------------------------------------------------------------------


@given(
    _SEEDS,
    st.integers(1, 400),
    st.integers(1, 420),  # k >= 1, as the selector asks
    st.sampled_from(["normal", "ties", "tiny"]),
)
@settings(max_examples=300)
def test_trim_matches_the_trim_mask(nat: ModuleType, seed: int, c: int, k: int, kind: str) -> None:
    """`trim` keeps what `selection._trim_mask` keeps: the k largest |d|, ties by lower index."""
    rng = np.random.default_rng(seed)
    sel = np.sort(rng.choice(1 << 20, c, replace=False)).astype(np.intp)
    if kind == "ties":  # many equal magnitudes of both signs, infinities among them
        pool = np.array([0.5, -0.5, 1.0, -2.0, 2.0, np.inf, -np.inf], dtype=np.float32)
        d = rng.choice(pool, c)
    elif kind == "tiny":  # subnormals and one-ulp differences
        d = (rng.integers(1, 4, c) * np.float32(1e-45)).astype(np.float32)
    else:
        d = rng.standard_normal(c).astype(np.float32)
    room = max(k, 1)
    oi = np.full(room, -7, dtype=np.intp)
    od = np.full(room, 7.0, dtype=np.float32)
    m = nat.trim(sel, d, k, oi, od)
    if c <= k:
        want_i, want_d = sel, d
    else:
        keep = _trim_mask(np.abs(d), k)
        want_i, want_d = sel[keep], d[keep]
    assert m == want_i.size
    assert oi[:m].tolist() == want_i.tolist()
    _same_bits(od[:m], want_d)


def test_trim_refuses_bad_arguments(nat: ModuleType) -> None:
    sel = np.arange(4, dtype=np.intp)
    d = np.ones(4, dtype=np.float32)
    oi, od = np.zeros(2, np.intp), np.zeros(2, np.float32)
    for args in [
        (sel, d[:3], 2, oi, od),  # lengths differ
        (sel, d, 3, oi, od),  # outputs shorter than k
        (sel, np.array([1, np.nan, 1, 1], np.float32), 2, oi, od),  # NaN is never a candidate
    ]:
        with pytest.raises(ValueError):
            nat.trim(*args)
    with pytest.raises(TypeError):
        nat.trim(sel.astype(np.float64), d, 2, oi, od)
    assert oi.tolist() == [0, 0] and od.tolist() == [0.0, 0.0]


# --- collect_at_least ------------------------------------------------------------------------------


@given(
    _SEEDS,
    st.sampled_from(["normal", "mixed", "sparse", "ties"]),
    st.integers(1, 5000),
    st.lists(st.integers(0, 5000), max_size=5),
    st.sampled_from([0.0, -1.0, 1e-45, 0.25, 0.5, 1.0, 2.5, 3.0e38, float("inf"), float("nan")]),
    st.booleans(),
    st.integers(0, 50),
)
@settings(max_examples=200)
def test_collect_at_least(
    nat: ModuleType,
    seed: int,
    kind: str,
    n: int,
    cuts: list[int],
    t: float,
    zero: bool,
    room: int,
) -> None:
    rng = np.random.default_rng(seed)
    anchor = _f32(rng, n, "mixed" if kind == "mixed" else "normal")
    if kind == "ties":
        step = rng.choice(np.array([0.0, 0.5, -0.5, 1.0], np.float32), n)
    else:
        step = _f32(rng, n, "mixed" if kind == "mixed" else "normal")
        if kind == "sparse":
            step[rng.random(n) < 0.95] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        active = anchor + step
        d = active - anchor
    t32 = np.float32(t)
    mask = np.abs(d) > 0 if zero else np.abs(d) >= t32
    want = np.flatnonzero(mask)
    assert not np.isnan(d[want]).any()
    parts = _split(active, cuts)
    # room for all
    oi = np.full(want.size + 1, -3, dtype=np.intp)
    od = np.full(want.size + 1, 7.0, dtype=np.float32)
    c = nat.collect_at_least(parts, anchor, t32, zero, oi, od)
    assert c == want.size
    assert oi[:c].tolist() == want.tolist()
    _same_bits(od[:c], d[want])
    assert oi[c] == -3
    # the NumPy block loop it replaces
    with np.errstate(invalid="ignore"):
        sel, dsel = Selector(n)._candidates_numpy(parts, anchor, t32, zero)
    assert sel.tolist() == want.tolist()
    _same_bits(dsel, od[:c])
    # too little room: the full count, the first candidates written
    r = min(room, want.size)
    oi2 = np.full(r, -3, dtype=np.intp)
    od2 = np.full(r, 7.0, dtype=np.float32)
    assert nat.collect_at_least(parts, anchor, t32, zero, oi2, od2) == want.size
    assert oi2.tolist() == want[:r].tolist()
    _same_bits(od2, d[want[:r]])


# --- bad arguments: an error, nothing written -------------------------------------------------------


def _f(*v: float) -> NDArray[np.float32]:
    return np.array(v, dtype=np.float32)


def _u(*v: int) -> NDArray[np.uint32]:
    return np.array(v, dtype=np.uint32)


def _i(*v: int) -> NDArray[np.int64]:
    return np.array(v, dtype=np.int64)


def _ro(a: NDArray[Any]) -> NDArray[Any]:
    return np.frombuffer(a.tobytes(), dtype=a.dtype)


def _strided(a: NDArray[Any]) -> NDArray[Any]:
    return np.repeat(a, 2)[::2]


def _bad_cases() -> list[tuple[str, Callable[[Any, list[NDArray[Any]]], Any], Any]]:
    """(name, call(nat, written arrays), exception type); each call writes only into arrays
    it appends to the list (which the test checks unchanged)."""
    V = ValueError
    T = TypeError

    def dst(w: list[NDArray[Any]], n: int = 8) -> NDArray[np.float32]:
        d = np.arange(n, dtype=np.float32) + 0.5
        w.append(d)
        return d

    def parts(w: list[NDArray[Any]]) -> list[NDArray[np.float32]]:
        ps = [np.arange(3, dtype=np.float32), np.arange(5, dtype=np.float32) + 10]
        w.extend(ps)
        return ps

    cases: list[tuple[str, Callable[[Any, list[NDArray[Any]]], Any], Any]] = [
        # scatter
        ("scatter out of range", lambda m, w: m.scatter(dst(w), _u(0, 1, 8), _f(1, 2, 3)), V),
        ("scatter negative", lambda m, w: m.scatter(dst(w), _i(0, 1, -1), _f(1, 2, 3)), V),
        ("scatter huge i64", lambda m, w: m.scatter(dst(w), _i(0, 2**40), _f(1, 2)), V),
        ("scatter lengths", lambda m, w: m.scatter(dst(w), _u(0, 1), _f(1, 2, 3)), V),
        ("scatter f64 vals", lambda m, w: m.scatter(dst(w), _u(0), np.ones(1)), T),
        ("scatter f64 dst", lambda m, w: m.scatter(np.ones(8), _u(0), _f(1)), T),
        ("scatter i32 index", lambda m, w: m.scatter(dst(w), np.zeros(1, np.int32), _f(1)), T),
        ("scatter u64 index", lambda m, w: m.scatter(dst(w), np.zeros(1, np.uint64), _f(1)), T),
        ("scatter f32 index", lambda m, w: m.scatter(dst(w), _f(0), _f(1)), T),
        ("scatter read-only", lambda m, w: m.scatter(_ro(dst(w)), _u(0), _f(1)), V),
        ("scatter bytes dst", lambda m, w: m.scatter(bytes(32), _u(0), _f(1)), (V, T)),
        ("scatter strided dst", lambda m, w: m.scatter(_strided(dst(w)), _u(0), _f(1)), V),
        (
            "scatter strided ix",
            lambda m, w: m.scatter(dst(w), _strided(_u(0, 1)), _f(1, 2)),
            (V, T),
        ),
        ("scatter strided vals", lambda m, w: m.scatter(dst(w), _u(0, 1), _strided(_f(1, 2))), V),
        ("scatter 2-d strided", lambda m, w: m.scatter(dst(w).reshape(2, 4).T, _u(0), _f(1)), V),
        ("scatter list", lambda m, w: m.scatter(dst(w), [0], _f(1)), T),
        # scatter_value
        ("scatter_value out of range", lambda m, w: m.scatter_value(dst(w), _u(0, 9), 1.0), V),
        ("scatter_value negative", lambda m, w: m.scatter_value(dst(w), _i(1, -2), 1.0), V),
        ("scatter_value read-only", lambda m, w: m.scatter_value(_ro(dst(w)), _u(0), 1.0), V),
        ("scatter_value strided", lambda m, w: m.scatter_value(_strided(dst(w)), _u(0), 1.0), V),
        ("scatter_value not a float", lambda m, w: m.scatter_value(dst(w), _u(0), "x"), T),
        # scatter_add
        ("scatter_add unsorted", lambda m, w: m.scatter_add(dst(w), _u(0, 3, 2), _f(1, 2, 3)), V),
        ("scatter_add duplicate", lambda m, w: m.scatter_add(dst(w), _i(0, 3, 3), _f(1, 2, 3)), V),
        (
            "scatter_add out of range",
            lambda m, w: m.scatter_add(dst(w), _u(0, 3, 8), _f(1, 2, 3)),
            V,
        ),
        ("scatter_add negative", lambda m, w: m.scatter_add(dst(w), _i(0, 3, -1), _f(1, 2, 3)), V),
        ("scatter_add lengths", lambda m, w: m.scatter_add(dst(w), _u(0, 3), _f(1)), V),
        ("scatter_add f64", lambda m, w: m.scatter_add(dst(w), _u(0), np.ones(1)), T),
        ("scatter_add read-only", lambda m, w: m.scatter_add(_ro(dst(w)), _u(0), _f(1)), V),
        ("scatter_add strided", lambda m, w: m.scatter_add(_strided(dst(w)), _u(0), _f(1)), V),
        # parts
        (
            "parts_scatter_add unsorted",
            lambda m, w: m.parts_scatter_add(parts(w), _u(0, 4, 1), _f(1, 2, 3)),
            V,
        ),
        (
            "parts_scatter_add out of range",
            lambda m, w: m.parts_scatter_add(parts(w), _u(0, 4, 8), _f(1, 2, 3)),
            V,
        ),
        (
            "parts_scatter_add negative",
            lambda m, w: m.parts_scatter_add(parts(w), _i(0, 4, -1), _f(1, 2, 3)),
            V,
        ),
        (
            "parts_scatter_add lengths",
            lambda m, w: m.parts_scatter_add(parts(w), _u(0, 4), _f(1, 2, 3)),
            V,
        ),
        (
            "parts_scatter_add f64 vals",
            lambda m, w: m.parts_scatter_add(parts(w), _u(0), np.ones(1)),
            T,
        ),
        (
            "parts_scatter_add f64 part",
            lambda m, w: m.parts_scatter_add([*parts(w), np.ones(2)], _u(0), _f(1)),
            T,
        ),
        (
            "parts_scatter_add read-only part",
            lambda m, w: m.parts_scatter_add([*parts(w), _ro(_f(1, 2))], _u(0, 9), _f(1, 2)),
            V,
        ),
        (
            "parts_scatter_add strided part",
            lambda m, w: m.parts_scatter_add([*parts(w), _strided(_f(1, 2))], _u(0), _f(1)),
            V,
        ),
        (
            "parts_scatter_add not a list",
            lambda m, w: m.parts_scatter_add(tuple(parts(w)), _u(0), _f(1)),
            T,
        ),
        # check_sums (anchor of 8 = parts of 3 + 5)
        (
            "check_sums lengths",
            lambda m, w: m.check_sums(
                _f(*range(9)), parts(w), _u(1), _f(1), _w(w, np.zeros(1, np.float32))
            ),
            V,
        ),
        (
            "check_sums a length",
            lambda m, w: m.check_sums(
                _f(*range(8)), parts(w), _u(1, 2), _f(1), _w(w, np.zeros(2, np.float32))
            ),
            V,
        ),
        (
            "check_sums out length",
            lambda m, w: m.check_sums(
                _f(*range(8)), parts(w), _u(1, 2), _f(1, 2), _w(w, np.zeros(3, np.float32))
            ),
            V,
        ),
        (
            "check_sums f64 anchor",
            lambda m, w: m.check_sums(
                np.zeros(8), parts(w), _u(1), _f(1), _w(w, np.zeros(1, np.float32))
            ),
            T,
        ),
        (
            "check_sums f64 part",
            lambda m, w: m.check_sums(
                _f(*range(8)), [np.zeros(8)], _u(1), _f(1), _w(w, np.zeros(1, np.float32))
            ),
            T,
        ),
        (
            "check_sums read-only out",
            lambda m, w: m.check_sums(
                _f(*range(8)), parts(w), _u(1), _f(1), _ro(np.zeros(1, np.float32))
            ),
            V,
        ),
        (
            "check_sums strided out",
            lambda m, w: m.check_sums(
                _f(*range(8)), parts(w), _u(1, 2), _f(1, 2), _strided(np.zeros(2, np.float32))
            ),
            V,
        ),
        (
            "check_sums not a list",
            lambda m, w: m.check_sums(
                _f(*range(8)), tuple(parts(w)), _u(1), _f(1), _w(w, np.zeros(1, np.float32))
            ),
            T,
        ),
        # union
        (
            "union unsorted",
            lambda m, w: m.union([_u(1, 3), _u(4, 2)], 9, _w(w, np.zeros(4, np.intp))),
            V,
        ),
        (
            "union duplicate",
            lambda m, w: m.union([_u(1, 1), _u(2)], 9, _w(w, np.zeros(3, np.intp))),
            V,
        ),
        (
            "union out of range",
            lambda m, w: m.union([_u(1, 3), _u(4, 9)], 9, _w(w, np.zeros(4, np.intp))),
            V,
        ),
        (
            "union short out",
            lambda m, w: m.union([_u(1, 3), _u(4, 5)], 9, _w(w, np.zeros(3, np.intp))),
            V,
        ),
        ("union u32 out", lambda m, w: m.union([_u(1, 3)], 9, _w(w, np.zeros(4, np.uint32))), T),
        ("union intp list", lambda m, w: m.union([_i(1, 3)], 9, _w(w, np.zeros(4, np.intp))), T),
        ("union read-only out", lambda m, w: m.union([_u(1, 3)], 9, _ro(np.zeros(4, np.intp))), V),
        # merge_add
        (
            "merge_add unsorted agg",
            lambda m, w: m.merge_add(_u(3, 1), _f(1, 2), _u(2), _f(1), *_outs(w, 3, 1)),
            V,
        ),
        (
            "merge_add unsorted idx",
            lambda m, w: m.merge_add(_u(1, 3), _f(1, 2), _u(2, 2), _f(1, 1), *_outs(w, 4, 2)),
            V,
        ),
        (
            "merge_add short out",
            lambda m, w: m.merge_add(_u(1, 3), _f(1, 2), _u(2), _f(1), *_outs(w, 2, 1)),
            V,
        ),
        (
            "merge_add agg lengths",
            lambda m, w: m.merge_add(_u(1, 3), _f(1), _u(2), _f(1), *_outs(w, 3, 1)),
            V,
        ),
        (
            "merge_add u lengths",
            lambda m, w: m.merge_add(_u(1), _f(1), _u(2, 5), _f(1), *_outs(w, 3, 2)),
            V,
        ),
        (
            "merge_add new length",
            lambda m, w: m.merge_add(_u(1), _f(1), _u(2), _f(1), *_outs(w, 3, 2)),
            V,
        ),
        (
            "merge_add intp idx",
            lambda m, w: m.merge_add(_u(1), _f(1), _i(2), _f(1), *_outs(w, 3, 1)),
            T,
        ),
        (
            "merge_add f64 u",
            lambda m, w: m.merge_add(_u(1), _f(1), _u(2), np.ones(1), *_outs(w, 3, 1)),
            T,
        ),
        # collect_at_least
        (
            "collect lengths",
            lambda m, w: m.collect_at_least(
                [_f(1, 2)], _f(0, 0, 0), np.float32(0.5), False, *_couts(w, 3, 3)
            ),
            V,
        ),
        (
            "collect out lengths",
            lambda m, w: m.collect_at_least(
                [_f(1, 2)], _f(0, 0), np.float32(0.5), False, *_couts(w, 3, 2)
            ),
            V,
        ),
        (
            "collect u32 out",
            lambda m, w: m.collect_at_least(
                [_f(1, 2)],
                _f(0, 0),
                np.float32(0.5),
                False,
                _w(w, np.zeros(2, np.uint32)),
                _w(w, np.zeros(2, np.float32)),
            ),
            T,
        ),
        (
            "collect f64 anchor",
            lambda m, w: m.collect_at_least(
                [_f(1, 2)], np.zeros(2), np.float32(0.5), False, *_couts(w, 2, 2)
            ),
            T,
        ),
        (
            "collect read-only out",
            lambda m, w: m.collect_at_least(
                [_f(1, 2)],
                _f(0, 0),
                np.float32(0.5),
                False,
                _ro(np.zeros(2, np.intp)),
                _w(w, np.zeros(2, np.float32)),
            ),
            V,
        ),
        # varints
        (
            "varint_sums i64 out",
            lambda m, w: m.varint_sums(
                np.frombuffer(b"\x01", np.uint8), _w(w, np.zeros(2, np.int64))
            ),
            T,
        ),
        (
            "varint_sums read-only out",
            lambda m, w: m.varint_sums(
                np.frombuffer(b"\x01", np.uint8), _ro(np.zeros(2, np.uint32))
            ),
            V,
        ),
        (
            "varint_sums u32 data",
            lambda m, w: m.varint_sums(_u(1), _w(w, np.zeros(4, np.uint32))),
            T,
        ),
        (
            "varint_gaps unsorted",
            lambda m, w: m.varint_gaps(_u(3, 1), _w(w, np.zeros(10, np.uint8))),
            V,
        ),
        (
            "varint_gaps duplicate",
            lambda m, w: m.varint_gaps(_u(3, 3), _w(w, np.zeros(10, np.uint8))),
            V,
        ),
        (
            "varint_gaps short out",
            lambda m, w: m.varint_gaps(_u(1, 3), _w(w, np.zeros(9, np.uint8))),
            V,
        ),
        (
            "varint_gaps intp",
            lambda m, w: m.varint_gaps(_i(1, 3), _w(w, np.zeros(10, np.uint8))),
            T,
        ),
        (
            "varint_gaps read-only out",
            lambda m, w: m.varint_gaps(_u(1, 3), _ro(np.zeros(10, np.uint8))),
            V,
        ),
    ]
    return cases


def _w(w: list[NDArray[Any]], a: NDArray[Any]) -> NDArray[Any]:
    a[...] = 5
    w.append(a)
    return a


def _outs(w: list[NDArray[Any]], room: int, new: int) -> tuple[NDArray[Any], ...]:
    return (
        _w(w, np.zeros(room, np.uint32)),
        _w(w, np.zeros(room, np.float32)),
        _w(w, np.zeros(new, np.float32)),
    )


def _couts(w: list[NDArray[Any]], a: int, b: int) -> tuple[NDArray[Any], ...]:
    return _w(w, np.zeros(a, np.intp)), _w(w, np.zeros(b, np.float32))


@pytest.mark.parametrize(("name", "call", "exc"), _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_bad_arguments_write_nothing(
    nat: ModuleType, name: str, call: Callable[[Any, list[NDArray[Any]]], Any], exc: Any
) -> None:
    written: list[NDArray[Any]] = []
    with pytest.raises(exc):
        call(nat, written)
    # rebuild the same arrays and compare: the call wrote nothing
    fresh: list[NDArray[Any]] = []
    try:
        call(_Recorder(), fresh)
    except _Recorded:
        pass
    assert len(fresh) == len(written)
    for before, after in zip(fresh, written, strict=True):
        assert before.tobytes() == after.tobytes(), name


class _Recorded(Exception):
    pass


class _Recorder:
    """A stand-in module whose every function raises at once: builds the arrays a case passes."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        def f(*args: object) -> None:
            raise _Recorded

        return f


@pytest.mark.parametrize(
    "kernel", ["gather_add", "varint_sums", "check_sums", "check_sums unsorted"]
)
def test_partial_writes_before_an_error(nat: ModuleType, kernel: str) -> None:
    """A bad argument raises before anything is written (found by this file, fixed in lib.rs)."""
    src = np.arange(10, dtype=np.float32)
    out = np.full(3, 7.0, dtype=np.float32)
    sums = np.full(2, 5, dtype=np.uint32)
    with pytest.raises(ValueError):
        if kernel == "gather_add":
            nat.gather_add(src, _i(0, 1, -1), _f(1, 1, 1), out)
        elif kernel == "check_sums":
            nat.check_sums(src, [src[:4].copy(), src[4:].copy()], _u(0, 5, 10), _f(1, 1, 1), out)
        elif kernel == "check_sums unsorted":
            nat.check_sums(src, [src[:4].copy(), src[4:].copy()], _u(0, 5, 2), _f(1, 1, 1), out)
        else:
            nat.varint_sums(np.frombuffer(b"\x01\x02\x03", np.uint8), sums)
    assert out.tolist() == [7.0, 7.0, 7.0]
    assert sums.tolist() == [5, 5]


def test_gathers_refuse_bad_arguments(nat: ModuleType) -> None:
    src = np.arange(10, dtype=np.float32)
    for args, exc in [
        ((src, _u(0, 10), np.zeros(2, np.float32)), ValueError),
        ((src, _i(-1), np.zeros(1, np.float32)), ValueError),
        ((src, _u(0, 1), np.zeros(3, np.float32)), ValueError),
        ((src.astype(np.float64), _u(0), np.zeros(1, np.float32)), TypeError),
        ((src, _u(0), _ro(np.zeros(1, np.float32))), ValueError),
        ((src, _u(0, 1), _strided(np.zeros(2, np.float32))), ValueError),
        ((src[::2], _u(0), np.zeros(1, np.float32)), ValueError),
    ]:
        with pytest.raises(exc):
            nat.gather_add(args[0], args[1], np.ones(args[1].size, np.float32), args[2])
    with pytest.raises(ValueError):
        nat.gather_add(src, _u(0, 1), _f(1), np.zeros(2, np.float32))


@pytest.mark.parametrize("where", ["kernel", "receive"])
def test_non_native_byte_order(nat: ModuleType, where: str) -> None:
    """PyO3 0.27 takes a '>' format for native on little-endian hosts: the kernels refuse a
    foreign byte order themselves, and the engine hands such arrays to NumPy."""
    if where == "kernel":
        dst = np.zeros(4, dtype=np.float32)
        vals = np.array([1.0], dtype=">f4")
        want = dst.copy()
        want[[0]] = vals
        try:
            nat.scatter(dst, _u(0), vals)
        except TypeError:  # refused: as good as NumPy's conversion
            return
        _same_bits(dst, want)
    else:  # DF-RCV-50 on big-endian active parts: the kernels read other values
        pkt = _pkt(2, _ent(2, 1, [3], [3.0e38]))
        active = [np.full(NP, 3.0e38, dtype=">f4")]
        on, off = _pair(SyncConfig.v1_0(), np.zeros(NP, np.float32), 9, nat)
        want = off.receive([pkt], active=active)  # type: ignore[arg-type]
        assert want.outcomes == [ErrorCode.NON_FINITE_RESULT]
        try:
            got = on.receive([pkt], active=active)  # type: ignore[arg-type]
        except TypeError:
            return
        assert got.outcomes == want.outcomes


# --- Engine.receive -------------------------------------------------------------------------------

MAN = Manifest.from_named_shapes(
    {"l1.weight": (48, 40), "l1.bias": (48,), "l2.weight": (16, 48), "l2.bias": (16,)}
)
NP = MAN.num_params
FP = MAN.fingerprint
_SIZES = [t.numel for t in MAN.tensors]


def _pair(
    cfg: SyncConfig, anchor: NDArray[np.float32], node: int, nat: ModuleType
) -> tuple[Engine, Engine]:
    on = Engine(MAN, cfg, node, 1000 + node, anchor)
    off = Engine(MAN, cfg, node, 1000 + node, anchor)
    on.native = nat
    off.native = None
    return on, off


def _same_receive(a: ReceiveResult, b: ReceiveResult) -> None:
    assert a.indices.dtype == b.indices.dtype == np.uint32
    assert a.indices.tolist() == b.indices.tolist()
    _same_bits(a.values, b.values)
    assert a.outcomes == b.outcomes
    assert a.rejected == b.rejected
    assert a.accepted == b.accepted
    assert a.entry_outcomes == b.entry_outcomes
    assert a.relay == b.relay  # Entry equality compares the values' bits


def _same_engines(a: Engine, b: Engine) -> None:
    _same_bits(a.anchor, b.anchor)
    assert a.counters == b.counters
    assert a.state.history() == b.state.history()
    assert a.next_seq == b.next_seq


def _view(form: str, active: NDArray[np.float32], rng: np.random.Generator) -> Any:
    if form == "none":
        return None
    if form == "flat":
        return active
    if form == "callable":
        return lambda idx: active[np.asarray(idx).astype(np.intp)]
    if form == "tensors":
        return np.split(active, np.cumsum(_SIZES)[:-1])
    cuts = rng.integers(0, NP + 1, int(rng.integers(0, 6))).tolist()
    return _split(active, cuts)


def _entries(packet: bytes) -> int:
    return len(decode_packet(packet, 1 << 24).entries)


def _pkt(sender: int, *entries: Entry) -> bytes:
    return encode_packet(Packet(sender, 1, FP, tuple(entries)))


def _ent(origin: int, seq: int, idx: list[int], vals: list[float]) -> Entry:
    return Entry(origin, 1, seq, 0, np.array(idx, np.uint32), np.array(vals, np.float32))


_RECEIVE_CONFIGS = {
    "relay-all": (
        SyncConfig.v1_0(ratio=0.05, alpha=0.5),
        SyncConfig.v1_0(alpha=0.75, relay_threshold=1e-3),
    ),
    "small-packets": (
        SyncConfig.v1_0(ratio=0.08, max_packet_size=1024, alpha=0.5),
        SyncConfig.v1_0(alpha=0.5, max_packet_size=1024),
    ),
    "needed-packed-f16": (
        SyncConfig.v1_0(
            ratio=0.1,
            relay_policy=RelayPolicy.NEEDED,
            index_encoding=IndexEncoding.PACKED,
            encoding=ValueEncoding.F16,
        ),
        SyncConfig.v1_0(alpha=1.0, relay_policy=RelayPolicy.NEEDED),
    ),
    "q8-dense": (
        SyncConfig.v1_0(ratio=0.4, encoding=ValueEncoding.Q8, index_encoding=IndexEncoding.PACKED),
        SyncConfig.v1_0(alpha=0.3),
    ),
}


@pytest.mark.parametrize("config", sorted(_RECEIVE_CONFIGS))
@pytest.mark.parametrize("seed", [1, 2])
def test_receive_on_and_off(nat: ModuleType, config: str, seed: int) -> None:
    peer_cfg, recv_cfg = _RECEIVE_CONFIGS[config]
    rng = np.random.default_rng(seed)
    anchor = rng.standard_normal(NP).astype(np.float32)
    peers = [Engine(MAN, peer_cfg, p, 1, anchor) for p in (1, 2, 3, 4)]
    actives = [anchor.copy() for _ in peers]
    on, off = _pair(recv_cfg, anchor, 9, nat)
    act_on, act_off = anchor.copy(), anchor.copy()
    inbox: list[list[bytes]] = [[] for _ in peers]
    history: list[bytes] = []
    seen: Counter[str] = Counter()
    forms = ["none", "flat", "callable", "tensors", "parts"]
    for rnd in range(10):
        published: list[tuple[int, bytes]] = []
        for p, (eng, act) in enumerate(zip(peers, actives, strict=True)):
            m = rng.random(NP) < 0.2
            act[m] += (rng.standard_normal(int(m.sum())) * 0.05).astype(np.float32)
            _, out = eng.step(act, inbox[p], sync=True)
            published.extend((p, b) for b in out)
        inbox = [[b for q, b in published if q != p] for p in range(len(peers))]
        single = (
            rnd % 3 == 1
        )  # a step of single-entry packets only: the sparse aggregate throughout
        stream = [b for _, b in published if not single or _entries(b) == 1]
        rng.shuffle(stream)  # type: ignore[arg-type]
        if history:  # replays of earlier rounds and a duplicate within the round
            stream.extend(history[int(i)] for i in rng.integers(0, len(history), 2))
        if stream:
            stream.insert(int(rng.integers(0, len(stream) + 1)), stream[0])
        j = int(rng.integers(0, NP))
        k = (j + 1) % NP
        big = 3.0e38
        specials = [
            # two single-entry packets summing past FLT_MAX at k: the second is refused
            _pkt(50, _ent(62, rnd + 1, [k], [big])),
            _pkt(51, _ent(63, rnd + 1, [k], [big])),
            b"\x00" * 40,  # malformed
        ]
        if not single:
            specials += [
                # two entries summing past FLT_MAX at j (several accepted entries, DF-RCV-50)
                _pkt(50, _ent(60, rnd + 1, [j, k], [big, 1.0]), _ent(61, rnd + 1, [j], [big])),
                # a replayed entry and a fresh one in one packet: one accepted entry
                _pkt(
                    52, _ent(64, 1, [1, 2], [0.25, 0.5]), _ent(65, rnd + 1, [3, j], [0.125, -0.0])
                ),
            ]
        # the active weights past FLT_MAX with the aggregate (refused only when they are given)
        act_on[(j + 7) % NP] = act_off[(j + 7) % NP] = np.float32(big)
        specials.append(_pkt(53, _ent(66, rnd + 1, [(j + 7) % NP], [big])))
        for s in specials:
            stream.insert(int(rng.integers(0, len(stream) + 1)), s)
        form = forms[rnd % len(forms)]
        r_on = on.receive(stream, active=_view(form, act_on, np.random.default_rng(rnd)))
        r_off = off.receive(stream, active=_view(form, act_off, np.random.default_rng(rnd)))
        _same_receive(r_on, r_off)
        _same_engines(on, off)
        with np.errstate(over="ignore"):  # the active weights past FLT_MAX when not checked
            r_on.apply_to(act_on)
            r_off.apply_to(act_off)
        _same_bits(act_on, act_off)
        per_packet = Counter(a.packet for a in r_on.accepted)
        seen["several"] += any(v > 1 for v in per_packet.values())
        seen["single-only"] += len(per_packet) > 1 and all(v == 1 for v in per_packet.values())
        seen["non-finite"] += ErrorCode.NON_FINITE_RESULT in r_on.outcomes
        seen[f"form-{form}"] += 1
        history.extend(stream[:3])
        # the receivers' own generation (their anchor moved by the receive only)
        if rnd % 3 == 2:
            act_on[:5] += np.float32(0.5)
            act_off[:5] += np.float32(0.5)
            try:
                g_on = on.generate(act_on)
            except NonFiniteDelta as exc:
                with pytest.raises(NonFiniteDelta) as exc_off:
                    off.generate(act_off)
                assert exc.index == exc_off.value.index
            else:
                assert g_on == off.generate(act_off)
            _same_engines(on, off)
    assert seen["several"] and seen["single-only"] and seen["non-finite"], seen


def test_receive_sparse_then_dense_then_refused(nat: ModuleType) -> None:
    """Single-entry packets (the sparse aggregate), then a packet of several entries (into the dense
    scratch), then refusals on each side of the switch, then single-entry packets again."""
    anchor = np.linspace(-1, 1, NP, dtype=np.float32)
    on, off = _pair(SyncConfig.v1_0(alpha=0.5), anchor, 9, nat)
    big = 3.0e38
    steps = [
        [_pkt(1, _ent(1, 1, [0, 5, 9], [1, 2, 3])), _pkt(2, _ent(2, 1, [5, 9, 11], [-0.0, 4, 5]))],
        [
            _pkt(1, _ent(1, 2, [0, 5], [1, -1])),
            _pkt(2, _ent(2, 2, [4, 7], [big, big])),
            _pkt(3, _ent(3, 1, [7], [big])),  # refused on the sparse side
            _pkt(4, _ent(4, 1, [4, 5], [1, 1]), _ent(5, 1, [5, 6], [2, 2])),  # the switch
            _pkt(6, _ent(6, 1, [4], [big])),  # refused on the dense side (single entry)
            _pkt(7, _ent(7, 1, [1, 2], [1, 2]), _ent(8, 1, [2, 4], [2, big])),  # refused (several)
            _pkt(9, _ent(9, 1, [0, 100, NP - 1], [0.5, 0.5, 0.5])),
        ],
        [  # the first packet of several entries is refused before any single one is accepted
            _pkt(7, _ent(7, 2, [1, 2], [big, 2]), _ent(8, 2, [1, 4], [big, 2])),
            _pkt(9, _ent(9, 2, [3], [1.0])),
            _pkt(9, _ent(9, 3, [3, 4], [1.0, 1.0])),
        ],
        [  # a refused packet of several entries after one single entry
            _pkt(9, _ent(9, 4, [3], [1.0])),
            _pkt(7, _ent(7, 3, [3, 2], [big, 2]), _ent(8, 3, [3, 4], [big, 2])),
            _pkt(9, _ent(9, 5, [3, 4], [1.0, 1.0])),
        ],
    ]
    for form in ("none", "flat", "callable", "parts"):
        for packets in steps:
            act_on, act_off = on.anchor.copy(), off.anchor.copy()
            rng = np.random.default_rng(0)
            r_on = on.receive(packets, active=_view(form, act_on, rng))
            r_off = off.receive(packets, active=_view(form, act_off, np.random.default_rng(0)))
            _same_receive(r_on, r_off)
            _same_engines(on, off)
        on.state = type(on.state)(9, window=1024)
        off.state = type(off.state)(9, window=1024)


@pytest.mark.parametrize(
    "case",
    ["below", "at_limit_anchor", "at_limit_active", "nan_active", "inf_anchor", "agg_at_limit"],
)
def test_receive_proof_edges(nat: ModuleType, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Packets of N / 16 values or more are judged by the bound max(|anchor|, |active|, |agg|) <
    2**127 when it holds (no sums made) and by the exact sums otherwise: the same outcome, anchor and
    result as the NumPy core, on each side of the limit."""
    limit = np.float32(2.0**127)
    below = np.nextafter(limit, np.float32(0))  # the largest f32 below 2**127
    rng = np.random.default_rng(3)
    anchor = rng.standard_normal(NP).astype(np.float32)
    active = anchor + np.float32(0.01)
    idx = np.sort(rng.choice(NP, NP // 8, replace=False)).astype(np.uint32)
    vals = rng.standard_normal(idx.size).astype(np.float32)
    if case == "below":  # every magnitude just below the limit: proven finite
        anchor[idx[0]] = below
        active[idx[0]] = -below
        vals[0] = -below
        vals[1] = below
    elif case == "at_limit_anchor":  # a value at 2**127 where the packet writes: exact, refused
        anchor[idx[1]] = limit
        vals[1] = limit
    elif case == "at_limit_active":  # 2**127 elsewhere: exact, accepted (no sum at that index)
        active[int(np.setdiff1d(np.arange(NP), idx)[0])] = limit
    elif case == "nan_active":  # a NaN where the packet writes: exact, refused
        active[idx[2]] = np.nan
    elif case == "inf_anchor":  # an infinite anchor elsewhere: exact, accepted
        anchor[int(np.setdiff1d(np.arange(NP), idx)[0])] = np.inf
    else:  # two packets each just below the limit: the first is proven; their sum is FLT_MAX, so
        vals[:] = below  # the second is exact, and refused where the anchor is 1e32 (overflow)
        anchor[idx[0]] = np.float32(1e32)
    proved = []
    orig = Engine._finite_result

    def spy(self: Engine, *a: Any, **kw: Any) -> Any:
        got = orig(self, *a, **kw)
        proved.append(got[1] is not None and got[1][1] is None)
        return got

    monkeypatch.setattr(Engine, "_finite_result", spy)
    packets = [_pkt(1, _ent(1, 1, idx.tolist(), vals.tolist()))]
    if case == "agg_at_limit":
        packets.append(_pkt(2, _ent(2, 1, idx.tolist(), vals.tolist())))
    for form in ("parts", "flat"):
        on, off = _pair(SyncConfig.v1_0(alpha=1.0), anchor, 9, nat)
        act_on, act_off = active.copy(), active.copy()
        views_on = _split(act_on, [100, 2000]) if form == "parts" else act_on
        views_off = _split(act_off, [100, 2000]) if form == "parts" else act_off
        proved.clear()
        r_on = on.receive(packets, active=views_on)
        n_on = list(proved)
        r_off = off.receive(packets, active=views_off)
        _same_receive(r_on, r_off)
        _same_engines(on, off)
        want_proof = {"below": [True], "agg_at_limit": [True, False]}.get(case, [False])
        assert n_on == want_proof, (case, form, n_on)
        refused = {"at_limit_anchor", "nan_active", "agg_at_limit"}
        assert (ErrorCode.NON_FINITE_RESULT in r_on.outcomes) is (case in refused), r_on.outcomes


# Inputs whose layout NumPy reads as it is but the kernels refuse (C-contiguous, aligned buffers
# only): the public calls below raise with the kernels and work without them.


def _layout_receive_unaligned(nat: ModuleType) -> None:
    pkt = _pkt(1, _ent(1, 1, [1, 5, 9], [1.0, 2.0, 3.0]))
    buf = memoryview(b"\x00" + pkt)[1:]  # PLAIN indices at an odd address
    on, off = _pair(SyncConfig.v1_0(), np.zeros(NP, np.float32), 9, nat)
    want = off.receive([buf])
    _same_receive(on.receive([buf]), want)


def _layout_receive_strided_parts(nat: ModuleType) -> None:
    pkt = _pkt(1, _ent(1, 1, [1, 5, 9], [1.0, 2.0, 3.0]))
    active = np.repeat(np.ones(NP, np.float32), 2)[::2]  # shape (N,), stride 8
    on, off = _pair(SyncConfig.v1_0(), np.zeros(NP, np.float32), 9, nat)
    want = off.receive([pkt], active=[active])
    _same_receive(on.receive([pkt], active=[active]), want)


def _layout_generate_strided(nat: ModuleType) -> None:
    rng = np.random.default_rng(0)
    anchor = rng.standard_normal(NP).astype(np.float32)
    active = np.repeat(anchor + rng.standard_normal(NP).astype(np.float32), 2)[::2]
    on, off = _generate_pair(nat, MAN, SyncConfig.v1_0(ratio=0.1), anchor, 0)
    _generate_both(on, off, active, False)


def _layout_encode_strided(nat: ModuleType) -> None:
    idx = np.arange(0, 4_000_000, 3001, dtype=np.uint32)[::2]  # sparse: the delta form
    pkt = Packet(1, 1, FP, (Entry(1, 1, 1, 0, idx, np.ones(idx.size, np.float32)),))
    pkt = Packet(1, 1, FP, pkt.entries, index_encoding=IndexEncoding.PACKED)
    with _mode("off"):
        want = encode_packet(pkt)
    with _mode("on"):
        assert encode_packet(pkt) == want


def _layout_unpack_strided(nat: ModuleType) -> None:
    packed = np.frombuffer(compact.encode_delta(_u(1, 5, 300, 70_000)), np.uint8)
    strided = np.repeat(packed, 2)[::2]
    assert _unpack(strided, "on") == _unpack(strided, "off")  # type: ignore[arg-type]


def _layout_torch_apply_strided(nat: ModuleType) -> None:
    torch = pytest.importorskip("torch")
    from delta_fabric.stores.torch import TorchStore

    idx = np.arange(0, 14, dtype=np.uint32)[::2]
    got = []
    for value in ("off", "on"):
        torch.manual_seed(0)
        store = TorchStore(torch.nn.Linear(4, 3))
        with _mode(value):
            store.apply(idx, np.ones(idx.size, np.float32))
        got.append(store.gather())
    _same_bits(got[1], got[0])


@pytest.mark.parametrize(
    "case",
    [
        _layout_receive_unaligned,
        _layout_receive_strided_parts,
        _layout_generate_strided,
        _layout_encode_strided,
        _layout_unpack_strided,
        _layout_torch_apply_strided,
    ],
    ids=lambda f: f.__name__.removeprefix("_layout_"),
)
def test_layouts_numpy_reads(nat: ModuleType, case: Callable[[ModuleType], None]) -> None:
    """Layouts NumPy reads (strided, unaligned) work with the kernels on: the callers check
    `native.ready` and copy or fall back."""
    case(nat)


# --- Engine.generate --------------------------------------------------------------------------------


def _generate_pair(
    nat: ModuleType, man: Manifest, cfg: SyncConfig, anchor: NDArray[np.float32], sample_min_n: int
) -> tuple[Engine, Engine]:
    on = Engine(man, cfg, 1, 1, anchor)
    off = Engine(man, cfg, 1, 1, anchor)
    on.native, off.native = nat, None
    for e in (on, off):
        e._selector = Selector(man.num_params, sample_min_n=sample_min_n)
    return on, off


def _generate_both(on: Engine, off: Engine, active: Any, fast: bool) -> str:
    try:
        got = on.generate(active, fast=fast)
    except NonFiniteDelta as exc:
        with pytest.raises(NonFiniteDelta) as exc_off:
            off.generate(active, fast=fast)
        assert exc.index == exc_off.value.index
        _same_engines(on, off)
        return "non-finite"
    want = off.generate(active, fast=fast)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.indices.dtype == w.indices.dtype == np.uint32
        assert g.indices.tolist() == w.indices.tolist()
        _same_bits(g.values, w.values)
        assert g == w
    for x, y in zip(on.last_correction, off.last_correction, strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    _same_engines(on, off)
    assert on._selector is not None and off._selector is not None
    assert on._selector.last_path == off._selector.last_path
    return on._selector.last_path


@pytest.mark.parametrize(
    "cfg",
    [
        SyncConfig.v1_0(ratio=0.15),
        SyncConfig.v1_0(ratio=0.25, encoding=ValueEncoding.BF16, max_packet_size=4096),
        SyncConfig.v1_0(ratio=0.2, average_over=3, encoding=ValueEncoding.Q8),
    ],
    ids=["f32", "bf16-split", "q8-averaging"],
)
def test_generate_on_and_off(nat: ModuleType, cfg: SyncConfig) -> None:
    rng = np.random.default_rng(3)
    anchor = rng.standard_normal(NP).astype(np.float32)
    paths: Counter[str] = Counter()
    for sample_min_n in (0, _SMALL_N):
        on, off = _generate_pair(nat, MAN, cfg, anchor, sample_min_n)
        active = anchor.copy()
        for rnd in range(14):
            kind = rnd % 7
            if kind == 0:  # sparse progress: few nonzero deltas (t == 0: "all")
                active[rng.integers(0, NP, 4)] += np.float32(0.5)
            elif kind == 1:  # ties
                active[:] = on.anchor + np.float32(0.25)
            elif kind == 2:  # a NaN is never selected, an infinity refuses the generation
                active += rng.standard_normal(NP).astype(np.float32)
                active[7] = np.nan
                if rnd > 7:
                    active[11] = np.inf
            else:
                active[7] = active[11] = 0.0
                active += (rng.standard_normal(NP) * 0.1).astype(np.float32)
            fast = bool(rnd % 2)
            parts = np.split(active, np.cumsum(_SIZES)[:-1]) if rnd % 3 == 0 else active
            paths[_generate_both(on, off, parts, fast)] += 1
            if rnd > 7:
                active[11] = 0.0
    assert {"trim", "sample"} <= set(paths), paths


@pytest.mark.parametrize("fast", [False, True])
def test_generate_on_and_off_large(nat: ModuleType, fast: bool) -> None:
    """N above the selector's default sample_min_n: the engine's own Selector, its sample path with
    the native candidate pass (including the pass again with more room, on ties)."""
    man = Manifest.from_named_shapes({"big": (_SMALL_N + 8_000,), "small": (1000,)})
    n = man.num_params
    rng = np.random.default_rng(4)
    anchor = (rng.integers(-1000, 1000, n) / 256).astype(np.float32)  # anchor + 1/8 is exact
    cfg = SyncConfig.v1_0(ratio=0.01)
    on = Engine(man, cfg, 1, 1, anchor)
    off = Engine(man, cfg, 1, 1, anchor)
    on.native, off.native = nat, None
    active = anchor.copy()
    paths = []
    for rnd in range(4):
        if rnd == 0:  # every delta equal: more candidates than the native scratch's room
            active[:] = anchor + np.float32(0.125)
        else:
            active += (rng.standard_normal(n) * 0.1).astype(np.float32)
        paths.append(_generate_both(on, off, active, fast))
    assert on._selector is not None and on._selector.sample_min_n == _SMALL_N
    assert on._selector._cand_idx is not None and on._selector._cand_idx.size >= n
    assert ("sample" if fast else "trim") in paths, paths


# --- TorchStore.apply --------------------------------------------------------------------------------


def test_torch_apply_on_and_off(nat: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from delta_fabric.stores import torch as torch_store

    def model() -> Any:
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(7, 6),
            torch.nn.BatchNorm1d(6),
            torch.nn.Linear(6, 4),
            torch.nn.BatchNorm1d(4),
        )

    s_on = torch_store.TorchStore(model(), include_buffers=True)
    s_off = torch_store.TorchStore(model(), include_buffers=True)
    man = s_on.manifest
    assert man.names == s_off.manifest.names
    off = dict(zip(man.names, man.offsets, strict=False))
    size = {t.name: t.numel for t in man.tensors}
    touched, untouched = "1.running_var", "3.running_var"
    var_lo = off[touched]
    rng = np.random.default_rng(8)
    flat = rng.standard_normal(man.num_params).astype(np.float32)
    flat[off[touched] : off[touched] + size[touched]] = np.float32(0.5)
    flat[off[untouched] : off[untouched] + size[untouched]] = np.float32(-2.0)  # loaded negative
    s_on.load(flat)
    s_off.load(flat)
    calls: list[int] = []
    real = torch_store.kernels

    def spy() -> Any:
        k = real()
        if k is None:
            return None

        def parts_scatter_add(*args: Any) -> None:
            calls.append(1)
            k.parts_scatter_add(*args)

        return SimpleNamespace(parts_scatter_add=parts_scatter_add)

    monkeypatch.setattr(torch_store, "kernels", spy)
    banned = set(range(off[untouched], off[untouched] + size[untouched]))
    for rnd in range(12):
        idx = np.unique(rng.integers(0, man.num_params, 30))
        idx = idx[[int(i) not in banned for i in idx]]
        if rnd % 3 == 0:  # the touched variance goes negative somewhere: clamped
            idx = np.union1d(idx, [var_lo, var_lo + 2])
        idx = idx.astype(np.uint32)
        vals = _f32(rng, idx.size, "finite")
        vals[np.isin(idx, [var_lo, var_lo + 2])] = np.float32(-3.0)
        vals[np.abs(vals) > 1e30] = np.float32(1.0)
        monkeypatch.setenv(ENV, "on")
        s_on.apply(idx, vals)
        monkeypatch.setenv(ENV, "off")
        s_off.apply(idx, vals)
        for name in man.names:
            a = s_on.tensors[name].detach().numpy().reshape(-1)
            b = s_off.tensors[name].detach().numpy().reshape(-1)
            _same_bits(a, b)
    assert len(calls) == 12  # the native pass ran for every apply with the kernels on
    for s in (s_on, s_off):
        var = s.tensors[touched].detach().numpy()
        assert (var >= 0).all() and (var == 0).any()  # clamped
        assert (s.tensors[untouched].detach().numpy() == -2.0).all()  # never touched: as loaded
    # the same views as the receive's active weights (Fabric._active_for_receive)
    monkeypatch.setenv(ENV, "auto")
    anchor = s_on.gather()
    e_on = Engine(man, SyncConfig.v1_0(alpha=0.5), 9, 1, anchor)
    e_off = Engine(man, SyncConfig.v1_0(alpha=0.5), 9, 1, anchor)
    e_on.native, e_off.native = nat, None
    view_on = Fabric._active_for_receive(SimpleNamespace(engine=e_on, store=s_on))  # type: ignore[arg-type]
    view_off = Fabric._active_for_receive(SimpleNamespace(engine=e_off, store=s_off))  # type: ignore[arg-type]
    assert isinstance(view_on, list) and callable(view_off)
    fp = man.fingerprint
    packets = [
        encode_packet(Packet(1, 1, fp, (_ent(1, 1, [0, 3, var_lo], [1.0, 2.0, -0.5]),))),
        encode_packet(Packet(2, 1, fp, (_ent(2, 1, [3, 4], [3.0e38, 3.0e38]),))),
        encode_packet(Packet(2, 1, fp, (_ent(3, 1, [3], [3.0e38]),))),
    ]
    r_on = e_on.receive(packets, active=view_on)
    r_off = e_off.receive(packets, active=view_off)
    _same_receive(r_on, r_off)
    _same_engines(e_on, e_off)


# --- kernel API 2: Q8, the sample, counts; the anchor's bound across steps ------------------------


def _q8_numpy(v: NDArray[np.float32]) -> tuple[np.float32, NDArray[np.int8], NDArray[np.float32]]:
    with _mode("off"):
        scale, q = compact.q8_encode(v)
        return scale, q, compact.q8_quantize(v)


def _f32_bits(rng: np.random.Generator, n: int) -> NDArray[np.float32]:
    """Finite f32 values of every magnitude: random bit patterns below inf's, both signs."""
    bits = rng.integers(0, 0x7F800000, n, dtype=np.uint32) | (
        rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31)
    )
    return bits.view(np.float32)


_Q8_KINDS = ["normal", "bits", "subnormal", "huge", "zeros", "one"]


def _q8_values(rng: np.random.Generator, n: int, kind: str) -> NDArray[np.float32]:
    if kind == "bits":
        return _f32_bits(rng, n)
    if kind == "subnormal":  # scales below the normal range (division, not a product by 1/scale)
        return (rng.integers(-300, 300, n) * np.float32(1e-45)).astype(np.float32)
    if kind == "huge":  # scales whose 127 * scale overflows: codes clamped below 127
        return (rng.uniform(-1, 1, n) * np.float32(3.4e38)).astype(np.float32)
    if kind == "zeros":
        return np.where(rng.integers(0, 2, n) == 1, np.float32(-0.0), np.float32(0.0))
    if kind == "one":  # halfway quotients: ties to even
        return (rng.integers(-254, 255, n) * np.float32(0.5)).astype(np.float32)
    return (rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30)).astype(np.float32)


@given(_SEEDS, st.integers(1, 300), st.sampled_from(_Q8_KINDS))
@settings(max_examples=300)
def test_q8_is_the_numpy_q8(nat: ModuleType, seed: int, n: int, kind: str) -> None:
    """`q8` gives compact.q8_encode's scale and codes and q8_quantize's values, bit for bit."""
    v = _q8_values(np.random.default_rng(seed), n, kind)
    scale, q, dec = _q8_numpy(v)
    codes = np.full(n, 99, dtype=np.int8)
    out = np.full(n, 7.0, dtype=np.float32)
    got = nat.q8(v, codes, out)
    assert np.float32(got).view(np.uint32) == np.float32(scale).view(np.uint32)
    assert codes.tolist() == q.tolist()
    _same_bits(out, dec)
    with _mode("on"):  # the public functions with the kernels
        s2, q2 = compact.q8_encode(v)
        assert np.float32(s2).view(np.uint32) == np.float32(scale).view(np.uint32)
        assert q2.tolist() == q.tolist()
        _same_bits(compact.q8_quantize(v), dec)


@given(_SEEDS, st.integers(1, 300), st.sampled_from(_Q8_KINDS), st.sampled_from([1 / 3, 1.0, 0.2]))
@settings(max_examples=200)
def test_q8_send_is_generates_numpy_passes(
    nat: ModuleType, seed: int, n: int, kind: str, w: float
) -> None:
    """`q8_send` = q8_quantize(fl32(w * d)) and fl32(sent - d) (DF-GEN-70 with Q8 values)."""
    d = _q8_values(np.random.default_rng(seed), n, kind)
    w32 = np.float32(w)
    with np.errstate(over="ignore"):
        v = np.multiply(d, w32, dtype=np.float32)
    scale, q, sent = _q8_numpy(v)
    with np.errstate(over="ignore", invalid="ignore"):
        corr = np.subtract(sent, d, dtype=np.float32)
    codes = np.full(n, 99, dtype=np.int8)
    s_out, c_out = np.full(n, 7.0, np.float32), np.full(n, 7.0, np.float32)
    got = nat.q8_send(d, w32, codes, s_out, c_out)
    assert np.float32(got).view(np.uint32) == np.float32(scale).view(np.uint32)
    assert codes.tolist() == q.tolist()
    _same_bits(s_out, sent)
    _same_bits(c_out, corr)


def test_q8_kernels_refuse_non_finite_and_bad_arguments(nat: ModuleType) -> None:
    for bad in (np.inf, -np.inf, np.nan):
        v = np.array([1.0, bad, 2.0], dtype=np.float32)
        codes, out = np.full(3, 5, np.int8), np.full(3, 7.0, np.float32)
        assert np.isnan(nat.q8(v, codes, out))
        assert codes.tolist() == [5, 5, 5] and out.tolist() == [7.0] * 3  # nothing written
        s_out, c_out = np.full(3, 7.0, np.float32), np.full(3, 7.0, np.float32)
        assert np.isnan(nat.q8_send(v, np.float32(0.5), codes, s_out, c_out))
        assert codes.tolist() == [5, 5, 5] and s_out.tolist() == c_out.tolist() == [7.0] * 3
        for mode in ("on", "off"):  # the public functions: ValueError either way
            with _mode(mode), pytest.raises(ValueError, match="finite"):
                compact.q8_encode(v)
            with _mode(mode), pytest.raises(ValueError, match="finite"):
                compact.q8_quantize(v)
    v = np.ones(4, np.float32)
    for args in [
        (v, np.zeros(3, np.int8)),  # short codes
        (v, np.zeros(4, np.uint8)),  # wrong code type
        (v, np.zeros(4, np.int8), np.zeros(3, np.float32)),  # short values
        (v.astype(np.float64), np.zeros(4, np.int8)),
    ]:
        with pytest.raises((TypeError, ValueError)):
            nat.q8(*args)
    with pytest.raises(ValueError):
        nat.q8_send(
            v, np.float32(1), np.zeros(4, np.int8), np.zeros(4, np.float32), np.zeros(3, np.float32)
        )


@given(_SEEDS, st.integers(1, 300), st.sampled_from(["small", "huge", "zero", "bits"]))
@settings(max_examples=200)
def test_q8_decode_is_the_product(nat: ModuleType, seed: int, n: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    q = rng.integers(-128, 128, n).astype(np.int8)
    scale = {
        "small": np.float32(2.0**-140),
        "huge": np.float32(2.0**121),  # 127 * 2**121 overflows: not finite
        "zero": np.float32(0.0),
        "bits": _f32_bits(rng, 1)[0],
    }[kind]
    scale = np.abs(scale)
    with np.errstate(over="ignore"):
        want = np.multiply(q, scale, dtype=np.float32)
    out = np.full(n, 7.0, np.float32)
    assert nat.q8_decode(q, float(scale), out) is bool(np.isfinite(want).all())
    _same_bits(out, want)


def test_q8_packets_decode_the_same_on_and_off(nat: ModuleType) -> None:
    rng = np.random.default_rng(4)
    for scale_exp in (-140, -3, 120, 127):
        idx = np.sort(rng.choice(NP, 50, replace=False)).astype(np.uint32)
        with np.errstate(over="ignore"):
            vals = (rng.integers(-127, 128, 50) * 2.0**scale_exp).astype(np.float32)
        vals[np.isinf(vals)] = np.float32(2.0**scale_exp)
        pkt = encode_packet(
            Packet(1, 1, FP, (Entry(1, 1, 1, 0, idx, vals),), encoding=ValueEncoding.Q8)
        )
        got = []
        for mode in ("on", "off"):
            with _mode(mode):
                try:
                    p = decode_packet(pkt, 1 << 24)
                    got.append(("ok", p.entries[0].values.view(np.uint32).tolist()))
                except DecodeError as exc:
                    got.append(("error", exc.code))
        assert got[0] == got[1], scale_exp


@given(_SEEDS, st.integers(1, 3000), st.integers(1, 40), st.sampled_from([[], [7], [100, 2000]]))
@settings(max_examples=200)
def test_sample_abs_is_the_strided_sample(
    nat: ModuleType, seed: int, n: int, stride: int, cuts: list[int]
) -> None:
    rng = np.random.default_rng(seed)
    active = _f32_bits(rng, n)
    anchor = _f32_bits(rng, n)
    ms = (n - 1) // stride + 1
    parts = _split(active, [c for c in cuts if c < n])
    out = np.full(ms, 7.0, np.float32)
    nat.sample_abs(parts, anchor, stride, out)
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.abs(np.subtract(active[::stride], anchor[::stride], dtype=np.float32))
    _same_bits(out, want)
    for bad_ms, bad_stride in ((ms + 1, stride), (1, 0)):  # past the end; stride 0
        o = np.full(bad_ms, 7.0, np.float32)
        with pytest.raises(ValueError):
            nat.sample_abs(parts, anchor, bad_stride, o)
        assert (o == 7.0).all()


@given(_SEEDS, st.integers(0, 500), st.sampled_from([0.0, 1e-6, 1.0, np.inf]))
@settings(max_examples=200)
def test_count_at_least(nat: ModuleType, seed: int, n: int, t: float) -> None:
    rng = np.random.default_rng(seed)
    v = _f32_bits(rng, n)
    v[rng.random(n) < 0.1] = np.nan
    v[rng.random(n) < 0.1] = np.inf
    v[rng.random(n) < 0.1] = -0.0
    with np.errstate(invalid="ignore"):
        want = int(np.count_nonzero(np.abs(v) >= np.float32(t)))
    assert nat.count_at_least(v, np.float32(t)) == want


@given(_SEEDS, st.integers(2, 400), st.integers(1, 420))
@settings(max_examples=200)
def test_trim_within_one_histogram_bucket(nat: ModuleType, seed: int, c: int, k: int) -> None:
    """Magnitudes that share their top 16 bits (one bucket of the radix select), ties among them."""
    rng = np.random.default_rng(seed)
    sel = np.sort(rng.choice(1 << 20, c, replace=False)).astype(np.intp)
    low = rng.integers(0, 1 << 15, c, dtype=np.uint32) & np.uint32(rng.choice([0x7FFF, 0x7]))
    bits = np.uint32(0x3F80_0000) | low | (rng.integers(0, 2, c, dtype=np.uint32) << np.uint32(31))
    d = bits.view(np.float32)
    oi, od = np.full(max(k, 1), -7, np.intp), np.full(max(k, 1), 7.0, np.float32)
    m = nat.trim(sel, d, k, oi, od)
    keep = _trim_mask(np.abs(d), k) if c > k else np.ones(c, bool)
    assert oi[:m].tolist() == sel[keep].tolist()
    _same_bits(od[:m], d[keep])


def test_varint_one_byte_runs(nat: ModuleType) -> None:
    """Runs of one-byte varints (eight at a time in the kernel) with a fault or a long varint at
    every position near a run's edges: the NumPy decoder's sums and faults."""
    for n in range(1, 40):
        for at in range(n):
            for fault in (b"\x80\x01", b"\x80\x00", b"\xff\xff\xff\xff\x7f", b"\x85"):
                body = bytes([1 + (i % 100) for i in range(at)]) + fault + bytes([3] * (n - at))
                assert _unpack(b"\x00" + body, "on") == _unpack(b"\x00" + body, "off")
    # sums that reach 2**32 inside a run of one-byte gaps
    body = b"\xff\xff\xff\xff\x0f" + bytes([0x7F] * 16)
    assert _unpack(b"\x00" + body, "on") == _unpack(b"\x00" + body, "off")


def test_anchor_is_read_only(nat: ModuleType) -> None:
    e = Engine(MAN, SyncConfig.v1_0(), 9, 1)
    with pytest.raises(ValueError, match="read-only"):
        e.anchor[0] = np.float32(1.0)
    with pytest.raises(ValueError):
        np.copyto(e.anchor, np.ones(NP, np.float32))
    assert not e.anchor.any()


def test_anchor_bound_stays_an_upper_bound(nat: ModuleType) -> None:
    """The bound of max |anchor| kept across steps grows with every generate and receive, so a
    packet it cannot prove goes to the exact sums: rounds that walk the anchor up to 2**127 give
    the NumPy core's outcomes, anchors and results, and the bound is never below the anchor."""
    rng = np.random.default_rng(11)
    cfg = SyncConfig.v1_0(ratio=0.5, alpha=1.0)
    anchor = rng.standard_normal(NP).astype(np.float32)
    on, off = _pair(cfg, anchor, 9, nat)
    seq = itertools.count(1)
    for rnd in range(8):
        # a generate moves the anchor at half the indices (the own delta grows each round)
        act = on.anchor + (rng.standard_normal(NP) * np.float32(4.0**rnd)).astype(np.float32)
        e_on, e_off = on.generate(act.copy()), off.generate(act.copy())
        assert [e.indices.tolist() for e in e_on] == [e.indices.tolist() for e in e_off]
        _same_engines(on, off)
        # a packet of N / 2 values that doubles in magnitude every round: once the anchor reaches
        # 2**127 the bound fails, the exact sums run, and a sum past FLT_MAX is refused
        idx = np.sort(rng.choice(NP, NP // 2, replace=False)).astype(np.uint32)
        mag = np.float32(2.0 ** min(121 + rnd, 127))  # up to 2**127, the bound's limit
        vals = (rng.choice([-1.0, 1.0], idx.size) * mag).astype(np.float32)
        pkt = _pkt(1, _ent(1, next(seq), idx.tolist(), vals.tolist()))
        active = on.anchor.copy()
        r_on = on.receive([pkt], active=_split(active.copy(), [100, 2000]))
        r_off = off.receive([pkt], active=_split(active.copy(), [100, 2000]))
        _same_receive(r_on, r_off)
        _same_engines(on, off)
        top = float(np.max(np.abs(on.anchor)))
        assert on._anchor_bound is None or on._anchor_bound >= top, (rnd, on._anchor_bound, top)
    assert any(o is ErrorCode.NON_FINITE_RESULT for o in r_on.outcomes)


def test_torch_host_parts_follow_replaced_tensors(nat: ModuleType) -> None:
    torch = pytest.importorskip("torch")
    from delta_fabric.store import StoreError
    from delta_fabric.stores.torch import TorchStore

    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    s = TorchStore(m)
    first = s.host_parts()
    assert first is not None and s.host_parts() is not first  # a fresh list of the kept views
    with torch.no_grad():
        m.weight.data = torch.zeros(3, 4)  # a new storage: the views are taken again
    w = s.manifest.names.index("weight")
    off = s.manifest.offsets[w]
    got = s.host_parts()
    assert got is not None and not got[w].any()
    s.apply(np.array([off, off + 5], np.uint32), np.array([1.0, 2.0], np.float32))
    flat = m.weight.detach().reshape(-1)
    assert float(flat[0]) == 1.0 and float(flat[5]) == 2.0
    with torch.no_grad():
        m.weight.data = torch.zeros(4, 3).t()  # not contiguous: no views
    assert s.host_parts() is None
    # the kernel's refusals are check_sparse's StoreError
    s2 = TorchStore(torch.nn.Linear(4, 3))
    for idx in ([5, 2], [1, 1], [0, 15]):
        with pytest.raises(StoreError):
            s2.apply(np.array(idx, np.uint32), np.ones(len(idx), np.float32))


@given(st.lists(st.integers(0, 2**32 - 1), max_size=60), st.booleans())
@settings(max_examples=300)
def test_increasing(nat: ModuleType, values: list[int], sort: bool) -> None:
    ix = np.array(sorted(set(values)) if sort else values, dtype=np.uint32)
    assert nat.increasing(ix) is bool(np.all(ix[1:] > ix[:-1]))


@given(_SEEDS, st.integers(1, 3000), st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.integers(1, 500))
@settings(max_examples=150)
def test_collect_histogram_feeds_trim(nat: ModuleType, seed: int, n: int, t: float, k: int) -> None:
    """`collect_at_least` counts its candidates' magnitudes as `trim` would; `trim` given those
    counts keeps what it keeps without them, and refuses or remakes counts that do not fit."""
    rng = np.random.default_rng(seed)
    anchor = rng.standard_normal(n).astype(np.float32)
    active = anchor + (rng.standard_cauchy(n) * 0.5).astype(np.float32)
    active[rng.random(n) < 0.02] = np.inf
    oi, od = np.empty(n, np.intp), np.empty(n, np.float32)
    hist = np.full(int(nat.HIST), 9, np.uint32)
    c = nat.collect_at_least([active], anchor, np.float32(t), t == 0.0, oi, od, hist)
    mags = (od[:c].view(np.uint32) & np.uint32(0x7FFFFFFF)) >> np.uint32(15)
    assert hist.tolist() == np.bincount(mags, minlength=int(nat.HIST)).tolist()
    sel, d = oi[:c].copy(), od[:c].copy()
    room = max(k, 1)

    def run(h: NDArray[np.uint32] | None) -> tuple[int, list[int], list[int]]:
        a, b = np.full(room, -7, np.intp), np.full(room, 7.0, np.float32)
        m = nat.trim(sel, d, k, a, b, h)
        return m, a[:m].tolist(), b[:m].view(np.uint32).tolist()

    want = run(None)
    assert run(hist) == want
    wrong_sum = hist.copy()
    wrong_sum[0] += 1
    assert run(wrong_sum) == want  # does not add up: made again
    if c > k and c > 1:
        moved = hist.copy()  # adds up, but in other buckets than the candidates'
        nz = np.flatnonzero(moved[:0xFF00])
        if nz.size:
            moved[nz[0]] -= 1
            moved[(nz[0] + 1) % 0xFF00] += 1
            a, b = np.full(room, -7, np.intp), np.full(room, 7.0, np.float32)
            try:
                m = nat.trim(sel, d, k, a, b, moved)
            except ValueError:
                assert (a == -7).all() and (b == 7.0).all()  # refused before any write
            else:
                assert 0 <= m <= k


def test_trim_with_a_histogram_refuses_nan(nat: ModuleType) -> None:
    sel = np.arange(4, dtype=np.intp)
    d = np.array([1.0, np.nan, 2.0, 3.0], np.float32)
    hist = np.zeros(int(nat.HIST), np.uint32)
    hist[0x3F80_0000 >> 15] = 4  # claims four values near 1.0: adds up, hides the NaN
    a, b = np.full(2, -7, np.intp), np.full(2, 7.0, np.float32)
    with pytest.raises(ValueError, match="NaN"):
        nat.trim(sel, d, 2, a, b, hist)
    assert (a == -7).all() and (b == 7.0).all()
    with pytest.raises(ValueError):
        nat.trim(sel, d[[0, 2, 3, 0]], 2, a, b, np.zeros(5, np.uint32))  # wrong length


@pytest.mark.parametrize("magnitude", [1e-44, 1e-3, 1.0, 1e30, 3e36, 3e38])
def test_pack_sends_the_codes_of_generate(nat: ModuleType, magnitude: float) -> None:
    """`pack` reuses the Q8 codes `generate` made (by the sent values' identity): the packets are
    the bytes of encoding the entries afresh, on both sides of the scale above which codes are
    clamped (there they are encoded afresh), and the same as the NumPy core's."""
    rng = np.random.default_rng(5)
    cfg = SyncConfig.v1_0(ratio=0.3, average_over=3, encoding=ValueEncoding.Q8)
    anchor = np.zeros(NP, np.float32)
    on, off = _pair(cfg, anchor, 9, nat)
    act = np.clip(rng.standard_normal(NP) * magnitude, -3e38, 3e38).astype(np.float32)
    e_on, e_off = on.generate(act.copy()), off.generate(act.copy())
    p_on, p_off = on.pack(e_on, []), off.pack(e_off, [])
    assert p_on == p_off
    fresh = [encode_packet(decode_packet(p, 1 << 24)) for p in p_on]
    assert fresh == p_on
    # kept while no code is clamped (w * d with w = 1 / 3 never reaches that scale; encode_packet
    # is checked above it in test_q8_codes_above_the_clamping_scale)
    kept = [float(compact.q8_scale(e.values)) <= 2.0**121 for e in e_on]
    assert len(on._q8_made) == sum(kept) == len(e_on)


def test_q8_codes_above_the_clamping_scale(nat: ModuleType) -> None:
    """Above scale 2**121 Q8 clamps codes below 127, and re-encoding the decoded values picks a
    smaller scale: `encode_packet` given such codes would send other bytes, so the engine does not
    keep them; given matching codes it sends the same bytes as encoding afresh."""
    v = np.array([3.4e38, -1e38, 5e37], np.float32)
    scale, codes = compact.q8_encode(v)
    assert float(scale) > 2.0**121 and int(np.abs(codes).max()) < 127
    sent = compact.q8_quantize(v)
    s2, c2 = compact.q8_encode(sent)
    assert float(s2) < float(scale)  # not idempotent here: the reason for the engine's limit
    e = Entry(1, 1, 1, 0, np.array([1, 2, 3], np.uint32), sent)
    pkt = Packet(1, 1, FP, (e,), encoding=ValueEncoding.Q8)
    fresh = encode_packet(pkt)
    assert encode_packet(pkt, q8_codes={id(e.values): (e.values, s2, c2)}) == fresh
    other = sent.copy()  # codes made of another array (equal values) are not taken
    assert encode_packet(pkt, q8_codes={id(other): (other, scale, codes)}) == fresh
