"""Vectors that pin behaviour found unpinned by the mutation campaign of the Python core (issue 10,
"Suite strength", ``conformance/tools/mutation.py python``).

Each vector here was written for a mutant of ``delta_fabric`` that survived every earlier vector and
is a plausible wrong implementation (an off-by-one bound, a check that wraps a negative position, a
check across entries, a size estimate off by a byte). The mutant it kills is named in the
vector's description, in words. Called by ``make_vectors.py`` (``build(vectors_dir) -> index rows``):
decode vectors go to ``decode/valid/`` and ``decode/invalid/`` (same format and ids as
``make_vectors.py``'s), receive vectors to ``receive/`` (format of ``engine_vectors.py``). Every
vector is checked against the reference implementation while it is written.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.errors import ErrorCode
from delta_fabric.manifest import Manifest
from delta_fabric.wire import (
    Packet,
    ValueEncoding,
    encode_packet,
    packet_to_json,
    quantize_packet,
)

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import engine_vectors as ev  # noqa: E402
import make_vectors as mv  # noqa: E402
import verdict_vectors as vv  # noqa: E402

__all__ = ["build"]

U64_MAX = (1 << 64) - 1


@dataclass
class DecodeCase:
    name: str
    description: str
    requirements: list[str]
    data: bytes
    #: None: the packet is valid and decodes to ``expect`` (or to the encoded packet)
    error: ErrorCode | None = None
    expect: Packet | None = None
    manifest: Manifest = mv.VECTOR_MANIFEST
    max_packet_size: int = mv.DEFAULT_MAX_PACKET_SIZE


def _valid(
    name: str,
    description: str,
    requirements: list[str],
    packet: Packet,
    max_packet_size: int | None = None,
) -> DecodeCase:
    data = encode_packet(packet)
    return DecodeCase(
        name,
        description,
        requirements,
        data,
        expect=quantize_packet(packet),
        max_packet_size=len(data) if max_packet_size is None else max_packet_size,
    )


def _vtable_moved_to_end(
    buf: bytes, table: int, *, slack: int = 0, claim: int = 0, tail: int = 0
) -> tuple[bytes, int]:
    """``buf`` with a copy of ``table``'s vtable appended (2-aligned) and the table's soffset pointing
    at the copy (a negative soffset, which FlatBuffers allows); returns (bytes, copy position).
    ``slack`` zero bytes follow the copy (absent fields), ``claim`` is added to the copy's vtable
    size, ``tail`` bytes end the buffer."""
    vt = mv.vtable_of(buf, table)
    vsize = mv._u16(buf, vt)
    out = bytearray(buf)
    while len(out) % 2:
        out.append(0)
    copy_at = len(out)
    out += buf[vt : vt + vsize] + bytes(slack)
    struct.pack_into("<H", out, copy_at, vsize + claim)
    out += bytes(tail)
    struct.pack_into("<i", out, table, table - copy_at)
    return bytes(out), copy_at


def _soffset(buf: bytes, table: int, vt: int) -> bytes:
    """``buf`` with ``table``'s soffset set so that its vtable is at ``vt`` (may be negative)."""
    out = bytearray(buf)
    struct.pack_into("<i", out, table, table - vt)
    return bytes(out)


