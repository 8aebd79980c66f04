"""Generate vectors for fast mode (DF-GEN-7, judged by its bounds since 1.1) and two more N = 2^17
vectors of the sampled exact path (issue 10: the last NOT-equivalent survivors of both campaigns).

Fast mode lets a node choose any set S within DF-GEN-7's bounds, so a ``fast: true`` vector cannot
expect one set. Its ``expected.fast`` pins the bounds instead (``k``, the number of candidates C,
``min_selected`` = min(ceil(k/2), C), ``max_selected`` = k, and ``threshold_bits`` T, the 2k-th largest
``|d|``); the runner checks the implementation's S against them and checks what DF-GEN-4/5/6 make of S
(F32 values equal to ``d``, the anchor moved by exactly them, consecutive seqs). An implementation
whose fast mode is the reference selection passes every one of them.

Both cores estimate a fast threshold from a strided sample of ``|d|`` (every 4th value at N = 2^17,
positions 0, 4, 8, ...) aimed at about 0.65 k (Python) or 0.75 k (Rust) values, then check the count
of ``|d| >= t`` before they accept the set. The two large fast vectors put structure exactly where the
sample cannot see it:

- ``fast_large_sample_overestimates``: 2,000 values in [2, 3) at sampled positions and 1,000 larger
  values in [4, 5) at unsampled ones, the rest tiny: a threshold from the sample keeps 1,650 (Python)
  or 1,750 (Rust) values, fewer than ceil(k/2) = 2,000 for k = 4,000. An implementation that accepts
  that set (a lower bound of ceil(k/3), or a count test turned round) breaks DF-GEN-7 (b).
- ``fast_large_sample_underestimates``: 800 values in [1, 1.5) at sampled positions and 12,000 values
  in [2, 3) at unsampled ones, growing with the index: the sample's threshold keeps 12,650 or more,
  above 2k = 8,000. An implementation that keeps the first k of them by index sends values below T,
  the 2k-th largest (DF-GEN-7 (d)).
- ``fast_large_dense`` (every delta non-zero) is the ordinary case where the sample's set is accepted,
  and ``fast_basic`` the N = 24 case below every sample path.

The exact vectors:

- ``select_large_index_zero``: ``select_large_dense`` with the two largest magnitudes at indices 0
  and N - 1: the block pass of the sampled path must start at the first value of the store and end
  at its last.
- ``select_large_nothing_to_send``: N = 2^17, active = anchor (non-zero), k = 6,554: a sample of
  zeros and no candidate at all; nothing is sent and no seq is used (DF-GEN-8). An implementation
  that makes an entry of a stray index fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from numpy.typing import NDArray

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import engine_vectors as ev  # noqa: E402
import selection_vectors as sv  # noqa: E402
import vector_recipes as vr  # noqa: E402
from delta_fabric_conformance.engine_checks import check_engine_result, fast_bounds  # noqa: E402

__all__ = ["build"]

N = sv.N
FAST_REQ = ["DF-GEN-1", "DF-GEN-2", "DF-GEN-4", "DF-GEN-5", "DF-GEN-6", "DF-GEN-7", "DF-GEN-8"]
# k = ceil(2^17 * 125 / 4096) = 4000 exactly
FAST_RATIO = 125 / 4096
#: Case name -> member -> recipe of the N = 2^17 inputs (``selection_vectors.RECIPES``).
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "fast_large_dense": {"active": sv.DENSE, "anchor": sv.ZEROS},
    "fast_large_sample_overestimates": {
        "active": {"recipe": "sample_overestimates", "n": N},
        "anchor": sv.ZEROS,
    },
    "fast_large_sample_underestimates": {
        "active": {"recipe": "sample_underestimates", "n": N},
        "anchor": sv.ZEROS,
    },
    "select_large_index_zero": {
        "active": {
            **sv.DENSE,
            "set": {"indices": [0, N - 1], "bits": ev.f32_bits(np.array([131073.0, -131072.0]))},
        },
        "anchor": sv.ZEROS,
    },
    "select_large_nothing_to_send": {"active": sv.DENSE, "anchor": sv.DENSE},
}


def _spread(count: int, lo: float, hi: float) -> NDArray[np.float32]:
    """``count`` distinct magnitudes from ``lo`` up to below ``hi``, in steps of a power of two
    (exact in f32), with alternating signs."""
    step = 2.0 ** np.floor(np.log2((hi - lo) / count))
    j = np.arange(count, dtype=np.float64)
    return ((lo + j * step) * np.where(j % 2 == 0, 1.0, -1.0)).astype(np.float32)


def _tiny_everywhere() -> NDArray[np.float32]:
    """Every delta a distinct non-zero magnitude below 2^-7: candidates, never near a threshold."""
    i = np.arange(N, dtype=np.float64)
    return ((i + 1) * 2.0**-24 * np.where(i % 2 == 0, 1.0, -1.0)).astype(np.float32)


def _overestimates() -> NDArray[np.float32]:
    d = _tiny_everywhere()
    sampled = 4 * np.arange(N // 4, dtype=np.int64)
    unsampled = np.setdiff1d(np.arange(N, dtype=np.int64), sampled)
    d[sampled[7::16][:2000]] = _spread(2000, 2.0, 3.0)
    d[unsampled[5::48][:1000]] = _spread(1000, 4.0, 5.0)
    return d


def _underestimates() -> NDArray[np.float32]:
    d = _tiny_everywhere()
    sampled = 4 * np.arange(N // 4, dtype=np.int64)
    unsampled = np.setdiff1d(np.arange(N, dtype=np.int64), sampled)
    d[sampled[3::40][:800]] = _spread(800, 1.0, 1.5)
    pos = unsampled[1::8][:12000]  # ascending: the magnitude grows with the index
    d[pos] = np.abs(_spread(12000, 2.0, 3.0)) * np.where(np.arange(12000) % 3 == 0, -1, 1)
    return d


def _fast_cases() -> list[ev.GenCase]:
    zero = np.zeros(N, dtype=np.float32)
    base = ev.generate_cases()[0]  # "basic": N = 24
    assert base.name == "basic"
    return [
        ev.GenCase(
            "fast_basic",
            "fast mode (DF-GEN-7) on the 'basic' case (N = 24, k = 6): below every sample path, "
            "any set within the bounds passes; an implementation whose fast mode is the reference "
            "selection sends the 6 largest.",
            FAST_REQ,
            base.active,
            base.anchor,
            base.config,
        ),
        ev.GenCase(
            "fast_large_dense",
            "fast mode, N = 2^17, k = 4000, every delta non-zero (the integers 1 .. 131071 in the "
            "order i * 7919 mod 131071): the ordinary case, where a sampled threshold keeps a set "
            "within the bounds.",
            FAST_REQ,
            sv._dense_active(),
            zero,
            SyncConfig.v1_0(ratio=FAST_RATIO),
            manifest=sv.LARGE_MANIFEST,
        ),
        ev.GenCase(
            "fast_large_sample_overestimates",
            "fast mode, N = 2^17, k = 4000: 2000 deltas in [2, 3) at multiples of 4 (where a "
            "sample of every 4th value looks), 1000 in [4, 5) elsewhere, the rest below 2^-7. A "
            "threshold aimed from that sample keeps 1650 to 1750 values, fewer than ceil(k/2) = "
            "2000: DF-GEN-7 (b) needs a set of at least 2000.",
            FAST_REQ,
            _overestimates(),
            zero,
            SyncConfig.v1_0(ratio=FAST_RATIO),
            manifest=sv.LARGE_MANIFEST,
        ),
        ev.GenCase(
            "fast_large_sample_underestimates",
            "fast mode, N = 2^17, k = 4000: 800 deltas in [1, 1.5) at multiples of 4, 12000 in "
            "[2, 3) elsewhere with the magnitude growing with the index, the rest below 2^-7. A "
            "sampled threshold keeps more than 2k values; keeping the first k of them by index "
            "sends values below T, the 2k-th largest (DF-GEN-7 (d)).",
            FAST_REQ,
            _underestimates(),
            zero,
            SyncConfig.v1_0(ratio=FAST_RATIO),
            manifest=sv.LARGE_MANIFEST,
        ),
    ]


def _exact_cases() -> list[ev.GenCase]:
    zero = np.zeros(N, dtype=np.float32)
    ends = sv._dense_active()
    ends[0] = np.float32(131073.0)
    ends[N - 1] = np.float32(-131072.0)
    same = sv._dense_active()
    return [
        ev.GenCase(
            "select_large_index_zero",
            "N = 2^17, ratio 0.05 (k = 6554): select_large_dense with the largest magnitudes at "
            "index 0 (131073) and at index N - 1 (-131072): both are selected. A sampled path "
            "whose pass over the store skips its first or last value fails.",
            sv.REQ,
            ends,
            zero,
            SyncConfig.v1_0(ratio=0.05),
            manifest=sv.LARGE_MANIFEST,
        ),
        ev.GenCase(
            "select_large_nothing_to_send",
            "N = 2^17, ratio 0.05 (k = 6554), active equal to a non-zero anchor: no candidate, so "
            "no entry and no seq (DF-GEN-8), and nothing changes. A sample of zeros must not lead "
            "to an entry of a stray index.",
            [*sv.REQ, "DF-GEN-8"],
            same,
            same.copy(),
            SyncConfig.v1_0(ratio=0.05),
            manifest=sv.LARGE_MANIFEST,
        ),
    ]


def _write_fast(vectors_dir: Path, case: ev.GenCase, recipes: bool = True) -> dict[str, Any]:
    """A fast vector: the reference engine's fast generation is judged by the runner's own check
    while the vector is written, and so is the reference selection (both satisfy DF-GEN-7). One of
    N = 2^17 is written without indentation, its inputs as recipes (``recipes`` false: lists)."""
    m: Manifest = case.manifest
    k = case.config.num_selected(m.num_params)
    with np.errstate(invalid="ignore"):
        d = (case.active - case.anchor).astype(np.float32)
    bounds = fast_bounds(d, k)
    per = ev.max_values_per_entry(case.config.max_packet_size)
    assert case.config.encoding.name == "F32" and case.config.average_over == 1, case.name
    eng = Engine(m, case.config, ev.NODE, ev.NODE_INC, anchor=case.anchor)
    eng.next_seq = case.seq_start
    entries = eng.generate(case.active.copy(), fast=True)
    next_seq = case.seq_start + (1 if bounds["candidates"] else 0)
    assert len(entries) == (1 if bounds["candidates"] else 0), case.name  # one entry fits
    vector: dict[str, Any] = {
        "description": case.description,
        "requirements": sorted(set(case.requirements)),
        "manifest": m.to_json(),
        "config": ev._config_json(case.config),
        "node": {"id": ev.hex16(ev.NODE), "incarnation": ev.hex16(ev.NODE_INC)},
        "seq_start": case.seq_start,
        "fast": True,
        "k": k,
        "active": ev.floats(case.active),
        "active_bits": ev.f32_bits(case.active),
        "anchor": ev.floats(case.anchor),
        "anchor_bits": ev.f32_bits(case.anchor),
        "expected": {"fast": bounds, "max_entry_values": per, "next_seq": next_seq},
    }
    for fast in (True, False):  # the reference engine's fast and exact sets both pass
        e = Engine(m, case.config, ev.NODE, ev.NODE_INC, anchor=case.anchor)
        e.next_seq = case.seq_start
        made = e.generate(case.active.copy(), fast=fast)
        result = {
            "entries": [ev.entry_json(x) for x in made],
            "next_seq": e.next_seq,
            "anchor_bits": ev.f32_bits(e.anchor),
            "active_bits": ev.f32_bits(case.active),
        }
        problem = check_engine_result("generate", vector, vector["expected"], result)
        assert problem is None, (case.name, fast, problem)
    rel = f"generate/{case.name}"
    path = vectors_dir / f"{rel}.json"
    assert not path.exists(), case.name
    path.parent.mkdir(parents=True, exist_ok=True)
    if m.num_params <= 1000:
        path.write_text(json.dumps(vector, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    elif recipes:
        vr.write_vector(path, vector, RECIPES[case.name])
    else:
        path.write_text(vr.dumps(vector), encoding="utf-8")
    return {
        "id": f"generate.{case.name}",
        "kind": "generate",
        "path": rel,
        "fast": True,
        "requirements": sorted(set(case.requirements)),
        "expect": {
            "entries": next_seq - case.seq_start,
            "values": f"{bounds['min_selected']}..{k}",
        },
        "features": ["generate.fast"],
    }


def build(vectors_dir: Path, recipes: bool = True) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir``; return their index rows. ``recipes``
    false: the N = 2^17 vectors in their full form, every array a list."""
    rows = [_write_fast(vectors_dir, case, recipes) for case in _fast_cases()]
    return rows + [
        sv.write_compact(vectors_dir, c, RECIPES[c.name], recipes) for c in _exact_cases()
    ]
