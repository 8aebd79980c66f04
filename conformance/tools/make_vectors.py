#!/usr/bin/env python3
"""The single generator of the DeltaFabric v1 conformance vectors (``conformance/vectors/``).

Usage::

    .venv/bin/python conformance/tools/make_vectors.py            # rewrite conformance/vectors/
    .venv/bin/python conformance/tools/make_vectors.py --out DIR  # write into DIR instead
    .venv/bin/python conformance/tools/make_vectors.py --check    # exit 1 if the checked-in files
    are stale

Output is deterministic: the same code writes the same bytes. This tool writes ``decode/valid/``,
``decode/invalid/`` and ``index.json``. Other kinds of vectors (generate, receive) come from
``conformance/tools/engine_vectors.py`` when it exists: its ``build(vectors_dir: Path) ->
list[dict]`` writes its files under ``vectors_dir`` and returns its index rows, which this tool
appends to ``index.json``.

Valid packets are built with the reference encoder (``delta_fabric.wire.encode_packet``); faulty
ones with the raw builder below (any field may be omitted or hold any value) or by patching bytes of
a valid packet. Every vector is checked against the reference decoder while it is written, so a
vector whose fault is not the one it is named after cannot be written silently.
"""

from __future__ import annotations

import argparse
import base64
import filecmp
import importlib.util
import json
import shutil
import struct
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.manifest import Manifest
from delta_fabric.wire import (
    DEFAULT_MAX_PACKET_SIZE,
    FILE_IDENTIFIER,
    Entry,
    IndexEncoding,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
    packet_to_json,
    quantize_packet,
    validate_packet,
)

TOOLS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TOOLS_DIR.parent.parent
DEFAULT_VECTORS_DIR = REPO_ROOT / "conformance" / "vectors"
ENGINE_VECTORS = TOOLS_DIR / "engine_vectors.py"
VERDICT_VECTORS = TOOLS_DIR / "verdict_vectors.py"
#: Further generator modules, each with ``build(vectors_dir) -> index rows`` (added in 1.1).
COMPACT_VECTORS = TOOLS_DIR / "compact_vectors.py"  # 1.1 section 6.8: decode, generate, receive
EXTRA_VECTORS = (
    TOOLS_DIR / "snapshot_vectors.py",
    TOOLS_DIR / "forward_vectors.py",
    COMPACT_VECTORS,
    TOOLS_DIR / "repair_vectors.py",
    TOOLS_DIR / "rust_pinning_vectors.py",  # after snapshot_vectors.py: adds to snapshot/
    TOOLS_DIR / "snapshot_serve_vectors.py",  # snapshot/serve: the server side (DF-ZEN-5; h63)
    TOOLS_DIR / "signed_vectors.py",  # signed entries (1.1, spec section 13.1)
    TOOLS_DIR / "pinning_vectors.py",  # vectors that kill mutants of the Python core (h22)
    TOOLS_DIR / "incarnation_vectors.py",  # the incarnation bound (1.1, DF-RCV-175; h31)
    TOOLS_DIR / "config_vectors.py",  # parameters and manifest as the driver reads them (h40)
    TOOLS_DIR / "selection_vectors.py",  # N = 2^17: the sampled top-k paths (h40)
    TOOLS_DIR / "fast_vectors.py",  # fast mode judged by DF-GEN-7's bounds (1.1; session 11)
    TOOLS_DIR / "strength_vectors.py",  # kill survivors of the session-6 mutation campaign (h54)
    TOOLS_DIR / "rust_core_vectors.py",  # kill mutants of the Rust core (h55)
    TOOLS_DIR / "python_core_vectors.py",  # kill mutants of signing, compact, snapshot (h59)
)
INDEX_VERSION = 1

# ------------------------------------------------------------------------------------------------
# Requirement ids (spec/protocol.md) cited by the decode vectors.
# ------------------------------------------------------------------------------------------------
REQ_FORMAT = "DF-PKT-1"  # FlatBuffers of the schema, identifier DFP1, version_major 1, any minor
REQ_NONZERO = "DF-PKT-2"  # ids, incarnations, seqs are non-zero u64
REQ_MULTI_ORIGIN = "DF-PKT-3"  # entries of several origins may share a packet
REQ_EMPTY_PACKET = "DF-PKT-4"  # a packet with zero entries is valid
REQ_ENCODING = "DF-PKT-5"  # values (F32) or values16 (F16/BF16), as many as indices, finite
REQ_VERIFIABLE = "DF-PKT-6"  # buffers satisfy the FlatBuffers verifier rules (aligned)
REQ_NOT_CANONICAL = "DF-PKT-7"  # explicit or omitted defaults, vtable sharing...
REQ_FINGERPRINT_FIELD = "DF-PKT-8"  # 32-byte fingerprint
REQ_HOPS = "DF-PKT-9"
REQ_INDICES = "DF-PKT-10"  # non-empty, strictly increasing, < N
REQ_BY_ENCODING = {
    ValueEncoding.F32: "DF-PKT-12",
    ValueEncoding.F16: "DF-PKT-13",
    ValueEncoding.BF16: "DF-PKT-14",
    ValueEncoding.Q8: "DF-PKT-115",  # 1.1, section 6.4 / 6.8
}
REQ_QUANTIZE = "DF-GEN-4"  # F16/BF16: round to nearest even, clamped to the finite range
REQ_FINGERPRINT = "DF-MAN-5"
REQ_REJECT = "DF-RCV-1"  # the packet is the unit of rejection, one code
REQ_TWO_PARTS = "DF-RCV-8"  # decode (context-free) then validate (context)
REQ_MINOR = "DF-VER-2"  # every minor accepted, unknown fields ignored, other majors rejected
REQ_EVOLUTION = "DF-VER-3"  # minors add fields at the end / unknown encodings rejected
REQ_IDENTIFIER_STABLE = "DF-VER-5"  # DFP1 in every version: other majors are UNSUPPORTED_VERSION
REQ_HOSTILE = "DF-SEC-1"  # every offset and length checked before use
REQ_JSON_FLOAT = (
    "DF-CNF-20"  # f32 values in JSON show they are floats (-0.0), non-finite as strings
)
#: DF-ERR-1..13 are the 1.0 table in its order; codes added in 1.1 have ids of their own block.
REQ_ERR: dict[ErrorCode, str] = {
    **{code: f"DF-ERR-{i}" for i, code in enumerate(list(ErrorCode)[:13], start=1)},
    ErrorCode.NON_FINITE_RESULT: "DF-ERR-50",
}
#: Ids every invalid vector of a code exercises, besides DF-RCV-1 and its DF-ERR id.
REQ_BY_CODE: dict[ErrorCode, list[str]] = {
    ErrorCode.OVERSIZE: [REQ_HOSTILE],
    ErrorCode.BAD_IDENTIFIER: [REQ_FORMAT],
    ErrorCode.MALFORMED: [],
    ErrorCode.UNSUPPORTED_VERSION: [REQ_FORMAT, REQ_MINOR],
    ErrorCode.UNSUPPORTED_ENCODING: [REQ_EVOLUTION],
    ErrorCode.FINGERPRINT_MISMATCH: [
        REQ_FINGERPRINT_FIELD,
        REQ_FINGERPRINT,
        REQ_TWO_PARTS,
    ],
    ErrorCode.HOP_LIMIT: [REQ_HOPS, REQ_TWO_PARTS],
    ErrorCode.LENGTH_MISMATCH: [REQ_ENCODING],
    ErrorCode.EMPTY_ENTRY: [REQ_INDICES],
    ErrorCode.INDEX_OUT_OF_RANGE: [REQ_INDICES, REQ_TWO_PARTS],
    ErrorCode.UNSORTED_INDICES: [REQ_INDICES],
    ErrorCode.DUPLICATE_INDEX: [REQ_INDICES],
    ErrorCode.NON_FINITE: [REQ_ENCODING],
}


