"""Writing a vector's large arrays as recipes (``conformance/vectors/README.md``, "Recipes").

:func:`compact_vector` takes a vector in its full form (every array a list, as the generators build
it) and the recipes of its inputs, and replaces every array of more than :data:`COMPACT_MIN` values by
a recipe that expands to exactly the same JSON (checked here with the runner's own expansion,
``delta_fabric_conformance.recipes``):

- an f32 array (``x`` with its ``x_bits``, or ``x_bits`` alone) by the first candidate recipe of its
  length whose bits it has: the input recipes, each also without its ``fill`` and ``set``, and for a
  ``steps`` recipe the same values packed from position 0 (``stride`` 1: the values of an entry that
  holds every non-zero of it); failing those, by ``zeros`` with a ``set`` of its non-zero patterns
  when at most a quarter of them is non-zero;
- an ``indices`` list that is an arithmetic progression by a ``range`` recipe.

An array that fits none stays a list. :func:`write_vector` writes the compact form and refuses it
unless it expands to the full form byte for byte.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.wire import json_loads
from delta_fabric_conformance.recipes import bits_of, expand_f32, expand_vector, floats_of

__all__ = ["COMPACT_MIN", "compact_vector", "dumps", "write_vector"]

#: Arrays of at most this many values stay lists.
COMPACT_MIN = 1000


def dumps(vector: Any) -> str:
    """A vector file's text: no indentation (the N = 2^17 vectors)."""
    return json.dumps(vector, separators=(",", ":"), allow_nan=False) + "\n"


def _variants(recipe: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = [dict(recipe)]
    bare = {k: v for k, v in recipe.items() if k not in ("fill", "set")}
    if bare != recipe:
        out.append(bare)
    if recipe["recipe"] == "steps":
        c = int(recipe["count"])
        out.append(
            {
                "recipe": "steps",
                "n": c,
                "start": 0,
                "stride": 1,
                "count": c,
                "denominator": recipe["denominator"],
            }
        )
    return out


def _f32_recipe(
    bits: Sequence[str], candidates: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    n = len(bits)
    for cand in candidates:
        if cand["n"] == n and bits_of(expand_f32(cand)) == list(bits):
            return dict(cand)
    pat = np.array([int(b, 16) for b in bits], dtype=np.uint32)
    nz = np.flatnonzero(pat)
    if nz.size <= n // 4:
        return {
            "recipe": "zeros",
            "n": n,
            "set": {"indices": nz.tolist(), "bits": [f"{int(b):08x}" for b in pat[nz]]},
        }
    return None


def _range_recipe(indices: Sequence[int]) -> dict[str, Any] | None:
    if len(indices) < 2:
        return None
    step = indices[1] - indices[0]
    if step < 1 or any(b - a != step for a, b in itertools.pairwise(indices)):
        return None
    return {"recipe": "range", "start": indices[0], "step": step, "count": len(indices)}


def _compact(data: Any, candidates: Sequence[Mapping[str, Any]]) -> Any:
    if isinstance(data, list):
        return [_compact(v, candidates) for v in data]
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    folded: set[str] = set()  # ``x_bits`` members given by the recipe of ``x``
    for key, value in data.items():
        if key in folded:
            continue
        recipe: dict[str, Any] | None = None
        twin = f"{key}_bits"
        if isinstance(value, list) and len(value) > COMPACT_MIN:
            if key == "indices":
                recipe = _range_recipe(value)
            elif key.endswith("_bits"):
                recipe = _f32_recipe(value, candidates)
            elif isinstance(data.get(twin), list):
                recipe = _f32_recipe(data[twin], candidates)
                if recipe is not None and floats_of(expand_f32(recipe)) != value:
                    recipe = None  # numbers that are not the bits' own: keep both lists
                if recipe is not None:
                    folded.add(twin)
        out[key] = _compact(value, candidates) if recipe is None else recipe
    return out


def compact_vector(vector: Mapping[str, Any], inputs: Mapping[str, Mapping[str, Any]]) -> Any:
    """``vector`` with its large arrays as recipes (module docstring); ``inputs``: the recipes of its
    input arrays by member (``active``, ``anchor``)."""
    candidates = [v for r in inputs.values() for v in _variants(r)]
    return _compact(dict(vector), candidates)


def write_vector(
    path: Path, vector: Mapping[str, Any], inputs: Mapping[str, Mapping[str, Any]]
) -> None:
    """Write ``vector`` (full form) to ``path`` in its compact form, after checking that every input
    member is written as its recipe and that the file expands to the full form byte for byte."""
    compact = compact_vector(vector, inputs)
    for member, recipe in inputs.items():
        if compact.get(member) != dict(recipe):
            raise AssertionError(f"{path}: {member} is not its recipe {dict(recipe)}")
    text = dumps(compact)
    if dumps(expand_vector(json_loads(text))) != dumps(vector):
        raise AssertionError(f"{path}: the recipes do not expand to the vector")
    path.write_text(text, encoding="utf-8")