def _root_vtable_at_zero(fingerprint: bytes) -> tuple[bytes, Packet]:
    """A valid packet whose root vtable is at position 0: it overlaps the root uoffset (20, read as
    the vtable size: 8 slots) and the identifier ('DF' and 'P1', read as the voffsets 0x4644 and
    0x3150 of version_major and version_minor, so both lie far behind the rest: 18010 bytes). Vtables
    may overlap any byte (DF-SEC-20) and v >= 0 (DF-PKT-20 rule 2) holds."""
    b = bytearray(18010)
    t = 20
    struct.pack_into("<I", b, 0, t)  # root uoffset; as the vtable: vsize 20, table size 0
    b[4:8] = b"DFP1"
    # slots 2..7 (sender, sender_incarnation, fingerprint, encoding, entries, heard absent)
    struct.pack_into("<6H", b, 8, 4, 12, 20, 28, 24, 0)
    struct.pack_into("<i", b, t, t - 0)  # soffset: the vtable is at 0
    struct.pack_into("<Q", b, t + 4, mv.SENDER)
    struct.pack_into("<Q", b, t + 12, mv.SENDER_INC)
    fp_vec, ent_vec, e_vt, e_t = 52, 88, 96, 120
    struct.pack_into("<I", b, t + 20, fp_vec - (t + 20))
    struct.pack_into("<I", b, t + 24, ent_vec - (t + 24))
    struct.pack_into("<B", b, t + 28, 0)  # encoding F32 (explicit)
    struct.pack_into("<I", b, fp_vec, len(fingerprint))
    b[fp_vec + 4 : fp_vec + 4 + len(fingerprint)] = fingerprint
    struct.pack_into("<II", b, ent_vec, 1, e_t - (ent_vec + 4))
    # Entry vtable (7 slots): origin 8, incarnation 16, seq 24, hops 40, indices 32, values 36
    struct.pack_into("<9H", b, e_vt, 18, 44, 8, 16, 24, 40, 32, 36, 0)
    struct.pack_into("<i", b, e_t, e_t - e_vt)
    struct.pack_into("<QQQ", b, e_t + 8, mv.ORIGIN_B, mv.INC_B, 11)
    idx_vec, val_vec = 164, 176
    struct.pack_into("<I", b, e_t + 32, idx_vec - (e_t + 32))
    struct.pack_into("<I", b, e_t + 36, val_vec - (e_t + 36))
    struct.pack_into("<B", b, e_t + 40, 2)  # hops
    struct.pack_into("<III", b, idx_vec, 2, 1, 2)
    struct.pack_into("<Iff", b, val_vec, 2, 0.5, -1.0)
    struct.pack_into("<H", b, t + 0x3150, 1)  # version_minor
    struct.pack_into("<H", b, t + 0x4644, 1)  # version_major
    assert t + 0x4644 + 2 == len(b)
    want = mv.packet(mv.entry(mv.ORIGIN_B, mv.INC_B, 11, 2, [1, 2], [0.5, -1.0]), version_minor=1)
    return bytes(b), want


