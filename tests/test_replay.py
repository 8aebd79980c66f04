"""Replay windows (DF-RCV-3), incarnation tables (DF-RCV-4) and counters."""

from __future__ import annotations

import pytest
from delta_fabric.errors import ErrorCode
from delta_fabric.replay import Admission, Counters, ReceiverState, ReplayWindow
from hypothesis import given, settings
from hypothesis import strategies as st

A = Admission.ACCEPTED


def test_window_accepts_new_and_late_drops_duplicate_and_too_old() -> None:
    # REQ: DF-RCV-3
    w = ReplayWindow(8)
    assert w.admit(5) is A
    assert w.admit(3) is A  # late, inside the window
    assert w.admit(3) is Admission.DUPLICATE
    assert w.admit(5) is Admission.DUPLICATE
    assert w.admit(20) is A  # slides: window is now (12, 20]
    assert w.admit(12) is Admission.TOO_OLD
    assert w.admit(13) is A
    assert w.admit(13) is Admission.DUPLICATE
    assert w.seen() == [13, 20]
    assert w.highest == 20


def test_window_is_not_highest_seen() -> None:
    # REQ: DF-RCV-3
    # A highest-seen filter would drop seq 2 after seq 3; the window accepts it once.
    w = ReplayWindow(1024)
    assert [w.admit(s) for s in (1, 3, 2, 2)] == [A, A, A, Admission.DUPLICATE]


def test_window_edges() -> None:
    # REQ: DF-RCV-3
    w = ReplayWindow(4)
    w.admit(10)
    assert w.check(6) is Admission.TOO_OLD  # seq <= H - W
    assert w.check(7) is A  # H - W < seq
    w.admit(8)
    w.admit(11)  # slide by one: 8 is still inside (11 - 4 < 8)
    assert w.check(8) is Admission.DUPLICATE
    assert w.check(9) is A
    w.admit(12)
    assert w.check(9) is A
    assert w.check(8) is Admission.TOO_OLD
    w1 = ReplayWindow(1)
    assert [w1.admit(s) for s in (2, 1, 2, 3)] == [
        A,
        Admission.TOO_OLD,
        Admission.DUPLICATE,
        A,
    ]


@given(st.lists(st.integers(1, 300), max_size=200), st.integers(1, 70))
@settings(max_examples=200)
def test_window_matches_model(seqs: list[int], width: int) -> None:
    # REQ: DF-RCV-3
    w = ReplayWindow(width)
    accepted: set[int] = set()
    high = 0
    for s in seqs:
        if s in accepted and s > high - width:
            want = Admission.DUPLICATE
        elif s <= high - width:
            want = Admission.TOO_OLD
        else:
            want = A
        assert w.admit(s) is want
        if want is A:
            accepted.add(s)
            high = max(high, s)
    assert w.seen() == sorted(s for s in accepted if s > high - width)


def test_own_origin_dropped() -> None:
    # REQ: DF-RCV-2
    st_ = ReceiverState(7)
    assert st_.admit(7, 1, 1) is Admission.OWN_ORIGIN
    assert st_.num_origins == 0


def test_incarnation_table() -> None:
    # REQ: DF-RCV-4
    s = ReceiverState(1, max_incarnations=2, window=16)
    assert s.admit(9, 100, 5) is A
    assert s.admit(9, 200, 1) is A  # a restart: accepted at once, seq restarts at 1
    assert s.admit(9, 100, 6) is A  # both incarnations are tracked
    assert s.admit(9, 50, 1) is Admission.STALE_INCARNATION  # lower than every tracked, table full
    assert s.admit(9, 150, 1) is A  # higher than the lowest: evicts 100
    assert s.incarnations(9) == [150, 200]
    assert s.admit(9, 100, 7) is Admission.STALE_INCARNATION  # evicted ones stay stale
    assert s.admit(9, 200, 1) is Admission.DUPLICATE


def test_origin_limit_is_a_drop_not_an_eviction() -> None:
    s = ReceiverState(1, max_origins=2)
    assert s.admit(2, 1, 1) is A
    assert s.admit(3, 1, 1) is A
    assert s.admit(4, 1, 1) is Admission.ORIGIN_LIMIT
    assert s.admit(2, 1, 1) is Admission.DUPLICATE  # known origins keep their windows


