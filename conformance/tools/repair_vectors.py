"""Vectors of anti-entropy by gap repair (spec section 7.9, DF-RCV-160..165, added in 1.1).

Writes ``repair/requests.json`` (RepairRequest buffers, valid and invalid), ``repair/gaps.json``
(receiver decisions round by round) and ``repair/resend.json`` (origin decisions). They are read by
the unit tests of both implementations (``tests/test_repair.py``, ``df-core/tests/repair_vectors.rs``),
not by the driver runner, so `build` returns no index row.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.repair import (
    GapTracker,
    RepairError,
    RepairRequest,
    ResendBuffer,
    decode_request,
    encode_request,
)
from delta_fabric.wire import Entry

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


def _json_req(r: RepairRequest) -> dict[str, Any]:
    return {
        "sender": r.sender,
        "sender_incarnation": r.sender_incarnation,
        "fingerprint": r.fingerprint.hex(),
        "origin": r.origin,
        "incarnation": r.incarnation,
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


def requests() -> dict[str, Any]:
    valid = [
        ("three_seqs", _req()),
        ("one_seq", _req(seqs=(1,))),
        ("max_seqs", _req(seqs=tuple(range(100, 356)))),
        ("u64_max_ids", _req(sender=2**64 - 1, origin=2**64 - 1, seqs=(2**64 - 1,))),
    ]
    good = encode_request(_req())
    invalid = [
        ("short", good[:7], "BAD_IDENTIFIER", "7 bytes"),
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
    out_invalid = []
    for name, buf, kind, what in invalid:
        try:
            decode_request(buf)
        except RepairError as exc:
            assert exc.kind.value == kind, (name, exc)
        else:
            raise AssertionError(f"{name} decodes")
        out_invalid.append({"id": name, "description": what, "hex": buf.hex(), "expect": kind})
    out_valid = []
    for name, r in valid:
        buf = encode_request(r)
        assert decode_request(buf) == r
        out_valid.append({"id": name, "hex": buf.hex(), "request": _json_req(r)})
    return {
        "requirements": ["DF-RCV-160", "DF-RCV-161"],
        "valid": out_valid,
        "invalid": out_invalid,
    }


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
    out_rounds = []
    for n, accepted in enumerate(rounds):
        for o, i, s in accepted:
            g.observe(o, i, s)
        live = None if reachable is None else reachable[n]
        reqs = g.round(None if live is None else set(live))
        rnd: dict[str, Any] = {
            "accepted": [list(a) for a in accepted],
            "requests": [[o, i, list(s)] for o, i, s in reqs],
        }
        if live is not None:
            rnd["reachable"] = sorted(live)
        out_rounds.append(rnd)
    return {
        "id": name,
        "description": what,
        "params": params,
        "rounds": out_rounds,
        "seqs_given_up": g.counters.seqs_given_up,
    }


def gaps() -> dict[str, Any]:
    p = {"window": 16, "delay": 2, "retry": 3, "attempts": 2, "max_requests": 16}
    a, b = 0x0A, 0x0C
    cases = [
        _gap_case(
            "lost_then_retried_then_given_up",
            p,
            [[(a, 5, 1), (a, 5, 2), (a, 5, 4)], [], [], [], [], [], [], [], []],
            "seq 3 missing from round 1: asked at rounds 3 and 6, given up at round 9",
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
            [[(b, 2, 1), (b, 2, 3), (a, 5, 1), (a, 5, 3)], [], [], [], [], [], []],
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
            [[(a, 5, 1), (a, 5, 300)]] + [[] for _ in range(9)],
            "298 seqs lost and never repaired: each is asked attempts = 2 times (2..257 at rounds "
            "3 and 6, 258..299 at rounds 4 and 7) and given up once, retry rounds after its own "
            "last request (256 at round 9, 42 at round 10)",
        ),
        _gap_case(
            "unreachable_origin_held",
            p,
            [[(a, 5, 1), (a, 5, 3), (b, 2, 1), (b, 2, 3)], [], [], [], [], [], [], []],
            "origin 0x0A is not reachable (not live) until round 5: its seq 2, due from round 3, "
            "is first asked in round 5, then retry rounds later; 0x0C's seq 2 is asked on schedule "
            "(DF-RCV-230)",
            reachable=[[b], [b], [b], [b], [a, b], [a, b], [a, b], [a, b]],
        ),
    ]
    return {"requirements": ["DF-RCV-162", "DF-RCV-163", "DF-RCV-230"], "cases": cases}


def _entry(node: int, inc: int, seq: int, n: int) -> Entry:
    return Entry(node, inc, seq, 0, np.arange(n, dtype=np.uint32), np.ones(n, dtype=np.float32))


def _resend_case(
    name: str, params: dict[str, int], ops: list[dict[str, Any]], what: str
) -> dict[str, Any]:
    node, inc = 0x0A, 5
    buf = ResendBuffer(node, inc, FP, **params)
    out_ops = []
    for op in ops:
        if "add" in op:
            buf.add([_entry(node, inc, s, n) for s, n in op["add"]])
            out_ops.append({"add": [list(x) for x in op["add"]], "held": buf.held})
        elif "request" in op:
            r = op["request"]
            req = _req(
                origin=r.get("origin", node),
                incarnation=r.get("incarnation", inc),
                fingerprint=FP if r.get("fingerprint_ok", True) else bytes(32),
                seqs=tuple(r["seqs"]),
            )
            ok = buf.request(req)
            out_ops.append(
                {"request": {**r, "seqs": list(r["seqs"])}, "queued": ok, "pending": buf.pending}
            )
        else:
            out_ops.append({"take": [e.seq for e in buf.take()], "pending": buf.pending})
    return {
        "id": name,
        "description": what,
        "node": node,
        "incarnation": inc,
        "params": params,
        "ops": out_ops,
        "counters": buf.counters.to_json(),
    }


def resend() -> dict[str, Any]:
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
    ]
    return {"requirements": ["DF-RCV-164"], "cases": cases}


def _dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    d = vectors_dir / "repair"
    _dump(d / "requests.json", requests())
    _dump(d / "gaps.json", gaps())
    _dump(d / "resend.json", resend())
    return []