def decode_cases() -> list[DecodeCase]:
    base = mv.packet(mv.base_entry())
    cases = [
        _valid(
            "size_equals_max_packet_size",
            "A valid packet whose length is exactly max_packet_size (the context's): accepted, since "
            "only a length greater than max_packet_size is OVERSIZE (a receiver that compares with >= "
            "rejects it).",
            ["DF-ERR-1"],
            mv.packet(
                mv.entry(mv.SENDER, mv.SENDER_INC, 3, 0, range(0, 100, 2), [0.5] * 50),
            ),
        ),
        _valid(
            "u64_max_fields",
            "sender, sender_incarnation, origin, incarnation and seq all 2^64 - 1: u64 fields are read "
            "unsigned and in full (a reader or a JSON writer that takes them as signed 64-bit integers, "
            "or a range check that excludes the maximum, fails).",
            [mv.REQ_NONZERO],
            mv.packet(
                mv.entry(U64_MAX, U64_MAX, U64_MAX, 0, [1, 2], [1.0, -1.0]),
                sender=U64_MAX,
                sender_incarnation=U64_MAX,
            ),
            mv.DEFAULT_MAX_PACKET_SIZE,
        ),
        _valid(
            "version_minor_max",
            "version_minor 65535, the largest u16: every minor of major 1 is accepted (DF-VER-2), "
            "whatever its value (a writer that checks version_minor < 65535 fails the round trip).",
            [mv.REQ_MINOR],
            mv.packet(mv.base_entry(), version_minor=0xFFFF),
            mv.DEFAULT_MAX_PACKET_SIZE,
        ),
        _valid(
            "f16_three_entries",
            "An F16 packet of three entries (2, 1 and 3 values): each entry gets its own values, "
            "split at every entry boundary (a decoder that splits the decoded 16-bit values at the "
            "first boundary only gives the third entry's values to the second).",
            [mv.REQ_MULTI_ORIGIN, mv.REQ_ENCODING],
            mv.packet(
                mv.entry(mv.SENDER, mv.SENDER_INC, 2, 0, [1, 4], [0.5, -2.0]),
                mv.entry(mv.ORIGIN_B, mv.INC_B, 8, 1, [0], [1.5]),
                mv.entry(mv.ORIGIN_C, mv.INC_C, 3, 2, [7, 8, 9], [0.25, -0.125, 4.0]),
                encoding=ValueEncoding.F16,
            ),
            mv.DEFAULT_MAX_PACKET_SIZE,
        ),
    ]

    enc = encode_packet(base)
    root, entry0 = mv.root_table(enc), mv.entry_table(enc, 0)
    hostile = [mv.REQ_HOSTILE, "DF-PKT-20"]
    # a vtable that ends exactly at the end of the packet: v + vsize == n is in bounds (rule 2)
    data, _ = _vtable_moved_to_end(enc, root)
    cases.append(
        DecodeCase(
            "vtable_at_buffer_end",
            "The root table's vtable is the last bytes of the packet (its soffset is negative, which "
            "FlatBuffers allows): v + vsize == n is in bounds, so the packet is valid (a reader that "
            "requires v + vsize < n rejects it).",
            [*hostile, mv.REQ_NOT_CANONICAL],
            data,
            expect=quantize_packet(base),
        )
    )
    # a vtable at position 0 (v >= 0 holds; a reader that requires v > 0 rejects it)
    data, want = _root_vtable_at_zero(mv.VECTOR_MANIFEST.fingerprint)
    cases.append(
        DecodeCase(
            "root_vtable_at_position_0",
            "The root vtable is at position 0: it overlaps the root uoffset (20, read as its size, 8 "
            "slots) and the identifier ('DF', 'P1': the voffsets 0x4644 and 0x3150 of version_major "
            "and version_minor, which lie far behind the rest, so the packet has 18010 bytes). "
            "Vtables may overlap any byte (DF-SEC-20) and v = 0 meets v >= 0 (DF-PKT-20 rule 2): "
            "valid.",
            [*hostile, mv.REQ_NOT_CANONICAL],
            data,
            expect=want,
        )
    )
    # a field whose last byte is the last byte of the packet (in bounds: pos + size == n)
    tail = bytearray(enc) + bytes([3])
    struct.pack_into("<H", tail, mv.vtable_slot_pos(enc, entry0, 3), len(enc) - entry0)
    cases.append(
        DecodeCase(
            "entry_field_ends_the_buffer",
            "Entry 0's hops (3) is the last byte of the packet, after every other object: "
            "pos + size == n is in bounds, so the packet is valid (a reader that requires "
            "pos + size < n rejects it).",
            [*hostile, mv.REQ_NOT_CANONICAL, mv.REQ_HOPS],
            bytes(tail),
            expect=quantize_packet(
                mv.packet(
                    mv.entry(
                        mv.SENDER, mv.SENDER_INC, 7, 3, [0, 9, 42, 100], base.entries[0].values
                    )
                )
            ),
        )
    )
    # a vtable size that runs past the end, although every slot the receiver reads is in bounds
    data, _ = _vtable_moved_to_end(enc, root, slack=2, claim=4)
    cases.append(
        DecodeCase(
            "vtable_size_past_buffer_end",
            "The root vtable is the last 20 bytes of the packet (8 slots, slot 7 'heard' absent) but its "
            "size says 24: v + vsize > n is MALFORMED (DF-PKT-20 rule 2), although every slot of a 1.1 "
            "Packet lies in bounds (a reader that checks only the slots it reads accepts it).",
            hostile,
            data,
            error=ErrorCode.MALFORMED,
        )
    )
    data, _ = _vtable_moved_to_end(enc, entry0, slack=2, claim=4)
    cases.append(
        DecodeCase(
            "entry_vtable_size_past_buffer_end",
            "Entry 0's vtable is the last 20 bytes of the packet (8 slots, slot 7 zero) but its size "
            "says 24: MALFORMED (DF-PKT-20 rule 2), although every slot of a 1.1 Entry lies in bounds "
            "(a reader that checks only the slots it reads accepts it).",
            hostile,
            data,
            error=ErrorCode.MALFORMED,
        )
    )
    # a negative vtable position, n bytes before a well-formed vtable at the end of the packet: a
    # reader that counts negative positions from the end of the buffer (Python's struct and NumPy
    # indexing do) would find that vtable
    data, copy_at = _vtable_moved_to_end(enc, root)
    cases.append(
        DecodeCase(
            "vtable_position_negative",
            "The root table's soffset puts its vtable at copy - n < 0, n bytes before a well-formed "
            "copy of it at the end of the packet: MALFORMED (DF-PKT-20 rule 2, v >= 0), although a "
            "position counted from the end of the buffer lands on that copy.",
            hostile,
            _soffset(data, root, copy_at - len(data)),
            error=ErrorCode.MALFORMED,
        )
    )
    # the same for an Entry table; the trailing byte makes the wrap land on the copy for a reader of
    # 2-byte windows (n - 1 of them) as well
    data, copy_at = _vtable_moved_to_end(enc, entry0, tail=1)
    cases.append(
        DecodeCase(
            "entry_vtable_position_negative",
            "Entry 0's soffset puts its vtable at copy - (n - 1) < 0 (even), before a well-formed copy "
            "of it near the end of the packet: MALFORMED (DF-PKT-20 rule 2, v >= 0).",
            hostile,
            _soffset(data, entry0, copy_at - (len(data) - 1)),
            error=ErrorCode.MALFORMED,
        )
    )

    # a field inside a table's 4-byte head (its soffset): two objects share bytes (DF-SEC-20)
    fp = mv.VECTOR_MANIFEST.fingerprint
    sharing = [mv.REQ_HOSTILE, "DF-SEC-20"]
    cases.append(
        DecodeCase(
            "root_field_inside_table_head",
            "The root table's version_minor (ushort) lies at table + 2, inside the table's own 4-byte "
            "soffset, which it shares: MALFORMED (DF-SEC-20, the table head is an object); its value "
            "(0) is the soffset's high half, so a reader that leaves the head out of the sharing "
            "rule accepts the packet.",
            sharing,
            vv.assemble(vv.P(entries=[vv.E()], fingerprint=fp, at={"version_minor": 2})),
            error=ErrorCode.MALFORMED,
        )
    )
    cases.append(
        DecodeCase(
            "root_fields_overlap_forward",
            "The root table's version_minor (ushort, at table + 32) and encoding (ubyte, at table + 33) "
            "share the byte table + 33: MALFORMED (DF-SEC-20); both read 0 (minor 0, F32). The field "
            "that starts first overlaps the next one (a reader that computes a field's end wrongly "
            "misses it).",
            sharing,
            vv.assemble(
                vv.P(entries=[vv.E()], fingerprint=fp, at={"version_minor": 32, "encoding": 33})
            ),
            error=ErrorCode.MALFORMED,
        )
    )
    cases.append(
        DecodeCase(
            "entry_field_inside_table_head",
            "Entry 0's hops (ubyte) lies at table + 1, inside the Entry table's own soffset: MALFORMED "
            "(DF-SEC-20), although the byte read (0) is a valid hop count.",
            sharing,
            vv.assemble(vv.P(entries=[vv.E(at={"hops": 1})], fingerprint=fp)),
            error=ErrorCode.MALFORMED,
        )
    )

    # a vector's byte range is its length word and count * element size bytes: the end of a vector
    # inside another object (the last element) is shared too
    layout = vv.assemble(vv.P(entries=[vv.E()], fingerprint=fp))
    fp_data = mv.vector_len_pos(layout, mv.root_table(layout), 4) + 4
    sender_at = -(-fp_data // 8) * 8 - mv.root_table(layout)  # 8-aligned, inside the fingerprint
    cases.append(
        DecodeCase(
            "root_field_inside_fingerprint",
            "The root table's sender (ulong) lies inside the fingerprint vector's 32 bytes, whose "
            "bytes it reads: MALFORMED (DF-SEC-20); the fingerprint still matches, so a reader that "
            "takes a vector's range shorter than 4 + count * size bytes accepts the packet.",
            sharing,
            mv.patched(
                layout, mv.vtable_slot_pos(layout, mv.root_table(layout), 2), "<H", sender_at
            ),
            error=ErrorCode.MALFORMED,
        )
    )
    cases.append(
        DecodeCase(
            "values_start_on_last_index",
            "Entry 0's values vector starts on its last index (3, read as the count 3): the two "
            "vectors share 4 bytes, MALFORMED (DF-SEC-20), although the values read (0 and the next "
            "vector's words, subnormal f32) are finite and as many as the indices (a reader that "
            "takes a vector's range shorter than 4 + count * size bytes accepts it).",
            sharing,
            vv.assemble(
                vv.P(
                    entries=[
                        vv.E(indices=(1, 2, 3)),
                        # 4 bytes of gap: nothing else starts right after the values read
                        vv.E(origin=0xC3, indices=(7,), values=(1.0,), vec_shift={"indices": 4}),
                    ],
                    fingerprint=fp,
                    borrow={(0, "values"): (0, "indices", 12)},
                )
            ),
            error=ErrorCode.MALFORMED,
        )
    )
    odd = bytearray(enc)
    struct.pack_into("<H", odd, mv.vtable_of(enc, entry0), 17)
    cases.append(
        DecodeCase(
            "entry_vtable_size_odd",
            "Entry 0's vtable size is 17 (odd; in bounds, and slot 6 'values16' then lies outside it, "
            "so absent, as in an F32 packet): MALFORMED (DF-PKT-20 rule 2, vsize even).",
            hostile,
            bytes(odd),
            error=ErrorCode.MALFORMED,
        )
    )

    cases.append(
        DecodeCase(
            "heard_descending_after_first",
            "(1.1) Packet.heard = [2, 9, 5]: every id is above the first, but 9 > 5 breaks the strict "
            "ascending order (DF-PKT-60): MALFORMED (a check of each id against the first only, or "
            "of the first pair only, accepts it).",
            ["DF-PKT-60"],
            encode_packet(mv.packet(mv.base_entry(), version_minor=1, heard=(2, 9, 5))),
            error=ErrorCode.MALFORMED,
        )
    )

    # DUPLICATE_INDEX in the second entry, whose indices start below the first entry's last index:
    # a pair that straddles two entries is not an order check (DF-PKT-10 is per entry)
    cases.append(
        DecodeCase(
            "duplicate_index_after_lower_entry",
            "Two entries: [40, 90] and [3, 3]. The second holds a duplicate index, so DUPLICATE_INDEX; "
            "90 > 3 across the entry boundary is not UNSORTED_INDICES, since order is checked within "
            "an entry only (a check over the concatenated indices reports UNSORTED_INDICES).",
            [mv.REQ_INDICES, mv.REQ_MULTI_ORIGIN],
            encode_packet(
                mv.packet(
                    mv.entry(mv.SENDER, mv.SENDER_INC, 5, 0, [40, 90], [1.0, 2.0]),
                    mv.entry(mv.ORIGIN_B, mv.INC_B, 9, 1, [3, 3], [0.5, 0.25]),
                )
            ),
            error=ErrorCode.DUPLICATE_INDEX,
        )
    )
    cases.append(
        DecodeCase(
            "duplicate_index_after_lower_third_entry",
            "Three entries: [5, 6], [10, 40] and [3, 3]. The third holds a duplicate index, so "
            "DUPLICATE_INDEX; 40 > 3 across the second entry boundary is not UNSORTED_INDICES (a check "
            "that exempts only the first boundary reports UNSORTED_INDICES).",
            [mv.REQ_INDICES, mv.REQ_MULTI_ORIGIN],
            encode_packet(
                mv.packet(
                    mv.entry(mv.SENDER, mv.SENDER_INC, 5, 0, [5, 6], [1.0, 2.0]),
                    mv.entry(mv.ORIGIN_C, mv.INC_C, 2, 1, [10, 40], [0.5, 4.0]),
                    mv.entry(mv.ORIGIN_B, mv.INC_B, 9, 1, [3, 3], [0.5, 0.25]),
                )
            ),
            error=ErrorCode.DUPLICATE_INDEX,
        )
    )
    return cases


def _write_decode(vectors_dir: Path, c: DecodeCase) -> dict[str, Any]:
    ctx = mv.context(c.manifest, c.max_packet_size)
    got, err = mv._check_decode(c.data, ctx)
    if c.error is None:
        assert c.expect is not None, c.name
        if got is None or got != c.expect:
            raise AssertionError(f"valid vector {c.name}: decoded to {err or got}")
        rel = f"decode/valid/{c.name}"
        reqs = mv.valid_requirements(c.name, c.requirements, got.encoding)
        body: dict[str, Any] = {"packet": packet_to_json(got)}
        expect: str = "ok"
        feats = mv.features_of([got.encoding])
    else:
        if err is not c.error:
            raise AssertionError(f"invalid vector {c.name}: got {err}, expected {c.error}")
        rel = f"decode/invalid/{c.name}"
        reqs = sorted({*mv.invalid_requirements(c.name, c.error), *c.requirements})
        body = {"error": c.error.value}
        expect = c.error.value
        feats = {}
    path = vectors_dir / f"{rel}.dfp"
    if path.exists():
        raise AssertionError(f"{rel}: a vector of that name exists already")
    path.write_bytes(c.data)
    mv._dump_json(
        vectors_dir / f"{rel}.json",
        {
            "description": c.description,
            "requirements": reqs,
            "manifest": mv.manifest_json(c.manifest),
            "context": ctx,
            **body,
        },
    )
    return {
        "id": f"decode.{'valid' if c.error is None else 'invalid'}.{c.name}",
        "kind": "decode",
        "path": rel,
        "requirements": reqs,
        "expect": expect,
        **feats,
    }


# ------------------------------------------------------------------------------------------------------
# receive
# ------------------------------------------------------------------------------------------------------


def _line_packets() -> list[bytes]:
    """relay_needed_line's packets: B - node - C, both entries relayed in one packet of estimate
    160 + 2 * (128 + 8 * 2) = 448 bytes, with heard = [B, C] (24 + 8 * 2 = 40 bytes)."""
    return [
        ev.pkt(ev.ent(ev.B, ev.B_INC, 1, 0, [0, 5], [0.5, -1.0]), heard=[ev.NODE]),
        ev.pkt(ev.ent(ev.C, ev.C_INC, 1, 0, [5, 9], [0.25, 2.0]), sender=ev.C, heard=[ev.NODE]),
    ]


def receive_cases() -> list[ev.RecvCase]:
    needed = RelayPolicy.NEEDED
    return [
        ev.RecvCase(
            "window_width_one",
            "replay_window 1, the smallest width (DF-PAR-7): only the highest seq is in the window, "
            "so B's seq 5 (history: 4) is accepted and a later seq 4 is too old, not a duplicate; "
            "seq 5 again is a duplicate.",
            ["DF-PAR-7", "DF-RCV-3"],
            [
                ev.pkt(ev.ent(ev.B, ev.B_INC, 5, 0, [1], [0.5])),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 4, 0, [2], [0.25]), sender=ev.C),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 5, 0, [1], [0.5]), sender=ev.C),
            ],
            config=SyncConfig.v1_0(replay_window=1),
            history=[(ev.B, ev.B_INC, 4)],
        ),
        ev.RecvCase(
            "non_finite_result_keeps_history",
            "B is tracked (history: seq 5). Packet 0 carries B's seq 6 and C's seq 1, both 3e38 at "
            "index 7: refused whole with NON_FINITE_RESULT (DF-RCV-50), which undoes the admission of "
            "seq 6 and keeps B's window as it was. Packet 1 carries B's seq 5 again: a duplicate (an "
            "undo that forgets B's window accepts it); packet 2 carries B's seq 6, now accepted.",
            ["DF-RCV-50", "DF-RCV-3", "DF-RCV-1"],
            [
                ev.pkt(
                    ev.ent(ev.B, ev.B_INC, 6, 0, [7], [3e38]),
                    ev.ent(ev.C, ev.C_INC, 1, 1, [7], [3e38]),
                ),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 5, 0, [7], [0.5]), sender=ev.C),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 6, 0, [8], [0.25]), sender=ev.C),
            ],
            history=[(ev.B, ev.B_INC, 5)],
        ),
        ev.RecvCase(
            "non_finite_result_second_entry",
            "Packet 0 has two entries: B's 0.5 at index 1, then C's 3e38 at index 7, where the active "
            "weight is 3e38: fl32(active + 3e38) = inf at index 7 only, so the packet is refused with "
            "NON_FINITE_RESULT (DF-RCV-50; a check of the first entry's indices only accepts it). "
            "Packet 1 carries B's seq 1 again with a sane value: accepted.",
            ["DF-RCV-50", "DF-RCV-1"],
            [
                ev.pkt(
                    ev.ent(ev.B, ev.B_INC, 1, 0, [1], [0.5]),
                    ev.ent(ev.C, ev.C_INC, 1, 1, [7], [3e38]),
                ),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 1, 0, [1], [0.25]), sender=ev.C),
            ],
            active=ev._set(ev._pattern(7, 13, 6, 16.0), {7: 3e38}),
        ),
        ev.RecvCase(
            "max_incarnations_one",
            "max_incarnations 1, the smallest (DF-PAR-8): B's incarnation I is tracked (history: seq 3); "
            "an entry of incarnation I + 1 evicts it (the table is full, and I + 1 is higher), so a "
            "later entry of I is stale_incarnation.",
            ["DF-RCV-4"],
            [
                ev.pkt(ev.ent(ev.B, ev.B_INC + 1, 1, 0, [1], [0.5])),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 4, 0, [2], [0.25]), sender=ev.C),
            ],
            config=SyncConfig.v1_0(max_incarnations=1),
            history=[(ev.B, ev.B_INC, 3)],
        ),
        ev.RecvCase(
            "origin_limit_one",
            "max_origins 1, the smallest (DF-PAR-30): B's entry is accepted and B tracked; C's entry "
            "is dropped as origin_limit (DF-SEC-2: no further origin is tracked, none is evicted); "
            "B's next seq is still accepted.",
            ["DF-PAR-30", "DF-SEC-30"],
            [
                ev.pkt(ev.ent(ev.B, ev.B_INC, 1, 0, [1], [0.5])),
                ev.pkt(
                    ev.ent(ev.C, ev.C_INC, 1, 0, [2], [0.25]),
                    ev.ent(ev.B, ev.B_INC, 2, 1, [3], [1.0]),
                    sender=ev.C,
                ),
            ],
            config=SyncConfig.v1_0(max_origins=1),
        ),
        ev.RecvCase(
            "relay_at_hops_255",
            "hop_limit 255, the largest (DF-PAR-5): B's entry arrives with hops 254 and is relayed "
            "with hops 255, the largest value of the ubyte field (DF-PKT-9; an encoder that refuses "
            "hops 255 cannot relay it).",
            ["DF-RLY-1", "DF-PKT-9"],
            [ev.pkt(ev.ent(ev.B, ev.B_INC, 1, 254, [1, 2], [0.5, -0.25]))],
            config=SyncConfig.v1_0(hop_limit=255),
        ),
        ev.RecvCase(
            "relay_needed_alone_no_heard",
            "Relay policy NEEDED on a line B - node - C, max_packet_size 400: B's entry of 20 values "
            "has the estimate 160 + 128 + 160 = 448 > 400 but fits alone, so it is relayed alone, "
            "and without heard (its estimate leaves no room, DF-RLY-61); C's one-value entry goes "
            "in a packet of estimate 296, which carries heard = [B, C].",
            ["DF-RLY-61", "DF-RLY-6", "DF-RLY-3", "DF-PKT-60"],
            [
                ev.pkt(
                    ev.ent(ev.B, ev.B_INC, 1, 0, list(range(20)), [0.125] * 20), heard=[ev.NODE]
                ),
                ev.pkt(ev.ent(ev.C, ev.C_INC, 1, 0, [23], [4.0]), sender=ev.C, heard=[ev.NODE]),
            ],
            config=SyncConfig.v1_0(relay_policy=needed, max_packet_size=400),
            relay_packets=2,
        ),
        ev.RecvCase(
            "relay_needed_heard_fits_exactly",
            "relay_needed_line with max_packet_size 488: the relay packet's estimate 448 plus the "
            "advertisement's 24 + 8 * 2 = 40 bytes is exactly max_packet_size, so heard = [B, C] "
            "rides on it (at most, DF-RLY-61; an estimate of heard off by one byte drops it).",
            ["DF-RLY-61", "DF-RLY-3", "DF-PKT-60"],
            _line_packets(),
            config=SyncConfig.v1_0(relay_policy=needed, max_packet_size=488),
        ),
        ev.RecvCase(
            "relay_needed_heard_one_byte_over",
            "relay_needed_line with max_packet_size 487: the estimate 448 plus 40 bytes of heard is "
            "one byte more than max_packet_size, so the relay packet carries no heard (DF-RLY-61: "
            "'into no other packet'), although its actual size would leave room.",
            ["DF-RLY-61", "DF-RLY-3"],
            _line_packets(),
            config=SyncConfig.v1_0(relay_policy=needed, max_packet_size=487),
        ),
    ]


