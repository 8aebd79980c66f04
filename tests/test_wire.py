"""Wire format: encode/decode round trip, value encodings, decode checks and their codes (DF-PKT,
DF-ERR)."""

from __future__ import annotations

import hashlib
import math
import struct
from fractions import Fraction
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import pytest
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.wire import (
    DEFAULT_MAX_PACKET_SIZE,
    FILE_IDENTIFIER,
    PACKET_OVERHEAD_BOUND,
    Entry,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
    encoded_size_bound,
    packet_from_json,
    packet_to_json,
    quantize,
    quantize_packet,
    validate_packet,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FP = hashlib.sha256(b"deltafabric-manifest/1\nw\tf32\t100\n").digest()
REPO_ROOT = Path(__file__).resolve().parent.parent
U64 = 2**64 - 1

u64_ids = st.integers(min_value=1, max_value=U64)
f32_finite = st.floats(width=32, allow_nan=False, allow_infinity=False)
encodings = st.sampled_from(list(ValueEncoding))


@st.composite
def entries_st(draw: st.DrawFn, max_values: int = 40) -> Entry:
    idx = sorted(
        draw(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=max_values, unique=True))
    )
    vals = draw(st.lists(f32_finite, min_size=len(idx), max_size=len(idx)))
    return Entry(
        origin=draw(u64_ids),
        incarnation=draw(u64_ids),
        seq=draw(u64_ids),
        hops=draw(st.integers(0, 255)),
        indices=np.asarray(idx, dtype=np.uint32),
        values=np.asarray(vals, dtype=np.float32),
    )


@st.composite
def packets_st(draw: st.DrawFn) -> Packet:
    return Packet(
        sender=draw(u64_ids),
        sender_incarnation=draw(u64_ids),
        fingerprint=draw(st.binary(min_size=32, max_size=32)),
        entries=tuple(draw(st.lists(entries_st(), max_size=5))),
        encoding=draw(encodings),
        version_minor=draw(st.integers(0, 0xFFFF)),
    )


def simple(
    *,
    indices: Any = (1, 5, 9),
    values: Any = (0.5, -1.0, 2.0),
    hops: int = 0,
    encoding: ValueEncoding = ValueEncoding.F32,
    **kw: Any,
) -> Packet:
    e = Entry(
        kw.pop("origin", 3),
        kw.pop("incarnation", 4),
        kw.pop("seq", 5),
        hops,
        indices,
        values,
    )
    return Packet(kw.pop("sender", 1), kw.pop("sender_incarnation", 2), FP, (e,), encoding, **kw)


def code_of(buf: bytes, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE) -> ErrorCode | None:
    try:
        decode_packet(buf, max_packet_size)
    except DecodeError as exc:
        return exc.code
    return None


# ------------------------------------------------------------------------------------------------
# Round trip
# ------------------------------------------------------------------------------------------------


@settings(max_examples=150)
@given(packets_st())
def test_round_trip_any_packet(p: Packet) -> None:
    # REQ: DF-CNF-4
    # REQ: DF-PKT-1
    # REQ: DF-PKT-2
    # REQ: DF-PKT-3
    # REQ: DF-PKT-5
    buf = encode_packet(p)
    assert buf[4:8] == FILE_IDENTIFIER
    got = decode_packet(buf)
    assert got == quantize_packet(p)
    for e in got.entries:
        assert e.indices.dtype == np.uint32 and e.values.dtype == np.float32
    # JSON is lossless for decoded packets, and re-encoding a decoded packet gives the same packet
    assert packet_from_json(packet_to_json(got)) == got
    assert decode_packet(encode_packet(got)) == got
    # the size bound used for packing holds
    assert len(buf) <= PACKET_OVERHEAD_BOUND + sum(
        encoded_size_bound(e.indices.size) for e in p.entries
    )


@given(st.lists(entries_st(max_values=300), min_size=1, max_size=4), encodings)
def test_size_bound_holds_per_entry(entries: list[Entry], encoding: ValueEncoding) -> None:
    # REQ: DF-GEN-6
    base = len(encode_packet(Packet(1, 1, FP, (), encoding)))
    assert base <= PACKET_OVERHEAD_BOUND
    size = base
    for k in range(1, len(entries) + 1):
        new = len(encode_packet(Packet(1, 1, FP, tuple(entries[:k]), encoding)))
        assert new - size <= encoded_size_bound(entries[k - 1].indices.size)
        size = new


