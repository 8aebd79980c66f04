"""Generate vectors with N = 2^17 values, the size at which implementations switch from the plain
top-k to an estimated threshold (issue 10, "Suite strength": survivors of
``conformance/tools/mutation.py python --modules selection``; h40).

``delta_fabric.selection`` takes a strided sample of ``|d|`` from N = 2^17 on (``_SMALL_N``), and
``df_core::selection`` from N = 2^16 on; below that both run the exact rule directly, so every other
vector (N <= 100) leaves those paths unexecuted. DF-GEN-3 fixes the result whatever the path, so these
vectors expect the reference selection and are built so that an implementation's estimate misses in
the ways that need a fallback:

- ``select_large_sparse``: 100 non-zero deltas, none at a multiple of 4, and k = 132 (ratio 0.001):
  a strided sample sees only zeros, so every candidate must be taken (fewer than k).
- ``select_large_group_max``: 8,192 non-zero deltas at multiples of 16 and 65,536 NaN deltas (every
  index i with i % 4 in (1, 2)), k = 16,384 (ratio 0.125): a threshold aimed from the sample keeps
  fewer than k values although only 8,192 candidates exist, so an implementation must fall back
  (Python: the maxima of 2k strided groups, of which 16,384 hold only NaN and 2,048 a candidate) and
  still select all 8,192 and no NaN.
- ``select_large_dense``: every delta non-zero (a permutation of 1 .. 131071), k = 6,554 (ratio 0.05):
  the common case, where the sampled threshold keeps somewhat more than k values and the reference
  set is chosen among them by magnitude.
- ``select_large_dense_k_above_quarter``: 32,768 non-zero deltas (the multiples of 4), k = 39,322
  (ratio 0.3, above N/4): the sample's threshold keeps fewer than k, and the fallback for large k is
  the full partition.

The files are written without indentation, and their arrays of 2^17 values (inputs and expected
results) as recipes (``vector_recipes.py``; ``conformance/vectors/README.md``, "Recipes"): the input
recipes below state how each input is built, and the runner expands them to the same bits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.manifest import Manifest
from numpy.typing import NDArray

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import engine_vectors as ev  # noqa: E402
import vector_recipes as vr  # noqa: E402

__all__ = ["build"]

LARGE_MANIFEST = Manifest.from_named_shapes({"fc.weight": (256, 512)})  # N = 2^17
N = LARGE_MANIFEST.num_params
REQ = ["DF-GEN-2", "DF-GEN-3", "DF-GEN-5"]

#: The recipes of the inputs (``delta_fabric_conformance.recipes``), each the array its case builds.
ZEROS: dict[str, Any] = {"recipe": "zeros", "n": N}
DENSE: dict[str, Any] = {"recipe": "permutation", "n": N, "multiplier": 7919, "modulus": 131071}


def steps(start: int, stride: int, count: int, denominator: int) -> dict[str, Any]:
    """The recipe of :func:`_deltas` at ``start + stride j`` (j < count) with ``denominator``."""
    return {
        "recipe": "steps",
        "n": N,
        "start": start,
        "stride": stride,
        "count": count,
        "denominator": denominator,
    }


#: Case name -> member -> recipe (the members ``active`` and ``anchor`` of the vector).
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "select_large_sparse": {"active": steps(1, 1310, 100, 128), "anchor": ZEROS},
    "select_large_group_max": {
        "active": {
            **steps(0, 16, 8192, 3807),
            "fill": {"modulus": 4, "residues": [1, 2], "bits": "7fc00000"},  # NaN
        },
        "anchor": ZEROS,
    },
    "select_large_dense": {"active": DENSE, "anchor": ZEROS},
    "select_large_dense_k_above_quarter": {"active": steps(0, 4, 32768, 32768), "anchor": ZEROS},
}


def _deltas(positions: NDArray[np.int64], denom: float) -> NDArray[np.float32]:
    """Distinct magnitudes ``(j + 1) / denom`` with alternating signs at ``positions`` (exact in f32)."""
    d = np.zeros(N, dtype=np.float32)
    j = np.arange(positions.size, dtype=np.float64)
    d[positions] = ((j + 1) / denom * np.where(j % 2 == 0, 1.0, -1.0)).astype(np.float32)
    return d


def _group_max_active() -> NDArray[np.float32]:
    # magnitudes (j + 1) / 3807: the sample's 4386th largest (the exact-mode aim: 4096 expected + 4.5
    # standard deviations + 2) is exactly 1.0, a threshold that must not be mistaken for a special value
    d = _deltas(16 * np.arange(8192, dtype=np.int64), 3807.0)
    i = np.arange(N)
    d[(i % 4 == 1) | (i % 4 == 2)] = np.nan  # whole groups of NaN for a 2k-group bound
    return d


def _dense_active() -> NDArray[np.float32]:
    i = np.arange(N, dtype=np.int64)
    mags = (i * 7919) % 131071 + 1  # 2^17 - 1 is prime: a permutation of 1 .. 131071 (and 1 again)
    return (mags * np.where(i % 2 == 0, 1, -1)).astype(np.float32)


def cases() -> list[ev.GenCase]:
    zero = np.zeros(N, dtype=np.float32)
    sparse = 1310 * np.arange(100, dtype=np.int64) + 1  # odd: never a multiple of 4
    return [
        ev.GenCase(
            "select_large_sparse",
            "N = 2^17, ratio 0.001 (k = 132), 100 non-zero deltas at odd positions 1310 j + 1 with "
            "magnitudes (j + 1) / 128: every candidate is selected (DF-GEN-3 keeps min(k, #candidates)). "
            "A strided sample of |d| sees only zeros; an implementation that then takes the values "
            ">= 0, or > 1, or crashes on its sample size, fails.",
            REQ,
            _deltas(sparse, 128.0),
            zero,
            SyncConfig.v1_0(ratio=0.001),
            manifest=LARGE_MANIFEST,
        ),
        ev.GenCase(
            "select_large_group_max",
            "N = 2^17, ratio 0.125 (k = 16384), 8192 non-zero deltas at the multiples of 16 with "
            "magnitudes (j + 1) / 3807 (rounded to f32; 1.0 at j = 3806), and NaN deltas at every "
            "index i with i % 4 in (1, 2): all 8192 "
            "non-zero deltas are selected, no NaN (DF-GEN-3). A threshold estimated from a sample of "
            "every 4th value keeps fewer than k, so the result comes from a fallback; one that accepts "
            "the short set, counts zeros or NaN as candidates, or bounds the k-th largest by fewer "
            "than k group maxima, fails.",
            [*REQ, "DF-GEN-9"],
            _group_max_active(),
            zero,
            SyncConfig.v1_0(ratio=0.125),
            manifest=LARGE_MANIFEST,
        ),
        ev.GenCase(
            "select_large_dense",
            "N = 2^17, ratio 0.05 (k = 6554), every delta non-zero: the integers 1 .. 131071 in the "
            "order i * 7919 mod 131071 (the value 1 twice), with alternating signs. The typical case "
            "of a sampled threshold: it keeps somewhat more than k values, from which the reference "
            "set must still be chosen by magnitude (not the first k by index).",
            REQ,
            _dense_active(),
            zero,
            SyncConfig.v1_0(ratio=0.05),
            manifest=LARGE_MANIFEST,
        ),
        ev.GenCase(
            "select_large_dense_k_above_quarter",
            "N = 2^17, ratio 0.3 (k = 39322, above N / 4), 32768 non-zero deltas at the multiples of 4 "
            "with magnitudes (j + 1) / 32768: all 32768 are selected. A sample threshold keeps fewer "
            "than k, and the fallback for k > N / 4 must still give the whole candidate set.",
            REQ,
            _deltas(4 * np.arange(32768, dtype=np.int64), 32768.0),
            zero,
            SyncConfig.v1_0(ratio=0.3),
            manifest=LARGE_MANIFEST,
        ),
    ]


def write_compact(
    vectors_dir: Path,
    case: ev.GenCase,
    inputs: dict[str, dict[str, Any]],
    recipes: bool = True,
) -> dict[str, Any]:
    """Write one exact generate vector of N = 2^17 without indentation, its large arrays as recipes
    (``inputs``: the recipes of ``active`` and ``anchor``; ``recipes`` false: the full form, every
    array a list); return its index row."""
    path = vectors_dir / "generate" / f"{case.name}.json"
    assert not path.exists(), case.name
    row = ev._write_generate(vectors_dir, case)
    data = json.loads(path.read_text(encoding="utf-8"))
    if recipes:
        vr.write_vector(path, data, inputs)
    else:
        path.write_text(vr.dumps(data), encoding="utf-8")
    return row


def build(vectors_dir: Path, recipes: bool = True) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir``; return their index rows. ``recipes``
    false: the full form (``tests/test_vector_recipes.py`` compares it with the expansion)."""
    return [write_compact(vectors_dir, c, RECIPES[c.name], recipes) for c in cases()]
