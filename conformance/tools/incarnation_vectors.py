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

from delta_fabric.config import MAX_INCARNATION_GRACE, SyncConfig
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
            config=SyncConfig.v1_0(max_incarnation_ahead=AHEAD),
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
            config=SyncConfig.v1_0(max_incarnation_ahead=AHEAD, max_incarnations=2),
            history=[(B, B_INC, 1), (B, NOW_US - 90_000_000 + 30_000_000, 1)],
            now_us=NOW_US,
        ),
        *live_cases(),
        *grace_cases(),
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
    config = SyncConfig.v1_0(max_incarnation_ahead=AHEAD)
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
            config=SyncConfig.v1_0(max_incarnation_ahead=AHEAD, incarnation_grace=GRACE),
            history=history,
            now_us=NOW_US,
        ),
    ]


#: B's and C's restarted incarnations: their start, one second before the receiver's clock.
B_NEW = NOW_US - 1_000_000
C_NEW = NOW_US - 1_000_000 + 1
GRACE_REQ = ["DF-PAR-178", "DF-RCV-178", "DF-RCV-4", "DF-RCV-10"]


def _restart_packets(b_old: int, c_old: int | None) -> list[bytes]:
    """An entry of B's restarted incarnation, then B's tracked one's next seq; the same for C."""
    out = [pkt(ent(B, B_NEW, 1, 0, [1], [0.5])), pkt(ent(B, b_old, 4, 0, [2], [0.25]))]
    if c_old is not None:
        out += [pkt(ent(C, C_NEW, 1, 1, [3], [0.125])), pkt(ent(C, c_old, 4, 1, [4], [2.0]))]
    return out


