"""Fault: a fast mode (DF-GEN-7) that keeps the first k candidates by index, whatever their magnitude
(a sampled threshold that gave up and truncated). It satisfies (a) to (c) but not (d), the bound by T,
the 2k-th largest |d|; exact generation is the reference's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from _base import Driver, main


def _f32(bits: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.array([int(b, 16) for b in bits], dtype=np.uint32).view(np.float32)


class FastFirstKByIndex(Driver):
    name = "fast_first_k_by_index"

    def generate(self, req: Mapping[str, Any]) -> dict[str, Any]:
        vector = dict(req["vector"])
        if not vector.get("fast"):
            return super().generate(req)
        active, anchor = _f32(vector["active_bits"]), _f32(vector["anchor_bits"])
        with np.errstate(invalid="ignore"):
            d = active - anchor
        cand = np.flatnonzero((d != 0) & ~np.isnan(d))[: int(vector["k"])]
        # the reference selection of an active that differs from the anchor only there sends them all
        only = anchor.copy()
        only[cand] = active[cand]
        bits = [f"{int(b):08x}" for b in only.view(np.uint32)]
        out = super().generate({**req, "vector": {**vector, "active_bits": bits, "fast": False}})
        out["active_bits"] = list(vector["active_bits"])
        return out


if __name__ == "__main__":
    raise SystemExit(main(FastFirstKByIndex()))
