"""The DeltaFabric v1 wire format: encoding, bounds-checked decoding and validation of packets.

Encoding uses the generated FlatBuffers helpers (``schema/deltafabric.fbs``) over
:class:`~delta_fabric._fastbuild.FastBuilder`, which writes the same bytes as ``flatbuffers.Builder``. Decoding does *not*
use the generated accessors: Python's FlatBuffers runtime has no verifier, so :func:`decode_packet`
is a bounds-checked reader written for this schema. Whatever the bytes, it raises nothing but
:class:`~delta_fabric.errors.DecodeError`.

Check order: spec DF-RCV-20 (normative since 1.1; with several faults the code of the first failing
step is reported).

``decode_packet`` (context-free, needs only ``max_packet_size``):

1. ``OVERSIZE``: ``len(buf) > max_packet_size``.
2. ``BAD_IDENTIFIER``: fewer than 8 bytes, or bytes 4..8 != ``DFP1``.
3. ``MALFORMED``: the root uoffset, the root table, its vtable or ``version_major`` break a verifier
   rule of spec section 6.7.
4. ``UNSUPPORTED_VERSION``: ``version_major != 1`` (absent reads as 0).
5. ``MALFORMED``: every other verifier rule of section 6.7 (DF-PKT-20: bounds, alignment relative to
   the first byte of the packet (DF-PKT-21), uoffsets not 0, vtables, required fields) and the sharing
   rule (DF-SEC-20: table heads, fields and vectors pairwise disjoint); fingerprint of 32 bytes,
   non-zero sender, sender_incarnation, origin, incarnation, seq; ``heard`` (1.1), when present,
   non-zero and strictly ascending; ``Entry.signature`` (1.1), when present, exactly 64 bytes.
6. ``UNSUPPORTED_ENCODING``: encoding not in the table :data:`delta_fabric.encodings.CODECS`
   (F32, F16, BF16, Q8), then (1.1) an index encoding other than PLAIN and PACKED.
7. ``MALFORMED``: an entry without the values vector of the encoding, or with another one; (1.1,
   DF-RCV-113) index vectors not matching the index encoding, a Q8 scale with the sign bit set,
   the faults of the packed index bytes (section 6.8).
8. ``LENGTH_MISMATCH``, ``EMPTY_ENTRY``, ``UNSORTED_INDICES``, ``DUPLICATE_INDEX``,
   ``NON_FINITE`` (a non-finite Q8 scale, then a non-finite value), each over all entries before
   the next.

``validate_packet`` (needs the local context): ``FINGERPRINT_MISMATCH``, ``HOP_LIMIT``,
``INDEX_OUT_OF_RANGE``.

The address of the buffer in memory does not matter (NumPy views over unaligned data are valid);
only positions relative to its first byte are checked.
The per-entry work is vectorised: the Entry tables are parsed with NumPy gathers over the buffer,
and the index and value checks run once over all entries.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import numpy as np
from numpy.lib.stride_tricks import as_strided
from numpy.typing import NDArray

from delta_fabric._fastbuild import FastBuilder
from delta_fabric._generated.deltafabric.v1 import Entry as _gen_entry
from delta_fabric._generated.deltafabric.v1 import Packet as _gen_packet
from delta_fabric.compact import (
    IndexEncoding,
    _varint_sums,
    encode_indices,
    q8_encode,
    unpack_indices,
)
from delta_fabric.encodings import CODECS, MAX_VALUE_BYTES, ValueEncoding, codec, quantize
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.native import kernels, ready

__all__ = [
    "DEFAULT_MAX_PACKET_SIZE",
    "FILE_IDENTIFIER",
    "PACKET_OVERHEAD_BOUND",
    "SIGNATURE_SIZE",
    "SIGNATURE_SIZE_BOUND",
    "VERSION_MAJOR",
    "VERSION_MINOR",
    "Entry",
    "IndexEncoding",
    "Packet",
    "PacketHeader",
    "ValueEncoding",
    "decode_packet",
    "encode_packet",
    "encoded_size_bound",
    "heard_size_bound",
    "json_dumps",
    "json_loads",
    "packet_from_json",
    "packet_to_json",
    "peek_header",
    "quantize",
    "quantize_packet",
    "screen",
    "validate_packet",
]


DEFAULT_MAX_PACKET_SIZE = 16 * 1024 * 1024
FILE_IDENTIFIER = b"DFP1"
VERSION_MAJOR = 1
VERSION_MINOR = 1
FINGERPRINT_SIZE = 32
U64_MAX = (1 << 64) - 1

#: Upper bound on the bytes of a packet with no entry (root offset, identifier, root table, vtable,
#: fingerprint and entries vectors, alignment padding). A packet's size is at most this plus the sum
#: of :func:`encoded_size_bound` over its entries.
PACKET_OVERHEAD_BOUND = 160
#: Upper bound on the bytes a 64-byte ``Entry.signature`` adds to an entry (1.1, DF-RLY-143): the
#: vtable slots 7..10, the field's uoffset, the vector's length, its 64 bytes and alignment padding.
SIGNATURE_SIZE_BOUND = 96


def _as_u32_array(x: Any) -> NDArray[np.uint32]:
    if isinstance(x, np.ndarray) and x.dtype == np.uint32 and x.ndim == 1:
        return x
    a = np.asarray(x)
    if a.ndim != 1:
        a = a.reshape(-1)
    if a.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if a.dtype.kind not in "ui":
        raise ValueError(f"indices must be integers, got dtype {a.dtype}")
    if int(a.min()) < 0 or int(a.max()) > 0xFFFFFFFF:
        raise ValueError("indices must fit in uint32")
    return a.astype(np.uint32)


def _as_f32_array(x: Any) -> NDArray[np.float32]:
    if isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == 1:
        return x
    return np.asarray(x, dtype=np.float32).reshape(-1)


def _bits_equal(a: NDArray[Any], b: NDArray[Any]) -> bool:
    if a.shape != b.shape:
        return False
    a_bits = np.ascontiguousarray(a).view(np.uint32)
    return bool(np.array_equal(a_bits, np.ascontiguousarray(b).view(np.uint32)))


@dataclass(frozen=True, eq=False)
class Entry:
    """One sparse delta of one origin. ``indices`` ascending; ``values`` are the decoded f32 values.
    ``signature`` (1.1, spec section 13.1): the origin's 64-byte Ed25519 signature, ``None`` when absent.

    Equality compares indices, the bit patterns of the values (NaN == NaN, 0.0 != -0.0) and the
    signatures.
    Arrays obtained from :func:`decode_packet` are read-only views over the packet buffer.
    """

    origin: int
    incarnation: int
    seq: int
    hops: int
    indices: NDArray[np.uint32]
    values: NDArray[np.float32]
    signature: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "indices", _as_u32_array(self.indices))
        object.__setattr__(self, "values", _as_f32_array(self.values))
        if self.signature is not None and not isinstance(self.signature, bytes):
            object.__setattr__(self, "signature", bytes(self.signature))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entry):
            return NotImplemented
        return (
            (self.origin, self.incarnation, self.seq, self.hops)
            == (other.origin, other.incarnation, other.seq, other.hops)
            and bool(np.array_equal(self.indices, other.indices))
            and _bits_equal(self.values, other.values)
            and self.signature == other.signature
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class Packet:
    """One message on the wire."""

    sender: int
    sender_incarnation: int
    fingerprint: bytes
    entries: tuple[Entry, ...]
    encoding: ValueEncoding = ValueEncoding.F32
    version_major: int = VERSION_MAJOR
    version_minor: int = VERSION_MINOR
    #: (1.1, DF-RLY-61) the node ids the sender advertises as heard directly, ascending; ``None``
    #: when the packet carries no advertisement (field absent).
    heard: tuple[int, ...] | None = None
    #: (1.1, section 6.8) how the indices travel: PLAIN (``Entry.indices``) or PACKED
    index_encoding: IndexEncoding = IndexEncoding.PLAIN

    def __post_init__(self) -> None:
        if not isinstance(self.entries, tuple):
            object.__setattr__(self, "entries", tuple(self.entries))
        if self.heard is not None and not isinstance(self.heard, tuple):
            object.__setattr__(self, "heard", tuple(int(x) for x in self.heard))
        if not isinstance(self.fingerprint, bytes):
            object.__setattr__(self, "fingerprint", bytes(self.fingerprint))
        if not isinstance(self.encoding, ValueEncoding):
            object.__setattr__(self, "encoding", ValueEncoding(self.encoding))
        if not isinstance(self.index_encoding, IndexEncoding):
            object.__setattr__(self, "index_encoding", IndexEncoding(self.index_encoding))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Packet):
            return NotImplemented
        return (
            self.sender == other.sender
            and self.sender_incarnation == other.sender_incarnation
            and self.fingerprint == other.fingerprint
            and self.encoding == other.encoding
            and self.version_major == other.version_major
            and self.version_minor == other.version_minor
            and self.entries == other.entries
            and self.heard == other.heard
            and self.index_encoding == other.index_encoding
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def num_values(self) -> int:
        """Total number of (index, value) pairs over all entries."""
        return sum(int(e.indices.size) for e in self.entries)


# ------------------------------------------------------------------------------------------------
# Encoding
# ------------------------------------------------------------------------------------------------


def quantize_packet(packet: Packet) -> Packet:
    """``packet`` with every entry's values as a receiver decodes them (see :func:`quantize`): what
    ``decode_packet(encode_packet(packet))`` returns."""
    entries = tuple(replace(e, values=quantize(e.values, packet.encoding)) for e in packet.entries)
    return replace(packet, entries=entries)


def encoded_size_bound(num_values: int, *, signed: bool = False) -> int:
    """Upper bound on the bytes one entry of ``num_values`` values adds to a packet (any encoding).

    Entry table with its vtable and alignment padding (<= 96 bytes), the entries-vector slot (4),
    and the indices and values vectors (4 + 7 each, plus 4 bytes per index and the table's largest
    ``value_bytes`` per value, see :mod:`delta_fabric.encodings`). A ``signed`` entry (1.1,
    DF-RLY-143) adds :data:`SIGNATURE_SIZE_BOUND`.
    """
    if num_values < 0:
        raise ValueError("num_values must be >= 0")
    return 128 + (4 + MAX_VALUE_BYTES) * num_values + (SIGNATURE_SIZE_BOUND if signed else 0)


def heard_size_bound(count: int) -> int:
    """Upper bound on the bytes a ``Packet.heard`` vector of ``count`` ids adds to a packet (1.1,
    DF-RLY-61): vtable slot, offset, length, padding and 8 bytes per id."""
    if count < 0:
        raise ValueError("count must be >= 0")
    return 24 + 8 * count


def _check_u64(name: str, x: int) -> int:
    if not isinstance(x, (int, np.integer)) or not 0 <= int(x) <= U64_MAX:
        raise ValueError(f"{name} must be an integer in [0, 2**64), got {x!r}")
    return int(x)


#: Q8 codes made with an entry's values (`Engine.generate`): ``id(values) -> (values, scale, codes)``
Q8Codes = Mapping[int, tuple[NDArray[np.float32], np.float32, NDArray[np.int8]]]


def encode_packet(packet: Packet, *, q8_codes: Q8Codes | None = None) -> bytes:
    """Serialise ``packet`` with the generated FlatBuffers helpers over
    :class:`~delta_fabric._fastbuild.FastBuilder` (the same bytes as ``flatbuffers.Builder``, with
    far fewer Python calls per table).

    Values are encoded per ``packet.encoding`` (F16/BF16: round to nearest even, clamped to the
    finite range). The encoder serialises what it is given: it checks only that integers fit their
    wire types (``ValueError`` otherwise), not the protocol rules (non-zero ids, sorted indices,
    finite values...), which is what lets tests and vector generators build faulty packets. Use
    :func:`decode_packet` on the result to check those.

    ``q8_codes``: for a Q8 packet, the scale and codes already made of an entry's values (the very
    array: looked up by identity), which are then not made again; any other entry is encoded here.
    """
    return _encode_packet(packet, FastBuilder, q8_codes)


_FAST_ENCODINGS = frozenset({ValueEncoding.F32, ValueEncoding.F16, ValueEncoding.BF16})


def _encode_packet(
    packet: Packet, builder: Callable[[int], Any], q8_codes: Q8Codes | None = None
) -> bytes:
    """:func:`encode_packet` with the builder class ``builder`` (``FastBuilder``, or
    ``flatbuffers.Builder``, which the tests compare it with byte for byte)."""
    vc = codec(packet.encoding)
    if not 0 <= packet.version_major <= 0xFFFF or not 0 <= packet.version_minor <= 0xFFFF:
        raise ValueError("version numbers must fit in uint16")
    total = sum(encoded_size_bound(int(e.indices.size)) for e in packet.entries)
    b = builder(min(PACKET_OVERHEAD_BOUND + total + len(packet.fingerprint), 1 << 31))
    entry_offsets: list[int] = []
    # FastBuilder's one-call Entry writer handles the fields of schema 1.0/1.1 (0..6) and the
    # encodings F32/F16/BF16; any other field or encoding takes the generated helpers
    fast = isinstance(b, FastBuilder) and vc.encoding in _FAST_ENCODINGS
    for e in packet.entries:
        if not 0 <= e.hops <= 0xFF:
            raise ValueError(f"hops must fit in uint8, got {e.hops!r}")
        origin = _check_u64("origin", e.origin)
        incarnation = _check_u64("incarnation", e.incarnation)
        seq = _check_u64("seq", e.seq)
        if fast and e.signature is None and packet.index_encoding is not IndexEncoding.PACKED:
            # the same bytes as the generated helpers below, in one call (fields 0..6 only)
            idx = np.ascontiguousarray(e.indices, dtype="<u4")
            vals = np.ascontiguousarray(vc.encode(e.values), dtype=vc.wire_dtype)
            entry_offsets.append(
                b.entry_v1(origin, incarnation, seq, int(e.hops), idx, vals, 5 if vc.wide else 6)
            )
            continue
        packed_off = None
        if packet.index_encoding is IndexEncoding.PACKED:
            # an entry without index has no packed form: written as the empty delta form, which
            # a receiver rejects as EMPTY_ENTRY (the encoder serialises what it is given)
            packed = encode_indices(e.indices) if e.indices.size else bytes([0])
            packed_off = b.CreateByteVector(packed)
            idx_off = b.CreateNumpyVector(np.zeros(0, dtype="<u4"))
        else:
            idx_off = b.CreateNumpyVector(np.ascontiguousarray(e.indices, dtype="<u4"))
        scale = np.float32(0.0)
        if vc.encoding is ValueEncoding.Q8:  # the scale and the bytes in one call (section 6.8)
            made = q8_codes.get(id(e.values)) if q8_codes else None
            if made is not None and made[0] is e.values:  # encoded with these very values
                scale, wire_values = made[1], made[2]
            else:
                scale, wire_values = q8_encode(e.values)  # ValueError for a non-finite value
        else:
            if vc.scale_of is not None:
                if not bool(np.isfinite(e.values).all()):
                    raise ValueError(f"{vc.name} encodes finite values only")
                scale = vc.scale_of(e.values)
            wire_values = vc.encode(e.values)
        val_off = b.CreateNumpyVector(np.ascontiguousarray(wire_values, dtype=vc.wire_dtype))
        sig_off = None if e.signature is None else b.CreateByteVector(bytes(e.signature))
        _gen_entry.EntryStart(b)
        _gen_entry.EntryAddOrigin(b, origin)
        _gen_entry.EntryAddIncarnation(b, incarnation)
        _gen_entry.EntryAddSeq(b, seq)
        _gen_entry.EntryAddHops(b, int(e.hops))
        _gen_entry.EntryAddIndices(b, idx_off)
        if vc.field == "values":
            _gen_entry.EntryAddValues(b, val_off)
        elif vc.field == "values16":
            _gen_entry.EntryAddValues16(b, val_off)
        else:
            _gen_entry.EntryAddValues8(b, val_off)
            _gen_entry.EntryAddScale(b, float(scale))
        if packed_off is not None:
            _gen_entry.EntryAddPackedIndices(b, packed_off)
        if sig_off is not None:
            _gen_entry.EntryAddSignature(b, sig_off)
        entry_offsets.append(_gen_entry.EntryEnd(b))
    if isinstance(b, FastBuilder):
        entries_off = b.uoffset_vector(entry_offsets)
    else:
        b.StartVector(4, len(entry_offsets), 4)
        for off in reversed(entry_offsets):
            b.PrependUOffsetTRelative(off)
        entries_off = b.EndVector()
    fp_off = b.CreateByteVector(bytes(packet.fingerprint))
    heard_off = None
    if packet.heard is not None:
        heard_off = b.CreateNumpyVector(
            np.array([_check_u64("heard", x) for x in packet.heard], dtype="<u8")
        )
    _gen_packet.PacketStart(b)
    _gen_packet.PacketAddVersionMajor(b, int(packet.version_major))
    _gen_packet.PacketAddVersionMinor(b, int(packet.version_minor))
    _gen_packet.PacketAddSender(b, _check_u64("sender", packet.sender))
    _gen_packet.PacketAddSenderIncarnation(
        b, _check_u64("sender_incarnation", packet.sender_incarnation)
    )
    _gen_packet.PacketAddFingerprint(b, fp_off)
    _gen_packet.PacketAddEncoding(b, int(vc.encoding))
    _gen_packet.PacketAddEntries(b, entries_off)
    if heard_off is not None:
        _gen_packet.PacketAddHeard(b, heard_off)
    _gen_packet.PacketAddIndexEncoding(b, int(IndexEncoding(packet.index_encoding)))
    root = _gen_packet.PacketEnd(b)
    b.Finish(root, file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


# ------------------------------------------------------------------------------------------------
# Decoding: a bounds-checked reader for this schema
# ------------------------------------------------------------------------------------------------

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")

# Field slots (schema order).
_P_VERSION_MAJOR, _P_VERSION_MINOR, _P_SENDER, _P_SENDER_INC = 0, 1, 2, 3
_P_FINGERPRINT, _P_ENCODING, _P_ENTRIES, _P_HEARD = 4, 5, 6, 7
_P_INDEX_ENCODING = 8
_E_ORIGIN, _E_INCARNATION, _E_SEQ, _E_HOPS = 0, 1, 2, 3
_E_INDICES, _E_VALUES, _E_VALUES16 = 4, 5, 6
_E_PACKED_INDICES, _E_VALUES8, _E_SCALE = 7, 8, 9
_INDEX_ENCODINGS = frozenset(int(x) for x in IndexEncoding)
_E_SIGNATURE = 10  # 1.1 (spec section 13.1)
#: Length of an Ed25519 signature (``Entry.signature``, DF-PKT-140).
SIGNATURE_SIZE = 64


def _malformed(detail: str) -> NoReturn:
    raise DecodeError(ErrorCode.MALFORMED, detail)


class _Reader:
    """Bounds-checked primitive reads over a byte buffer, by the verifier rules of spec section 6.7
    (DF-PKT-20, DF-PKT-21). Every failure raises MALFORMED. ``spans`` collects the byte ranges of
    the objects read (table heads, fields, vectors) for the sharing rule (DF-SEC-20)."""

    __slots__ = ("mv", "n", "spans")

    def __init__(self, mv: memoryview) -> None:
        self.mv = mv
        self.n = len(mv)
        self.spans: list[tuple[int, int]] = []

    def _need(self, pos: int, size: int, what: str, align: int) -> None:
        if pos < 0 or pos + size > self.n:
            _malformed(f"{what}: bytes [{pos}, {pos + size}) outside the {self.n}-byte buffer")
        if pos % align:
            _malformed(f"{what}: position {pos} not a multiple of {align}")

    def table(self, pos: int, what: str) -> tuple[int, int, int]:
        """Locate the table at ``pos``; returns (table position, vtable position, vtable size)."""
        self._need(pos, 4, f"{what} table", 4)
        vt = pos - _I32.unpack_from(self.mv, pos)[0]
        self._need(vt, 4, f"{what} vtable", 2)
        vsize = _U16.unpack_from(self.mv, vt)[0]
        if vsize < 4 or vsize & 1:
            _malformed(f"{what} vtable size {vsize} invalid")
        if vt + vsize > self.n:
            _malformed(
                f"{what} vtable: bytes [{vt}, {vt + vsize}) outside the {self.n}-byte buffer"
            )
        self.spans.append((pos, pos + 4))
        return pos, vt, vsize

    def field(self, tab: tuple[int, int, int], slot: int, size: int, what: str) -> int:
        """Absolute position of field ``slot`` (0 when absent), checked to hold ``size`` aligned
        bytes."""
        pos, vt, vsize = tab
        voff = 4 + 2 * slot
        if voff + 2 > vsize:
            return 0
        off: int = _U16.unpack_from(self.mv, vt + voff)[0]
        if off == 0:
            return 0
        self._need(pos + off, size, what, size)
        self.spans.append((pos + off, pos + off + size))
        return pos + off

    def u8(self, tab: tuple[int, int, int], slot: int, what: str) -> int:
        p = self.field(tab, slot, 1, what)
        return 0 if p == 0 else int(self.mv[p])

    def u16(self, tab: tuple[int, int, int], slot: int, what: str) -> int:
        p = self.field(tab, slot, 2, what)
        return 0 if p == 0 else int(_U16.unpack_from(self.mv, p)[0])

    def u32(self, tab: tuple[int, int, int], slot: int, what: str) -> int:
        p = self.field(tab, slot, 4, what)
        return 0 if p == 0 else int(_U32.unpack_from(self.mv, p)[0])

    def u64(self, tab: tuple[int, int, int], slot: int, what: str) -> int:
        p = self.field(tab, slot, 8, what)
        return 0 if p == 0 else int(_U64.unpack_from(self.mv, p)[0])

    def vector(
        self, tab: tuple[int, int, int], slot: int, elem_size: int, what: str
    ) -> tuple[int, int] | None:
        """(start of the elements, element count) of a vector field, or None when absent."""
        p = self.field(tab, slot, 4, what)
        if p == 0:
            return None
        uoff = _U32.unpack_from(self.mv, p)[0]
        if uoff == 0:
            _malformed(f"{what}: uoffset 0 (points to itself)")
        target = p + uoff
        self._need(target, 4, f"{what} length", 4)
        length = int(_U32.unpack_from(self.mv, target)[0])
        start = target + 4
        if start + length * elem_size > self.n:
            _malformed(f"{what} ({length} x {elem_size} bytes) outside the {self.n}-byte buffer")
        self.spans.append((target, start + length * elem_size))
        return start, length


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    a.flags.writeable = False
    return a


def _windows(a8: NDArray[np.uint8], k: int) -> NDArray[np.uint8]:
    """Read-only (n - k + 1, k) view: row p holds bytes p..p+k (``sliding_window_view``, minus its
    per-call overhead). The caller guarantees n >= 8."""
    return as_strided(a8, shape=(a8.size - k + 1, k), strides=(a8.strides[0],) * 2, writeable=False)


class _EntryTables:
    """Vectorised bounds-checked reads of the same field of every Entry table of a packet, by the
    verifier rules of spec section 6.7 (bounds, alignment, uoffsets not 0).

    ``table`` holds the absolute positions of the tables (already checked); each read gathers from
    read-only sliding-window views of the buffer, only at positions checked to lie inside it. The
    byte ranges read (table heads, fields, vectors) are collected in ``starts`` / ``ends`` for the
    sharing rule (DF-SEC-20).
    """

    __slots__ = ("a8", "ends", "n", "starts", "table", "vsize", "vt", "w2", "w4", "w8")

    def __init__(self, a8: NDArray[np.uint8], elems: NDArray[np.int64]) -> None:
        self.a8 = a8
        self.n = n = int(a8.size)
        self.w2, self.w4, self.w8 = _windows(a8, 2), _windows(a8, 4), _windows(a8, 8)
        # elems: positions of the uoffsets in the entries vector (inside the buffer and aligned:
        # checked by the caller)
        uoff = self.u32(elems)
        self.fail_where(uoff == 0, "uoffset 0 (points to itself)")
        table = elems + uoff
        self.fail_where(table + 4 > n, "table out of bounds")
        self.fail_where(table % 4 != 0, "table not aligned to 4")
        vt = table - self.w4[table].view("<i4")[:, 0].astype(np.int64)
        self.fail_where((vt < 0) | (vt + 4 > n), "vtable out of bounds")
        self.fail_where(vt % 2 != 0, "vtable not aligned to 2")
        vsize = self.w2[vt].view("<u2")[:, 0].astype(np.int64)
        self.fail_where((vsize < 4) | ((vsize & 1) == 1) | (vt + vsize > n), "vtable size invalid")
        self.table, self.vt, self.vsize = table, vt, vsize
        self.starts: list[NDArray[np.int64]] = [table]
        self.ends: list[NDArray[np.int64]] = [table + 4]

    @staticmethod
    def fail_where(bad: NDArray[np.bool_], what: str) -> None:
        if bool(bad.any()):
            _malformed(f"entries[{int(np.argmax(bad))}]: {what}")

    def u32(self, pos: NDArray[np.int64]) -> NDArray[np.int64]:
        return self.w4[pos].view("<u4")[:, 0].astype(np.int64)

    def field(self, slot: int, size: int, name: str) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
        """(present, absolute position) of field ``slot``; present ones checked to hold ``size``
        bytes aligned to ``size``."""
        voff = 4 + 2 * slot
        has = self.vsize >= voff + 2
        off = np.zeros(self.table.size, dtype=np.int64)
        off[has] = self.w2[self.vt[has] + voff].view("<u2")[:, 0]
        present = off != 0
        pos = self.table + off
        self.fail_where(present & (pos + size > self.n), f"{name} out of bounds")
        if size > 1:
            self.fail_where(present & (pos % size != 0), f"{name} not aligned to {size}")
        self.starts.append(pos[present])
        self.ends.append(pos[present] + size)
        return present, pos

    def scalar(self, slot: int, size: int, name: str) -> NDArray[np.uint64]:
        """A scalar field (default 0 when absent)."""
        present, pos = self.field(slot, size, name)
        out = np.zeros(self.table.size, dtype=np.uint64)
        at = pos[present]
        if size == 1:
            out[present] = self.a8[at]
        elif size == 4:
            out[present] = self.w4[at].view("<u4")[:, 0]
        elif size == 8:
            out[present] = self.w8[at].view("<u8")[:, 0]
        else:
            raise AssertionError(size)
        return out

    def vector(
        self, slot: int, elem_size: int, name: str
    ) -> tuple[NDArray[np.bool_], NDArray[np.int64], NDArray[np.int64]]:
        """(present, start of the elements, element count) of a vector field."""
        present, pos = self.field(slot, 4, name)
        uoff = np.zeros(self.table.size, dtype=np.int64)
        uoff[present] = self.u32(pos[present])
        self.fail_where(present & (uoff == 0), f"{name} uoffset 0 (points to itself)")
        target = pos + uoff
        self.fail_where(present & (target + 4 > self.n), f"{name} length out of bounds")
        self.fail_where(present & (target % 4 != 0), f"{name} length not aligned to 4")
        count = np.zeros(self.table.size, dtype=np.int64)
        count[present] = self.u32(target[present])
        start = target + 4
        end = start + count * elem_size
        self.fail_where(present & (end > self.n), f"{name} data out of bounds")
        self.starts.append(target[present])
        self.ends.append(end[present])
        return present, start, count


def _check_disjoint(starts: NDArray[np.int64], ends: NDArray[np.int64]) -> None:
    """DF-SEC-20: the byte ranges of the objects of a packet (table heads, fields, vectors; not
    vtables) are pairwise disjoint."""
    if starts.size < 2:
        return
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    bad = e[:-1] > s[1:]
    if bool(bad.any()):
        k = int(np.argmax(bad))
        _malformed(
            f"shared or overlapping objects: bytes [{int(s[k])}, {int(e[k])}) and "
            f"[{int(s[k + 1])}, {int(e[k + 1])})"
        )


def _first_bad_pair(ok: NDArray[np.bool_], counts: NDArray[np.int64]) -> int:
    """Entry index of the first False in ``ok``, the pairwise checks of concatenated entries."""
    pair = int(np.argmin(ok))
    return int(np.searchsorted(np.cumsum(counts), pair + 1, side="right"))


def _check_order(idx_all: NDArray[np.uint32], counts: NDArray[np.int64]) -> None:
    """UNSORTED_INDICES, then DUPLICATE_INDEX, over the concatenated indices of all entries."""
    if idx_all.size < 2:
        return
    nat = kernels() if counts.size == 1 and ready(idx_all, np.uint32) else None
    if nat is not None and nat.increasing(idx_all):  # the common case in one pass
        return
    lo, hi = idx_all[:-1], idx_all[1:]
    ok = hi > lo
    if counts.size > 1:  # pairs that straddle two entries are not checked
        ok[np.cumsum(counts)[:-1] - 1] = True
    if bool(ok.all()):
        return
    unsorted = hi < lo
    if counts.size > 1:
        unsorted[np.cumsum(counts)[:-1] - 1] = False
    if bool(unsorted.any()):
        j = _first_bad_pair(~unsorted, counts)
        raise DecodeError(ErrorCode.UNSORTED_INDICES, f"entries[{j}]: indices not ascending")
    j = _first_bad_pair(ok, counts)
    raise DecodeError(ErrorCode.DUPLICATE_INDEX, f"entries[{j}]: duplicate index")


def _trusted_entry(
    origin: int,
    incarnation: int,
    seq: int,
    hops: int,
    indices: NDArray[np.uint32],
    values: NDArray[np.float32],
    signature: bytes | None = None,
) -> Entry:
    """An Entry from checked decoder output, without the coercions of ``__init__`` (hot path)."""
    e = object.__new__(Entry)
    e.__dict__.update(
        origin=origin,
        incarnation=incarnation,
        seq=seq,
        hops=hops,
        indices=indices,
        values=values,
        signature=signature,
    )
    return e


def _all_finite(values: NDArray[np.float32]) -> bool:
    return bool(np.isfinite(values).all())


#: Packets with at most this many entries are checked entry by entry with `_Reader` (a constant
#: of a few struct reads per field) rather than by `_EntryTables` (a constant of a few NumPy calls per
#: field, which dominates a small packet's decode).
_FEW_ENTRIES = 8
#: The vtable sizes the entry-by-entry path knows: Packet fields 0..8, Entry fields 0..10 (schema
#: 1.1). A table with a larger vtable (fields added later in the schema) takes the vectorised path,
#: which is where new fields are read.
_KNOWN_PACKET_VTABLE = 4 + 2 * 9
_KNOWN_ENTRY_VTABLE = 4 + 2 * 11


def _few_entries(
    r: _Reader, root: tuple[int, int, int], start: int, count: int
) -> tuple[NDArray[Any], ...] | None:
    """The Entry fields of a packet of few entries, with the checks of `_EntryTables` (all
    MALFORMED), read entry by entry; the spans go to ``r.spans``. ``None`` (nothing recorded) when
    the root or an Entry table has a vtable larger than the fields this path knows."""
    if root[2] > _KNOWN_PACKET_VTABLE:
        return None
    mark = len(r.spans)
    tables = []
    for k in range(count):
        elem = start + 4 * k  # inside the buffer and aligned: checked with the entries vector
        uoff = _U32.unpack_from(r.mv, elem)[0]
        if uoff == 0:
            _malformed(f"entries[{k}]: uoffset 0 (points to itself)")
        tab = r.table(elem + uoff, f"entries[{k}]")
        if tab[2] > _KNOWN_ENTRY_VTABLE:
            del r.spans[mark:]
            return None
        tables.append(tab)
    # columns: origin, incarnation, seq, hops; (present, start, count) of indices, values,
    # values16, packed_indices, values8, signature; scale (its bits)
    cols: list[list[int]] = [[] for _ in range(23)]
    for k, tab in enumerate(tables):
        what = f"entries[{k}]"
        row = [
            r.u64(tab, _E_ORIGIN, what + ".origin"),
            r.u64(tab, _E_INCARNATION, what + ".incarnation"),
            r.u64(tab, _E_SEQ, what + ".seq"),
            r.u8(tab, _E_HOPS, what + ".hops"),
        ]
        for slot, size, name in _FEW_VECTORS:
            vec = r.vector(tab, slot, size, f"{what}.{name}")
            row += [0, 0, 0] if vec is None else [1, vec[0], vec[1]]
        row.append(r.u32(tab, _E_SCALE, what + ".scale"))
        for col, x in zip(cols, row, strict=True):
            col.append(x)
    for k in range(count):
        if not cols[4][k]:
            _malformed(f"entries[{k}]: indices (required) missing")
        for c, name in ((0, "origin"), (1, "incarnation"), (2, "seq")):
            if cols[c][k] == 0:
                _malformed(f"entries[{k}]: {name} is 0")
        if cols[19][k] and cols[21][k] != SIGNATURE_SIZE:
            _malformed(f"entries[{k}]: signature is not 64 bytes")
    u64s = [np.array(c, dtype=np.uint64) for c in cols[:4]]
    rest = [
        np.array(c, dtype=np.bool_) if i % 3 == 0 else np.array(c, dtype=np.int64)
        for i, c in enumerate(cols[4:22])
    ]
    return (*u64s, *rest, np.array(cols[22], dtype=np.uint64))


#: The vector fields the entry-by-entry path reads, in the order of its columns.
_FEW_VECTORS = (
    (_E_INDICES, 4, "indices"),
    (_E_VALUES, 4, "values"),
    (_E_VALUES16, 2, "values16"),
    (_E_PACKED_INDICES, 1, "packed_indices"),
    (_E_VALUES8, 1, "values8"),
    (_E_SIGNATURE, 1, "signature"),
)


def _check_disjoint_few(spans: list[tuple[int, int]]) -> None:
    """`_check_disjoint` over a short list of ``(start, end)`` spans, without NumPy."""
    s = sorted(spans, key=lambda x: x[0])  # stable, as argsort(kind="stable")
    for (a0, e0), (a1, e1) in itertools.pairwise(s):
        if e0 > a1:
            _malformed(f"shared or overlapping objects: bytes [{a0}, {e0}) and [{a1}, {e1})")


def screen(buf: bytes | bytearray | memoryview, max_packet_size: int) -> ErrorCode | None:
    """The first two checks of decoding, without parsing (DF-ZEN-154): ``OVERSIZE`` or
    ``BAD_IDENTIFIER`` when `decode_packet` would reject ``buf`` with that code, else ``None``. O(1)."""
    n = len(buf)
    if n > max_packet_size:
        return ErrorCode.OVERSIZE
    if n < 8 or bytes(buf[4:8]) != FILE_IDENTIFIER:
        return ErrorCode.BAD_IDENTIFIER
    return None


@dataclass(frozen=True)
class PacketHeader:
    """What `peek_header` reads of a packet: enough to name who sent it and what it claims."""

    sender: int
    sender_incarnation: int
    version_major: int
    version_minor: int
    fingerprint: bytes | None
    encoding: int
    index_encoding: int


def peek_header(buf: bytes | bytearray | memoryview) -> PacketHeader | None:
    """The header fields of a packet that may fail to decode (an unsupported version or encoding,
    another fingerprint), for reporting who sent it; None when even they cannot be read. Checks
    nothing else: never a reason to accept a packet."""
    mv = memoryview(buf)
    try:
        if len(mv) < 8 or bytes(mv[4:8]) != FILE_IDENTIFIER:
            return None
        r = _Reader(mv)
        root_off = _U32.unpack_from(mv, 0)[0]
        if root_off == 0:
            return None
        root = r.table(root_off, "Packet")
        fp = r.vector(root, _P_FINGERPRINT, 1, "Packet.fingerprint")
        fingerprint = (
            bytes(mv[fp[0] : fp[0] + FINGERPRINT_SIZE])
            if fp is not None and fp[1] == FINGERPRINT_SIZE
            else None
        )
        return PacketHeader(
            r.u64(root, _P_SENDER, "Packet.sender"),
            r.u64(root, _P_SENDER_INC, "Packet.sender_incarnation"),
            r.u16(root, _P_VERSION_MAJOR, "Packet.version_major"),
            r.u16(root, _P_VERSION_MINOR, "Packet.version_minor"),
            fingerprint,
            r.u8(root, _P_ENCODING, "Packet.encoding"),
            r.u8(root, _P_INDEX_ENCODING, "Packet.index_encoding"),
        )
    except (DecodeError, struct.error, IndexError, ValueError):
        return None


def _decode(mv: memoryview, max_packet_size: int) -> Packet:
    n = len(mv)
    if n > max_packet_size:
        raise DecodeError(ErrorCode.OVERSIZE, f"{n} bytes > max_packet_size {max_packet_size}")
    if n < 8 or bytes(mv[4:8]) != FILE_IDENTIFIER:
        raise DecodeError(ErrorCode.BAD_IDENTIFIER, "missing file identifier DFP1")
    r = _Reader(mv)
    root_off = _U32.unpack_from(mv, 0)[0]
    if root_off == 0:
        _malformed("root uoffset 0 (points to itself)")
    root = r.table(root_off, "Packet")

    version_major = r.u16(root, _P_VERSION_MAJOR, "Packet.version_major")
    if version_major != VERSION_MAJOR:
        raise DecodeError(ErrorCode.UNSUPPORTED_VERSION, f"version_major {version_major}")
    version_minor = r.u16(root, _P_VERSION_MINOR, "Packet.version_minor")
    sender = r.u64(root, _P_SENDER, "Packet.sender")
    sender_incarnation = r.u64(root, _P_SENDER_INC, "Packet.sender_incarnation")
    fp = r.vector(root, _P_FINGERPRINT, 1, "Packet.fingerprint")
    encoding_raw = r.u8(root, _P_ENCODING, "Packet.encoding")
    entries_vec = r.vector(root, _P_ENTRIES, 4, "Packet.entries")
    heard_vec = r.vector(root, _P_HEARD, 8, "Packet.heard")
    index_encoding_raw = r.u8(root, _P_INDEX_ENCODING, "Packet.index_encoding")
    if fp is None:
        _malformed("Packet.fingerprint (required) missing")
    if fp[1] != FINGERPRINT_SIZE:
        _malformed(f"fingerprint has {fp[1]} bytes, expected {FINGERPRINT_SIZE}")
    if entries_vec is None:
        _malformed("Packet.entries (required) missing")
    if sender == 0:
        _malformed("sender is 0")
    if sender_incarnation == 0:
        _malformed("sender_incarnation is 0")
    fingerprint = bytes(mv[fp[0] : fp[0] + FINGERPRINT_SIZE])
    heard = _heard(mv, heard_vec)

    start, count = entries_vec
    if count == 0:
        _check_disjoint(
            np.array([a for a, _ in r.spans], dtype=np.int64),
            np.array([b for _, b in r.spans], dtype=np.int64),
        )
        _check_encodings(encoding_raw, index_encoding_raw)
        return Packet(
            sender,
            sender_incarnation,
            fingerprint,
            (),
            ValueEncoding(encoding_raw),
            version_major,
            version_minor,
            heard,
            IndexEncoding(index_encoding_raw),
        )

    a8: NDArray[np.uint8] = np.frombuffer(mv, dtype=np.uint8)
    a8.flags.writeable = False
    few = _few_entries(r, root, start, count) if count <= _FEW_ENTRIES else None
    if few is not None:  # the same checks, entry by entry (no NumPy call per field)
        (origin, incarnation, seq, hops, idx_present, idx_start, idx_count) = few[:7]
        (v32_present, v32_start, v32_count, v16_present, v16_start, v16_count) = few[7:13]
        (pk_present, pk_start, pk_count, v8_present, v8_start, v8_count) = few[13:19]
        (sig_present, sig_start, sig_count, scale_bits) = few[19:]
        _check_disjoint_few(r.spans)
    else:
        # Every Entry table at once (MALFORMED checks).
        t = _EntryTables(a8, start + 4 * np.arange(count, dtype=np.int64))
        origin = t.scalar(_E_ORIGIN, 8, "origin")
        incarnation = t.scalar(_E_INCARNATION, 8, "incarnation")
        seq = t.scalar(_E_SEQ, 8, "seq")
        hops = t.scalar(_E_HOPS, 1, "hops")
        idx_present, idx_start, idx_count = t.vector(_E_INDICES, 4, "indices")
        v32_present, v32_start, v32_count = t.vector(_E_VALUES, 4, "values")
        v16_present, v16_start, v16_count = t.vector(_E_VALUES16, 2, "values16")
        pk_present, pk_start, pk_count = t.vector(_E_PACKED_INDICES, 1, "packed_indices")
        v8_present, v8_start, v8_count = t.vector(_E_VALUES8, 1, "values8")
        scale_bits = t.scalar(_E_SCALE, 4, "scale")
        sig_present, sig_start, sig_count = t.vector(_E_SIGNATURE, 1, "signature")
        t.fail_where(~idx_present, "indices (required) missing")
        t.fail_where(origin == 0, "origin is 0")
        t.fail_where(incarnation == 0, "incarnation is 0")
        t.fail_where(seq == 0, "seq is 0")
        t.fail_where(sig_present & (sig_count != SIGNATURE_SIZE), "signature is not 64 bytes")
        # DF-SEC-20 (sharing rule): no two objects share a byte, so no small packet decodes to a
        # huge one through entries that point at one table or at overlapping vectors.
        _check_disjoint(
            np.concatenate([np.array([a for a, _ in r.spans], dtype=np.int64), *t.starts]),
            np.concatenate([np.array([b for _, b in r.spans], dtype=np.int64), *t.ends]),
        )

    _check_encodings(encoding_raw, index_encoding_raw)
    vc = CODECS[ValueEncoding(encoding_raw)]
    encoding = vc.encoding
    index_encoding = IndexEncoding(index_encoding_raw)
    present = {"values": v32_present, "values16": v16_present, "values8": v8_present}
    wrong = np.zeros(count, dtype=np.bool_)
    for name, has in present.items():
        wrong |= ~has if name == vc.field else has
    _EntryTables.fail_where(wrong, f"{vc.name} packet needs {vc.field} and no other values vector")
    val_start, val_count = {
        "values": (v32_start, v32_count),
        "values16": (v16_start, v16_count),
        "values8": (v8_start, v8_count),
    }[vc.field]
    scales = np.zeros(0, dtype=np.float32)
    if vc.scale_of is not None:  # Q8 (1.1): a finite scale with the sign bit set is MALFORMED
        scales = scale_bits.astype(np.uint32).view(np.float32)
        _EntryTables.fail_where(np.isfinite(scales) & np.signbit(scales), "Q8 scale is negative")
    packed_views: list[NDArray[np.uint32]] = []
    if index_encoding is IndexEncoding.PACKED:  # section 6.8 (1.1)
        _EntryTables.fail_where(
            ~pk_present | (idx_count != 0), "PACKED entry needs packed_indices, empty indices"
        )
        # with the native kernels, entry by entry is faster than the one NumPy pass over all
        together = (
            _unpack_deltas(a8, pk_start, pk_count) if count > 1 and kernels() is None else None
        )
        if together is not None:
            packed_views = together
        else:  # entry by entry: the first faulty entry's fault, as the check order says
            for j, (s0, c0) in enumerate(zip(pk_start.tolist(), pk_count.tolist(), strict=True)):
                try:
                    packed_views.append(_readonly(unpack_indices(a8[s0 : s0 + c0])))
                except DecodeError as exc:
                    raise DecodeError(exc.code, f"entries[{j}]: {exc.detail}") from None
        idx_count = np.array([v.size for v in packed_views], dtype=np.int64)
    else:
        _EntryTables.fail_where(pk_present, "PLAIN entry with packed_indices")

    bad = val_count != idx_count
    if bool(bad.any()):
        j = int(np.argmax(bad))
        raise DecodeError(
            ErrorCode.LENGTH_MISMATCH,
            f"entries[{j}]: {val_count[j]} values for {idx_count[j]} indices",
        )
    empty = idx_count == 0
    if bool(empty.any()):
        raise DecodeError(ErrorCode.EMPTY_ENTRY, f"entries[{int(np.argmax(empty))}] has no index")

    # Per-entry views: zero-copy for indices and F32 values (read-only, since a8 is).
    counts = idx_count.tolist()
    if packed_views:
        idx_views = packed_views
    else:
        idx_views = [
            a8[s : s + 4 * c].view("<u4") for s, c in zip(idx_start.tolist(), counts, strict=True)
        ]
    idx_all = idx_views[0] if count == 1 else np.concatenate(idx_views)
    _check_order(idx_all, idx_count)
    val_views: list[NDArray[np.float32]]
    finite: bool | None = None  # known from the native decode of Q8 values
    if vc.field == "values":
        val_views = [
            a8[s : s + 4 * c].view("<f4") for s, c in zip(val_start.tolist(), counts, strict=True)
        ]
        val_all = val_views[0] if count == 1 else np.concatenate(val_views)
    else:
        if scales.size and not _all_finite(scales):
            j = int(np.argmax(~np.isfinite(scales)))
            raise DecodeError(ErrorCode.NON_FINITE, f"entries[{j}]: Q8 scale is not finite")
        size = vc.value_bytes
        bits = [
            a8[s : s + size * c].view(vc.wire_dtype)
            for s, c in zip(val_start.tolist(), counts, strict=True)
        ]
        bits_all = bits[0] if count == 1 else np.concatenate(bits)
        if (
            scales.size
        ):  # fl32(q * scale), the scale of each value's entry (may overflow: NON_FINITE)
            nat = kernels() if count == 1 and ready(bits_all, np.int8) else None
            if nat is not None:  # the same products and their finite check in one pass
                val_all = np.empty(bits_all.size, dtype=np.float32)
                finite = bool(nat.q8_decode(bits_all, float(scales[0]), val_all))
            else:
                with np.errstate(over="ignore"):
                    per_value = scales[0] if count == 1 else np.repeat(scales, idx_count)
                    val_all = np.multiply(bits_all, per_value, dtype=np.float32)
        else:
            val_all = vc.decode(bits_all, np.float32(0.0))
        val_all = _readonly(val_all)
        val_views = [val_all] if count == 1 else np.split(val_all, np.cumsum(idx_count)[:-1])
    if not (finite if finite is not None else _all_finite(val_all)):
        pos = int(np.argmax(~np.isfinite(val_all)))
        j = int(np.searchsorted(np.cumsum(idx_count), pos, side="right"))
        raise DecodeError(ErrorCode.NON_FINITE, f"entries[{j}]: NaN or infinite value")

    sigs: list[bytes | None] = [None] * int(count)
    if bool(sig_present.any()):
        for j in np.flatnonzero(sig_present).tolist():
            s0 = int(sig_start[j])
            sigs[j] = bytes(mv[s0 : s0 + SIGNATURE_SIZE])
    entries = tuple(
        _trusted_entry(o, i, q, h, iv, vv, sg)
        for o, i, q, h, iv, vv, sg in zip(
            origin.tolist(),
            incarnation.tolist(),
            seq.tolist(),
            hops.tolist(),
            idx_views,
            val_views,
            sigs,
            strict=True,
        )
    )
    return Packet(
        sender,
        sender_incarnation,
        fingerprint,
        entries,
        encoding,
        version_major,
        version_minor,
        heard,
        index_encoding,
    )


def _unpack_deltas(
    a8: NDArray[np.uint8], starts: NDArray[np.int64], counts: NDArray[np.int64]
) -> list[NDArray[np.uint32]] | None:
    """The packed indices of every entry at once, when every entry is a well-formed delta form
    (section 6.8) whose indices stay below 2**32: read-only views of one array, equal to
    `unpack_indices` entry by entry. ``None`` for anything else (a bitmap, an empty or malformed
    string): the caller then decodes entry by entry, which reports the first fault in order.

    Every body ends with a complete varint (checked first), so the varints of the concatenated
    bodies are those of the entries, in order; one pass decodes them, and each entry's indices are
    the running sums minus the sum before its first varint."""
    if bool((counts < 2).any()) or bool(a8[starts].any()):  # no varint, or not FORM_DELTA
        return None
    lengths = counts - 1
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    # positions of the bodies' bytes in the buffer: starts + 1 + offset within the body
    pos = np.arange(total, dtype=np.int64) + np.repeat(starts + 1 - (ends - lengths), lengths)
    data = a8[pos]
    if bool((data[ends - 1] >= 0x80).any()):  # a body ends inside a varint
        return None
    try:
        sums = _varint_sums(data)
    except DecodeError:
        return None
    last = data < 0x80
    per_entry = np.add.reduceat(last, ends - lengths, dtype=np.int64)  # varints per entry
    v_end = np.cumsum(per_entry)
    before = np.zeros(counts.size, dtype=np.uint64)  # the running sum before each entry
    before[1:] = sums[v_end[:-1] - 1]
    if bool((sums[v_end - 1] - before >= (1 << 32)).any()):  # an index >= 2**32
        return None
    idx = _readonly((sums - np.repeat(before, per_entry)).astype(np.uint32))
    return np.split(idx, v_end[:-1])


def _check_encodings(encoding_raw: int, index_encoding_raw: int) -> None:
    """Step 6 of DF-RCV-20: UNSUPPORTED_ENCODING for a value encoding not in the table, then for an
    index encoding other than PLAIN and PACKED (1.1)."""
    if encoding_raw not in CODECS:
        raise DecodeError(ErrorCode.UNSUPPORTED_ENCODING, f"encoding {encoding_raw}")
    if index_encoding_raw not in _INDEX_ENCODINGS:
        raise DecodeError(ErrorCode.UNSUPPORTED_ENCODING, f"index_encoding {index_encoding_raw}")


def _heard(mv: memoryview, vec: tuple[int, int] | None) -> tuple[int, ...] | None:
    """``Packet.heard`` (1.1, DF-PKT-60): absent is ``None``; present, its ids must be non-zero and
    strictly ascending (``MALFORMED`` otherwise)."""
    if vec is None:
        return None
    start, count = vec
    ids = np.frombuffer(mv, dtype="<u8", count=count, offset=start)
    if bool((ids == 0).any()):
        _malformed("Packet.heard holds node id 0")
    if bool((ids[1:] <= ids[:-1]).any()):
        _malformed("Packet.heard is not strictly ascending")
    return tuple(ids.tolist())


def decode_packet(
    buf: bytes | bytearray | memoryview, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE
) -> Packet:
    """Decode and check a packet without context (check order: see the module docstring).

    Raises :class:`DecodeError` (and nothing else) for any content of ``buf``. Indices and F32
    values are returned as zero-copy, read-only NumPy views over ``buf`` (keep ``buf`` unchanged
    while the packet is in use when it is a mutable buffer); F16/BF16 values are decoded into new
    f32 arrays.
    """
    mv = memoryview(buf)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    try:
        return _decode(mv, max_packet_size)
    except DecodeError:
        raise
    except Exception as exc:  # last line of defence; the reader is meant never to get here
        raise DecodeError(ErrorCode.MALFORMED, f"undecodable: {type(exc).__name__}: {exc}") from exc


def validate_packet(packet: Packet, *, fingerprint: bytes, num_params: int, hop_limit: int) -> None:
    """Context checks of a decoded packet: FINGERPRINT_MISMATCH, HOP_LIMIT, INDEX_OUT_OF_RANGE
    (in that order, each over all entries). Raises :class:`DecodeError`."""
    if bytes(packet.fingerprint) != bytes(fingerprint):
        raise DecodeError(
            ErrorCode.FINGERPRINT_MISMATCH,
            f"packet {bytes(packet.fingerprint).hex()} != local {bytes(fingerprint).hex()}",
        )
    for j, e in enumerate(packet.entries):
        if e.hops > hop_limit:
            raise DecodeError(
                ErrorCode.HOP_LIMIT, f"entries[{j}]: hops {e.hops} > hop_limit {hop_limit}"
            )
    nonempty = [e.indices for e in packet.entries if e.indices.size]
    if not nonempty:
        return
    top = int((nonempty[0] if len(nonempty) == 1 else np.concatenate(nonempty)).max())
    if top >= num_params:
        for j, e in enumerate(packet.entries):
            if e.indices.size and int(e.indices.max()) >= num_params:
                raise DecodeError(
                    ErrorCode.INDEX_OUT_OF_RANGE,
                    f"entries[{j}]: index {int(e.indices.max())} >= num_params {num_params}",
                )


# ------------------------------------------------------------------------------------------------
# JSON (spec/protocol.md Appendix B.2; also the output of `delta-fabric inspect`)
# ------------------------------------------------------------------------------------------------


def _hex16(x: int) -> str:
    return f"{x:016x}"


def _json_values(values: NDArray[np.float32]) -> list[float | str]:
    out: list[float | str] = values.astype(np.float64).tolist()
    if not bool(np.isfinite(values).all()):
        for i, x in enumerate(out):
            assert isinstance(x, float)
            if math.isnan(x):
                out[i] = "nan"
            elif math.isinf(x):
                out[i] = "inf" if x > 0 else "-inf"
    return out


def packet_to_json(packet: Packet) -> dict[str, Any]:
    """The packet JSON of spec Appendix B.2: ids and incarnations as 16 hex digits, values as the
    decoded f32 values (JSON numbers of ``float(np.float32(x))``; "nan"/"inf"/"-inf" otherwise)."""
    return {
        "version_major": int(packet.version_major),
        "version_minor": int(packet.version_minor),
        "sender": _hex16(packet.sender),
        "sender_incarnation": _hex16(packet.sender_incarnation),
        "fingerprint": bytes(packet.fingerprint).hex(),
        "encoding": ValueEncoding(packet.encoding).name,
        **(
            {}
            if packet.index_encoding is IndexEncoding.PLAIN
            else {"index_encoding": IndexEncoding(packet.index_encoding).name}
        ),
        **({} if packet.heard is None else {"heard": [_hex16(x) for x in packet.heard]}),
        "entries": [
            {
                "origin": _hex16(e.origin),
                "incarnation": _hex16(e.incarnation),
                "seq": int(e.seq),
                "hops": int(e.hops),
                "indices": e.indices.tolist(),
                "values": _json_values(e.values),
                **({} if e.signature is None else {"signature": e.signature.hex()}),
            }
            for e in packet.entries
        ],
    }


def _parse_json_int(text: str) -> int | float:
    # DF-CNF-20: the integer form -0 is the float -0.0 (json would make it the integer 0, that is +0.0)
    return -0.0 if text == "-0" else int(text)


def json_loads(text: str | bytes) -> Any:
    """``json.loads`` with the number rules of spec DF-CNF-20: ``-0`` reads as -0.0 (so that a value's
    sign survives a writer that prints integers). Other numbers read as :func:`json.loads` reads
    them; ``NaN`` and ``Infinity``, which JSON does not have, are refused (``ValueError``)."""

    def refuse(name: str) -> float:
        raise ValueError(f"{name} is not JSON (DF-CNF-20: write non-finite f32 values as strings)")

    return json.loads(text, parse_int=_parse_json_int, parse_constant=refuse)


def _finite_json(x: Any) -> Any:
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {k: _finite_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_json(v) for v in x]
    return x


def json_dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps`` with the number rules of spec DF-CNF-20: every float is written in a float form
    (``-0.0``, ``1.0``: Python's ``repr``), and a non-finite float as ``"nan"``, ``"inf"`` or
    ``"-inf"`` instead of failing (the f32 values of a node whose weights became non-finite are
    reported, not lost). ``kw`` goes to :func:`json.dumps`."""
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:  # a non-finite float somewhere: rewrite (rare; the common path is one pass)
        return json.dumps(_finite_json(obj), allow_nan=False, **kw)


