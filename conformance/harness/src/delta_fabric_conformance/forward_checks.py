"""Judging ``forward`` results (driver protocol section 5.9) against a forward vector's float64
reference, within the vector's ``tolerance``."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["check_forward_result"]

F32_EPS = 2.0**-23


def _f32_b64(s: Any, what: str) -> NDArray[np.float64]:
    raw = base64.b64decode(str(s), validate=True)
    if len(raw) % 4:
        raise ValueError(f"{what}: {len(raw)} bytes is not a whole number of f32")
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)


def _numbers(x: Any, what: str) -> NDArray[np.float64]:
    a = np.asarray(x, dtype=np.float64)
    if not np.isfinite(a).all():
        raise ValueError(f"{what}: not finite")
    return a


def _within(
    got: NDArray[np.float64], ref: NDArray[np.float64], rtol: float, atol: float = 0.0
) -> tuple[bool, float, float]:
    """``max |got - ref| <= rtol * max |ref| + atol``; also the error and the bound."""
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    bound = rtol * (float(np.max(np.abs(ref))) if ref.size else 0.0) + atol
    return err <= bound, err, bound


def check_forward_result(vector: Mapping[str, Any], result: Mapping[str, Any]) -> str | None:
    """The first problem of a ``forward`` result (None when every member is within tolerance)."""
    exp = vector["expected"]
    tol = vector["tolerance"]
    rtol = float(tol["rtol"])
    n = int(vector["count"])
    try:
        for key in ("logits_eval", "logits_train"):
            ref = np.asarray(exp[key], dtype=np.float64)
            got = _numbers(result[key], key)
            if got.shape != ref.shape:
                return f"{key}: shape {list(got.shape)}, expected {[n, 10]}"
            ok, err, bound = _within(got, ref, rtol)
            if not ok:
                return f"{key}: max error {err:.3g} > {bound:.3g} (layout or BatchNorm mistake?)"
        loss = float(result["loss"])
        if not math.isfinite(loss) or abs(loss - float(exp["loss"])) > rtol * abs(exp["loss"]):
            return f"loss {loss!r}, expected {exp['loss']!r} (rtol {rtol})"
        w0 = _f32_b64(vector["weights_b64"], "weights_b64")
        w1 = _f32_b64(result["weights_b64"], "result weights_b64")
    except (KeyError, TypeError, ValueError) as exc:
        return f"forward result unreadable: {type(exc).__name__}: {exc}"
    if w1.size != w0.size:
        return f"weights_b64: {w1.size} values, expected {w0.size}"
    update = w1 - w0
    ref_update = _f32_b64(exp["update_b64"], "update_b64")
    biased = _f32_b64(exp["running_var_update_biased_b64"], "running_var_update_biased_b64")
    ulps = float(tol["update_atol_ulps"])
    offset = 0
    for t in vector["manifest"]["tensors"]:
        size = math.prod(int(d) for d in t["shape"])
        sl = slice(offset, offset + size)
        offset += size
        atol = ulps * F32_EPS * float(np.max(np.abs(w0[sl])))
        ok, err, bound = _within(update[sl], ref_update[sl], rtol, atol)
        if not ok and t["name"] == "bn1.running_var":
            # the biased running variance is a tolerated training difference (section 5.6, bn1)
            ok, err, bound = _within(update[sl], biased, rtol, atol)
        if not ok:
            return (
                f"update of {t['name']}: max error {err:.3g} > {bound:.3g} "
                "(layout, gradient or BatchNorm mistake?)"
            )
    return None
