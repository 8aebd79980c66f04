"""Array recipes (conformance/vectors/README.md, "Recipes"): every vector that holds one expands to
exactly the full form the generator builds, and the nine N = 2^17 generate vectors expand to the
bytes of the files they replaced (the lists of decimal numbers and bit patterns)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from delta_fabric.wire import json_loads
from delta_fabric_conformance.recipes import (
    RecipeError,
    bits_of,
    expand_f32,
    expand_indices,
    expand_vector,
    is_recipe,
)

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "conformance" / "vectors"
TOOLS = ROOT / "conformance" / "tools"

#: SHA-256 of each file as it was before recipes (every array a list), which its expansion written
#: without indentation must reproduce byte for byte.
FULL_FORM_SHA256 = {
    "fast_large_dense": "ec0a2aa8ba6b45421eecfdf4857b2ef41e13f3e3f8f4d3adc90c0ec8f4792d64",
    "fast_large_sample_overestimates": (
        "b22166cc8b50f91e6c437e739b08b987d547317f67c20d5c9de21237b4c61c04"
    ),
    "fast_large_sample_underestimates": (
        "af4c52d692369122fd400d4cd39ec3e26917d82da3332187bd60041c7d4d72f0"
    ),
    "select_large_dense": "b8de0156976dc793d301f441cbf8495245a2c07739696860907bc5c9c4244858",
    "select_large_dense_k_above_quarter": (
        "14934059a8f37cf5edbac43554b1c4fdaf918d35ff08a21117b872c03d21dbcb"
    ),
    "select_large_group_max": "6895496e0c2d9b61d2da271efec73bd244a2dced9bb95876e8b70c6f2e9442a1",
    "select_large_index_zero": "6b670a108ed8ce725b0e72afdf5a4e31cbc51230d1271026835ade5ec5b38330",
    "select_large_nothing_to_send": (
        "012af9ed534a04ba1a35bdf81985034b1c431172d8077d1c0990decd0970d7b1"
    ),
    "select_large_sparse": "1d998915a70c1bcc9e47cdf99f1ca1814d543018aa1074b5bbb06fd1d75fe443",
}


def _has_recipe(x: Any) -> bool:
    if is_recipe(x):
        return True
    if isinstance(x, dict):
        return any(_has_recipe(v) for v in x.values())
    if isinstance(x, list):
        return any(_has_recipe(v) for v in x)
    return False


def _vector_files() -> dict[str, Path]:
    """Every vector file of the index that holds a recipe, by path."""
    rows = json.loads((VECTORS / "index.json").read_text())["vectors"]
    out: dict[str, Path] = {}
    for row in rows:
        base = VECTORS / row["path"]
        path = base / "case.json" if base.is_dir() else base.with_name(base.name + ".json")
        if _has_recipe(json.loads(path.read_text())):
            out[row["path"]] = path
    return out


def _full_text(path: Path) -> str:
    expanded = expand_vector(json_loads(path.read_text(encoding="utf-8")))
    return json.dumps(expanded, separators=(",", ":"), allow_nan=False) + "\n"


def test_the_large_vectors_are_recipes() -> None:
    # the nine vectors of 2^17 values, and no other, are written with recipes
    assert sorted(_vector_files()) == sorted(f"generate/{n}" for n in FULL_FORM_SHA256)
    sizes = {n: (VECTORS / "generate" / f"{n}.json").stat().st_size for n in FULL_FORM_SHA256}
    assert max(sizes.values()) < 400_000, sizes


@pytest.mark.parametrize("name", sorted(FULL_FORM_SHA256))
def test_expansion_is_the_file_it_replaced(name: str) -> None:
    text = _full_text(VECTORS / "generate" / f"{name}.json")
    assert hashlib.sha256(text.encode()).hexdigest() == FULL_FORM_SHA256[name]


def test_expansion_is_the_generators_full_form(tmp_path: Path) -> None:
    """The generator's own arrays (NumPy, ``recipes=False``) against the runner's expansion of
    the checked-in files, byte for byte, for every vector with a recipe."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    import fast_vectors
    import selection_vectors

    selection_vectors.build(tmp_path, recipes=False)
    fast_vectors.build(tmp_path, recipes=False)
    written = {str(p.relative_to(tmp_path).with_suffix("")) for p in tmp_path.rglob("*.json")}
    recipe_files = _vector_files()
    assert set(recipe_files) <= written  # every recipe vector is one of these generators'
    for rel, path in recipe_files.items():
        full = (tmp_path / f"{rel}.json").read_text(encoding="utf-8")
        assert _full_text(path) == full, rel
        assert "recipe" not in full, rel


def test_f32_recipes() -> None:
    r = {"recipe": "permutation", "n": 6, "multiplier": 3, "modulus": 5}
    assert expand_f32(r).tolist() == [1.0, -4.0, 2.0, -5.0, 3.0, -1.0]
    r = {"recipe": "steps", "n": 7, "start": 1, "stride": 3, "count": 2, "denominator": 3}
    x = expand_f32(r)
    assert bits_of(x) == bits_of(np.array([0, 1 / 3, 0, 0, -2 / 3, 0, 0], dtype=np.float32))
    r = {
        "recipe": "zeros",
        "n": 5,
        "fill": {"modulus": 2, "residues": [1], "bits": "7fc00001"},
        "set": {"indices": [3, 4], "bits": ["80000000", "3f800000"]},
    }
    assert bits_of(expand_f32(r)) == ["00000000", "7fc00001", "00000000", "80000000", "3f800000"]
    assert expand_indices({"recipe": "range", "start": 2, "step": 3, "count": 3}) == [2, 5, 8]


def test_expand_vector_writes_numbers_then_bits() -> None:
    v = {
        "active": {"recipe": "zeros", "n": 2, "set": {"indices": [1], "bits": ["7f800000"]}},
        "k": 1,
        "expected": {"active_bits": {"recipe": "zeros", "n": 1}, "small": [1.0]},
    }
    out = expand_vector(v)
    assert list(out) == ["active", "active_bits", "k", "expected"]
    assert out["active"] == [0.0, "inf"] and out["active_bits"] == ["00000000", "7f800000"]
    assert out["expected"] == {"active_bits": ["00000000"], "small": [1.0]}
    plain = {"a": [1.0], "b": {"c": 2}}
    assert expand_vector(plain) is plain  # nothing to expand: the same object


@pytest.mark.parametrize(
    "bad",
    [
        {"x": {"recipe": "unknown", "n": 3}},
        {"x": {"recipe": "zeros", "n": 3}, "x_bits": []},
        {"x": {"recipe": "zeros", "n": 3, "extra": 1}},
        {"x": {"recipe": "zeros", "n": 0}},
        {"x": {"recipe": "steps", "n": 3, "start": 2, "stride": 1, "count": 2, "denominator": 1}},
        {"x": {"recipe": "zeros", "n": 3, "set": {"indices": [3], "bits": ["00000000"]}}},
        {"x": {"recipe": "zeros", "n": 3, "set": {"indices": [0], "bits": []}}},
        {"x": {"recipe": "zeros", "n": 3, "fill": {"modulus": 2, "residues": [2], "bits": "0"}}},
        {"indices": {"recipe": "zeros", "n": 3}},
        {"x": {"recipe": "sample_overestimates", "n": 1000}},
    ],
)
def test_bad_recipes_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(RecipeError):
        expand_vector(bad)