def test_zero_entry_packet_is_valid() -> None:
    # REQ: DF-PKT-4
    for enc in ValueEncoding:
        p = Packet(7, 8, FP, (), enc)
        assert decode_packet(encode_packet(p)) == p


def test_f32_values_bit_exact() -> None:
    # REQ: DF-PKT-12
    # REQ: DF-PKT-5
    bits = np.array(
        [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF],
        dtype=np.uint32,
    )
    p = simple(indices=range(6), values=bits.view(np.float32))
    got = decode_packet(encode_packet(p))
    assert got.entries[0].values.view(np.uint32).tolist() == bits.tolist()


def test_decode_returns_read_only_zero_copy_views() -> None:
    buf = bytearray(encode_packet(simple(indices=np.arange(1000), values=np.linspace(-1, 1, 1000))))
    base = np.frombuffer(buf, dtype=np.uint8)
    p = decode_packet(buf)
    e = p.entries[0]
    assert np.shares_memory(e.indices, base) and np.shares_memory(e.values, base)
    assert not e.indices.flags.writeable and not e.values.flags.writeable
    np.testing.assert_array_equal(e.indices, np.arange(1000))


def test_decode_accepts_memoryview_and_unaligned_buffers() -> None:
    p = simple(indices=range(0, 40, 3), values=np.arange(14) / 7)
    buf = encode_packet(p)
    want = decode_packet(buf)
    for shift in range(1, 4):  # unaligned start: NumPy views over unaligned data are fine
        padded = bytearray(b"\xaa" * shift + buf)
        assert decode_packet(memoryview(padded)[shift:]) == want
    assert decode_packet(memoryview(buf)) == want
    assert decode_packet(bytearray(buf)) == want
    # a non-byte, non-contiguous view is accepted too
    strided = np.frombuffer(b"".join(bytes([x, 0]) for x in buf), dtype=np.uint8)[::2]
    assert decode_packet(memoryview(strided)) == want


def test_one_million_values_decode() -> None:
    n = 1_000_000
    idx = np.arange(0, 3 * n, 3, dtype=np.uint32)
    vals = np.linspace(-1, 1, n, dtype=np.float32)
    p = Packet(1, 1, FP, (Entry(2, 3, 4, 0, idx, vals),))
    buf = encode_packet(p)
    assert len(buf) <= PACKET_OVERHEAD_BOUND + encoded_size_bound(n) <= DEFAULT_MAX_PACKET_SIZE
    got = decode_packet(buf)
    validate_packet(got, fingerprint=FP, num_params=3 * n, hop_limit=16)
    assert got == p


# ------------------------------------------------------------------------------------------------
# Value encodings (quantize)
# ------------------------------------------------------------------------------------------------


def bf16_reference(x: float) -> float:
    """Round an f32 value to bfloat16, nearest even, clamped to the finite range; exact
    rationals."""
    if math.isnan(x):
        return math.nan
    max_bf16 = float(np.uint32(0x7F7F0000).view(np.float32))
    if math.isinf(x):
        return math.copysign(max_bf16, x)
    bits = int(np.float32(x).view(np.uint32))
    sign, mag = bits & 0x80000000, bits & 0x7FFFFFFF
    lo = mag & 0xFFFF0000
    hi = lo + 0x10000
    fx = Fraction(abs(x))

    def val(b: int) -> Fraction:
        return (
            Fraction(float(np.uint32(b).view(np.float32))) if b < 0x7F800000 else Fraction(2) ** 128
        )

    dlo, dhi = fx - val(lo), val(hi) - fx
    pick = lo if dlo < dhi or (dlo == dhi and (lo >> 16) % 2 == 0) else hi
    if pick >= 0x7F800000:
        pick = 0x7F7F0000
    return float(np.uint32(sign | pick).view(np.float32))


