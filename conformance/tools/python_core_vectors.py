"""Vectors that kill survivors of the first mutation campaigns of the Python modules ``signing``,
``compact`` and ``snapshot`` (issue 10 item 3, ``conformance/tools/mutation.py python``; h59,
session 7).

Each vector pins a behaviour that a plausible wrong implementation gets wrong and that no earlier
vector showed; the mutant of the Python core it was written for is named in its description's last
sentence. Called by ``make_vectors.py`` (``build(vectors_dir) -> index rows``); receive vectors are
written through ``signed_vectors._write_receive`` / ``engine_vectors._write_receive``, which run the
Python engine and cross-check the aggregate independently.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import engine_vectors as ev  # noqa: E402
import signed_vectors as sv  # noqa: E402
from delta_fabric.config import SyncConfig  # noqa: E402
from delta_fabric.encodings import ValueEncoding  # noqa: E402
from delta_fabric.signing import Signing, public_key_of  # noqa: E402
from delta_fabric.wire import Entry  # noqa: E402

__all__ = ["build"]

U64_MAX = (1 << 64) - 1

# ------------------------------------------------------------------------------------------------------
# signing (spec section 13.1)
# ------------------------------------------------------------------------------------------------------

#: Node ids at both ends of the u64 range of DF-PKT-2 (non-zero): 1 and 2^64 - 1.
LOW, HIGH = 1, U64_MAX
LOW_INC, HIGH_INC = 0x0006_0000_0000_0400, 0x0006_0000_0000_0500


def _signed_by_itself(e: Entry) -> Entry:
    signer = Signing({}, sv.seed_of(e.origin), node_id=e.origin)
    return replace(e, signature=signer.sign(ev.FP, ValueEncoding.F32, e))


def signing_cases() -> list[sv.SignedCase]:
    keys = {**sv.KEYS, LOW: public_key_of(sv.seed_of(LOW)), HIGH: public_key_of(sv.seed_of(HIGH))}
    low = _signed_by_itself(ev.ent(LOW, LOW_INC, 1, 0, [2, 6], [0.5, -0.25]))
    high = _signed_by_itself(ev.ent(HIGH, HIGH_INC, 1, 1, [6, 11], [1.5, 0.75]))
    return [
        sv.SignedCase(
            "signed_extreme_node_ids",
            "alpha = 0.5. The pinned keys (DF-SEC-145) include node ids 1 and 2^64 - 1, the two "
            "ends of the non-zero u64 range (DF-PKT-2). Node 1 sends its own entry (hops 0) and "
            "node 2^64 - 1's entry relayed (hops 1), each signed by its origin: both accepted, "
            "applied damped once and twice (DF-RCV-140) and relayed with their signatures. A node "
            "that refuses a key for node id 1 or 2^64 - 1 (a range check off by one at either end, "
            "or ids read as signed 64-bit integers) cannot be configured with these keys, or "
            "rejects the entries as BAD_SIGNATURE (no pinned key). (Mutants: Signing's node id "
            "check `1 <= node` as `1 < node`, or its 1 as 2.)",
            [*sv.SEC, "DF-PKT-2", "DF-RCV-140", "DF-RLY-140"],
            [sv.pkt(low, high, sender=LOW)],
            config=SyncConfig(alpha=0.5),
            keys=keys,
        ),
    ]


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir`` (after the modules whose helpers it uses);
    return their index rows."""
    rows: list[dict[str, Any]] = []
    for c in signing_cases():
        if (vectors_dir / "receive" / c.name).exists():
            raise AssertionError(f"receive/{c.name}: a vector of that name exists already")
        rows.append(sv._write_receive(vectors_dir, c))
    return rows


if __name__ == "__main__":
    print("\n".join(c.name for c in signing_cases()))
