"""Adapter-level requirements: generation cadence (DF-GEN-10), PyTorch buffers and unmappable models
(DF-MAN-11, DF-MAN-12), and the publish/receive path under congestion (DF-SEC-5)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from delta_fabric.config import MIN_MAX_PACKET_SIZE, SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.fabric import Fabric
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.stores.torch import TorchStore, module_tensors
from delta_fabric.transports.base import PacketQueue, TransportError
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import Entry, decode_packet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _count_generate(engine: Engine, steps: Callable[[], int]) -> list[int]:
    """Wrap ``engine.generate``; returns the list that records the step number of every call."""
    calls: list[int] = []
    original = engine.generate

    def counted(active: Any, *, fast: bool = False) -> list[Entry]:
        calls.append(steps())
        return original(active, fast=fast)

    engine.generate = counted  # type: ignore[method-assign]
    return calls


# -------------------------------------------------------------------------------------------------
# DF-GEN-10


@SETTINGS
@given(st.integers(1, 6), st.integers(0, 25))
def test_numpy_adapter_generates_once_per_sync_interval(interval: int, steps: int) -> None:
    hub = MemoryHub()
    w = np.zeros(10, dtype=np.float32)
    fab = Fabric.v1_0(
        NumpyStore({"w": w}),
        hub.transport(1),
        SyncConfig.v1_0(sync_interval=interval),
        node_id=1,
        incarnation=1,
    )
    calls = _count_generate(fab.engine, lambda: fab.steps)
    for s in range(1, steps + 1):
        w[s % 10] += np.float32(s)  # one local optimizer update, then the fabric step
        fab.step()
    # REQ: DF-GEN-10 -- exactly once after every sync_interval-th step, and at no other step
    assert calls == [s for s in range(1, steps + 1) if s % interval == 0]
    assert fab.syncs == len(calls)


def test_generation_never_interleaves_with_receive_and_is_published_before_the_next() -> None:
    hub = MemoryHub()
    a_w = np.zeros(8, dtype=np.float32)
    b_w = np.zeros(8, dtype=np.float32)
    cfg = SyncConfig.v1_0(sync_interval=2, ratio=0.25)
    a = Fabric.v1_0(NumpyStore({"w": a_w}), hub.transport(1), cfg, node_id=1, incarnation=1)
    b = Fabric.v1_0(NumpyStore({"w": b_w}), hub.transport(2), cfg, node_id=2, incarnation=1)
    order: list[str] = []
    for name, meth in (("receive", "receive"), ("generate", "generate")):
        orig = getattr(a.engine, meth)

        def wrapped(*args: Any, _o: Any = orig, _n: str = name, **kw: Any) -> Any:
            order.append(_n)
            return _o(*args, **kw)

        setattr(a.engine, meth, wrapped)
    for s in range(1, 7):
        b_w[s] += np.float32(1.0)
        b.step()  # b generates on even steps: its packets reach a before a's step
        a_w[s] += np.float32(2.0)
        a.step()
        if s % 2 == 0:
            # REQ: DF-GEN-10 -- a receive step, then the generation on the buffers it left
            assert order[-2:] == ["receive", "generate"]
            # REQ: DF-GEN-10 -- own entries are published before a's next receive step
            got = [decode_packet(p, cfg.max_packet_size) for p in hub_pending(b)]
            assert any(e.origin == 1 and e.seq == s // 2 for p in got for e in p.entries)
    assert order.count("generate") == 3


def hub_pending(fab: Fabric) -> list[bytes]:
    """Packets queued at ``fab`` right now (consumed: fed to its engine like a step would)."""
    pkts = fab.transport.drain()
    fab.engine.receive(pkts)
    return pkts


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.bn = nn.BatchNorm1d(2)


def test_torch_adapter_generates_once_per_sync_interval() -> None:
    torch.manual_seed(0)
    model = Small()
    hub = MemoryHub()
    store = TorchStore(model)
    fab = Fabric.v1_0(
        store, hub.transport(1), SyncConfig.v1_0(sync_interval=4), node_id=1, incarnation=1
    )
    calls = _count_generate(fab.engine, lambda: fab.steps)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(17):
        loss = model.bn(model.fc(torch.randn(4, 3))).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        fab.step()
    # REQ: DF-GEN-10
    assert calls == [4, 8, 12, 16]
    assert store.gathers == 1 + 4  # the initial anchor, then one gather per generation only


# -------------------------------------------------------------------------------------------------
# DF-MAN-11


def test_num_batches_tracked_is_never_written() -> None:
    torch.manual_seed(1)
    src, dst = Small(), Small()
    dst.load_state_dict(src.state_dict())
    src.get_buffer("bn.num_batches_tracked").fill_(11)
    dst.get_buffer("bn.num_batches_tracked").fill_(5)
    nbt = dst.get_buffer("bn.num_batches_tracked")
    hub = MemoryHub()
    cfg = SyncConfig.v1_0(sync_interval=1, ratio=1.0, include_buffers=True)
    a = Fabric.v1_0(TorchStore(src, True), hub.transport(1), cfg, node_id=1, incarnation=1)
    b = Fabric.v1_0(TorchStore(dst, True), hub.transport(2), cfg, node_id=2, incarnation=1)
    assert "bn.num_batches_tracked" not in a.manifest.names
    assert "bn.running_mean" in a.manifest.names
    with torch.no_grad():
        src.fc.weight.add_(1.0)
        src.get_buffer("bn.running_mean").add_(0.5)
    a.step()
    b.step()
    # weights and floating buffers arrived ...
    assert torch.equal(dst.fc.weight, src.fc.weight)
    assert torch.equal(dst.get_buffer("bn.running_mean"), src.get_buffer("bn.running_mean"))
    # REQ: DF-MAN-11 -- ... and num_batches_tracked is untouched (same tensor, same value)
    assert dst.get_buffer("bn.num_batches_tracked") is nbt
    assert int(nbt) == 5 and nbt.dtype == torch.int64
    # bootstrap from a snapshot: a joiner's counter is untouched too
    joiner = Small()
    joiner.get_buffer("bn.num_batches_tracked").fill_(7)
    c = Fabric.join(
        TorchStore(joiner, True), hub.transport(3), cfg, node_id=3, incarnation=1, timeout=5.0
    )
    assert c.bootstrapped
    assert torch.equal(joiner.get_buffer("bn.running_mean"), src.get_buffer("bn.running_mean"))
    # REQ: DF-MAN-11
    assert int(joiner.get_buffer("bn.num_batches_tracked")) == 7
    assert int(src.get_buffer("bn.num_batches_tracked")) == 11


# -------------------------------------------------------------------------------------------------
# DF-MAN-12


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.dec = nn.Linear(4, 4)
        self.dec.weight = self.enc.weight


class WithParam(nn.Module):
    def __init__(self, p: nn.Parameter) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.extra = p


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tied(),
        lambda: WithParam(nn.Parameter(torch.zeros(3, dtype=torch.complex64))),
        lambda: WithParam(nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)),
    ],
    ids=["tied", "complex", "integer"],
)
def test_torch_adapter_refuses_unmappable_models(make: Callable[[], nn.Module]) -> None:
    model = make()
    hub = MemoryHub()
    # REQ: DF-MAN-12 -- a configuration error, rather than a guessed mapping
    with pytest.raises(ValueError):
        module_tensors(model, include_buffers=False)
    with pytest.raises(ValueError):
        Fabric.v1_0(
            TorchStore(model), hub.transport(1), SyncConfig.v1_0(), node_id=1, incarnation=1
        )


def test_numpy_adapter_refuses_non_float_arrays() -> None:
    hub = MemoryHub()
    for i, bad in enumerate((np.zeros(3, dtype=np.int32), np.zeros(3, dtype=np.complex64))):
        # REQ: DF-MAN-12
        with pytest.raises(TypeError):
            Fabric.v1_0(
                NumpyStore({"w": bad}), hub.transport(i + 1), SyncConfig.v1_0(), node_id=i + 1
            )


# -------------------------------------------------------------------------------------------------
# DF-SEC-5


def test_receive_queue_never_blocks_the_network_callback() -> None:
    q = PacketQueue(capacity=16, max_bytes=1 << 20)
    pushed = 20_000
    done = threading.Event()

    def callback_thread() -> None:  # the transport's receive callback; nobody drains
        for i in range(pushed):
            q.push(i.to_bytes(4, "little"))
        done.set()

    t0 = time.monotonic()
    threading.Thread(target=callback_thread, daemon=True).start()
    # REQ: DF-SEC-5 -- a stalled consumer never blocks the callback: it drops the oldest, counted
    assert done.wait(20.0)
    assert time.monotonic() - t0 < 20.0
    assert len(q) == 16 and q.dropped_packets == pushed - 16
    assert q.dropped_bytes == 4 * (pushed - 16)
    kept = [int.from_bytes(p, "little") for p in q.drain()]
    assert kept == list(range(pushed - 16, pushed))  # the newest traffic is kept


def test_slow_node_drops_are_counted_in_transport_stats() -> None:
    hub = MemoryHub()
    sender = hub.transport(1)
    slow = hub.transport(2, queue_capacity=4)
    for i in range(10):
        sender.publish(bytes([i]) * 8)
    # REQ: DF-SEC-5 -- counted, reported in the stats
    assert slow.stats.dropped_packets == 6
    assert [p[0] for p in slow.drain()] == [6, 7, 8, 9]


def test_every_generated_entry_is_published_or_the_error_surfaces() -> None:
    hub = MemoryHub()
    w = np.zeros(300, dtype=np.float32)
    cfg = SyncConfig.v1_0(sync_interval=1, ratio=0.5, max_packet_size=MIN_MAX_PACKET_SIZE + 400)
    fab = Fabric.v1_0(NumpyStore({"w": w}), hub.transport(1), cfg, node_id=1, incarnation=1)
    peer = hub.transport(2)
    generated: list[Entry] = []
    orig = fab.engine.generate

    def record(active: Any, *, fast: bool = False) -> list[Entry]:
        out = orig(active, fast=fast)
        generated.extend(out)
        return out

    fab.engine.generate = record  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    for _ in range(5):
        w += rng.standard_normal(300).astype(np.float32)
        fab.step()
    published = {
        (e.origin, e.incarnation, e.seq)
        for p in peer.drain()
        for e in decode_packet(p, cfg.max_packet_size).entries
    }
    assert len(generated) > 5  # entries were split over several packets
    # REQ: DF-SEC-5 -- no generated entry is silently dropped (DF-GEN-12)
    assert {(e.origin, e.incarnation, e.seq) for e in generated} == published

    def failing_publish(packet: bytes) -> None:
        raise TransportError("publish timed out")

    fab.transport.publish = failing_publish  # type: ignore[method-assign]
    w += np.float32(1.0)
    # REQ: DF-SEC-5 -- a publish that cannot complete is reported to the caller, not swallowed
    with pytest.raises(TransportError):
        fab.step()
