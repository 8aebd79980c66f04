"""Anti-entropy over REAL Zenoh (issue 12 items 3 and 9, reduced form): two nodes on loopback, node B
connected to node A through a user-space TCP proxy (`delta_fabric_demo.faults.CutProxy`) that cuts the
link for 8 sync rounds and restores it. Scouting off, explicit endpoints, a namespace per run, every
wait bounded. Judged in sync rounds and exact anchors (a round waits until each node accepted the
other's newest seq over the reliable, ordered link), never in wall time. The full form (a 30 s cut)
is ``bench/fault_partition_zenoh.py``."""

from __future__ import annotations

import pytest

pytest.importorskip("zenoh")

from delta_fabric_demo.faults import partition_scenario


def test_partition_without_repair_stays_apart() -> None:
    """The control: the deltas published during the cut are lost for good."""
    r = partition_scenario(repair=False, cut_rounds=8)
    assert r.spread[r.heal_round - 1] > 1000 * r.bound
    assert r.spread[-1] > 1000 * r.bound, r.spread
    assert r.rounds_to_clean is None


def test_partition_heals_with_repair() -> None:
    """REQ: DF-RCV-160, DF-RCV-162, DF-RCV-164

    After the heal the anchors return to the clean level (the rounding of a reordered sum) within
    20 sync rounds and stay there; every lost entry was asked for and resent, none given up."""
    r = partition_scenario(repair=True, cut_rounds=8)
    assert r.spread[r.heal_round - 1] > 1000 * r.bound
    assert r.rounds_to_clean is not None and r.rounds_to_clean <= 20, r.spread
    assert all(s <= r.bound for s in r.spread[-5:])
    for c in r.counters:
        rep = c["repair"]
        assert rep["requests_sent"] >= 1 and rep["entries_resent"] >= 8, rep
        assert rep["seqs_given_up"] == rep["seqs_unavailable"] == rep["requests_refused"] == 0
