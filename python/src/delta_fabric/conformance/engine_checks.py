"""Judging ``generate`` and ``receive`` results against a vector's ``expected`` member."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from delta_fabric.conformance.compare import diff_json

__all__ = ["check_engine_result"]


def check_engine_result(
    kind: str, vector: Mapping[str, Any], expected: Mapping[str, Any], result: Mapping[str, Any]
) -> str | None:
    """The first problem of ``result`` (None when it matches).

    Every member of ``expected`` must be present in ``result`` and equal (f32 values by bit pattern,
    ``*_bits`` strings exactly); members the driver adds are ignored.
    """
    if not expected:
        return f"{kind} vector has no expected member"
    d = diff_json(expected, result, subset=True)
    return None if d is None else f"{kind} result differs: {d}"