@given(st.lists(st.floats(width=32), min_size=1, max_size=50))
def test_quantize_bf16_matches_exact_reference(xs: list[float]) -> None:
    # REQ: DF-GEN-4
    v = np.asarray(xs, dtype=np.float32)
    got = quantize(v, ValueEncoding.BF16)
    want = np.asarray([bf16_reference(float(x)) for x in v], dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert got[ok].view(np.uint32).tolist() == want[ok].view(np.uint32).tolist()


@given(st.lists(st.floats(width=32), min_size=1, max_size=50))
def test_quantize_f16_is_numpy_rne_clamped(xs: list[float]) -> None:
    # REQ: DF-GEN-4
    v = np.asarray(xs, dtype=np.float32)
    got = quantize(v, ValueEncoding.F16)
    finite = np.isfinite(v)
    assert np.all(np.isfinite(got[finite])), "a finite value never becomes infinite"
    small = finite & (np.abs(v) <= 65504)
    want = v[small].astype(np.float16).astype(np.float32)
    assert got[small].view(np.uint32).tolist() == want.view(np.uint32).tolist()
    big = ~np.isnan(v) & ~small
    assert np.all(got[big] == np.copysign(np.float32(65504), v[big]))
    assert np.all(np.isnan(got[np.isnan(v)]))


@given(st.lists(f32_finite, min_size=1, max_size=50), encodings)
def test_quantize_is_idempotent_and_f32_identity(xs: list[float], enc: ValueEncoding) -> None:
    # REQ: DF-GEN-4
    v = np.asarray(xs, dtype=np.float32)
    once = quantize(v, enc)
    assert once.view(np.uint32).tolist() == quantize(once, enc).view(np.uint32).tolist()
    if enc is ValueEncoding.F32:
        assert once.view(np.uint32).tolist() == v.view(np.uint32).tolist()


def test_every_finite_16_bit_pattern_round_trips() -> None:
    # REQ: DF-PKT-13
    # REQ: DF-PKT-14
    # REQ: DF-PKT-5
    # REQ: DF-GEN-4
    bits = np.arange(1 << 16, dtype=np.uint32)
    f16 = bits.astype(np.uint16).view(np.float16)
    for enc, values in (
        (ValueEncoding.F16, f16[np.isfinite(f16)].astype(np.float32)),
        (ValueEncoding.BF16, (bits << 16).view(np.float32)[(bits & 0x7F80) != 0x7F80]),
    ):
        assert values.size == (1 << 16) - 2048 if enc is ValueEncoding.F16 else (1 << 16) - 512
        p = Packet(1, 1, FP, (Entry(1, 1, 1, 0, np.arange(values.size), values),), enc)
        got = decode_packet(encode_packet(p)).entries[0].values
        assert got.view(np.uint32).tolist() == values.view(np.uint32).tolist()


def test_quantize_ties_and_clamps() -> None:
    # REQ: DF-GEN-4
    f16 = quantize(
        np.array([1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 65520.0, 1e9, -1e9], np.float32),
        ValueEncoding.F16,
    )
    assert f16.tolist() == [1.0, 1 + 2**-9, 65504.0, 65504.0, 65504.0, -65504.0]
    bf = quantize(
        np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4028235e38, -3.4028235e38], np.float32),
        ValueEncoding.BF16,
    )
    assert bf[:2].tolist() == [1.0, 1 + 2**-6]
    assert bf[2:].view(np.uint32).tolist() == [0x7F7F0000, 0xFF7F0000]


# ------------------------------------------------------------------------------------------------
# Decode checks (context-free)
# ------------------------------------------------------------------------------------------------


def test_oversize_boundary() -> None:
    # REQ: DF-ERR-1
    buf = encode_packet(simple())
    assert code_of(buf, len(buf)) is None
    assert code_of(buf, len(buf) - 1) is ErrorCode.OVERSIZE


def test_bad_identifier() -> None:
    # REQ: DF-ERR-2
    buf = encode_packet(simple())
    for bad in (b"", buf[:7], buf[:4] + b"DFP0" + buf[8:], b"\0" * 64):
        assert code_of(bad) is ErrorCode.BAD_IDENTIFIER


def test_version_checked_first() -> None:
    # REQ: DF-ERR-4
    assert code_of(encode_packet(simple(version_major=2))) is ErrorCode.UNSUPPORTED_VERSION
    # a version-2 packet with a field v1 would reject is still reported as a version problem
    assert (
        code_of(encode_packet(simple(version_major=2, sender=0))) is ErrorCode.UNSUPPORTED_VERSION
    )
    assert decode_packet(encode_packet(simple(version_minor=65535))).version_minor == 65535


@pytest.mark.parametrize(
    "kw",
    [
        {"sender": 0},
        {"sender_incarnation": 0},
        {"origin": 0},
        {"incarnation": 0},
        {"seq": 0},
    ],
)
def test_zero_ids_are_malformed(kw: dict[str, int]) -> None:
    # REQ: DF-PKT-2
    # REQ: DF-ERR-3
    assert code_of(encode_packet(simple(**kw))) is ErrorCode.MALFORMED


