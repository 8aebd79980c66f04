"""Vectors written for surviving mutants of the session-6 mutation campaign (issue 10 item 3; h54).

Each case is a behaviour that a plausible wrong implementation gets wrong and that no earlier vector
showed: the mutant of the Python core it was written for is named in its description's last sentence
(``conformance/tools/mutation.py python``). Receive vectors are written through
``engine_vectors._write_receive``, which runs the Python engine and cross-checks the aggregate.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import compact_vectors as cv
import engine_vectors as ev
import make_vectors as mv
import numpy as np
import pinning_vectors as pv
import signed_vectors as sv
import verdict_vectors as vv
from delta_fabric.compact import IndexEncoding
from delta_fabric.config import MIN_MAX_PACKET_SIZE, SyncConfig
from delta_fabric.encodings import ValueEncoding
from delta_fabric.engine import Engine
from delta_fabric.errors import ErrorCode
from delta_fabric.signing import Signing
from delta_fabric.wire import (
    PACKET_OVERHEAD_BOUND,
    Entry,
    Packet,
    encode_packet,
    encoded_size_bound,
)
from engine_vectors import B_INC, C_INC, B, C, RecvCase, _write_receive, ent, pkt

#: One minute, the value the spec suggests for max_incarnation_ahead (DF-PAR-175).
AHEAD = 60_000_000
U64_MAX = (1 << 64) - 1


def clock_cases() -> list[RecvCase]:
    """DF-RCV-175 at the two ends of the clock's range (``now_us`` is any u64)."""
    config = SyncConfig.v1_0(max_incarnation_ahead=AHEAD)
    return [
        RecvCase(
            "future_incarnation_clock_zero",
            "max_incarnation_ahead = 60,000,000 and the clock reading now_us = 0 (a reading, not the "
            "absence of one): a new incarnation of B exactly now_us + max_incarnation_ahead is "
            "accepted, a new incarnation of C one microsecond later is dropped as "
            "future_incarnation. An implementation that takes a clock of 0 for 'no reading' "
            "accepts both. (Mutant: set_now_us refusing 0.)",
            ["DF-RCV-175", "DF-PAR-175", "DF-RCV-10"],
            [
                pkt(
                    ent(B, AHEAD, 1, 0, [1], [0.5]),
                    ent(C, AHEAD + 1, 1, 0, [2], [0.25]),
                )
            ],
            config=config,
            now_us=0,
        ),
        RecvCase(
            "future_incarnation_clock_max",
            "max_incarnation_ahead = 60,000,000 and now_us = 2^64 - 1: no incarnation lies ahead of "
            "the clock, so new incarnations 2^64 - 1 of B and 1 of C are both accepted. An "
            "implementation that computes now_us + max_incarnation_ahead in wrapping 64-bit "
            "arithmetic (DF-RCV-175 says: without overflow) drops both as future_incarnation. "
            "(Mutant: set_now_us refusing 2^64 - 1.)",
            ["DF-RCV-175", "DF-PAR-175", "DF-RCV-10"],
            [
                pkt(
                    ent(B, U64_MAX, 1, 0, [1], [0.5]),
                    ent(C, 1, 1, 0, [2], [0.25]),
                )
            ],
            config=config,
            now_us=U64_MAX,
        ),
    ]