def _parse_hex_u64(x: Any, what: str) -> int:
    if isinstance(x, str):
        try:
            v = int(x, 16)
        except ValueError:
            raise ValueError(f"{what}: not a hex string: {x!r}") from None
    elif isinstance(x, int) and not isinstance(x, bool):
        v = x
    else:
        raise ValueError(f"{what}: expected a hex string, got {x!r}")
    if not 0 <= v <= U64_MAX:
        raise ValueError(f"{what}: out of the u64 range")
    return v


def _parse_value(x: Any) -> float:
    if isinstance(x, str):
        special = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
        if x not in special:
            raise ValueError(f"bad value {x!r}")
        return special[x]
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"bad value {x!r}")
    return float(x)


def _iter_entries(d: Any) -> Iterator[Mapping[str, Any]]:
    if not isinstance(d, Sequence):
        raise ValueError("entries must be a list")
    for e in d:
        if not isinstance(e, Mapping):
            raise ValueError("each entry must be an object")
        yield e


def packet_from_json(d: Mapping[str, Any]) -> Packet:
    """Inverse of :func:`packet_to_json`. Raises ``ValueError`` for a malformed object."""
    try:
        entries = tuple(
            Entry(
                origin=_parse_hex_u64(e["origin"], "origin"),
                incarnation=_parse_hex_u64(e["incarnation"], "incarnation"),
                seq=int(e["seq"]),
                hops=int(e["hops"]),
                indices=_as_u32_array(np.asarray([int(i) for i in e["indices"]], dtype=np.int64)),
                values=np.asarray([_parse_value(v) for v in e["values"]], dtype=np.float64).astype(
                    np.float32
                ),
                signature=None if e.get("signature") is None else bytes.fromhex(e["signature"]),
            )
            for e in _iter_entries(d["entries"])
        )
        return Packet(
            sender=_parse_hex_u64(d["sender"], "sender"),
            sender_incarnation=_parse_hex_u64(d["sender_incarnation"], "sender_incarnation"),
            fingerprint=bytes.fromhex(d["fingerprint"]),
            entries=entries,
            encoding=ValueEncoding[d.get("encoding", "F32")],
            version_major=int(d.get("version_major", VERSION_MAJOR)),
            version_minor=int(d.get("version_minor", VERSION_MINOR)),
            heard=(
                None
                if d.get("heard") is None
                else tuple(_parse_hex_u64(x, "heard") for x in d["heard"])
            ),
            index_encoding=IndexEncoding.parse(d.get("index_encoding", "PLAIN")),
        )
    except KeyError as exc:
        raise ValueError(f"missing or unknown key {exc}") from None
    except TypeError as exc:
        raise ValueError(str(exc)) from None