# ------------------------------------------------------------------------------------------------------
# generate
# ------------------------------------------------------------------------------------------------------


def generate_cases() -> list[ev.GenCase]:
    base_anchor = ev._pattern(7, 13, 6, 16.0)
    return [
        ev.GenCase(
            "average_over_2",
            "average_over = 2, the smallest value that averages (DF-GEN-70 applies for C > 1): the "
            "sent values are fl32(0.5 * d) and the active weights keep the other half (an engine "
            "that averages only for C > 2, or from C >= 1, fails).",
            ["DF-GEN-70", "DF-PAR-70"],
            base_anchor + ev._pattern(11, 29, 14, 7.0),
            base_anchor,
            SyncConfig.v1_0(ratio=0.25, average_over=2),
        ),
        ev.GenCase(
            "manifest_of_one_value",
            "A manifest of one scalar tensor (N = 1, the smallest, DF-MAN): k = 1, the one delta is "
            "sent (an engine that requires N > 1 refuses the manifest).",
            ["DF-GEN-2", "DF-GEN-3", "DF-MAN-3"],
            ev._f32([0.75]),
            ev._f32([0.25]),
            SyncConfig.v1_0(ratio=0.5),
            manifest=Manifest.from_named_shapes({"scale": ()}),
        ),
        ev.GenCase(
            "split_limit_two_values",
            "k = 2, max_packet_size 304 = 160 + 128 + 8 * 2: the estimate of one entry of 2 values "
            "equals the limit, so it is not split (DF-GEN-6, inclusive; an n_max search that "
            "undershoots by one splits it).",
            ["DF-GEN-6", "DF-GEN-30"],
            ev._pattern(3, 31, 15, 4.0) + ev._f32([0.0625] * ev.N),
            np.zeros(ev.N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.08, max_packet_size=304),
            seq_start=5,
        ),
        ev.GenCase(
            "smallest_max_packet_size",
            "max_packet_size 296, the smallest allowed (DF-PAR-6): one value per entry (160 + 128 + 8 "
            "= 296), so k = 3 values go out as 3 entries of one value each, consecutive seqs.",
            ["DF-GEN-6", "DF-GEN-30", "DF-PAR-6"],
            ev._pattern(3, 31, 15, 4.0) + ev._f32([0.0625] * ev.N),
            np.zeros(ev.N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.1, max_packet_size=296),
            seq_start=5,
            exact_split=False,
        ),
    ]


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir`` (the folders of ``make_vectors.py`` and
    ``engine_vectors.py``, which write theirs first); return their index rows."""
    rows = [_write_decode(vectors_dir, c) for c in decode_cases()]
    for g in generate_cases():
        if (vectors_dir / "generate" / f"{g.name}.json").exists():
            raise AssertionError(f"generate/{g.name}: a vector of that name exists already")
        rows.append(ev._write_generate(vectors_dir, g))
    for c in receive_cases():
        if (vectors_dir / "receive" / c.name).exists():
            raise AssertionError(f"receive/{c.name}: a vector of that name exists already")
        rows.append(ev._write_receive(vectors_dir, c))
    return rows


def _names(cases: Sequence[Any]) -> list[str]:
    return [c.name for c in cases]


if __name__ == "__main__":
    print("\n".join(_names(decode_cases()) + _names(generate_cases()) + _names(receive_cases())))
