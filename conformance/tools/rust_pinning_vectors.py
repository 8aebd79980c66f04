"""Vectors from the df-core mutation campaign and the snapshot structure rule (added in 1.1).
Called by ``make_vectors.py``.

* ``snapshot/decode/struct_<case>.{dfs,json}``: ``SnapshotChunk`` buffers laid out by hand, byte by
  byte, so that exactly one verifier rule of spec section 6.7 (DF-PKT-20, DF-PKT-21) or the sharing
  rule (DF-SEC-20) is broken, or none is while the layout differs from what a builder writes. DF-ZEN-105
  applies these rules to snapshot chunks; before it, a reader that only checked bounds (the Python
  reference until 1.1) accepted the misaligned and shared chunks, and a stock verifier (the Rust one)
  refused a chunk whose table size points past the end, which the rules do not check. Same file format
  as ``snapshot_vectors.py`` writes.
* ``receive/relay_threshold_17_digits``: a ``relay_threshold`` whose 17-digit decimal reads one ulp
  above ``fl32(0.1)`` only with a correctly rounded parser; serde_json without ``float_roundtrip`` read
  it as ``fl32(0.1)`` exactly, so the Rust driver relayed ``fl32(0.1)``. Same format as
  ``engine_vectors.py`` writes.

Every vector is checked against the reference (:mod:`delta_fabric.snapshot`) while it is written.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import engine_vectors as ev
import numpy as np
import snapshot_vectors as sv
from delta_fabric.config import SyncConfig

__all__ = ["build"]

REQ_STRUCTURE = "DF-ZEN-105"
REQ_RULES = "DF-PKT-20"
REQ_ALIGN = "DF-PKT-21"
REQ_SHARING = "DF-SEC-20"

#: Slots of ``SnapshotChunk`` (schema/snapshot.fbs) and their sizes in the table.
_SLOTS: dict[str, tuple[int, int]] = {
    "version_major": (0, 2),
    "version_minor": (1, 2),
    "node": (2, 8),
    "incarnation": (3, 8),
    "fingerprint": (4, 4),
    "snapshot_id": (5, 8),
    "total": (6, 8),
    "offset": (7, 8),
    "digest": (8, 4),
    "values": (9, 4),
}
_VECTORS = ("fingerprint", "digest", "values")


@dataclass
class Layout:
    """A hand-made ``SnapshotChunk``: the vtable at 8, the table right after it, each field at the
    next position aligned to its size (``misalign`` places a field at an offset that is not a multiple
    of its size), then the vectors in ``vector_order``; ``vtable_last`` puts the vtable after the
    vectors instead (a negative soffset). ``same`` makes a field's voffset
    (or a vector field's uoffset) designate the bytes of another field or vector."""

    values: Sequence[float] = field(default_factory=lambda: list(sv.ANCHOR[5:10]))
    misalign: str | None = None
    vector_order: tuple[str, ...] = _VECTORS
    vtable_last: bool = False
    same: dict[str, str] = field(default_factory=dict)
    digest: bytes = field(default_factory=lambda: sv._digest(sv.ANCHOR))
    table_size: int | None = None


def _scalars() -> dict[str, int]:
    return {
        "version_major": 1,
        "version_minor": 0,
        "node": sv.NODE,
        "incarnation": sv.INCARNATION,
        "snapshot_id": sv.SNAPSHOT_ID,
        "total": sv.N,
        "offset": 5,
    }


def _vector_bytes(lay: Layout) -> dict[str, bytes]:
    vals = np.asarray(lay.values, dtype="<f4")
    return {
        "fingerprint": struct.pack("<I", 32) + sv.MANIFEST.fingerprint,
        "digest": struct.pack("<I", 32) + lay.digest,
        "values": struct.pack("<I", vals.size) + vals.tobytes(),
    }


def layout_chunk(lay: Layout) -> bytes:
    buf = bytearray(b"\0\0\0\0DFS1")
    vecs = _vector_bytes(lay)
    vec_pos: dict[str, int] = {}

    def place_vectors() -> None:
        for name in lay.vector_order:
            while len(buf) % 4:
                buf.append(0)
            vec_pos[name] = len(buf)
            buf.extend(vecs[name])

    vsize = 4 + 2 * len(_SLOTS)
    vt = len(buf)
    if not lay.vtable_last:
        buf.extend(bytes(vsize))
    while len(buf) % 8 != 4:  # the fields after the 4-byte soffset start at a multiple of 8
        buf.extend(b"\0\0")
    table = len(buf)
    buf.extend(bytes(4))
    field_pos: dict[str, int] = {}
    for name, (_slot, size) in _SLOTS.items():
        while len(buf) % size:
            buf.append(0)
        if lay.misalign == name:
            buf.extend(bytes(1 if size == 2 else 4))
        field_pos[name] = len(buf)
        buf.extend(bytes(size))
    place_vectors()
    if lay.vtable_last:
        while len(buf) % 4:
            buf.append(0)
        vt = len(buf)
        buf.extend(bytes(vsize))
    struct.pack_into("<i", buf, table, table - vt)
    scalars = _scalars()
    for name, (slot, size) in _SLOTS.items():
        target = lay.same.get(name, name)
        if name in _VECTORS:
            struct.pack_into("<H", buf, vt + 4 + 2 * slot, field_pos[name] - table)
            struct.pack_into("<I", buf, field_pos[name], vec_pos[target] - field_pos[name])
        else:
            pos = field_pos[target]
            struct.pack_into("<H", buf, vt + 4 + 2 * slot, pos - table)
            fmt = "<H" if size == 2 else "<Q"
            struct.pack_into(fmt, buf, pos, scalars[target])
    struct.pack_into("<H", buf, vt, vsize)
    tsize = field_pos["values"] + 4 - table if lay.table_size is None else lay.table_size
    struct.pack_into("<H", buf, vt + 2, tsize)
    struct.pack_into("<I", buf, 0, table)
    return bytes(buf)


def decode_cases() -> list[sv.DecodeCase]:
    extra = [REQ_STRUCTURE, REQ_RULES]
    same_bytes = sv.MANIFEST.fingerprint
    return [
        sv.DecodeCase(
            "struct_hand_layout",
            "Chunk 1 of the section 9.5 example laid out by hand (every field aligned, nothing "
            "shared): accepted, as the builder's layout is.",
            layout_chunk(Layout()),
            "ok",
            extra,
        ),
        sv.DecodeCase(
            "struct_vtable_after_table",
            "The vtable after the table and the vectors (a negative soffset), the vectors in the "
            "order values, digest, fingerprint: accepted (rules 2 and 4 fix no order).",
            layout_chunk(
                Layout(vtable_last=True, vector_order=("values", "digest", "fingerprint"))
            ),
            "ok",
            extra,
        ),
        sv.DecodeCase(
            "struct_table_size_past_end",
            "The vtable's table size (u16 at v + 2) reaches past the end of the buffer: accepted, "
            "the table size is not checked (rule 2); a stock verifier refuses it.",
            layout_chunk(Layout(table_size=0xFFF0)),
            "ok",
            extra,
        ),
        sv.DecodeCase(
            "struct_node_misaligned",
            "node (a ulong) lies at a position that is 4 modulo 8, every value still readable in "
            "bounds: MALFORMED (rule 3, DF-PKT-21).",
            layout_chunk(Layout(misalign="node")),
            "MALFORMED",
            [*extra, REQ_ALIGN],
        ),
        sv.DecodeCase(
            "struct_version_minor_misaligned",
            "version_minor (a ushort) at an odd position: MALFORMED (rule 3, DF-PKT-21).",
            layout_chunk(Layout(misalign="version_minor")),
            "MALFORMED",
            [*extra, REQ_ALIGN],
        ),
        sv.DecodeCase(
            "struct_values_misaligned",
            "The values vector at a position that is 2 modulo 4: MALFORMED (rule 4, DF-PKT-21).",
            _shift_values(layout_chunk(Layout())),
            "MALFORMED",
            [*extra, REQ_ALIGN],
        ),
        sv.DecodeCase(
            "struct_digest_is_fingerprint",
            "digest's uoffset designates the fingerprint vector (both 32 bytes; digest equal to the "
            "fingerprint bytes): MALFORMED, two fields designate one vector (DF-SEC-20).",
            layout_chunk(Layout(same={"digest": "fingerprint"}, digest=same_bytes)),
            "MALFORMED",
            [*extra, REQ_SHARING],
        ),
        sv.DecodeCase(
            "struct_incarnation_is_node",
            "incarnation's voffset designates node's 8 bytes (a non-zero id read twice): "
            "MALFORMED, two fields share bytes (DF-SEC-20).",
            layout_chunk(Layout(same={"incarnation": "node"})),
            "MALFORMED",
            [*extra, REQ_SHARING],
        ),
    ]


def _shift_values(buf: bytes) -> bytes:
    """The chunk with 2 bytes inserted before the values vector (its uoffset adjusted): the vector
    then starts at 2 modulo 4."""
    table = sv._u32_at(buf, 0)
    vt = table - int.from_bytes(buf[table : table + 4], "little", signed=True)
    fpos = table + int.from_bytes(buf[vt + 4 + 2 * 9 : vt + 6 + 2 * 9], "little")
    target = fpos + sv._u32_at(buf, fpos)
    out = bytearray(buf[:target] + b"\0\0" + buf[target:])
    struct.pack_into("<I", out, fpos, target + 2 - fpos)
    return bytes(out)


def _write_decode(vectors_dir: Path, c: sv.DecodeCase) -> dict[str, Any]:
    outcome, chunk = sv._reference_decode(c.data)
    if outcome != c.outcome:
        raise AssertionError(f"snapshot decode {c.name}: {outcome}, expected {c.outcome}")
    rel = f"snapshot/decode/{c.name}"
    reqs = sv._requirements(*c.requirements)
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
            "values": sv._floats(chunk.values),
            "values_bits": sv._bits(chunk.values),
        }
    (vectors_dir / "snapshot" / "decode").mkdir(parents=True, exist_ok=True)
    (vectors_dir / f"{rel}.dfs").write_bytes(c.data)
    sv._dump(
        vectors_dir / f"{rel}.json",
        {"description": c.description, "requirements": reqs, "expected": expected},
    )
    return {
        "id": f"snapshot.decode.{c.name}",
        "kind": "snapshot",
        "path": rel,
        "requirements": reqs,
        "expect": outcome,
    }


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir`` (after ``snapshot_vectors.py``, whose
    folder it adds to); return their index rows."""
    rows = [_write_decode(vectors_dir, c) for c in decode_cases()]
    rows += [ev._write_receive(vectors_dir, c) for c in receive_cases()]
    return rows


def receive_cases() -> list[ev.RecvCase]:
    return [
        ev.RecvCase(
            "relay_threshold_17_digits",
            "relay_threshold 0.10000000149011613, the binary64 one ulp above fl32(0.1) (its shortest "
            "decimal has 17 digits): the damped value fl32(0.1) is below it and is not relayed, 0.2 is. "
            "A JSON reader that is not correctly rounded (serde_json without float_roundtrip) reads "
            "the threshold as fl32(0.1) and relays fl32(0.1) (DF-CNF-20: a number is the value of its "
            "decimal text).",
            ["DF-RLY-5", "DF-RLY-2", "DF-CNF-20"],
            [ev.pkt(ev.ent(ev.B, ev.B_INC, 1, 0, [0, 1, 2], [0.1, -0.1, 0.2]))],
            config=SyncConfig.v1_0(relay_threshold=0.10000000149011613),
        )
    ]
