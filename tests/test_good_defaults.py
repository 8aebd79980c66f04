"""Good by default: `SyncConfig()` is the recommended profile, `Fabric` averages over its cluster,
holds its residual aside and repairs, `Fabric.finish` ends a run in agreement, and a peer with
another model is reported once at WARNING."""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from delta_fabric import Fabric, SyncConfig
from delta_fabric.compact import IndexEncoding
from delta_fabric.config import AUTO, RelayPolicy, outer_average
from delta_fabric.encodings import ValueEncoding
from delta_fabric.errors import ErrorCode
from delta_fabric.fabric import FinishTimeout
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub
from numpy.typing import NDArray

REPO = Path(__file__).resolve().parent.parent


def max_rel_diff(a: NDArray[np.float32], b: NDArray[np.float32]) -> float:
    """DF-NUM-1's measure: max |a - b| / max(1, |a|, |b|) over the elements."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    den = np.maximum(1.0, np.maximum(np.abs(a64), np.abs(b64)))
    return float(np.max(np.abs(a64 - b64) / den))


# --- the profile ------------------------------------------------------------------------------


def test_sync_config_is_the_recommended_profile() -> None:
    c = SyncConfig()
    assert (c.ratio, c.sync_interval, c.alpha) == (0.10, 20, 1.0)
    assert c.encoding is ValueEncoding.Q8
    assert c.index_encoding is IndexEncoding.PACKED
    assert c.relay_policy is RelayPolicy.NEEDED
    assert c.average_over is AUTO
    assert c.average_count == 1  # counted as a node alone until the node resolves it
    # forged claims are bounded (DF-RCV-52, DF-RCV-175); the incarnation grace stays off
    assert (c.max_seq_jump, c.max_incarnation_ahead, c.incarnation_grace) == (2**20, 60_000_000, 0)


def test_v1_0_is_the_spec_table_and_what_json_defaults_to() -> None:
    v = SyncConfig.v1_0()
    assert (v.ratio, v.sync_interval, v.encoding, v.index_encoding) == (
        0.05,
        10,
        ValueEncoding.F32,
        IndexEncoding.PLAIN,
    )
    assert (v.relay_policy, v.average_over) == (RelayPolicy.ALL, 1)
    assert (v.max_seq_jump, v.max_incarnation_ahead, v.incarnation_grace) == (0, 0, 0)
    assert SyncConfig.from_json({}) == v  # DF-PAR-11: an absent key takes the table's default
    assert SyncConfig.from_json({"ratio": 0.25}) == SyncConfig.v1_0(ratio=0.25)
    assert SyncConfig.v1_0(ratio=0.25).ratio == 0.25
    # the 1.0 form stays the 1.0 form: no 1.1 key at its default
    assert set(v.to_json()) == {
        "alpha",
        "ratio",
        "sync_interval",
        "relay_threshold",
        "hop_limit",
        "max_packet_size",
        "replay_window",
        "max_incarnations",
        "encoding",
        "include_buffers",
        "relay_policy",
    }


def test_the_recommended_profile_round_trips_through_json() -> None:
    c = SyncConfig()
    d = c.to_json()
    assert d["average_over"] == "auto"
    assert (d["encoding"], d["index_encoding"], d["relay_policy"]) == ("Q8", "PACKED", "NEEDED")
    assert SyncConfig.from_json(d) == c
    fixed = SyncConfig(average_over=4)
    assert SyncConfig.from_json(fixed.to_json()) == fixed
    with pytest.raises((TypeError, ValueError)):
        SyncConfig.from_json({"average_over": "AUTO"})
    with pytest.raises((TypeError, ValueError)):
        SyncConfig.from_json({"average_over": None})


def test_average_over_from_the_environment() -> None:
    assert SyncConfig.from_env({"DELTA_FABRIC_AVERAGE_OVER": "auto"}).average_over is AUTO
    assert SyncConfig.from_env({"DELTA_FABRIC_AVERAGE_OVER": "3"}).average_over == 3
    assert SyncConfig.from_env({}).average_over is AUTO
    from delta_fabric.env import EnvError

    with pytest.raises(EnvError, match="DELTA_FABRIC_AVERAGE_OVER"):
        SyncConfig.from_env({"DELTA_FABRIC_AVERAGE_OVER": "most"})


@pytest.mark.parametrize(
    ("nodes", "interval", "ratio", "m"),
    [(1, 20, 0.1, 1), (3, 20, 0.1, 3), (3, 40, 0.1, 3), (5, 80, 0.1, 10), (5, 80, 0.01, 8)],
)
def test_outer_average_is_the_df_gen_300_rule(
    nodes: int, interval: int, ratio: float, m: int
) -> None:
    # REQ: DF-GEN-300 (the spec's example: m = 10 at 10 %, 8 at 1 %, 5 nodes every 80 steps)
    assert outer_average(nodes, interval, ratio) == m
    from delta_fabric_demo.lockstep import default_average_over

    assert default_average_over(nodes, interval, ratio) == m  # the demo uses the same rule


# --- the node ---------------------------------------------------------------------------------


def _store(n: int = 64, seed: int = 0) -> NumpyStore:
    return NumpyStore({"w": np.random.default_rng(seed).standard_normal(n).astype(np.float32)})


def test_fabric_defaults_hold_the_residual_repair_and_average_over_the_cluster() -> None:
    hub = MemoryHub()
    fabs = [Fabric(_store(), hub.transport(i), node_id=i) for i in (1, 2, 3)]
    try:
        f = fabs[0]
        assert f.hold_residual and f.gaps is not None and f.resend is not None
        assert f.cluster_size() == 3
        f.sync_now()
        assert f.engine.config.average_over == 3  # DF-GEN-70 with C = 3, no setting given
        assert f.stats()["average_over"] == 3
        fabs[2].close(close_transport=True)
        f.sync_now()
        assert f.engine.config.average_over == 2  # the cluster shrank
    finally:
        for x in fabs:
            x.close(close_transport=True)


def test_the_defaults_bound_forged_seqs_and_incarnations() -> None:
    # REQ: DF-RCV-52, DF-RCV-175
    # A plain Fabric() drops a member's entry forged with seq 2**64 - 1 (which without the bound
    # would make every later real entry of that incarnation "too old") and an incarnation an hour
    # ahead of its clock (which would evict the real one); the member's next real entry is accepted.
    import time

    from delta_fabric.replay import Admission
    from delta_fabric.wire import Entry, Packet, encode_packet

    hub = MemoryHub()
    f = Fabric(_store(16), hub.transport(1), SyncConfig(sync_interval=1), node_id=1)
    forger = hub.transport(2)
    fp = f.engine.manifest.fingerprint
    now_us = time.time_ns() // 1000

    def pkt(inc: int, seq: int) -> bytes:
        e = Entry(2, inc, seq, 0, np.array([3], np.uint32), np.array([0.5], np.float32))
        return encode_packet(Packet(2, inc, fp, (e,)))

    try:
        for data in (pkt(now_us, 1), pkt(now_us, 2**64 - 1), pkt(now_us + 3_600_000_000, 1)):
            forger.publish(data)
            f.step()
        forger.publish(pkt(now_us, 2))
        f.step()
        drops = f.engine.counters.drops
        assert drops.get(Admission.SEQ_JUMP, 0) == 1
        assert drops.get(Admission.FUTURE_INCARNATION, 0) == 1
        assert f.engine.counters.entries_accepted == 2  # seq 1 and seq 2 of the real incarnation
    finally:
        f.close(close_transport=True)
        forger.close()


def test_an_unsigned_node_on_zenoh_says_so_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A node without keys on a network transport says once per process, at WARNING, that any
    # process on its network can publish under a member's id; the in-memory transport says nothing.
    import delta_fabric.fabric as fabric_module
    from delta_fabric.ports import free_port
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    monkeypatch.setattr(fabric_module, "_unsigned_said", False)
    hub = MemoryHub()
    with caplog.at_level(logging.WARNING, logger="delta_fabric"):
        Fabric(_store(8), hub.transport(1), node_id=1).close(close_transport=True)
        assert not [r for r in caplog.records if "unsigned" in r.getMessage()]
        for i in (5, 6):
            listen = [f"tcp/127.0.0.1:{free_port()}"]
            opts = ZenohOptions(node_id=i, namespace="dftest/unsigned", listen=listen)
            f = Fabric(_store(8), ZenohTransport(opts), node_id=i)
            f.close(close_transport=True)
    said = [r.getMessage() for r in caplog.records if "unsigned" in r.getMessage()]
    assert len(said) == 1 and "0000000000000005 runs unsigned" in said[0]
    assert "DELTA_FABRIC_KEYS" in said[0]


def test_world_size_is_a_floor_of_the_cluster_size() -> None:
    hub = MemoryHub()
    f = Fabric(_store(), hub.transport(1), node_id=1, world_size=4)
    try:
        assert f.cluster_size() == 4
        f.sync_now()
        assert f.engine.config.average_over == 4
        with pytest.raises(ValueError, match="world_size"):
            Fabric(_store(), hub.transport(2), node_id=2, world_size=0)
    finally:
        f.close(close_transport=True)


def test_a_fixed_average_over_is_kept() -> None:
    hub = MemoryHub()
    f = Fabric(_store(), hub.transport(1), SyncConfig(average_over=7), node_id=1)
    try:
        f.sync_now()
        assert f.engine.config.average_over == 7
    finally:
        f.close(close_transport=True)


# --- finish -----------------------------------------------------------------------------------


def _run_threads(targets: Sequence[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException] = []

    def wrap(i: int) -> None:
        try:
            results[i] = targets[i]()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(len(targets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a node did not finish"
    if errors:
        raise errors[0]
    return results


def _random_walk(fabric: Fabric, steps: int, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    w = fabric.store.arrays["w"]  # type: ignore[attr-defined]
    for _ in range(steps):
        w += rng.standard_normal(w.size).astype(np.float32) * np.float32(0.01)
        fabric.step()
    return fabric.finish(timeout=60.0)


def test_finish_makes_every_node_agree() -> None:
    hub = MemoryHub()
    fabs = [Fabric(_store(256), hub.transport(i), node_id=i) for i in (1, 2, 3)]
    try:
        # different lengths: a node that finishes first waits for the others' last entries
        shared = _run_threads(
            [
                lambda f=f, s=s: _random_walk(f, s, s)
                for f, s in zip(fabs, (55, 70, 91), strict=True)
            ]
        )
        for f, s in zip(fabs, shared, strict=True):
            np.testing.assert_array_equal(f.store.gather(), s)  # the store holds the shared model
            np.testing.assert_array_equal(f.engine.anchor, s)
            np.testing.assert_array_equal(f.residual, np.zeros_like(s))
        for s in shared[1:]:
            assert max_rel_diff(shared[0], s) <= 1e-5  # DF-NUM-1
        # each node applied every peer's last entry
        for f in fabs:
            for g in fabs:
                if g is not f:
                    assert f.origin_progress()[g.node_id] == (g.incarnation, g.engine.next_seq - 1)
    finally:
        for f in fabs:
            f.close(close_transport=True)


def test_finish_repairs_a_lost_last_packet() -> None:
    drop = {"armed": False, "dropped": 0}

    def intercept(src: int, dst: int, packet: bytes) -> Sequence[bytes]:
        if drop["armed"] and src == 2 and dst == 1 and not drop["dropped"]:
            drop["dropped"] += 1
            return []  # node 2's last packet never reaches node 1
        return [packet]

    hub = MemoryHub(intercept=intercept)
    # stepped in turn in one thread: no pacing (it would wait for the other node's round)
    a, b = (Fabric(_store(128), hub.transport(i), node_id=i, max_lead=None) for i in (1, 2))
    try:
        rng = np.random.default_rng(5)
        for _ in range(40):
            for f in (a, b):
                f.store.arrays["w"][:] += rng.standard_normal(128).astype(np.float32)  # type: ignore[attr-defined]
                f.step()
        b.store.arrays["w"][:] += 1.0  # type: ignore[attr-defined]  # progress for the last entry
        drop["armed"] = True
        shared = _run_threads([lambda: a.finish(timeout=30.0), lambda: b.finish(timeout=30.0)])
        assert drop["dropped"] == 1
        assert a.origin_progress()[2] == (b.incarnation, b.engine.next_seq - 1)
        assert max_rel_diff(shared[0], shared[1]) <= 1e-5
        assert a.repair_counters().requests_sent >= 1
        assert b.repair_counters().entries_resent >= 1
    finally:
        a.close(close_transport=True)
        b.close(close_transport=True)


def test_finish_times_out_naming_a_peer_still_training() -> None:
    hub = MemoryHub()
    a, b = (Fabric(_store(), hub.transport(i), node_id=i) for i in (1, 2))
    try:
        with pytest.raises(FinishTimeout, match="0000000000000002: still training") as err:
            a.finish(timeout=0.3)
        assert set(err.value.missing) == {2}
        assert isinstance(err.value, TimeoutError)
        a.poll()  # the node stays usable
    finally:
        a.close(close_transport=True)
        b.close(close_transport=True)


def test_finish_alone_returns_the_anchor() -> None:
    f = Fabric(_store(), MemoryHub().transport(1), node_id=1)
    try:
        f.store.arrays["w"][:3] += 1.0  # type: ignore[attr-defined]
        out = f.finish(timeout=1.0)
        np.testing.assert_array_equal(out, f.engine.anchor)
        with pytest.raises(ValueError, match="timeout"):
            f.finish(timeout=-1.0)
    finally:
        f.close(close_transport=True)


# --- loud misconfiguration --------------------------------------------------------------------


def test_a_peer_with_another_model_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    hub = MemoryHub()
    a = Fabric(_store(64), hub.transport(1), node_id=1)
    b = Fabric(_store(65), hub.transport(2), node_id=2)  # another model: another fingerprint
    caplog.set_level(logging.WARNING, logger="delta_fabric")
    try:
        for _ in range(3):
            a.sync_now()
            b.sync_now()
        a.poll()
        b.poll()
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        about_b = [m for m in warned if "node 0000000000000002 has another model" in m]
        about_a = [m for m in warned if "node 0000000000000001 has another model" in m]
        assert len(about_b) == 1 and len(about_a) == 1, warned
        assert "FINGERPRINT_MISMATCH" in about_b[0] and "N=64" in about_b[0]
        assert a.stats()["misconfigured_peers"] == {"0000000000000002": "FINGERPRINT_MISMATCH"}
        assert b.misconfigured_peers() == {1: ErrorCode.FINGERPRINT_MISMATCH}
    finally:
        a.close(close_transport=True)
        b.close(close_transport=True)


# --- the done-when run: a fresh script with the defaults --------------------------------------


def _example(name: str) -> ModuleType:
    path = REPO / "python" / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_label_skewed_digits_with_the_defaults_reach_the_demo_bar() -> None:
    """python/examples/torch_digits.py's loop (SyncConfig(), a single node's learning rate, no
    averaging setting, finish()) on 3 label-skewed nodes: every node's shared model >= 0.95 on
    all ten classes (the demo's bar), the nodes in agreement."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from delta_fabric.stores.torch import TorchStore

    ex = _example("torch_digits")
    torch.set_num_threads(1)
    hub = MemoryHub()
    models = [ex.make_model() for _ in range(3)]
    rounds = threading.Barrier(3, timeout=120)

    class Lockstep(Fabric):
        """Lockstep rounds, as the demo runs (`delta_fabric_demo.rounds`): no node starts its next
        local step before every node has published this one's packets, so the run does not depend
        on how the threads are scheduled (the memory hub delivers at publish)."""

        def step(self) -> int:
            n = super().step()
            rounds.wait()
            return n

    fabs = [
        Lockstep(TorchStore(m), hub.transport(r + 1), SyncConfig(), node_id=r + 1)
        for r, m in enumerate(models)
    ]
    try:
        accs = _run_threads(
            [lambda r=r: ex.train(fabs[r], models[r], r, 3, 1200) for r in range(3)]
        )
        shared = [f.active_vector() for f in fabs]
        assert min(accs) >= 0.95, accs
        for s in shared[1:]:
            assert max_rel_diff(shared[0], s) <= 1e-5  # DF-NUM-1
        # and alone, a node knows only its own classes
        alone = ex.make_model()
        solo = Fabric(TorchStore(alone), MemoryHub().transport(9), SyncConfig(), node_id=9)
        try:
            assert ex.train(solo, alone, 0, 3, 300) < 0.6
        finally:
            solo.close(close_transport=True)
    finally:
        for f in fabs:
            f.close(close_transport=True)


def test_v1_0_node_and_the_pacing_option() -> None:
    hub = MemoryHub()
    f = Fabric.v1_0(_store(), hub.transport(1), node_id=1)
    try:
        assert f.config == SyncConfig.v1_0()
        assert (f.hold_residual, f.gaps, f.resend, f.max_lead) == (False, None, None, None)
        g = Fabric(_store(), hub.transport(2), node_id=2)
        assert g.max_lead == 0 and g.config == SyncConfig()
        g.close(close_transport=True)
        for i, bad in enumerate((-1, True, 0.5)):
            with pytest.raises(ValueError, match="max_lead"):
                Fabric(_store(), hub.transport(10 + i), node_id=10 + i, max_lead=bad)  # type: ignore[arg-type]
    finally:
        f.close(close_transport=True)


def test_a_sync_step_waits_for_a_live_peer_round() -> None:
    """max_lead 0: a node that syncs waits (receiving) until every live peer has sent the same
    round; a peer that does not move for peer_deadline seconds no longer holds it back."""
    hub = MemoryHub()
    a = Fabric(_store(32, 1), hub.transport(1), SyncConfig(sync_interval=1), node_id=1)
    b = Fabric(
        _store(32, 2), hub.transport(2), SyncConfig(sync_interval=1), node_id=2, peer_deadline=0.2
    )
    try:
        released = threading.Event()

        def run_a() -> None:
            a.store.arrays["w"][:] += 1.0  # type: ignore[attr-defined]
            a.step()  # waits for b's first round
            released.set()

        t = threading.Thread(target=run_a)
        t.start()
        assert not released.wait(0.3)  # still waiting: b has sent nothing
        b.store.arrays["w"][:] -= 1.0  # type: ignore[attr-defined]
        b.step()  # b's round 1 (b waits for a, which has sent round 1 already)
        t.join(timeout=30)
        assert released.is_set()
        assert a.origin_progress()[2][1] == 1
        # a peer that stalls stops holding the others back after its deadline
        b.store.arrays["w"][:] += 1.0  # type: ignore[attr-defined]
        b.step()  # a has not moved: b waits at most peer_deadline (0.2 s) beyond a's last move
    finally:
        a.close(close_transport=True)
        b.close(close_transport=True)


def test_checkpoint_saves_the_shared_model_and_resumes(tmp_path: Path) -> None:
    from delta_fabric import checkpoint

    f = Fabric(_store(16, 3), MemoryHub().transport(1), node_id=1)
    try:
        shared = f.finish(timeout=1.0)
        path = checkpoint.save(tmp_path / "run.dfckpt", f.manifest, shared, step=f.steps)
    finally:
        f.close(close_transport=True)
    fresh = _store(16, 9)
    meta = checkpoint.load(path, fresh)
    assert meta["step"] == 0 and meta["format"] == checkpoint.FORMAT
    np.testing.assert_array_equal(fresh.gather(), shared)
    other = _store(17)
    before = other.gather()
    with pytest.raises(checkpoint.CheckpointError, match="another model"):
        checkpoint.load(path, other)
    np.testing.assert_array_equal(other.gather(), before)  # unchanged
    (tmp_path / "junk.dfckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="not a DeltaFabric checkpoint"):
        checkpoint.read(tmp_path / "junk.dfckpt")
    with pytest.raises(checkpoint.CheckpointError, match="non-finite"):
        checkpoint.save(tmp_path / "x", fresh.manifest, np.full(16, np.nan, np.float32))


def test_a_required_bootstrap_from_peers_of_another_model_fails_at_once() -> None:
    import time

    from delta_fabric.errors import ConfigurationError
    from delta_fabric.fabric import ModelMismatch, SnapshotUnavailable

    hub = MemoryHub()
    a = Fabric(_store(8), hub.transport(1), node_id=1)
    try:
        t0 = time.monotonic()
        with pytest.raises(ModelMismatch, match="another model's snapshot") as err:
            Fabric(_store(9), hub.transport(2), node_id=2, bootstrap=True, bootstrap_timeout=60)
        assert time.monotonic() - t0 < 30  # not the 60 s timeout
        assert isinstance(err.value, ConfigurationError)  # one line under delta-fabric run
        assert isinstance(err.value, SnapshotUnavailable)
        assert "\n" not in str(err.value) and "N=9" in str(err.value)
    finally:
        a.close(close_transport=True)