def grace_cases() -> list[RecvCase]:
    """DF-RCV-178 with acceptance times in the history (driver protocol 5.5, 1.1: the 4th member of an
    ``accepted`` element): the boundary ``now_us - t == G``, a clock that went back, the lowest
    incarnation's reading alone deciding, G at its largest value, and history entries without a time."""
    one = SyncConfig.v1_0(max_incarnations=1, incarnation_grace=GRACE)
    b3 = [(B, B_INC, s) for s in (1, 2, 3)]
    c3 = [(C, C_INC, s) for s in (1, 2, 3)]
    return [
        RecvCase(
            "live_incarnation_grace_edge_live",
            "incarnation_grace = 10 s, max_incarnations = 1: B's tracked incarnation accepted its "
            "seqs 1, 2, 3 at now_us - G - 1, now_us - G and now_us - G + 1 (history with acceptance "
            "times); the last one counts, so now_us = t + G - 1 and B's restarted incarnation is "
            "dropped as live_incarnation (no state change); B's seq 4 of the tracked one is accepted.",
            GRACE_REQ,
            _restart_packets(B_INC, None),
            config=one,
            history=b3,
            history_at=[NOW_US - GRACE - 1, NOW_US - GRACE, NOW_US - GRACE + 1],
            now_us=NOW_US,
        ),
        RecvCase(
            "live_incarnation_grace_edge_expired",
            "The same with B's last acceptance at now_us - G (seqs 1, 2, 3 at now_us - G - 2, "
            "now_us - G - 1, now_us - G): now_us = t + G is not inside the grace, so B's restarted "
            "incarnation evicts the tracked one (DF-RCV-4) and is accepted; B's seq 4 of the evicted "
            "incarnation is stale_incarnation.",
            GRACE_REQ,
            _restart_packets(B_INC, None),
            config=one,
            history=b3,
            history_at=[NOW_US - GRACE - 2, NOW_US - GRACE - 1, NOW_US - GRACE],
            now_us=NOW_US,
        ),
        RecvCase(
            "live_incarnation_grace_clock_back",
            "The receiver's clock went back: B's tracked incarnation accepted an entry at now_us + 1, "
            "C's at 2^64 - 1 (t + G overflows 64 bits); with incarnation_grace = 10 s and "
            "max_incarnations = 1 both are live (now_us < t), so the restarted incarnations of B and "
            "C are dropped as live_incarnation, and the tracked ones accept their seq 4.",
            GRACE_REQ,
            _restart_packets(B_INC, C_INC),
            config=one,
            history=b3 + c3,
            history_at=[None, None, NOW_US + 1, None, None, (1 << 64) - 1],
            now_us=NOW_US,
        ),
        RecvCase(
            "live_incarnation_grace_lowest_only",
            "max_incarnations = 2, incarnation_grace = 10 s: B tracks B_INC (last acceptance now_us - "
            "G, not live) and B_INC + 1 (now_us, live); C tracks C_INC (now_us - G + 1, live) and "
            "C_INC + 1 (now_us - 5 G, not live). Only the lowest incarnation's reading decides "
            "(DF-RCV-4 evicts only the lowest): B's restarted incarnation evicts B_INC and is "
            "accepted, B_INC's seq 4 is then stale_incarnation; C's restarted incarnation is dropped "
            "as live_incarnation and C_INC's seq 4 is accepted.",
            GRACE_REQ,
            _restart_packets(B_INC, C_INC),
            config=SyncConfig.v1_0(max_incarnations=2, incarnation_grace=GRACE),
            history=[*b3, (B, B_INC + 1, 1), *c3, (C, C_INC + 1, 1)],
            history_at=[
                None,
                None,
                NOW_US - GRACE,
                NOW_US,
                None,
                None,
                NOW_US - GRACE + 1,
                NOW_US - 5 * GRACE,
            ],
            now_us=NOW_US,
        ),
        RecvCase(
            "live_incarnation_grace_max",
            "incarnation_grace at its largest value, 2^40 microseconds (about 12.7 days; DF-PAR-178), "
            "max_incarnations = 1: B's tracked incarnation accepted its seq 3 at now_us - 2^40 + 1 "
            "(live: its restarted incarnation is dropped as live_incarnation, its seq 4 accepted); "
            "C's at now_us - 2^40 (not live: C's restarted incarnation evicts it and is accepted, "
            "C_INC's seq 4 is stale_incarnation).",
            GRACE_REQ,
            _restart_packets(B_INC, C_INC),
            config=SyncConfig.v1_0(max_incarnations=1, incarnation_grace=MAX_INCARNATION_GRACE),
            history=b3 + c3,
            history_at=[
                None,
                None,
                NOW_US - MAX_INCARNATION_GRACE + 1,
                None,
                None,
                NOW_US - MAX_INCARNATION_GRACE,
            ],
            now_us=NOW_US,
        ),
        RecvCase(
            "live_incarnation_grace_off_clock_back",
            "incarnation_grace = 0 (off, DF-PAR-178) with acceptance times, max_incarnations = 1: B's "
            "tracked incarnation accepted its seq 3 at now_us + 1 (the clock went back) and C's at "
            "now_us; without a grace neither is live, so both restarted incarnations evict the "
            "tracked ones and are accepted (DF-RCV-4, as in 1.0), and the seqs 4 of the evicted "
            "incarnations are stale_incarnation.",
            GRACE_REQ,
            _restart_packets(B_INC, C_INC),
            config=SyncConfig.v1_0(max_incarnations=1),
            history=b3 + c3,
            history_at=[None, None, NOW_US + 1, None, None, NOW_US],
            now_us=NOW_US,
        ),
        RecvCase(
            "live_incarnation_grace_untimed_history",
            "History entries with and without an acceptance time, incarnation_grace = 10 s, "
            "max_incarnations = 1: B's seq 1 was accepted at now_us - 1 and its seqs 2 and 3 without "
            "a time, which leaves the recorded reading (DF-RCV-178: the last acceptance with a clock "
            "reading), so B's incarnation is live and its restarted one is dropped as "
            "live_incarnation; C's seqs 1..3 have no time (no reading, as in 1.0 vectors), so C's "
            "restarted incarnation evicts the tracked one and is accepted, and C_INC's seq 4 is "
            "stale_incarnation.",
            GRACE_REQ,
            _restart_packets(B_INC, C_INC),
            config=one,
            history=b3 + c3,
            history_at=[NOW_US - 1, None, None, None, None, None],
            now_us=NOW_US,
        ),
    ]


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write the incarnation-bound receive vectors under ``vectors_dir``; return their index rows."""
    assert NODE_INC < NOW_US
    return [_write_receive(vectors_dir, c) for c in cases()]