@given(
    st.lists(st.tuples(st.integers(2, 4), st.integers(1, 6), st.integers(1, 60)), max_size=80),
    st.integers(1, 40),
    st.integers(1, 3),
)
def test_history_round_trip(items: list[tuple[int, int, int]], window: int, max_inc: int) -> None:
    s = ReceiverState(1, window=window, max_incarnations=max_inc)
    for o, i, q in items:
        s.admit(o, i, q)
    again = ReceiverState.from_history(1, s.history(), window=window, max_incarnations=max_inc)
    assert again.history() == s.history()
    for o in (2, 3, 4):
        assert again.incarnations(o) == s.incarnations(o)
        for i in range(1, 8):
            for q in range(1, 70):
                assert again.check(o, i, q) is s.check(o, i, q)


def test_from_history_rejects_dropped_items() -> None:
    with pytest.raises(ValueError):
        ReceiverState.from_history(1, [(2, 1, 1), (2, 1, 1)])


def test_counters_json() -> None:
    c = Counters()
    c.count_error(ErrorCode.MALFORMED)
    c.count_drop(Admission.DUPLICATE)
    c.count_drop(Admission.DUPLICATE)
    j = c.to_json()
    assert j["errors"]["MALFORMED"] == 1 and j["errors"]["OVERSIZE"] == 0
    assert j["drops"] == {
        "own_origin": 0,
        "duplicate": 2,
        "too_old": 0,
        "stale_incarnation": 0,
        "origin_limit": 0,
        "not_member": 0,
        "seq_jump": 0,
        "future_incarnation": 0,
        "live_incarnation": 0,
    }
    d = c.copy()
    d.count_error(ErrorCode.MALFORMED)
    assert c.errors[ErrorCode.MALFORMED] == 1


def test_acceptance_times_are_restored() -> None:
    """DF-RCV-178 (driver protocol 5.5, 1.1): a history's acceptance times, restored by
    ``set_accepted_at`` or ``from_history(accepted_at=...)``, are the readings the grace measures."""
    now = 1_795_953_600_000_000
    st = ReceiverState(1, max_incarnations=1, incarnation_grace=10)
    assert st.admit(2, 5, 1) is Admission.ACCEPTED
    assert not st.set_accepted_at(2, 6, now)  # not tracked: nothing recorded
    assert not st.set_accepted_at(3, 5, now)
    assert st.set_accepted_at(2, 5, now - 9)
    assert st.now_us is None  # the clock is not set by it
    st.now_us = now
    assert st.check(2, 6, 1) is Admission.LIVE_INCARNATION
    assert st.set_accepted_at(2, 5, now - 10)
    assert st.check(2, 6, 1) is Admission.ACCEPTED
    assert st.set_accepted_at(2, 5, (1 << 64) - 1)  # the clock went back
    assert st.check(2, 6, 1) is Admission.LIVE_INCARNATION
    for bad in (-1, 1 << 64):
        with pytest.raises(ValueError):
            st.set_accepted_at(2, 5, bad)
    # from_history: the last timed entry of an incarnation counts; an untimed one keeps it
    h = ReceiverState.from_history(
        1, [(2, 5, 1), (2, 5, 2), (2, 5, 3)], max_incarnations=1, accepted_at=[now - 20, now, None]
    )
    h.incarnation_grace, h.now_us = 10, now + 9
    assert h.check(2, 6, 1) is Admission.LIVE_INCARNATION
    h.now_us = now + 10
    assert h.check(2, 6, 1) is Admission.ACCEPTED
    untimed = ReceiverState.from_history(1, [(2, 5, 1)], max_incarnations=1)
    untimed.incarnation_grace, untimed.now_us = 10, now
    assert untimed.check(2, 6, 1) is Admission.ACCEPTED
    with pytest.raises(ValueError):
        ReceiverState.from_history(1, [(2, 5, 1)], accepted_at=[])
