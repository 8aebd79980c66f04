"""Trusted snapshots (issue 12 item 6; proposal spec/proposals/trusted-snapshots.md): a joiner with
``snapshot_quorum`` queries every live member, refuses strangers, and installs only an anchor that a
quorum of sources confirms. Over the memory transport: the stranger with the lowest node id, the
stranger answering on the victim's key, and the source killed mid-transfer."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from delta_fabric import SyncConfig
from delta_fabric.fabric import Fabric, SnapshotUnavailable
from delta_fabric.repair import anchors_agree, confirm_snapshot
from delta_fabric.snapshot import (
    DEFAULT_CHUNK_SIZE,
    SnapshotError,
    SnapshotErrorKind,
    SnapshotSource,
    encode_chunk,
)
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub, MemoryTransport

MEMBERS = (0x10, 0x11, 0x12)
JOINER = 0x20
STRANGER = 0x1
CFG = SyncConfig.v1_0()


def _honest(n: int) -> dict[int, np.ndarray]:
    """Three members' anchors: one model plus a little per-node drift (deltas in flight)."""
    base = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    return {
        m: base + 1e-3 * np.random.default_rng(m).standard_normal(n).astype(np.float32)
        for m in MEMBERS
    }


def _cluster(
    n: int, hook: Callable[[int, int, bytes], bytes] | None = None
) -> tuple[MemoryHub, dict[int, np.ndarray], list[MemoryTransport]]:
    hub = MemoryHub(snapshot_hook=hook)
    anchors = _honest(n)
    fp = NumpyStore({"w": np.zeros(n, np.float32)}).manifest.fingerprint
    ts = []

    def provider(a: np.ndarray) -> Callable[[], SnapshotSource]:
        return lambda: SnapshotSource(7, fp, a)

    for m, a in anchors.items():
        t = hub.transport(m)
        t.serve_snapshot(provider(a))
        ts.append(t)
    poison = np.full(n, 1e3, np.float32)
    s = hub.transport(STRANGER)  # the lowest node id of the namespace, not a member
    s.serve_snapshot(lambda: SnapshotSource(7, fp, poison))
    ts.append(s)
    return hub, anchors, ts


def _join(hub: MemoryHub, n: int, quorum: int, timeout: float = 5.0) -> Fabric:
    return Fabric.v1_0(
        NumpyStore({"w": np.zeros(n, np.float32)}),
        hub.transport(JOINER),
        CFG,
        node_id=JOINER,
        bootstrap=True,
        bootstrap_timeout=timeout,
        members=(*MEMBERS, JOINER),
        snapshot_quorum=quorum,
    )


def test_without_quorum_the_lowest_stranger_is_adopted() -> None:
    """The attack of issue 12 (the control): the first answer, the stranger's, is installed."""
    hub, _, _ = _cluster(64)
    f = Fabric.v1_0(
        NumpyStore({"w": np.zeros(64, np.float32)}),
        hub.transport(JOINER),
        CFG,
        node_id=JOINER,
        bootstrap=True,
        bootstrap_timeout=5.0,
    )
    assert float(f.engine.anchor[0]) == 1e3
    f.close()


def test_lowest_stranger_refused_and_counted() -> None:
    hub, anchors, _ = _cluster(64)
    f = _join(hub, 64, quorum=2)
    assert np.array_equal(f.engine.anchor, anchors[0x10])
    trust = f.stats()["snapshot_trust"]
    assert trust["sources_refused"] == 1  # the stranger, never queried
    assert trust["sources_queried"] == 3 and trust["outliers"] == 0
    f.close()


def test_stranger_on_the_victims_key_refused_and_counted() -> None:
    """Every chunk the victim (0x10, the lowest member) serves is replaced by a stranger's
    consistent, correctly digested chunk of a poisoned anchor: it is not confirmed."""
    n = 64
    fp = NumpyStore({"w": np.zeros(n, np.float32)}).manifest.fingerprint
    forged = SnapshotSource(9, fp, np.full(n, -50.0, np.float32))

    def hook(server: int, chunk: int, buf: bytes) -> bytes:
        if server != 0x10:
            return buf
        return encode_chunk(forged, 0x10, 4242, chunk, DEFAULT_CHUNK_SIZE)

    hub, anchors, _ = _cluster(n, hook)
    f = _join(hub, n, quorum=2)
    assert np.array_equal(f.engine.anchor, anchors[0x11])
    trust = f.stats()["snapshot_trust"]
    assert trust["outliers"] == 1 and trust["sources_refused"] == 1
    f.close()


def test_source_killed_mid_transfer() -> None:
    """The lowest member dies after serving chunk 0 of a 3-chunk snapshot: the join completes from
    the others, the failure is counted."""
    n = 2 * DEFAULT_CHUNK_SIZE + 10
    killed: list[MemoryTransport] = []

    def hook(server: int, chunk: int, buf: bytes) -> bytes:
        if server == 0x10 and chunk >= 1:
            for t in killed:
                t.close()
            raise SnapshotError(SnapshotErrorKind.NO_SERVER, "node 0x10 was killed")
        return buf

    hub, anchors, ts = _cluster(n, hook)
    killed.append(ts[0])
    f = _join(hub, n, quorum=2)
    assert np.array_equal(f.engine.anchor, anchors[0x11])
    trust = f.stats()["snapshot_trust"]
    assert trust["sources_failed"] == 1
    f.close()


def test_no_quorum_no_install() -> None:
    """Two of three members serve anchors that agree with nobody: a quorum of 2 is never reached,
    the required bootstrap fails and the store is unchanged."""
    n = 64
    fp = NumpyStore({"w": np.zeros(n, np.float32)}).manifest.fingerprint
    far = {0x11: 40.0, 0x12: -40.0}

    def hook(server: int, chunk: int, buf: bytes) -> bytes:
        if server not in far:
            return buf
        src = SnapshotSource(9, fp, np.full(n, far[server], np.float32))
        return encode_chunk(src, server, 77, chunk, DEFAULT_CHUNK_SIZE)

    hub, _, _ = _cluster(n, hook)
    store = NumpyStore({"w": np.zeros(n, np.float32)})
    with pytest.raises(SnapshotUnavailable, match="none confirmed by 2"):
        Fabric.v1_0(
            store,
            hub.transport(JOINER),
            CFG,
            node_id=JOINER,
            bootstrap=True,
            bootstrap_timeout=0.3,
            members=(*MEMBERS, JOINER),
            snapshot_quorum=2,
        )
    assert not store.gather().any()


def test_confirm_snapshot_rules() -> None:
    a = np.ones(8, np.float32)
    assert anchors_agree(a, a * 1.04) and not anchors_agree(a, a * 1.06)
    assert not anchors_agree(a, np.full(8, np.nan, np.float32))
    v = confirm_snapshot({5: a * 100, 6: a, 7: a * 1.01}, quorum=2)
    assert v.chosen == 6 and v.outliers == (5,) and v.confirmations == {5: 1, 6: 2, 7: 2}
    assert confirm_snapshot({5: a, 6: a * 2}, quorum=2).chosen is None
    with pytest.raises(ValueError):
        confirm_snapshot({}, quorum=0)
