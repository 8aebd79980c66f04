"""Array recipes: the compact form of a vector's large arrays (``conformance/vectors/README.md``,
"Recipes").

A vector file may give an f32 array member, or an entry's ``indices``, as a small JSON object with a
``"recipe"`` member instead of a list. :func:`expand_vector` replaces every such object by the lists
it stands for, so that the result is exactly the vector's full form (the form every reader and every
driver sees; the runner expands a vector before it judges it or sends it to a driver):

- a recipe at a member ``x`` (``active``, ``anchor``, an entry's ``values``) becomes ``x`` (JSON
  numbers, non-finite values as ``"nan"``, ``"inf"``, ``"-inf"``) followed by ``x_bits`` (8 lowercase
  hex digits per value); the file must not carry ``x_bits`` itself;
- a recipe at a member ``x_bits`` becomes the bit patterns only;
- a recipe at ``indices`` (``"recipe": "range"``) becomes a list of integers.

f32 recipes (``n`` values, index ``i`` from 0; ``(-1)^j`` is +1 for even ``j``; every value is
computed in binary64 and rounded once to binary32, where it is exact):

- ``zeros``: +0.0 everywhere.
- ``permutation`` (``multiplier``, ``modulus``): ``x[i] = (-1)^i ((i * multiplier) mod modulus + 1)``.
- ``steps`` (``start``, ``stride``, ``count``, ``denominator``): +0.0, except
  ``x[start + stride j] = (-1)^j (j + 1) / denominator`` for ``j < count``.
- ``sample_overestimates`` and ``sample_underestimates``: the two inputs of
  ``generate/fast_large_sample_*``; see :func:`_sample_overestimates` and
  :func:`_sample_underestimates`.

Then, in this order, two optional members of any f32 recipe: ``fill`` (``modulus``, ``residues``,
``bits``: ``x[i]`` is the pattern ``bits`` wherever ``i mod modulus`` is one of ``residues``) and
``set`` (``indices``, ``bits``: ``x[indices[m]]`` is the pattern ``bits[m]``).

Index recipe: ``range`` (``start``, ``step``, ``count``): ``start + step j`` for ``j < count``.

The Rust vectors test (``interop/crates/df-core/tests/it/recipes.rs``) expands the same recipes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "RecipeError",
    "bits_of",
    "expand_f32",
    "expand_indices",
    "expand_vector",
    "floats_of",
    "is_recipe",
]

#: f32 recipe names (``expand_f32``) and the members each takes besides ``recipe`` and ``n``.
F32_RECIPES: dict[str, frozenset[str]] = {
    "zeros": frozenset(),
    "permutation": frozenset({"multiplier", "modulus"}),
    "steps": frozenset({"start", "stride", "count", "denominator"}),
    "sample_overestimates": frozenset(),
    "sample_underestimates": frozenset(),
}
#: Members every f32 recipe may carry.
F32_COMMON = frozenset({"recipe", "n", "fill", "set"})
#: An array of more than this many values is refused (a recipe is for arrays of a model's size).
MAX_N = 1 << 32


class RecipeError(ValueError):
    """A recipe that is malformed, unknown, or does not fit its array."""


def is_recipe(x: Any) -> bool:
    """Whether ``x`` is a recipe object (a JSON object with a ``recipe`` member)."""
    return isinstance(x, Mapping) and "recipe" in x


def _int(r: Mapping[str, Any], key: str, lo: int = 0) -> int:
    v = r.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < MAX_N:
        raise RecipeError(f"recipe {r.get('recipe')!r}: {key} must be an integer >= {lo}")
    return v


def _bits_array(bits: Any, what: str) -> NDArray[np.uint32]:
    if not isinstance(bits, list) or not all(isinstance(b, str) and len(b) == 8 for b in bits):
        raise RecipeError(f"{what}: a list of 8-hex-digit bit patterns")
    try:
        return np.array([int(b, 16) for b in bits], dtype=np.uint32)
    except ValueError as exc:
        raise RecipeError(f"{what}: {exc}") from None


def _alternating(j: NDArray[np.int64]) -> NDArray[np.float64]:
    return np.where(j % 2 == 0, 1.0, -1.0)


def _spread(count: int, lo: float, hi: float) -> NDArray[np.float64]:
    """``count`` magnitudes ``lo + j step``, ``step = 2^floor(log2((hi - lo) / count))``, with
    alternating signs (binary64; exact in binary32)."""
    step = 2.0 ** math.floor(math.log2((hi - lo) / count))
    j = np.arange(count, dtype=np.int64)
    return (lo + j * step) * _alternating(j)


def _ramp(n: int) -> NDArray[np.float64]:
    """``(-1)^i (i + 1) 2^-24``: every value a distinct non-zero magnitude below 2^-7 (n <= 2^17)."""
    i = np.arange(n, dtype=np.int64)
    return (i + 1) * 2.0**-24 * _alternating(i)


def _unsampled(m: NDArray[np.int64]) -> NDArray[np.int64]:
    """The ``m``-th index (from 0) that is not a multiple of 4."""
    return 4 * (m // 3) + m % 3 + 1


def _sample_overestimates(n: int) -> NDArray[np.float64]:
    """The ramp, with ``spread(2000, 2, 3)`` at ``28 + 64 j`` (multiples of 4, where a strided
    sample looks) and ``spread(1000, 4, 5)`` at ``64 j + 7`` (the unsampled index ``5 + 48 j``)."""
    x = _ramp(n)
    x[28 + 64 * np.arange(2000, dtype=np.int64)] = _spread(2000, 2.0, 3.0)
    x[_unsampled(5 + 48 * np.arange(1000, dtype=np.int64))] = _spread(1000, 4.0, 5.0)
    return x


def _sample_underestimates(n: int) -> NDArray[np.float64]:
    """The ramp, with ``spread(800, 1, 1.5)`` at ``12 + 160 j`` and, at the unsampled indices
    ``1 + 8 j`` (j < 12000, ascending), the magnitudes of ``spread(12000, 2, 3)``, negative where
    ``j mod 3 = 0``."""
    x = _ramp(n)
    x[12 + 160 * np.arange(800, dtype=np.int64)] = _spread(800, 1.0, 1.5)
    j = np.arange(12000, dtype=np.int64)
    x[_unsampled(1 + 8 * j)] = np.abs(_spread(12000, 2.0, 3.0)) * np.where(j % 3 == 0, -1.0, 1.0)
    return x


def _base(r: Mapping[str, Any], n: int) -> NDArray[np.float32]:
    name = r["recipe"]
    if name == "zeros":
        return np.zeros(n, dtype=np.float32)
    if name == "permutation":
        mul, mod = _int(r, "multiplier"), _int(r, "modulus", 1)
        i = np.arange(n, dtype=np.int64)
        if n * mul < 2**62:
            mags = ((i * mul) % mod + 1).astype(np.float64)
        else:  # i * multiplier may exceed int64: Python integers
            mags = np.array([(int(v) * mul) % mod + 1 for v in i], dtype=np.float64)
        return (mags * _alternating(i)).astype(np.float32)
    if name == "steps":
        start, stride = _int(r, "start"), _int(r, "stride", 1)
        count, denom = _int(r, "count"), r.get("denominator")
        if not isinstance(denom, (int, float)) or isinstance(denom, bool) or not denom > 0:
            raise RecipeError("recipe 'steps': denominator must be a positive number")
        if count and start + stride * (count - 1) >= n:
            raise RecipeError("recipe 'steps': positions beyond n")
        x = np.zeros(n, dtype=np.float32)
        j = np.arange(count, dtype=np.int64)
        x[start + stride * j] = ((j + 1) / float(denom) * _alternating(j)).astype(np.float32)
        return x
    if name in ("sample_overestimates", "sample_underestimates"):
        if n < 131072:
            raise RecipeError(f"recipe {name!r}: n must be at least 131072")
        make = _sample_overestimates if name == "sample_overestimates" else _sample_underestimates
        return make(n).astype(np.float32)
    raise RecipeError(f"unknown f32 recipe {name!r}")


def expand_f32(r: Mapping[str, Any]) -> NDArray[np.float32]:
    """The f32 array of recipe ``r`` (module docstring)."""
    name = r.get("recipe")
    if name not in F32_RECIPES:
        raise RecipeError(f"unknown f32 recipe {name!r}")
    extra = set(r) - F32_COMMON - F32_RECIPES[name]
    if extra:
        raise RecipeError(f"recipe {name!r}: unknown members {sorted(extra)}")
    n = _int(r, "n", 1)
    x = _base(r, n)
    bits = x.view(np.uint32)
    fill = r.get("fill")
    if fill is not None:
        if not isinstance(fill, Mapping) or set(fill) != {"modulus", "residues", "bits"}:
            raise RecipeError("fill: an object of modulus, residues, bits")
        mod = _int(fill, "modulus", 1)
        res = fill["residues"]
        if not isinstance(res, list) or not all(isinstance(v, int) and 0 <= v < mod for v in res):
            raise RecipeError("fill: residues must be integers below modulus")
        pattern = _bits_array([fill["bits"]], "fill bits")[0]
        bits[np.isin(np.arange(n, dtype=np.int64) % mod, res)] = pattern
    put = r.get("set")
    if put is not None:
        if not isinstance(put, Mapping) or set(put) != {"indices", "bits"}:
            raise RecipeError("set: an object of indices, bits")
        idx, pat = put["indices"], _bits_array(put["bits"], "set bits")
        if not isinstance(idx, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n for v in idx
        ):
            raise RecipeError("set: indices must be integers below n")
        if len(idx) != pat.size:
            raise RecipeError("set: indices and bits differ in length")
        bits[np.array(idx, dtype=np.int64)] = pat
    return x


def expand_indices(r: Mapping[str, Any]) -> list[int]:
    """The index list of an index recipe (``range``)."""
    if r.get("recipe") != "range" or set(r) != {"recipe", "start", "step", "count"}:
        raise RecipeError(f"index recipe: expected range (start, step, count), got {dict(r)}")
    start, step, count = _int(r, "start"), _int(r, "step", 1), _int(r, "count")
    return list(range(start, start + step * count, step))


def bits_of(x: NDArray[np.float32]) -> list[str]:
    """Bit patterns of f32 values, 8 lowercase hex digits each."""
    return [f"{int(b):08x}" for b in np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)]


def floats_of(x: NDArray[np.float32]) -> list[float | str]:
    """f32 values as JSON numbers (``float(np.float32(v))``), non-finite ones as strings."""
    with np.errstate(invalid="ignore"):
        vals: list[float] = np.asarray(x, dtype=np.float32).astype(np.float64).tolist()
    return [
        v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
        for v in vals
    ]


def expand_vector(data: Any, where: str = "") -> Any:
    """``data`` with every recipe replaced by the lists it stands for (module docstring); the
    members keep their order (``x`` then ``x_bits`` where ``x`` was). Objects without a recipe are
    rebuilt only when one of their members changes."""
    if isinstance(data, list):
        out_list = [expand_vector(v, f"{where}[{i}]") for i, v in enumerate(data)]
        return data if all(a is b for a, b in zip(out_list, data, strict=True)) else out_list
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    changed = False
    for key, value in data.items():
        at = f"{where}/{key}"
        if not is_recipe(value):
            new = expand_vector(value, at)
            changed = changed or new is not value
            out[key] = new
            continue
        changed = True
        try:
            if key == "indices":
                out[key] = expand_indices(value)
            elif key.endswith("_bits"):
                out[key] = bits_of(expand_f32(value))
            else:
                if f"{key}_bits" in data:
                    raise RecipeError(f"{key}_bits given beside the recipe of {key}")
                x = expand_f32(value)
                out[key] = floats_of(x)
                out[f"{key}_bits"] = bits_of(x)
        except RecipeError as exc:
            raise RecipeError(f"{at}: {exc}") from None
    return out if changed else data
