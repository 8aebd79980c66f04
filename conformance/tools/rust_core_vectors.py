"""Vectors that kill mutants of the Rust core found alive by the full campaigns of ``replay.rs``,
``engine.rs`` and ``wire.rs`` (issue 10 item 3, ``conformance/tools/mutation.py rust``; h55), and of
``compact.rs``, ``signing.rs`` and ``snapshot.rs`` (h60).

Each vector pins a behaviour that a plausible wrong implementation gets wrong (a subtraction read
as a division, a bound off by one); the mutant it kills is named in its description, in words.
Called by ``make_vectors.py`` (``build(vectors_dir) -> index rows``): receive vectors go to
``receive/`` (format of ``engine_vectors.py``). Every vector is checked against the reference
implementation while it is written.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.encodings import ValueEncoding
from delta_fabric.engine import Engine
from delta_fabric.errors import ErrorCode
from delta_fabric.signing import Signing
from delta_fabric.wire import Packet, encode_packet

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import config_vectors as cv  # noqa: E402
import engine_vectors as ev  # noqa: E402
import pinning_vectors as pv  # noqa: E402
import rust_pinning_vectors as rpv  # noqa: E402
import signed_vectors as sv  # noqa: E402
import snapshot_vectors as snv  # noqa: E402
from compact_vectors import (  # noqa: E402
    CE,
    CP,
    FEAT_PACKED,
    FEAT_Q8,
    PACKED,
    REQ_CHECKS,
    REQ_FORMS,
    REQ_PACKED,
    REQ_Q8,
    _entry,
    build_raw,
)
from delta_fabric_conformance.runner import shorter_packed_form  # noqa: E402

__all__ = ["build"]


# ------------------------------------------------------------------------------------------------------
# decode
# ------------------------------------------------------------------------------------------------------


def _root_vtable_of_size_4() -> bytes:
    """16 bytes: the root uoffset 12, DFP1, a vtable of size 4 (no field slot; table size 4) at 8
    and the root table at 12 (soffset 4): every field absent."""
    b = bytearray(16)
    struct.pack_into("<I", b, 0, 12)
    b[4:8] = b"DFP1"
    struct.pack_into("<HH", b, 8, 4, 4)
    struct.pack_into("<i", b, 12, 12 - 8)
    return bytes(b)


def decode_cases() -> list[pv.DecodeCase]:
    return [
        pv.DecodeCase(
            "root_vtable_size_4",
            "A root table whose vtable has size 4, the smallest valid size (DF-PKT-20 rule 2: even "
            "and at least 4), so it has no field slot and every field is absent: version_major reads "
            "as its default 0, and the packet is UNSUPPORTED_VERSION (step 3 of DF-RCV-20, before "
            "the required fields of step 5). A reader that refuses a vtable of size 4 answers "
            "MALFORMED.",
            ["DF-PKT-20", "DF-RCV-20", "DF-VER-1"],
            _root_vtable_of_size_4(),
            error=ErrorCode.UNSUPPORTED_VERSION,
        ),
    ]


def _packed_form_case(name: str, description: str, indices: list[int], form: str) -> pv.DecodeCase:
    """A valid PACKED F32 packet of one entry (N = 2^32 - 1) whose indices the encoder writes as
    ``form`` (hex), the shorter form of DF-PKT-116; the encode round trip checks that form."""
    mv = pv.mv
    packet = Packet(
        mv.SENDER,
        mv.SENDER_INC,
        mv.LARGE_MANIFEST.fingerprint,
        (_entry(0xB2, 1, indices, [0.5 * (j + 1) for j in range(len(indices))]),),
        ValueEncoding.F32,
        version_minor=1,
        index_encoding=PACKED,
    )
    data = encode_packet(packet)
    assert shorter_packed_form(indices).hex() == form, (name, shorter_packed_form(indices).hex())
    assert bytes.fromhex(form) in data, name  # the reference writes that form
    return pv.DecodeCase(
        name,
        description,
        [REQ_PACKED, REQ_FORMS],
        data,
        expect=packet,
        manifest=mv.LARGE_MANIFEST,
    )


def packed_form_cases() -> list[pv.DecodeCase]:
    """The encoder's choice of form where a varint's length decides it (DF-PKT-116): a mutant of
    ``compact.rs`` ``varint_len`` that miscounts the base's varint picks the other form."""
    return [
        _packed_form_case(
            "packed_tie_two_byte_base",
            "PACKED F32 (N = 2^32 - 1): indices [200, 207], whose forms have 4 bytes each because "
            "the base 200 takes a two-byte varint (delta 00 c8 01 07, bitmap 01 c8 01 81): the "
            "encoder writes delta (a tie). An encoder that counts the base as one byte finds the "
            "bitmap shorter and writes it (checked by the encode round trip).",
            [200, 207],
            "00c80107",
        ),
        _packed_form_case(
            "packed_bitmap_one_byte_shorter",
            "PACKED F32: indices [1, 2, 3] as the bitmap 01 01 07 (3 bytes), one byte shorter "
            "than delta 00 01 01 01: the encoder writes the bitmap. An encoder that counts the "
            "base's varint one byte too long finds a tie and writes delta.",
            [1, 2, 3],
            "010107",
        ),
        _packed_form_case(
            "packed_bitmap_two_byte_base",
            "PACKED F32 (N = 2^32 - 1): indices [200, 201, 202, 203] as the bitmap 01 c8 01 0f "
            "(4 bytes; delta 00 c8 01 01 01 01 has 6): the encoder writes the bitmap. An encoder "
            "that counts the two-byte base varint as 3 or more bytes writes delta.",
            [200, 201, 202, 203],
            "01c8010f",
        ),
        _packed_form_case(
            "packed_tie_span_nine",
            "PACKED F32: indices [0, 4, 8], a span of 9 indices: the bitmap needs 2 bytes after "
            "its base (01 00 11 01) and ties with delta 00 00 04 04, so the encoder writes delta. "
            "An encoder that takes the span as last - first (8, one bitmap byte) finds the bitmap "
            "shorter and writes it.",
            [0, 4, 8],
            "00000404",
        ),
        _packed_form_case(
            "packed_delta_far_apart",
            "PACKED F32: indices [100, 300] as delta 00 64 c8 01 (4 bytes; the bitmap from 100 "
            "takes 28). An encoder that computes the span from last / first (300 / 100 + 1 = 4 "
            "indices, one bitmap byte) finds the bitmap shorter.",
            [100, 300],
            "0064c801",
        ),
        # session 7 (lead): two Python survivors of h59's compact campaign
        _packed_form_case(
            "packed_bitmap_span_eight",
            "PACKED F32: indices [0, 3, 7], a span of exactly 8 indices: the bitmap 01 00 89 (3 "
            "bytes) is one byte shorter than delta 00 00 03 04, so the encoder writes the bitmap. "
            "An encoder that rounds the span up to a byte count as (span + 8) / 8, or counts the "
            "span one too long, finds 4 bytes, a tie, and writes delta.",
            [0, 3, 7],
            "010089",
        ),
        _packed_form_case(
            "packed_tie_base_128",
            "PACKED F32: indices [128, 130, 143]: the bitmap 01 80 01 05 80 and delta 00 80 01 02 "
            "0d both take 5 bytes, so the encoder writes delta (a tie). The base 128 = 2^7 is the "
            "smallest that takes a two-byte varint; an encoder that counts it as one byte (x <= 2^7 "
            "for one byte) finds the bitmap shorter and writes it.",
            [128, 130, 143],
            "008001020d",
        ),
    ]


