"""Fault: the snapshot server reads DF-ZEN-5's bound ``4 * c + 1024 <= max_packet_size`` as strict
(``<``): at equality it sends the error reply instead of the chunk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class SnapshotServeStrictBound(Driver):
    name = "snapshot_serve_strict_bound"

    def snapshot_serve(self, req: Mapping[str, Any]) -> dict[str, Any]:
        vector = {**req["vector"], "max_packet_size": int(req["vector"]["max_packet_size"]) - 1}
        return super().snapshot_serve({**req, "vector": vector})


if __name__ == "__main__":
    raise SystemExit(main(SnapshotServeStrictBound()))
