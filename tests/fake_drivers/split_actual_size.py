"""Fault: the 1.0 misreading of DF-GEN-6: splits only when the entry's actual encoded size exceeds
max_packet_size, not its size estimate (DF-GEN-30). Passes every 1.0 vector; fails the boundary ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class SplitActualSize(Driver):
    name = "split_actual_size"

    def generate(self, req: Mapping[str, Any]) -> dict[str, Any]:
        vector = dict(req["vector"])
        limit = int(vector.get("config", {}).get("max_packet_size", 16777216))
        unsplit = {**vector, "config": {**vector.get("config", {}), "max_packet_size": 2**31 - 1}}
        out = super().generate({**req, "vector": unsplit})
        if len(out["entries"]) == 1 and out["entry_packet_sizes"][0] <= limit:
            return out  # the one entry "fits" by its actual size: not split
        return super().generate(req)


if __name__ == "__main__":
    raise SystemExit(main(SplitActualSize()))
