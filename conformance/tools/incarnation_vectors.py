"""Receive vectors of the incarnation bound (spec 1.1, DF-PAR-175, DF-RCV-175..178; h31-incarn).

An incarnation not yet tracked that lies more than ``max_incarnation_ahead`` microseconds ahead of the
receiver's clock ``now_us`` (a field of the vector's ``node``, hex16) is dropped as
``future_incarnation`` before DF-RCV-4 can evict anything. The cases are the attack of issue 12 (four
forged incarnations ``2^64 - 4 .. 2^64 - 1`` of a member), the same packets without the bound (1.0
behaviour: the member is silenced), and the edges of the rule. Written through
``engine_vectors._write_receive``, which runs the Python engine and cross-checks the aggregate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from delta_fabric.config import SyncConfig
from engine_vectors import (
    B_INC,
    C_INC,
    NODE,
    NODE_INC,
    B,
    C,
    RecvCase,
    _write_receive,
    ent,
    pkt,
)

#: The receiver's clock in every case: one hour after B started (B_INC is B's start, in microseconds).
NOW_US = B_INC + 3_600_000_000
#: One minute, the value the spec suggests.
AHEAD = 60_000_000
#: An incarnation of C that the receiver already tracks although it lies two minutes ahead of NOW_US
#: (a node whose clock runs fast, accepted before this receiver had a bound): tracked ones are not checked.
C_FAST = NOW_US + 2 * AHEAD
REQ = ["DF-PAR-175", "DF-RCV-175", "DF-RCV-176", "DF-RCV-4", "DF-RCV-10"]
#: Ten seconds: how long an incarnation that accepted an entry cannot be evicted (DF-PAR-178).
GRACE = 10_000_000


def _forged() -> list[bytes]:
    """Issue 12's attack: four forged incarnations of member B, seq 1, one packet each."""
    return [pkt(ent(B, (1 << 64) - 4 + k, 1, 0, [k], [1000.0])) for k in range(4)]


def _real() -> bytes:
    """B's real entries after the attack: seqs 4..8 of its tracked incarnation."""
    return pkt(*[ent(B, B_INC, s, 0, [s + 4], [0.5]) for s in range(4, 9)])


def cases() -> list[RecvCase]:
    history = [(B, B_INC, s) for s in (1, 2, 3)] + [(C, C_FAST, 1)]
    return [
        RecvCase(
            "future_incarnation_without_bound",
            "Issue 12's forged incarnations without max_incarnation_ahead (1.0 behaviour), with a "
            "clock given: B's incarnation is tracked at H = 3; four forged entries of B with "
            "incarnations 2^64 - 4 .. 2^64 - 1 are accepted (the fourth evicts B's real incarnation, "
            "DF-RCV-4), after which B's five real entries (seqs 4..8) are all stale_incarnation: B is "
            "silenced, and would stay so after a restart (its new incarnation is lower).",
            ["DF-RCV-4", "DF-RCV-175"],
            [*_forged(), _real()],
            history=history,
            now_us=NOW_US,
        ),
        RecvCase(
            "future_incarnation_forged_max",
            "The same packets with max_incarnation_ahead = 60,000,000 (one minute) and now_us one hour "
            "after B started: the four forged entries are dropped as future_incarnation and create no "
            "state; B's five real entries are accepted. Then: an entry of a new incarnation of B exactly "
            "now_us + max_incarnation_ahead is accepted (not greater), one a microsecond later is "
            "dropped; an entry of C's tracked incarnation two minutes ahead is accepted (tracked "
            "incarnations are not checked); the receiver's own entry with a far future incarnation is "
            "own_origin (DF-RCV-2 comes first).",
            REQ,
            [
                *_forged(),
                _real(),
                pkt(
                    ent(B, NOW_US + AHEAD, 1, 0, [20], [0.25]),
                    ent(B, NOW_US + AHEAD + 1, 1, 0, [21], [0.25]),
                    ent(C, C_FAST, 2, 1, [22], [0.125]),
                    ent(NODE, (1 << 64) - 1, 1, 1, [23], [1.0]),
                ),
            ],
            config=SyncConfig(max_incarnation_ahead=AHEAD),
            history=history,
            now_us=NOW_US,
        ),
        RecvCase(
            "future_incarnation_restart",
            "A restart after a forgery that the bound let through (an incarnation 30 s ahead of the "
            "clock, within the bound): with max_incarnations = 2 the forged incarnation and B's real "
            "one fill B's table. B restarts 90 s later (the receiver's clock is now_us; B's new "
            "incarnation is its start time, now_us - 1 s): the restart is higher than every forged "
            "incarnation the bound admitted, so it evicts the lowest and is accepted, and B's real "
            "entries are applied again. A second forgery at 2^64 - 1 is dropped as future_incarnation "
            "and evicts nothing. A stranger origin's future incarnation creates no origin.",
            [*REQ, "DF-RCV-177"],
            [
                pkt(ent(B, NOW_US - 1_000_000, 1, 0, [1], [0.5])),
                pkt(ent(B, NOW_US - 1_000_000, 2, 0, [2], [0.5])),
                pkt(ent(B, (1 << 64) - 1, 1, 0, [3], [1000.0])),
                pkt(ent(0x0E0E_0000_0000_0005, (1 << 64) - 1, 1, 0, [4], [1000.0])),
            ],
            config=SyncConfig(max_incarnation_ahead=AHEAD, max_incarnations=2),
            history=[(B, B_INC, 1), (B, NOW_US - 90_000_000 + 30_000_000, 1)],
            now_us=NOW_US,
        ),
        *live_cases(),
    ]