def test_fingerprint_must_be_32_bytes() -> None:
    # REQ: DF-PKT-8
    # REQ: DF-ERR-3
    for n in (0, 31, 33):
        p = Packet(1, 1, bytes(n), (), ValueEncoding.F32)
        assert code_of(encode_packet(p)) is ErrorCode.MALFORMED


def test_truncations_are_malformed() -> None:
    # REQ: DF-ERR-3
    buf = encode_packet(simple(indices=range(10), values=np.ones(10)))
    for cut in range(8, len(buf)):
        assert code_of(buf[:cut]) is ErrorCode.MALFORMED, cut


def test_semantic_codes() -> None:
    # REQ: DF-ERR-8
    # REQ: DF-ERR-9
    # REQ: DF-ERR-11
    # REQ: DF-ERR-12
    # REQ: DF-ERR-13
    assert code_of(encode_packet(simple(values=(1.0, 2.0)))) is ErrorCode.LENGTH_MISMATCH
    assert code_of(encode_packet(simple(indices=(), values=()))) is ErrorCode.EMPTY_ENTRY
    assert code_of(encode_packet(simple(indices=(1, 0, 2)))) is ErrorCode.UNSORTED_INDICES
    assert code_of(encode_packet(simple(indices=(1, 1, 2)))) is ErrorCode.DUPLICATE_INDEX
    for bad in (math.nan, math.inf, -math.inf):
        assert code_of(encode_packet(simple(values=(1.0, bad, 2.0)))) is ErrorCode.NON_FINITE
    # the 16-bit encodings clamp infinities when encoding; the codes come from the wire bits
    # (vectors)
    assert (
        code_of(encode_packet(simple(values=(1.0, math.inf, 2.0), encoding=ValueEncoding.F16)))
        is None
    )
    assert code_of(
        encode_packet(simple(values=(1.0, math.nan, 2.0), encoding=ValueEncoding.BF16))
    ) is (ErrorCode.NON_FINITE)


def test_codes_follow_table_order_across_entries() -> None:
    # REQ: DF-RCV-1
    dup = Entry(1, 1, 1, 0, [1, 1], [1.0, 1.0])
    unsorted = Entry(2, 1, 1, 0, [2, 1], [1.0, 1.0])
    empty = Entry(3, 1, 1, 0, [], [])
    nan = Entry(4, 1, 1, 0, [1], [math.nan])
    assert code_of(encode_packet(Packet(1, 1, FP, (dup, unsorted)))) is ErrorCode.UNSORTED_INDICES
    assert code_of(encode_packet(Packet(1, 1, FP, (nan, dup, empty)))) is ErrorCode.EMPTY_ENTRY
    assert (
        code_of(encode_packet(Packet(1, 1, FP, (nan, Entry(0, 1, 1, 0, [1], [1.0])))))
        is ErrorCode.MALFORMED
    )


def test_unknown_encoding() -> None:
    # REQ: DF-ERR-5
    buf = bytearray(encode_packet(Packet(1, 1, FP, (), ValueEncoding.BF16)))
    # find the encoding byte: the only byte equal to 2 that, set to 4, changes the decoded encoding
    hits = []
    for i, b in enumerate(buf):
        if b == 2:
            trial = bytearray(buf)
            trial[i] = 4
            if code_of(bytes(trial)) is ErrorCode.UNSUPPORTED_ENCODING:
                hits.append(i)
    assert len(hits) == 1


