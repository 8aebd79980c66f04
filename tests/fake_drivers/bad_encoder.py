"""Fault: its encoder writes every entry's hops one too high, so every other decoder reads a packet
different from the one it was asked to encode (its own decoder is correct)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class BadEncoder(Driver):
    name = "bad_encoder"

    def encode(self, req: Mapping[str, Any]) -> dict[str, Any]:
        pkt = dict(req["packet"])
        pkt["entries"] = [{**e, "hops": (int(e["hops"]) + 1) % 256} for e in pkt["entries"]]
        return super().encode({**req, "packet": pkt})


if __name__ == "__main__":
    raise SystemExit(main(BadEncoder()))
