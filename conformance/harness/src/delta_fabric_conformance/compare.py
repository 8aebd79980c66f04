"""Comparison of JSON results with the suite's float rules: f32 values compare as binary32 bit patterns
(``-0.0 != 0.0``, every NaN spelled ``"nan"``), integers exactly, ``*_bits`` strings exactly."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["diff_json", "f32_bits"]


def f32_bits(x: float) -> int:
    """The binary32 pattern of ``x`` rounded to nearest (what a JSON number means for an f32 value)."""
    try:
        return int(struct.unpack("<I", struct.pack("<f", x))[0])
    except OverflowError:  # finite binary64 beyond the f32 range rounds to infinity
        return 0x7F800000 if x > 0 else 0xFF800000


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _show(x: Any) -> str:
    s = repr(x)
    return s if len(s) <= 80 else s[:77] + "..."


def _same_scalars(expected: list[Any], actual: list[Any]) -> bool:
    """A fast path for long arrays (the N = 2^17 vectors): True only when every item matches by the
    rules of `diff_json` (strings and ints exactly, floats by binary32 pattern); False means "look item
    by item", which also finds the first difference."""
    if len(expected) != len(actual):
        return False
    te, ta = {type(x) for x in expected}, {type(x) for x in actual}
    if (te == ta == {str}) or (te == ta == {int}):
        return expected == actual
    if te == {float} and ta <= {int, float}:
        n = len(expected)
        try:
            return struct.pack(f"<{n}f", *expected) == struct.pack(f"<{n}f", *actual)
        except (OverflowError, struct.error):  # beyond the f32 range: the item rules decide
            return False
    return False


def diff_json(expected: Any, actual: Any, path: str = "", *, subset: bool = False) -> str | None:
    """The first difference between ``expected`` and ``actual`` (None when equal).

    Objects must have the same keys (``subset``: every expected key, extra actual keys ignored, at every
    depth). A float in ``expected`` matches any number of ``actual`` with the same binary32 pattern; an
    int in ``expected`` matches only the same int.
    """
    where = path or "/"
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return f"{where}: expected an object, got {_show(actual)}"
        missing = [k for k in expected if k not in actual]
        if missing:
            return f"{where}: missing {missing}"
        if not subset:
            extra = [k for k in actual if k not in expected]
            if extra:
                return f"{where}: unexpected members {extra}"
        for k in expected:
            d = diff_json(expected[k], actual[k], f"{path}/{k}", subset=subset)
            if d is not None:
                return d
        return None
    if isinstance(expected, Sequence) and not isinstance(expected, str):
        if not isinstance(actual, Sequence) or isinstance(actual, str):
            return f"{where}: expected a list, got {_show(actual)}"
        if len(expected) != len(actual):
            return f"{where}: expected {len(expected)} items, got {len(actual)}"
        if type(expected) is list and type(actual) is list and _same_scalars(expected, actual):
            return None
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            d = diff_json(e, a, f"{path}/{i}", subset=subset)
            if d is not None:
                return d
        return None
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        if type(actual) is not type(expected) or actual != expected:
            return f"{where}: expected {_show(expected)}, got {_show(actual)}"
        return None
    if isinstance(expected, int):
        if not isinstance(actual, int) or isinstance(actual, bool) or actual != expected:
            return f"{where}: expected {expected}, got {_show(actual)}"
        return None
    if isinstance(expected, float):
        if not _is_num(actual):
            return f"{where}: expected {expected!r}, got {_show(actual)}"
        eb, ab = f32_bits(expected), f32_bits(float(actual))
        if eb != ab:
            return f"{where}: expected {expected!r} (f32 {eb:08x}), got {actual!r} (f32 {ab:08x})"
        return None
    return f"{where}: cannot compare {_show(expected)}"
