"""Fault: the joiner ignores a chunk index it has already accepted (keeps the first copy) instead of
checking the new reply and replacing the earlier copy (DF-ZEN-41)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _base import Driver, main


class SnapshotKeepFirst(Driver):
    name = "snapshot_keep_first"

    def snapshot_assemble(self, req: Mapping[str, Any]) -> dict[str, Any]:
        seen: set[int] = set()
        indices, chunks = [], []
        for i, c in zip(req["vector"]["indices"], req["chunks"], strict=True):
            if i not in seen:
                seen.add(i)
                indices.append(i)
                chunks.append(c)
        vector = {**req["vector"], "indices": indices}
        return super().snapshot_assemble({**req, "vector": vector, "chunks": chunks})


if __name__ == "__main__":
    raise SystemExit(main(SnapshotKeepFirst()))
