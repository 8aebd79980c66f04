"""Vectors of the compact encodings (spec 1.1 section 6.8: ``PACKED`` indices, ``Q8`` values), loaded by
``make_vectors.py``.

- :func:`decode_cases` gives the decode vectors (valid: each packed form, the encoder's choice of form,
  Q8, ``q = -128``, scale 0, PACKED with Q8 and with F16; invalid: every fault of DF-PKT-112 at its
  boundary, and ``order_*`` vectors with two faults placed by DF-RCV-113).
- :func:`build` writes generate vectors (Q8 with error feedback) and receive vectors (accepting and
  relaying Q8 and PACKED) with the helpers of ``engine_vectors.py``.

Every vector that needs Q8 or PACKED lists the OPTIONAL feature in its index row (``encoding.q8``,
``index.packed``; DF-CNF-30).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import flatbuffers
import numpy as np
from delta_fabric.compact import IndexEncoding, encode_bitmap, encode_delta
from delta_fabric.config import SyncConfig
from delta_fabric.errors import ErrorCode
from delta_fabric.wire import Entry, Packet, ValueEncoding, decode_packet, encode_packet

REQ_PACKED = "DF-PKT-110"
REQ_Q8 = "DF-PKT-111"
REQ_CHECKS = "DF-PKT-112"
REQ_ORDER = "DF-RCV-113"
REQ_NEGOTIATION = "DF-VER-114"
REQ_Q8_ROW = "DF-PKT-115"
REQ_FORMS = "DF-PKT-116"
FEAT_Q8 = "encoding.q8"
FEAT_PACKED = "index.packed"
PACKED = IndexEncoding.PACKED
Q8, F16, F32 = ValueEncoding.Q8, ValueEncoding.F16, ValueEncoding.F32


def features(encoding: int | None, index_encoding: int | None) -> list[str]:
    """The OPTIONAL features a packet with these encodings needs."""
    out = []
    if encoding == int(Q8):
        out.append(FEAT_Q8)
    elif encoding == int(F16):
        out.append("encoding.f16")
    elif encoding == int(ValueEncoding.BF16):
        out.append("encoding.bf16")
    if index_encoding == int(PACKED):
        out.append(FEAT_PACKED)
    return sorted(out)


# ------------------------------------------------------------------------------------------------
# Raw builder: the 1.1 fields as given (any may be absent or hold any value)
# ------------------------------------------------------------------------------------------------
@dataclass
class CE:
    """One raw entry. ``packed`` / ``values8`` may name another entry's vector (``share_*``)."""

    origin: int = 0xB2
    incarnation: int = 1
    seq: int = 1
    indices: Sequence[int] | None = ()
    values: Sequence[float] | None = None
    values16: Sequence[int] | None = None
    packed: bytes | None = None
    values8: Sequence[int] | None = None
    scale_bits: int | None = None
    share_packed: int | None = None  # use the packed_indices vector of that entry
    share_values8: int | None = None


@dataclass
class CP:
    entries: list[CE]
    encoding: int = int(Q8)
    index_encoding: int | None = int(PACKED)
    sender: int = 0x5EED0000000000A1
    sender_incarnation: int = 0x00062A1B2C3D4E5F
    version_minor: int = 1


