"""`Fabric` over any `WeightStore`: in-place and functional stores, lifecycle, accepted headers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from delta_fabric import Fabric as RootFabric
from delta_fabric.config import SyncConfig
from delta_fabric.engine import AcceptedEntry
from delta_fabric.errors import DeltaFabricError
from delta_fabric.fabric import Fabric, FabricClosedError, SnapshotUnavailable
from delta_fabric.layout import DENSE_IN_OUT, CanonicalLayout
from delta_fabric.manifest import Manifest
from delta_fabric.store import FunctionalStore, StoreError, WeightStore, check_flat, check_sparse
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub
from numpy.typing import NDArray

CFG = SyncConfig.v1_0(ratio=0.5, sync_interval=2)


class TupleStore:
    """A functional store: the native state is an immutable tuple ``(kernel[in,out], bias)`` that
    the training loop replaces; updates build a new tuple (as JAX arrays would)."""

    framework = "tuple"

    def __init__(self, state: tuple[NDArray[np.float32], NDArray[np.float32]]) -> None:
        self.layout = CanonicalLayout(
            [(0, "fc.weight", state[0].shape, DENSE_IN_OUT), (1, "fc.bias", state[1].shape)]
        )
        self._state = state

    @property
    def manifest(self) -> Manifest:
        return self.layout.manifest

    def state(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        return self._state

    def set_state(self, state: tuple[NDArray[np.float32], NDArray[np.float32]]) -> None:
        self._state = state

    def gather(self, indices: NDArray[np.uint32] | None = None) -> NDArray[np.float32]:
        flat = self.layout.to_canonical(dict(enumerate(self._state)))
        return flat if indices is None else flat[indices]

    def apply(self, indices: NDArray[np.uint32], values: NDArray[np.float32]) -> None:
        check_sparse(self.manifest, indices, values)
        new = [a.copy() for a in self._state]
        for s in self.layout.locate(indices):
            flat = new[int(s.key)].reshape(-1)  # type: ignore[call-overload]
            flat[s.native] = flat[s.native] + values[s.lo : s.hi]
        for a in new:
            a.flags.writeable = False
        self._state = (new[0], new[1])

    def load(self, flat: NDArray[np.float32]) -> None:
        native = self.layout.from_canonical(check_flat(self.manifest, flat))
        self._state = (native[0], native[1])


def frozen(a: NDArray[np.float32]) -> NDArray[np.float32]:
    a = a.copy()
    a.flags.writeable = False
    return a


def test_stores_implement_the_protocols() -> None:
    ts = TupleStore((np.zeros((3, 2), np.float32), np.zeros(2, np.float32)))
    ns = NumpyStore({"w": np.zeros(2, np.float32)})
    assert isinstance(ts, WeightStore) and isinstance(ts, FunctionalStore)
    assert isinstance(ns, WeightStore) and not isinstance(ns, FunctionalStore)
    assert RootFabric is Fabric
    with pytest.raises(TypeError, match="WeightStore"):
        Fabric.v1_0(object(), MemoryHub().transport(1), node_id=1)  # type: ignore[arg-type]


def test_functional_store_update_returns_the_new_state() -> None:
    # REQ: DF-RCV-7
    hub = MemoryHub()
    k0 = np.arange(6, dtype=np.float32).reshape(3, 2)  # [in=3, out=2]
    b0 = np.zeros(2, dtype=np.float32)
    a = Fabric.v1_0(NumpyStore({"fc.weight": k0.T.copy(), "fc.bias": b0.copy()}), hub.transport(1),
               CFG, node_id=1, incarnation=1)  # fmt: skip
    fb = Fabric.v1_0(TupleStore((frozen(k0), frozen(b0))), hub.transport(2), CFG, node_id=2)
    assert fb.fingerprint == a.fingerprint  # same canonical manifest from a transposed layout
    store_a = a.store
    assert isinstance(store_a, NumpyStore)
    store_a.arrays["fc.weight"][1, 2] += 4.0  # canonical [out=1, in=2] = native kernel[2, 1]
    a.sync_now()
    state = (frozen(k0), frozen(b0))
    new = fb.update(state)
    assert new is not state
    expect = k0.copy()
    expect[2, 1] += np.float32(4.0) * np.float32(CFG.alpha)
    np.testing.assert_array_equal(new[0], expect)
    np.testing.assert_array_equal(new[1], b0)
    np.testing.assert_array_equal(state[0], k0)  # the caller's arrays are untouched
    assert fb.steps == 1 and fb.stats()["framework"] == "tuple"


def test_update_needs_a_functional_store() -> None:
    fab = Fabric.v1_0(
        NumpyStore({"w": np.zeros(2, np.float32)}), MemoryHub().transport(1), node_id=1
    )
    with pytest.raises(TypeError, match="FunctionalStore"):
        fab.update({})
    assert fab.steps == 0


def test_context_manager_and_closed_fabric_raises_typed_error() -> None:
    hub = MemoryHub()
    t = hub.transport(1)
    with Fabric.v1_0(NumpyStore({"w": np.zeros(2, np.float32)}), t, node_id=1) as fab:
        fab.step()
    assert fab.closed
    for call in (fab.step, fab.poll, fab.sync_now):
        with pytest.raises(FabricClosedError) as info:
            call()
        assert isinstance(info.value, DeltaFabricError)
    assert fab.steps == 1
    t.publish(b"x")  # still open
    with Fabric.v1_0(NumpyStore({"w": np.zeros(2, np.float32)}), t, node_id=1, own_transport=True):
        pass
    with pytest.raises(DeltaFabricError):
        t.publish(b"x")  # closed with the fabric that owns it


def test_snapshot_unavailable_is_typed() -> None:
    with pytest.raises(SnapshotUnavailable) as info:
        Fabric.join(
            NumpyStore({"w": np.zeros(2, np.float32)}),
            MemoryHub().transport(1),
            node_id=1,
            timeout=0.1,
        )
    assert isinstance(info.value, DeltaFabricError)


def test_on_accepted_and_origin_progress() -> None:
    # REQ: DF-RCV-3
    hub = MemoryHub()
    seen: list[AcceptedEntry] = []

    def on_accepted(entries: Sequence[AcceptedEntry]) -> None:
        seen.extend(entries)

    wa = np.zeros(4, np.float32)
    a = Fabric.v1_0(NumpyStore({"w": wa}), hub.transport(1), CFG, node_id=1, incarnation=9)
    b = Fabric.v1_0(
        NumpyStore({"w": np.zeros(4, np.float32)}),
        hub.transport(2),
        CFG,
        node_id=2,
        on_accepted=on_accepted,
    )
    for i in range(3):
        wa[i] += 1.0
        a.sync_now()
    b.poll()
    assert [(e.origin, e.incarnation, e.seq, e.hops) for e in seen] == [
        (1, 9, 1, 0),
        (1, 9, 2, 0),
        (1, 9, 3, 0),
    ]
    assert [(e.packet, e.entry) for e in seen] == [(0, 0), (1, 0), (2, 0)]
    assert b.origin_progress() == {1: (9, 3)}
    assert b.accepted_by_origin() == {1: 3}
    assert b.stats()["accepted_by_hops"] == {"0": 3}
    b.poll()  # nothing new: the counts stay
    assert b.accepted_by_origin() == {1: 3}


def test_store_rejects_bad_sparse_input_and_changes_nothing() -> None:
    w = np.arange(4, dtype=np.float32)
    store = NumpyStore({"w": w})
    bad: list[tuple[Any, Any]] = [
        (np.array([1, 0], np.uint32), np.ones(2, np.float32)),
        (np.array([1, 1], np.uint32), np.ones(2, np.float32)),
        (np.array([4], np.uint32), np.ones(1, np.float32)),
        (np.array([1], np.int64), np.ones(1, np.float32)),
        (np.array([1], np.uint32), np.ones(1, np.float64)),
        (np.array([1, 2], np.uint32), np.ones(1, np.float32)),
    ]
    for idx, vals in bad:
        with pytest.raises(StoreError):
            store.apply(idx, vals)
    with pytest.raises(StoreError):
        store.load(np.zeros(3, np.float32))
    with pytest.raises(StoreError):
        store.load(np.zeros(4, np.float64))
    np.testing.assert_array_equal(w, np.arange(4, dtype=np.float32))


def test_package_root_imports_neither_torch_nor_zenoh() -> None:
    code = (
        "import sys, delta_fabric as d; "
        "assert d.Fabric and d.WeightStore and d.CanonicalLayout and d.NumpyStore; "
        "print(sorted(m for m in ('torch', 'zenoh', 'jax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("bad", [0, -1, 2**64, True, "1"])
def test_bad_node_id_is_refused_before_anything_happens(bad: Any) -> None:
    hub = MemoryHub()
    t = hub.transport(5)
    with pytest.raises((TypeError, ValueError)):
        Fabric.v1_0(NumpyStore({"w": np.zeros(2, np.float32)}), t, node_id=bad)
    assert t.stats.published_packets == 0


def test_failed_start_changes_nothing_and_closes_an_owned_transport() -> None:
    hub = MemoryHub()
    wa = np.arange(3, dtype=np.float32)
    Fabric.v1_0(NumpyStore({"w": wa}), hub.transport(1), CFG, node_id=1)
    wb = np.full(3, 7.0, dtype=np.float32)
    tb = hub.transport(2)
    with pytest.raises(ValueError, match="incarnation"):  # checked before the snapshot is loaded
        Fabric.join(NumpyStore({"w": wb}), tb, CFG, node_id=2, incarnation=0, own_transport=True)
    assert wb.tolist() == [7.0, 7.0, 7.0]
    with pytest.raises(DeltaFabricError):
        tb.publish(b"x")  # owned: closed by the failed constructor


def test_info_lists_the_encodings_the_node_receives() -> None:
    """REQ: DF-ZEN-231

    The info object answered for ``delta-fabric status`` (DF-ZEN-6) carries ``supports``: every
    encoding of the codec table and both index encodings, which this node's receiver accepts."""
    from delta_fabric.compact import IndexEncoding
    from delta_fabric.encodings import CODECS

    hub = MemoryHub()
    with Fabric.v1_0(
        NumpyStore({"w": np.zeros(8, np.float32)}),
        hub.transport(0x41),
        SyncConfig.v1_0(),
        node_id=0x41,
    ) as f:
        info = f._info()
    assert info["supports"] == {
        "encodings": ["F32", "F16", "BF16", "Q8"],
        "index_encodings": ["PLAIN", "PACKED"],
    }
    assert info["supports"]["encodings"] == [c.name for c in CODECS.values()]
    assert info["supports"]["index_encodings"] == [e.name for e in IndexEncoding]
