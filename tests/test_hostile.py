"""Hostile inputs on a live cluster (issue 12), on the in-memory transport: deterministic, no timing.

Three nodes train a separable quadratic (each pulls its weights towards its own target, plain gradient
steps, sync every step); a stranger on the same medium publishes hostile packets. Each test compares the
attacked run with the clean run of the same seed and prints its figures (final distance to the clean
state, counters, the largest weight magnitude).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.errors import ErrorCode
from delta_fabric.fabric import Fabric
from delta_fabric.manifest import Manifest
from delta_fabric.replay import Admission
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import Entry, Packet, encode_packet
from numpy.typing import NDArray

N = 64
NODES = (1, 2, 3)
STRANGER = 0x5EED_0000_0000_0000
CFG = SyncConfig.v1_0(ratio=0.25, sync_interval=1, alpha=1.0)
MANIFEST = Manifest.from_named_shapes({"w": (N,)})
Attack = Callable[[int], list[bytes]]


def _entry(origin: int, inc: int, seq: int, idx: list[int], vals: list[float]) -> Entry:
    return Entry(origin, inc, seq, 0, np.array(idx, np.uint32), np.array(vals, np.float32))


def _packet(*entries: Entry) -> bytes:
    return encode_packet(Packet(STRANGER, 1, MANIFEST.fingerprint, tuple(entries)))


def _run(
    rounds: int, attack: Attack | None = None, members: list[int] | None = None
) -> tuple[list[NDArray[np.float32]], list[Fabric]]:
    """``rounds`` of: every node takes a local step and syncs; the stranger publishes
    ``attack(round)`` before the nodes step. Returns the final weights and the fabrics."""
    hub = MemoryHub(seed=7)
    rng = np.random.default_rng(3)
    targets = {n: rng.normal(size=N).astype(np.float32) for n in NODES}
    weights = {n: np.zeros(N, np.float32) for n in NODES}
    fabs = [
        Fabric.v1_0(
            NumpyStore({"w": weights[n]}),
            hub.transport(n),
            CFG,
            node_id=n,
            incarnation=100 + n,
            members=members,
        )
        for n in NODES
    ]
    stranger = hub.transport(STRANGER)
    for r in range(rounds):
        if attack is not None:
            for p in attack(r):
                stranger.publish(p)
        for f, n in zip(fabs, NODES, strict=True):
            w = weights[n]
            w -= np.float32(0.1) * (w - targets[n])  # one local gradient step, in place
            f.step()
    for f in fabs:
        f.poll()
    out = [weights[n].copy() for n in NODES]
    for f in fabs:
        f.close()
    return out, fabs


def _figures(name: str, clean: list[NDArray[np.float32]], got: list[NDArray[np.float32]]) -> float:
    dist = max(float(np.max(np.abs(a - b))) for a, b in zip(clean, got, strict=True))
    peak = max(float(np.max(np.abs(w))) for w in got)
    print(f"{name}: max |attacked - clean| = {dist:.3g}, max |w| = {peak:.3g}")
    return dist


def test_the_3e38_packet_of_issue_12_changes_nothing() -> None:
    # REQ: DF-RCV-50, DF-ERR-50
    clean, _ = _run(30)
    pkt = _packet(_entry(STRANGER, 1, 1, [7], [3e38]), _entry(STRANGER + 1, 1, 1, [7], [3e38]))

    def attack(r: int) -> list[bytes]:
        # every round a fresh seq, so the replay window never stops it
        return [
            _packet(
                _entry(STRANGER, 1, r + 1, [7], [3e38]), _entry(STRANGER + 1, 1, r + 1, [7], [3e38])
            )
        ]

    got, fabs = _run(30, attack)
    assert len(pkt) < 260  # the packet of the report was 248 bytes
    assert all(bool(np.isfinite(w).all()) for w in got)
    assert _figures("3e38 packet, 30 rounds", clean, got) == 0.0  # bit-identical to the clean run
    for f in fabs:
        c = f.engine.counters
        assert c.errors.get(ErrorCode.NON_FINITE_RESULT, 0) == 30
        assert f.engine.state.num_origins == 2  # the two other members; no stranger tracked
        print(f"node {f.node_id}: {c.to_json()['errors']['NON_FINITE_RESULT']} refused")


def test_forged_origin_flood_cannot_lock_out_members() -> None:
    # REQ: DF-RCV-51, DF-SEC-2
    strangers = [STRANGER + i for i in range(1, 4097)]
    flood = _packet(*[_entry(o, 1, 1, [3], [1e-30]) for o in strangers])

    def attack(r: int) -> list[bytes]:
        return [flood] if r == 0 else []

    clean, _ = _run(10)
    # without a membership the flood fills the bound and the members are locked out
    got, fabs = _run(10, attack)
    assert all(f.engine.state.num_origins == 4096 for f in fabs)
    assert all(f.engine.counters.drops.get(Admission.ORIGIN_LIMIT, 0) > 0 for f in fabs)
    locked = _figures("origin flood, no membership", clean, got)
    assert locked > 0.1
    # with the membership the strangers are dropped, never tracked; the run equals the clean one
    got, fabs = _run(10, attack, members=list(NODES))
    for f in fabs:
        assert f.engine.state.num_origins == 2
        assert f.engine.counters.drops.get(Admission.NOT_MEMBER, 0) == 4096
    assert _figures("origin flood, membership", clean, got) == 0.0


def test_refused_packet_leaves_windows_and_counters_of_its_entries() -> None:
    # REQ: DF-RCV-50, DF-RCV-1
    e = Engine(MANIFEST, CFG, 1, 1)
    bad = _packet(_entry(2, 5, 1, [0], [3e38]), _entry(2, 5, 2, [0], [3e38]))
    res = e.receive([bad])
    assert res.outcomes == [ErrorCode.NON_FINITE_RESULT] and res.entry_outcomes == [[]]
    assert e.state.num_origins == 0 and res.empty and not res.relay and not res.accepted
    assert e.counters.entries_accepted == 0 and e.counters.packets_accepted == 0
    good = _packet(_entry(2, 5, 1, [0], [0.5]), _entry(2, 5, 2, [0], [0.25]))
    res = e.receive([good])
    assert res.outcomes == [None] and res.values.tolist() == [0.75]
    assert e.anchor[0] == np.float32(0.75)


def test_active_weights_are_read_through_the_store_at_sorted_unique_indices() -> None:
    # REQ: DF-RCV-50
    # two entries touching one index: the store's gather takes sorted, unique indices only
    w = np.zeros(N, np.float32)
    w[9] = np.float32(3e38)  # the local model diverged at 9 (active only)
    store = NumpyStore({"w": w})
    e = Engine(MANIFEST, CFG, 1, 1)
    ok = _packet(_entry(2, 5, 1, [3, 4], [1.0, 2.0]), _entry(3, 5, 1, [4, 5], [0.5, 0.25]))
    bad = _packet(_entry(2, 5, 2, [9], [1e38]), _entry(3, 5, 2, [8, 9], [1.0, 1.0]))
    res = e.receive([ok, bad], active=store.gather)
    assert res.outcomes == [None, ErrorCode.NON_FINITE_RESULT]
    assert res.indices.tolist() == [3, 4, 5] and res.values.tolist() == [1.0, 2.5, 0.25]
    store.apply(res.indices, res.values)
    assert bool(np.isfinite(store.gather()).all())
