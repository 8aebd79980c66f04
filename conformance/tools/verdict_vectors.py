"""Decode vectors of the verifier rules, the sharing rule and the check order (spec 1.1: Section 6.7,
DF-PKT-20, DF-PKT-21, DF-SEC-20, DF-RCV-20), loaded by ``make_vectors.py``.

The packets are laid out by hand with :func:`assemble`, which places every object (tables, vtables,
fields, vectors) at a position it chooses, so that a vector can break exactly one rule at its boundary
(an object misaligned by the smallest amount, two objects overlapping by one byte or sharing one
vector, a ``uoffset`` of 0) while every other rule holds. ``order_*`` vectors carry two faults and
expect the code of the first failing step of DF-RCV-20.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
from delta_fabric.errors import ErrorCode
from delta_fabric.manifest import Manifest
from delta_fabric.wire import Entry, Packet, ValueEncoding

REQ_RULES = "DF-PKT-20"
REQ_ALIGN = "DF-PKT-21"
REQ_SHARING = "DF-SEC-20"
REQ_ORDER = "DF-RCV-20"

# Root table layout (offsets from the table; the table is 8-aligned): soffset 0, version_major 4,
# version_minor 6, sender 8, sender_incarnation 16, fingerprint 24, entries 28, encoding 42.
ROOT_FIELDS: dict[str, tuple[int, int, int]] = {  # name: (slot, offset, size)
    "version_major": (0, 4, 2),
    "version_minor": (1, 6, 2),
    "sender": (2, 8, 8),
    "sender_incarnation": (3, 16, 8),
    "fingerprint": (4, 24, 4),
    "encoding": (5, 32, 1),
    "entries": (6, 28, 4),
}
ROOT_SIZE = 48  # [36, 48) free: room for misplaced fields
# Entry table layout: soffset 0, origin 8, incarnation 16, seq 24, indices 32, values 36,
# values16 40, hops 44.
ENTRY_FIELDS: dict[str, tuple[int, int, int]] = {
    "origin": (0, 8, 8),
    "incarnation": (1, 16, 8),
    "seq": (2, 24, 8),
    "hops": (3, 44, 1),
    "indices": (4, 32, 4),
    "values": (5, 36, 4),
    "values16": (6, 40, 4),
}
ENTRY_SIZE = 64  # [4, 8) and [45, 64) free
SCALAR_FMT = {1: "<B", 2: "<H", 8: "<Q"}
UNKNOWN_SLOT = 15


@dataclass
class E:
    """One entry of an assembled packet. ``values`` are f32 (written as ``values``), ``values16`` raw
    16-bit patterns; ``None`` omits the field. ``at`` overrides field offsets in the table,
    ``vec_shift`` adds bytes before a vector (misaligning it), ``table_shift`` before the table."""

    origin: int | None = 0xB2
    incarnation: int | None = 1
    seq: int | None = 1
    hops: int | None = 0
    indices: Sequence[int] | None = (3, 50, 100)
    values: Sequence[float] | None = (0.5, -0.25, 2.0)
    values16: Sequence[int] | None = None
    at: dict[str, int] = field(default_factory=dict)
    vec_shift: dict[str, int] = field(default_factory=dict)
    table_shift: int = 0
    vtable_shift: int = 0
    unknown_voffset: int | None = None  # slot 15 (a field of a later minor version), any voffset


@dataclass
class P:
    """An assembled packet (see :func:`assemble`)."""

    entries: list[E]
    sender: int | None = 0x5EED0000000000A1
    sender_incarnation: int | None = 0x00062A1B2C3D4E5F
    fingerprint: bytes | None = b""
    encoding: int | None = 0
    version_major: int | None = 1
    version_minor: int | None = 0
    at: dict[str, int] = field(default_factory=dict)
    table_shift: int = 0  # bytes added after 8-alignment of the root table
    vtable_shift: int = 0
    vec_shift: dict[str, int] = field(default_factory=dict)  # "fingerprint", "entries"
    share_vtable: bool = False  # every entry uses entry 0's vtable
    # sharing and offsets that point where they should not
    entry_slots: list[int] | None = None  # the tables the entries vector points at, by entry index
    borrow: dict[tuple[int, str], tuple[int, str, int]] = field(default_factory=dict)
    # (j, vector) -> (k, vector', byte offset): entry j's vector is the one of entry k, + offset
    zero: set[str] = field(default_factory=set)  # "root", "entries", "e0.indices": uoffset 0
    unknown_voffset: int | None = None
    truncate: int = 0  # bytes cut from the end
    vtable_last: bool = False  # entry 0's vtable after every vector (it ends the buffer)
    root_vsize: int | None = None  # overrides the root vtable's size field


class _Buf:
    def __init__(self) -> None:
        self.b = bytearray(8)
        self.b[4:8] = b"DFP1"

    def alloc(self, size: int, align: int, shift: int = 0) -> int:
        pos = -(-len(self.b) // align) * align + shift
        self.b.extend(b"\0" * (pos + size - len(self.b)))
        return pos

    def put(self, pos: int, fmt: str, value: int | float) -> None:
        struct.pack_into(fmt, self.b, pos, value)


def _vtable(
    buf: _Buf,
    fields: dict[str, tuple[int, int, int]],
    present: Sequence[str],
    at: dict[str, int],
    size: int,
    shift: int,
    unknown: int | None,
) -> int:
    # the unknown field is slot 15, past every field of 1.1 (Packet 7..11, Entry 7..10)
    slots = UNKNOWN_SLOT + 1 if unknown is not None else 7
    vsize = 4 + 2 * slots
    vt = buf.alloc(vsize, 2, shift)
    buf.put(vt, "<H", vsize)
    buf.put(vt + 2, "<H", size)
    for name in present:
        slot, off, _ = fields[name]
        buf.put(vt + 4 + 2 * slot, "<H", at.get(name, off))
    if unknown is not None:
        buf.put(vt + 4 + 2 * UNKNOWN_SLOT, "<H", unknown)
    return vt


def assemble(p: P) -> bytes:
    """Lay out ``p`` object by object: root vtable, root table, fingerprint, entries vector, then per
    entry its vtable and table, then per entry its indices, values / values16 (uoffsets point
    forward). Each object is aligned as a builder aligns
    it unless a shift says otherwise."""
    buf = _Buf()
    root_present = [
        n for n in ROOT_FIELDS if n not in ("fingerprint", "entries") and getattr(p, n) is not None
    ]
    root_present += ["fingerprint"] if p.fingerprint is not None else []
    root_present += ["entries"]
    root_vt = _vtable(
        buf, ROOT_FIELDS, root_present, p.at, ROOT_SIZE, p.vtable_shift, p.unknown_voffset
    )
    root = buf.alloc(ROOT_SIZE, 8, p.table_shift)
    buf.put(0, "<I", 0 if "root" in p.zero else root)
    buf.put(root, "<i", root - root_vt)

    def field_pos(
        table: int, fields: dict[str, tuple[int, int, int]], at: dict[str, int], name: str
    ) -> int:
        return table + at.get(name, fields[name][1])

    for name in root_present:
        if name in ("fingerprint", "entries"):
            continue
        _, _, size = ROOT_FIELDS[name]
        buf.put(field_pos(root, ROOT_FIELDS, p.at, name), SCALAR_FMT[size], getattr(p, name))

    def link(at_pos: int, target: int, key: str) -> None:
        buf.put(at_pos, "<I", 0 if key in p.zero else target - at_pos)

    if p.fingerprint is not None:
        fp = buf.alloc(4 + len(p.fingerprint), 4, p.vec_shift.get("fingerprint", 0))
        buf.put(fp, "<I", len(p.fingerprint))
        buf.b[fp + 4 : fp + 4 + len(p.fingerprint)] = p.fingerprint
        link(field_pos(root, ROOT_FIELDS, p.at, "fingerprint"), fp, "fingerprint")
    slots = p.entry_slots if p.entry_slots is not None else list(range(len(p.entries)))
    ev = buf.alloc(4 + 4 * len(slots), 4, p.vec_shift.get("entries", 0))
    buf.put(ev, "<I", len(slots))
    link(field_pos(root, ROOT_FIELDS, p.at, "entries"), ev, "entries")

    tables: list[int] = []
    shared_vt: int | None = None
    for j, e in enumerate(p.entries):
        present = [n for n in ENTRY_FIELDS if getattr(e, n) is not None]
        if p.vtable_last and j == 0:
            vt = -1  # placed below
        elif p.share_vtable and shared_vt is not None:
            vt = shared_vt
        else:
            vt = _vtable(
                buf, ENTRY_FIELDS, present, e.at, ENTRY_SIZE, e.vtable_shift, e.unknown_voffset
            )
            shared_vt = vt
        t = buf.alloc(ENTRY_SIZE, 8, e.table_shift)
        tables.append(t)
        buf.put(t, "<i", t - vt)
        for name in ("origin", "incarnation", "seq", "hops"):
            x = getattr(e, name)
            if x is not None:
                buf.put(
                    field_pos(t, ENTRY_FIELDS, e.at, name), SCALAR_FMT[ENTRY_FIELDS[name][2]], x
                )
    vectors: dict[tuple[int, str], int] = {}
    for j, e in enumerate(p.entries):
        t = tables[j]
        for name, fmt, size in (("indices", "<I", 4), ("values", "<f", 4), ("values16", "<H", 2)):
            xs = getattr(e, name)
            if xs is None:
                continue
            key = (j, name)
            if key in p.borrow:
                k, other, off = p.borrow[key]
                target = vectors[(k, other)] + off
            else:
                target = buf.alloc(4 + size * len(xs), 4, e.vec_shift.get(name, 0))
                buf.put(target, "<I", len(xs))
                for i, x in enumerate(xs):
                    buf.put(target + 4 + size * i, fmt, x)
                vectors[key] = target
            link(field_pos(t, ENTRY_FIELDS, e.at, name), target, f"e{j}.{name}")
    if p.vtable_last and p.entries:
        e = p.entries[0]
        present = [n for n in ENTRY_FIELDS if getattr(e, n) is not None]
        vt = _vtable(
            buf, ENTRY_FIELDS, present, e.at, ENTRY_SIZE, e.vtable_shift, e.unknown_voffset
        )
        buf.put(tables[0], "<i", tables[0] - vt)
    if p.root_vsize is not None:
        buf.put(root_vt, "<H", p.root_vsize)
    for i, j in enumerate(slots):
        link(ev + 4 + 4 * i, tables[j], f"entries[{i}]")
    out = bytes(buf.b)
    return out[: len(out) - p.truncate] if p.truncate else out


def _packet(p: P, fingerprint: bytes) -> Packet:
    """The packet that ``p`` (valid, F32) decodes to."""
    return Packet(
        sender=p.sender or 0,
        sender_incarnation=p.sender_incarnation or 0,
        fingerprint=fingerprint,
        entries=tuple(
            Entry(
                e.origin or 0,
                e.incarnation or 0,
                e.seq or 0,
                e.hops or 0,
                np.asarray(e.indices, dtype=np.uint32),
                np.asarray(e.values, dtype=np.float32),
            )
            for e in p.entries
        ),
        encoding=ValueEncoding(p.encoding or 0),
        version_major=p.version_major or 0,
        version_minor=p.version_minor or 0,
    )


@dataclass
class Case:
    name: str
    description: str
    data: bytes
    requirements: list[str]
    error: ErrorCode | None = None  # None: valid
    expect: Packet | None = None
    manifest: Manifest | None = None  # None: the vector manifest
    max_packet_size: int | None = None


def build(ns: ModuleType) -> list[Case]:
    """Every case; ``ns`` is ``make_vectors`` (its manifests and ids)."""
    fp: bytes = ns.VECTOR_MANIFEST.fingerprint
    other: Manifest = ns.LARGE_MANIFEST
    M, V, U = ErrorCode.MALFORMED, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_ENCODING
    cases: list[Case] = []

    def pk(entries: list[E] | None = None, **kw: Any) -> P:
        kw.setdefault("fingerprint", fp)
        return P(entries=entries if entries is not None else [E()], **kw)

    def valid(name: str, desc: str, p: P, reqs: Sequence[str] = ()) -> None:
        cases.append(Case(name, desc, assemble(p), [REQ_RULES, *reqs], expect=_packet(p, fp)))

    def bad(
        name: str, desc: str, p: P | bytes, code: ErrorCode, reqs: Sequence[str], **kw: Any
    ) -> None:
        data = assemble(p) if isinstance(p, P) else p
        cases.append(Case(name, desc, data, [*reqs], error=code, **kw))

    two = [E(), E(origin=0xC3, indices=(1, 2, 3), values=(1.0, 2.0, 3.0))]
    # --- valid boundaries ---------------------------------------------------------------------
    valid(
        "assembled_tight",
        "Hand-assembled: every object aligned exactly as required and adjacent to the next (a vector "
        "ends where the next object starts; the last vector ends at the last byte).",
        pk(two),
    )
    valid(
        "shared_vtable",
        "Three entries whose tables share one vtable (vtables are not objects, DF-SEC-20).",
        pk([E(), E(origin=0xC3), E(origin=0xD4)], share_vtable=True),
        [REQ_SHARING],
    )
    valid(
        "entry_table_4_mod_8",
        "An Entry table at a position that is 4 mod 8, its u64 fields at multiples of 8 "
        "(a table needs 4-alignment, a ulong field 8).",
        pk([E(table_shift=4, at={"origin": 4, "incarnation": 12, "seq": 20})]),
        [REQ_ALIGN],
    )
    valid(
        "hops_at_odd_position",
        "The ubyte field hops at an odd position (1-byte fields have no alignment).",
        pk([E(hops=3, at={"hops": 45})]),
        [REQ_ALIGN],
    )
    valid(
        "vtable_ends_the_buffer",
        "An Entry vtable placed after every vector, its last byte the last byte of the buffer "
        "(negative soffset; v + vsize = n is in bounds).",
        pk(vtable_last=True),
    )
    valid(
        "unknown_field_out_of_bounds",
        "Slot 8 of the root table and of an Entry (unknown to 1.1) has a voffset past the end of the "
        "buffer: it is neither read nor checked (Section 6.7, rule 6).",
        pk([E(unknown_voffset=0xFFF0)], unknown_voffset=0xFFF0),
    )
    valid(
        "unknown_field_overlaps_a_field",
        "Slot 8 of an Entry (unknown to 1.1) has the voffset of its seq: unknown fields are not "
        "objects of the sharing rule.",
        pk([E(unknown_voffset=24)]),
        [REQ_SHARING],
    )
    bad(
        "vtable_size_2",
        "The root vtable's size is 2 (below the minimum of 4).",
        pk(root_vsize=2),
        M,
        [],
    )
    bad(
        "vtable_one_byte_past_end",
        "vtable_ends_the_buffer without its last byte: the vtable ends one byte past the buffer.",
        assemble(pk(vtable_last=True))[:-1],
        M,
        [],
    )
    # --- misalignment, one kind each --------------------------------------------------------------
    mis = [REQ_ALIGN]
    root_at_2 = {
        "version_major": 4,
        "version_minor": 8,
        "fingerprint": 10,
        "sender": 14,
        "sender_incarnation": 22,
        "entries": 30,
        "encoding": 34,
    }
    bad(
        "misaligned_root_table",
        "The root table at 2 mod 4, every field of it at its own alignment.",
        pk(table_shift=2, at=root_at_2),
        M,
        mis,
    )
    bad("misaligned_root_vtable", "The root vtable at an odd position.", pk(vtable_shift=1), M, mis)
    bad(
        "misaligned_version_major",
        "version_major (ushort) at an odd position.",
        pk(at={"version_major": 33}),
        M,
        mis,
    )
    bad(
        "misaligned_version_minor",
        "version_minor (ushort) at an odd position.",
        pk(at={"version_minor": 33}),
        M,
        mis,
    )
    bad(
        "misaligned_sender",
        "sender (ulong) at 4 mod 8.",
        pk(at={"sender": 36}),
        M,
        mis,
    )
    bad(
        "misaligned_seq",
        "An entry's seq (ulong) at 4 mod 8.",
        pk([E(at={"seq": 52})]),
        M,
        mis,
    )
    bad(
        "misaligned_entries_field",
        "The uoffset field Packet.entries at 2 mod 4.",
        pk(at={"entries": 34}),
        M,
        mis,
    )
    bad(
        "misaligned_entry_table",
        "An Entry table at 2 mod 4 (its fields at their own alignment).",
        pk(
            [
                E(
                    table_shift=2,
                    at={
                        "origin": 6,
                        "incarnation": 14,
                        "seq": 22,
                        "indices": 30,
                        "values": 34,
                        "hops": 42,
                    },
                )
            ]
        ),
        M,
        mis,
    )
    bad(
        "misaligned_entry_vtable",
        "An Entry vtable at an odd position.",
        pk([E(vtable_shift=1)]),
        M,
        mis,
    )
    bad(
        "misaligned_indices_vector",
        "An indices vector whose length is at 2 mod 4.",
        pk([E(vec_shift={"indices": 2})]),
        M,
        mis,
    )
    bad(
        "misaligned_values_vector",
        "A values vector whose length is at 2 mod 4.",
        pk([E(vec_shift={"values": 2})]),
        M,
        mis,
    )
    bad(
        "misaligned_fingerprint_vector",
        "The fingerprint vector's length at 1 mod 4.",
        pk(vec_shift={"fingerprint": 1}),
        M,
        mis,
    )
    bad(
        "misaligned_f16_values16_vector",
        "An F16 entry whose values16 vector's length is at 2 mod 4.",
        pk(
            [E(values=None, values16=(0x3C00, 0x3800, 0x4000), vec_shift={"values16": 2})],
            encoding=1,
        ),
        M,
        [*mis, "DF-PKT-13"],
    )
    # --- uoffset 0 -----------------------------------------------------------------------------------
    bad(
        "entries_uoffset_zero",
        "The uoffset of Packet.entries is 0: it would read its own four bytes (0) as an empty "
        "entries vector (Section 6.7, rule 1: an offset may not point to itself).",
        pk(zero={"entries"}),
        M,
        [],
    )
    bad(
        "indices_uoffset_zero",
        "The uoffset of an entry's indices is 0 (read as a count it would be 0: EMPTY_ENTRY or "
        "LENGTH_MISMATCH for a reader without rule 1).",
        pk(zero={"e0.indices"}),
        M,
        [],
    )
    bad(
        "entry_uoffset_zero",
        "The first element of the entries vector is 0.",
        pk(two, zero={"entries[0]"}),
        M,
        [],
    )
    # --- bounds at the boundary ----------------------------------------------------------------------
    tight = assemble(pk(two))
    bad(
        "last_vector_one_byte_short",
        "assembled_tight without its last byte: the last values vector ends one byte past the "
        "buffer.",
        tight[:-1],
        M,
        [],
    )
    # --- sharing ---------------------------------------------------------------------------------------
    sh = [REQ_SHARING, "DF-SEC-1"]
    bad(
        "shared_values_vector",
        "Two entries point at one 3-element values vector.",
        pk(two, borrow={(1, "values"): (0, "values", 0)}),
        M,
        sh,
    )
    bad(
        "shared_vectors_4_entries",
        "Four entries of distinct origins point at one indices vector and one values vector.",
        pk(
            [E(origin=0xB2 + k) for k in range(4)],
            borrow={
                **{(k, "indices"): (0, "indices", 0) for k in range(1, 4)},
                **{(k, "values"): (0, "values", 0) for k in range(1, 4)},
            },
        ),
        M,
        sh,
    )
    bad(
        "shared_entry_table",
        "The entries vector holds the same Entry table twice.",
        pk([E()], entry_slots=[0, 0]),
        M,
        sh,
    )
    bad(
        "overlapping_indices_vectors",
        "The second entry's indices vector starts 4 bytes into the first's: it reads the first "
        "entry's first index (2) as its count and [10, 20] as its indices (sorted, in range).",
        pk(
            [
                E(indices=(2, 10, 20)),
                E(origin=0xC3, indices=(0,), values=(1.0, 2.0)),
            ],
            borrow={(1, "indices"): (0, "indices", 4)},
        ),
        M,
        sh,
    )
    tiny = [float(x) for x in np.array([2, 5, 9], dtype=np.uint32).view(np.float32)]
    bad(
        "indices_inside_values",
        "The second entry's indices vector lies inside the first entry's values vector, whose "
        "subnormal values have the bit patterns 2, 5, 9: read as a vector they are the count 2 "
        "and the indices [5, 9].",
        pk(
            [E(values=tiny), E(origin=0xC3, indices=(0,), values=(1.0, 2.0))],
            borrow={(1, "indices"): (0, "values", 4)},
        ),
        M,
        sh,
    )
    bad(
        "fields_overlap_one_byte",
        "An entry's hops (ubyte) is the last byte of its seq (ulong): two objects share one byte.",
        pk([E(hops=0, at={"hops": 31})]),
        M,
        sh,
    )
    # --- order of checks (two faults each) ---------------------------------------------------------
    o = [REQ_ORDER]
    good = assemble(pk())
    bad(
        "order_oversize_and_bad_identifier",
        "Longer than max_packet_size and identifier DFP2: OVERSIZE (step 1). 300 zero bytes follow the "
        "buffer so that max_packet_size is within its range (>= 296).",
        good[:4] + b"DFP2" + good[8:] + bytes(300),
        ErrorCode.OVERSIZE,
        o,
        max_packet_size=len(good) + 300 - 1,
    )
    bad(
        "order_bad_identifier_and_root_uoffset_zero",
        "Identifier DFP2 and a root uoffset of 0: BAD_IDENTIFIER (step 2 before 3).",
        b"\0\0\0\0DFP2" + good[8:],
        ErrorCode.BAD_IDENTIFIER,
        o,
    )
    bad(
        "order_version_and_unknown_encoding",
        "version_major 2 and encoding 4: UNSUPPORTED_VERSION (step 4 before 6).",
        pk(version_major=2, encoding=4),
        V,
        o,
    )
    bad(
        "order_misaligned_root_and_version",
        "The root table misaligned and version_major 2: MALFORMED (step 3 before 4).",
        pk(table_shift=2, version_major=2),
        M,
        [*o, REQ_ALIGN],
    )
    bad(
        "order_version_and_misaligned_entry",
        "version_major 2 and a misaligned Entry table: UNSUPPORTED_VERSION (step 4 before 5).",
        pk([E(table_shift=2)], version_major=2),
        V,
        [*o, REQ_ALIGN],
    )
    bad(
        "order_version_and_uoffset_zero",
        "version_major 2 and the entries uoffset 0: UNSUPPORTED_VERSION (step 4 before 5).",
        pk(version_major=2, zero={"entries"}),
        V,
        o,
    )
    bad(
        "order_unknown_encoding_and_seq_zero",
        "encoding 4 and seq 0: MALFORMED (step 5 before 6).",
        pk([E(seq=0)], encoding=4),
        M,
        o,
    )
    bad(
        "order_unknown_encoding_and_shared_vector",
        "encoding 4 and two entries sharing one values vector: MALFORMED (step 5 before 6).",
        pk(two, encoding=4, borrow={(1, "values"): (0, "values", 0)}),
        M,
        [*o, REQ_SHARING],
    )
    bad(
        "order_unknown_encoding_and_both_values",
        "encoding 4 and an entry with values and values16: UNSUPPORTED_ENCODING (step 6 before 7).",
        pk([E(values16=(1, 2, 3))], encoding=4),
        U,
        o,
    )
    bad(
        "order_missing_values_and_unsorted",
        "An F32 entry without values and with indices [7, 3]: MALFORMED (step 7 before 10).",
        pk([E(indices=(7, 3), values=None)]),
        M,
        o,
    )
    bad(
        "order_unknown_encoding_and_length_mismatch",
        "encoding 4 and an entry of 3 indices and 2 values: UNSUPPORTED_ENCODING (step 6 before 8).",
        pk([E(values=(1.0, 2.0))], encoding=4),
        U,
        o,
    )
    bad(
        "order_values16_in_f32_then_length_mismatch",
        "An F32 packet whose first entry has a length mismatch and whose second carries values16 "
        "too: MALFORMED (step 7 over all entries before 8).",
        pk([E(values=(1.0, 2.0)), E(origin=0xC3, values16=(1, 2, 3))]),
        M,
        o,
    )
    bad(
        "order_empty_and_length_mismatch",
        "indices [] with values [0.5]: LENGTH_MISMATCH (step 8 before 9).",
        pk([E(indices=(), values=(0.5,))]),
        ErrorCode.LENGTH_MISMATCH,
        o,
    )
    bad(
        "order_nan_then_length_mismatch",
        "A NaN in the first entry, a length mismatch in the second: LENGTH_MISMATCH (each step "
        "over all entries).",
        pk([E(values=(0.5, float("nan"), 1.0)), E(origin=0xC3, indices=(1, 2), values=(1.0,))]),
        ErrorCode.LENGTH_MISMATCH,
        o,
    )
    bad(
        "order_duplicate_then_unsorted",
        "indices [3, 3] in the first entry, [7, 3] in the second: UNSORTED_INDICES (step 10 over "
        "all entries before 11).",
        pk(
            [
                E(indices=(3, 3), values=(1.0, 2.0)),
                E(origin=0xC3, indices=(7, 3), values=(1.0, 2.0)),
            ]
        ),
        ErrorCode.UNSORTED_INDICES,
        o,
    )
    bad(
        "order_unsorted_and_empty",
        "indices [7, 3] in the first entry, an empty second entry: EMPTY_ENTRY (step 9 before 10).",
        pk([E(indices=(7, 3), values=(1.0, 2.0)), E(origin=0xC3, indices=(), values=())]),
        ErrorCode.EMPTY_ENTRY,
        o,
    )
    bad(
        "order_duplicate_and_nan",
        "indices [3, 3] with values [NaN, 1.0]: DUPLICATE_INDEX (step 11 before 12).",
        pk([E(indices=(3, 3), values=(float("nan"), 1.0))]),
        ErrorCode.DUPLICATE_INDEX,
        o,
    )
    bad(
        "order_nan_and_fingerprint",
        "A NaN value and another manifest's fingerprint: NON_FINITE (step 12 before 13).",
        pk([E(values=(0.5, float("nan"), 1.0))], fingerprint=other.fingerprint),
        ErrorCode.NON_FINITE,
        o,
    )
    bad(
        "order_fingerprint_and_hop_limit",
        "Another manifest's fingerprint and hops 17: FINGERPRINT_MISMATCH (step 13 before 14).",
        pk([E(hops=17)], fingerprint=other.fingerprint),
        ErrorCode.FINGERPRINT_MISMATCH,
        o,
    )
    bad(
        "order_index_range_then_hop_limit",
        "An index >= N in the first entry, hops 17 in the second: HOP_LIMIT (step 14 over all "
        "entries before 15).",
        pk([E(indices=(3, 50, 101)), E(origin=0xC3, hops=17, indices=(1, 2, 3))]),
        ErrorCode.HOP_LIMIT,
        o,
    )
    for c in cases:
        if c.error is ErrorCode.MALFORMED and REQ_RULES not in c.requirements:
            c.requirements.append(REQ_RULES)
    return cases


__all__ = ["Case", "E", "P", "assemble", "build"]