def aggregate_cases() -> list[RecvCase]:
    """DF-RCV-6/7 on step shapes that the engine's internal paths tell apart."""
    return [
        RecvCase(
            "aggregate_three_packets_same_indices",
            "Three accepted packets whose entries all touch indices 1 and 2 (B seq 1, C seq 1, B seq "
            "2): the aggregate at each index is the f32 sum of three damped values in acceptance "
            "order, and the anchor moves by that aggregate (DF-RCV-7). (Mutant: the anchor update of "
            "heavily overlapping packets, anchor - aggregate.)",
            ["DF-RCV-6", "DF-RCV-7", "DF-RCV-10"],
            [
                pkt(ent(B, B_INC, 1, 0, [1, 2], [0.5, 0.25])),
                pkt(ent(C, C_INC, 1, 0, [1, 2], [0.125, 0.75]), sender=C),
                pkt(ent(B, B_INC, 2, 0, [1, 2], [0.0625, -0.5])),
            ],
        ),
        RecvCase(
            "aggregate_after_a_packet_of_several_entries",
            "A packet of one entry (B seq 1 at indices 1, 2), then a packet of two entries (C seq 1 "
            "at 2, 3 and C seq 2 at 4), then a packet of one entry (B seq 2 at 5): the aggregate at "
            "index 2 is the sum of B's and C's values; the third packet must not put back what the "
            "first packet alone left there. (Mutant: the first packet's sums written to the "
            "aggregate again after the second packet.)",
            ["DF-RCV-6", "DF-RCV-7", "DF-RCV-10"],
            [
                pkt(ent(B, B_INC, 1, 0, [1, 2], [0.5, 0.25])),
                pkt(
                    ent(C, C_INC, 1, 0, [2, 3], [0.125, 0.75]),
                    ent(C, C_INC, 2, 0, [4], [1.0]),
                    sender=C,
                ),
                pkt(ent(B, B_INC, 2, 0, [5], [0.25])),
            ],
        ),
    ]


def cases() -> list[RecvCase]:
    return [*clock_cases(), *aggregate_cases()]


def packed_varint_case() -> pv.DecodeCase:
    """Section 6.8: a delta-form varint whose first byte is 0x80 (low 7 bits 0, continuation set)."""
    large = mv.LARGE_MANIFEST

    def e(origin: int, indices: list[int]) -> Entry:
        return Entry(
            origin,
            1,
            1,
            0,
            np.array(indices, dtype=np.uint32),
            np.full(len(indices), 0.5, dtype=np.float32),
        )

    packet = Packet(
        mv.SENDER,
        mv.SENDER_INC,
        large.fingerprint,
        (e(0xB2, [0, 128, 384, 16384]), e(0xC3, [5, 133]), e(0xD4, [7, 8, 300])),
        ValueEncoding.F32,
        index_encoding=IndexEncoding.PACKED,
    )
    case = pv._valid(
        "packed_varint_byte_0x80",
        "PACKED indices in delta form, three entries; the first two have deltas 128, 256 and 16000 "
        "(varints 80 01, 80 02, 80 7D) and 128: a varint byte 0x80 has the continuation bit set and "
        "carries 0 in its low 7 bits; it does not end the varint. (Mutants: 0x80 read as a last "
        "byte; the varints of a packet of three or more entries split as if it had two.)",
        ["DF-PKT-110", "DF-PKT-116"],
        packet,
        max_packet_size=max(MIN_MAX_PACKET_SIZE, len(encode_packet(packet))),
    )
    case.manifest = large
    return case


#: Entries per packet of the ``wide_*`` decode vectors: more than the 8 that ``delta_fabric.wire``
#: checks entry by entry, so that its other (vectorised) decoder, which checks the same rules, is run.
WIDE = 9


def _wide(first: vv.E, **kw: Any) -> vv.P:
    """A packet of ``WIDE`` entries: ``first`` and well-formed entries of other origins."""
    fillers = [vv.E(origin=0xD0 + k) for k in range(WIDE - 1)]
    kw.setdefault("fingerprint", mv.VECTOR_MANIFEST.fingerprint)
    return vv.P(entries=[first, *fillers], **kw)


