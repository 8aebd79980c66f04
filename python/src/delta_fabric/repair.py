"""Anti-entropy by gap repair (spec section 7.9, DF-RCV-160..165, added in 1.1; `df_core::repair` in
Rust). Sans-IO: no clock, no thread; a node calls `GapTracker.round` and `ResendBuffer.take` once per
sync round.

- `GapTracker` (receiver side) sees the header of every accepted entry and, once per sync round, says
  which seqs of which (origin, incarnation) have been missing for ``delay`` rounds: a seq is missing
  when it lies between the first seq accepted of that incarnation (never below: what came before may
  be in the snapshot this node joined from) and the highest, inside the replay window, and was never
  accepted. It asks again once ``retry`` of its rounds have passed and the origin's highest seq has
  grown by ``retry`` since the last request (the origin has moved on, so it had rounds to answer in),
  ``attempts`` times in all, then gives up (counted) after one more such wait.
- `RepairRequest` (wire, ``schema/repair.fbs``, identifier ``DFR1``): what the receiver publishes on
  its delta key; `encode_request` / `decode_request` (bounds-checked, typed `RepairError`).
- `ResendBuffer` (origin side) keeps the node's own last entries (bounded in entries and values) and
  answers requests addressed to it with the very same entries (same origin, incarnation, seq, hops 0),
  so every receiver's replay window (DF-RCV-3) drops the copies it already holds and applies the
  others once. At most ``max_values_per_round`` values are resent per round, whoever asks.

Every bound is in rounds, entries or values: the verdicts do not depend on timing.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NoReturn

import flatbuffers
import numpy as np

from delta_fabric import wire as _wire
from delta_fabric._generated.deltafabric.v1 import RepairRequest as _gen
from delta_fabric.errors import DecodeError, DeltaFabricError
from delta_fabric.wire import Entry

__all__ = [
    "DEFAULT_AGREEMENT",
    "FILE_IDENTIFIER",
    "MAX_REQUEST_SEQS",
    "GapTracker",
    "QuorumVerdict",
    "RepairCounters",
    "RepairError",
    "RepairErrorKind",
    "RepairRequest",
    "ResendBuffer",
    "anchors_agree",
    "confirm_snapshot",
    "decode_request",
    "encode_request",
    "is_repair_request",
]

FILE_IDENTIFIER = b"DFR1"
VERSION_MAJOR = 1
VERSION_MINOR = 1
FINGERPRINT_SIZE = 32
#: DF-RCV-161: at most this many seqs in one request.
MAX_REQUEST_SEQS = 256
_U64_MAX = (1 << 64) - 1


class RepairErrorKind(str, Enum):
    """Why a repair request was refused (DF-RCV-161)."""

    BAD_IDENTIFIER = "BAD_IDENTIFIER"
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    MALFORMED = "MALFORMED"

    def __str__(self) -> str:
        return self.value


class RepairError(DeltaFabricError, ValueError):
    """A repair request that does not decode (``kind`` says why); nothing was changed."""

    def __init__(self, kind: RepairErrorKind, detail: str = "") -> None:
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class RepairRequest:
    """``sender`` (at ``sender_incarnation``) asks ``origin`` to publish again its entries
    ``(origin, incarnation, s)`` for every ``s`` in ``seqs`` (strictly increasing)."""

    sender: int
    sender_incarnation: int
    fingerprint: bytes
    origin: int
    incarnation: int
    seqs: tuple[int, ...]
    version_minor: int = VERSION_MINOR

    def check(self) -> None:
        """The rules of DF-RCV-161 on the fields (``RepairError(MALFORMED)`` when one fails)."""
        for name in ("sender", "sender_incarnation", "origin", "incarnation"):
            v = getattr(self, name)
            if not 1 <= v <= _U64_MAX:
                _malformed(f"{name} {v} not in [1, 2**64)")
        if len(self.fingerprint) != FINGERPRINT_SIZE:
            _malformed(
                f"fingerprint has {len(self.fingerprint)} bytes, expected {FINGERPRINT_SIZE}"
            )
        if not 1 <= len(self.seqs) <= MAX_REQUEST_SEQS:
            _malformed(f"{len(self.seqs)} seqs, expected 1 to {MAX_REQUEST_SEQS}")
        prev = 0
        for s in self.seqs:
            if not prev < s <= _U64_MAX:
                _malformed(f"seq {s} after {prev}: seqs must be strictly increasing and >= 1")
            prev = s


def _malformed(detail: str) -> NoReturn:
    raise RepairError(RepairErrorKind.MALFORMED, detail)


def is_repair_request(buf: bytes | bytearray | memoryview) -> bool:
    """True when bytes 4 to 7 are ``DFR1`` (DF-RCV-160: how a receiver tells it from a packet)."""
    return len(buf) >= 8 and bytes(buf[4:8]) == FILE_IDENTIFIER


def encode_request(req: RepairRequest) -> bytes:
    """The ``RepairRequest`` buffer (``RepairError(MALFORMED)`` for fields DF-RCV-161 refuses)."""
    req.check()
    b = flatbuffers.Builder(64 + 8 * len(req.seqs))
    _gen.RepairRequestStartSeqsVector(b, len(req.seqs))
    for s in reversed(req.seqs):
        b.PrependUint64(s)
    seqs_off = b.EndVector()
    fp_off = b.CreateByteVector(req.fingerprint)
    _gen.RepairRequestStart(b)
    _gen.RepairRequestAddVersionMajor(b, VERSION_MAJOR)
    _gen.RepairRequestAddVersionMinor(b, req.version_minor)
    _gen.RepairRequestAddSender(b, req.sender)
    _gen.RepairRequestAddSenderIncarnation(b, req.sender_incarnation)
    _gen.RepairRequestAddFingerprint(b, fp_off)
    _gen.RepairRequestAddOrigin(b, req.origin)
    _gen.RepairRequestAddIncarnation(b, req.incarnation)
    _gen.RepairRequestAddSeqs(b, seqs_off)
    b.Finish(_gen.RepairRequestEnd(b), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


_U64 = struct.Struct("<Q")
_VMAJ, _VMIN, _SENDER, _SINC, _FP, _ORIGIN, _INC, _SEQS = range(8)


def _required(v: tuple[int, int] | None, name: str) -> tuple[int, int]:
    if v is None:
        _malformed(f"{name} (required) missing")
    return v


def decode_request(buf: bytes | bytearray | memoryview) -> RepairRequest:
    """Decode and check one repair request (DF-RCV-161): identifier; structure by the packet
    decoder's reader (the verifier rules of DF-PKT-20 and DF-PKT-21 and the sharing rule DF-SEC-20,
    applied to ``RepairRequest``, as `delta_fabric.snapshot.decode_chunk` does for
    ``SnapshotChunk``); version; required vectors and their sizes; the field rules of
    `RepairRequest.check`. Raises nothing but `RepairError`."""
    try:
        mv = memoryview(buf).cast("B")
    except (TypeError, ValueError) as exc:
        raise RepairError(RepairErrorKind.MALFORMED, f"not a byte buffer: {exc}") from exc
    if not is_repair_request(mv):
        raise RepairError(RepairErrorKind.BAD_IDENTIFIER, "missing file identifier DFR1")
    try:
        r = _wire._Reader(mv)
        root_off = int.from_bytes(mv[0:4], "little")
        if root_off == 0:
            _malformed("root uoffset 0 (points to itself)")
        t = r.table(root_off, "RepairRequest")
        vmaj = r.u16(t, _VMAJ, "version_major")
        if vmaj != VERSION_MAJOR:
            raise RepairError(RepairErrorKind.UNSUPPORTED_VERSION, f"version_major {vmaj}")
        vmin = r.u16(t, _VMIN, "version_minor")
        sender = r.u64(t, _SENDER, "sender")
        sender_incarnation = r.u64(t, _SINC, "sender_incarnation")
        fp = r.vector(t, _FP, 1, "fingerprint")
        origin = r.u64(t, _ORIGIN, "origin")
        incarnation = r.u64(t, _INC, "incarnation")
        seqs = r.vector(t, _SEQS, 8, "seqs")
        fp_start, fp_len = _required(fp, "fingerprint")
        s_start, s_len = _required(seqs, "seqs")
        _wire._check_disjoint(
            np.array([a for a, _ in r.spans], dtype=np.int64),
            np.array([b for _, b in r.spans], dtype=np.int64),
        )
    except DecodeError as exc:
        raise RepairError(RepairErrorKind.MALFORMED, exc.detail) from exc
    if s_len > MAX_REQUEST_SEQS:
        _malformed(f"{s_len} seqs, expected at most {MAX_REQUEST_SEQS}")
    req = RepairRequest(
        sender=sender,
        sender_incarnation=sender_incarnation,
        fingerprint=bytes(mv[fp_start : fp_start + fp_len]),
        origin=origin,
        incarnation=incarnation,
        seqs=tuple(int(_U64.unpack_from(mv, s_start + 8 * i)[0]) for i in range(s_len)),
        version_minor=vmin,
    )
    req.check()
    return req


# ------------------------------------------------------------------------------------------------------
# Counters
# ------------------------------------------------------------------------------------------------------


@dataclass
class RepairCounters:
    """DF-RCV-165's counters of one node (both sides)."""

    #: requests published, and the seqs they asked for (each attempt counted)
    requests_sent: int = 0
    seqs_requested: int = 0
    #: seqs given up after ``attempts`` requests
    seqs_given_up: int = 0
    #: requests received addressed to this node and accepted, and those refused (malformed, another
    #: fingerprint, another origin's or an old incarnation's)
    requests_received: int = 0
    requests_refused: int = 0
    #: own entries published again, and requested seqs no longer (or never) held
    entries_resent: int = 0
    seqs_unavailable: int = 0
    #: requested seqs left for a later round by the per-round budget
    seqs_deferred: int = 0

    def to_json(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.__dict__.items()}


