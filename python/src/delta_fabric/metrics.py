"""Per-node counters written as JSON lines at an interval, from the training loop (no thread).

`Fabric` owns one `MetricsWriter` when it is given ``metrics=PATH`` (or ``DELTA_FABRIC_METRICS`` with
`Fabric.from_env`). `Fabric.step` asks `MetricsWriter.due` (one clock read) and, every ``interval``
seconds, appends one line: ``{"time": <unix seconds>, "event": "step", ...Fabric.stats()}``. A line with
``"event": "close"`` is written when the fabric closes, so even a short run leaves its final counters.
The file is opened, appended to and closed for each line (several nodes may share one file: each line is
written with a single ``write`` call, which POSIX appends atomically for regular files).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["MetricsWriter"]

log = logging.getLogger("delta_fabric.metrics")


class MetricsWriter:
    """Appends counter snapshots to ``path`` as JSON lines, at most one per ``interval`` seconds
    (except the final one). The first line is written at the first `due` check."""

    def __init__(self, path: str | Path, interval: float = 10.0) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise TypeError(f"metrics interval must be a number, got {type(interval).__name__}")
        if not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"metrics interval must be > 0 seconds, got {interval}")
        self.path = Path(path)
        self.interval = float(interval)
        self._next = time.monotonic()
        self.lines = 0
        # fail early (at construction) when the file cannot be written
        with self.path.open("a", encoding="utf-8"):
            pass

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def write(self, stats: Mapping[str, Any], event: str = "step") -> None:
        """Append one line now and schedule the next one ``interval`` seconds later. An I/O error
        is logged (never raised into the training loop)."""
        self._next = time.monotonic() + self.interval
        line = json.dumps({"time": round(time.time(), 6), "event": event, **stats}) + "\n"
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
        except OSError as exc:
            log.warning("cannot write metrics to %s: %s", self.path, exc)
            return
        self.lines += 1