def invalid_requirements(name: str, code: ErrorCode) -> list[str]:
    """The requirement ids of the invalid vector ``name`` (one fault, reported as ``code``)."""
    req = {REQ_REJECT, REQ_ERR[code], *REQ_BY_CODE[code]}
    if name.startswith("f16_") or "_f16" in name:
        req.add(REQ_BY_ENCODING[ValueEncoding.F16])
    if name.startswith("bf16_") or "_bf16" in name:
        req.add(REQ_BY_ENCODING[ValueEncoding.BF16])
    if code is ErrorCode.MALFORMED:
        if name.startswith("fingerprint_"):
            req.add(REQ_FINGERPRINT_FIELD)
        elif name.startswith(("sender", "origin", "incarnation", "seq")):
            req.add(REQ_NONZERO)
        elif "values" in name:
            req.add(REQ_ENCODING)
        elif name == "missing_indices_vector":
            req.add(REQ_INDICES)
        elif name.startswith("heard_"):
            req.add("DF-PKT-60")
        else:  # offsets, lengths, vtables, truncation, required tables
            req.add(REQ_HOSTILE)
    if name in ("snapshot_identifier", "version_major_2"):
        req.add(REQ_IDENTIFIER_STABLE)
    return sorted(req)


def valid_requirements(name: str, listed: Sequence[str], encoding: ValueEncoding) -> list[str]:
    """The requirement ids of the valid vector ``name``: its own, plus the format ones that every
    valid vector exercises."""
    return sorted({*listed, REQ_FORMAT, REQ_VERIFIABLE, REQ_TWO_PARTS, REQ_BY_ENCODING[encoding]})


# ------------------------------------------------------------------------------------------------
# Manifests and contexts
# ------------------------------------------------------------------------------------------------
#: The vector manifest: 3 tensors (one scalar), N = 101.
VECTOR_MANIFEST = Manifest.from_named_shapes(
    [("layer.weight", (10, 9)), ("layer.bias", (10,)), ("scale", ())]
)
#: A manifest whose N = 2**32 - 1, for the largest indices (never materialised).
LARGE_MANIFEST = Manifest.from_named_shapes([("table.weight", (65535, 65537))])
HOP_LIMIT = 16

SENDER = 0x5EED0000000000A1
SENDER_INC = 0x00062A1B2C3D4E5F  # microseconds since the epoch style
ORIGIN_B = 0x00000000000000B2
ORIGIN_C = 0xC3C3C3C3C3C3C3C3
INC_B = 1
INC_C = 0x0000000000000777


#: Allowed ranges of a decode context (DF-PAR-5, DF-PAR-6; N of DF-MAN-3 with u32 indices): the
#: generator refuses a vector outside them, as the runner does (erratum 1.1: ``oversize`` once used 295).
CONTEXT_RANGES = {
    "hop_limit": (0, 255),
    "max_packet_size": (296, 2**31 - 1),
    "num_params": (1, 2**32 - 1),
}


def context(
    manifest: Manifest = VECTOR_MANIFEST, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE
) -> dict[str, Any]:
    values = {
        "hop_limit": HOP_LIMIT,
        "max_packet_size": max_packet_size,
        "num_params": manifest.num_params,
    }
    for name, (lo, hi) in CONTEXT_RANGES.items():
        if not lo <= values[name] <= hi:
            raise ValueError(
                f"context {name} {values[name]} outside its allowed range [{lo}, {hi}]"
            )
    return {
        "fingerprint": manifest.fingerprint.hex(),
        "num_params": manifest.num_params,
        "hop_limit": HOP_LIMIT,
        "max_packet_size": max_packet_size,
    }


def manifest_json(manifest: Manifest) -> dict[str, Any]:
    return {
        "tensors": [
            {"name": t.name, "dtype": "f32", "shape": list(t.shape)} for t in manifest.tensors
        ]
    }


# ------------------------------------------------------------------------------------------------
# Raw builder: any field may be absent (None) or hold any value, including ones the encoder refuses.
# ------------------------------------------------------------------------------------------------
@dataclass
class RawEntry:
    origin: int | None = ORIGIN_B
    incarnation: int | None = INC_B
    seq: int | None = 1
    hops: int | None = 0
    indices: Sequence[int] | None = (3, 50, 100)
    values: Sequence[float] | None = (0.5, -0.25, 2.0)  # f32
    values16: Sequence[int] | None = None  # raw 16-bit patterns
    unknown_field: int | None = None  # a u32 in slot 15 (a field from a future minor version)


@dataclass
class RawPacket:
    version_major: int | None = 1
    version_minor: int | None = 0
    sender: int | None = SENDER
    sender_incarnation: int | None = SENDER_INC
    fingerprint: bytes | None = VECTOR_MANIFEST.fingerprint
    encoding: int | None = 0
    entries: list[RawEntry] | None = field(default_factory=lambda: [RawEntry()])
    heard: Sequence[int] | None = None  # slot 7 (1.1): raw u64 node ids
    unknown_field: int | None = None  # a u32 in slot 15 (a field from a future minor version)