# ------------------------------------------------------------------------------------------------------
# Receiver side
# ------------------------------------------------------------------------------------------------------


@dataclass
class _Track:
    incarnation: int
    base: int  # lowest accepted seq of this incarnation
    highest: int
    seen: set[int] = field(default_factory=set)  # accepted seqs in (highest - window, highest]
    # missing seq -> [round first seen missing, requests that carried it, round of the last one,
    # highest seq at the last one]; requests > attempts once given up
    since: dict[int, list[int]] = field(default_factory=dict)


class GapTracker:
    """DF-RCV-162/163: which seqs to ask for again, decided once per sync round.

    ``window``: the replay window W (seqs at or below ``highest - W`` cannot be accepted any more and
    are never asked for). ``delay``: rounds a seq must have been missing before the first request
    (>= 1; a seq still in flight on a relay path arrives within ``max_hops`` rounds). ``retry``: rounds
    of this node, and seqs of the origin accepted, between requests for one seq (a request's wait is
    over when both have passed, DF-RCV-163); ``attempts``: requests per seq before it is given up.
    ``max_requests``: requests per round (one per (origin, incarnation), at most `MAX_REQUEST_SEQS`
    seqs each, lowest seqs first); a seq counts as asked only when a request carries it, so a due seq
    left out by either bound goes out in a later round. Memory: O(W) per tracked origin; only the newest incarnation of
    an origin is tracked.
    """

    def __init__(
        self,
        window: int,
        *,
        delay: int = 2,
        retry: int = 4,
        attempts: int = 4,
        max_requests: int = 16,
    ) -> None:
        for name, v in (
            ("window", window),
            ("delay", delay),
            ("retry", retry),
            ("attempts", attempts),
            ("max_requests", max_requests),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        self.window = window
        self.delay = delay
        self.retry = retry
        self.attempts = attempts
        self.max_requests = max_requests
        self.rounds = 0
        self.counters = RepairCounters()
        self._tracks: dict[int, _Track] = {}

    def observe(self, origin: int, incarnation: int, seq: int) -> None:
        """An entry the receiver accepted (DF-RCV-3 said ACCEPTED)."""
        t = self._tracks.get(origin)
        if t is None or incarnation > t.incarnation:
            self._tracks[origin] = _Track(incarnation, seq, seq, {seq})
            return
        if incarnation < t.incarnation:
            return
        if seq > t.highest:
            t.highest = seq
            low = seq - self.window
            if low > 0:
                t.seen = {s for s in t.seen if s > low}
                t.since = {s: r for s, r in t.since.items() if s > low}
        t.seen.add(seq)
        t.base = min(t.base, seq)

    def observe_all(self, entries: Iterable[Any]) -> None:
        """`observe` for every item with ``origin``, ``incarnation`` and ``seq`` (`AcceptedEntry`)."""
        for e in entries:
            self.observe(e.origin, e.incarnation, e.seq)

    def missing(self, origin: int) -> list[int]:
        """The seqs of ``origin``'s tracked incarnation missing now, ascending."""
        t = self._tracks.get(origin)
        if t is None:
            return []
        lo = max(t.base, t.highest - self.window + 1, 1)
        return [s for s in range(lo, t.highest + 1) if s not in t.seen]

    def round(
        self, reachable: Container[int] | None = None
    ) -> list[tuple[int, int, tuple[int, ...]]]:
        """End of a sync round: ``(origin, incarnation, seqs)`` to request, by ascending origin.

        ``reachable``: the origins a request can reach now (the transport's live peers); the due
        seqs of any other origin are not asked this round and stay due (DF-RCV-230). None: all."""
        self.rounds += 1
        r = self.rounds
        out: list[tuple[int, int, tuple[int, ...]]] = []
        for origin in sorted(self._tracks):
            t = self._tracks[origin]
            now = self.missing(origin)
            since = {s: t.since.get(s) or [r, 0, 0, 0] for s in now}
            t.since = since
            due: list[int] = []
            for s in now:
                first, asked, last, at = since[s]
                # a request's wait is over once this node has had retry rounds and the origin has
                # moved on by retry seqs: an origin that is stalled (no CPU, pacing) had no round
                # in which to answer, so its peers' requests do not expire meanwhile
                over = asked > 0 and r - last >= self.retry and t.highest - at >= self.retry
                if asked >= self.attempts:
                    if asked == self.attempts and over:  # given up once
                        self.counters.seqs_given_up += 1
                        since[s][1] = asked + 1
                elif (r - first >= self.delay) if asked == 0 else over:
                    due.append(s)
            # only what a request carries counts as asked: a due seq left out by either bound
            # stays due for a later round (a burst loss of more than MAX_REQUEST_SEQS seqs)
            held = reachable is not None and origin not in reachable
            if due and not held and len(out) < self.max_requests:
                seqs = tuple(due[:MAX_REQUEST_SEQS])
                for s in seqs:
                    since[s][1] += 1
                    since[s][2] = r
                    since[s][3] = t.highest
                out.append((origin, t.incarnation, seqs))
                self.counters.requests_sent += 1
                self.counters.seqs_requested += len(seqs)
        return out

    @property
    def num_origins(self) -> int:
        return len(self._tracks)


# ------------------------------------------------------------------------------------------------------
# Origin side
# ------------------------------------------------------------------------------------------------------


class ResendBuffer:
    """DF-RCV-164: the node's own last entries of its current incarnation and the seqs asked for.

    Holds at most ``max_entries`` entries and ``max_values`` values (oldest evicted first); at most
    ``max_pending`` requested seqs wait (later ones are refused and counted); `take` returns at most
    ``max_values_per_round`` values of requested entries (at least one entry when any is pending and
    held), lowest seq first.
    """

    def __init__(
        self,
        node_id: int,
        incarnation: int,
        fingerprint: bytes,
        *,
        max_entries: int = 4096,
        max_values: int = 4_194_304,
        max_values_per_round: int = 262_144,
        max_pending: int = 4096,
    ) -> None:
        for name, v in (
            ("max_entries", max_entries),
            ("max_values", max_values),
            ("max_values_per_round", max_values_per_round),
            ("max_pending", max_pending),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        self.node_id = node_id
        self.incarnation = incarnation
        self.fingerprint = bytes(fingerprint)
        self.max_entries = max_entries
        self.max_values = max_values
        self.max_values_per_round = max_values_per_round
        self.max_pending = max_pending
        self.counters = RepairCounters()
        self._held: OrderedDict[int, Entry] = OrderedDict()
        self._values = 0
        self._pending: set[int] = set()

    def add(self, entries: Sequence[Entry]) -> None:
        """Own entries just generated (entries of other origins or incarnations are ignored)."""
        for e in entries:
            if e.origin != self.node_id or e.incarnation != self.incarnation:
                continue
            old = self._held.pop(e.seq, None)
            if old is not None:
                self._values -= int(old.indices.size)
            self._held[e.seq] = e
            self._values += int(e.indices.size)
        while self._held and (len(self._held) > self.max_entries or self._values > self.max_values):
            _, old = self._held.popitem(last=False)
            self._values -= int(old.indices.size)

    def request(self, req: RepairRequest) -> bool:
        """A decoded request: queued when addressed to this node's current incarnation and manifest
        (True), else refused and counted (False). Seqs not held are counted ``seqs_unavailable``."""
        if (
            req.origin != self.node_id
            or req.incarnation != self.incarnation
            or req.fingerprint != self.fingerprint
        ):
            self.counters.requests_refused += 1
            return False
        self.counters.requests_received += 1
        for s in req.seqs:
            if s not in self._held:
                self.counters.seqs_unavailable += 1
            elif s not in self._pending:
                if len(self._pending) >= self.max_pending:
                    self.counters.seqs_deferred += 1
                else:
                    self._pending.add(s)
        return True

    def take(self) -> list[Entry]:
        """The requested entries to publish again this round (hops 0, as generated)."""
        out: list[Entry] = []
        budget = self.max_values_per_round
        for s in sorted(self._pending):
            e = self._held.get(s)
            if e is None:  # evicted since it was asked for
                self._pending.discard(s)
                self.counters.seqs_unavailable += 1
                continue
            n = int(e.indices.size)
            if out and n > budget:
                break
            out.append(e)
            budget -= n
            self._pending.discard(s)
        self.counters.seqs_deferred += len(self._pending)
        self.counters.entries_resent += len(out)
        return out

    @property
    def held(self) -> int:
        """Entries held."""
        return len(self._held)

    @property
    def pending(self) -> int:
        """Requested seqs waiting for a round."""
        return len(self._pending)


# ------------------------------------------------------------------------------------------------------
# Trusted snapshots: confirmation by a quorum of members (proposal, see
# spec/proposals/trusted-snapshots.md)
# ------------------------------------------------------------------------------------------------------

#: Default relative tolerance of two anchors that agree (the tolerance of DF-NUM-1).
DEFAULT_AGREEMENT = 5e-2


def anchors_agree(a: Any, b: Any, rel_tol: float = DEFAULT_AGREEMENT) -> bool:
    """``max_i |a_i - b_i| <= rel_tol * max(max_i |a_i|, max_i |b_i|)`` in f64, both finite and of
    one length: two honest nodes' anchors differ only by the deltas in flight and by rounding."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return False
    scale = max(float(np.abs(x).max(initial=0.0)), float(np.abs(y).max(initial=0.0)))
    return float(np.abs(x - y).max(initial=0.0)) <= rel_tol * scale


@dataclass(frozen=True)
class QuorumVerdict:
    """`confirm_snapshot`'s answer: ``chosen`` (None: no anchor confirmed), ``confirmations`` of each
    source (how many sources' anchors, itself included, agree with its own), and ``outliers``: the
    sources confirmed by fewer than ``quorum``."""

    chosen: int | None
    confirmations: dict[int, int]
    outliers: tuple[int, ...]


def confirm_snapshot(
    anchors: dict[int, Any], quorum: int, rel_tol: float = DEFAULT_AGREEMENT
) -> QuorumVerdict:
    """The anchor a joiner may install: of the verified snapshots ``anchors`` (source node id ->
    flat anchor) of members, the one of the lowest source id whose anchor agrees (`anchors_agree`)
    with those of at least ``quorum`` sources, itself included. O(S^2 N) for S sources."""
    if quorum < 1:
        raise ValueError(f"quorum must be >= 1, got {quorum}")
    ids = sorted(anchors)
    conf = {
        i: sum(1 for j in ids if i == j or anchors_agree(anchors[i], anchors[j], rel_tol))
        for i in ids
    }
    confirmed = [i for i in ids if conf[i] >= quorum]
    return QuorumVerdict(
        confirmed[0] if confirmed else None,
        conf,
        tuple(i for i in ids if conf[i] < quorum),
    )
