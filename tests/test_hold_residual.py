"""`Fabric.v1_0(hold_residual=True)` (spec section 5.11, DF-GEN-240..244): the unsent residual is held in a
buffer of the node's own, the working weights restart from the anchor after every generation, the
residual is folded back just before the next one, and incoming entries move the anchor and the working
weights, never the residual. The same arithmetic is pinned in Rust
(interop/crates/df-fabric/tests/hold_residual.rs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from delta_fabric.config import SyncConfig
from delta_fabric.engine import NonFiniteDelta
from delta_fabric.fabric import Fabric
from delta_fabric.store import StoreError
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import decode_packet


def f32(*v: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray(v, dtype=np.float32)


def cfg(average_over: int = 1) -> SyncConfig:
    # k = ceil(8 * 0.25) = 2; generation only by sync_now (the interval is never reached)
    return SyncConfig.v1_0(ratio=0.25, sync_interval=1000, alpha=1.0, average_over=average_over)


class StatsStore(NumpyStore):
    """A store that names ``bn.running_var`` as running statistics (the optional seam call)."""

    def __init__(self, arrays: dict[str, Any], stats: tuple[str, ...]) -> None:
        super().__init__(arrays)
        self._stats = stats

    def running_stats(self) -> tuple[str, ...]:
        return self._stats


def pair(average_over: int = 1) -> tuple[Fabric, Fabric, MemoryHub]:
    hub = MemoryHub()
    a = Fabric.v1_0(NumpyStore({"w": np.zeros(8, np.float32)}), hub.transport(1), cfg(average_over),
               node_id=1, incarnation=1, hold_residual=True)  # fmt: skip
    b = Fabric.v1_0(NumpyStore({"w": np.zeros(8, np.float32)}), hub.transport(2), cfg(average_over),
               node_id=2, incarnation=1)  # fmt: skip
    return a, b, hub


def weights(f: Fabric) -> np.ndarray[Any, np.dtype[np.float32]]:
    return f.store.gather()


def test_residual_is_held_aside_and_folded_back_with_incoming_entries_between() -> None:
    # REQ: DF-GEN-240
    # REQ: DF-GEN-241
    # REQ: DF-GEN-242
    # REQ: DF-GEN-243
    a, b, _hub = pair()
    wa = a.store.arrays["w"]  # type: ignore[attr-defined]
    wa[:] = f32(4, -3, 2, 1, 0.5, 0, 0, 0)  # local training
    a.sync_now()  # d = wa; top 2: indices 0 and 1
    np.testing.assert_array_equal(a.engine.anchor, f32(4, -3, 0, 0, 0, 0, 0, 0))
    np.testing.assert_array_equal(a.residual, f32(0, 0, 2, 1, 0.5, 0, 0, 0))
    np.testing.assert_array_equal(weights(a), a.engine.anchor)  # working = anchor
    b.poll()  # B applies A's entry
    np.testing.assert_array_equal(weights(b), f32(4, -3, 0, 0, 0, 0, 0, 0))
    # an incoming entry between two syncs moves A's anchor and working weights, not its residual
    b.store.arrays["w"][7] += 8.0  # type: ignore[attr-defined]
    b.sync_now()
    a.poll()
    np.testing.assert_array_equal(a.engine.anchor, f32(4, -3, 0, 0, 0, 0, 0, 8))
    np.testing.assert_array_equal(weights(a), f32(4, -3, 0, 0, 0, 0, 0, 8))
    np.testing.assert_array_equal(a.residual, f32(0, 0, 2, 1, 0.5, 0, 0, 0))
    # more local training; the next generation folds the residual back first:
    # d = (working - anchor) + r = [0, 0, 2, 3, 0.5, -0.25, 0, 0]; top 2: indices 3 and 2
    wa[3] += 2.0
    wa[5] -= 0.25
    sent_before = a.own_values_sent
    a.sync_now()
    assert a.own_values_sent - sent_before == 2
    np.testing.assert_array_equal(a.engine.anchor, f32(4, -3, 2, 3, 0, 0, 0, 8))
    np.testing.assert_array_equal(a.residual, f32(0, 0, 0, 0, 0.5, -0.25, 0, 0))
    np.testing.assert_array_equal(weights(a), a.engine.anchor)
    b.poll()  # what went on the wire is what DF-GEN-1..5 give for the folded-back weights
    np.testing.assert_array_equal(b.engine.anchor, a.engine.anchor)


def test_averaging_drops_the_unsent_share_at_selected_indices() -> None:
    # REQ: DF-GEN-242
    a, b, hub = pair(average_over=2)
    watch = hub.transport(3)  # sees what A publishes
    wa = a.store.arrays["w"]  # type: ignore[attr-defined]
    wa[:] = f32(4, -3, 2, 1, 0.5, 0, 0, 0)
    a.sync_now()  # sends fl32(d / 2) at 0 and 1 (DF-GEN-70); the other half is dropped there
    (pkt,) = watch.drain(10)
    (entry,) = decode_packet(pkt).entries
    np.testing.assert_array_equal(entry.indices, np.asarray([0, 1], np.uint32))
    np.testing.assert_array_equal(entry.values, f32(2, -1.5))
    np.testing.assert_array_equal(a.engine.anchor, f32(2, -1.5, 0, 0, 0, 0, 0, 0))
    np.testing.assert_array_equal(a.residual, f32(0, 0, 2, 1, 0.5, 0, 0, 0))
    np.testing.assert_array_equal(weights(a), a.engine.anchor)
    b.poll()
    np.testing.assert_array_equal(b.engine.anchor, a.engine.anchor)


def test_running_statistics_keep_their_residual_in_the_working_weights() -> None:
    # REQ: DF-GEN-244
    hub = MemoryHub()
    store = StatsStore(
        {"bn.running_var": np.zeros(4, np.float32), "w": np.zeros(4, np.float32)},
        ("bn.running_var",),
    )
    a = Fabric.v1_0(store, hub.transport(1), cfg(), node_id=1, hold_residual=True)
    # canonical order: bn.running_var (0..3), w (4..7)
    store.arrays["bn.running_var"][:] = f32(1, 0.5, 0, 0)
    store.arrays["w"][:] = f32(4, 0.25, 0, -3)
    a.sync_now()  # top 2: 4 (4) and 7 (-3)
    np.testing.assert_array_equal(a.engine.anchor, f32(0, 0, 0, 0, 4, 0, 0, -3))
    np.testing.assert_array_equal(a.residual, f32(0, 0, 0, 0, 0, 0.25, 0, 0))
    # the running statistics' unsent values stay in the working weights, as without the option
    np.testing.assert_array_equal(weights(a), f32(1, 0.5, 0, 0, 4, 0, 0, -3))
    a.sync_now()  # 1 (bn) and 0.5 (bn) are the largest now; 0.25 is folded back and stays held
    np.testing.assert_array_equal(a.engine.anchor, f32(1, 0.5, 0, 0, 4, 0, 0, -3))
    np.testing.assert_array_equal(a.residual, f32(0, 0, 0, 0, 0, 0.25, 0, 0))
    np.testing.assert_array_equal(weights(a), a.engine.anchor)


def test_a_store_naming_an_unknown_tensor_is_refused_at_start() -> None:
    # REQ: DF-GEN-244
    store = StatsStore({"w": np.zeros(4, np.float32)}, ("bn.running_var",))
    with pytest.raises(StoreError, match="running_stats"):
        Fabric.v1_0(store, MemoryHub().transport(1), cfg(), node_id=1, hold_residual=True)
    Fabric.v1_0(store, MemoryHub().transport(1), cfg(), node_id=1)  # only read with the option


def test_option_off_keeps_the_residual_in_the_working_weights() -> None:
    hub = MemoryHub()
    a = Fabric.v1_0(NumpyStore({"w": np.zeros(8, np.float32)}), hub.transport(1), cfg(), node_id=1)
    a.store.arrays["w"][:] = f32(4, -3, 2, 1, 0.5, 0, 0, 0)  # type: ignore[attr-defined]
    a.sync_now()
    np.testing.assert_array_equal(a.residual, np.zeros(8, np.float32))
    np.testing.assert_array_equal(weights(a), f32(4, -3, 2, 1, 0.5, 0, 0, 0))  # DF-GEN-5


def test_a_non_finite_delta_leaves_the_residual_in_the_working_weights() -> None:
    # REQ: DF-GEN-241
    a, _b, _hub = pair()
    wa = a.store.arrays["w"]  # type: ignore[attr-defined]
    wa[:] = f32(4, -3, 2, 0, 0, 0, 0, 0)
    a.sync_now()
    wa[6] = np.inf
    with pytest.raises(NonFiniteDelta):
        a.sync_now()
    # the residual was folded back before the refused generation: nothing is lost or doubled
    np.testing.assert_array_equal(a.residual, np.zeros(8, np.float32))
    np.testing.assert_array_equal(weights(a), f32(4, -3, 2, 0, 0, 0, np.inf, 0))
    np.testing.assert_array_equal(a.engine.anchor, f32(4, -3, 0, 0, 0, 0, 0, 0))