def _aliasing_packet(entries: int, values: int) -> bytes:
    """``entries`` Entry tables of distinct origins that all point at one indices and one values
    vector (FlatBuffers allows it; no builder does it unasked)."""
    b = flatbuffers.Builder(0)
    idx = b.CreateNumpyVector(np.arange(values, dtype="<u4"))
    val = b.CreateNumpyVector(np.ones(values, dtype="<f4"))
    tables = []
    for k in range(entries):
        b.StartObject(7)
        for slot, x in ((0, k + 1), (1, 1), (2, 1)):
            b.PrependUint64Slot(slot, x, 0)
        b.PrependUOffsetTRelativeSlot(4, idx, 0)
        b.PrependUOffsetTRelativeSlot(5, val, 0)
        tables.append(b.EndObject())
    b.StartVector(4, entries, 4)
    for t in reversed(tables):
        b.PrependUOffsetTRelative(t)
    vec = b.EndVector()
    fp = b.CreateByteVector(FP)
    b.StartObject(7)
    b.PrependUint16Slot(0, 1, 0)
    b.PrependUint64Slot(2, 1, 0)
    b.PrependUint64Slot(3, 1, 0)
    b.PrependUOffsetTRelativeSlot(4, fp, 0)
    b.PrependUOffsetTRelativeSlot(6, vec, 0)
    b.Finish(b.EndObject(), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


def test_vector_aliasing_cannot_amplify_a_packet() -> None:
    # REQ: DF-SEC-1
    # 2,000 entries x 1,000 shared values would decode to 8 MB of element data from ~50 kB
    big = _aliasing_packet(2000, 1000)
    assert len(big) < 100_000
    with pytest.raises(DecodeError) as info:
        decode_packet(big)
    assert info.value.code is ErrorCode.MALFORMED and "shared" in info.value.detail
    # REQ: DF-SEC-20
    # the sharing rule is structural, not a size budget: two entries sharing two small vectors
    # are as malformed as 2,000
    with pytest.raises(DecodeError) as info:
        decode_packet(_aliasing_packet(2, 2))
    assert info.value.code is ErrorCode.MALFORMED and "shared" in info.value.detail
    assert decode_packet(_aliasing_packet(1, 2)).entries[0].origin == 1


def test_decode_error_carries_code_and_detail() -> None:
    with pytest.raises(DecodeError) as info:
        decode_packet(b"\0\0\0\0DFP1")
    assert info.value.code is ErrorCode.MALFORMED
    assert info.value.detail


def test_field_offsets_past_the_table_end_are_checked() -> None:
    # REQ: DF-ERR-3
    buf = encode_packet(simple())
    root = struct.unpack_from("<I", buf, 0)[0]
    vt = root - struct.unpack_from("<i", buf, root)[0]
    for slot in range(7):
        patched = bytearray(buf)
        struct.pack_into("<H", patched, vt + 4 + 2 * slot, 0xFFFC)
        assert code_of(bytes(patched)) is ErrorCode.MALFORMED, slot


def assert_aligned(buf: bytes) -> None:
    """Every table, vtable, scalar and vector of a (valid) packet aligned to its size relative to
    the
    buffer start, as the FlatBuffers verifier requires."""

    def u16(p: int) -> int:
        return int(struct.unpack_from("<H", buf, p)[0])

    def u32(p: int) -> int:
        return int(struct.unpack_from("<I", buf, p)[0])

    def table(pos: int, sizes: dict[int, int]) -> dict[int, int]:
        assert pos % 4 == 0, "table"
        vt = pos - struct.unpack_from("<i", buf, pos)[0]
        assert vt % 2 == 0, "vtable"
        found = {}
        for slot, size in sizes.items():
            if 4 + 2 * slot < u16(vt) and (off := u16(vt + 4 + 2 * slot)):
                assert (pos + off) % size == 0, f"field {slot}"
                found[slot] = pos + off
        return found

    def vector(field: int, elem: int) -> tuple[int, int]:
        target = field + u32(field)
        assert target % 4 == 0 and (target + 4) % elem == 0, "vector"
        return target + 4, u32(target)

    root = table(u32(0), {0: 2, 1: 2, 2: 8, 3: 8, 4: 4, 5: 1, 6: 4})
    vector(root[4], 1)
    start, count = vector(root[6], 4)
    for j in range(count):
        elem = start + 4 * j
        fields = table(elem + u32(elem), {0: 8, 1: 8, 2: 8, 3: 1, 4: 4, 5: 4, 6: 4})
        for slot, size in ((4, 4), (5, 4), (6, 2)):
            if slot in fields:
                vector(fields[slot], size)


@settings(max_examples=60)
@given(packets_st())
def test_encoder_output_is_aligned(p: Packet) -> None:
    # REQ: DF-PKT-6
    assert_aligned(encode_packet(p))


def test_valid_vectors_are_aligned() -> None:
    # REQ: DF-PKT-6
    vectors = REPO_ROOT / "conformance" / "vectors"
    files = sorted((vectors / "decode" / "valid").glob("*.dfp"))
    assert len(files) >= 20
    for f in files:
        assert_aligned(f.read_bytes())


def test_encoder_writes_version_1_1_and_a_1_0_packet_is_accepted() -> None:
    # REQ: DF-VER-1, DF-VER-2
    p = decode_packet(encode_packet(Packet(1, 1, FP, ())))
    assert (p.version_major, p.version_minor) == (1, 1)
    old = decode_packet(encode_packet(Packet(1, 1, FP, (), version_minor=0)))
    assert (old.version_major, old.version_minor) == (1, 0)


# ------------------------------------------------------------------------------------------------
# Validation (context)
# ------------------------------------------------------------------------------------------------


def test_validate_context_checks() -> None:
    # REQ: DF-RCV-8
    # REQ: DF-PKT-9
    # REQ: DF-PKT-10
    # REQ: DF-ERR-6
    # REQ: DF-ERR-7
    # REQ: DF-ERR-10
    def check(p: Packet, **ctx: Any) -> ErrorCode | None:
        args = {"fingerprint": FP, "num_params": 10, "hop_limit": 16} | ctx
        try:
            validate_packet(decode_packet(encode_packet(p)), **args)
        except DecodeError as exc:
            return exc.code
        return None

    # decoding alone (no context) accepts what only the context rejects
    for p in (simple(hops=17), simple(indices=(0, 9, 10))):
        decode_packet(encode_packet(p))
    assert check(simple()) is None
    assert check(simple(), fingerprint=bytes(32)) is ErrorCode.FINGERPRINT_MISMATCH
    assert check(simple(hops=16)) is None
    assert check(simple(hops=17)) is ErrorCode.HOP_LIMIT
    assert check(simple(hops=0), hop_limit=0) is None
    assert check(simple(indices=(0, 9, 10))) is ErrorCode.INDEX_OUT_OF_RANGE
    assert check(simple(indices=(0, 8, 9))) is None
    assert check(simple(indices=(0, 1, 2**32 - 1)), num_params=2**32) is None
    # table order: fingerprint before hops before indices
    assert (
        check(simple(hops=17, indices=(0, 1, 99)), fingerprint=bytes(32))
        is ErrorCode.FINGERPRINT_MISMATCH
    )
    assert check(simple(hops=17, indices=(0, 1, 99))) is ErrorCode.HOP_LIMIT


# ------------------------------------------------------------------------------------------------
# Data classes, encoder arguments, JSON
# ------------------------------------------------------------------------------------------------


def test_entry_coerces_and_compares_bitwise() -> None:
    a = Entry(1, 2, 3, 0, [1, 2], [0.0, math.nan])
    assert a.indices.dtype == np.uint32 and a.values.dtype == np.float32
    assert a == Entry(
        1, 2, 3, 0, np.array([1, 2], np.uint32), np.array([0.0, math.nan], np.float32)
    )
    assert a != Entry(1, 2, 3, 0, [1, 2], [-0.0, math.nan])
    assert a != Entry(1, 2, 4, 0, [1, 2], [0.0, math.nan])
    with pytest.raises(ValueError):
        Entry(1, 2, 3, 0, [-1], [1.0])
    with pytest.raises(ValueError):
        Entry(1, 2, 3, 0, [2**32], [1.0])
    with pytest.raises(TypeError):
        hash(a)


def test_encoder_rejects_values_out_of_wire_range() -> None:
    for kw in (
        {"hops": 256},
        {"hops": -1},
        {"sender": 2**64},
        {"seq": -1},
        {"version_major": 70000},
    ):
        with pytest.raises(ValueError):
            encode_packet(simple(**kw))


def test_json_shape_and_non_finite_values() -> None:
    p = simple(
        values=np.array([math.nan, -math.inf, 0.1], np.float32),
        sender=0xAB,
        encoding=ValueEncoding.F32,
    )
    d = packet_to_json(p)
    assert d["sender"] == "00000000000000ab" and d["sender_incarnation"] == "0000000000000002"
    assert d["fingerprint"] == FP.hex() and d["encoding"] == "F32"
    e = d["entries"][0]
    assert e["values"] == ["nan", "-inf", float(np.float32(0.1))]
    assert e["origin"] == "0000000000000003" and e["seq"] == 5 and e["hops"] == 0
    assert packet_from_json(d) == p


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("entries"),
        lambda d: d.update(sender="xyz"),
        lambda d: d.update(encoding="F64"),
        lambda d: d["entries"][0].update(values=["NaN?"]),
        lambda d: d["entries"][0].update(values=[True, 1, 2]),
        lambda d: d.update(sender="1" * 17),
    ],
)
def test_packet_from_json_rejects_malformed(mutate: Any) -> None:
    d = packet_to_json(simple())
    mutate(d)
    with pytest.raises(ValueError):
        packet_from_json(d)
