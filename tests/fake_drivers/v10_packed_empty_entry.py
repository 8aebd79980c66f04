"""Fault: a 1.0 driver that reports a ``PACKED`` packet as ``EMPTY_ENTRY`` (what DF-VER-114 said before
its erratum); a 1.0 receiver reads empty ``indices`` and non-empty values: ``LENGTH_MISMATCH``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import main
from _levels import Spec10


class V10PackedEmptyEntry(Spec10):
    name = "v10_packed_empty_entry"

    def refuse_packet(
        self, buf: bytes, code: str | None, packet: Mapping[str, Any] | None = None
    ) -> str | None:
        refused = super().refuse_packet(buf, code, packet)
        return "EMPTY_ENTRY" if refused == "LENGTH_MISMATCH" else refused


if __name__ == "__main__":
    raise SystemExit(main(V10PackedEmptyEntry()))
