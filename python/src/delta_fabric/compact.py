"""Compact index and value encodings (spec section 6.8, added in 1.1, OPTIONAL): ``PACKED`` indices
and ``Q8`` values, used by :mod:`delta_fabric.wire` and the encodings table.

Indices (an ascending, duplicate-free list of u32) travel as one byte string whose first byte names its
form:

- ``FORM_DELTA`` (0): unsigned LEB128 varints, the first index, then every gap ``i[j] - i[j-1]`` (>= 1).
  Each varint has at most 5 bytes, no overlong form (a last byte of 0 after a first byte), and a value
  below 2**32; the running sum stays below 2**32.
- ``FORM_BITMAP`` (1): a varint ``base``, then bitmap bytes; bit ``b`` (least significant first) of
  bitmap byte ``j`` set means index ``base + 8 * j + b``. At least one bit is set, the last byte is not 0,
  and every index is below 2**32.

:func:`encode_indices` picks the shorter form (delta on a tie). Values: ``Q8`` is one signed byte per
value with one f32 ``scale`` per entry, decoded as ``fl32(q * scale)``; :func:`q8_encode` rounds
``v / scale`` to nearest even with ``scale`` the smallest power of two with ``127 * scale >= max|v|``.
Error feedback uses
:func:`q8_quantize`, the decoded value (as for F16/BF16, DF-GEN-5).

Every decoder raises :class:`~delta_fabric.errors.DecodeError` with the code a receiver would report,
and nothing else, whatever the bytes.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.native import kernels, ready

__all__ = [
    "FORM_BITMAP",
    "FORM_DELTA",
    "IndexEncoding",
    "decode_indices",
    "encode_bitmap",
    "encode_delta",
    "encode_indices",
    "q8_decode",
    "q8_encode",
    "q8_quantize",
    "q8_scale",
    "unpack_indices",
]


class IndexEncoding(IntEnum):
    """Encoding of the indices of every entry of one packet (schema enum ``IndexEncoding``, 1.1)."""

    PLAIN = 0  # uint32 in Entry.indices (1.0)
    PACKED = 1  # Entry.packed_indices: delta + varint or bitmap; Entry.indices empty (OPTIONAL)

    @classmethod
    def parse(cls, value: object) -> IndexEncoding:
        """The member given as itself, its wire value or its name; ``ValueError`` otherwise."""
        try:
            if isinstance(value, str):
                return cls[value.strip().upper()]  # as Rust's from_name (trimmed)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError
            return cls(value)
        except (KeyError, ValueError, TypeError):
            raise ValueError(
                f"index_encoding must be one of PLAIN, PACKED, got {value!r}"
            ) from None


FORM_DELTA = 0
FORM_BITMAP = 1
_U32_LIMIT = 1 << 32
_MAX_VARINT = 5
_ZERO: np.float32 = np.float32(0.0)
_MIN_SCALE_EXP = -149  # 2**-149: the smallest positive binary32


#: Up to this many values, `_varints` encodes in a Python loop.
_FEW_VARINTS = 32
#: ``_VARINT_LIMITS[k]``: the smallest value whose LEB128 needs more than ``k + 1`` bytes.
_VARINT_LIMITS = tuple(1 << (7 * k) for k in range(1, _MAX_VARINT))


def _varints(values: NDArray[np.unsignedinteger[Any]]) -> bytes:
    """LEB128 of every value (each < 2**32), vectorised: byte ``k`` of every varint is written in one
    pass over the varints that have it (most gaps of a dense entry take one byte: one pass)."""
    v = np.asarray(values)
    if v.dtype != np.uint32 and v.dtype != np.uint64:
        v = v.astype(np.uint64)
    if v.size == 0:
        return b""
    if v.size <= _FEW_VARINTS:  # a few values: a Python loop beats the NumPy calls' constant
        out_few = bytearray()
        for x in v.tolist():
            while x >= 0x80:
                out_few.append((x & 0x7F) | 0x80)
                x >>= 7
            out_few.append(x)
        return bytes(out_few)
    longer: list[NDArray[np.intp]] = []  # positions of the varints with more than k + 1 bytes
    for limit in _VARINT_LIMITS:
        pos = np.flatnonzero(v >= limit) if not longer else longer[-1][v[longer[-1]] >= limit]
        if pos.size == 0:
            break
        longer.append(pos)
    if not longer:  # every varint is one byte: the values themselves
        return v.astype(np.uint8).tobytes()
    # intp: NumPy's cumsum is ~3x slower when it converts the type (here and below: no conversion)
    nbytes = np.ones(v.size, dtype=np.intp)
    for pos in longer:
        nbytes[pos] += 1
    ends = np.cumsum(nbytes, dtype=np.intp)
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    starts = ends - nbytes
    first = (v & 0x7F).astype(np.uint8)
    first[longer[0]] |= 0x80
    out[starts] = first
    for k, pos in enumerate(longer, start=1):
        chunk = ((v[pos] >> (7 * k)) & 0x7F).astype(np.uint8)
        if k < len(longer):
            more = longer[k]  # a subset of pos: mark the bytes that continue
            chunk[np.searchsorted(pos, more)] |= 0x80
        out[starts[pos] + k] = chunk
    return out.tobytes()


#: The faults of `_varint_sums` and `unpack_indices` by the native decoder's code (its negation).
_VARINT_FAULTS = {
    1: "packed indices: truncated varint",
    2: "packed indices: varint longer than 5 bytes",
    3: "packed indices: overlong varint",
    4: "packed indices: varint value >= 2**32",
    5: "packed indices: an index >= 2**32",
}


def _varint_sums(data: NDArray[np.uint8]) -> NDArray[np.uint64]:
    """The running sums of the LEB128 varints of ``data`` (which must end with a complete one): entry
    ``j`` is the sum of varints ``0..j``. MALFORMED on a truncated, overlong or too long varint or a
    value >= 2**32 (checked in that order over the whole string).

    Vectorised per byte: the position ``k`` of a byte in its varint is the number of continuation
    bytes just before it (a pass per position, up to 4), so the byte adds ``(b & 0x7F) << 7k`` and
    the sums are one cumulative sum read at the varints' last bytes."""
    n = data.size
    cont = data >= 0x80
    if bool(cont[-1]):
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: truncated varint")
    if not bool(cont.any()):  # every varint is one byte
        ones: NDArray[np.uint64] = np.cumsum(data.astype(np.uint64), dtype=np.uint64)
        return ones
    k = np.zeros(n, dtype=np.uint8)
    run = cont[:-1]  # run[j]: the d bytes before byte j + d are continuation bytes (d = 1 here)
    k[1:] = run
    for d in range(2, _MAX_VARINT + 1):
        run = run[1:] & cont[: n - d]
        if not bool(run.any()):
            break
        if d == _MAX_VARINT:  # 5 continuation bytes in a row: a 6th byte follows
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: varint longer than 5 bytes")
        k[d:] += run
    last = ~cont
    if bool((cont[:-1] & (data[1:] == 0)).any()):  # a 0 last byte after a continuation byte
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: overlong varint")
    if bool(((k == _MAX_VARINT - 1) & (data >= 0x10)).any()):  # a 5th byte above 4 bits
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: varint value >= 2**32")
    contrib = (data & 0x7F).astype(np.uint64) << (k * np.uint8(7)).astype(np.uint64)
    out: NDArray[np.uint64] = np.cumsum(contrib)[last]
    return out