def f32_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def build_raw(p: CP, fp: bytes) -> bytes:
    b = flatbuffers.Builder(1024)
    b.ForceDefaults(True)
    made: list[dict[str, int | None]] = []
    for e in p.entries:
        offs: dict[str, int | None] = {
            "indices": None
            if e.indices is None
            else b.CreateNumpyVector(np.asarray(e.indices, "<u4")),
            "values": None
            if e.values is None
            else b.CreateNumpyVector(np.asarray(e.values, "<f4")),
            "values16": (
                None if e.values16 is None else b.CreateNumpyVector(np.asarray(e.values16, "<u2"))
            ),
            "packed": None if e.packed is None else b.CreateByteVector(e.packed),
            "values8": (
                None if e.values8 is None else b.CreateNumpyVector(np.asarray(e.values8, "i1"))
            ),
        }
        if e.share_packed is not None:
            offs["packed"] = made[e.share_packed]["packed"]
        if e.share_values8 is not None:
            offs["values8"] = made[e.share_values8]["values8"]
        made.append(offs)
    tables = []
    for e, offs in zip(p.entries, made, strict=True):
        b.StartObject(10)
        b.PrependUint64Slot(0, e.origin, 0)
        b.PrependUint64Slot(1, e.incarnation, 0)
        b.PrependUint64Slot(2, e.seq, 0)
        for slot, name in (
            (4, "indices"),
            (5, "values"),
            (6, "values16"),
            (7, "packed"),
            (8, "values8"),
        ):
            off = offs[name]
            if off is not None:
                b.PrependUOffsetTRelativeSlot(slot, off, 0)
        if e.scale_bits is not None:
            b.PrependUint32Slot(9, e.scale_bits, 0)
        tables.append(b.EndObject())
    b.StartVector(4, len(tables), 4)
    for off in reversed(tables):
        b.PrependUOffsetTRelative(off)
    entries = b.EndVector()
    fpv = b.CreateByteVector(fp)
    b.StartObject(9)
    b.PrependUint16Slot(0, 1, 0)
    b.PrependUint16Slot(1, p.version_minor, 0)
    b.PrependUint64Slot(2, p.sender, 0)
    b.PrependUint64Slot(3, p.sender_incarnation, 0)
    b.PrependUOffsetTRelativeSlot(4, fpv, 0)
    b.PrependUint8Slot(5, p.encoding, 0)
    b.PrependUOffsetTRelativeSlot(6, entries, 0)
    if p.index_encoding is not None:
        b.PrependUint8Slot(8, p.index_encoding, 0)
    b.Finish(b.EndObject(), file_identifier=b"DFP1")
    return bytes(b.Output())


# ------------------------------------------------------------------------------------------------
# Decode vectors
# ------------------------------------------------------------------------------------------------
def _entry(origin: int, seq: int, indices: Sequence[int], values: Sequence[float]) -> Entry:
    return Entry(
        origin,
        1,
        seq,
        0,
        np.asarray(indices, np.uint32),
        np.asarray(values, np.float64).astype(np.float32),
    )