def wide_cases() -> list[pv.DecodeCase]:
    """The verifier rules (DF-PKT-20, DF-SEC-20) in packets of 9 entries. An implementation may
    check small and large packets by different code (the reference does, for speed); these rules
    must hold for every packet size."""
    hostile = [mv.REQ_HOSTILE, "DF-PKT-20"]
    sharing = [*hostile, "DF-SEC-20"]
    malformed = ErrorCode.MALFORMED
    enc = vv.assemble(_wide(vv.E()))
    e0 = mv.entry_table(enc, 0)
    moved, copy_at = pv._vtable_moved_to_end(enc, e0, tail=1)
    f16 = Packet(
        mv.SENDER,
        mv.SENDER_INC,
        mv.VECTOR_MANIFEST.fingerprint,
        tuple(
            Entry(
                0xD0 + k,
                1,
                1,
                0,
                np.array([k, 50 + k], dtype=np.uint32),
                np.array([0.5, -0.25], dtype=np.float32),
            )
            for k in range(WIDE)
        ),
        ValueEncoding.F16,
    )
    odd = mv.patched(enc, mv.vtable_of(enc, e0), "<H", mv._u16(enc, mv.vtable_of(enc, e0)) - 1)
    last = _wide(vv.E(), vtable_last=True)
    tail = bytearray(enc) + bytes([3])  # entry 0's hops moved to a last byte of its own
    struct.pack_into("<H", tail, mv.vtable_slot_pos(enc, e0, 3), len(enc) - e0)
    base = vv._packet(_wide(vv.E()), mv.VECTOR_MANIFEST.fingerprint)
    hops3 = replace(base, entries=(replace(base.entries[0], hops=3), *base.entries[1:]))
    return [
        pv.DecodeCase(
            "wide_entry_field_ends_the_buffer",
            "A packet of 9 entries; entry 0's hops (3) is the last byte of the packet, after every "
            "other object: pos + size == n is in bounds, valid. (Mutant: a field refused when it "
            "ends exactly at the end, in packets of more than 8 entries.)",
            [*hostile, mv.REQ_NOT_CANONICAL, mv.REQ_HOPS],
            bytes(tail),
            expect=hops3,
        ),
        pv.DecodeCase(
            "wide_vtable_ends_the_buffer",
            "A packet of 9 entries whose entry 0 has its vtable after every vector, its last byte "
            "the last byte of the buffer: valid (v + vsize = n is in bounds). (Mutants: an object "
            "ending exactly at the end refused, or the last bytes of the buffer not readable, in "
            "packets of more than 8 entries.)",
            hostile,
            vv.assemble(last),
            expect=vv._packet(last, mv.VECTOR_MANIFEST.fingerprint),
        ),
        pv.DecodeCase(
            "wide_origin_zero",
            "A packet of 9 entries whose entry 0 has origin 0: MALFORMED (DF-PKT-2, ids are "
            "non-zero). (Mutant: the zero-id check of origin wrong in packets of more than 8 "
            "entries.)",
            [*hostile, "DF-PKT-2"],
            vv.assemble(_wide(vv.E(origin=0))),
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_entry_vtable_size_odd",
            "A packet of 9 entries; entry 0's vtable size is one less than written (odd; in bounds, "
            "its last slot then lies outside it, so absent): MALFORMED (vsize even). (Mutant: the "
            "vtable size checks joined by 'and' in packets of more than 8 entries.)",
            hostile,
            odd,
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_entry_field_inside_table_head",
            "A packet of 9 entries; entry 0's hops (ubyte) lies at table + 1, inside the Entry "
            "table's own soffset: MALFORMED (DF-SEC-20), although the byte read (0) is a valid hop "
            "count. (Mutant: a table's head not counted as its bytes in packets of more than 8 "
            "entries.)",
            sharing,
            vv.assemble(_wide(vv.E(at={"hops": 1}))),
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_shared_values_vector",
            "A packet of 9 entries; entries 0 and 1 point at one values vector: MALFORMED (DF-SEC-1). "
            "(Mutant: a vector's end computed wrongly in packets of more than 8 entries.)",
            sharing,
            vv.assemble(_wide(vv.E(), borrow={(1, "values"): (0, "values", 0)})),
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_values_start_on_last_index",
            "A packet of 9 entries; entry 0's values vector starts on its last index (3, read as the "
            "count 3): the two vectors share 4 bytes, MALFORMED (DF-SEC-20). (Mutant: a vector's range "
            "taken shorter than 4 + count * size bytes in packets of more than 8 entries.)",
            sharing,
            vv.assemble(
                vv.P(
                    entries=[
                        vv.E(indices=(1, 2, 3)),
                        vv.E(origin=0xC3, indices=(7,), values=(1.0,), vec_shift={"indices": 4}),
                        *[vv.E(origin=0xD0 + k) for k in range(WIDE - 2)],
                    ],
                    fingerprint=mv.VECTOR_MANIFEST.fingerprint,
                    borrow={(0, "values"): (0, "indices", 12)},
                )
            ),
            error=malformed,
        ),
        pv._valid(
            "wide_q8_packed_packet",
            "A Q8 packet with PACKED indices of 9 entries (values8 and packed_indices vectors of "
            "1-byte elements): valid. (Mutants: those element sizes taken as 2 bytes in packets of "
            "more than 8 entries.)",
            ["DF-PKT-110", "DF-PKT-111", "DF-PKT-20"],
            replace(f16, encoding=ValueEncoding.Q8, index_encoding=IndexEncoding.PACKED),
        ),
        pv._valid(
            "wide_signed_packet",
            "A packet of 9 entries, each with a 64-byte signature (not verified by decode): valid. "
            "(Mutants: the signature's element size or its 64-byte length check wrong in packets of "
            "more than 8 entries.)",
            ["DF-PKT-140", "DF-PKT-20"],
            replace(
                f16,
                encoding=ValueEncoding.F32,
                entries=tuple(
                    replace(e, signature=bytes(range(k, k + 64))) for k, e in enumerate(f16.entries)
                ),
            ),
            # encoders lay a packet out differently (DF-PKT-7): the size bound, not Python's size
            max_packet_size=PACKET_OVERHEAD_BOUND + WIDE * encoded_size_bound(2, signed=True),
        ),
        pv._valid(
            "wide_f16_packet",
            "An F16 packet of 9 entries of two values each (values16 vectors of 2-byte elements): "
            "valid. (Mutant: values16 elements taken as 3 bytes in packets of more than 8 entries.)",
            ["DF-PKT-5", "DF-PKT-20"],
            f16,
        ),
        pv.DecodeCase(
            "wide_last_vector_one_byte_short",
            "A packet of 9 entries without its last byte: the last entry's values vector ends one "
            "byte past the buffer, MALFORMED. (Mutant: a vector's end not checked in packets of more "
            "than 8 entries.)",
            hostile,
            vv.assemble(_wide(vv.E()))[:-1],
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_entry_vtable_one_byte_past_end",
            "A packet of 9 entries whose entry 0 has its vtable after every vector, without the "
            "buffer's last byte: that vtable ends one byte past the buffer, MALFORMED. (Mutant: the "
            "vtable size checks joined by 'and' in packets of more than 8 entries.)",
            hostile,
            vv.assemble(_wide(vv.E(), vtable_last=True))[:-1],
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_entry_vtable_position_negative",
            "A packet of 9 entries; entry 0's soffset puts its vtable at copy - (n - 1) < 0, before a "
            "well-formed copy of it near the end of the packet: MALFORMED (v >= 0), although a "
            "position counted from the end of the buffer lands on that copy. (Mutant: the vtable "
            "position checks joined by 'and' in packets of more than 8 entries.)",
            hostile,
            pv._soffset(moved, e0, copy_at - (len(moved) - 1)),
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_fields_overlap_one_byte",
            "A packet of 9 entries; entry 0's hops (ubyte) is the last byte of its seq (ulong): two "
            "objects share one byte, MALFORMED. (Mutant: a field's span ending before it starts in "
            "packets of more than 8 entries.)",
            sharing,
            vv.assemble(_wide(vv.E(hops=0, at={"hops": 31}))),
            error=malformed,
        ),
        pv.DecodeCase(
            "wide_shared_entry_table",
            "The entries vector of 10 elements holds entry 0's table twice (and the 8 others once): "
            "MALFORMED. (Mutant: a table's 4-byte head not counted as its bytes in packets of more "
            "than 8 entries.)",
            sharing,
            vv.assemble(_wide(vv.E(), entry_slots=[0, *range(WIDE)])),
            error=malformed,
        ),
    ]


