"""Mutated and random bytes: decode returns a Packet or raises DecodeError with a spec code, nothing
else.

The decoder has a last-resort wrapper that turns unexpected exceptions into MALFORMED with an
"undecodable:" detail; these tests also assert it is never reached (the reader checks every bound
itself).
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.wire import (
    FILE_IDENTIFIER,
    Entry,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FP = hashlib.sha256(b"fuzz").digest()


def _seeds() -> list[bytes]:
    e1 = Entry(11, 12, 13, 1, [0, 4, 9, 1000], [0.5, -0.25, 1e-3, 7.0])
    e2 = Entry(21, 22, 23, 0, [2], [3.0])
    e3 = Entry(31, 32, 33, 16, np.arange(0, 64, 2), np.linspace(-1, 1, 32))
    return [
        encode_packet(Packet(1, 2, FP, (e1, e2, e3), enc, version_minor=enc.value))
        for enc in ValueEncoding
    ] + [encode_packet(Packet(1, 2, FP, ()))]


SEEDS = _seeds()
CODES = set(ErrorCode)


def check(buf: bytes) -> Packet | None:
    try:
        p = decode_packet(buf)
    except DecodeError as exc:
        assert exc.code in CODES
        assert not exc.detail.startswith("undecodable:"), exc.detail
        return None
    # everything decode promises about an accepted packet
    assert p.version_major == 1 and len(p.fingerprint) == 32 and p.sender and p.sender_incarnation
    for e in p.entries:
        assert e.origin and e.incarnation and e.seq
        assert e.indices.size == e.values.size > 0
        assert np.all(e.indices[1:] > e.indices[:-1])
        assert np.all(np.isfinite(e.values))
    if p.encoding is ValueEncoding.Q8:
        # a Q8 entry's scale is any finite one >= 0 on receipt, but an encoder writes the canonical
        # power of two (DF-PKT-111), so the first round trip may requantize; after it, the content is
        # a fixed point
        p2 = decode_packet(encode_packet(p))
        assert [e.indices.tolist() for e in p2.entries] == [e.indices.tolist() for e in p.entries]
        assert decode_packet(encode_packet(p2)) == p2
    else:
        assert decode_packet(encode_packet(p)) == p
    return p


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    buf = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "u32", "u16", "insert", "delete", "truncate"]))
        if not buf:
            break
        pos = draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            buf[pos] = draw(st.integers(0, 255))
        elif kind in ("u32", "u16") and pos + 4 <= len(buf):
            fmt = "<I" if kind == "u32" else "<H"
            hi = 0xFFFFFFFF if kind == "u32" else 0xFFFF
            value = draw(
                st.one_of(
                    st.integers(0, hi),
                    st.sampled_from([0, 1, 2, 3, 4, len(buf), hi, hi // 2]),
                )
            )
            struct.pack_into(fmt, buf, pos, value)
        elif kind == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del buf[pos : pos + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del buf[pos:]
    return bytes(buf)


@settings(max_examples=1500)
@given(mutated())
def test_mutated_packets_decode_or_reject_cleanly(buf: bytes) -> None:
    # REQ: DF-SEC-1
    # REQ: DF-RCV-1
    # REQ: DF-ERR-3
    check(buf)


@settings(max_examples=400)
@given(st.binary(max_size=256))
def test_random_bytes_reject_cleanly(buf: bytes) -> None:
    # REQ: DF-SEC-1
    # REQ: DF-ERR-2
    check(buf)


@settings(max_examples=800)
@given(st.binary(min_size=0, max_size=300), st.integers(0, 0xFFFF))
def test_random_bytes_with_identifier_reject_cleanly(body: bytes, root: int) -> None:
    # REQ: DF-ERR-3
    check(struct.pack("<I", root % (len(body) + 12)) + FILE_IDENTIFIER + body)


def test_every_single_byte_change_of_a_seed() -> None:
    # exhaustive over positions for one small seed: each byte set to 0x00, 0xFF and bit-flipped
    seed = SEEDS[-1]
    for pos in range(len(seed)):
        for new in (0x00, 0xFF, seed[pos] ^ 0x80):
            buf = bytearray(seed)
            buf[pos] = new
            check(bytes(buf))