def _read_varints(data: NDArray[np.uint8]) -> NDArray[np.uint64]:
    """Every LEB128 varint of ``data`` (which must end with a complete one). MALFORMED on a truncated,
    overlong or too long varint or a value >= 2**32."""
    if data.size == 0:
        return np.empty(0, dtype=np.uint64)
    sums = _varint_sums(data)
    values = np.empty_like(sums)
    values[:1] = sums[:1]
    np.subtract(sums[1:], sums[:-1], out=values[1:])
    return values


def _check_sorted(indices: NDArray[np.uint32]) -> NDArray[np.unsignedinteger[Any]]:
    """The indices as u32 (an array of them as is) or u64, checked strictly increasing below 2**32
    (``ValueError`` otherwise)."""
    if isinstance(indices, np.ndarray) and indices.dtype == np.uint32 and indices.ndim == 1:
        if indices.size == 0:
            raise ValueError("indices must not be empty")
        if bool((indices[1:] <= indices[:-1]).any()):
            raise ValueError("indices must be strictly increasing u32")
        return indices
    idx = np.asarray(indices, dtype=np.uint64)
    if idx.size == 0:
        raise ValueError("indices must not be empty")
    if bool((idx >= _U32_LIMIT).any()) or bool((np.diff(idx.astype(np.int64)) <= 0).any()):
        raise ValueError("indices must be strictly increasing u32")
    return idx


def _gaps(idx: NDArray[np.unsignedinteger[Any]]) -> NDArray[np.unsignedinteger[Any]]:
    """The first index, then every gap (checked indices: no wrap-around)."""
    gaps = np.empty_like(idx)
    gaps[:1] = idx[:1]
    np.subtract(idx[1:], idx[:-1], out=gaps[1:])
    return gaps


