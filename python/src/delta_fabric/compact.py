"""Compact index and value encodings: the reference codecs of the proposal
``spec/proposals/compact-encodings.md`` (not yet part of the protocol: no packet carries them).

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
``fl32(v / scale)`` to nearest even with ``scale = fl32(max|v| / 127)``. Error feedback uses
:func:`q8_quantize`, the decoded value (as for F16/BF16, DF-GEN-5).

Every decoder raises :class:`~delta_fabric.errors.DecodeError` with the code a receiver would report,
and nothing else, whatever the bytes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from delta_fabric.errors import DecodeError, ErrorCode

__all__ = [
    "FORM_BITMAP",
    "FORM_DELTA",
    "decode_indices",
    "encode_bitmap",
    "encode_delta",
    "encode_indices",
    "q8_decode",
    "q8_encode",
    "q8_quantize",
]

FORM_DELTA = 0
FORM_BITMAP = 1
_U32_LIMIT = 1 << 32
_MAX_VARINT = 5


def _varints(values: NDArray[np.uint64]) -> bytes:
    """LEB128 of every value (each < 2**32), vectorised."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size == 0:
        return b""
    nbytes = np.ones(v.size, dtype=np.int64)
    for k in range(1, _MAX_VARINT):
        nbytes += (v >> np.uint64(7 * k)) > 0
    out = np.empty(int(nbytes.sum()), dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(nbytes)[:-1]))
    for k in range(_MAX_VARINT):
        has = nbytes > k
        if not bool(has.any()):
            break
        chunk = ((v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        more = (nbytes[has] > k + 1).astype(np.uint8) << np.uint8(7)
        out[starts[has] + k] = chunk | more
    return out.tobytes()


def _read_varints(data: NDArray[np.uint8]) -> NDArray[np.uint64]:
    """Every LEB128 varint of ``data`` (which must end with a complete one). MALFORMED on a truncated,
    overlong or too long varint or a value >= 2**32."""
    if data.size == 0:
        return np.empty(0, dtype=np.uint64)
    last = (data & 0x80) == 0
    if not bool(last[-1]):
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: truncated varint")
    ends = np.flatnonzero(last)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if bool((lengths > _MAX_VARINT).any()):
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: varint longer than 5 bytes")
    if bool(((lengths > 1) & (data[ends] == 0)).any()):
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: overlong varint")
    group = np.repeat(np.arange(ends.size), lengths)
    shift = (np.arange(data.size) - starts[group]).astype(np.uint64) * np.uint64(7)
    parts = (data & 0x7F).astype(np.uint64) << shift
    values = np.zeros(ends.size, dtype=np.uint64)
    np.add.at(values, group, parts)
    if bool((values >= _U32_LIMIT).any()):
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: varint value >= 2**32")
    return values


def _check_sorted(indices: NDArray[np.uint32]) -> NDArray[np.uint64]:
    idx = np.asarray(indices, dtype=np.uint64)
    if idx.size == 0:
        raise ValueError("indices must not be empty")
    if bool((idx >= _U32_LIMIT).any()) or bool((np.diff(idx.astype(np.int64)) <= 0).any()):
        raise ValueError("indices must be strictly increasing u32")
    return idx


def encode_delta(indices: NDArray[np.uint32]) -> bytes:
    """``FORM_DELTA``: the first index and the gaps as varints. ``ValueError`` for an empty or
    unsorted list."""
    idx = _check_sorted(indices)
    gaps = np.concatenate((idx[:1], np.diff(idx)))
    return bytes([FORM_DELTA]) + _varints(gaps)


def encode_bitmap(indices: NDArray[np.uint32]) -> bytes:
    """``FORM_BITMAP``: a varint base (the first index) and the bitmap from it."""
    idx = _check_sorted(indices)
    base = int(idx[0])
    rel = (idx - np.uint64(base)).astype(np.int64)
    bits = np.zeros(int(rel[-1]) + 1, dtype=np.uint8)
    bits[rel] = 1
    packed = np.packbits(bits, bitorder="little")
    return bytes([FORM_BITMAP]) + _varints(np.array([base], dtype=np.uint64)) + packed.tobytes()


def encode_indices(indices: NDArray[np.uint32]) -> bytes:
    """The shorter of the two forms (delta on a tie)."""
    delta = encode_delta(indices)
    idx = np.asarray(indices)
    span = int(idx[-1]) - int(idx[0]) + 1
    base_len = len(_varints(np.array([int(idx[0])], dtype=np.uint64)))
    if 1 + base_len + (span + 7) // 8 < len(delta):  # the bitmap's exact length
        return encode_bitmap(indices)
    return delta


def decode_indices(packed: bytes | memoryview | NDArray[np.uint8]) -> NDArray[np.uint32]:
    """The indices of a packed byte string. ``DecodeError``: ``EMPTY_ENTRY`` (no index),
    ``DUPLICATE_INDEX`` (a gap of 0), ``MALFORMED`` (anything else that is not one of the forms)."""
    data = np.frombuffer(packed, dtype=np.uint8) if not isinstance(packed, np.ndarray) else packed
    if data.size == 0:
        raise DecodeError(ErrorCode.MALFORMED, "packed indices: no form byte")
    form = int(data[0])
    body = data[1:]
    if form == FORM_DELTA:
        gaps = _read_varints(body)
        if gaps.size == 0:
            raise DecodeError(ErrorCode.EMPTY_ENTRY, "packed indices: no index")
        if bool((gaps[1:] == 0).any()):
            raise DecodeError(ErrorCode.DUPLICATE_INDEX, "packed indices: a gap of 0")
        idx = np.cumsum(gaps, dtype=np.uint64)
        if int(idx[-1]) >= _U32_LIMIT:
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: an index >= 2**32")
        return idx.astype(np.uint32)
    if form == FORM_BITMAP:
        last = np.flatnonzero((body & 0x80) == 0)
        if last.size == 0:
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: truncated base")
        base = int(_read_varints(body[: last[0] + 1])[0])
        bitmap = body[last[0] + 1 :]
        if bitmap.size == 0 or int(bitmap[-1]) == 0:
            if not bool(bitmap.any()):
                raise DecodeError(ErrorCode.EMPTY_ENTRY, "packed indices: empty bitmap")
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: bitmap ends with a 0 byte")
        rel = np.flatnonzero(np.unpackbits(bitmap, bitorder="little")).astype(np.uint64)
        top = int(rel[-1]) + base
        if top >= _U32_LIMIT:
            raise DecodeError(ErrorCode.MALFORMED, "packed indices: an index >= 2**32")
        out: NDArray[np.uint32] = (rel + np.uint64(base)).astype(np.uint32)
        return out
    raise DecodeError(ErrorCode.MALFORMED, f"packed indices: unknown form {form}")


def q8_encode(values: NDArray[np.float32]) -> tuple[np.float32, NDArray[np.int8]]:
    """``(scale, q)`` of finite f32 values: ``scale = fl32(max|v| / 127)``; ``q[i]`` is
    ``fl32(v[i] / scale)`` rounded to nearest even and clamped to [-127, 127] (0 when scale is 0)."""
    v = np.asarray(values, dtype=np.float32)
    if v.size == 0:
        return np.float32(0.0), np.empty(0, dtype=np.int8)
    if not bool(np.isfinite(v).all()):
        raise ValueError("Q8 encodes finite values only")
    scale = np.float32(np.max(np.abs(v)) / np.float32(127.0))
    if scale == 0:
        return scale, np.zeros(v.size, dtype=np.int8)
    q = np.rint(np.divide(v, scale, dtype=np.float32))  # f32 division, ties to even
    return scale, np.clip(q, -127, 127).astype(np.int8)


def q8_decode(scale: float | np.float32, q: NDArray[np.int8]) -> NDArray[np.float32]:
    """``fl32(q * scale)``. ``NON_FINITE`` for a scale that is NaN or infinite, ``MALFORMED`` for a
    negative one."""
    s = np.float32(scale)
    if not bool(np.isfinite(s)):
        raise DecodeError(ErrorCode.NON_FINITE, "Q8 scale is not finite")
    if s < 0:
        raise DecodeError(ErrorCode.MALFORMED, "Q8 scale is negative")
    out: NDArray[np.float32] = np.multiply(np.asarray(q, dtype=np.float32), s, dtype=np.float32)
    return out


def q8_quantize(values: NDArray[np.float32]) -> NDArray[np.float32]:
    """What a receiver decodes after ``values`` are sent as Q8: the value error feedback adds to the
    anchor (DF-GEN-5)."""
    scale, q = q8_encode(values)
    return q8_decode(scale, q)
