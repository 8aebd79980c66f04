"""Manifest: names, canonical order, flat layout, fingerprint (DF-MAN)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from delta_fabric.manifest import Manifest, TensorSpec, validate_name
from hypothesis import given
from hypothesis import strategies as st


def _mlp() -> Manifest:
    return Manifest.from_named_shapes(
        [
            ("fc2.weight", (2, 3)),
            ("fc1.weight", (3, 4)),
            ("fc1.bias", (3,)),
            ("fc2.bias", (2,)),
            ("scale", ()),
        ]
    )


def test_canonical_order_and_offsets() -> None:
    # REQ: DF-MAN-2
    # REQ: DF-MAN-3
    m = _mlp()
    assert m.names == ("fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "scale")
    assert m.offsets == (0, 3, 15, 17, 23, 24)
    assert m.num_params == 24
    assert m.offset("fc2.weight") == 17


def test_order_is_by_utf8_bytes() -> None:
    # REQ: DF-MAN-2
    names = ["b", "B", "a.b", "a_b", "\u00e9", "z", "a"]
    m = Manifest.from_named_shapes([(n, (1,)) for n in names])
    assert list(m.names) == sorted(names, key=lambda s: s.encode("utf-8"))
    assert list(m.names) == sorted(names)


def test_fingerprint_is_sha256_of_canonical_text() -> None:
    # REQ: DF-MAN-5
    m = _mlp()
    text = (
        "deltafabric-manifest/1\n"
        "fc1.bias\tf32\t3\n"
        "fc1.weight\tf32\t3,4\n"
        "fc2.bias\tf32\t2\n"
        "fc2.weight\tf32\t2,3\n"
        "scale\tf32\t\n"
    )
    assert m.canonical_text() == text
    assert m.fingerprint == hashlib.sha256(text.encode()).digest()
    assert len(m.fingerprint) == 32


def test_fingerprint_independent_of_input_order_but_not_of_shapes() -> None:
    # REQ: DF-MAN-5
    a = Manifest.from_named_shapes({"x": (2, 3), "y": (4,)})
    b = Manifest.from_named_shapes({"y": (4,), "x": (2, 3)})
    c = Manifest.from_named_shapes({"y": (4,), "x": (3, 2)})
    assert a.fingerprint == b.fingerprint and a == b
    assert a.fingerprint != c.fingerprint


@pytest.mark.parametrize(
    "bad", ["", "a\nb", "tab\there", "nul\x00", "del\x7f", "esc\x1b", "\ud800"]
)
def test_bad_names_rejected(bad: str) -> None:
    # REQ: DF-MAN-1
    with pytest.raises(ValueError):
        validate_name(bad)
    with pytest.raises(ValueError):
        TensorSpec(bad, (1,))


def test_duplicate_names_and_bad_shapes_rejected() -> None:
    # REQ: DF-MAN-1
    with pytest.raises(ValueError, match="duplicate"):
        Manifest([TensorSpec("a", (1,)), TensorSpec("a", (2,))])
    with pytest.raises(ValueError):
        TensorSpec("a", (2, -1))
    with pytest.raises(TypeError):
        validate_name(3)


def test_json_round_trip() -> None:
    m = _mlp()
    d = m.to_json()
    assert d["fingerprint"] == m.fingerprint.hex()
    assert Manifest.from_json(d) == m
    d["fingerprint"] = "00" * 32
    with pytest.raises(ValueError, match="fingerprint"):
        Manifest.from_json(d)


def test_split_flatten_round_trip_is_row_major() -> None:
    # REQ: DF-MAN-3
    m = _mlp()
    flat = np.arange(m.num_params, dtype=np.float32)
    views = m.split(flat)
    assert views["fc1.weight"].shape == (3, 4)
    assert views["fc1.weight"][1, 2] == 3 + 1 * 4 + 2
    assert views["scale"].shape == ()
    views["fc2.bias"][1] = -1.0  # views, not copies
    assert flat[16] == -1.0
    again = m.flatten({k: v.copy() for k, v in views.items()})
    assert np.array_equal(again, flat)


@given(st.lists(st.integers(0, 23), unique=True))
def test_locate_splits_per_tensor(raw: list[int]) -> None:
    # REQ: DF-MAN-3
    m = _mlp()
    flat = np.array(sorted(raw), dtype=np.uint32)
    parts = m.locate(flat)
    covered = 0
    for p in parts:
        assert p.stop > p.start
        t = m.tensors[p.tensor]
        assert t.name == p.name
        assert np.array_equal(
            p.local + m.offsets[p.tensor], flat[p.start : p.stop].astype(np.int64)
        )
        assert np.all((p.local >= 0) & (p.local < t.numel))
        covered += p.stop - p.start
    assert covered == flat.size


def test_locate_rejects_bad_input() -> None:
    m = _mlp()
    with pytest.raises(ValueError):
        m.locate(np.array([3, 1]))
    with pytest.raises(ValueError):
        m.locate(np.array([24]))