def _empty_indices_last(packet: Packet, j: int) -> bytes:
    """``packet`` (PACKED) encoded, with entry ``j``'s empty indices vector moved to the end of the
    buffer: its 4-byte length word is the buffer's last 4 bytes (the old one left unreferenced)."""
    enc = encode_packet(packet)
    out = bytearray(enc) + bytes(-len(enc) % 4)
    at = mv.field_pos(enc, mv.entry_table(enc, j), 4)  # Entry.indices
    struct.pack_into("<I", out, at, len(out) - at)
    out += bytes(4)
    return bytes(out)


def wide_end_cases() -> list[pv.DecodeCase]:
    """Bounds of packets of 9 entries exactly at the end of the buffer (h58): an object that ends at
    the last byte is in bounds; a vtable that claims bytes past the end is not, even when every slot
    a 1.1 reader reads lies inside the buffer."""
    hostile = [mv.REQ_HOSTILE, "DF-PKT-20"]
    fp = mv.VECTOR_MANIFEST.fingerprint

    def wide_packet(nvals: int, encoding: ValueEncoding, index: IndexEncoding) -> Packet:
        return Packet(
            mv.SENDER,
            mv.SENDER_INC,
            fp,
            tuple(
                Entry(
                    0xD0 + k,
                    1,
                    1,
                    0,
                    np.array([10 * k + i for i in range(nvals)], dtype=np.uint32),
                    np.array([0.5, -0.25, 1.0][:nvals], dtype=np.float32),
                )
                for k in range(WIDE)
            ),
            encoding,
            index_encoding=index,
        )

    packed = wide_packet(2, ValueEncoding.F32, IndexEncoding.PACKED)
    empty_last = _empty_indices_last(packed, WIDE - 1)
    signed = replace(
        packed,
        index_encoding=IndexEncoding.PLAIN,
        entries=tuple(
            replace(e, signature=bytes(range(k, k + 64))) for k, e in enumerate(packed.entries)
        ),
    )
    enc_signed = encode_packet(signed)
    e0 = mv.entry_table(enc_signed, 0)
    e0_size = mv._u16(enc_signed, mv.vtable_of(enc_signed, e0))
    assert e0_size == 4 + 2 * 11, e0_size  # every Entry slot (0..10) written
    entry_past, _ = pv._vtable_moved_to_end(enc_signed, e0, claim=2)
    root = mv.root_table(enc_signed)
    root_size = mv._u16(enc_signed, mv.vtable_of(enc_signed, root))
    full = 4 + 2 * 9  # every Packet slot (0..8)
    root_past, _ = pv._vtable_moved_to_end(
        enc_signed, root, slack=full - root_size, claim=full - root_size + 2
    )
    q8 = wide_packet(3, ValueEncoding.Q8, IndexEncoding.PLAIN)
    return [
        pv.DecodeCase(
            "wide_empty_vector_ends_the_buffer",
            "A PACKED packet of 9 entries; the last entry's (empty) indices vector is the last 4 "
            "bytes of the buffer, its length word ending at the last byte: in bounds, valid. "
            "(Mutants: a vector's length word refused when it ends exactly at the end, or taken as 5 "
            "bytes, in packets of more than 8 entries.)",
            [*hostile, "DF-PKT-110", mv.REQ_NOT_CANONICAL],
            empty_last,
            expect=packed,
        ),
        pv.DecodeCase(
            "wide_entry_vtable_size_past_buffer_end",
            "A signed packet of 9 entries; entry 0's vtable (all 11 slots of a 1.1 Entry, 26 bytes) "
            "is the last 26 bytes of the buffer but its size says 28: MALFORMED (DF-PKT-20 rule 2), "
            "although every slot a 1.1 reader reads lies in bounds. (Mutant: the vtable's end "
            "computed as v - vsize in packets of more than 8 entries.)",
            hostile,
            entry_past,
            error=ErrorCode.MALFORMED,
            max_packet_size=len(entry_past),
        ),
        pv.DecodeCase(
            "root_vtable_all_slots_size_past_buffer_end",
            "The root vtable, written with all 9 slots of a 1.1 Packet (22 bytes, absent ones 0), is "
            "the last 22 bytes of the buffer but its size says 24: MALFORMED (DF-PKT-20 rule 2), "
            "although every slot a 1.1 reader reads lies in bounds. (Mutant: the root vtable's end "
            "computed as v - vsize.)",
            hostile,
            root_past,
            error=ErrorCode.MALFORMED,
            max_packet_size=len(root_past),
        ),
        pv._valid(
            "wide_q8_three_values_packet",
            "A Q8 packet of 9 entries of 3 values each: each values8 vector holds 3 bytes, and the "
            "next object may start right after its padding byte: valid. (Mutant: values8 elements "
            "taken as 2 bytes in packets of more than 8 entries, so a vector's range overlaps the "
            "next object.)",
            ["DF-PKT-111", "DF-PKT-20", "DF-SEC-20"],
            q8,
        ),
    ]


