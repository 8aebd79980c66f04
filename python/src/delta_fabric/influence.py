"""Bounded influence (OPTIONAL, per node; proposal spec/proposals/bounded-influence.md).

A receiver bounds what one entry of one origin moves in one step: after damping (DF-RCV-5), an
entry whose L2 norm exceeds ``factor`` times the running scale is scaled down to that bound, and
counted. The running scale is the median L2 norm of the receiver's own last ``window`` generated
entries: its own deltas are the one reference no peer can inflate (with three nodes, a median over the
entries received would be half the misbehaving member's). Until ``warmup`` own entries exist nothing is
clipped. The same clipped values are relayed.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from numpy.typing import NDArray

__all__ = ["InfluenceBound"]


class InfluenceBound:
    """See the module docstring. ``entries_seen`` / ``entries_clipped`` count the entries."""

    def __init__(self, factor: float = 4.0, *, window: int = 64, warmup: int = 1) -> None:
        if not (isinstance(factor, (int, float)) and np.isfinite(factor) and factor >= 1.0):
            raise ValueError(f"factor must be a finite number >= 1, got {factor!r}")
        if window < 1 or not 1 <= warmup <= window:
            raise ValueError("window must be >= 1 and warmup in [1, window]")
        self.factor = float(factor)
        self.warmup = warmup
        self._norms: deque[float] = deque(maxlen=window)
        self.entries_seen = 0
        self.entries_clipped = 0

    @property
    def scale(self) -> float | None:
        """The running scale (median of the window), None during the warm-up."""
        if len(self._norms) < self.warmup:
            return None
        return float(np.median(np.fromiter(self._norms, dtype=np.float64)))

    @staticmethod
    def _norm(values: NDArray[np.float32]) -> float:
        return float(np.sqrt(np.sum(np.square(values, dtype=np.float64))))

    def note_own(self, values: NDArray[np.float32]) -> None:
        """An entry this node generated (its values): feeds the running scale."""
        norm = self._norm(values)
        if np.isfinite(norm):
            self._norms.append(norm)

    def clip(self, origin: int, values: NDArray[np.float32]) -> NDArray[np.float32]:
        """A received entry's damped values, scaled down when above the bound (a new array then)."""
        self.entries_seen += 1
        norm = self._norm(values)
        if not np.isfinite(norm):
            return values  # DF-RCV-50 refuses what would be non-finite
        scale = self.scale
        if scale is not None and norm > self.factor * scale > 0.0:
            bound = self.factor * scale
            self.entries_clipped += 1
            out: NDArray[np.float32] = np.multiply(
                values, np.float32(bound / norm), dtype=np.float32
            )
            return out
        return values

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "entries_seen": self.entries_seen,
            "entries_clipped": self.entries_clipped,
            "scale": self.scale,
        }
