"""Averaging semantics (``SyncConfig.average_over``, DF-PAR-70 / DF-GEN-70), the demo's lockstep rounds
and the deterministic lockstep simulator (issue 11)."""

from __future__ import annotations

import numpy as np
import pytest
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import Entry, Packet, encode_packet

MANIFEST = Manifest.from_named_shapes({"w": (40,)})


def _engines(c: int, cfg: SyncConfig, anchor: np.ndarray) -> list[Engine]:
    return [Engine(MANIFEST, cfg, 10 + i, 1, anchor=anchor) for i in range(c)]


def test_average_over_moves_every_node_by_the_mean() -> None:
    # REQ: DF-GEN-70
    rng = np.random.default_rng(3)
    anchor = rng.standard_normal(40).astype(np.float32)
    c = 3
    engines = _engines(c, SyncConfig.v1_0(ratio=1.0, average_over=c), anchor)
    progress = [rng.standard_normal(40).astype(np.float32) for _ in range(c)]
    actives = [anchor + p for p in progress]
    packets = []
    for e, a in zip(engines, actives, strict=True):
        packets += e.pack(e.generate(a), [])
        ci, cv = e.last_correction
        assert ci.size == 40  # ratio 1: every index sent, every index corrected
        a[ci] = a[ci] + cv
    for i, (e, a) in enumerate(zip(engines, actives, strict=True)):
        res = e.receive([p for j, p in enumerate(packets) if j != i])
        res.apply_to(a)
    mean = anchor + np.mean(progress, axis=0)
    for e, a in zip(engines, actives, strict=True):
        np.testing.assert_allclose(a, mean, rtol=0, atol=2e-6)
        np.testing.assert_allclose(e.anchor, mean, rtol=0, atol=2e-6)
    # the anchors agree bit for bit up to the order of the f32 sums
    np.testing.assert_allclose(engines[0].anchor, engines[1].anchor, rtol=0, atol=1e-6)


def test_average_over_keeps_the_unsent_residual() -> None:
    # REQ: DF-GEN-70
    anchor = np.zeros(40, dtype=np.float32)
    (e,) = _engines(1, SyncConfig.v1_0(ratio=0.1, average_over=4), anchor)
    active = np.zeros(40, dtype=np.float32)
    active[[2, 5, 9, 30, 31]] = [4.0, -8.0, 2.0, 0.5, 1.0]
    (entry,) = e.generate(active)
    assert entry.indices.tolist() == [2, 5, 9, 31]  # k = ceil(40 * 0.1) = 4
    assert entry.values.tolist() == [1.0, -2.0, 0.5, 0.25]  # fl32(0.25 * d)
    ci, cv = e.last_correction
    assert ci.tolist() == [2, 5, 9, 31] and cv.tolist() == [-3.0, 6.0, -1.5, -0.75]
    active[ci] = active[ci] + cv
    assert active.tolist() == [*e.anchor.tolist()[:30], 0.5, *e.anchor.tolist()[31:]]


def test_average_over_one_is_protocol_1_0() -> None:
    # REQ: DF-PAR-70
    anchor = np.zeros(40, dtype=np.float32)
    (e,) = _engines(1, SyncConfig.v1_0(ratio=0.5), anchor)
    active = np.linspace(-1, 1, 40, dtype=np.float32)
    before = active.copy()
    entries = e.generate(active)
    assert entries and e.last_correction[0].size == 0
    assert active.tolist() == before.tolist()
    assert "average_over" not in SyncConfig.v1_0().to_json()
    assert SyncConfig.from_json(SyncConfig.v1_0(average_over=5).to_json()).average_over == 5


@pytest.mark.parametrize("bad", [0, -1, 65537])
def test_average_over_range_is_checked(bad: int) -> None:
    # REQ: DF-PAR-70
    with pytest.raises(ValueError, match="average_over"):
        SyncConfig.v1_0(average_over=bad)
    with pytest.raises(TypeError, match="average_over"):
        SyncConfig.v1_0(average_over=True)


def test_round_gate_holds_later_rounds_and_orders_what_it_releases() -> None:
    from delta_fabric_demo.rounds import RoundGate

    hub = MemoryHub()
    rx = hub.transport(1)
    tx2, tx3 = hub.transport(2), hub.transport(3)
    fp = bytes(32)

    def pkt(sender: int, seq: int) -> bytes:
        e = Entry(sender, 1, seq, 0, np.array([0], np.uint32), np.array([1.0], np.float32))
        return encode_packet(Packet(sender, 1, fp, (e,)))

    gate = RoundGate(rx, 1 << 20)
    tx3.publish(pkt(3, 1))
    tx2.publish(pkt(2, 2))
    tx2.publish(pkt(2, 1))
    assert gate.drain() == []  # nothing released yet
    assert gate.has_round({2, 3}, 1) and not gate.has_round({2, 3}, 2)
    gate.release(1)
    assert gate.drain() == [pkt(2, 1), pkt(3, 1)]  # round 1, by sender; round 2 held
    assert not gate.wait_round({2, 3}, 2, 0.01)
    gate.release_all()
    assert gate.drain() == [pkt(2, 2)]


