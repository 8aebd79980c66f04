"""Snapshot vectors (``conformance/vectors/snapshot/``): ``SnapshotChunk`` decoding and reassembly
(spec section 9.5: DF-ZEN-11, DF-ZEN-12, DF-ZEN-40, DF-ZEN-41). Called by ``make_vectors.py``.

* ``snapshot/decode/<case>.{dfs,json}``: one chunk, checked on its own (the context-free rows of
  DF-ZEN-40); ``expected.outcome`` is ``"ok"`` (with the decoded ``chunk``) or the reason.
* ``snapshot/assemble/<case>/case.json`` and ``c0.dfs``, ``c1.dfs``, ...: the replies a joiner receives,
  in arrival order, with the chunk index each one answers (``indices``); ``expected.outcome`` is
  ``"ok"`` (with the installed values) or the reason, and ``expected.at`` the position of the chunk that
  made the joiner discard the snapshot (``len(chunks)`` for the end checks).

Every case has exactly one fault. Every vector is checked against the reference
(:mod:`delta_fabric.snapshot`) while it is written, so a vector whose outcome is not the one it is named
after cannot be written silently. The snapshot of most cases is the example of spec section 9.5 (N = 12,
``chunk_size = 5``, digest ``e129e540...``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
from delta_fabric.manifest import Manifest
from delta_fabric.snapshot import SnapshotAssembler, SnapshotError, decode_chunk
from numpy.typing import NDArray

__all__ = ["build"]

MANIFEST = Manifest.from_named_shapes([("fc.bias", [2]), ("fc.weight", [2, 5])])  # N = 12
OTHER_MANIFEST = Manifest.from_named_shapes([("fc.bias", [2]), ("fc.weight", [5, 2])])
N = MANIFEST.num_params
CHUNK = 5
NODE = 0x000000000000000A
OTHER_NODE = 0x000000000000000B
INCARNATION = 0x00066169085C7000
SNAPSHOT_ID = 0x0000000000000001
U64_MAX = (1 << 64) - 1
#: The anchor of spec section 9.5's example (node A after section 5.9).
ANCHOR = np.array(
    [0, 0, 1, 0.5, 0.1, -0.2, 0.5, 0.25, 0.75, -1, -0.875, 0.25], dtype=np.float64
).astype(np.float32)
#: Values whose bits matter: -0.0, the smallest subnormal, the largest subnormal, the smallest normal,
#: the largest finite f32, and their negatives.
SPECIAL = np.array(
    [
        0x80000000,
        0x00000001,
        0x007FFFFF,
        0x00800000,
        0x7F7FFFFF,
        0x80000001,
        0xFF7FFFFF,
        0x00000000,
        0x3F800000,
        0x807FFFFF,
        0x3DCCCCCD,
        0xBF800000,
    ],
    dtype=np.uint32,
).view(np.float32)

REQ_FIELDS = "DF-ZEN-11"
REQ_VERIFY = "DF-ZEN-12"
REQ_CHECKS = "DF-ZEN-40"
REQ_ASSEMBLY = "DF-ZEN-41"
REQ_IDENTIFIER = "DF-VER-5"


def _digest(values: NDArray[np.float32]) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f4").tobytes()).digest()


@dataclass
class RawChunk:
    """A ``SnapshotChunk`` whose every field may be absent (None) or hold any value."""

    version_major: int | None = 1
    version_minor: int | None = 0
    node: int | None = NODE
    incarnation: int | None = INCARNATION
    fingerprint: bytes | None = MANIFEST.fingerprint
    snapshot_id: int | None = SNAPSHOT_ID
    total: int | None = N
    offset: int | None = 0
    digest: bytes | None = field(default_factory=lambda: _digest(ANCHOR))
    values: Sequence[float] | NDArray[np.float32] | None = None
    unknown_field: int | None = None  # a u32 in slot 10 (a field of a future minor version)


def build_chunk(c: RawChunk) -> bytes:
    b = flatbuffers.Builder(1024)
    b.ForceDefaults(True)  # exactly the fields that are not None are written, zeros included
    vals = (
        b.CreateNumpyVector(np.asarray(c.values, dtype="<f4").view("<u4").view("<f4"))
        if c.values is not None
        else None
    )
    dig = b.CreateByteVector(c.digest) if c.digest is not None else None
    fp = b.CreateByteVector(c.fingerprint) if c.fingerprint is not None else None
    b.StartObject(11 if c.unknown_field is not None else 10)
    for slot16, x16 in ((0, c.version_major), (1, c.version_minor)):
        if x16 is not None:
            b.PrependUint16Slot(slot16, x16, 0)
    for slot, x in (
        (2, c.node),
        (3, c.incarnation),
        (5, c.snapshot_id),
        (6, c.total),
        (7, c.offset),
    ):
        if x is not None:
            b.PrependUint64Slot(slot, x, 0)
    for slot, off in ((4, fp), (8, dig), (9, vals)):
        if off is not None:
            b.PrependUOffsetTRelativeSlot(slot, off, 0)
    if c.unknown_field is not None:
        b.PrependUint32Slot(10, c.unknown_field, 0)
    b.Finish(b.EndObject(), file_identifier=b"DFS1")
    return bytes(b.Output())


def chunk_of(
    index: int,
    anchor: NDArray[np.float32] = ANCHOR,
    chunk_size: int = CHUNK,
    **overrides: Any,
) -> RawChunk:
    """Chunk ``index`` of ``anchor`` as a conforming server sends it (DF-ZEN-11), with overrides."""
    off = index * chunk_size
    base = RawChunk(
        total=int(anchor.size),
        offset=off,
        digest=_digest(anchor),
        values=anchor[off : off + chunk_size],
    )
    return replace(base, **overrides)


def _u32_at(buf: bytes, pos: int) -> int:
    return int.from_bytes(buf[pos : pos + 4], "little")


def _values_len_pos(buf: bytes) -> int:
    """Position of the length word of the ``values`` vector (slot 9) of a chunk built here."""
    table = _u32_at(buf, 0)
    vt = table - int.from_bytes(buf[table : table + 4], "little", signed=True)
    field_pos = table + int.from_bytes(buf[vt + 4 + 2 * 9 : vt + 6 + 2 * 9], "little")
    return field_pos + _u32_at(buf, field_pos)


def _patch_u32(buf: bytes, pos: int, value: int) -> bytes:
    return buf[:pos] + value.to_bytes(4, "little") + buf[pos + 4 :]


def _floats(a: NDArray[np.float32]) -> list[float]:
    out: list[float] = np.asarray(a, dtype=np.float32).astype(np.float64).tolist()
    return out


def _bits(a: NDArray[np.float32]) -> list[str]:
    return [f"{int(b):08x}" for b in np.ascontiguousarray(a, dtype="<f4").view("<u4")]


def _dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------------------
# Decode cases
# ------------------------------------------------------------------------------------------------------


@dataclass
class DecodeCase:
    name: str
    description: str
    data: bytes
    outcome: str  # "ok" or the DF-ZEN-40 reason
    requirements: list[str] = field(default_factory=list)


def decode_cases() -> list[DecodeCase]:
    ok = "ok"
    c1 = build_chunk(chunk_of(1))
    cases = [
        DecodeCase(
            "first_chunk",
            "Chunk 0 of the section 9.5 example (offset 0, 5 values).",
            build_chunk(chunk_of(0)),
            ok,
        ),
        DecodeCase(
            "middle_chunk", "Chunk 1 of the section 9.5 example (offset 5, 5 values).", c1, ok
        ),
        DecodeCase(
            "last_chunk",
            "Chunk 2 of the section 9.5 example: the short last chunk (offset 10, 2 values).",
            build_chunk(chunk_of(2)),
            ok,
        ),
        DecodeCase(
            "offset_absent",
            "Chunk 0 with the offset field omitted: it reads as the schema default 0.",
            build_chunk(chunk_of(0, offset=None)),
            ok,
        ),
        DecodeCase(
            "future_minor_unknown_field",
            "version_minor 7 and an unknown u32 field in slot "
            "10 (a later minor version): accepted, the field ignored.",
            build_chunk(chunk_of(1, version_minor=7, unknown_field=0xDEADBEEF)),
            ok,
        ),
        DecodeCase(
            "max_ids",
            "node, incarnation and snapshot_id all 2^64 - 1.",
            build_chunk(chunk_of(1, node=U64_MAX, incarnation=U64_MAX, snapshot_id=U64_MAX)),
            ok,
        ),
        DecodeCase(
            "special_values",
            "-0.0, subnormals, the smallest normal and the largest finite "
            "values: decoded bit for bit.",
            build_chunk(chunk_of(0, SPECIAL, N)),
            ok,
        ),
        # identifier and version
        DecodeCase("too_short", "Seven bytes.", c1[:7], "BAD_IDENTIFIER", [REQ_IDENTIFIER]),
        DecodeCase(
            "delta_packet_identifier",
            "A chunk whose identifier bytes are DFP1 (a delta packet's) instead of DFS1.",
            c1[:4] + b"DFP1" + c1[8:],
            "BAD_IDENTIFIER",
            [REQ_IDENTIFIER],
        ),
        DecodeCase(
            "version_major_2",
            "version_major 2.",
            build_chunk(chunk_of(1, version_major=2)),
            "UNSUPPORTED_VERSION",
        ),
        DecodeCase(
            "version_major_0",
            "version_major 0, written explicitly.",
            build_chunk(chunk_of(1, version_major=0)),
            "UNSUPPORTED_VERSION",
        ),
        DecodeCase(
            "version_major_absent",
            "version_major omitted: the schema default 0.",
            build_chunk(chunk_of(1, version_major=None)),
            "UNSUPPORTED_VERSION",
        ),
        # structure
        DecodeCase(
            "truncated", "The chunk cut after 40 bytes (identifier intact).", c1[:40], "MALFORMED"
        ),
        DecodeCase(
            "root_offset_out_of_range",
            "A root offset past the end of the buffer.",
            _patch_u32(c1, 0, 0x7FFFFFF0),
            "MALFORMED",
        ),
        DecodeCase(
            "values_length_past_end",
            "The values vector claims 2^28 elements.",
            _patch_u32(c1, _values_len_pos(c1), 1 << 28),
            "MALFORMED",
        ),
        # required fields and sizes
        DecodeCase(
            "fingerprint_absent",
            "The required fingerprint omitted.",
            build_chunk(chunk_of(1, fingerprint=None)),
            "MALFORMED",
        ),
        DecodeCase(
            "fingerprint_31_bytes",
            "A 31-byte fingerprint.",
            build_chunk(chunk_of(1, fingerprint=MANIFEST.fingerprint[:31])),
            "MALFORMED",
        ),
        DecodeCase(
            "digest_absent",
            "The required digest omitted.",
            build_chunk(chunk_of(1, digest=None)),
            "MALFORMED",
        ),
        DecodeCase(
            "digest_33_bytes",
            "A 33-byte digest.",
            build_chunk(chunk_of(1, digest=_digest(ANCHOR) + b"\x00")),
            "MALFORMED",
        ),
        DecodeCase(
            "values_absent",
            "The required values omitted.",
            build_chunk(chunk_of(1, values=None)),
            "MALFORMED",
        ),
        DecodeCase(
            "values_empty",
            "An empty values vector.",
            build_chunk(chunk_of(1, values=[])),
            "MALFORMED",
        ),
        # zero fields
        DecodeCase("node_zero", "node 0.", build_chunk(chunk_of(1, node=0)), "MALFORMED"),
        DecodeCase(
            "incarnation_zero",
            "incarnation 0.",
            build_chunk(chunk_of(1, incarnation=0)),
            "MALFORMED",
        ),
        DecodeCase(
            "snapshot_id_zero",
            "snapshot_id 0.",
            build_chunk(chunk_of(1, snapshot_id=0)),
            "MALFORMED",
        ),
        DecodeCase(
            "total_absent",
            "total omitted: the schema default 0.",
            build_chunk(chunk_of(1, total=None)),
            "MALFORMED",
        ),
        # ranges
        DecodeCase(
            "offset_equals_total",
            "offset 12 = total with one value.",
            build_chunk(chunk_of(1, offset=12, values=[0.5])),
            "MALFORMED",
        ),
        DecodeCase(
            "values_past_total",
            "offset 10 with 3 values in a snapshot of 12 (one past).",
            build_chunk(chunk_of(2, values=[-0.875, 0.25, 1.0])),
            "MALFORMED",
        ),
        DecodeCase(
            "offset_wraps",
            "offset 2^64 - 1 with 2 values: offset + length wraps around "
            "64 bits to 1, below total.",
            build_chunk(chunk_of(1, offset=U64_MAX, values=[0.5, 0.5])),
            "MALFORMED",
        ),
    ]
    return cases


# ------------------------------------------------------------------------------------------------------
# Assembly cases
# ------------------------------------------------------------------------------------------------------


@dataclass
class AssembleCase:
    name: str
    description: str
    replies: list[tuple[int, RawChunk | bytes]]  # (the index asked, the reply)
    outcome: str
    at: int | None
    chunk_size: int = CHUNK
    anchor: NDArray[np.float32] = field(default_factory=lambda: ANCHOR)


def _bad_values(index: int, delta: float = 1.0) -> RawChunk:
    """Chunk ``index`` with its first value changed by ``delta`` (header unchanged)."""
    c = chunk_of(index)
    assert c.values is not None
    v = np.array(c.values, dtype=np.float32)
    v[0] = np.float32(v[0] + delta)
    return replace(c, values=v)


def assemble_cases() -> list[AssembleCase]:
    def inorder(**over: Any) -> list[tuple[int, RawChunk | bytes]]:
        return [(i, chunk_of(i, **over)) for i in range(3)]

    other13 = np.concatenate([ANCHOR, np.array([0.5], dtype=np.float32)])
    neg0 = ANCHOR.copy()
    neg0[0] = np.float32(-0.0)
    cases = [
        AssembleCase(
            "in_order",
            "Chunks 0, 1, 2 of the section 9.5 example: installed; the digest is e129e540...",
            inorder(),
            "ok",
            None,
        ),
        AssembleCase(
            "out_of_order",
            "Chunks 2, 0, 1: arrival order does not matter.",
            [(2, chunk_of(2)), (0, chunk_of(0)), (1, chunk_of(1))],
            "ok",
            None,
        ),
        AssembleCase(
            "duplicate_identical",
            "Chunk 1 twice, identical: accepted.",
            [(0, chunk_of(0)), (1, chunk_of(1)), (1, chunk_of(1)), (2, chunk_of(2))],
            "ok",
            None,
        ),
        AssembleCase(
            "duplicate_replaces",
            "A corrupted chunk 1, then the right chunk 1: the later "
            "copy replaces the earlier one and the digest matches.",
            [(0, chunk_of(0)), (1, _bad_values(1)), (2, chunk_of(2)), (1, chunk_of(1))],
            "ok",
            None,
        ),
        AssembleCase(
            "duplicate_replaced_by_bad",
            "The right chunk 1, then a corrupted chunk 1 with "
            "the same header: the later copy replaces it, so the digest fails at the end.",
            [(0, chunk_of(0)), (1, chunk_of(1)), (1, _bad_values(1)), (2, chunk_of(2))],
            "DIGEST_MISMATCH",
            4,
        ),
        AssembleCase(
            "single_chunk",
            "chunk_size 12 = N: one chunk holds the whole snapshot.",
            [(0, chunk_of(0, chunk_size=12))],
            "ok",
            None,
            chunk_size=12,
        ),
        AssembleCase(
            "exact_multiple",
            "chunk_size 4 divides N = 12: three full chunks, no short last one.",
            [(i, chunk_of(i, chunk_size=4)) for i in range(3)],
            "ok",
            None,
            chunk_size=4,
        ),
        AssembleCase(
            "chunk_size_one",
            "chunk_size 1: twelve one-value chunks.",
            [(i, chunk_of(i, chunk_size=1)) for i in range(12)],
            "ok",
            None,
            chunk_size=1,
        ),
        AssembleCase(
            "special_values",
            "-0.0, subnormals and the largest finite values are "
            "installed bit for bit (and hashed as they are).",
            [(i, chunk_of(i, SPECIAL)) for i in range(3)],
            "ok",
            None,
            anchor=SPECIAL,
        ),
        # against the joiner
        AssembleCase(
            "fingerprint_mismatch",
            "Every chunk carries another manifest's fingerprint.",
            inorder(fingerprint=OTHER_MANIFEST.fingerprint),
            "FINGERPRINT_MISMATCH",
            0,
        ),
        AssembleCase(
            "fingerprint_mismatch_later",
            "Chunk 1 carries another fingerprint.",
            [
                (0, chunk_of(0)),
                (1, chunk_of(1, fingerprint=OTHER_MANIFEST.fingerprint)),
                (2, chunk_of(2)),
            ],
            "FINGERPRINT_MISMATCH",
            1,
        ),
        AssembleCase(
            "wrong_node",
            "The chunks come from node 000000000000000b, the joiner asked 000000000000000a.",
            inorder(node=OTHER_NODE),
            "INCONSISTENT",
            0,
        ),
        AssembleCase(
            "total_not_n",
            "A snapshot of 13 values for a joiner with N = 12.",
            [(i, chunk_of(i, other13)) for i in range(3)],
            "INCONSISTENT",
            0,
        ),
        # against the first chunk
        AssembleCase(
            "node_changed",
            "Chunk 2 from another node.",
            [(0, chunk_of(0)), (1, chunk_of(1)), (2, chunk_of(2, node=OTHER_NODE))],
            "INCONSISTENT",
            2,
        ),
        AssembleCase(
            "incarnation_changed",
            "Chunk 1 from another incarnation.",
            [(0, chunk_of(0)), (1, chunk_of(1, incarnation=INCARNATION + 1)), (2, chunk_of(2))],
            "INCONSISTENT",
            1,
        ),
        AssembleCase(
            "snapshot_id_changed",
            "Chunk 1 of another snapshot_id.",
            [(0, chunk_of(0)), (1, chunk_of(1, snapshot_id=2)), (2, chunk_of(2))],
            "INCONSISTENT",
            1,
        ),
        AssembleCase(
            "total_changed",
            "Chunk 1 says total 13 (its values still inside).",
            [(0, chunk_of(0)), (1, chunk_of(1, total=13)), (2, chunk_of(2))],
            "INCONSISTENT",
            1,
        ),
        AssembleCase(
            "digest_changed",
            "Chunk 1 carries another digest.",
            [(0, chunk_of(0)), (1, chunk_of(1, digest=_digest(neg0))), (2, chunk_of(2))],
            "INCONSISTENT",
            1,
        ),
        # offsets and lengths
        AssembleCase(
            "index_out_of_range",
            "A fourth reply for chunk index 3 (ceil(12 / 5) = 3 chunks): the bytes of chunk 2.",
            [*inorder(), (3, chunk_of(2))],
            "BAD_OFFSET",
            3,
        ),
        AssembleCase(
            "offset_mismatch",
            "The reply to chunk 1 has offset 6 (5 values, inside N).",
            [(0, chunk_of(0)), (1, chunk_of(1, offset=6, values=ANCHOR[6:11])), (2, chunk_of(2))],
            "BAD_OFFSET",
            1,
        ),
        AssembleCase(
            "answers_other_chunk",
            "The reply to chunk 1 is chunk 0.",
            [(0, chunk_of(0)), (1, chunk_of(0)), (2, chunk_of(2))],
            "BAD_OFFSET",
            1,
        ),
        AssembleCase(
            "short_chunk",
            "Chunk 1 with 4 values instead of 5.",
            [(0, chunk_of(0)), (1, chunk_of(1, values=ANCHOR[5:9])), (2, chunk_of(2))],
            "BAD_OFFSET",
            1,
        ),
        AssembleCase(
            "short_last_chunk",
            "Chunk 2 with 1 value instead of min(5, 12 - 10) = 2.",
            [(0, chunk_of(0)), (1, chunk_of(1)), (2, chunk_of(2, values=ANCHOR[10:11]))],
            "BAD_OFFSET",
            2,
        ),
        AssembleCase(
            "long_last_chunk",
            "Chunk 2 with 3 values, past total: refused by its own "
            "checks (MALFORMED) when it arrives.",
            [(0, chunk_of(0)), (1, chunk_of(1)), (2, chunk_of(2, values=[-0.875, 0.25, 1.0]))],
            "MALFORMED",
            2,
        ),
        AssembleCase(
            "undecodable_reply",
            "The reply to chunk 1 is 7 bytes.",
            [(0, chunk_of(0)), (1, build_chunk(chunk_of(1))[:7]), (2, chunk_of(2))],
            "BAD_IDENTIFIER",
            1,
        ),
        # values
        AssembleCase(
            "nan_value",
            "Chunk 1 holds a NaN.",
            [
                (0, chunk_of(0)),
                (1, chunk_of(1, values=[0.1, np.nan, 0.5, 0.25, 0.75])),
                (2, chunk_of(2)),
            ],
            "NON_FINITE",
            1,
        ),
        AssembleCase(
            "inf_value",
            "Chunk 2 holds +Inf.",
            [(0, chunk_of(0)), (1, chunk_of(1)), (2, chunk_of(2, values=[np.inf, 0.25]))],
            "NON_FINITE",
            2,
        ),
        AssembleCase(
            "neg_inf_value",
            "Chunk 0 holds -Inf.",
            [
                (0, chunk_of(0, values=[0, 0, -np.inf, 0.5, 0.1])),
                (1, chunk_of(1)),
                (2, chunk_of(2)),
            ],
            "NON_FINITE",
            0,
        ),
        # completeness and digest
        AssembleCase(
            "missing_chunk",
            "Chunks 0 and 2 only.",
            [(0, chunk_of(0)), (2, chunk_of(2))],
            "INCOMPLETE",
            2,
        ),
        AssembleCase("no_chunk", "No reply at all.", [], "INCOMPLETE", 0),
        AssembleCase(
            "digest_mismatch",
            "Chunk 1's first value is off by 1.0; headers consistent.",
            [(0, chunk_of(0)), (1, _bad_values(1)), (2, chunk_of(2))],
            "DIGEST_MISMATCH",
            3,
        ),
        AssembleCase(
            "digest_one_ulp",
            "Chunk 2's first value is one ulp away (bits ...01 more).",
            [
                (0, chunk_of(0)),
                (1, chunk_of(1)),
                (
                    2,
                    chunk_of(
                        2,
                        values=np.array([0xBF600001, 0x3E800000], dtype=np.uint32).view(np.float32),
                    ),
                ),
            ],
            "DIGEST_MISMATCH",
            3,
        ),
        AssembleCase(
            "digest_big_endian",
            "The digest is the SHA-256 of the values as big-endian "
            "f32 (every chunk): a joiner must hash little-endian bytes.",
            inorder(digest=hashlib.sha256(ANCHOR.astype(">f4").tobytes()).digest()),
            "DIGEST_MISMATCH",
            3,
        ),
        AssembleCase(
            "negative_zero_digest",
            "The digest was taken over -0.0 at index 0, the chunk "
            "carries +0.0: the bytes differ, so the digest fails.",
            inorder(digest=_digest(neg0)),
            "DIGEST_MISMATCH",
            3,
        ),
    ]
    return cases


# ------------------------------------------------------------------------------------------------------
# Writing, checked against the reference
# ------------------------------------------------------------------------------------------------------


def _reference_decode(data: bytes) -> tuple[str, Any]:
    try:
        return "ok", decode_chunk(data)
    except SnapshotError as exc:
        return exc.kind.value, None


def _reference_assemble(
    replies: list[tuple[int, bytes]], chunk_size: int
) -> tuple[str, int | None, NDArray[np.float32] | None]:
    asm = SnapshotAssembler(MANIFEST.fingerprint, chunk_size, expected_total=N, expected_node=NODE)
    at = 0
    try:
        for k, (index, data) in enumerate(replies):
            at = k  # the reply being checked
            asm.add(index, decode_chunk(data))
        at = len(replies)
        values, _ = asm.finish()
    except SnapshotError as exc:
        return exc.kind.value, at, None
    return "ok", None, values


def _requirements(*extra: str) -> list[str]:
    return sorted({REQ_FIELDS, REQ_VERIFY, REQ_CHECKS, *extra})


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write ``snapshot/`` under ``vectors_dir``; return its index rows."""
    root = vectors_dir / "snapshot"
    if root.exists():
        shutil.rmtree(root)
    rows: list[dict[str, Any]] = []
    for c in decode_cases():
        outcome, chunk = _reference_decode(c.data)
        if outcome != c.outcome:
            raise AssertionError(f"snapshot decode {c.name}: {outcome}, expected {c.outcome}")
        rel = f"snapshot/decode/{c.name}"
        reqs = _requirements(*c.requirements)
        expected: dict[str, Any] = {"outcome": outcome}
        if chunk is not None:
            expected["chunk"] = {
                "version_major": chunk.version_major,
                "version_minor": chunk.version_minor,
                "node": f"{chunk.node:016x}",
                "incarnation": f"{chunk.incarnation:016x}",
                "fingerprint": chunk.fingerprint.hex(),
                "snapshot_id": f"{chunk.snapshot_id:016x}",
                "total": chunk.total,
                "offset": chunk.offset,
                "digest": chunk.digest.hex(),
                "values": _floats(chunk.values),
                "values_bits": _bits(chunk.values),
            }
        (root / "decode").mkdir(parents=True, exist_ok=True)
        (vectors_dir / f"{rel}.dfs").write_bytes(c.data)
        _dump(
            vectors_dir / f"{rel}.json",
            {"description": c.description, "requirements": reqs, "expected": expected},
        )
        rows.append(
            {
                "id": f"snapshot.decode.{c.name}",
                "kind": "snapshot",
                "path": rel,
                "requirements": reqs,
                "expect": outcome,
            }
        )
    for a in assemble_cases():
        replies = [(i, r if isinstance(r, bytes) else build_chunk(r)) for i, r in a.replies]
        outcome, at, values = _reference_assemble(replies, a.chunk_size)
        if (outcome, at) != (a.outcome, a.at):
            raise AssertionError(
                f"snapshot assemble {a.name}: {outcome} at {at}, expected {a.outcome} at {a.at}"
            )
        rel = f"snapshot/assemble/{a.name}"
        folder = vectors_dir / rel
        folder.mkdir(parents=True)
        files = []
        for k, (_, data) in enumerate(replies):
            (folder / f"c{k}.dfs").write_bytes(data)
            files.append(f"c{k}.dfs")
        expected = {"outcome": outcome, "at": at}
        if values is not None:
            assert np.array_equal(values.view(np.uint32), a.anchor.view(np.uint32))
            expected.update(
                {
                    "node": f"{NODE:016x}",
                    "incarnation": f"{INCARNATION:016x}",
                    "snapshot_id": f"{SNAPSHOT_ID:016x}",
                    "total": N,
                    "digest": _digest(values).hex(),
                    "values": _floats(values),
                    "values_bits": _bits(values),
                }
            )
        reqs = _requirements(REQ_ASSEMBLY)
        _dump(
            folder / "case.json",
            {
                "description": a.description,
                "requirements": reqs,
                "manifest": {
                    "tensors": [
                        {"name": t.name, "dtype": "f32", "shape": list(t.shape)}
                        for t in MANIFEST.tensors
                    ]
                },
                "fingerprint": MANIFEST.fingerprint.hex(),
                "num_params": N,
                "node": f"{NODE:016x}",
                "chunk_size": a.chunk_size,
                "indices": [i for i, _ in replies],
                "chunks": files,
                "expected": expected,
            },
        )
        rows.append(
            {
                "id": f"snapshot.assemble.{a.name}",
                "kind": "snapshot",
                "path": rel,
                "requirements": reqs,
                "expect": outcome,
            }
        )
    return rows
