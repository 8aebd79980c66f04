"""Vectors that kill mutants of the Rust core found alive by the full campaigns of ``replay.rs``,
``engine.rs`` and ``wire.rs`` (issue 10 item 3, ``conformance/tools/mutation.py rust``; h55).

Each vector pins a behaviour that a plausible wrong implementation gets wrong (a subtraction read
as a division, a bound off by one); the mutant it kills is named in its description, in words.
Called by ``make_vectors.py`` (``build(vectors_dir) -> index rows``): receive vectors go to
``receive/`` (format of ``engine_vectors.py``). Every vector is checked against the reference
implementation while it is written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from delta_fabric.config import SyncConfig

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import engine_vectors as ev  # noqa: E402

__all__ = ["build"]


def receive_cases() -> list[ev.RecvCase]:
    return [
        ev.RecvCase(
            "seq_jump_one_over_bound",
            "max_seq_jump = 5 and B's window at H = 10 (history: seq 10): seq 16 lies 16 - 10 = 6 "
            "above H, one more than the bound, so it is dropped as seq_jump (DF-RCV-52); seq 15, "
            "exactly 5 above H, is accepted. A receiver that compares seq / H (= 1) or any other "
            "function of seq and H than their difference with the bound accepts seq 16.",
            ["DF-RCV-52", "DF-PAR-50", "DF-RCV-3"],
            [
                ev.pkt(ev.ent(ev.B, ev.B_INC, 16, 0, [3], [0.5])),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 15, 0, [4], [0.25]), sender=ev.C),
            ],
            config=SyncConfig(max_seq_jump=5),
            history=[(ev.B, ev.B_INC, 10)],
        ),
    ]


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir`` (the folders of ``make_vectors.py`` and
    ``engine_vectors.py``, which write theirs first); return their index rows."""
    rows: list[dict[str, Any]] = []
    for c in receive_cases():
        if (vectors_dir / "receive" / c.name).exists():
            raise AssertionError(f"receive/{c.name}: a vector of that name exists already")
        rows.append(ev._write_receive(vectors_dir, c))
    return rows


if __name__ == "__main__":
    print("\n".join(c.name for c in receive_cases()))
