"""Fault: flips the lowest bit of the first anchor value after generating (error feedback off by one ulp)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class GenerateBitflip(Driver):
    name = "generate_bitflip"

    def generate(self, req: Mapping[str, Any]) -> dict[str, Any]:
        out = super().generate(req)
        bits = list(out["anchor_bits"])
        bits[0] = f"{int(bits[0], 16) ^ 1:08x}"
        out["anchor_bits"] = bits
        return out


if __name__ == "__main__":
    raise SystemExit(main(GenerateBitflip()))
