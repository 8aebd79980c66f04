"""The compact codecs (spec section 6.8, 1.1): packed indices and Q8 values (REQ: DF-PKT-110)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from delta_fabric.compact import (
    FORM_BITMAP,
    FORM_DELTA,
    decode_indices,
    encode_bitmap,
    encode_delta,
    encode_indices,
    q8_decode,
    q8_encode,
    q8_quantize,
    q8_scale,
)
from delta_fabric.errors import DecodeError, ErrorCode


def u32(xs: list[int]) -> np.ndarray:
    return np.array(xs, dtype=np.uint32)


def test_delta_varint_example() -> None:
    # first index 3, gaps 4 and 300 (two bytes: 0xac 0x02), 2**32 - 1 - 307 (five bytes)
    idx = u32([3, 7, 307, 2**32 - 1])
    b = encode_delta(idx)
    assert b[:6] == bytes([FORM_DELTA, 0x03, 0x04, 0xAC, 0x02, 0xCC])
    assert len(b) == 1 + 1 + 1 + 2 + 5
    assert decode_indices(b).tolist() == idx.tolist()


def test_bitmap_example() -> None:
    idx = u32([8, 9, 11, 16])
    b = encode_bitmap(idx)
    assert b == bytes([FORM_BITMAP, 8, 0b0000_1011, 0b0000_0001])
    assert decode_indices(b).tolist() == idx.tolist()


@pytest.mark.parametrize("density", [0.01, 0.05, 0.2, 0.6, 1.0])
def test_roundtrip_and_shorter_form(density: float) -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    idx = np.sort(rng.choice(n, size=max(1, int(n * density)), replace=False)).astype(np.uint32)
    b = encode_indices(idx)
    assert len(b) == min(len(encode_delta(idx)), len(encode_bitmap(idx)))
    assert decode_indices(b).tolist() == idx.tolist()
    assert b[0] == (FORM_BITMAP if density >= 0.2 else FORM_DELTA)


def _leb128_len(x: int) -> int:
    return max(1, (x.bit_length() + 6) // 7)


def test_shorter_form_at_ties_and_near_ties() -> None:
    # REQ: DF-PKT-116 (the shorter form, delta on a tie), against lengths computed from the
    # definitions: delta = 1 + varints of the first index and the gaps; bitmap = 1 + varint of the
    # base + ceil((span) / 8) bytes
    rng = np.random.default_rng(7)
    cases = [[0, 7], [8, 9, 11, *range(16, 24)], [127, 134], [128, 135], [1 << 20, (1 << 20) + 15]]
    for _ in range(600):
        base = int(rng.choice([0, 5, 127, 128, 300, 1 << 14, (1 << 21) + 3, (1 << 31) + 1]))
        span = int(rng.integers(1, 80))
        k = int(rng.integers(1, span + 1))
        rel = np.sort(rng.choice(span, size=k, replace=False))
        rel[0] = 0
        cases.append([base + int(r) for r in np.unique(rel)])
    for ix in cases:
        idx = np.array(ix, dtype=np.uint32)
        delta = 1 + _leb128_len(ix[0]) + sum(_leb128_len(b - a) for a, b in itertools.pairwise(ix))
        bitmap = 1 + _leb128_len(ix[0]) + (ix[-1] - ix[0]) // 8 + 1
        b = encode_indices(idx)
        assert len(encode_delta(idx)) == delta and len(encode_bitmap(idx)) == bitmap, ix
        assert (b[0], len(b)) == (
            (FORM_BITMAP, bitmap) if bitmap < delta else (FORM_DELTA, delta)
        ), ix


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", ErrorCode.MALFORMED),  # no form byte
        (bytes([7, 1]), ErrorCode.MALFORMED),  # unknown form
        (bytes([FORM_DELTA]), ErrorCode.EMPTY_ENTRY),
        (bytes([FORM_DELTA, 0x83]), ErrorCode.MALFORMED),  # truncated varint
        (bytes([FORM_DELTA, 0x80, 0x00]), ErrorCode.MALFORMED),  # overlong
        (bytes([FORM_DELTA, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), ErrorCode.MALFORMED),  # 6 bytes
        (bytes([FORM_DELTA, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F]), ErrorCode.MALFORMED),  # >= 2**32
        (bytes([FORM_DELTA, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01]), ErrorCode.MALFORMED),  # sum
        (bytes([FORM_DELTA, 0x05, 0x00]), ErrorCode.DUPLICATE_INDEX),
        (bytes([FORM_BITMAP, 0x05]), ErrorCode.EMPTY_ENTRY),
        (bytes([FORM_BITMAP, 0x05, 0x00]), ErrorCode.EMPTY_ENTRY),
        (bytes([FORM_BITMAP, 0x05, 0x01, 0x00]), ErrorCode.MALFORMED),  # trailing 0 byte
        (bytes([FORM_BITMAP, 0x85]), ErrorCode.MALFORMED),  # truncated base
        (bytes([FORM_BITMAP, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x02]), ErrorCode.MALFORMED),
    ],
)
def test_invalid_packed_indices(data: bytes, code: ErrorCode) -> None:
    with pytest.raises(DecodeError) as ei:
        decode_indices(data)
    assert ei.value.code is code


def test_q8_rounding_scale_and_error_feedback() -> None:
    v = np.array([0.5, -1.27, 0.005, 0.00499, 1e-3, 0.0078125 * 3.5], dtype=np.float32)
    scale, q = q8_encode(v)
    # the smallest power of two with 127 * scale >= max|v| = 1.27: 2**-6 (127/64 = 1.98 >= 1.27)
    assert scale == np.float32(2.0**-6)
    assert q.tolist()[:2] == [32, -81]
    # q = rint(v / scale) (exact quotient) with ties to even: 0.02734375 / 2**-6 = 1.75 -> 2
    assert q.tolist() == np.rint(v.astype(np.float64) / float(scale)).astype(int).tolist()
    dec = q8_decode(scale, q)
    assert dec.tolist() == (q.astype(np.float64) * float(scale)).tolist()  # exact product
    assert q8_quantize(v).tolist() == dec.tolist()
    # idempotent: re-encoding the decoded values gives the same scale and bytes
    s2, q2 = q8_encode(dec)
    assert s2 == scale and q2.tolist() == q.tolist()
    # error feedback with the value actually sent: the residual is what Q8 could not carry
    anchor = np.zeros(v.size, dtype=np.float32)
    anchor += q8_quantize(v)
    residual = v - anchor
    assert float(np.max(np.abs(residual))) <= float(scale) / 2


def test_q8_scale_is_the_smallest_power_of_two() -> None:
    rng = np.random.default_rng(3)
    for m in np.abs(rng.normal(size=2000) * 10.0 ** rng.integers(-40, 38, 2000)).astype(np.float32):
        if not np.isfinite(m) or m == 0:
            continue
        s = float(q8_scale(np.array([m], dtype=np.float32)))
        assert 127 * s >= float(m) and (127 * s / 2 < float(m) or s == 2.0**-149)
        assert s == 2.0 ** round(np.log2(s))


def test_q8_edge_cases() -> None:
    scale, q = q8_encode(np.array([1e-45, -1e-45], dtype=np.float32))  # smallest subnormal
    assert scale == np.float32(2.0**-149) and q.tolist() == [1, -1]
    scale, q = q8_encode(np.zeros(3, dtype=np.float32))
    assert scale == 0 and q.tolist() == [0, 0, 0]
    # the largest finite values: q clamped so that q * scale stays finite
    big = np.array([np.finfo(np.float32).max, -np.finfo(np.float32).max], dtype=np.float32)
    assert bool(np.isfinite(q8_quantize(big)).all())
    with pytest.raises(ValueError):
        q8_encode(np.array([np.inf], dtype=np.float32))
    for bad, code in (
        (np.nan, ErrorCode.NON_FINITE),
        (np.inf, ErrorCode.NON_FINITE),
        (-np.inf, ErrorCode.NON_FINITE),
        (-1.0, ErrorCode.MALFORMED),
        (-0.0, ErrorCode.MALFORMED),
    ):
        with pytest.raises(DecodeError) as ei:
            q8_decode(bad, np.array([1], dtype=np.int8))
        assert ei.value.code is code
    # -128 is decodable (never produced by the encoder)
    assert q8_decode(0.5, np.array([-128], dtype=np.int8)).tolist() == [-64.0]


def test_index_encoding_parse() -> None:
    from delta_fabric.compact import IndexEncoding

    assert IndexEncoding.parse("PACKED") is IndexEncoding.PACKED
    assert IndexEncoding.parse(0) is IndexEncoding.PLAIN
    for bad in (True, 1.0, "DENSE", 2):
        with pytest.raises(ValueError, match="index_encoding"):
            IndexEncoding.parse(bad)
