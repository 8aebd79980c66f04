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
import make_vectors as mv  # noqa: E402
import numpy as np  # noqa: E402
import pinning_vectors as pv  # noqa: E402
import rust_pinning_vectors as rpv  # noqa: E402
import signed_vectors as sv  # noqa: E402
import snapshot_vectors as snv  # noqa: E402
from delta_fabric.compact import FORM_DELTA, IndexEncoding, encode_indices  # noqa: E402
from delta_fabric.config import SyncConfig  # noqa: E402
from delta_fabric.encodings import ValueEncoding  # noqa: E402
from delta_fabric.errors import ErrorCode  # noqa: E402
from delta_fabric.manifest import Manifest  # noqa: E402
from delta_fabric.signing import Signing, public_key_of  # noqa: E402
from delta_fabric.wire import Entry, Packet, quantize_packet  # noqa: E402

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
            config=SyncConfig.v1_0(alpha=0.5),
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
    # 33 one-byte gaps (the vectorised encoder's all-one-byte path), then 33 with exactly one
    # two-byte gap (200)
    small = [3 + (7 * j) % 120 for j in range(33)]
    one_long = [*small[:16], 200, *small[17:]]
    entries = [Entry(0xB2, 1, 1, 0, indices, values)]
    for seq, gaps in ((2, small), (3, one_long)):
        ix = np.cumsum(np.array(gaps, dtype=np.uint64)).astype(np.uint32)
        enc = encode_indices(ix)
        assert enc == bytes([FORM_DELTA]) + b"".join(_leb128(g) for g in gaps), seq
        vals = np.arange(33, dtype=np.float32) / np.float32(4.0) - np.float32(4.0)
        entries.append(Entry(0xB2, 1, seq, 0, ix, vals))
    packet = Packet(
        0x5EED0000000000A1,
        0x00062A1B2C3D4E5F,
        _BIG.fingerprint,
        tuple(entries),
        index_encoding=IndexEncoding.PACKED,
    )
    case = pv._valid(
        "packed_delta_every_varint_length",
        "A PACKED packet of three F32 entries in the delta form (DF-PKT-110). The first has 40 "
        "indices, its gaps at "
        "both ends of every varint length (DF-PKT-116): 1 and 127 (1 byte), 128 and 2^14 - 1 (2), "
        "2^14 and 2^21 - 1 (3), 2^21 and 2^28 - 1 (4), 2^28 and 2^31 (5 bytes), then 29 gaps of "
        "1 to 3 bytes; the second 33 indices whose gaps all take one byte; the third 33 whose "
        "gaps take one byte but one (200, two bytes). num_params 3 * 2^30. Decoders read the "
        "varints; an encoder's round "
        "trip must write each gap's varint with its exact length and continuation bits (more than "
        "32 varints: the reference's vectorised encoder). (Mutants: _varints' vectorised path, a "
        "continuation bit lost, a byte length off by one, one longer varint "
        "taken for none, and _VARINT_LIMITS.)",
        ["DF-PKT-110", "DF-PKT-116"],
        packet,
    )
    case.manifest = _BIG
    return [case, _q8_bitmap_case(), _bitmap_past_u32_case()]


def _q8_bitmap_case() -> pv.DecodeCase:
    """A Q8 + PACKED packet whose values an encoder reproduces exactly (every value is q * scale with
    the scale of DF-PKT-111), so that it gets the encode round trip."""
    top = [1.0, -0.5, 0.25, 0.125, -1.0, 0.0625, 0.5, -0.25, 0.75, 0.375, -0.875]
    entries = (
        # the bitmap of section 6.8's example (01 08 0b ff): its last index is bit 7 of its last
        # byte; max |v| exactly 1.0: scale 2^-6 (127 * 2^-7 < 1), q = 64 * v
        Entry(
            0xB2,
            1,
            1,
            0,
            np.array([8, 9, 11, *range(16, 24)], np.uint32),
            np.array(top, np.float32),
        ),
        # one value: scale 2^-7, q = 64
        Entry(0xB2, 1, 2, 0, np.array([3], np.uint32), np.array([0.5], np.float32)),
        # max |v| in (63.5, 127]: scale exactly 1, q = v
        Entry(
            0xC3,
            1,
            1,
            0,
            np.array([0, 7, 100], np.uint32),
            np.array([100.0, -3.0, 64.0], np.float32),
        ),
    )
    assert encode_indices(entries[0].indices) == bytes([0x01, 0x08, 0x0B, 0xFF])
    packet = Packet(
        0x5EED0000000000A1,
        0x00062A1B2C3D4E5F,
        mv.VECTOR_MANIFEST.fingerprint,
        entries,
        ValueEncoding.Q8,
        index_encoding=IndexEncoding.PACKED,
    )
    assert quantize_packet(packet) == packet  # exact: the encoder reproduces every value
    return pv._valid(
        "q8_packed_exact_scales",
        "A Q8 + PACKED packet of three entries whose values are exact multiples of their scale "
        "(DF-PKT-111), so an encoder's round trip must reproduce them: the bitmap 01 08 0b ff of "
        "section 6.8's example (its last index is bit 7 of its last byte, so the bitmap has no "
        "trailing 0 byte, DF-PKT-116) with max |v| exactly 1.0 (scale 2^-6, as 127 * 2^-7 < 1); "
        "an entry of one value; an entry with max |v| = 100 (scale exactly 1). (Mutants: the "
        "bitmap one bit longer, a one-value entry or a scale of 1 encoded as all zeros, max |v| "
        "= 1.0 taken as the all-zero case.)",
        ["DF-PKT-110", "DF-PKT-111", "DF-PKT-116", "DF-PKT-115"],
        packet,
    )


