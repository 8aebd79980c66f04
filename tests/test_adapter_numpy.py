"""`NumpyStore` (generic framework binding) driven by `Fabric` over the in-process memory transport."""

from __future__ import annotations

import numpy as np
import pytest
from delta_fabric.config import SyncConfig
from delta_fabric.fabric import Fabric, SnapshotUnavailable
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub
from numpy.typing import NDArray

CFG = SyncConfig.v1_0(ratio=0.25, sync_interval=4)


def arrays(seed: int = 0, dtype: type = np.float32) -> dict[str, NDArray[np.floating]]:
    rng = np.random.default_rng(seed)
    return {
        "layer.weight": rng.standard_normal((3, 4)).astype(dtype),
        "layer.bias": rng.standard_normal(3).astype(dtype),
        "emb": rng.standard_normal((2, 2, 2)).astype(dtype),
    }


def test_manifest_canonical_order() -> None:
    # REQ: DF-MAN-2
    hub = MemoryHub()
    fab = Fabric.v1_0(NumpyStore(arrays()), hub.transport(1), CFG, node_id=1, incarnation=1)
    assert fab.manifest.names == ("emb", "layer.bias", "layer.weight")
    assert fab.num_params == 8 + 3 + 12


def test_rejects_bad_arrays() -> None:
    hub = MemoryHub()
    with pytest.raises(TypeError):
        Fabric.v1_0(NumpyStore({"a": np.arange(3)}), hub.transport(1), CFG, node_id=1)
    ro = np.zeros(3, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        Fabric.v1_0(NumpyStore({"a": ro}), hub.transport(2), CFG, node_id=2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_apply_in_place_only_affected(dtype: type) -> None:
    # REQ: DF-RCV-7
    hub = MemoryHub()
    a_arr, b_arr = arrays(0, dtype), arrays(0, dtype)
    a = Fabric.v1_0(NumpyStore(a_arr), hub.transport(1), CFG, node_id=1, incarnation=1)
    b_store = NumpyStore(b_arr)
    b = Fabric.v1_0(b_store, hub.transport(2), CFG, node_id=2, incarnation=1)
    ids = {k: id(v) for k, v in b_arr.items()}
    copies = {k: v.copy() for k, v in b_arr.items()}
    a_arr["layer.weight"][2, 1] += 0.5
    a_arr["emb"][1, 0, 1] -= 2.0
    a.sync_now()
    b.step()
    assert {k: id(v) for k, v in b_store.arrays.items()} == ids
    for k, v in b_arr.items():
        diff = np.argwhere(v != copies[k]).tolist()
        want = {"layer.weight": [[2, 1]], "emb": [[1, 0, 1]], "layer.bias": []}[k]
        assert diff == want
    assert b_arr["layer.weight"][2, 1] == pytest.approx(a_arr["layer.weight"][2, 1])
    assert b_arr["emb"].dtype == dtype


def test_non_contiguous_array() -> None:
    hub = MemoryHub()
    base = np.zeros((4, 3), dtype=np.float32)
    view = base.T  # (3, 4), Fortran order
    a_arr = {"w": np.zeros((3, 4), dtype=np.float32)}
    a = Fabric.v1_0(NumpyStore(a_arr), hub.transport(1), CFG, node_id=1, incarnation=1)
    b = Fabric.v1_0(NumpyStore({"w": view}), hub.transport(2), CFG, node_id=2, incarnation=1)
    a_arr["w"][1, 3] = 1.25
    a.sync_now()
    b.step()
    assert view[1, 3] == 1.25 and base[3, 1] == 1.25
    assert np.count_nonzero(base) == 1


def test_idle_step_is_constant_work(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = MemoryHub()
    fab = Fabric.v1_0(NumpyStore(arrays()), hub.transport(1), CFG, node_id=1, incarnation=1)

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("O(N) work on an idle step")

    monkeypatch.setattr(fab.store, "gather", boom)
    monkeypatch.setattr(fab.engine, "receive", boom)
    for _ in range(CFG.sync_interval - 1):
        fab.step()


def test_join_from_snapshot() -> None:
    hub = MemoryHub()
    a_arr = arrays(0)
    a = Fabric.v1_0(NumpyStore(a_arr), hub.transport(1), CFG, node_id=1, incarnation=3)
    a_arr["layer.bias"] += 1.0
    a.sync_now()
    b_arr = arrays(5, np.float64)
    b = Fabric.join(NumpyStore(b_arr), hub.transport(2), CFG, node_id=2, timeout=5.0)
    assert b.bootstrapped and b.incarnation > 3
    np.testing.assert_array_equal(b.active_vector(), a.engine.anchor)
    with pytest.raises(SnapshotUnavailable):
        Fabric.join(NumpyStore(arrays()), MemoryHub().transport(9), CFG, node_id=9, timeout=0.2)