def packed_multi_cases() -> list[pv.DecodeCase]:
    """Section 6.8 faults of a delta-form body in the second entry of a PACKED packet of two: the
    reference decodes the varints of several delta-form entries in one pass and must refuse what
    the one-entry vectors (``compact_vectors.py``) refuse."""
    fp = mv.VECTOR_MANIFEST.fingerprint

    def two(name: str, desc: str, raw: bytes, nvals: int = 1) -> pv.DecodeCase:
        first = cv.CE(origin=0xB2, packed=bytes([0, 1]), values=[1.0])
        second = cv.CE(origin=0xC3, packed=raw, values=[1.0] * nvals)
        data = cv.build_raw(cv.CP([first, second], encoding=int(ValueEncoding.F32)), fp)
        return pv.DecodeCase(
            name, desc, ["DF-PKT-110", "DF-PKT-116"], data, error=ErrorCode.MALFORMED
        )

    three = cv.build_raw(
        cv.CP(
            [
                cv.CE(
                    origin=0xB2,
                    packed=bytes([0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01]),
                    values=[1.0] * 2,
                ),
                cv.CE(origin=0xC3, packed=bytes([0, 1]), values=[1.0]),
                cv.CE(origin=0xD4, packed=bytes([0, 1]), values=[1.0]),
            ],
            encoding=int(ValueEncoding.F32),
        ),
        fp,
    )
    return [
        pv.DecodeCase(
            "packed_three_entries_sum_2_32",
            "PACKED packet of three delta-form entries; the first's indices are 2^32 - 1 and then a "
            "gap of 1: index 2^32 as its LAST index, MALFORMED. (Mutant: the one-pass decode "
            "checking each entry's second-to-last index against 2^32.)",
            ["DF-PKT-110", "DF-PKT-116"],
            three,
            error=ErrorCode.MALFORMED,
        ),
        two(
            "packed_two_entries_varint_2_32",
            "PACKED packet of two delta-form entries; the second's only varint is 2^32 (80 80 80 80 "
            "10): MALFORMED, as in a packet of one entry. (Mutant: the one-pass decode of several "
            "entries keeping an index of exactly 2^32, which wraps to 0.)",
            bytes([0, 0x80, 0x80, 0x80, 0x80, 0x10]),
        ),
        two(
            "packed_two_entries_sum_2_32",
            "PACKED packet of two delta-form entries; the second's indices are 2^32 - 1 and then a "
            "gap of 1: index 2^32, MALFORMED, as in a packet of one entry.",
            bytes([0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01]),
            2,
        ),
        two(
            "packed_two_entries_ends_in_0x80",
            "PACKED packet of two delta-form entries; the second's body ends in the byte 0x80 (a "
            "varint cut after a continuation byte whose low bits are 0): MALFORMED. (Mutant: a body "
            "ending in 0x80 not seen as ending inside a varint.)",
            bytes([0, 0x80]),
        ),
    ]