def _bitmap_past_u32_case() -> pv.DecodeCase:
    """A bitmap whose third set bit is the index 2^32."""
    base = (1 << 32) - 9
    packed = bytes([0x01]) + _leb128(base) + bytes([0x03, 0x02])  # rel 0, 1 and 9
    data = cv.build_raw(
        cv.CP([cv.CE(origin=0xB2, packed=packed, values=[0.5, 0.25, 0.125])], encoding=0),
        mv.VECTOR_MANIFEST.fingerprint,
    )
    return pv.DecodeCase(
        "packed_bitmap_third_index_2_32",
        "A PACKED entry in the bitmap form: base 2^32 - 9 and bits 0, 1 and 9 set, so its third "
        "index is 2^32: MALFORMED (DF-PKT-116, every index below 2^32), even though its first two "
        "indices are valid. A decoder that checks another index than the last against 2^32 reads "
        "the third as 0 (u32 wrap-around) and answers UNSORTED_INDICES. (Mutants: unpack_indices "
        "checking rel[1] or rel[-2] instead of rel[-1].)",
        ["DF-PKT-110", "DF-PKT-116"],
        data,
        error=ErrorCode.MALFORMED,
    )


# ------------------------------------------------------------------------------------------------------
# snapshot (DFS1, spec section 9.5)
# ------------------------------------------------------------------------------------------------------


def snapshot_decode_cases() -> list[snv.DecodeCase]:
    one = np.array([0.5], dtype=np.float32)
    return [
        snv.DecodeCase(
            "eight_bytes",
            "Exactly 8 bytes: a root uoffset of 8 and the identifier DFS1, nothing else. The "
            "identifier is there (BAD_IDENTIFIER is for fewer than 8 bytes or another identifier, "
            "DF-ZEN-40), so the chunk is MALFORMED: its root table lies past the end. (Mutant: "
            "the length check `len < 8` as `len <= 8`, or 8 as 9.)",
            (8).to_bytes(4, "little") + b"DFS1",
            "MALFORMED",
        ),
        snv.DecodeCase(
            "one_value_snapshot",
            "The only chunk of a snapshot of one value: total 1, offset 0, one value 0.5, the "
            "digest of its 4 bytes. Valid: total must be non-zero, and 1 is. (Mutant: the check "
            "`total == 0` as `total == 1`.)",
            snv.build_chunk(snv.RawChunk(total=1, offset=0, values=one, digest=snv._digest(one))),
            "ok",
        ),
    ]


def _write_assemble_non_finite(vectors_dir: Path) -> dict[str, Any]:
    """Chunk 0 at chunk_size 1 of the section 9.5 snapshot with its only value +inf: NON_FINITE."""
    name = "every_value_non_finite"
    chunk = replace(snv.chunk_of(0, chunk_size=1), values=np.array([np.inf], dtype=np.float32))
    data = snv.build_chunk(chunk)
    outcome, at, values = snv._reference_assemble([(0, data)], 1)
    assert (outcome, at, values) == ("NON_FINITE", 0, None)
    rel = f"snapshot/assemble/{name}"
    folder = vectors_dir / rel
    if folder.exists():
        raise AssertionError(f"{rel}: a vector of that name exists already")
    folder.mkdir(parents=True)
    (folder / "c0.dfs").write_bytes(data)
    reqs = snv._requirements(snv.REQ_ASSEMBLY)
    snv._dump(
        folder / "case.json",
        {
            "description": "chunk_size 1: chunk 0 of the section 9.5 snapshot (header unchanged) "
            "with its only value +inf, so that no value of the chunk is finite: NON_FINITE at "
            "chunk 0 (DF-ZEN-12, DF-ZEN-41). A joiner that looks for the first finite value to "
            "name the bad one finds none and fails otherwise. (Mutant: the position of the bad "
            "value taken among the finite ones.)",
            "requirements": reqs,
            "manifest": {
                "tensors": [
                    {"name": t.name, "dtype": "f32", "shape": list(t.shape)}
                    for t in snv.MANIFEST.tensors
                ]
            },
            "fingerprint": snv.MANIFEST.fingerprint.hex(),
            "num_params": snv.N,
            "node": f"{snv.NODE:016x}",
            "chunk_size": 1,
            "indices": [0],
            "chunks": ["c0.dfs"],
            "expected": {"outcome": outcome, "at": at},
        },
    )
    return {
        "id": f"snapshot.assemble.{name}",
        "kind": "snapshot",
        "path": rel,
        "requirements": reqs,
        "expect": outcome,
    }


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir`` (after the modules whose helpers it uses);
    return their index rows."""
    rows: list[dict[str, Any]] = []
    for d in compact_cases():
        row = pv._write_decode(vectors_dir, d)
        q8 = int(ValueEncoding.Q8) if d.name.startswith("q8_") else None
        rows.append(cv._with_features(row, cv.features(q8, int(IndexEncoding.PACKED))))
    for sc in snapshot_decode_cases():
        if (vectors_dir / f"snapshot/decode/{sc.name}.json").exists():
            raise AssertionError(f"snapshot/decode/{sc.name}: a vector of that name exists already")
        rows.append(rpv._write_decode(vectors_dir, sc))
    rows.append(_write_assemble_non_finite(vectors_dir))
    for c in signing_cases():
        if (vectors_dir / "receive" / c.name).exists():
            raise AssertionError(f"receive/{c.name}: a vector of that name exists already")
        rows.append(sv._write_receive(vectors_dir, c))
    return rows


if __name__ == "__main__":
    print("\n".join(c.name for c in signing_cases()))
