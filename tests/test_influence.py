"""Bounded influence (issue 12 item 8; proposal spec/proposals/bounded-influence.md): the clipping
rule, and a member sending 100x scaled deltas between real `Fabric` nodes over the memory transport."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from delta_fabric import SyncConfig
from delta_fabric.fabric import Fabric
from delta_fabric.influence import InfluenceBound
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import decode_packet, encode_packet


def test_clip_rule() -> None:
    b = InfluenceBound(4.0, window=8, warmup=3)
    one = np.ones(4, np.float32)  # norm 2
    assert b.clip(2, one * 1000) is not None and b.entries_clipped == 0  # no own entry yet
    for _ in range(3):
        b.note_own(one * 10)
    assert b.scale == 20.0
    big = b.clip(2, one * 1000)  # norm 2000 > 4 * 20
    assert b.entries_clipped == 1
    assert float(np.linalg.norm(big)) == pytest.approx(80.0, rel=1e-6)
    assert b.scale == 20.0  # received entries never move the scale
    small = one * 3
    assert b.clip(1, small) is small  # under the bound: unchanged, not copied
    assert b.entries_seen == 3
    with pytest.raises(ValueError):
        InfluenceBound(0.5)
    with pytest.raises(ValueError):
        InfluenceBound(2.0, window=4, warmup=5)


def _run(scale: float, factor: float | None, steps: int = 60) -> tuple[list[Fabric], np.ndarray]:
    """Three nodes add seeded noise; node 1's own entries reach the others scaled by ``scale``."""
    ids = [1, 2, 3]

    def intercept(src: int, dst: int, packet: bytes) -> list[bytes]:
        if src != 1 or scale == 1.0:
            return [packet]
        pkt = decode_packet(packet)
        entries = tuple(
            dataclasses.replace(e, values=e.values * np.float32(scale)) if e.origin == 1 else e
            for e in pkt.entries
        )
        return [encode_packet(dataclasses.replace(pkt, entries=entries))]

    hub = MemoryHub(intercept=intercept)
    n = 500
    cfg = SyncConfig.v1_0(ratio=0.1, sync_interval=2)
    fabs = [
        Fabric.v1_0(
            NumpyStore({"w": np.zeros(n, np.float32)}),
            hub.transport(i),
            cfg,
            node_id=i,
            influence_factor=factor,
        )
        for i in ids
    ]
    rngs = [np.random.default_rng(i) for i in ids]
    total = np.zeros(n, np.float64)  # what honest summing would give: every node's own training
    for _ in range(steps):
        for f, rng in zip(fabs, rngs, strict=True):
            d = 0.01 * rng.standard_normal(n).astype(np.float32)
            total += d
            f.store.load(f.store.gather() + d)
            f.step()
        for _ in range(4):
            if sum(f.poll() for f in fabs) == 0:
                break
    return fabs, total


def test_a_100x_member_is_clipped_at_the_others() -> None:
    """The honest nodes' anchors stay near the honest sum with the bound, far from it without."""
    plain, _ = _run(100.0, None)
    bounded, _ = _run(100.0, 4.0)
    clean, _ = _run(1.0, None)
    ref = clean[1].engine.anchor  # an honest node of the clean run
    err_plain = float(np.abs(plain[1].engine.anchor - ref).max())
    err_bound = float(np.abs(bounded[1].engine.anchor - ref).max())
    # measured 25.4 against 4.66 (seeded, deterministic): the bound leaves factor - 1 = 3 times the
    # member's honest size per round, and its first round (before the receiver has a scale)
    assert err_plain > 4 * err_bound, (err_plain, err_bound)
    for f in bounded[1:]:
        inf = f.stats()["influence"]
        assert inf["entries_clipped"] > 0
    # node 1 hears honest peers only (the scaling happens on its outgoing link)
    assert bounded[0].stats()["influence"]["entries_clipped"] == 0


def test_the_bound_changes_nothing_when_nobody_misbehaves() -> None:
    plain, _ = _run(1.0, None)
    bounded, _ = _run(1.0, 4.0)
    for a, b in zip(plain, bounded, strict=True):
        assert b.stats()["influence"]["entries_clipped"] == 0
        assert np.array_equal(a.engine.anchor, b.engine.anchor)
