"""The value encodings (spec section 6.4; DF-GEN-4; DF-PAR-10) as one table.

For each :class:`ValueEncoding`, a :class:`ValueCodec` row holds its name, which ``Entry`` vector carries
the values (``values`` or ``values16``) with its little-endian dtype, the bytes one value takes on the wire
(what the packet size bound counts), and how values are encoded, decoded and quantized. The Rust core has
the same table (``df_core::encodings``: ``ValueCodec``, ``CODECS``).

Every other module goes through this table (:data:`CODECS`, :func:`codec`): the packet encoder and decoder
(:mod:`delta_fabric.wire`), the configuration (:mod:`delta_fabric.config`) and the engine's quantization
(:mod:`delta_fabric.engine`). **Adding an encoding** therefore means: one member of :class:`ValueEncoding`
(and of the schema enum), one row of :data:`CODECS` here and in the Rust table, its conformance vectors,
and its spec text (section 6.4). ``Q8`` (1.1) is the one row with a per-entry scale (``scale_of``). The packet size bound covers every row (:data:`MAX_VALUE_BYTES`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from delta_fabric.compact import q8_decode, q8_encode, q8_quantize, q8_scale

__all__ = [
    "CODECS",
    "MAX_VALUE_BYTES",
    "ValueCodec",
    "ValueEncoding",
    "codec",
    "quantize",
    "supports",
]


class ValueEncoding(IntEnum):
    """Encoding of the values of every entry of one packet (schema enum ``ValueEncoding``)."""

    F32 = 0
    F16 = 1
    BF16 = 2
    Q8 = 3  # added in 1.1 (OPTIONAL): one signed byte per value times a per-entry scale


@dataclass(frozen=True)
class ValueCodec:
    """One row of the table: everything the protocol needs to know about one value encoding.

    ``encode`` maps the f32 values of one entry to the wire elements of ``field`` (dtype
    ``wire_dtype``); ``decode`` maps wire elements (and the entry's scale, for a scaled row) back to the
    f32 values a receiver sees (exact). Both round and clamp as DF-GEN-4 says: round to nearest even,
    clamped to the finite range of the encoding, NaN stays NaN. ``quantize`` is idempotent for every
    row: re-encoding decoded values gives the same wire elements (error feedback and relays need it).
    """

    encoding: ValueEncoding
    field: Literal["values", "values16", "values8"]
    wire_dtype: str
    value_bytes: int
    encode: Callable[[NDArray[np.float32]], NDArray[Any]]
    decode: Callable[[NDArray[Any], np.float32], NDArray[np.float32]]
    #: the per-entry ``Entry.scale`` of the values (Q8, added in 1.1); ``None``: no scale (the
    #: ``decode`` of such a row ignores its scale argument)
    scale_of: Callable[[NDArray[np.float32]], np.float32] | None = None

    @property
    def name(self) -> str:
        """``"F32"``, ``"F16"``, ``"BF16"``, ``"Q8"`` (the JSON and config spelling)."""
        return self.encoding.name

    @property
    def wide(self) -> bool:
        """Whether the values travel in ``Entry.values`` (else in ``Entry.values16``)."""
        return self.field == "values"

    def quantize(self, values: NDArray[np.float32]) -> NDArray[np.float32]:
        """The f32 values a receiver decodes after ``values`` are sent with this encoding (DF-GEN-4).

        F32: identity (no copy when the input already is a float32 array). Q8: per call, so call it
        once per entry."""
        v = np.asarray(values, dtype=np.float32)
        if self.wide:
            return v
        if self.encoding is ValueEncoding.Q8:
            return q8_quantize(v)  # the same values; one native pass when the kernels are there
        scale = np.float32(0.0) if self.scale_of is None else self.scale_of(v)
        return self.decode(self.encode(v), scale)


# Largest finite magnitudes of the 16-bit encodings.
_F16_MAX = 65504.0
_BF16_MAX_BITS = 0x7F7F


_NO_SCALE = np.float32(0.0)


def _f32_identity(values: NDArray[np.float32]) -> NDArray[np.float32]:
    return np.asarray(values, dtype=np.float32)


def _f32_decode(values: NDArray[Any], _scale: np.float32 = _NO_SCALE) -> NDArray[np.float32]:
    return np.asarray(values, dtype=np.float32)


def _to_q8(values: NDArray[np.float32]) -> NDArray[np.int8]:
    return q8_encode(values)[1]


def _from_q8(q: NDArray[Any], scale: np.float32) -> NDArray[np.float32]:
    return q8_decode(scale, q)


def _to_f16_bits(values: NDArray[np.float32]) -> NDArray[np.uint16]:
    v = np.asarray(values, dtype=np.float32)
    clipped = np.clip(v, np.float32(-_F16_MAX), np.float32(_F16_MAX))  # NaN stays NaN
    return clipped.astype("<f2").view(np.uint16)


def _to_bf16_bits(values: NDArray[np.float32]) -> NDArray[np.uint16]:
    v = np.ascontiguousarray(values, dtype=np.float32)
    bits = v.view(np.uint32)
    nan = np.isnan(v)
    # Round to nearest even on the upper 16 bits. No overflow: finite/inf patterns are <=
    # 0xFF800000.
    safe = np.where(nan, np.uint32(0), bits)
    rounded = (safe + np.uint32(0x7FFF) + ((safe >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    hi = rounded.astype(np.uint16)
    sign = hi & np.uint16(0x8000)
    mag = hi & np.uint16(0x7FFF)
    # Clamp to the finite range: anything that rounded to (or was) infinity becomes the largest
    # finite.
    mag = np.where(mag >= np.uint16(0x7F80), np.uint16(_BF16_MAX_BITS), mag).astype(np.uint16)
    out = (sign | mag).astype(np.uint16)
    nan_bits = ((bits >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)) | np.uint16(0x7FC0)
    result: NDArray[np.uint16] = np.where(nan, nan_bits, out).astype(np.uint16)
    return result


_F16_TABLE: NDArray[np.float32] | None = None


def _from_f16_bits(bits: NDArray[Any], _scale: np.float32 = _NO_SCALE) -> NDArray[np.float32]:
    # A 65536-entry table (256 KiB, built once) is about twice as fast as NumPy's f16 -> f32 cast.
    global _F16_TABLE
    if _F16_TABLE is None:
        _F16_TABLE = np.arange(1 << 16, dtype=np.uint16).view("<f2").astype(np.float32)
    out: NDArray[np.float32] = _F16_TABLE.take(bits)
    return out


def _from_bf16_bits(bits: NDArray[Any], _scale: np.float32 = _NO_SCALE) -> NDArray[np.float32]:
    wide: NDArray[np.uint32] = np.asarray(bits).astype(np.uint32) << np.uint32(16)
    return wide.view(np.float32)


#: The table, keyed by encoding, in wire-value order (read-only).
CODECS: Mapping[ValueEncoding, ValueCodec] = MappingProxyType(
    {
        ValueEncoding.F32: ValueCodec(
            ValueEncoding.F32, "values", "<f4", 4, _f32_identity, _f32_decode
        ),
        ValueEncoding.F16: ValueCodec(
            ValueEncoding.F16, "values16", "<u2", 2, _to_f16_bits, _from_f16_bits
        ),
        ValueEncoding.BF16: ValueCodec(
            ValueEncoding.BF16, "values16", "<u2", 2, _to_bf16_bits, _from_bf16_bits
        ),
        ValueEncoding.Q8: ValueCodec(
            ValueEncoding.Q8, "values8", "i1", 1, _to_q8, _from_q8, q8_scale
        ),
    }
)

#: The largest ``value_bytes`` of the table (the packet size bound of every encoding).
MAX_VALUE_BYTES = max(c.value_bytes for c in CODECS.values())


def codec(encoding: ValueEncoding | int | str) -> ValueCodec:
    """The row of an encoding given as the enum, its wire value or its name.

    ``ValueError`` for anything else: ``encoding must be one of F32, F16, BF16, Q8, got ...``."""
    try:
        if isinstance(encoding, str):
            return CODECS[ValueEncoding[encoding]]
        if isinstance(encoding, bool):
            raise ValueError
        return CODECS[ValueEncoding(encoding)]
    except (KeyError, ValueError, TypeError):
        names = ", ".join(c.name for c in CODECS.values())
        raise ValueError(f"encoding must be one of {names}, got {encoding!r}") from None


def quantize(values: NDArray[np.float32], encoding: ValueEncoding) -> NDArray[np.float32]:
    """The f32 values a receiver decodes after ``values`` are encoded with ``encoding`` (DF-GEN-4).

    F16/BF16: round to nearest even, clamped to the finite range of the encoding (so a finite input
    never becomes infinite); NaN stays NaN. F32: identity (a float32 copy of the input is not made
    when the input already is a float32 array).
    """
    return codec(encoding).quantize(values)


def supports() -> dict[str, list[str]]:
    """The info queryable's ``supports`` member (DF-ZEN-231): the value and index encodings this
    implementation receives, in wire-value order."""
    from delta_fabric.compact import IndexEncoding

    return {
        "encodings": [c.name for c in CODECS.values()],
        "index_encodings": [e.name for e in IndexEncoding],
    }