def test_lockstep_simulator_is_deterministic() -> None:
    from delta_fabric_demo.lockstep import SimConfig, run_sim

    cfg = SimConfig(nodes=3, steps=30, interval=10, eval_every=10, averaging=True)
    a, b = run_sim(cfg), run_sim(cfg)
    assert a.curve == b.curve and a.wire_bytes == b.wire_bytes > a.payload_bytes > 0
    assert a.config["lr"] == 0.05 and a.config["bn_momentum"] == 0.1
    periodic = run_sim(SimConfig(nodes=3, steps=30, interval=10, eval_every=10, mode="periodic"))
    assert periodic.packets == 3 * 4 * 3  # 3 averagings, 2 (C - 1) messages per node each


def test_demo_outer_step_below_one_at_long_intervals() -> None:
    """REQ: DF-GEN-300. The demo's ``average_over``: the cluster size up to 40 local steps between
    syncs (an outer learning rate of 1, DF-GEN-70); beyond, ``ceil(C * interval / 40)`` (about
    ``40 / interval``) when ``ratio * interval`` is above 1, else the milder
    ``ceil(C * (40 + interval) / 80)``; within DF-PAR-70's range; the runner and the simulator use
    the same rule, and an explicit ``--average-over`` keeps its value."""
    import argparse

    from delta_fabric_demo.lockstep import (
        OUTER_INTERVAL,
        OUTER_SPAN,
        SimConfig,
        default_average_over,
    )
    from delta_fabric_demo.runner import _average_over, add_arguments

    assert (OUTER_INTERVAL, OUTER_SPAN) == (40, 1.0)
    got = {
        (c, k): default_average_over(c, k, 0.1) for c in (1, 2, 3, 5) for k in (1, 20, 40, 41, 80)
    }
    assert got == {
        (1, 1): 1, (1, 20): 1, (1, 40): 1, (1, 41): 1, (1, 80): 1,
        (2, 1): 2, (2, 20): 2, (2, 40): 2, (2, 41): 3, (2, 80): 4,
        (3, 1): 3, (3, 20): 3, (3, 40): 3, (3, 41): 4, (3, 80): 6,
        (5, 1): 5, (5, 20): 5, (5, 40): 5, (5, 41): 6, (5, 80): 10,
    }  # fmt: skip
    # the grid's interval-80 row: the full damping from ratio 2 % (ratio * interval 1.6), the milder
    # step at 1 % (0.8); at <= 40 steps the ratio changes nothing
    row = {(c, r): default_average_over(c, 80, r) for c in (3, 5) for r in (0.01, 0.02, 0.05, 0.1)}
    assert row == {
        (3, 0.01): 5, (3, 0.02): 6, (3, 0.05): 6, (3, 0.1): 6,
        (5, 0.01): 8, (5, 0.02): 10, (5, 0.05): 10, (5, 0.1): 10,
    }  # fmt: skip
    assert {default_average_over(5, k, r) for k in (10, 40) for r in (0.001, 0.01, 1.0)} == {5}
    assert default_average_over(3, 100, 0.01) == 6  # ratio * interval 1.0: not above, the milder
    assert default_average_over(3, 101, 0.01) == 8  # ceil(3 * 101 / 40)
    assert default_average_over(3, 2**32 - 1, 0.1) == 65536  # DF-PAR-70's bound, never past it
    assert default_average_over(3, 2**32 - 1, 1e-12) == 65536
    SyncConfig.v1_0(average_over=default_average_over(7, 2**32 - 1, 0.1))  # a valid configuration
    assert SimConfig(nodes=5, interval=80, ratio=0.1, averaging=True).resolved_average_over() == 10
    assert SimConfig(nodes=5, interval=80, ratio=0.01, averaging=True).resolved_average_over() == 8
    assert SimConfig(nodes=3, interval=20, averaging=True).resolved_average_over() == 3
    assert SimConfig(nodes=5, interval=80, averaging=False).resolved_average_over() == 1
    assert (
        SimConfig(nodes=5, interval=80, averaging=True, average_over=5).resolved_average_over() == 5
    )
    p = argparse.ArgumentParser()
    add_arguments(p)
    for argv, want in (
        ([], 3),  # the demo's defaults: 20 steps, 3 nodes
        (["--sync-interval", "80"], 6),  # the demo's ratio 10 %
        (["--sync-interval", "80", "--ratio", "0.01"], 5),
        (["--sync-interval", "80", "--average-over", "3"], 3),
    ):
        assert _average_over(p.parse_args(argv), ["torch"] * 3, {}, 3) == want