#: 2^32 - 8 as a varint (f8 ff ff ff 0f): a bitmap base whose first byte reaches 2^32 - 1
_BASE_TOP = bytes([0xF8, 0xFF, 0xFF, 0xFF, 0x0F])


def packed_bitmap_top_cases() -> list[pv.DecodeCase]:
    """Bitmaps whose last index lies at the 2^32 bound (DF-PKT-116), read as written: a receiver
    computes the last index from the base, the number of bytes and the last byte's highest bit."""
    mv = pv.mv
    large = mv.LARGE_MANIFEST
    top = (1 << 32) - 8
    raw = CP(
        [CE(packed=bytes([1, *_BASE_TOP, 0x01]), values=[1.0])], encoding=int(ValueEncoding.F32)
    )
    expect = Packet(
        mv.SENDER,
        mv.SENDER_INC,
        large.fingerprint,
        (_entry(0xB2, 1, [top], [1.0]),),
        ValueEncoding.F32,
        version_minor=1,
        index_encoding=PACKED,
    )
    two = CP(
        [CE(packed=bytes([1, *_BASE_TOP, 0x01, 0x01]), values=[1.0, 1.0])],
        encoding=int(ValueEncoding.F32),
    )
    return [
        pv.DecodeCase(
            "packed_bitmap_base_near_2_32",
            "PACKED F32 (N = 2^32 - 1): the bitmap 01 f8 ff ff ff 0f 01 as written (delta would "
            "be shorter): base 2^32 - 8 and bit 0 of its one byte, so the index is 2^32 - 8, below "
            "2^32 and below N: valid. A receiver that bounds the last index by base + 8 * bytes, "
            "or by the byte's lowest clear bit instead of its highest set bit (7 + 7 here), "
            "finds an index of 2^32 or more and answers MALFORMED.",
            [REQ_PACKED, REQ_CHECKS, REQ_FORMS],
            build_raw(raw, large.fingerprint),
            expect=expect,
            manifest=large,
        ),
        pv.DecodeCase(
            "packed_bitmap_second_byte_2_32",
            "PACKED bitmap: base 2^32 - 8 and the bytes 01 01: the second byte's bit 0 is index "
            "2^32 - 8 + 8 = 2^32, so MALFORMED (DF-PKT-116). A receiver that takes the last byte's "
            "position as (bytes - 1) / 8 instead of (bytes - 1) * 8 misses it, and its u32 "
            "indices wrap to 0 (UNSORTED_INDICES).",
            [REQ_PACKED, REQ_CHECKS, REQ_FORMS],
            build_raw(two, mv.VECTOR_MANIFEST.fingerprint),
            error=ErrorCode.MALFORMED,
        ),
    ]