def build_raw(p: RawPacket) -> bytes:
    b = flatbuffers.Builder(1024)
    b.ForceDefaults(True)  # write exactly the fields that are not None, zeros included
    entry_offsets = []
    for e in p.entries or []:
        idx = (
            b.CreateNumpyVector(np.asarray(e.indices, dtype="<u4"))
            if e.indices is not None
            else None
        )
        val = (
            b.CreateNumpyVector(np.asarray(e.values, dtype="<f4")) if e.values is not None else None
        )
        v16 = (
            b.CreateNumpyVector(np.asarray(e.values16, dtype="<u2"))
            if e.values16 is not None
            else None
        )
        b.StartObject(16 if e.unknown_field is not None else 7)
        for slot, x in ((0, e.origin), (1, e.incarnation), (2, e.seq)):
            if x is not None:
                b.PrependUint64Slot(slot, x, 0)
        if e.hops is not None:
            b.PrependUint8Slot(3, e.hops, 0)
        for slot, off in ((4, idx), (5, val), (6, v16)):
            if off is not None:
                b.PrependUOffsetTRelativeSlot(slot, off, 0)
        if e.unknown_field is not None:
            b.PrependUint32Slot(15, e.unknown_field, 0)
        entry_offsets.append(b.EndObject())
    entries = None
    if p.entries is not None:
        b.StartVector(4, len(entry_offsets), 4)
        for off in reversed(entry_offsets):
            b.PrependUOffsetTRelative(off)
        entries = b.EndVector()
    fp = b.CreateByteVector(p.fingerprint) if p.fingerprint is not None else None
    heard = b.CreateNumpyVector(np.asarray(p.heard, dtype="<u8")) if p.heard is not None else None
    b.StartObject(16 if p.unknown_field is not None else 8 if heard is not None else 7)
    if p.version_major is not None:
        b.PrependUint16Slot(0, p.version_major, 0)
    if p.version_minor is not None:
        b.PrependUint16Slot(1, p.version_minor, 0)
    for slot, x in ((2, p.sender), (3, p.sender_incarnation)):
        if x is not None:
            b.PrependUint64Slot(slot, x, 0)
    if fp is not None:
        b.PrependUOffsetTRelativeSlot(4, fp, 0)
    if p.encoding is not None:
        b.PrependUint8Slot(5, p.encoding, 0)
    if entries is not None:
        b.PrependUOffsetTRelativeSlot(6, entries, 0)
    if heard is not None:
        b.PrependUOffsetTRelativeSlot(7, heard, 0)
    if p.unknown_field is not None:
        b.PrependUint32Slot(15, p.unknown_field, 0)
    b.Finish(b.EndObject(), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


# ------------------------------------------------------------------------------------------------
# Locating things in a valid buffer, for byte patches
# ------------------------------------------------------------------------------------------------
def _u16(buf: bytes | bytearray, pos: int) -> int:
    return int(struct.unpack_from("<H", buf, pos)[0])


def _u32(buf: bytes | bytearray, pos: int) -> int:
    return int(struct.unpack_from("<I", buf, pos)[0])


def _i32(buf: bytes | bytearray, pos: int) -> int:
    return int(struct.unpack_from("<i", buf, pos)[0])


def root_table(buf: bytes | bytearray) -> int:
    return _u32(buf, 0)


def vtable_of(buf: bytes | bytearray, table: int) -> int:
    return table - _i32(buf, table)


def vtable_slot_pos(buf: bytes | bytearray, table: int, slot: int) -> int:
    """Position of the u16 voffset of ``slot`` in the table's vtable (the slot must be present)."""
    vt = vtable_of(buf, table)
    assert 4 + 2 * slot < _u16(buf, vt), "slot not in vtable"
    return vt + 4 + 2 * slot


def field_pos(buf: bytes | bytearray, table: int, slot: int) -> int:
    off = _u16(buf, vtable_slot_pos(buf, table, slot))
    assert off != 0, "field absent"
    return table + off


def vector_len_pos(buf: bytes | bytearray, table: int, slot: int) -> int:
    """Position of the u32 length of the vector in field ``slot``."""
    p = field_pos(buf, table, slot)
    return p + _u32(buf, p)


def entry_table(buf: bytes | bytearray, j: int) -> int:
    elem = vector_len_pos(buf, root_table(buf), 6) + 4 + 4 * j
    return elem + _u32(buf, elem)


def patched(buf: bytes, pos: int, fmt: str, value: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


# ------------------------------------------------------------------------------------------------
# Vector cases
# ------------------------------------------------------------------------------------------------
@dataclass
class ValidCase:
    name: str
    description: str
    requirements: list[str]
    packet: Packet | None = None  # encoded with encode_packet
    raw: bytes | None = None  # or given as bytes (then `expect` is the packet they must decode to)
    expect: Packet | None = None
    manifest: Manifest = VECTOR_MANIFEST
    # False: the packet holds values no encoder writes (a raw Q8 vector): no encode test
    encode: bool = True


@dataclass
class InvalidCase:
    name: str
    description: str
    error: ErrorCode
    data: bytes
    requirements: list[str] = field(default_factory=list)
    manifest: Manifest = VECTOR_MANIFEST
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE
    features: list[str] = field(default_factory=list)  # OPTIONAL features it needs (DF-CNF-30)


def f32(xs: Sequence[float]) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray(xs, dtype=np.float64).astype(np.float32)


def bits_f32(*bits: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def u32(xs: Sequence[int] | range) -> np.ndarray[Any, np.dtype[np.uint32]]:
    return np.asarray(list(xs), dtype=np.uint32)


def entry(
    origin: int,
    incarnation: int,
    seq: int,
    hops: int,
    indices: Sequence[int] | range,
    values: Any,
) -> Entry:
    return Entry(
        origin,
        incarnation,
        seq,
        hops,
        u32(indices),
        np.asarray(values, dtype=np.float32),
    )


def packet(
    *entries: Entry,
    encoding: ValueEncoding = ValueEncoding.F32,
    manifest: Manifest = VECTOR_MANIFEST,
    sender: int = SENDER,
    sender_incarnation: int = SENDER_INC,
    version_minor: int = 0,
    heard: tuple[int, ...] | None = None,
) -> Packet:
    return Packet(
        sender=sender,
        sender_incarnation=sender_incarnation,
        fingerprint=manifest.fingerprint,
        entries=tuple(entries),
        encoding=encoding,
        version_minor=version_minor,
        heard=heard,
    )


def base_entry() -> Entry:
    return entry(SENDER, SENDER_INC, 7, 0, [0, 9, 42, 100], [0.125, -1.5, 3.0e-3, 7.0])


def valid_cases() -> list[ValidCase]:
    n = VECTOR_MANIFEST.num_params
    f16, bf16 = ValueEncoding.F16, ValueEncoding.BF16
    pkt, fmt = REQ_ENCODING, REQ_FORMAT
    cases = [
        ValidCase(
            "single_entry_f32",
            "One entry of the sender's own delta, f32.",
            [fmt, pkt],
            packet(base_entry()),
        ),
        ValidCase(
            "single_value",
            "One entry with a single index (the scalar tensor, the last flat index).",
            [fmt, "DF-MAN-3"],
            packet(entry(SENDER, SENDER_INC, 1, 0, [n - 1], [-0.75])),
        ),
        ValidCase(
            "multi_origin",
            "Own entry first, then relayed entries of two other origins.",
            [fmt, REQ_MULTI_ORIGIN],
            packet(
                base_entry(),
                entry(ORIGIN_B, INC_B, 3, 1, [1, 2, 3], [1.0, 2.0, 3.0]),
                entry(
                    ORIGIN_C,
                    INC_C,
                    900,
                    5,
                    [10, 20, 30, 40, 50],
                    [-0.5, 0.25, -0.125, 1e-3, 1e3],
                ),
            ),
        ),
        ValidCase(
            "relay_only",
            "A relaying node's packet: no own entry, all entries from another origin "
            "with hops >= 1.",
            [fmt, REQ_MULTI_ORIGIN, "DF-RLY-4"],
            packet(entry(ORIGIN_B, INC_B, 12, 2, [5, 6], [0.5, 0.5])),
        ),
        ValidCase(
            "same_origin_two_seqs",
            "Two entries of one origin and incarnation with consecutive seqs, "
            "disjoint index ranges "
            "(a split entry).",
            [fmt, "DF-GEN-6"],
            packet(
                entry(SENDER, SENDER_INC, 41, 0, range(0, 50, 2), np.linspace(-1, 1, 25)),
                entry(SENDER, SENDER_INC, 42, 0, range(51, 101, 2), np.linspace(1, -1, 25)),
            ),
        ),
        ValidCase(
            "same_origin_two_incarnations",
            "Entries of one origin under two incarnations (a restarted node), same seq.",
            [fmt, REQ_MULTI_ORIGIN],
            packet(
                entry(ORIGIN_C, INC_C, 1, 1, [7], [1.0]),
                entry(ORIGIN_C, INC_C + 1, 1, 1, [7], [2.0]),
            ),
        ),
        ValidCase(
            "zero_entries",
            "A packet with no entry is valid (a no-op).",
            [fmt, REQ_EMPTY_PACKET],
            packet(),
        ),
        ValidCase(
            "zero_entries_f16",
            "A packet with no entry, F16 encoding.",
            [fmt, REQ_EMPTY_PACKET, pkt],
            packet(encoding=f16),
        ),
        ValidCase(
            "max_hops",
            "An entry with hops == hop_limit (16) is accepted.",
            [fmt, REQ_ERR[ErrorCode.HOP_LIMIT]],
            packet(entry(ORIGIN_B, INC_B, 5, HOP_LIMIT, [0, 1], [1.0, -1.0])),
        ),
        ValidCase(
            "all_indices",
            "One entry covering every flat index 0..N-1.",
            [fmt, "DF-MAN-3"],
            packet(entry(SENDER, SENDER_INC, 2, 0, range(n), (np.arange(n) - 50) / 64.0)),
        ),
        ValidCase(
            "max_u64_ids",
            "origin, incarnation, seq, sender and sender_incarnation at 2**64 - 1.",
            [fmt, REQ_NONZERO],
            packet(
                entry(2**64 - 1, 2**64 - 1, 2**64 - 1, 0, [4], [1.0]),
                sender=2**64 - 1,
                sender_incarnation=2**64 - 1,
            ),
        ),
        ValidCase(
            "min_ids",
            "origin, incarnation, seq, sender and sender_incarnation all 1.",
            [fmt, REQ_NONZERO],
            packet(entry(1, 1, 1, 0, [0], [1.0]), sender=1, sender_incarnation=1),
        ),
        ValidCase(
            "large_indices",
            "Manifest of N = 2**32 - 1 values; indices up to N - 1 = 4294967294.",
            [fmt, REQ_ERR[ErrorCode.INDEX_OUT_OF_RANGE]],
            packet(
                entry(
                    SENDER,
                    SENDER_INC,
                    3,
                    0,
                    [0, 2**31, 2**32 - 3, 2**32 - 2],
                    [1.0, 2.0, 3.0, 4.0],
                ),
                manifest=LARGE_MANIFEST,
            ),
            manifest=LARGE_MANIFEST,
        ),
        ValidCase(
            "extreme_f32",
            "Largest finite f32 magnitudes, smallest normal, 1e30 and 1e-30.",
            [fmt, pkt],
            packet(
                entry(
                    SENDER,
                    SENDER_INC,
                    4,
                    0,
                    [0, 1, 2, 3, 4, 5],
                    np.concatenate(
                        [
                            bits_f32(0x7F7FFFFF, 0xFF7FFFFF, 0x00800000),
                            f32([1e30, -1e-30, 1.0]),
                        ]
                    ),
                )
            ),
        ),
        ValidCase(
            "subnormal_f32",
            "f32 subnormals: smallest positive and negative, largest subnormal.",
            [fmt, pkt],
            packet(
                entry(
                    SENDER,
                    SENDER_INC,
                    5,
                    0,
                    [10, 11, 12, 13],
                    bits_f32(0x00000001, 0x80000001, 0x007FFFFF, 0x00400000),
                )
            ),
        ),
        ValidCase(
            "signed_zeros",
            "Zero values on the wire decode as themselves: +0.0 and -0.0 "
            "(receivers do not reject them).",
            [fmt, pkt],
            packet(
                entry(
                    ORIGIN_B,
                    INC_B,
                    6,
                    1,
                    [20, 21, 22],
                    bits_f32(0x00000000, 0x80000000, 0x3F800000),
                )
            ),
        ),
        ValidCase(
            "f16_basic",
            "F16 encoding: values16 holds binary16 bit patterns; "
            "decoded values are exact f16 values.",
            [fmt, pkt, REQ_QUANTIZE],
            packet(
                base_entry(),
                entry(ORIGIN_B, INC_B, 9, 1, [1, 2, 3], [0.1, -0.2, 1 / 3]),
                encoding=f16,
            ),
        ),
        ValidCase(
            "f16_extremes",
            "F16: largest finite (65504), values clamped to it (1e6, -1e9), "
            "smallest normal 2**-14.",
            [fmt, pkt, REQ_QUANTIZE],
            packet(
                entry(
                    SENDER,
                    SENDER_INC,
                    10,
                    0,
                    [0, 1, 2, 3, 4],
                    [65504.0, -65504.0, 1e6, -1e9, 2.0**-14],
                ),
                encoding=f16,
            ),
        ),
        ValidCase(
            "f16_subnormals",
            "F16 subnormals (2**-24, 2**-20, largest subnormal) and a value rounding to -0.0.",
            [fmt, pkt, REQ_QUANTIZE],
            packet(
                entry(
                    SENDER,
                    SENDER_INC,
                    11,
                    0,
                    [30, 31, 32, 33],
                    [2.0**-24, -(2.0**-20), 2.0**-14 - 2.0**-24, -1e-9],
                ),
                encoding=f16,
            ),
        ),
        ValidCase(
            "f16_rounding_ties",
            "F16 round-to-nearest-even at ties: 1 + 2**-11 -> 1, 1 + 3 * 2**-11 -> 1 + 2**-9.",
            [fmt, pkt, REQ_QUANTIZE],
            packet(
                entry(
                    SENDER,
                    SENDER_INC,
                    12,
                    0,
                    [40, 41],
                    [1 + 2.0**-11, 1 + 3 * 2.0**-11],
                ),
                encoding=f16,
            ),
        ),
        ValidCase(
            "bf16_basic",
            "BF16 encoding: values16 holds the upper 16 bits of binary32 after rounding.",
            [fmt, pkt, REQ_QUANTIZE],
            packet(
                base_entry(),
                entry(ORIGIN_C, INC_C, 2, 3, [60, 61, 62], [0.1, -0.2, 1 / 3]),
                encoding=bf16,
            ),
        ),
        ValidCase(
            "bf16_extremes",
            "BF16: largest finite (0x7F7F), f32 max clamped to it, smallest subnormal, 1e-30.",
            [fmt, pkt, REQ_QUANTIZE],
            packet(
                entry(
                    SENDER,
                    SENDER_INC,
                    13,
                    0,
                    [70, 71, 72, 73, 74],
                    np.concatenate(
                        [
                            bits_f32(0x7F7F0000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00010000),
                            f32([1e-30]),
                        ]
                    ),
                ),
                encoding=bf16,
            ),
        ),
        ValidCase(
            "bf16_rounding_ties",
            "BF16 round-to-nearest-even at ties: 1 + 2**-8 -> 1, 1 + 3 * 2**-8 -> 1 + 2**-6.",
            [fmt, pkt, REQ_QUANTIZE],
            packet(
                entry(SENDER, SENDER_INC, 14, 0, [80, 81], [1 + 2.0**-8, 1 + 3 * 2.0**-8]),
                encoding=bf16,
            ),
        ),
        ValidCase(
            "version_minor_7",
            "Receivers accept any minor version of major 1.",
            [fmt],
            packet(base_entry(), version_minor=7),
        ),
        ValidCase(
            "heard_advertisement",
            "(1.1) Packet.heard: the sender advertises three node ids it hears, ascending.",
            [fmt, "DF-PKT-60", "DF-RLY-61"],
            packet(base_entry(), version_minor=1, heard=(ORIGIN_B, 0x5EED0000000000A0, ORIGIN_C)),
        ),
        ValidCase(
            "heard_empty",
            "(1.1) an empty Packet.heard (a sender that has heard nobody yet) with no entry: the "
            "start-up advertisement of relay policy NEEDED.",
            [fmt, "DF-PKT-60", "DF-RLY-63", "DF-PKT-4"],
            packet(version_minor=1, heard=()),
        ),
        ValidCase(
            "many_entries",
            "64 entries of 64 origins, 1 value each.",
            [fmt, REQ_MULTI_ORIGIN],
            packet(
                *[
                    entry(0x1000 + k, 1 + k % 3, 1 + k, k % 4, [k], [k / 8.0 - 4.0])
                    for k in range(64)
                ]
            ),
        ),
    ]
    fp = VECTOR_MANIFEST.fingerprint
    expected_unknown = packet(entry(ORIGIN_B, INC_B, 1, 0, [3, 50, 100], [0.5, -0.25, 2.0]))
    cases += [
        ValidCase(
            "unknown_fields",
            "Packet and Entry tables with an extra field "
            "(Packet slot 15, Entry slot 15, from a future minor version): ignored.",
            [fmt],
            raw=build_raw(
                RawPacket(
                    version_minor=1,
                    unknown_field=0xDEADBEEF,
                    entries=[RawEntry(unknown_field=12345)],
                )
            ),
            expect=Packet(SENDER, SENDER_INC, fp, expected_unknown.entries, version_minor=1),
        ),
        ValidCase(
            "defaults_omitted",
            "hops 0, encoding F32 and version_minor 0 absent from the tables (schema defaults).",
            [fmt],
            raw=build_raw(
                RawPacket(version_minor=None, encoding=None, entries=[RawEntry(hops=None)])
            ),
            expect=expected_unknown,
        ),
        ValidCase(
            "defaults_explicit",
            "hops 0, encoding F32 and version_minor 0 written explicitly.",
            [fmt],
            raw=build_raw(RawPacket(version_minor=0, encoding=0, entries=[RawEntry(hops=0)])),
            expect=expected_unknown,
        ),
    ]
    extra = {
        "single_value": [REQ_INDICES],
        "all_indices": [REQ_INDICES],
        "large_indices": [REQ_INDICES],
        "max_hops": [REQ_HOPS],
        "relay_only": [REQ_HOPS],
        "unknown_fields": [REQ_MINOR, REQ_EVOLUTION],
        "version_minor_7": [REQ_MINOR],
        "defaults_omitted": [REQ_NOT_CANONICAL],
        "defaults_explicit": [REQ_NOT_CANONICAL],
        "signed_zeros": [REQ_ENCODING, REQ_JSON_FLOAT],
        "extreme_f32": [REQ_ENCODING],
        "subnormal_f32": [REQ_ENCODING],
    }
    for c in cases:
        c.requirements = [*c.requirements, *extra.get(c.name, [])]
    return cases


def invalid_cases() -> list[InvalidCase]:
    good = encode_packet(
        packet(base_entry(), entry(ORIGIN_B, INC_B, 3, 1, [1, 2, 3], [1.0, 2.0, 3.0]))
    )
    # oversize: large enough that one byte less is still an allowed max_packet_size (>= 296)
    big = encode_packet(
        packet(base_entry(), entry(ORIGIN_B, INC_B, 3, 1, list(range(20)), [0.5] * 20))
    )
    root = root_table(good)
    e0 = entry_table(good, 0)
    e1 = entry_table(good, 1)
    n = VECTOR_MANIFEST.num_params
    M, V, U, E, L, F, R, X = (
        ErrorCode.MALFORMED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_ENCODING,
        ErrorCode.EMPTY_ENTRY,
        ErrorCode.LENGTH_MISMATCH,
        ErrorCode.FINGERPRINT_MISMATCH,
        ErrorCode.INDEX_OUT_OF_RANGE,
        ErrorCode.NON_FINITE,
    )

    def raw(**kw: Any) -> bytes:
        return build_raw(RawPacket(**kw))

    def raw_entry(**kw: Any) -> bytes:
        return build_raw(RawPacket(entries=[RawEntry(**kw)]))

    def raw16(enc: int, **kw: Any) -> bytes:
        kw.setdefault("values", None)
        return build_raw(RawPacket(encoding=enc, entries=[RawEntry(**kw)]))

    cases = [
        InvalidCase(
            "oversize",
            "A valid packet one byte longer than the context's max_packet_size (which is within "
            "its allowed range, DF-PAR-6).",
            ErrorCode.OVERSIZE,
            big,
            max_packet_size=len(big) - 1,
        ),
        InvalidCase("empty_buffer", "Zero bytes.", ErrorCode.BAD_IDENTIFIER, b""),
        InvalidCase(
            "buffer_7_bytes",
            "Seven bytes: too short for the identifier.",
            ErrorCode.BAD_IDENTIFIER,
            good[:7],
        ),
        InvalidCase(
            "bad_file_identifier",
            "Bytes 4..8 are 'DFP2'.",
            ErrorCode.BAD_IDENTIFIER,
            good[:4] + b"DFP2" + good[8:],
        ),
        InvalidCase(
            "snapshot_identifier",
            "A buffer with the snapshot identifier 'DFS1'.",
            ErrorCode.BAD_IDENTIFIER,
            good[:4] + b"DFS1" + good[8:],
        ),
        InvalidCase(
            "heard_zero",
            "(1.1) Packet.heard holds node id 0.",
            M,
            raw(version_minor=1, heard=[0, ORIGIN_B]),
        ),
        InvalidCase(
            "heard_unsorted",
            "(1.1) Packet.heard is not strictly increasing (a repeated id).",
            M,
            raw(version_minor=1, heard=[ORIGIN_B, ORIGIN_B]),
        ),
        InvalidCase("version_major_2", "version_major is 2.", V, raw(version_major=2)),
        InvalidCase("version_major_0", "version_major written as 0.", V, raw(version_major=0)),
        InvalidCase(
            "version_major_absent",
            "version_major absent (default 0).",
            V,
            raw(version_major=None),
        ),
        InvalidCase(
            "truncated_buffer",
            "A valid packet cut to half its length.",
            M,
            good[: len(good) // 2],
        ),
        InvalidCase("truncated_8_bytes", "Only the root offset and identifier.", M, good[:8]),
        InvalidCase(
            "root_offset_out_of_range",
            "Root offset points past the end.",
            M,
            patched(good, 0, "<I", len(good) + 64),
        ),
        InvalidCase(
            "root_offset_max",
            "Root offset 0xFFFFFFFF.",
            M,
            patched(good, 0, "<I", 0xFFFFFFFF),
        ),
        InvalidCase(
            "vtable_out_of_range",
            "The root table's vtable offset points past the end.",
            M,
            patched(good, root, "<i", root - len(good) - 64),
        ),
        InvalidCase(
            "vtable_before_start",
            "The root table's vtable offset points before the start.",
            M,
            patched(good, root, "<i", root + 64),
        ),
        InvalidCase(
            "vtable_size_odd",
            "The root vtable's size is odd.",
            M,
            patched(good, vtable_of(good, root), "<H", _u16(good, vtable_of(good, root)) + 1),
        ),
        InvalidCase(
            "vtable_size_past_end",
            "The root vtable's size runs past the end of the buffer.",
            M,
            patched(good, vtable_of(good, root), "<H", 0xFFFE),
        ),
        InvalidCase(
            "field_offset_out_of_range",
            "The vtable offset of Packet.sender points past the end.",
            M,
            patched(good, vtable_slot_pos(good, root, 2), "<H", 0xFFF0),
        ),
        InvalidCase(
            "fingerprint_vector_out_of_range",
            "The offset of the fingerprint vector points past the end.",
            M,
            patched(good, field_pos(good, root, 4), "<I", len(good)),
        ),
        InvalidCase(
            "entries_vector_length_overflow",
            "The entries vector claims 2**30 elements.",
            M,
            patched(good, vector_len_pos(good, root, 6), "<I", 1 << 30),
        ),
        InvalidCase(
            "entry_offset_out_of_range",
            "The first element of the entries vector points past the end.",
            M,
            patched(good, vector_len_pos(good, root, 6) + 4, "<I", len(good)),
        ),
        InvalidCase(
            "indices_vector_length_overflow",
            "The first entry's indices vector claims 0xFFFFFFFF elements.",
            M,
            patched(good, vector_len_pos(good, e0, 4), "<I", 0xFFFFFFFF),
        ),
        InvalidCase(
            "values_vector_length_overflow",
            "The second entry's values vector claims 2**28 elements.",
            M,
            patched(good, vector_len_pos(good, e1, 5), "<I", 1 << 28),
        ),
        InvalidCase(
            "entry_vtable_out_of_range",
            "The second entry's vtable offset points past the end.",
            M,
            patched(good, e1, "<i", e1 - len(good) - 8),
        ),
        InvalidCase(
            "fingerprint_31_bytes",
            "A 31-byte fingerprint.",
            M,
            raw(fingerprint=VECTOR_MANIFEST.fingerprint[:31]),
        ),
        InvalidCase(
            "fingerprint_33_bytes",
            "A 33-byte fingerprint.",
            M,
            raw(fingerprint=VECTOR_MANIFEST.fingerprint + b"\0"),
        ),
        InvalidCase(
            "fingerprint_missing",
            "No fingerprint (a required field).",
            M,
            raw(fingerprint=None),
        ),
        InvalidCase(
            "missing_entries_vector",
            "No entries vector (a required field).",
            M,
            raw(entries=None),
        ),
        InvalidCase(
            "missing_indices_vector",
            "An entry without indices (a required field).",
            M,
            raw_entry(indices=None),
        ),
        InvalidCase("sender_zero", "sender is 0 (written).", M, raw(sender=0)),
        InvalidCase("sender_absent", "sender absent (default 0).", M, raw(sender=None)),
        InvalidCase(
            "sender_incarnation_zero",
            "sender_incarnation is 0.",
            M,
            raw(sender_incarnation=0),
        ),
        InvalidCase("origin_zero", "An entry's origin is 0.", M, raw_entry(origin=0)),
        InvalidCase(
            "incarnation_zero",
            "An entry's incarnation is 0.",
            M,
            raw_entry(incarnation=0),
        ),
        InvalidCase("seq_zero", "An entry's seq is 0.", M, raw_entry(seq=0)),
        InvalidCase(
            "seq_absent",
            "An entry's seq is absent (default 0).",
            M,
            raw_entry(seq=None),
        ),
        InvalidCase(
            "seq_zero_second_entry",
            "The second of two entries has seq 0.",
            M,
            build_raw(RawPacket(entries=[RawEntry(), RawEntry(origin=ORIGIN_C, seq=0)])),
        ),
        InvalidCase(
            "missing_values_vector",
            "F32 packet, an entry without values.",
            M,
            raw_entry(values=None),
        ),
        InvalidCase(
            "values16_in_f32_packet",
            "F32 packet, an entry with values16 instead of values.",
            M,
            raw_entry(values=None, values16=[0x3C00, 0x3C00, 0x3C00]),
        ),
        InvalidCase(
            "both_values_vectors",
            "F32 packet, an entry with both values and values16.",
            M,
            raw_entry(values16=[0x3C00, 0x3C00, 0x3C00]),
        ),
        InvalidCase(
            "values_in_f16_packet",
            "F16 packet, an entry with values (f32) instead of values16.",
            M,
            raw16(1, values=[1.0, 2.0, 3.0]),
        ),
        InvalidCase(
            "missing_values16_bf16",
            "BF16 packet, an entry without values16.",
            M,
            raw16(2),
        ),
        InvalidCase(
            "encoding_unknown",
            "encoding 4 (none in 1.1), no entries.",
            U,
            build_raw(RawPacket(encoding=4, entries=[])),
        ),
        InvalidCase(
            "encoding_255",
            "encoding 255, no entries.",
            U,
            build_raw(RawPacket(encoding=255, entries=[])),
        ),
        InvalidCase(
            "fingerprint_mismatch",
            "The fingerprint of another manifest (the large one).",
            F,
            encode_packet(packet(base_entry(), manifest=LARGE_MANIFEST)),
        ),
        InvalidCase(
            "hop_limit_exceeded",
            "An entry with hops = hop_limit + 1 = 17.",
            ErrorCode.HOP_LIMIT,
            encode_packet(
                packet(base_entry(), entry(ORIGIN_B, INC_B, 4, HOP_LIMIT + 1, [1], [1.0]))
            ),
        ),
        InvalidCase(
            "hop_limit_255",
            "An entry with hops = 255.",
            ErrorCode.HOP_LIMIT,
            encode_packet(packet(entry(ORIGIN_B, INC_B, 4, 255, [1], [1.0]))),
        ),
        InvalidCase(
            "values_length_mismatch",
            "3 indices, 2 values (f32).",
            L,
            raw_entry(values=[1.0, 2.0]),
        ),
        InvalidCase(
            "values16_length_mismatch",
            "3 indices, 4 values16 (bf16).",
            L,
            raw16(2, values16=[0x3F80] * 4),
        ),
        InvalidCase(
            "empty_entry",
            "An entry with zero indices and zero values.",
            E,
            raw_entry(indices=[], values=[]),
        ),
        InvalidCase(
            "empty_entry_f16",
            "F16 packet, an entry with zero indices and values16.",
            E,
            raw16(1, indices=[], values16=[]),
        ),
        InvalidCase(
            "index_out_of_range",
            "An index equal to N (101).",
            R,
            encode_packet(packet(entry(SENDER, SENDER_INC, 1, 0, [0, n], [1.0, 1.0]))),
        ),
        InvalidCase(
            "index_out_of_range_u32_max",
            "An index 0xFFFFFFFF with N = 101.",
            R,
            encode_packet(packet(entry(SENDER, SENDER_INC, 1, 0, [2**32 - 1], [1.0]))),
        ),
        InvalidCase(
            "index_out_of_range_second_entry",
            "The second entry's last index is N.",
            R,
            encode_packet(packet(base_entry(), entry(ORIGIN_B, INC_B, 2, 1, [99, n], [1.0, 1.0]))),
        ),
        InvalidCase(
            "unsorted_indices",
            "Indices 5, 3, 8.",
            ErrorCode.UNSORTED_INDICES,
            encode_packet(packet(entry(SENDER, SENDER_INC, 1, 0, [5, 3, 8], [1.0, 2.0, 3.0]))),
        ),
        InvalidCase(
            "unsorted_indices_descending",
            "Indices 100 down to 0 in the second entry.",
            ErrorCode.UNSORTED_INDICES,
            encode_packet(
                packet(
                    base_entry(),
                    entry(ORIGIN_B, INC_B, 2, 1, range(100, -1, -1), np.ones(101)),
                )
            ),
        ),
        InvalidCase(
            "duplicate_index",
            "Indices 3, 7, 7, 9.",
            ErrorCode.DUPLICATE_INDEX,
            encode_packet(
                packet(entry(SENDER, SENDER_INC, 1, 0, [3, 7, 7, 9], [1.0, 2.0, 3.0, 4.0]))
            ),
        ),
        InvalidCase(
            "duplicate_index_zero",
            "Indices 0, 0.",
            ErrorCode.DUPLICATE_INDEX,
            encode_packet(packet(entry(SENDER, SENDER_INC, 1, 0, [0, 0], [1.0, 2.0]))),
        ),
        InvalidCase(
            "nan_value",
            "A quiet NaN value (f32).",
            X,
            encode_packet(
                packet(
                    entry(
                        SENDER,
                        SENDER_INC,
                        1,
                        0,
                        [1, 2],
                        bits_f32(0x3F800000, 0x7FC00000),
                    )
                )
            ),
        ),
        InvalidCase(
            "signaling_nan_value",
            "A signalling NaN with a payload, negative sign (f32).",
            X,
            encode_packet(packet(entry(SENDER, SENDER_INC, 1, 0, [1], bits_f32(0xFF800001)))),
        ),
        InvalidCase(
            "inf_value",
            "+inf (f32).",
            X,
            encode_packet(packet(entry(SENDER, SENDER_INC, 1, 0, [1], bits_f32(0x7F800000)))),
        ),
        InvalidCase(
            "neg_inf_value_second_entry",
            "-inf in the second entry (f32).",
            X,
            encode_packet(
                packet(
                    base_entry(),
                    entry(ORIGIN_B, INC_B, 2, 1, [4, 5], bits_f32(0, 0xFF800000)),
                )
            ),
        ),
        InvalidCase(
            "f16_inf_value",
            "F16 +inf bit pattern 0x7C00.",
            X,
            raw16(1, values16=[0x3C00, 0x7C00, 0x3C00]),
        ),
        InvalidCase(
            "f16_nan_value",
            "F16 NaN bit pattern 0xFE00.",
            X,
            raw16(1, values16=[0xFE00, 0x3C00, 0x3C00]),
        ),
        InvalidCase(
            "bf16_inf_value",
            "BF16 -inf bit pattern 0xFF80.",
            X,
            raw16(2, values16=[0x3F80, 0x3F80, 0xFF80]),
        ),
        InvalidCase(
            "bf16_nan_value",
            "BF16 NaN bit pattern 0x7FC1.",
            X,
            raw16(2, values16=[0x7FC1, 0x3F80, 0x3F80]),
        ),
    ]
    for c in cases:
        c.requirements = invalid_requirements(c.name, c.error)
    return cases


# ------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------
def features_of(
    encodings: Sequence[ValueEncoding], fast: bool = False, packed: bool = False
) -> dict[str, list[str]]:
    """The index row's ``features``: the OPTIONAL features (driver capabilities) a vector needs, so
    that a claimed target's test of a feature the implementation does not offer may stay unsupported
    (DF-CNF-30). Empty (no member) for a vector that needs none."""
    names = {
        ValueEncoding.F16: "encoding.f16",
        ValueEncoding.BF16: "encoding.bf16",
        ValueEncoding.Q8: "encoding.q8",
    }
    feats = sorted(
        {names[e] for e in encodings if e in names}
        | ({"generate.fast"} if fast else set())
        | ({"index.packed"} if packed else set())
    )
    return {"features": feats} if feats else {}


def _dump_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _check_decode(data: bytes, ctx: dict[str, Any]) -> tuple[Packet | None, ErrorCode | None]:
    try:
        p = decode_packet(data, ctx["max_packet_size"])
        validate_packet(
            p,
            fingerprint=bytes.fromhex(ctx["fingerprint"]),
            num_params=ctx["num_params"],
            hop_limit=ctx["hop_limit"],
        )
    except DecodeError as exc:
        return None, exc.code
    return p, None


def verdict_cases() -> tuple[list[ValidCase], list[InvalidCase]]:
    """The hand-assembled vectors of ``verdict_vectors.py`` (spec 1.1 Section 6.7, DF-SEC-20,
    DF-RCV-20): valid and invalid cases."""
    spec = importlib.util.spec_from_file_location("verdict_vectors", VERDICT_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdict_vectors"] = module  # dataclasses look modules up by name
    spec.loader.exec_module(module)
    valid: list[ValidCase] = []
    invalid: list[InvalidCase] = []
    for c in module.build(sys.modules[__name__]):
        if c.error is None:
            valid.append(
                ValidCase(c.name, c.description, list(c.requirements), raw=c.data, expect=c.expect)
            )
        else:
            reqs = sorted({*invalid_requirements(c.name, c.error), *c.requirements})
            invalid.append(
                InvalidCase(
                    c.name,
                    c.description,
                    c.error,
                    c.data,
                    reqs,
                    max_packet_size=c.max_packet_size or DEFAULT_MAX_PACKET_SIZE,
                )
            )
    return valid, invalid


def compact_cases() -> tuple[list[ValidCase], list[InvalidCase]]:
    """The decode vectors of ``compact_vectors.py`` (spec 1.1 section 6.8: PACKED, Q8)."""
    if str(TOOLS_DIR) not in sys.path:
        sys.path.insert(0, str(TOOLS_DIR))
    spec = importlib.util.spec_from_file_location("compact_vectors", COMPACT_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compact_vectors"] = module
    spec.loader.exec_module(module)
    valid, invalid = module.decode_cases(sys.modules[__name__])
    for c in invalid:
        c.requirements = sorted({*invalid_requirements(c.name, c.error), *c.requirements})
    return list(valid), list(invalid)


def write_decode_vectors(vectors_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for sub in ("valid", "invalid"):
        d = vectors_dir / "decode" / sub
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    seen: set[str] = set()
    verdict_valid, verdict_invalid = verdict_cases()
    compact_valid, compact_invalid = compact_cases()
    for v in [*valid_cases(), *verdict_valid, *compact_valid]:
        assert v.name not in seen, v.name
        seen.add(v.name)
        if v.packet is not None:
            data, want = encode_packet(v.packet), quantize_packet(v.packet)
        else:
            assert v.raw is not None and v.expect is not None
            data, want = v.raw, v.expect
        ctx = context(v.manifest)
        got, err = _check_decode(data, ctx)
        if got is None or got != want:
            raise AssertionError(f"valid vector {v.name}: decoded to {err or got}, expected {want}")
        rel = f"decode/valid/{v.name}"
        reqs = valid_requirements(v.name, v.requirements, got.encoding)
        (vectors_dir / f"{rel}.dfp").write_bytes(data)
        _dump_json(
            vectors_dir / f"{rel}.json",
            {
                "description": v.description,
                "requirements": reqs,
                "manifest": manifest_json(v.manifest),
                "context": ctx,
                "packet": packet_to_json(got),
            },
        )
        rows.append(
            {
                "id": f"decode.valid.{v.name}",
                "kind": "decode",
                "path": rel,
                "requirements": reqs,
                "expect": "ok",
                **({} if v.encode else {"encode": False}),
                **features_of([got.encoding], packed=got.index_encoding == IndexEncoding.PACKED),
            }
        )
    for c in [*invalid_cases(), *verdict_invalid, *compact_invalid]:
        assert c.name not in seen, c.name
        seen.add(c.name)
        ctx = context(c.manifest, c.max_packet_size)
        _, err = _check_decode(c.data, ctx)
        if err is not c.error:
            raise AssertionError(f"invalid vector {c.name}: got {err}, expected {c.error}")
        rel = f"decode/invalid/{c.name}"
        (vectors_dir / f"{rel}.dfp").write_bytes(c.data)
        _dump_json(
            vectors_dir / f"{rel}.json",
            {
                "description": c.description,
                "requirements": c.requirements,
                "manifest": manifest_json(c.manifest),
                "context": ctx,
                "error": c.error.value,
            },
        )
        rows.append(
            {
                "id": f"decode.invalid.{c.name}",
                "kind": "decode",
                "path": rel,
                "requirements": c.requirements,
                "expect": c.error.value,
                **({"features": sorted(c.features)} if c.features else {}),
            }
        )
    return rows


def engine_rows(vectors_dir: Path, source: Path = ENGINE_VECTORS) -> list[dict[str, Any]]:
    """Index rows of the vectors a generator module writes: ``engine_vectors.py`` (generate,
    receive), ``snapshot_vectors.py`` (snapshot), ``forward_vectors.py`` (forward); its ``build()``."""
    if not source.exists():
        return []
    if str(TOOLS_DIR) not in sys.path:
        sys.path.insert(0, str(TOOLS_DIR))
    spec = importlib.util.spec_from_file_location(source.stem, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[source.stem] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    build: Callable[[Path], list[dict[str, Any]]] = module.build
    rows = list(build(vectors_dir))
    for row in rows:
        missing = {"id", "kind", "path", "requirements"} - set(row)
        if missing:
            raise ValueError(f"{source.stem} row {row.get('id')!r} lacks {sorted(missing)}")
    return rows


def generate(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write every vector under ``vectors_dir`` and its ``index.json``; returns the index rows."""
    vectors_dir.mkdir(parents=True, exist_ok=True)
    rows = write_decode_vectors(vectors_dir) + engine_rows(vectors_dir)
    for extra in EXTRA_VECTORS:
        rows += engine_rows(vectors_dir, extra)
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate vector ids")
    _dump_json(vectors_dir / "index.json", {"version": INDEX_VERSION, "vectors": rows})
    return rows


#: How far a fresh ``forward`` expectation may lie from the checked-in one (:func:`same_forward`):
#: binary64 members relatively, binary32 arrays (``*_b64``) in units in the last place. The float64
#: reference (``forward_vectors.reference``) uses BLAS products and NumPy's SIMD reductions, whose
#: summation order follows the CPU's instruction set, so two machines agree only to about 1e-12
#: (measured: 8.4e-13 relative, and 1 ulp of a binary32 update, between two x86-64 machines). The
#: forward check itself compares with rtol 1e-4 and 4 ulps (the vectors' ``tolerance``).
FORWARD_STALE_RTOL = 1e-9
FORWARD_STALE_ULPS = 1


def _close_json(a: Any, b: Any, path: str = "") -> str | None:
    """The first difference between two forward vectors beyond the reference's platform noise."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: members {sorted(a)} != {sorted(b)}"
        for k in a:
            d = _close_json(a[k], b[k], f"{path}/{k}")
            if d is not None:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _close_json(x, y, f"{path}[{i}]")
            if d is not None:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        ok = abs(a - b) <= FORWARD_STALE_RTOL * max(abs(a), abs(b))
        return None if ok else f"{path}: {a!r} != {b!r}"
    if (
        path.endswith("_b64")
        and isinstance(a, str)
        and isinstance(b, str)
        and path.startswith("/expected/")
    ):
        x = np.frombuffer(base64.b64decode(a), dtype="<f4")
        y = np.frombuffer(base64.b64decode(b), dtype="<f4")
        if x.shape != y.shape:
            return f"{path}: {x.size} values != {y.size}"
        # an update that cancels to about 0 differs absolutely (5.6e-17 against 0.0 measured): the
        # floor is FORWARD_STALE_RTOL of the array's largest value, far below the check's atol
        bound = np.maximum(
            FORWARD_STALE_ULPS * np.spacing(np.maximum(np.abs(x), np.abs(y))),
            FORWARD_STALE_RTOL * float(np.max(np.abs(y), initial=0.0)),
        )
        bad = np.flatnonzero(~(np.abs(x - y) <= bound))
        return None if bad.size == 0 else f"{path}[{int(bad[0])}]: {x[bad[0]]} != {y[bad[0]]}"
    return None if a == b and type(a) is type(b) else f"{path}: {a!r} != {b!r}"


def same_forward(fresh: Path, checked_in: Path) -> str | None:
    """``None`` when two ``forward`` vector files hold the same vector: every member equal, except
    the float64 reference's results (``expected``), which may differ by platform noise only
    (:data:`FORWARD_STALE_RTOL`, :data:`FORWARD_STALE_ULPS`); else the first difference."""
    return _close_json(
        json.loads(fresh.read_text(encoding="utf-8")),
        json.loads(checked_in.read_text(encoding="utf-8")),
    )


def compare_trees(fresh: Path, checked_in: Path) -> list[str]:
    """Differences between a fresh generation and the checked-in vectors (generated files): byte for
    byte, except the float64 results of ``forward`` vectors (:func:`same_forward`)."""
    problems: list[str] = []
    fresh_files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
    for rel in sorted(fresh_files):
        other = checked_in / rel
        if not other.is_file():
            problems.append(f"missing: {rel}")
        elif not filecmp.cmp(fresh / rel, other, shallow=False):
            why = same_forward(fresh / rel, other) if rel.parts[0] == "forward" else "bytes"
            if why is not None:
                problems.append(f"differs: {rel} ({why})")
    for sub in ("decode", "snapshot", "forward", "repair", "config"):
        for p in sorted((checked_in / sub).rglob("*")):
            if p.is_file() and p.relative_to(checked_in) not in fresh_files:
                problems.append(f"stale (not generated): {p.relative_to(checked_in)}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_VECTORS_DIR,
        help="vectors directory to write",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="compare a fresh generation with --out; write nothing",
    )
    args = ap.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            problems = compare_trees(Path(tmp), args.out)
        for p in problems:
            print(p, file=sys.stderr)
        print(
            "vectors up to date" if not problems else f"{len(problems)} stale vector files",
            file=sys.stderr,
        )
        return 1 if problems else 0
    rows = generate(args.out)
    print(f"wrote {len(rows)} vectors under {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
