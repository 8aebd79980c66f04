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

import compact_vectors as cv  # noqa: E402
import engine_vectors as ev  # noqa: E402
import numpy as np  # noqa: E402
import pinning_vectors as pv  # noqa: E402
import signed_vectors as sv  # noqa: E402
from delta_fabric.compact import FORM_DELTA, IndexEncoding, encode_indices  # noqa: E402
from delta_fabric.config import SyncConfig  # noqa: E402
from delta_fabric.encodings import ValueEncoding  # noqa: E402
from delta_fabric.manifest import Manifest  # noqa: E402
from delta_fabric.signing import Signing, public_key_of  # noqa: E402
from delta_fabric.wire import Entry, Packet  # noqa: E402

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


# ------------------------------------------------------------------------------------------------------
# compact (spec section 6.8)
# ------------------------------------------------------------------------------------------------------

#: Gaps of every varint length at both ends of it: 1 byte (1, 127), 2 (128, 2^14 - 1), 3 (2^14,
#: 2^21 - 1), 4 (2^21, 2^28 - 1) and 5 (2^28, 2^31): a delta-form entry of 40 indices, the first 7.
_GAPS = [
    7,
    1,
    127,
    128,
    (1 << 14) - 1,
    1 << 14,
    (1 << 21) - 1,
    1 << 21,
    (1 << 28) - 1,
    1 << 28,
    1 << 31,
    *[1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597, 2584, 4181],
    *[6765, 10946, 17711, 28657, 46368, 75025, 121393, 196418, 317811, 514229, 832040],
]
#: A model of 3 * 2^30 values: every index of the entry lies below it.
_BIG = Manifest.from_named_shapes({"w": (3 << 30,)})


def _leb128(x: int) -> bytes:
    """Unsigned LEB128, byte by byte (an independent check of the reference's encoder)."""
    out = bytearray()
    while True:
        low, x = x & 0x7F, x >> 7
        out.append(low | (0x80 if x else 0))
        if not x:
            return bytes(out)


def compact_cases() -> list[pv.DecodeCase]:
    idx = np.cumsum(np.array(_GAPS, dtype=np.uint64))
    assert idx.size == 40 and int(idx[-1]) < _BIG.num_params
    indices = idx.astype(np.uint32)
    packed = encode_indices(indices)
    # the delta form (a bitmap would take more than 2^31 / 8 bytes), checked against a plain LEB128
    assert packed == bytes([FORM_DELTA]) + b"".join(_leb128(g) for g in _GAPS)
    assert [len(_leb128(g)) for g in _GAPS[1:11]] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    values = np.arange(1, 41, dtype=np.float32) / np.float32(8.0)
    entry = Entry(0xB2, 1, 1, 0, indices, values)
    packet = Packet(
        0x5EED0000000000A1,
        0x00062A1B2C3D4E5F,
        _BIG.fingerprint,
        (entry,),
        index_encoding=IndexEncoding.PACKED,
    )
    case = pv._valid(
        "packed_delta_every_varint_length",
        "A PACKED packet of one F32 entry of 40 indices in the delta form (DF-PKT-110), its gaps at "
        "both ends of every varint length (DF-PKT-116): 1 and 127 (1 byte), 128 and 2^14 - 1 (2), "
        "2^14 and 2^21 - 1 (3), 2^21 and 2^28 - 1 (4), 2^28 and 2^31 (5 bytes), then 29 gaps of "
        "1 to 3 bytes; num_params 3 * 2^30. Decoders read its varints; an encoder's round "
        "trip must write each gap's varint with its exact length and continuation bits (more than "
        "32 varints: the reference's vectorised encoder). (Mutants: _varints' vectorised path, a "
        "continuation bit lost or a byte length off by one, and _VARINT_LIMITS.)",
        ["DF-PKT-110", "DF-PKT-116"],
        packet,
    )
    case.manifest = _BIG
    return [case]


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir`` (after the modules whose helpers it uses);
    return their index rows."""
    rows: list[dict[str, Any]] = []
    for d in compact_cases():
        row = pv._write_decode(vectors_dir, d)
        rows.append(cv._with_features(row, cv.features(None, int(IndexEncoding.PACKED))))
    for c in signing_cases():
        if (vectors_dir / "receive" / c.name).exists():
            raise AssertionError(f"receive/{c.name}: a vector of that name exists already")
        rows.append(sv._write_receive(vectors_dir, c))
    return rows


if __name__ == "__main__":
    print("\n".join(c.name for c in signing_cases()))
