"""The ``snapshot_decode`` and ``snapshot_assemble`` commands (driver protocol section 5.8) on the
reference snapshot module :mod:`delta_fabric.snapshot` (spec section 9.5, DF-ZEN-11, -12, -40, -41),
and the server side, ``snapshot_serve`` (section 5.12: DF-ZEN-5, DF-ZEN-11).

Both answer ``ok`` with an ``outcome``: ``"ok"`` or the reason of DF-ZEN-40 that refused the input
(``BAD_IDENTIFIER``, ``UNSUPPORTED_VERSION``, ``MALFORMED``, ``FINGERPRINT_MISMATCH``, ``INCONSISTENT``,
``BAD_OFFSET``, ``NON_FINITE``, ``INCOMPLETE``, ``DIGEST_MISMATCH``).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from delta_fabric.snapshot import (
    SnapshotAssembler,
    SnapshotChunk,
    SnapshotError,
    SnapshotErrorKind,
    SnapshotServer,
    SnapshotSource,
    decode_chunk,
)
from numpy.typing import NDArray

__all__ = ["chunk_json", "run_snapshot_assemble", "run_snapshot_decode", "run_snapshot_serve"]


def _bits(a: NDArray[np.float32]) -> list[str]:
    return [f"{int(b):08x}" for b in np.ascontiguousarray(a, dtype="<f4").view("<u4")]


def _floats(a: NDArray[np.float32]) -> list[float | str]:
    out: list[float | str] = []
    for x in np.asarray(a, dtype=np.float32).astype(np.float64).tolist():
        out.append("nan" if x != x else "inf" if x == np.inf else "-inf" if x == -np.inf else x)
    return out


def chunk_json(c: SnapshotChunk) -> dict[str, Any]:
    """A decoded chunk as JSON: ids as 16 hex digits, fingerprint and digest as 64, values twice."""
    return {
        "version_major": int(c.version_major),
        "version_minor": int(c.version_minor),
        "node": f"{c.node:016x}",
        "incarnation": f"{c.incarnation:016x}",
        "fingerprint": c.fingerprint.hex(),
        "snapshot_id": f"{c.snapshot_id:016x}",
        "total": int(c.total),
        "offset": int(c.offset),
        "digest": c.digest.hex(),
        "values": _floats(c.values),
        "values_bits": _bits(c.values),
    }


def run_snapshot_decode(chunk: bytes) -> dict[str, Any]:
    """Decode one chunk on its own (the context-free checks of DF-ZEN-40)."""
    try:
        c = decode_chunk(chunk)
    except SnapshotError as exc:
        return {"outcome": exc.kind.value, "message": exc.detail}
    return {"outcome": "ok", "chunk": chunk_json(c)}


def run_snapshot_assemble(vector: Mapping[str, Any], chunks: Sequence[bytes]) -> dict[str, Any]:
    """Decode and add every chunk in order (``vector["indices"][k]`` is the index chunk ``k`` answers),
    then finish: ``at`` is the position of the chunk that refused the snapshot, ``len(chunks)`` for the
    end checks (completeness, digest), None when it was accepted."""
    indices = [int(i) for i in vector["indices"]]
    if len(indices) != len(chunks):
        raise ValueError(f"{len(chunks)} chunks for {len(indices)} indices")
    asm = SnapshotAssembler(
        bytes.fromhex(str(vector["fingerprint"])),
        int(vector["chunk_size"]),
        expected_total=int(vector["num_params"]),
        expected_node=int(str(vector["node"]), 16),
    )
    at = 0
    try:
        for k, (index, data) in enumerate(zip(indices, chunks, strict=True)):
            at = k  # the reply being checked
            asm.add(index, decode_chunk(data))
        at = len(chunks)
        values, first = asm.finish()
    except SnapshotError as exc:
        return {"outcome": exc.kind.value, "at": at, "message": exc.detail}
    return {
        "outcome": "ok",
        "at": None,
        "node": f"{first.node:016x}",
        "incarnation": f"{first.incarnation:016x}",
        "snapshot_id": f"{first.snapshot_id:016x}",
        "total": int(first.total),
        "digest": first.digest.hex(),
        "values": _floats(values),
        "values_bits": _bits(values),
    }


def decode_b64(items: Sequence[Any]) -> list[bytes]:
    return [base64.b64decode(str(s), validate=True) for s in items]


def _anchor(v: Mapping[str, Any]) -> NDArray[np.float32]:
    """The served anchor: ``anchor_bits`` (binary32 patterns) if given, else ``anchor`` (JSON numbers,
    ``"nan"``, ``"inf"``, ``"-inf"``; driver protocol section 4)."""
    if "anchor_bits" in v:
        return np.array([int(str(b), 16) for b in v["anchor_bits"]], dtype=np.uint32).view(
            np.float32
        )
    return np.asarray([float(x) for x in v["anchor"]], dtype=np.float64).astype(np.float32)


def run_snapshot_serve(v: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot queryable of one node (DF-ZEN-5, DF-ZEN-11) answering ``v["queries"]`` in order:
    a :class:`SnapshotServer` of node ``v["node"]`` with ``v["max_packet_size"]``, whose one capture
    is the anchor ``v["anchor"]`` at ``v["incarnation"]`` with manifest fingerprint
    ``v["fingerprint"]``. The queries come from one joiner within a second, so every chunk is cut
    from that one capture (the reuse and keep times of DF-ZEN-11 are not reached; they are set to
    infinity here so that no clock reaches a result, driver protocol section 4). Each reply is
    ``{"chunk": "<base64>"}`` or ``{"error": "BAD_REQUEST" | "NON_FINITE", "message": ...}`` (the
    Zenoh error reply; ``NON_FINITE`` for a query DF-ZEN-43 refuses, a capture that is not finite)."""
    source = SnapshotSource(
        int(str(v["incarnation"]), 16), bytes.fromhex(str(v["fingerprint"])), _anchor(v)
    )
    server = SnapshotServer(
        int(str(v["node"]), 16),
        lambda: source,
        reuse_s=math.inf,
        keep_s=math.inf,
        max_packet_size=int(v["max_packet_size"]),
    )
    replies: list[dict[str, Any]] = []
    for query in v["queries"]:
        try:
            chunk = server.answer(str(query))
        except SnapshotError as exc:
            if exc.kind not in (SnapshotErrorKind.BAD_REQUEST, SnapshotErrorKind.NON_FINITE):
                raise
            replies.append({"error": exc.kind.value, "message": exc.detail})
            continue
        replies.append({"chunk": base64.b64encode(chunk).decode("ascii")})
    return {"replies": replies}
