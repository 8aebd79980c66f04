"""Vectors of anti-entropy by gap repair (spec section 7.9, DF-RCV-160..165, DF-RCV-230, added in
1.1), one file per case, kind ``repair`` (index feature and capability ``repair``, OPTIONAL; driver
protocol section 5.11):

- ``repair/request/<case>.dfr`` and ``.json``: a ``RepairRequest`` buffer (``DFR1``) and its decode
  outcome (command ``repair_decode``);
- ``repair/encode/<case>.json``: request fields and whether a sender may encode them (``repair_encode``;
  an encoded request must decode back to the fields with the same implementation's decoder);
- ``repair/gaps/<case>.json``: a ``GapTracker`` round by round (``repair_gaps``);
- ``repair/resend/<case>.json``: a ``ResendBuffer``'s operations (``repair_resend``).

Every expected result is computed here with the reference (``delta_fabric.repair``); the unit tests of
both implementations read the same files (``tests/test_repair.py``, df-core's ``tests/it/vectors.rs``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
from delta_fabric.repair import (
    VERSION_MINOR,
    GapTracker,
    RepairError,
    RepairRequest,
    ResendBuffer,
    decode_request,
    encode_request,
)
from delta_fabric.wire import Entry
from delta_fabric_conformance.kit.repair_io import GAP_COUNTERS, RESEND_COUNTERS

FP = hashlib.sha256(b"repair-vectors").digest()


def _req(**kw: Any) -> RepairRequest:
    base: dict[str, Any] = dict(
        sender=0x0B,
        sender_incarnation=7,
        fingerprint=FP,
        origin=0x0A,
        incarnation=5,
        seqs=(3, 4, 9),
    )
    base.update(kw)
    return RepairRequest(**base)


def _h(x: int) -> str:
    return f"{x:016x}"


def _json_req(r: RepairRequest) -> dict[str, Any]:
    """Request fields as the driver protocol writes them (section 5.11): ids as 16 hex digits."""
    return {
        "sender": _h(r.sender),
        "sender_incarnation": _h(r.sender_incarnation),
        "fingerprint": r.fingerprint.hex(),
        "origin": _h(r.origin),
        "incarnation": _h(r.incarnation),
        "seqs": list(r.seqs),
        "version_minor": r.version_minor,
    }


def _patch_u16(buf: bytes, slot: int, value: int) -> bytes:
    """``buf`` with the u16 field ``slot`` of the root table set to ``value`` (must be present)."""
    b = bytearray(buf)
    pos = struct.unpack_from("<I", b, 0)[0]
    vt = pos - struct.unpack_from("<i", b, pos)[0]
    off = struct.unpack_from("<H", b, vt + 4 + 2 * slot)[0]
    assert off
    struct.pack_into("<H", b, pos + off, value)
    return bytes(b)


def _patch_seq(buf: bytes, index: int, value: int) -> bytes:
    b = bytearray(buf)
    pos = struct.unpack_from("<I", b, 0)[0]
    vt = pos - struct.unpack_from("<i", b, pos)[0]
    off = struct.unpack_from("<H", b, vt + 4 + 2 * 7)[0]
    target = pos + off + struct.unpack_from("<I", b, pos + off)[0]
    struct.pack_into("<Q", b, target + 4 + 8 * index, value)
    return bytes(b)


@dataclass(frozen=True)
class RawRequest:
    """A ``RepairRequest`` table field by field: None leaves a field out (a scalar then reads as 0);
    ``unknown`` adds a u64 field after the last one of the schema (a later minor version's)."""

    version_major: int | None = 1
    version_minor: int | None = 1
    sender: int | None = 0x0B
    sender_incarnation: int | None = 7
    fingerprint: bytes | None = FP
    origin: int | None = 0x0A
    incarnation: int | None = 5
    seqs: Sequence[int] | None = (3, 4, 9)
    unknown: int | None = None


def build_raw(r: RawRequest) -> bytes:
    """The buffer of ``r``, every present field written (zeros included)."""
    b = flatbuffers.Builder(4096)
    b.ForceDefaults(True)
    seqs = None
    if r.seqs is not None:
        b.StartVector(8, len(r.seqs), 8)
        for seq in reversed(r.seqs):
            b.PrependUint64(seq)
        seqs = b.EndVector()
    fp = b.CreateByteVector(r.fingerprint) if r.fingerprint is not None else None
    b.StartObject(9 if r.unknown is not None else 8)
    for slot, x in (
        (2, r.sender),
        (3, r.sender_incarnation),
        (5, r.origin),
        (6, r.incarnation),
        (8, r.unknown),
    ):
        if x is not None:
            b.PrependUint64Slot(slot, x, 0)
    for slot, off in ((4, fp), (7, seqs)):
        if off is not None:
            b.PrependUOffsetTRelativeSlot(slot, off, 0)
    for slot16, x16 in ((0, r.version_major), (1, r.version_minor)):
        if x16 is not None:
            b.PrependUint16Slot(slot16, x16, 0)
    b.Finish(b.EndObject(), file_identifier=b"DFR1")
    return bytes(b.Output())


def _root(buf: bytes) -> tuple[int, int]:
    """(table position, vtable position) of a buffer's root table."""
    pos = struct.unpack_from("<I", buf, 0)[0]
    return pos, pos - struct.unpack_from("<i", buf, pos)[0]


def _set(buf: bytes, at: int, fmt: str, value: int) -> bytes:
    b = bytearray(buf)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def raw_cases() -> list[tuple[str, bytes, str, str]]:
    """``(name, buffer, outcome, description)``: fields present or absent, lengths at and past their
    bounds, and the structural rules of DF-RCV-161 (DF-PKT-6, DF-SEC-1 applied to the table)."""
    base = RawRequest()
    good = build_raw(base)
    pos, vt = _root(good)
    vsize = struct.unpack_from("<H", good, vt)[0]
    fp_field = pos + struct.unpack_from("<H", good, vt + 4 + 2 * 4)[0]
    seqs_field = pos + struct.unpack_from("<H", good, vt + 4 + 2 * 7)[0]
    seqs_vec = seqs_field + struct.unpack_from("<I", good, seqs_field)[0]
    out = [
        (
            "version_minor_absent",
            build_raw(replace(base, version_minor=None)),
            "ok",
            "version_minor absent: read as 0, accepted (every version_minor is)",
        ),
        (
            "version_minor_65535",
            build_raw(replace(base, version_minor=65535)),
            "ok",
            "version_minor 65535, accepted",
        ),
        (
            "unknown_field",
            build_raw(replace(base, unknown=2**64 - 1)),
            "ok",
            "a field after the last one of the schema: ignored (DF-RCV-161)",
        ),
        (
            "version_major_absent",
            build_raw(replace(base, version_major=None)),
            "UNSUPPORTED_VERSION",
            "version_major absent: read as 0, not 1",
        ),
        (
            "version_major_0",
            build_raw(replace(base, version_major=0)),
            "UNSUPPORTED_VERSION",
            "version_major 0 written",
        ),
        (
            "sender_absent",
            build_raw(replace(base, sender=None)),
            "MALFORMED",
            "sender absent: 0",
        ),
        (
            "sender_incarnation_zero",
            build_raw(replace(base, sender_incarnation=0)),
            "MALFORMED",
            "sender_incarnation 0",
        ),
        (
            "incarnation_zero",
            build_raw(replace(base, incarnation=0)),
            "MALFORMED",
            "incarnation 0",
        ),
        (
            "fingerprint_absent",
            build_raw(replace(base, fingerprint=None)),
            "MALFORMED",
            "fingerprint (required) absent",
        ),
        (
            "fingerprint_31_bytes",
            build_raw(replace(base, fingerprint=FP[:31])),
            "MALFORMED",
            "a fingerprint of 31 bytes",
        ),
        (
            "fingerprint_33_bytes",
            build_raw(replace(base, fingerprint=FP + b"\0")),
            "MALFORMED",
            "a fingerprint of 33 bytes",
        ),
        (
            "seqs_absent",
            build_raw(replace(base, seqs=None)),
            "MALFORMED",
            "seqs (required) absent",
        ),
        ("seqs_empty", build_raw(replace(base, seqs=())), "MALFORMED", "no seq"),
        (
            "seqs_257",
            build_raw(replace(base, seqs=tuple(range(1, 258)))),
            "MALFORMED",
            "257 seqs, one more than a request holds",
        ),
        (
            "seqs_decreasing",
            build_raw(replace(base, seqs=(9, 4))),
            "MALFORMED",
            "seqs 9, 4",
        ),
        (
            "root_offset_outside",
            _set(good, 0, "<I", len(good)),
            "MALFORMED",
            "the root offset points at the end of the buffer",
        ),
        (
            "vtable_outside",
            _set(good, pos, "<i", pos + 64),
            "MALFORMED",
            "the table's vtable offset points before the buffer",
        ),
        (
            "vtable_size_odd",
            _set(good, vt, "<H", vsize - 1),
            "MALFORMED",
            f"vtable size {vsize - 1} (odd)",
        ),
        (
            "vtable_size_past_end",
            _set(good, vt, "<H", len(good)),
            "MALFORMED",
            "a vtable size that runs past the buffer",
        ),
        (
            "table_size_past_end",
            _set(good, vt + 2, "<H", len(good)),
            "ok",
            "a table size (u16 at vtable + 2) that runs past the buffer: not checked (DF-PKT-20 "
            "rule 2), accepted",
        ),
        (
            "seqs_length_past_end",
            _set(good, seqs_vec, "<I", 1000),
            "MALFORMED",
            "seqs claims 1000 elements; the buffer holds 3",
        ),
        (
            "fingerprint_offset_outside",
            _set(good, fp_field, "<I", len(good)),
            "MALFORMED",
            "the fingerprint vector's offset points past the buffer",
        ),
        (
            "seqs_elements_not_8_aligned",
            _seqs_at_4_mod_8(),
            "ok",
            "the seqs vector at a multiple of 4 whose u64 elements start at 4 mod 8: accepted "
            "(DF-PKT-20 rule 4 asks a vector's position to be a multiple of 4, nothing more)",
        ),
        (
            "seqs_vector_misaligned",
            _set(good, seqs_field, "<I", struct.unpack_from("<I", good, seqs_field)[0] + 2),
            "MALFORMED",
            "the seqs vector's uoffset moved by 2: its position is not a multiple of 4 "
            "(DF-PKT-20 rule 4)",
        ),
    ]
    return out


def _seqs_at_4_mod_8() -> bytes:
    """A request written by hand: root table at 28 (vtable at 8), the fingerprint vector at 76 and
    the seqs vector at 112 (a multiple of 4), so its u64 elements lie at 116, 124, 132."""
    b = bytearray(140)
    struct.pack_into("<I4s", b, 0, 28, b"DFR1")
    # vtable: size 20, table size 48, voffsets of the 8 fields in schema order
    struct.pack_into("<10H", b, 8, 20, 48, 4, 6, 12, 20, 8, 28, 36, 44)
    struct.pack_into("<iHHI", b, 28, 28 - 8, 1, 1, 76 - 36)
    struct.pack_into("<4QI", b, 40, 0x0B, 7, 0x0A, 5, 112 - 72)
    struct.pack_into("<I32s", b, 76, 32, FP)
    struct.pack_into("<I3Q", b, 112, 3, 3, 4, 9)
    return bytes(b)


REQ_REQUIREMENTS = ["DF-RCV-160", "DF-RCV-161"]


def requests() -> list[tuple[str, bytes, str, dict[str, Any] | None, str]]:
    """``(name, buffer, outcome, request fields or None, description)`` of every decode case."""
    valid = [
        ("three_seqs", _req(), "seqs 3, 4, 9"),
        ("one_seq", _req(seqs=(1,)), "one seq, the lowest allowed (1)"),
        ("max_seqs", _req(seqs=tuple(range(100, 356))), "256 seqs, the most a request holds"),
        (
            "u64_max_ids",
            _req(sender=2**64 - 1, origin=2**64 - 1, seqs=(2**64 - 1,)),
            "sender, origin and seq 2^64 - 1",
        ),
        (
            "ids_one",
            _req(sender=1, sender_incarnation=1, origin=1, incarnation=1, seqs=(1,)),
            "every id, incarnation and the seq 1, the lowest allowed",
        ),
    ]
    good = encode_request(_req())
    invalid = [
        ("short", good[:7], "BAD_IDENTIFIER", "7 bytes"),
        (
            "identifier_only_8_bytes",
            struct.pack("<I4s", 8, b"DFR1"),
            "MALFORMED",
            "8 bytes: a root offset and DFR1, no table (the identifier is there: not "
            "BAD_IDENTIFIER)",
        ),
        ("packet_identifier", good[:4] + b"DFP1" + good[8:], "BAD_IDENTIFIER", "DFP1"),
        ("version_major_2", _patch_u16(good, 0, 2), "UNSUPPORTED_VERSION", "version_major 2"),
        ("truncated", good[:-8], "MALFORMED", "the last 8 bytes cut"),
        ("seqs_not_increasing", _patch_seq(good, 1, 3), "MALFORMED", "seqs 3, 3, 9"),
        ("seq_zero", _patch_seq(good, 0, 0), "MALFORMED", "seqs 0, 4, 9"),
    ]
    # fields the encoder refuses, built by a patched encoder path: a request with origin 0 and one
    # with 257 seqs (the encoder checks them, so patch the bytes of valid ones)
    big = encode_request(_req(seqs=tuple(range(1, 257))))
    b = bytearray(big)
    pos = struct.unpack_from("<I", b, 0)[0]
    vt = pos - struct.unpack_from("<i", b, pos)[0]
    off = struct.unpack_from("<H", b, vt + 4 + 2 * 5)[0]
    struct.pack_into("<Q", b, pos + off, 0)
    invalid.append(("origin_zero", bytes(b), "MALFORMED", "origin 0"))
    out: list[tuple[str, bytes, str, dict[str, Any] | None, str]] = []
    for name, buf, outcome, what in raw_cases():
        if outcome == "ok":
            out.append((name, buf, "ok", _json_req(decode_request(buf)), what))
        else:
            invalid.append((name, buf, outcome, what))
    for name, r, what in valid:
        buf = encode_request(r)
        assert decode_request(buf) == r
        out.append((name, buf, "ok", _json_req(r), what))
    for name, buf, kind, what in invalid:
        try:
            decode_request(buf)
        except RepairError as exc:
            assert exc.kind.value == kind, (name, exc)
        else:
            raise AssertionError(f"{name} decodes")
        out.append((name, buf, kind, None, what))
    return out


def encodes() -> list[tuple[str, dict[str, Any], str, str]]:
    """``(name, request fields, outcome, description)``: what a sender may encode (DF-RCV-161: a
    sender MUST NOT publish a request that does not decode)."""
    ok = [
        ("three_seqs", _req(), "seqs 3, 4, 9"),
        ("max_seqs", _req(seqs=tuple(range(100, 356))), "256 seqs"),
        (
            "u64_max_ids",
            _req(sender=2**64 - 1, origin=2**64 - 1, seqs=(2**64 - 1,)),
            "ids and seq 2^64 - 1",
        ),
        (
            "ids_one",
            _req(sender=1, sender_incarnation=1, origin=1, incarnation=1, seqs=(1,)),
            "every id, incarnation and the seq 1",
        ),
    ]
    base = _json_req(_req())
    bad: list[tuple[str, dict[str, Any], str]] = [
        ("no_seq", {"seqs": []}, "no seq"),
        ("seqs_257", {"seqs": list(range(1, 258))}, "257 seqs, one more than a request holds"),
        ("seqs_decreasing", {"seqs": [2, 1]}, "seqs 2, 1"),
        ("seq_zero", {"seqs": [0, 1]}, "seqs 0, 1"),
        ("origin_zero", {"origin": _h(0)}, "origin 0"),
        ("sender_zero", {"sender": _h(0)}, "sender 0"),
        ("incarnation_zero", {"incarnation": _h(0)}, "incarnation 0"),
        ("sender_incarnation_zero", {"sender_incarnation": _h(0)}, "sender_incarnation 0"),
        ("fingerprint_one_byte", {"fingerprint": "78"}, "a fingerprint of 1 byte"),
    ]
    out: list[tuple[str, dict[str, Any], str, str]] = []
    for name, r, what in ok:
        assert decode_request(encode_request(r)) == r
        out.append((name, _json_req(r), "ok", what))
    own = _json_req(_req())
    del own["version_minor"]
    out.append(
        (
            "version_minor_own",
            own,
            "ok",
            "no version_minor given: the encoder writes its own, 1 (DF-VER-1); it decodes to the "
            "fields with version_minor 1 (decodes_to)",
        )
    )
    for name, patch, what in bad:
        fields = {**base, **patch}
        r = RepairRequest(
            int(fields["sender"], 16),
            int(fields["sender_incarnation"], 16),
            bytes.fromhex(fields["fingerprint"]),
            int(fields["origin"], 16),
            int(fields["incarnation"], 16),
            tuple(fields["seqs"]),
            fields["version_minor"],
        )
        try:
            encode_request(r)
        except RepairError as exc:
            assert exc.kind.value == "MALFORMED", (name, exc)
        else:
            raise AssertionError(f"{name} encodes")
        out.append((name, fields, "MALFORMED", what))
    return out


def _gap_case(
    name: str,
    params: dict[str, int],
    rounds: list[list[tuple[int, int, int]]],
    what: str,
    reachable: list[list[int] | None] | None = None,
) -> dict[str, Any]:
    """``reachable``: per round, the origins a request can reach (DF-RCV-230), or None (all);
    a round's ``reachable`` key is written only when it is not None."""
    g = GapTracker(**params)
    in_rounds: list[dict[str, Any]] = []
    out_rounds: list[dict[str, Any]] = []
    for n, accepted in enumerate(rounds):
        for o, i, s in accepted:
            g.observe(o, i, s)
        live = None if reachable is None else reachable[n]
        reqs = g.round(None if live is None else set(live))
        rnd: dict[str, Any] = {"accepted": [[_h(o), _h(i), s] for o, i, s in accepted]}
        if live is not None:
            rnd["reachable"] = [_h(x) for x in sorted(live)]
        in_rounds.append(rnd)
        counters = g.counters.to_json()
        out_rounds.append(
            {
                "requests": [[_h(o), _h(i), list(s)] for o, i, s in reqs],
                "counters": {k: counters[k] for k in GAP_COUNTERS},
            }
        )
    return {
        "id": name,
        "description": what,
        "requirements": ["DF-RCV-162", "DF-RCV-163", "DF-RCV-165"]
        + (["DF-RCV-230"] if reachable is not None else []),
        "params": params,
        "rounds": in_rounds,
        "expected": {"rounds": out_rounds},
    }


def gaps() -> list[dict[str, Any]]:
    p = {"window": 16, "delay": 2, "retry": 3, "attempts": 2, "max_requests": 16}
    a, b = 0x0A, 0x0C
    cases = [
        _gap_case(
            "lost_then_retried_then_given_up",
            p,
            [[(a, 5, 1), (a, 5, 2), (a, 5, 4)]] + [[(a, 5, 3 + r)] for r in range(2, 10)],
            "seq 3 missing from round 1, the origin sending one new seq a round: asked at rounds "
            "3 and 6 (3 rounds and 3 seqs of the origin after the first request), given up at "
            "round 9",
        ),
        _gap_case(
            "stalled_origin_not_asked_again",
            p,
            [[(a, 5, 1), (a, 5, 2), (a, 5, 4)]] + [[] for _ in range(11)],
            "seq 3 missing from round 1 and the origin sends nothing after it (stalled: no CPU, "
            "or waiting on pacing, so it has no round in which to answer): asked at round 3 only, "
            "neither asked again nor given up while its highest seq stays 4 (erratum, 1.1 draft)",
        ),
        _gap_case(
            "stalled_origin_resumes",
            p,
            [[(a, 5, 1), (a, 5, 2), (a, 5, 4)]]
            + [[] for _ in range(6)]
            + [[(a, 5, 5 + r)] for r in range(8)],
            "seq 3 asked at round 3; the origin is silent until round 8, then sends one seq a "
            "round: its highest seq reaches 4 + 3 at round 10, so seq 3 is asked again at round 10 "
            "(not at round 6, retry rounds after the first request) and given up at round 13",
        ),
        _gap_case(
            "fast_origin_waits_for_the_requesters_rounds",
            {**p, "window": 64},
            [[(a, 5, 1), (a, 5, 2), (a, 5, 4)]]
            + [[(a, 5, s) for s in range(5 + 5 * r, 10 + 5 * r)] for r in range(8)],
            "the origin sends 5 seqs a round: its highest seq grows by retry = 3 within a round, "
            "but a request's wait is also retry rounds of this node: seq 3 is asked at rounds 3 "
            "and 6 and given up at round 9",
        ),
        _gap_case(
            "late_arrival_never_asked",
            p,
            [[(a, 5, 1), (a, 5, 3)], [(a, 5, 2)], [], []],
            "seq 2 arrives one round late: never asked for (delay 2)",
        ),
        _gap_case(
            "repaired_after_request",
            p,
            [[(a, 5, 10), (a, 5, 13)], [], [(a, 5, 11)], [(a, 5, 12)], []],
            "seqs 11, 12 missing from round 1; 11 arrives in round 3 before its decision, so only 12 is asked; nothing below the first seq 10",
        ),
        _gap_case(
            "window_bounds_requests",
            p,
            [[(a, 5, 1), (a, 5, 40)], [], []],
            "after seq 40 with W = 16 only 25..39 can still be accepted: only they are asked for",
        ),
        _gap_case(
            "window_slides_keeps_state",
            p,
            [[(a, 5, s) for s in (*range(1, 10), 11)], [(a, 5, 22)], [], [], []],
            "seq 10 missing from round 1; in round 2 seq 22 slides the window (W = 16) past seqs "
            "1 to 6: seqs 7 to 9 and 11 stay accepted and seq 10 keeps its round 1, so it is asked "
            "in round 3 and 12 to 21 (missing from round 2) in round 4",
        ),
        _gap_case(
            "new_incarnation_replaces",
            p,
            [[(a, 5, 1), (a, 5, 3)], [(a, 6, 1), (a, 6, 4)], [], [(a, 5, 2)], []],
            "incarnation 6 replaces 5: only 6's seqs 2, 3 are asked; a late entry of 5 is ignored",
        ),
        _gap_case(
            "two_origins_max_requests_1",
            {**p, "max_requests": 1},
            [[(b, 2, 1), (b, 2, 3), (a, 5, 1), (a, 5, 3)], [], []],
            "two origins with a gap, one request per round: the lowest origin id only",
        ),
        _gap_case(
            "max_requests_left_out_asked_next_round",
            {**p, "max_requests": 1},
            [[(b, 2, 1), (b, 2, 3), (a, 5, 1), (a, 5, 3)]]
            + [[(b, 2, 2 + r), (a, 5, 2 + r)] for r in range(2, 8)],
            "two origins, one request per round: origin 0x0C, left out in round 3, is asked in "
            "round 4 (erratum, 1.1 draft: a seq counts as asked only when a request carries it); "
            "each origin's seq then waits retry rounds from its own last request",
        ),
        _gap_case(
            "burst_over_256_seqs_asked_in_two_rounds",
            {**p, "window": 512},
            [
                [(a, 5, 1), (a, 5, 300)],
                [],
                [],
                [(a, 5, s) for s in range(2, 258)],
                [(a, 5, s) for s in range(258, 300)],
                [],
                [],
            ],
            "298 seqs lost in a row: round 3 asks the lowest 256, round 4 the other 42 (due since "
            "round 3, left out by the 256-seq bound); repaired, none given up",
        ),
        _gap_case(
            "burst_over_256_seqs_given_up_once_each",
            {**p, "window": 512},
            [[(a, 5, 1), (a, 5, 300)]] + [[(a, 5, 299 + r)] for r in range(2, 11)],
            "298 seqs lost and never repaired, the origin sending one new seq a round: each is "
            "asked attempts = 2 times (2..257 at rounds "
            "3 and 6, 258..299 at rounds 4 and 7) and given up once, retry rounds after its own "
            "last request (256 at round 9, 42 at round 10)",
        ),
        _gap_case(
            "unreachable_origin_held",
            p,
            [[(a, 5, 1), (a, 5, 3), (b, 2, 1), (b, 2, 3)]]
            + [[(a, 5, 2 + r), (b, 2, 2 + r)] for r in range(2, 9)],
            "origin 0x0A is not reachable (not live) until round 5: its seq 2, due from round 3, "
            "is first asked in round 5, then retry rounds later; 0x0C's seq 2 is asked on schedule "
            "(DF-RCV-230)",
            reachable=[[b], [b], [b], [b], [a, b], [a, b], [a, b], [a, b]],
        ),
    ]
    return cases


def _entry(node: int, inc: int, seq: int, n: int) -> Entry:
    """An own entry of ``n`` values whose indices and values depend on ``seq`` (a resend of the
    wrong entry, or of a changed one, shows)."""
    return Entry(
        node,
        inc,
        seq,
        0,
        np.arange(seq, seq + n, dtype=np.uint32),
        (seq + 0.25 * np.arange(n)).astype(np.float32),
    )


def _entry_json(e: Entry, bits: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "origin": _h(e.origin),
        "incarnation": _h(e.incarnation),
        "seq": e.seq,
        "hops": e.hops,
        "indices": [int(x) for x in e.indices],
        "values": [float(x) for x in e.values],
    }
    if bits:
        out["values_bits"] = [f"{int(x):08x}" for x in e.values.astype("<f4").view("<u4")]
    return out


def _resend_case(
    name: str, params: dict[str, int], ops: list[dict[str, Any]], what: str
) -> dict[str, Any]:
    node, inc = 0x0A, 5
    buf = ResendBuffer(node, inc, FP, **params)
    in_ops: list[dict[str, Any]] = []
    out_ops: list[dict[str, Any]] = []

    def counters() -> dict[str, int]:
        c = buf.counters.to_json()
        return {k: c[k] for k in RESEND_COUNTERS}

    for op in ops:
        if "add" in op:
            entries = [
                _entry(x[2] if len(x) > 2 else node, x[3] if len(x) > 3 else inc, x[0], x[1])
                for x in op["add"]
            ]
            buf.add(entries)
            in_ops.append({"add": [_entry_json(e) for e in entries]})
            out_ops.append({"held": buf.held, "counters": counters()})
        elif "request" in op:
            r = op["request"]
            req = _req(
                origin=r.get("origin", node),
                incarnation=r.get("incarnation", inc),
                fingerprint=FP if r.get("fingerprint_ok", True) else bytes(32),
                seqs=tuple(r["seqs"]),
            )
            ok = buf.request(req)
            in_ops.append({"request": _json_req(req)})
            out_ops.append({"queued": ok, "pending": buf.pending, "counters": counters()})
        else:
            took = buf.take()
            in_ops.append({"take": True})
            out_ops.append(
                {
                    "take": [_entry_json(e, bits=True) for e in took],
                    "pending": buf.pending,
                    "counters": counters(),
                }
            )
    return {
        "id": name,
        "description": what,
        "requirements": ["DF-RCV-164", "DF-RCV-165"],
        "node": _h(node),
        "incarnation": _h(inc),
        "fingerprint": FP.hex(),
        "params": params,
        "ops": in_ops,
        "expected": {"ops": out_ops},
    }


def resend() -> list[dict[str, Any]]:
    p = {"max_entries": 4, "max_values": 100, "max_values_per_round": 25, "max_pending": 8}
    cases = [
        _resend_case(
            "resend_in_seq_order_within_budget",
            p,
            [
                {"add": [(1, 10), (2, 10), (3, 10), (4, 10)]},
                {"request": {"seqs": [4, 2, 3]}},
                {"take": True},
                {"take": True},
                {"take": True},
            ],
            "budget 25 values per round: seqs 2, 3 in the first round, 4 in the second",
        ),
        _resend_case(
            "evicted_oldest_unavailable",
            p,
            [
                {"add": [(1, 10), (2, 10), (3, 10), (4, 10), (5, 10)]},
                {"request": {"seqs": [1, 5]}},
                {"take": True},
            ],
            "5 entries with max_entries 4: seq 1 is gone (unavailable), seq 5 is resent",
        ),
        _resend_case(
            "value_bound_and_large_entry",
            p,
            [
                {"add": [(1, 60), (2, 60)]},
                {"request": {"seqs": [2]}},
                {"take": True},
            ],
            "max_values 100 evicts seq 1; one entry above the round budget still goes alone",
        ),
        _resend_case(
            "refused_requests",
            p,
            [
                {"add": [(1, 5)]},
                {"request": {"seqs": [1], "origin": 0x0B}},
                {"request": {"seqs": [1], "incarnation": 4}},
                {"request": {"seqs": [1], "fingerprint_ok": False}},
                {"take": True},
            ],
            "another origin, an old incarnation, another manifest: refused, nothing resent",
        ),
        _resend_case(
            "pending_bound",
            {**p, "max_pending": 2, "max_entries": 8, "max_values_per_round": 100},
            [
                {"add": [(s, 1) for s in range(1, 6)]},
                {"request": {"seqs": [1, 2, 3]}},
                {"take": True},
            ],
            "max_pending 2: seq 3 is deferred (the requester asks again later)",
        ),
        _resend_case(
            "value_bound_exact",
            p,
            [
                {"add": [(1, 40), (2, 60)]},
                {"request": {"seqs": [1, 2]}},
                {"take": True},
                {"take": True},
            ],
            "100 values held with max_values 100: nothing evicted; budget 25: seq 1 (40 values) "
            "goes alone, seq 2 the next round",
        ),
        _resend_case(
            "evicted_after_request",
            p,
            [
                {"add": [(1, 10)]},
                {"request": {"seqs": [1]}},
                {"add": [(2, 10), (3, 10), (4, 10), (5, 10)]},
                {"take": True},
            ],
            "seq 1 is queued, then evicted by 4 newer entries (max_entries 4) before the round: "
            "nothing is resent and seq 1 counts as unavailable at the round",
        ),
        _resend_case(
            "budget_exact",
            p,
            [
                {"add": [(1, 10), (2, 15), (3, 1)]},
                {"request": {"seqs": [1, 2, 3]}},
                {"take": True},
                {"take": True},
            ],
            "budget 25 values: seqs 1 and 2 (10 + 15 = 25, exactly the budget) in the first round, "
            "seq 3 in the next",
        ),
        _resend_case(
            "bounds_of_one",
            {"max_entries": 1, "max_values": 100, "max_values_per_round": 1, "max_pending": 1},
            [
                {"add": [(1, 5), (2, 5)]},
                {"request": {"seqs": [1, 2]}},
                {"take": True},
            ],
            "every count bound 1 (the lowest allowed): one entry held (seq 2); seq 1 unavailable; "
            "seq 2 (5 values) resent although the round's budget is 1 value (at least one entry)",
        ),
        _resend_case(
            "foreign_entries_not_held",
            p,
            [
                {"add": [(1, 5, 0x0B, 5), (1, 5, 0x0A, 4), (2, 5, 0x0A, 6), (1, 5)]},
                {"request": {"seqs": [1, 2]}},
                {"take": True},
            ],
            "entries of another origin or of another incarnation of this node are not held: "
            "only the own seq 1 is; seq 2 is unavailable",
        ),
    ]
    return cases


def _dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n", "utf-8")


def _row(area: str, name: str, requirements: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "id": f"repair.{area}.{name}",
        "kind": "repair",
        "path": f"repair/{area}/{name}",
        "requirements": sorted(requirements),
        "features": ["repair"],
        **extra,
    }


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write ``repair/`` under ``vectors_dir``; return its index rows."""
    d = vectors_dir / "repair"
    if d.exists():
        shutil.rmtree(d)
    rows: list[dict[str, Any]] = []
    for name, buf, outcome, fields, what in requests():
        (d / "request").mkdir(parents=True, exist_ok=True)
        (d / "request" / f"{name}.dfr").write_bytes(buf)
        expected: dict[str, Any] = {"outcome": outcome}
        if fields is not None:
            expected["request"] = fields
        _dump(
            d / "request" / f"{name}.json",
            {"description": what, "requirements": REQ_REQUIREMENTS, "expected": expected},
        )
        rows.append(_row("request", name, REQ_REQUIREMENTS, expect=outcome))
    for name, fields, outcome, what in encodes():
        case: dict[str, Any] = {
            "description": what,
            "requirements": ["DF-RCV-161"],
            "request": fields,
            "expected": {"outcome": outcome},
        }
        if "version_minor" not in fields:
            case["requirements"] = ["DF-RCV-161", "DF-VER-1"]
            case["decodes_to"] = {**fields, "version_minor": VERSION_MINOR}
        _dump(d / "encode" / f"{name}.json", case)
        rows.append(_row("encode", name, case["requirements"], expect=outcome))
    for area, cases in (("gaps", gaps()), ("resend", resend())):
        for case in cases:
            name = case.pop("id")
            _dump(d / area / f"{name}.json", case)
            rows.append(_row(area, name, case["requirements"]))
    return rows