def encode_delta(indices: NDArray[np.uint32]) -> bytes:
    """``FORM_DELTA``: the first index and the gaps as varints. ``ValueError`` for an empty or
    unsorted list."""
    return bytes([FORM_DELTA]) + _varints(_gaps(_check_sorted(indices)))


def encode_bitmap(indices: NDArray[np.uint32]) -> bytes:
    """``FORM_BITMAP``: a varint base (the first index) and the bitmap from it."""
    return _bitmap(_check_sorted(indices))


def _bitmap(idx: NDArray[np.unsignedinteger[Any]]) -> bytes:
    base = int(idx[0])
    rel = (idx - idx.dtype.type(base)).astype(np.intp)
    bits = np.zeros(int(rel[-1]) + 1, dtype=np.uint8)
    bits[rel] = 1
    packed = np.packbits(bits, bitorder="little")
    return bytes([FORM_BITMAP]) + _varints(np.array([base], dtype=np.uint64)) + packed.tobytes()


def _varint_len(x: int) -> int:
    return next((k + 1 for k, limit in enumerate(_VARINT_LIMITS) if x < limit), _MAX_VARINT)


def encode_indices(indices: NDArray[np.uint32]) -> bytes:
    """The shorter of the two forms (delta on a tie). The bitmap's length follows from the span, so
    it is built only when it is the shorter."""
    idx = _check_sorted(indices)
    span = int(idx[-1]) - int(idx[0]) + 1
    bitmap_len = 1 + _varint_len(int(idx[0])) + (span + 7) // 8  # the bitmap's exact length
    if bitmap_len < 1 + idx.size:  # the delta form has at least one byte per index
        return _bitmap(idx)
    nat = kernels() if ready(idx, np.uint32) else None
    if nat is not None:  # the same bytes in one native pass
        buf = np.empty(1 + _MAX_VARINT * idx.size, dtype=np.uint8)
        buf[0] = FORM_DELTA
        delta = buf[: 1 + nat.varint_gaps(idx, buf[1:])].tobytes()
    else:
        delta = bytes([FORM_DELTA]) + _varints(_gaps(idx))
    return _bitmap(idx) if bitmap_len < len(delta) else delta


def unpack_indices(packed: bytes | memoryview | NDArray[np.uint8]) -> NDArray[np.uint32]:
    """The indices of a packed byte string as written, with only its ``MALFORMED`` faults raised (no
    form byte, unknown form, truncated, overlong or too long varint, an index >= 2**32, a bitmap
    ending with a 0 byte after a set bit). The result may be empty (a delta form without varint, a
    bitmap without a set bit) or hold equal neighbours (a gap of 0): the packet decoder reports those
    as ``EMPTY_ENTRY`` and ``DUPLICATE_INDEX`` at their place in the check order (DF-RCV-20)."""
    data = np.frombuffer(packed, dtype=np.uint8) if not isinstance(packed, np.ndarray) else packed
    if data.size == 0:
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: no form byte")
    form = int(data[0])
    body = data[1:]
    if form == FORM_DELTA:
        if body.size == 0:
            return np.empty(0, dtype=np.uint32)
        nat = kernels() if ready(body, np.uint8) else None
        if nat is not None:  # the same sums and faults in one native pass
            sums = np.empty(body.size, dtype=np.uint32)
            got = int(nat.varint_sums(body, sums))
            if got < 0:
                raise DecodeError(ErrorCode.MALFORMED, _VARINT_FAULTS[-got])
            return sums[:got]
        if body.size * 0x7F < _U32_LIMIT and int(body.max()) < 0x80:
            # one-byte gaps whose sum stays below 2**32: the indices are their u32 running sums
            one: NDArray[np.uint32] = np.cumsum(body.astype(np.uint32), dtype=np.uint32)
            return one
        idx = _varint_sums(body)  # the running sums of the gaps
        if int(idx[-1]) >= _U32_LIMIT:
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: an index >= 2**32")
        return idx.astype(np.uint32)
    if form == FORM_BITMAP:
        last = np.flatnonzero((body & 0x80) == 0)
        if last.size == 0:
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: truncated base")
        base = int(_read_varints(body[: last[0] + 1])[0])
        bitmap = body[last[0] + 1 :]
        if not bool(bitmap.any()):
            return np.empty(0, dtype=np.uint32)
        if int(bitmap[-1]) == 0:
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: bitmap ends with a 0 byte")
        rel = np.flatnonzero(np.unpackbits(bitmap, bitorder="little")).astype(np.uint64)
        top = int(rel[-1]) + base
        if top >= _U32_LIMIT:
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: an index >= 2**32")
        out: NDArray[np.uint32] = (rel + np.uint64(base)).astype(np.uint32)
        return out
    raise DecodeError(ErrorCode.MALFORMED, f"packed indices: unknown form {form}")


