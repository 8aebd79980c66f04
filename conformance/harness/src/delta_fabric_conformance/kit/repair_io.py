"""The repair commands (driver protocol section 5.11, capability ``repair``, added in 1.1) on the
reference module :mod:`delta_fabric.repair` (spec section 7.9: DF-RCV-160 to DF-RCV-165, DF-RCV-230).

- ``repair_decode``: one ``RepairRequest`` buffer (``DFR1``) decoded and checked (DF-RCV-161);
- ``repair_encode``: request fields encoded, or refused when they would not decode;
- ``repair_gaps``: a ``GapTracker`` fed round by round: the requests of each round and its counters;
- ``repair_resend``: a ``ResendBuffer``'s operations in order: what it holds, queues and resends.

A refused request is an ``outcome``, not a ``rejected`` answer (``rejected`` is for delta packets).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
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

__all__ = [
    "request_fields",
    "request_json",
    "run_repair_decode",
    "run_repair_encode",
    "run_repair_gaps",
    "run_repair_resend",
]

#: The counters each side reports (DF-RCV-165, ``stats()["repair"]`` names).
GAP_COUNTERS = ("requests_sent", "seqs_requested", "seqs_given_up")
RESEND_COUNTERS = (
    "requests_received",
    "requests_refused",
    "entries_resent",
    "seqs_unavailable",
    "seqs_deferred",
)


def _id(v: Any) -> int:
    """A u64 id written as 16 hex digits (driver protocol section 4)."""
    s = str(v)
    if len(s) != 16:
        raise ValueError(f"id {v!r} is not 16 hex digits")
    return int(s, 16)


def request_json(r: RepairRequest) -> dict[str, Any]:
    return {
        "sender": f"{r.sender:016x}",
        "sender_incarnation": f"{r.sender_incarnation:016x}",
        "fingerprint": r.fingerprint.hex(),
        "origin": f"{r.origin:016x}",
        "incarnation": f"{r.incarnation:016x}",
        "seqs": list(r.seqs),
        "version_minor": r.version_minor,
    }


def request_fields(j: Mapping[str, Any]) -> RepairRequest:
    """The request of a JSON object (no check: `encode_request` / `ResendBuffer.request` judge);
    without ``version_minor``, the implementation's own (the node's requests, DF-VER-1)."""
    minor: dict[str, int] = {}
    if "version_minor" in j:
        minor["version_minor"] = int(j["version_minor"])
    return RepairRequest(
        sender=_id(j["sender"]),
        sender_incarnation=_id(j["sender_incarnation"]),
        fingerprint=bytes.fromhex(str(j["fingerprint"])),
        origin=_id(j["origin"]),
        incarnation=_id(j["incarnation"]),
        seqs=tuple(int(s) for s in j["seqs"]),
        **minor,
    )


def run_repair_decode(buf: bytes) -> dict[str, Any]:
    try:
        r = decode_request(buf)
    except RepairError as exc:
        return {"outcome": exc.kind.value, "message": exc.detail}
    return {"outcome": "ok", "request": request_json(r)}


def run_repair_encode(fields: Mapping[str, Any]) -> dict[str, Any]:
    try:
        buf = encode_request(request_fields(fields))
    except RepairError as exc:
        return {"outcome": exc.kind.value, "message": exc.detail}
    return {"outcome": "ok", "bytes": base64.b64encode(buf).decode("ascii")}


def run_repair_gaps(vector: Mapping[str, Any]) -> dict[str, Any]:
    p = vector["params"]
    g = GapTracker(
        int(p["window"]),
        delay=int(p["delay"]),
        retry=int(p["retry"]),
        attempts=int(p["attempts"]),
        max_requests=int(p["max_requests"]),
    )
    rounds: list[dict[str, Any]] = []
    for rnd in vector["rounds"]:
        for o, i, s in rnd["accepted"]:
            g.observe(_id(o), _id(i), int(s))
        live = {_id(x) for x in rnd["reachable"]} if "reachable" in rnd else None
        reqs = g.round(live)
        c = g.counters.to_json()
        rounds.append(
            {
                "requests": [[f"{o:016x}", f"{i:016x}", list(s)] for o, i, s in reqs],
                "counters": {k: c[k] for k in GAP_COUNTERS},
            }
        )
    return {"rounds": rounds}


def _entry(j: Mapping[str, Any]) -> Entry:
    return Entry(
        _id(j["origin"]),
        _id(j["incarnation"]),
        int(j["seq"]),
        int(j["hops"]),
        np.asarray([int(x) for x in j["indices"]], dtype=np.uint32),
        np.asarray([float(x) for x in j["values"]], dtype=np.float32),
    )


def _entry_json(e: Entry) -> dict[str, Any]:
    values = np.asarray(e.values, dtype=np.float32)
    return {
        "origin": f"{e.origin:016x}",
        "incarnation": f"{e.incarnation:016x}",
        "seq": int(e.seq),
        "hops": int(e.hops),
        "indices": [int(x) for x in e.indices],
        "values": [float(x) for x in values],
        "values_bits": [f"{int(b):08x}" for b in values.astype("<f4").view("<u4")],
    }


def run_repair_resend(vector: Mapping[str, Any]) -> dict[str, Any]:
    p = vector["params"]
    buf = ResendBuffer(
        _id(vector["node"]),
        _id(vector["incarnation"]),
        bytes.fromhex(str(vector["fingerprint"])),
        max_entries=int(p["max_entries"]),
        max_values=int(p["max_values"]),
        max_values_per_round=int(p["max_values_per_round"]),
        max_pending=int(p["max_pending"]),
    )

    def counters() -> dict[str, int]:
        c = buf.counters.to_json()
        return {k: c[k] for k in RESEND_COUNTERS}

    ops: list[dict[str, Any]] = []
    for op in vector["ops"]:
        if "add" in op:
            buf.add([_entry(e) for e in op["add"]])
            ops.append({"held": buf.held, "counters": counters()})
        elif "request" in op:
            queued = buf.request(request_fields(op["request"]))
            ops.append({"queued": queued, "pending": buf.pending, "counters": counters()})
        elif "take" in op:
            took: Sequence[Entry] = buf.take()
            ops.append(
                {
                    "take": [_entry_json(e) for e in took],
                    "pending": buf.pending,
                    "counters": counters(),
                }
            )
        else:
            raise ValueError(f"unknown resend operation {sorted(op)}")
    return {"ops": ops}
