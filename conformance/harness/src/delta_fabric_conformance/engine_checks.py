"""Judging ``generate`` and ``receive`` results against a vector's ``expected`` member
(``conformance/vectors/README.md``, "Engine vectors")."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric_conformance.compare import diff_json

__all__ = ["check_engine_result", "counters_with_zeros", "fast_bounds"]


def _split_problem(
    vector: Mapping[str, Any], expected: Mapping[str, Any], result: Mapping[str, Any]
) -> str | None:
    """``exact_split`` false: the split points are the implementation's; check the split's invariants."""
    want, got = expected["entries"], result["entries"]
    cat_idx = [i for e in want for i in e["indices"]]
    cat_bits = [b for e in want for b in e["values_bits"]]
    got_idx = [i for e in got for i in e["indices"]]
    got_bits = [b for e in got for b in e.get("values_bits", [])]
    if got_idx != cat_idx or got_bits != cat_bits:
        return "concatenated entries differ from the expected selection (indices or value bits)"
    if len(got) < 2:
        return f"{len(got)} entry made; the vector needs a split"
    start = int(vector.get("seq_start", 1))
    if [e["seq"] for e in got] != list(range(start, start + len(got))):
        return f"seqs {[e['seq'] for e in got]} are not consecutive from {start}"
    for a, b in itertools.pairwise(got):
        if not a["indices"] or not b["indices"] or a["indices"][-1] >= b["indices"][0]:
            return "entries' index ranges are not disjoint and ascending"
    for e in got:
        if (
            e["hops"] != 0
            or e["origin"] != want[0]["origin"]
            or e["incarnation"] != want[0]["incarnation"]
        ):
            return "entry origin, incarnation or hops wrong"
    per = expected.get("max_entry_values")
    if per is not None and any(len(e["indices"]) > int(per) for e in got):
        return (
            f"an entry holds more than {per} values, the most a packet of max_packet_size holds by "
            "the size estimate 288 + 8 n (DF-GEN-6)"
        )
    sizes = result.get("entry_packet_sizes")
    limit = int(vector.get("config", {}).get("max_packet_size", math.inf))
    if sizes is not None and any(int(s) > limit for s in sizes):
        return f"an entry alone encodes to more than max_packet_size {limit}: {sizes}"
    return None


def _f32_of_bits(bits: Sequence[str]) -> NDArray[np.float32]:
    return np.array([int(b, 16) for b in bits], dtype=np.uint32).view(np.float32)


def _bits_of(a: NDArray[np.float32]) -> list[str]:
    return [f"{int(b):08x}" for b in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)]


def _delta(vector: Mapping[str, Any]) -> NDArray[np.float32]:
    """``d = fl32(active - anchor)`` of a generate vector (DF-GEN-1), from its ``*_bits``."""
    active = _f32_of_bits(vector["active_bits"])
    anchor = _f32_of_bits(vector["anchor_bits"])
    with np.errstate(invalid="ignore", over="ignore"):
        d: NDArray[np.float32] = np.subtract(active, anchor, dtype=np.float32)
    return d


def fast_bounds(d: NDArray[np.float32], k: int) -> dict[str, Any]:
    """What DF-GEN-7 allows a fast selection of ``k`` from ``d``: ``candidates`` C (non-zero, not
    NaN), ``min_selected`` ``min(ceil(k/2), C)``, ``max_selected`` k and ``threshold_bits`` T, the
    ``2k``-th largest of ``|d|`` (zeros included, NaN counted as 0) when ``2k <= N``, else 0."""
    mag = np.abs(d)
    mag[np.isnan(mag)] = 0.0
    n = int(mag.shape[0])
    c = int(np.count_nonzero(mag))
    t = np.float32(np.partition(mag, n - 2 * k)[n - 2 * k]) if 2 * k <= n else np.float32(0.0)
    return {
        "k": k,
        "candidates": c,
        "min_selected": min(math.ceil(k / 2), c),
        "max_selected": k,
        "threshold_bits": _bits_of(np.array([t], dtype=np.float32))[0],
    }


def _fast_problem(
    vector: Mapping[str, Any], expected: Mapping[str, Any], result: Mapping[str, Any]
) -> str | None:
    """A ``fast: true`` generate vector (1.1, DF-GEN-7): the selection S is the implementation's;
    check (a)-(d) of DF-GEN-7 on S and DF-GEN-1/4/5/6/8 on what was made of it (``F32`` values, so a
    sent value is ``d[i]`` itself and the anchor becomes ``fl32(anchor + d)`` at S)."""
    d = _delta(vector)
    bounds = fast_bounds(d, int(vector["k"]))
    if dict(expected["fast"]) != bounds:
        return f"the vector's fast bounds {dict(expected['fast'])} are not its own ({bounds})"
    got = result.get("entries")
    if not isinstance(got, list):
        return "generate result has no entries"
    node = vector["node"]
    start = int(vector.get("seq_start", 1))
    if [e["seq"] for e in got] != list(range(start, start + len(got))):
        return f"seqs {[e['seq'] for e in got]} are not consecutive from {start}"
    for e in got:
        if e["hops"] != 0 or e["origin"] != node["id"] or e["incarnation"] != node["incarnation"]:
            return "entry origin, incarnation or hops wrong"
        if not e["indices"]:
            return "an empty entry (DF-GEN-8)"
        if len(e.get("values_bits", [])) != len(e["indices"]):
            return "an entry's values_bits and indices differ in length"
    for a, b in itertools.pairwise(got):
        if a["indices"][-1] >= b["indices"][0]:
            return "entries' index ranges are not disjoint and ascending"
    idx = [int(i) for e in got for i in e["indices"]]
    if any(b <= a for a, b in itertools.pairwise(idx)):
        return "an entry's indices are not strictly increasing"
    n = int(d.shape[0])
    if idx and not 0 <= idx[0] <= idx[-1] < n:
        return f"an index outside 0 .. {n - 1}"
    sel = np.array(idx, dtype=np.int64)
    mag = np.abs(d[sel])
    mag[np.isnan(mag)] = 0.0
    t = _f32_of_bits([bounds["threshold_bits"]])[0]
    if len(idx) > bounds["max_selected"]:
        return f"DF-GEN-7 (a): {len(idx)} values selected, more than k = {bounds['max_selected']}"
    if len(idx) < bounds["min_selected"]:
        return (
            f"DF-GEN-7 (b): {len(idx)} values selected, fewer than min(ceil(k/2), C) = "
            f"{bounds['min_selected']}"
        )
    if np.any(mag == 0):
        return f"DF-GEN-7 (c): index {idx[int(np.argmax(mag == 0))]} is not a candidate"
    if np.any(mag < t):
        i = idx[int(np.argmax(mag < t))]
        return (
            f"DF-GEN-7 (d): |d[{i}]| is below T, the 2k-th largest |d| ({bounds['threshold_bits']})"
        )
    got_bits = [b for e in got for b in e["values_bits"]]
    if got_bits != _bits_of(d[sel]):
        return "sent values are not d at the selected indices (F32, DF-GEN-4)"
    per = expected.get("max_entry_values")
    if per is not None and any(len(e["indices"]) > int(per) for e in got):
        return f"an entry holds more than {per} values (DF-GEN-6)"
    sizes = result.get("entry_packet_sizes")
    limit = int(vector.get("config", {}).get("max_packet_size", math.inf))
    if sizes is not None and any(int(s) > limit for s in sizes):
        return f"an entry alone encodes to more than max_packet_size {limit}: {sizes}"
    anchor = _f32_of_bits(vector["anchor_bits"]).copy()
    anchor[sel] = np.add(anchor[sel], d[sel], dtype=np.float32)
    if result.get("anchor_bits") != _bits_of(anchor):
        return (
            "anchor after generation is not anchor + sent values at the selected indices (DF-GEN-5)"
        )
    if "active_bits" in result and result["active_bits"] != list(vector["active_bits"]):
        return "active changed by a generation with average_over 1"
    return None


def counters_with_zeros(
    expected: Mapping[str, Any], counters: Mapping[str, Any]
) -> Mapping[str, Any]:
    """``counters`` with every code of ``expected["errors"]`` and reason of ``expected["drops"]`` that
    it omits read as 0 (driver protocol 5.5: a zero-valued code or reason MAY be omitted, so that a
    driver written before a code was added still reports the others)."""
    out = dict(counters)
    for group in ("errors", "drops"):
        want, got = expected.get(group), counters.get(group)
        if isinstance(want, Mapping) and isinstance(got, Mapping):
            out[group] = {**{k: 0 for k in want}, **got}
    return out


def check_engine_result(
    kind: str, vector: Mapping[str, Any], expected: Mapping[str, Any], result: Mapping[str, Any]
) -> str | None:
    """The first problem of ``result`` (None when it matches).

    Every member of ``expected`` must be present in ``result`` and equal (f32 values by bit pattern,
    ``*_bits`` strings exactly); members the driver adds are ignored. A generate vector with
    ``exact_split: false`` checks the split's invariants instead of the entries themselves; one with
    ``expected.fast`` (1.1, ``fast: true``) checks DF-GEN-7's bounds on the implementation's own
    selection and what DF-GEN-4/5/6 make of it (its other members, ``next_seq``, are compared).
    """
    if not expected:
        return f"{kind} vector has no expected member"
    exp = dict(expected)
    if kind == "generate" and "fast" in exp:
        problem = _fast_problem(vector, exp, result)
        if problem is not None:
            return f"generate (fast): {problem}"
        for member in ("fast", "max_entry_values"):
            exp.pop(member, None)
    exact_split = bool(exp.pop("exact_split", True))
    if kind == "generate" and not exact_split:
        if "entries" not in result:
            return "generate result has no entries"
        problem = _split_problem(vector, exp, result)
        if problem is not None:
            return f"generate split: {problem}"
        exp.pop("entries")
    exp.pop("max_entry_values", None)
    if isinstance(exp.get("counters"), Mapping) and isinstance(result.get("counters"), Mapping):
        result = {**result, "counters": counters_with_zeros(exp["counters"], result["counters"])}
    d = diff_json(exp, result, subset=True)
    if d is None:
        d = _heard_problem(exp, result)
    return None if d is None else f"{kind} result differs: {d}"


def _heard_problem(expected: Mapping[str, Any], result: Mapping[str, Any]) -> str | None:
    """A relay packet that carries ``heard`` where the vector's has none (DF-RLY-61: into no other
    packet), which the subset comparison of members cannot see: packet JSON omits an absent
    ``heard`` (spec Appendix B.2)."""
    want, got = expected.get("relay"), result.get("relay")
    if not isinstance(want, list) or not isinstance(got, list):
        return None
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if isinstance(w, Mapping) and isinstance(g, Mapping) and "heard" not in w and "heard" in g:
            return f"/relay/{i}/heard: present, expected absent (no advertisement in this packet)"
    return None