#: A packet longer than 1 MiB + 16 bytes: accepted under the default max_packet_size of 16 MiB.
BIG_PACKET_MIN = 1024 * 1024 + 17


def _big_default_packet() -> bytes:
    """One packet of B, longer than :data:`BIG_PACKET_MIN`: entries of all 24 indices, each value
    2^-20, seqs 1, 2, ..., hops 16 (the default hop_limit: accepted, not relayed)."""
    idx = list(range(ev.N))
    n = 1
    while True:
        entries = [ev.ent(ev.B, ev.B_INC, s, 16, idx, [2.0**-20] * ev.N) for s in range(1, n + 1)]
        data = ev.pkt(*entries)
        if len(data) >= BIG_PACKET_MIN:
            return data
        n = max(n + 1, n * BIG_PACKET_MIN // len(data))


def default_size_case() -> ev.RecvCase:
    return ev.RecvCase(
        "config_defaults_max_packet_size",
        "The config is {}: max_packet_size takes its default, 16 MiB = 16777216 bytes (DF-PAR-6, "
        "DF-PAR-11), so one packet of B of more than 1 MiB + 16 bytes (entries of every index, "
        "each value 2^-20, hops 16: accepted, not relayed) is accepted. A node whose default is "
        "smaller (for example 16 * 1024 + 1024 or 16 + 1024 * 1024 bytes) rejects it as OVERSIZE.",
        ["DF-PAR-6", "DF-PAR-11", "DF-ERR-1", "DF-RCV-1"],
        [_big_default_packet()],
    )


def receive_cases() -> list[ev.RecvCase]:
    return [
        ev.RecvCase(
            "seq_jump_one_over_bound",
            "max_seq_jump = 5 and B's window at H = 10 (history: seq 10): seq 16 lies 16 - 10 = 6 "
            "above H, one more than the bound, so it is dropped as seq_jump (DF-RCV-52); seq 15, "
            "exactly 5 above H, is accepted. A receiver that compares seq / H (= 1) or any other "
            "function of seq and H than their difference with the bound accepts seq 16.",
            ["DF-RCV-52", "DF-PAR-50", "DF-RCV-3"],
            [
                ev.pkt(ev.ent(ev.B, ev.B_INC, 16, 0, [3], [0.5])),
                ev.pkt(ev.ent(ev.B, ev.B_INC, 15, 0, [4], [0.25]), sender=ev.C),
            ],
            config=SyncConfig.v1_0(max_seq_jump=5),
            history=[(ev.B, ev.B_INC, 10)],
        ),
    ]


# ------------------------------------------------------------------------------------------------------
# generate
# ------------------------------------------------------------------------------------------------------


def _signed_split_vector(vectors_dir: Path) -> dict[str, Any]:
    """A signing node whose entries are split by the size bound of a signed entry (DF-RLY-141)."""
    mps = 408  # PACKET_OVERHEAD_BOUND 160 + entry bound 128 + 8 * 3 + signature bound 96
    cfg = SyncConfig.v1_0(ratio=0.25, max_packet_size=mps)
    active, anchor = ev._pattern(7, 13, 6, 16.0), ev._pattern(5, 11, 5, 32.0)
    signing = Signing(sv.KEYS, sv.seed_of(ev.NODE), node_id=ev.NODE)
    eng = Engine(ev.MANIFEST, cfg, ev.NODE, ev.NODE_INC, anchor=anchor, signing=signing)
    eng.next_seq = 5
    out = eng.generate(active.copy())
    # 6 values, 3 per signed entry; an unsigned entry of the same packet size holds 15
    assert [int(e.indices.size) for e in out] == [3, 3], out
    for e in out:
        assert signing.verify(ev.FP, ValueEncoding.F32, e) is None
    unsigned = Engine(ev.MANIFEST, cfg, ev.NODE, ev.NODE_INC, anchor=anchor)
    unsigned.next_seq = 5
    assert len(unsigned.generate(active.copy())) == 1
    name = "signed_split_by_signed_bound"
    reqs = ["DF-GEN-6", "DF-SEC-140", "DF-SEC-141", "DF-RLY-141"]
    rel = f"generate/{name}"
    if (vectors_dir / f"{rel}.json").exists():
        raise AssertionError(f"{rel}: a vector of that name exists already")
    return sv.write_signed_generate(
        vectors_dir,
        name,
        "A node of a signed cluster with max_packet_size 408 = 160 + 128 + 8 * 3 + "
        "96 generates k = 6 values: by the size bound of a signed entry (DF-RLY-141) an entry "
        "holds 3 values, so they go out as 2 signed entries of 3 (seqs 5 and 6). An unsigned "
        "node would send one entry of 6; an implementation that splits by the unsigned bound, "
        "or miscounts the signature's 96 bytes, splits differently.",
        reqs,
        cfg,
        ev.NODE,
        active,
        anchor,
        eng,
        out,
    )


def q8_scale_case() -> ev.GenCase:
    """A Q8 generation whose largest delta lies in the top 1/128 of its binade (DF-PKT-111)."""
    active = np.zeros(ev.N, np.float32)
    for i, v in {0: 0.998046875, 3: -0.6, 7: 0.3, 11: -0.15, 15: 0.05, 20: 0.9}.items():
        active[i] = v
    return ev.GenCase(
        "compact_q8_scale_top_of_binade",
        "Q8, k = 6 of 24: the largest delta is 0.998046875 = 1 - 2^-9, above 127 * 2^-7 = "
        "0.9921875, so the scale is 2^-6 (not 2^-7) and it is sent as q = 64 (63.875 rounded), "
        "decoded 1.0; the anchor moves by the decoded values. An encoder that picks the scale "
        "by another test than 127 * 2^(e0 - 7) >= max |d| (e.g. 127 + 2^(e0 - 7), or 2^(e0 / 7)) "
        "takes 2^-7 and clamps q to 127 (0.9921875).",
        ["DF-GEN-4", "DF-GEN-5", REQ_Q8, "DF-PKT-115", "DF-PAR-10"],
        active,
        np.zeros(ev.N, np.float32),
        SyncConfig.v1_0(ratio=0.25, encoding=ValueEncoding.Q8),
    )


def snapshot_decode_cases() -> list[snv.DecodeCase]:
    return [
        snv.DecodeCase(
            "identifier_only",
            "Eight bytes: a root offset 0 and the identifier DFS1, nothing else. The identifier "
            "is there (BAD_IDENTIFIER is for fewer than 8 bytes or other bytes 4..8), and the root "
            "table is not, so the chunk is MALFORMED. A reader that wants more than 8 bytes "
            "before it looks at the identifier answers BAD_IDENTIFIER.",
            bytes(4) + b"DFS1",
            "MALFORMED",
            ["DF-ZEN-40"],
        ),
    ]


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write this module's vectors under ``vectors_dir`` (the folders of ``make_vectors.py`` and
    ``engine_vectors.py``, which write theirs first); return their index rows."""
    rows = [pv._write_decode(vectors_dir, c) for c in decode_cases()]
    for c in [*packed_form_cases(), *packed_bitmap_top_cases()]:
        row = pv._write_decode(vectors_dir, c)
        row["features"] = sorted({*row.get("features", []), FEAT_PACKED})
        rows.append(row)
    rows.append(_signed_split_vector(vectors_dir))
    for sc in snapshot_decode_cases():
        if (vectors_dir / "snapshot" / "decode" / f"{sc.name}.dfs").exists():
            raise AssertionError(f"snapshot/decode/{sc.name}: a vector of that name exists already")
        rows.append(rpv._write_decode(vectors_dir, sc))
    q8 = q8_scale_case()
    if (vectors_dir / "generate" / f"{q8.name}.json").exists():
        raise AssertionError(f"generate/{q8.name}: a vector of that name exists already")
    row = ev._write_generate(vectors_dir, q8)
    row["features"] = sorted({*row.get("features", []), FEAT_Q8})
    rows.append(row)
    for c in receive_cases():
        if (vectors_dir / "receive" / c.name).exists():
            raise AssertionError(f"receive/{c.name}: a vector of that name exists already")
        rows.append(ev._write_receive(vectors_dir, c))
    big = default_size_case()
    if (vectors_dir / "receive" / big.name).exists():
        raise AssertionError(f"receive/{big.name}: a vector of that name exists already")
    rows.append(ev._write_receive(vectors_dir, big))
    cv._rewrite(vectors_dir / "receive" / big.name / "case.json", config={})
    return rows


if __name__ == "__main__":
    print("\n".join(c.name for c in receive_cases()))