def decode_indices(packed: bytes | memoryview | NDArray[np.uint8]) -> NDArray[np.uint32]:
    """The indices of a packed byte string. ``DecodeError``: ``MALFORMED`` (see
    :func:`unpack_indices`), then ``EMPTY_ENTRY`` (no index), then ``DUPLICATE_INDEX`` (a gap of 0)."""
    idx = unpack_indices(packed)
    if idx.size == 0:
        raise DecodeError(ErrorCode.EMPTY_ENTRY, "packed indices: no index")
    if bool((idx[1:] == idx[:-1]).any()):
        raise DecodeError(ErrorCode.DUPLICATE_INDEX, "packed indices: a gap of 0")
    return idx


def q8_scale(values: NDArray[np.float32]) -> np.float32:
    """The Q8 scale of an entry: 0 when every value is 0, else the smallest power of two ``2**e``
    (``e >= -149``) with ``127 * 2**e >= max|v|``. A power of two makes ``q * scale`` exact and
    the encoding idempotent (re-encoding decoded values gives the same bytes): what error feedback
    and relays rely on."""
    v = np.asarray(values, dtype=np.float32)
    m = float(np.max(np.abs(v))) if v.size else 0.0
    if m == 0.0:
        return _ZERO
    _, e0 = math.frexp(m)  # m < 2**e0
    e = e0 - 7 if 127.0 * math.ldexp(1.0, e0 - 7) >= m else e0 - 6
    scale: np.float32 = np.float32(math.ldexp(1.0, max(e, _MIN_SCALE_EXP)))
    return scale


def q8_encode(values: NDArray[np.float32]) -> tuple[np.float32, NDArray[np.int8]]:
    """``(scale, q)`` of finite f32 values: ``scale`` from :func:`q8_scale`; ``q[i] = v[i] / scale``
    (exact) rounded to nearest even, clamped to [-127, 127] and to ``|q * scale| <= FLT_MAX`` (0 when
    scale is 0)."""
    v = np.asarray(values, dtype=np.float32)
    if v.size == 0:
        return np.float32(0.0), np.empty(0, dtype=np.int8)
    nat = kernels() if ready(v, np.float32) else None
    if nat is not None:  # the same scale and codes in one native pass
        codes = np.empty(v.size, dtype=np.int8)
        got = np.float32(nat.q8(v, codes))
        if got != got:
            raise ValueError("Q8 encodes finite values only")
        return got, codes
    if not bool(np.isfinite(v).all()):
        raise ValueError("Q8 encodes finite values only")
    scale = q8_scale(v)
    if scale == 0:
        return scale, np.zeros(v.size, dtype=np.int8)
    top = np.float32(min(127.0, math.floor(float(np.finfo(np.float32).max) / float(scale))))
    # v / scale is exact in f32 (scale is a power of two and |v / scale| <= 127; a quotient below
    # the normal range rounds to 0 either way), then rounded to nearest even
    q = np.rint(np.divide(v, scale, dtype=np.float32))
    return scale, np.clip(q, -top, top, out=q).astype(np.int8)


def q8_decode(scale: float | np.float32, q: NDArray[np.int8]) -> NDArray[np.float32]:
    """``fl32(q * scale)``. ``MALFORMED`` for a finite scale with the sign bit set (-0.0 included),
    ``NON_FINITE`` for a scale that is NaN or infinite."""
    s = np.float32(scale)
    if bool(np.isfinite(s)) and bool(np.signbit(s)):
        raise DecodeError(ErrorCode.MALFORMED, "Q8 scale is negative")
    if not bool(np.isfinite(s)):
        raise DecodeError(ErrorCode.NON_FINITE, "Q8 scale is not finite")
    out: NDArray[np.float32] = np.multiply(np.asarray(q, dtype=np.float32), s, dtype=np.float32)
    return out


def q8_quantize(values: NDArray[np.float32]) -> NDArray[np.float32]:
    """What a receiver decodes after ``values`` are sent as Q8: the value error feedback adds to the
    anchor (DF-GEN-5)."""
    v = np.asarray(values, dtype=np.float32)
    nat = kernels() if v.size and ready(v, np.float32) else None
    if nat is not None:  # the codes and fl32(q * scale) in one native call
        out = np.empty(v.size, dtype=np.float32)
        got = np.float32(nat.q8(v, np.empty(v.size, dtype=np.int8), out))
        if got != got:
            raise ValueError("Q8 encodes finite values only")
        return out
    scale, q = q8_encode(v)
    return q8_decode(scale, q)