def live_cases() -> list[RecvCase]:
    """DF-RCV-178: forged incarnations inside the clock bound (1 to 4 s ahead) against a member B
    that is sending (its seq 4 is accepted in the same step, at now_us)."""
    history = [(B, B_INC, s) for s in (1, 2, 3)] + [(C, C_INC + k, 1) for k in range(4)]
    packets = [
        pkt(ent(B, B_INC, 4, 0, [4], [0.5])),
        *[pkt(ent(B, NOW_US + k * 1_000_000, 1, 0, [k], [1000.0])) for k in (1, 2, 3, 4)],
        pkt(*[ent(B, B_INC, s, 0, [s + 4], [0.5]) for s in range(5, 9)]),
        pkt(ent(C, C_INC + 4, 1, 0, [20], [0.25])),
    ]
    config = SyncConfig(max_incarnation_ahead=AHEAD)
    return [
        RecvCase(
            "live_incarnation_without_grace",
            "Forgeries inside the clock bound without incarnation_grace: B's real entry (seq 4) is "
            "accepted, three forged incarnations 1..3 s ahead fill B's table, the fourth (4 s ahead) "
            "evicts B's real incarnation, and B's next four real entries are stale_incarnation. C's "
            "new incarnation evicts C's lowest tracked one.",
            ["DF-RCV-4", "DF-RCV-175", "DF-RCV-178"],
            packets,
            config=config,
            history=history,
            now_us=NOW_US,
        ),
        RecvCase(
            "live_incarnation_with_grace",
            "The same packets with incarnation_grace = 10 s: B's real incarnation accepted an entry "
            "at now_us, so the fourth forged incarnation, which would evict it, is dropped as "
            "live_incarnation and changes nothing; B's next four real entries are accepted. C's "
            "incarnations were tracked from the history, without an acceptance time, so they are "
            "not live: C's new incarnation evicts the lowest as in 1.0.",
            ["DF-PAR-178", "DF-RCV-178", "DF-RCV-4", "DF-RCV-10"],
            packets,
            config=SyncConfig(max_incarnation_ahead=AHEAD, incarnation_grace=GRACE),
            history=history,
            now_us=NOW_US,
        ),
    ]


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write the incarnation-bound receive vectors under ``vectors_dir``; return their index rows."""
    assert NODE_INC < NOW_US
    return [_write_receive(vectors_dir, c) for c in cases()]