def signed_split_case() -> tuple[str, str, SyncConfig, list[str]]:
    """DF-RLY-141 + DF-GEN-6: a signed own entry estimated at 128 + 96 + 8 n bytes; 5 values fill
    a packet of 160 + 224 + 40 = 424 bytes exactly, the sixth selected value goes in a second entry."""
    limit = PACKET_OVERHEAD_BOUND + encoded_size_bound(5, signed=True)
    assert limit == 424
    return (
        "signed_split_at_estimate_limit",
        "A node of a signed cluster with max_packet_size 424 selects 6 values: a signed entry of n "
        "values is estimated at 128 + 96 + 8 n bytes (DF-RLY-141), plus the packet overhead bound "
        "160, so the first entry holds 5 values (exactly 424) and the sixth value is a second entry "
        "(DF-GEN-6). (Mutants: the signature's estimate 97 bytes instead of 96, which makes it 4 + "
        "2, or subtracted, which makes it one entry of 6.)",
        SyncConfig.v1_0(ratio=0.25, max_packet_size=limit),
        ["DF-GEN-6", "DF-RLY-141", "DF-SEC-140", "DF-SEC-141"],
    )


def _signed_generate(vectors_dir: Path) -> dict[str, Any]:
    """The signed generate vector of ``signed_split_case`` (format of ``signed_vectors``)."""
    name, description, cfg, reqs = signed_split_case()
    active, anchor = ev._pattern(7, 13, 6, 16.0), ev._pattern(5, 11, 5, 32.0)
    signing = Signing(sv.KEYS, sv.seed_of(sv.NODE), node_id=sv.NODE)
    eng = Engine(ev.MANIFEST, cfg, sv.NODE, ev.NODE_INC, anchor=anchor, signing=signing)
    eng.next_seq = 5
    out = eng.generate(active.copy())
    assert [int(e.indices.size) for e in out] == [5, 1], out
    unsigned = Engine(ev.MANIFEST, cfg, sv.NODE, ev.NODE_INC, anchor=anchor)
    unsigned.next_seq = 5
    (plain,) = unsigned.generate(active.copy())  # unsigned: one entry (the estimate is smaller)
    assert np.array_equal(np.concatenate([e.indices for e in out]), plain.indices)
    assert np.array_equal(np.concatenate([e.values for e in out]), plain.values)
    return sv.write_signed_generate(
        vectors_dir, name, description, reqs, cfg, sv.NODE, active, anchor, eng, out
    )


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write the vectors of this module under ``vectors_dir``; return their index rows."""
    rows = [_write_receive(vectors_dir, c) for c in cases()]
    packed = pv._write_decode(vectors_dir, packed_varint_case())
    rows.append(cv._with_features(packed, cv.features(None, int(IndexEncoding.PACKED))))
    rows.append(_signed_generate(vectors_dir))
    for c in packed_multi_cases():
        row = pv._write_decode(vectors_dir, c)
        rows.append(cv._with_features(row, cv.features(None, int(IndexEncoding.PACKED))))
    for c in wide_cases():
        row = pv._write_decode(vectors_dir, c)
        if c.name == "wide_q8_packed_packet":  # OPTIONAL features (section 6.8)
            row = cv._with_features(
                row, cv.features(int(ValueEncoding.Q8), int(IndexEncoding.PACKED))
            )
        rows.append(row)
    for c in wide_end_cases():
        row = pv._write_decode(vectors_dir, c)
        if c.name == "wide_empty_vector_ends_the_buffer":
            row = cv._with_features(row, cv.features(None, int(IndexEncoding.PACKED)))
        elif c.name == "wide_q8_three_values_packet":
            row = cv._with_features(row, cv.features(int(ValueEncoding.Q8), None))
        rows.append(row)
    return rows
