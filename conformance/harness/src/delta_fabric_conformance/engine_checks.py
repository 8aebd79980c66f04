"""Judging ``generate`` and ``receive`` results against a vector's ``expected`` member
(``conformance/vectors/README.md``, "Engine vectors")."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from delta_fabric_conformance.compare import diff_json

__all__ = ["check_engine_result", "counters_with_zeros"]


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
    ``exact_split: false`` checks the split's invariants instead of the entries themselves.
    """
    if not expected:
        return f"{kind} vector has no expected member"
    exp = dict(expected)
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