def decode_cases(ns: ModuleType) -> tuple[list[Any], list[Any]]:
    """(valid, invalid) cases as ``make_vectors`` ``ValidCase`` / ``InvalidCase``; ``ns`` is
    ``make_vectors``."""
    fp: bytes = ns.VECTOR_MANIFEST.fingerprint
    large = ns.LARGE_MANIFEST
    ValidCase, InvalidCase = ns.ValidCase, ns.InvalidCase
    sender, sender_inc = ns.SENDER, ns.SENDER_INC
    valid: list[Any] = []
    invalid: list[Any] = []
    M, E, D = ErrorCode.MALFORMED, ErrorCode.EMPTY_ENTRY, ErrorCode.DUPLICATE_INDEX
    L, N, U = ErrorCode.LENGTH_MISMATCH, ErrorCode.NON_FINITE, ErrorCode.UNSUPPORTED_ENCODING

    def pk(
        *entries: Entry, enc: ValueEncoding = F32, packed: bool = True, manifest: Any = None
    ) -> Packet:
        m = manifest if manifest is not None else ns.VECTOR_MANIFEST
        return Packet(
            sender,
            sender_inc,
            m.fingerprint,
            tuple(entries),
            enc,
            version_minor=1,
            index_encoding=PACKED if packed else IndexEncoding.PLAIN,
        )

    def ok(name: str, desc: str, p: Packet, reqs: Sequence[str], manifest: Any = None) -> None:
        kw = {} if manifest is None else {"manifest": manifest}
        valid.append(ValidCase(name, desc, [*reqs], packet=p, **kw))

    def ok_raw(
        name: str, desc: str, p: CP, expect: Packet, reqs: Sequence[str], manifest: Any = None
    ) -> None:
        # an encoder writes other bytes for these values unless they are its own output
        again = decode_packet(encode_packet(expect))
        canonical = again == expect
        kw = {} if manifest is None else {"manifest": manifest}
        mfp = fp if manifest is None else manifest.fingerprint
        valid.append(
            ValidCase(
                name, desc, [*reqs], raw=build_raw(p, mfp), expect=expect, encode=canonical, **kw
            )
        )

    def bad(
        name: str, desc: str, p: CP | bytes, code: ErrorCode, reqs: Sequence[str], **kw: Any
    ) -> None:
        data = build_raw(p, fp) if isinstance(p, CP) else p
        feats = features(p.encoding, p.index_encoding) if isinstance(p, CP) else kw.pop("feats")
        invalid.append(
            InvalidCase(name, desc, code, data, sorted({*reqs, REQ_CHECKS}), features=feats, **kw)
        )

    # --- valid: the packed forms and the encoder's choice ------------------------------------------
    idx = [3, 7, 100]
    assert encode_delta(np.array(idx, np.uint32)) == bytes([0, 3, 4, 93])
    ok(
        "packed_delta",
        "PACKED F32: indices [3, 7, 100] as the delta form 00 03 04 5d (first index, then the gaps).",
        pk(_entry(0xB2, 1, idx, [0.5, -0.25, 2.0])),
        [REQ_PACKED],
    )
    big = [0, 300, (1 << 21) + 5, (1 << 32) - 2]
    ok(
        "packed_delta_varint_lengths",
        "PACKED F32 (N = 2^32 - 1): gaps of 1, 2, 4 and 5 varint bytes; the last index 2^32 - 2 "
        "(00 00 ac 02 d9 ff 7f f9 ff ff ff 0f).",
        pk(_entry(0xB2, 1, big, [1.0, 2.0, 3.0, 4.0]), manifest=large),
        [REQ_PACKED],
        manifest=large,
    )
    dense = [8, 9, 11, 16, 17, 18, 19, 20, 21, 22, 23]
    assert encode_bitmap(np.array(dense, np.uint32)) == bytes([1, 8, 0x0B, 0xFF])
    ok(
        "packed_bitmap",
        "PACKED F32: 11 indices in [8, 24) as the bitmap form 01 08 0b ff (4 bytes; delta: 12).",
        pk(_entry(0xB2, 1, dense, [float(i) / 4 for i in range(len(dense))])),
        [REQ_PACKED],
    )
    ok(
        "packed_bitmap_base_varint",
        "PACKED F32 (N = 2^32 - 1): a dense run from 300, bitmap form with a two-byte base varint.",
        pk(_entry(0xB2, 1, list(range(300, 340)), [1.0] * 40), manifest=large),
        [REQ_PACKED],
        manifest=large,
    )
    assert encode_delta(np.array([0, 7], np.uint32)) == bytes([0, 0, 7])
    assert encode_bitmap(np.array([0, 7], np.uint32)) == bytes([1, 0, 0x81])
    ok(
        "packed_tie_is_delta",
        "PACKED F32: indices [0, 7], whose two forms have 3 bytes each: the encoder writes delta "
        "(00 00 07), not the bitmap 01 00 81.",
        pk(_entry(0xB2, 1, [0, 7], [1.0, -1.0])),
        [REQ_PACKED],
    )
    assert encode_delta(np.array([128, 129], np.uint32)) == bytes([0, 0x80, 1, 1])
    assert encode_bitmap(np.array([128, 129], np.uint32)) == bytes([1, 0x80, 1, 3])
    ok(
        "packed_tie_from_first_index",
        "PACKED F32: indices [128, 129]: the encoder writes delta (00 80 01 01), since the bitmap "
        "from the first index (01 80 01 03) is as long. The bitmap from base 127 (01 7f 06) would "
        "be shorter, but the base a sender compares and writes is the first index (DF-PKT-116).",
        pk(_entry(0xB2, 1, [128, 129], [1.0, -1.0]), manifest=large),
        [REQ_PACKED],
        manifest=large,
    )
    ok_raw(
        "packed_bitmap_base_below_first",
        "PACKED F32: indices [128, 129] written as the bitmap from base 127 (01 7f 06, bits 1 and 2): "
        "a valid encoding that a receiver decodes, though no sender writes it (DF-PKT-116).",
        CP([CE(indices=(), values=(1.0, -1.0), packed=bytes([1, 0x7F, 0x06]))], encoding=int(F32)),
        pk(_entry(0xB2, 1, [128, 129], [1.0, -1.0]), manifest=large),
        [REQ_PACKED],
        manifest=large,
    )
    ok_raw(
        "packed_bitmap_as_written",
        "PACKED F32: indices [0, 7] written as the bitmap 01 00 81 although delta is as short: a "
        "receiver decodes either form.",
        CP([CE(indices=(), values=(1.0, -1.0), packed=bytes([1, 0, 0x81]))], encoding=int(F32)),
        pk(_entry(0xB2, 1, [0, 7], [1.0, -1.0])),
        [REQ_PACKED],
    )
    ok(
        "packed_f16",
        "PACKED F16, two entries of two origins.",
        pk(
            _entry(0xB2, 1, [1, 2, 90], [0.5, 1.5, -2.0]),
            _entry(0xC3, 4, [0, 64], [3.0, 1e-3]),
            enc=F16,
        ),
        [REQ_PACKED],
    )
    # --- valid: Q8 ---------------------------------------------------------------------------------
    ok(
        "q8_basic",
        "Q8 PLAIN: [0.5, -1.27, 0.005]: scale 2^-6 (the smallest power of two with 127 * scale >= "
        "1.27), q = [32, -81, 0], decoded [0.5, -1.265625, 0].",
        pk(_entry(0xB2, 1, [3, 50, 100], [0.5, -1.27, 0.005]), enc=Q8, packed=False),
        [REQ_Q8],
    )
    ok(
        "q8_two_scales",
        "Q8 PLAIN: two entries with their own scales (2^-10 and 2^4).",
        pk(
            _entry(0xB2, 1, [1, 2], [0.01, -0.1]),
            _entry(0xC3, 1, [5, 6, 7], [1000.0, -2000.0, 3.0]),
            enc=Q8,
            packed=False,
        ),
        [REQ_Q8],
    )
    ok_raw(
        "q8_minus_128",
        "Q8: q = -128 (never written by an encoder) decodes: [-128, 127, 1] x 0.5 = [-64, 63.5, 0.5].",
        CP(
            [CE(indices=(3, 50, 100), values8=(-128, 127, 1), scale_bits=f32_bits(0.5))],
            index_encoding=None,
        ),
        Packet(
            sender,
            sender_inc,
            fp,
            (_entry(0xB2, 1, [3, 50, 100], [-64.0, 63.5, 0.5]),),
            Q8,
            version_minor=1,
        ),
        [REQ_Q8],
    )
    for name, bits, what in (
        ("q8_scale_zero", 0, "present as 0"),
        ("q8_scale_absent", None, "absent"),
    ):
        ok_raw(
            name,
            f"Q8: scale {what} (0): every value decodes to fl32(q * 0): [0, 0, -0] for q = [0, 5, -3].",
            CP(
                [CE(indices=(3, 50, 100), values8=(0, 5, -3), scale_bits=bits)], index_encoding=None
            ),
            Packet(
                sender,
                sender_inc,
                fp,
                (_entry(0xB2, 1, [3, 50, 100], [0.0, 0.0, -0.0]),),
                Q8,
                version_minor=1,
            ),
            [REQ_Q8],
        )
    ok_raw(
        "q8_scale_not_power_of_two",
        "Q8: a scale that is not a power of two (0.01, as f32) decodes as fl32(q * scale): a receiver "
        "accepts every finite non-negative scale.",
        CP(
            [CE(indices=(3, 50), values8=(100, -7), scale_bits=f32_bits(0.01))], index_encoding=None
        ),
        Packet(
            sender,
            sender_inc,
            fp,
            (
                _entry(
                    0xB2,
                    1,
                    [3, 50],
                    np.multiply(np.float32([100, -7]), np.float32(0.01), dtype=np.float32).tolist(),
                ),
            ),
            Q8,
            version_minor=1,
        ),
        [REQ_Q8],
    )
    ok_raw(
        "q8_scale_subnormal",
        "Q8: scale 2^-149 (the smallest subnormal): q = [1, -1, 127] decode exactly.",
        CP([CE(indices=(3, 50, 100), values8=(1, -1, 127), scale_bits=1)], index_encoding=None),
        Packet(
            sender,
            sender_inc,
            fp,
            (
                _entry(
                    0xB2,
                    1,
                    [3, 50, 100],
                    np.array([1, 0x80000001, 127], np.uint32).view(np.float32),
                ),
            ),
            Q8,
            version_minor=1,
        ),
        [REQ_Q8],
    )
    ok(
        "packed_q8",
        "PACKED Q8: two entries, delta and bitmap forms, each with its own scale.",
        pk(
            _entry(0xB2, 1, [3, 7, 100], [0.5, -0.25, 2.0]),
            _entry(0xC3, 2, dense, [float(i) - 5.0 for i in range(len(dense))]),
            enc=Q8,
        ),
        [REQ_PACKED, REQ_Q8],
    )
    ok(
        "packed_no_entries",
        "PACKED Q8 with no entries.",
        pk(enc=Q8),
        [REQ_PACKED, REQ_Q8],
    )
    ok_raw(
        "f32_scale_ignored",
        "F32 PLAIN with an Entry.scale field: only a Q8 packet reads the scale.",
        CP(
            [CE(indices=(3, 50), values=(1.0, 2.0), scale_bits=f32_bits(-1.0))],
            encoding=int(F32),
            index_encoding=None,
        ),
        Packet(
            sender, sender_inc, fp, (_entry(0xB2, 1, [3, 50], [1.0, 2.0]),), F32, version_minor=1
        ),
        [REQ_Q8],
    )

    # --- invalid: the packed bytes -----------------------------------------------------------------
    def packed_bad(name: str, desc: str, raw: bytes, code: ErrorCode, nvals: int = 1) -> None:
        bad(
            name,
            desc,
            CP([CE(packed=raw, values=[1.0] * nvals)], encoding=int(F32)),
            code,
            [REQ_PACKED],
        )

    packed_bad(
        "packed_no_form_byte", "PACKED: an empty packed_indices vector (no form byte).", b"", M
    )
    packed_bad("packed_unknown_form", "PACKED: form byte 2 (only 0 and 1 exist).", bytes([2, 1]), M)
    packed_bad(
        "packed_delta_truncated",
        "PACKED delta: the last varint has its continuation bit set.",
        bytes([0, 0x83]),
        M,
    )
    packed_bad(
        "packed_delta_overlong",
        "PACKED delta: the gap 5 written overlong (85 00: a last byte 0 after another byte).",
        bytes([0, 3, 0x85, 0x00]),
        M,
        2,
    )
    packed_bad(
        "packed_varint_six_bytes",
        "PACKED delta: a varint of 6 bytes (80 80 80 80 80 01).",
        bytes([0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
        M,
    )
    packed_bad(
        "packed_varint_2_32",
        "PACKED delta: a 5-byte varint of value 2^32 (80 80 80 80 10).",
        bytes([0, 0x80, 0x80, 0x80, 0x80, 0x10]),
        M,
    )
    packed_bad(
        "packed_sum_2_32",
        "PACKED delta: first index 2^32 - 1 (the largest 5-byte varint), then a gap of 1: index 2^32.",
        bytes([0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01]),
        M,
        2,
    )
    packed_bad(
        "packed_gap_zero", "PACKED delta: indices 5 then a gap of 0.", bytes([0, 5, 0]), D, 2
    )
    packed_bad(
        "packed_delta_empty",
        "PACKED delta: the form byte alone (no index), no value.",
        bytes([0]),
        E,
        0,
    )
    packed_bad(
        "packed_bitmap_no_bytes",
        "PACKED bitmap: a base and no bitmap byte, no value.",
        bytes([1, 5]),
        E,
        0,
    )
    packed_bad(
        "packed_bitmap_all_zero",
        "PACKED bitmap: one bitmap byte 0 (no index), no value.",
        bytes([1, 5, 0]),
        E,
        0,
    )
    packed_bad(
        "packed_bitmap_trailing_zero",
        "PACKED bitmap: 01 05 01 00 (index 5, then a trailing zero byte).",
        bytes([1, 5, 1, 0]),
        M,
    )
    packed_bad(
        "packed_bitmap_truncated_base",
        "PACKED bitmap: a truncated base varint (85).",
        bytes([1, 0x85]),
        M,
    )
    packed_bad(
        "packed_bitmap_2_32",
        "PACKED bitmap: base 2^32 - 1 and bit 1 set: index 2^32.",
        bytes([1, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x02]),
        M,
    )
    packed_bad(
        "packed_length_mismatch",
        "PACKED delta: 3 indices (00 03 04 5d), 2 values.",
        bytes([0, 3, 4, 93]),
        L,
        2,
    )
    bad(
        "packed_index_out_of_range",
        "PACKED delta: index 2^32 - 1 = N of the large manifest (checked like a PLAIN index).",
        build_raw(
            CP(
                [CE(packed=bytes([0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]), values=[1.0])],
                encoding=int(F32),
            ),
            large.fingerprint,
        ),
        ErrorCode.INDEX_OUT_OF_RANGE,
        [REQ_PACKED],
        feats=[FEAT_PACKED],
        manifest=large,
    )
    # --- invalid: which vectors go with which encoding ----------------------------------------------
    bad(
        "packed_with_plain_indices",
        "PACKED: an entry with packed_indices and a non-empty indices vector.",
        CP([CE(indices=(3,), packed=bytes([0, 3]), values=[1.0])], encoding=int(F32)),
        M,
        [REQ_PACKED],
    )
    bad(
        "packed_missing_packed_indices",
        "PACKED: a 1.0 entry (indices [3, 50, 100], no packed_indices).",
        CP([CE(indices=(3, 50, 100), values=[1.0, 2.0, 3.0])], encoding=int(F32)),
        M,
        [REQ_PACKED],
    )
    bad(
        "plain_with_packed_indices",
        "PLAIN (index_encoding absent): an entry with empty indices and packed_indices 00 03 (a 1.0 "
        "receiver would see an empty entry).",
        CP(
            [CE(indices=(), packed=bytes([0, 3]), values=[1.0])],
            encoding=int(F32),
            index_encoding=None,
        ),
        M,
        [REQ_PACKED],
    )
    for v in (2, 255):
        bad(
            f"index_encoding_{v}",
            f"index_encoding {v} (only PLAIN = 0 and PACKED = 1 exist).",
            CP([CE(indices=(3,), values=[1.0])], encoding=int(F32), index_encoding=v),
            U,
            [REQ_PACKED, "DF-ERR-5"],
        )
    bad(
        "q8_with_values",
        "Q8: an entry with values (f32) instead of values8.",
        CP([CE(indices=(3, 50), values=(1.0, 2.0), scale_bits=f32_bits(1.0))], index_encoding=None),
        M,
        [REQ_Q8],
    )
    bad(
        "q8_with_values_and_values8",
        "Q8: an entry with values8 and values.",
        CP(
            [CE(indices=(3, 50), values=(1.0, 2.0), values8=(1, 2), scale_bits=f32_bits(1.0))],
            index_encoding=None,
        ),
        M,
        [REQ_Q8],
    )
    bad(
        "f32_with_values8",
        "F32: an entry with values and values8.",
        CP(
            [CE(indices=(3, 50), values=(1.0, 2.0), values8=(1, 2))],
            encoding=int(F32),
            index_encoding=None,
        ),
        M,
        [REQ_Q8],
    )
    bad(
        "f16_with_values8",
        "F16: an entry with values8 instead of values16.",
        CP([CE(indices=(3, 50), values8=(1, 2))], encoding=int(F16), index_encoding=None),
        M,
        [REQ_Q8],
    )
    bad(
        "q8_length_mismatch",
        "Q8: 2 values8 for 3 indices.",
        CP(
            [CE(indices=(3, 50, 100), values8=(1, 2), scale_bits=f32_bits(1.0))],
            index_encoding=None,
        ),
        L,
        [REQ_Q8],
    )
    bad(
        "q8_empty_entry",
        "Q8: no index, no value.",
        CP([CE(indices=(), values8=(), scale_bits=f32_bits(1.0))], index_encoding=None),
        E,
        [REQ_Q8],
    )
    for name, bits, code, what in (
        ("q8_scale_nan", 0x7FC00000, N, "NaN"),
        ("q8_scale_inf", 0x7F800000, N, "+infinity"),
        ("q8_scale_minus_inf", 0xFF800000, N, "-infinity (not finite: NON_FINITE)"),
        ("q8_scale_negative", f32_bits(-0.5), M, "-0.5"),
        ("q8_scale_minus_zero", 0x80000000, M, "-0 (the sign bit set)"),
    ):
        bad(
            name,
            f"Q8: scale {what}.",
            CP([CE(indices=(3, 50), values8=(1, 2), scale_bits=bits)], index_encoding=None),
            code,
            [REQ_Q8],
        )
    bad(
        "q8_value_overflow",
        "Q8: scale 2^127 and q = 2: the decoded value fl32(2 * 2^127) is infinite.",
        CP(
            [CE(indices=(3, 50), values8=(1, 2), scale_bits=f32_bits(2.0**127))],
            index_encoding=None,
        ),
        N,
        [REQ_Q8],
    )
    # --- sharing (DF-SEC-20) over the new vectors -------------------------------------------------
    bad(
        "packed_shared_vector",
        "PACKED: two entries whose packed_indices are one vector.",
        CP(
            [
                CE(packed=bytes([0, 3, 4]), values8=(1, 2), scale_bits=f32_bits(1.0)),
                CE(origin=0xC3, share_packed=0, values8=(3, 4), scale_bits=f32_bits(1.0)),
            ]
        ),
        M,
        [REQ_PACKED, "DF-SEC-20"],
    )
    bad(
        "q8_shared_values8",
        "Q8: two entries whose values8 are one vector.",
        CP(
            [
                CE(indices=(3, 4), values8=(1, 2), scale_bits=f32_bits(1.0)),
                CE(origin=0xC3, indices=(5, 6), share_values8=0, scale_bits=f32_bits(1.0)),
            ],
            index_encoding=None,
        ),
        M,
        [REQ_Q8, "DF-SEC-20"],
    )
    # --- check order (DF-RCV-113) -------------------------------------------------------------------
    bad(
        "order_index_encoding_and_missing_values",
        "index_encoding 2 and an entry without values vector: UNSUPPORTED_ENCODING (step 6 before 7).",
        CP([CE(indices=(3,))], encoding=int(F32), index_encoding=2),
        U,
        [REQ_ORDER, "DF-RCV-20"],
    )
    bad(
        "order_length_mismatch_and_bad_varint",
        "PACKED: entry 0 has 3 indices and 2 values, entry 1 a truncated varint: MALFORMED (the packed "
        "bytes are step 7, before LENGTH_MISMATCH).",
        CP(
            [
                CE(packed=bytes([0, 3, 4, 5]), values=[1.0, 2.0]),
                CE(origin=0xC3, packed=bytes([0, 0x83]), values=[1.0]),
            ],
            encoding=int(F32),
        ),
        M,
        [REQ_ORDER, "DF-RCV-20"],
    )
    bad(
        "order_gap_zero_and_empty",
        "PACKED: entry 0 has a gap of 0, entry 1 no index: EMPTY_ENTRY (before DUPLICATE_INDEX).",
        CP(
            [
                CE(packed=bytes([0, 5, 0]), values=[1.0, 2.0]),
                CE(origin=0xC3, packed=bytes([0]), values=[]),
            ],
            encoding=int(F32),
        ),
        E,
        [REQ_ORDER, "DF-RCV-20"],
    )
    bad(
        "order_scale_nan_and_gap_zero",
        "PACKED Q8: entry 0 has a NaN scale, entry 1 a gap of 0: DUPLICATE_INDEX (NON_FINITE is last).",
        CP(
            [
                CE(packed=bytes([0, 3]), values8=(1,), scale_bits=0x7FC00000),
                CE(origin=0xC3, packed=bytes([0, 5, 0]), values8=(1, 2), scale_bits=f32_bits(1.0)),
            ]
        ),
        D,
        [REQ_ORDER, "DF-RCV-20"],
    )
    bad(
        "order_scale_negative_and_length_mismatch",
        "Q8: entry 0 has 2 values8 for 3 indices, entry 1 a negative scale: MALFORMED (step 7 before 8).",
        CP(
            [
                CE(indices=(3, 50, 100), values8=(1, 2), scale_bits=f32_bits(1.0)),
                CE(origin=0xC3, indices=(3,), values8=(1,), scale_bits=f32_bits(-1.0)),
            ],
            index_encoding=None,
        ),
        M,
        [REQ_ORDER, "DF-RCV-20"],
    )
    for c in valid:
        c.requirements = sorted({*c.requirements, REQ_NEGOTIATION})
    for c in [*valid, *invalid]:  # the rules of the forms, the Q8 row of the encodings table
        extra = {REQ_FORMS} if REQ_PACKED in c.requirements else set()
        extra |= {REQ_Q8_ROW} if REQ_Q8 in c.requirements else set()
        c.requirements = sorted({*c.requirements, *extra})
    return valid, invalid


# ------------------------------------------------------------------------------------------------
# Generate and receive vectors (with engine_vectors' writers)
# ------------------------------------------------------------------------------------------------
def _with_features(row: dict[str, Any], feats: Sequence[str]) -> dict[str, Any]:
    have = set(row.get("features", [])) | set(feats)
    row["features"] = sorted(have)
    return row


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write ``generate/compact_*`` and ``receive/compact_*``; return their index rows (called after
    ``engine_vectors.build``, which clears those folders)."""
    import engine_vectors as ev

    rows: list[dict[str, Any]] = []
    gen_reqs = ["DF-GEN-4", "DF-GEN-5", REQ_Q8, REQ_Q8_ROW, "DF-PAR-10"]
    active = ev._pattern(7, 13, 6, 16.0)
    anchor = ev._pattern(5, 11, 5, 32.0)
    gens = [
        ev.GenCase(
            "compact_q8",
            "Q8: the top 6 of 24 (ratio 0.25) sent as Q8 (scale 2^-5); the anchor moves by the "
            "decoded values and the rounding error stays in active - anchor (error feedback).",
            gen_reqs,
            active,
            anchor,
            SyncConfig.v1_0(ratio=0.25, encoding=Q8),
        ),
        ev.GenCase(
            "compact_q8_packed",
            "Q8 with PACKED indices (the index encoding does not change the entries).",
            [*gen_reqs, "DF-PAR-110"],
            active,
            np.zeros_like(anchor),
            SyncConfig.v1_0(ratio=0.5, encoding=Q8, index_encoding=PACKED),
        ),
        ev.GenCase(
            "compact_q8_subnormal",
            "Q8: deltas of a few subnormals: scale 2^-149, every value sent exactly.",
            gen_reqs,
            ev._bits_f32([(i % 5) * 3 for i in range(ev.N)]),
            np.zeros(ev.N, np.float32),
            SyncConfig.v1_0(ratio=0.25, encoding=Q8),
        ),
        ev.GenCase(
            "compact_q8_largest",
            "Q8: deltas up to the largest finite f32: scale 2^122, q clamped to 63 so that q * scale "
            "stays finite.",
            gen_reqs,
            ev._f32([3.4028234663852886e38 * ((i % 7) - 3) / 3 for i in range(ev.N)]),
            np.zeros(ev.N, np.float32),
            SyncConfig.v1_0(ratio=0.25, encoding=Q8),
        ),
    ]
    for g in gens:
        feats = [FEAT_Q8, *([FEAT_PACKED] if g.config.index_encoding is PACKED else [])]
        rows.append(_with_features(ev._write_generate(vectors_dir, g), feats))

    def pkt(
        *entries: Entry, sender: int = ev.B, enc: ValueEncoding = F32, packed: bool = False
    ) -> bytes:
        return encode_packet(
            Packet(
                sender,
                ev.B_INC if sender == ev.B else ev.C_INC,
                ev.FP,
                tuple(entries),
                enc,
                index_encoding=PACKED if packed else IndexEncoding.PLAIN,
            )
        )

    e1 = ev.ent(ev.C, ev.C_INC, 1, 0, [1, 4, 9, 16], [0.75, -3.0, 0.01, 1.5])
    e2 = ev.ent(ev.D, ev.D_INC, 1, 1, [0, 2, 4, 6, 8, 10], [1e-3, 2.0, -0.5, 0.125, 7.0, -7.0])
    rly = ["DF-RLY-1", "DF-RLY-2", "DF-RLY-3", "DF-RCV-5", REQ_Q8]
    recvs = [
        ev.RecvCase(
            "compact_q8_accept",
            "A Q8 packet: its entries are accepted with the decoded values (fl32(q * scale)).",
            ["DF-RCV-1", "DF-RCV-6", REQ_Q8],
            [pkt(e1, e2, enc=Q8)],
        ),
        ev.RecvCase(
            "compact_packed_f16_accept",
            "A PACKED F16 packet from C: accepted.",
            ["DF-RCV-1", "DF-RCV-6", REQ_PACKED],
            [pkt(e1, e2, enc=F16, packed=True)],
        ),
        ev.RecvCase(
            "compact_relay_as_q8",
            "A node that sends Q8 receives F32 entries (alpha 0.5): it relays the damped values "
            "re-encoded as Q8, each relayed entry with its own new scale.",
            rly,
            [pkt(e1, e2)],
            config=SyncConfig.v1_0(alpha=0.5, encoding=Q8),
        ),
        ev.RecvCase(
            "compact_relay_q8_packed",
            "A node that sends Q8 + PACKED receives a Q8 + PACKED packet (alpha 0.75): the relay "
            "packet is Q8 + PACKED with new scales.",
            [*rly, REQ_PACKED, "DF-PAR-110"],
            [pkt(e1, e2, enc=Q8, packed=True)],
            config=SyncConfig.v1_0(alpha=0.75, encoding=Q8, index_encoding=PACKED),
        ),
        ev.RecvCase(
            "compact_relay_q8_as_f32",
            "A node that sends F32 receives Q8: it relays the damped decoded values as F32.",
            rly,
            [pkt(e1, e2, enc=Q8)],
            config=SyncConfig.v1_0(alpha=0.5),
        ),
    ]
    for r in recvs:
        feats: list[str] = []
        for buf in r.packets:
            p = decode_packet(buf)
            feats += features(int(p.encoding), int(p.index_encoding))
        feats += features(int(r.config.encoding), int(r.config.index_encoding))
        rows.append(_with_features(ev._write_receive(vectors_dir, r), feats))
    return rows
