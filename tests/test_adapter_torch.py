"""`TorchStore` driven by `Fabric` over the in-process memory transport."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from delta_fabric.config import SyncConfig
from delta_fabric.fabric import Fabric, SnapshotUnavailable
from delta_fabric.manifest import Manifest
from delta_fabric.replay import Admission
from delta_fabric.stores.torch import TorchStore, module_manifest, module_tensors
from delta_fabric.transports.memory import MemoryHub, MemoryTransport
from delta_fabric.wire import decode_packet
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    """The demo's CNN layout (small enough for unit tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(64, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def flat(fabric: Fabric) -> np.ndarray:
    return fabric.active_vector()


CFG = SyncConfig.v1_0(ratio=0.1, sync_interval=5)


def test_manifest_names_and_order() -> None:
    # REQ: DF-MAN-2
    # REQ: DF-MAN-4
    net = make_net()
    m = module_manifest(net, include_buffers=False)
    assert m.names == (
        "bn1.bias",
        "bn1.weight",
        "conv1.bias",
        "conv1.weight",
        "fc1.bias",
        "fc1.weight",
        "fc2.bias",
        "fc2.weight",
    )
    assert m.num_params == sum(p.numel() for p in net.parameters())
    mb = module_manifest(net, include_buffers=True)
    assert "bn1.running_mean" in mb and "bn1.running_var" in mb
    assert "bn1.num_batches_tracked" not in mb  # integer buffers never
    assert list(mb.names) == sorted(mb.names)
    assert set(mb.names) <= set(net.state_dict())
    expected = Manifest.from_named_shapes(
        {k: tuple(v.shape) for k, v in net.state_dict().items() if k in mb}
    )
    assert mb.fingerprint == expected.fingerprint
    assert mb.spec("fc1.weight").shape == (8, 64)  # PyTorch [out, in]


def test_fabric_over_torch_store_with_buffers_uses_the_flat_layout() -> None:
    # REQ: DF-MAN-3
    hub = MemoryHub()
    net = make_net()
    fab = Fabric.v1_0(
        TorchStore(net, include_buffers=True),
        hub.transport(1),
        SyncConfig.v1_0(include_buffers=True),
        node_id=1,
        incarnation=1,
    )
    assert "bn1.running_var" in fab.manifest
    v = flat(fab)
    sd = net.state_dict()
    for name in fab.manifest.names:
        off = fab.manifest.offset(name)
        n = sd[name].numel()
        np.testing.assert_array_equal(v[off : off + n], sd[name].reshape(-1).numpy())
    assert np.array_equal(fab.engine.anchor, v)  # the anchor starts as the module's weights
    store = fab.store
    assert isinstance(store, TorchStore) and store.module is net
    sd_all = dict(net.named_parameters()) | dict(net.named_buffers())
    assert all(t is sd_all[n] for n, t in store.tensors.items())  # the live objects
    assert store.gathers == 2  # the initial anchor and flat()


def test_tied_weights_rejected() -> None:
    net = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False))
    net[1].weight = net[0].weight
    # state_dict holds both names for one tensor
    with pytest.raises(ValueError, match="tied"):
        module_tensors(net, False)


def test_sparse_apply_in_place_touches_only_received_elements() -> None:
    # REQ: DF-RCV-7
    hub = MemoryHub()
    a_net, b_net = make_net(), make_net()
    a = Fabric.v1_0(TorchStore(a_net), hub.transport(1), CFG, node_id=1, incarnation=1)
    b_store = TorchStore(b_net)
    b = Fabric.v1_0(b_store, hub.transport(2), CFG, node_id=2, incarnation=1)
    ptrs = {n: t.data_ptr() for n, t in b_store.tensors.items()}
    objs = {n: id(t) for n, t in b_store.tensors.items()}
    before = flat(b)
    with torch.no_grad():
        a_net.fc1.weight[3, 7] += 0.5
        a_net.conv1.weight[0, 0, 1, 1] -= 0.25
        a_net.bn1.bias[2] += 1.0
    assert a.sync_now() == 1
    own = a.stats()["own_values_sent"]
    assert own == 3  # only non-zero deltas are sent (k = ceil(0.1 N) is larger)
    b.step()
    after = flat(b)
    changed = np.flatnonzero(after != before)
    m = b.manifest
    want = sorted(
        [
            m.offset("fc1.weight") + 3 * 64 + 7,
            m.offset("conv1.weight") + 4,
            m.offset("bn1.bias") + 2,
        ]
    )
    assert changed.tolist() == want
    np.testing.assert_array_equal(after, flat(a))
    np.testing.assert_array_equal(b.engine.anchor, after)  # anchor and active moved together
    assert {n: t.data_ptr() for n, t in b_store.tensors.items()} == ptrs  # in place, same storage
    assert {n: id(t) for n, t in b_store.tensors.items()} == objs
    assert b.stats()["values_received_applied"] == 3


def test_hops_and_origin_progress_always_tracked_without_a_second_decode() -> None:
    """The hop histogram and origin progress come from the engine's accepted headers: no packet is
    decoded outside the engine."""
    import delta_fabric.fabric as fabric_mod

    assert not hasattr(fabric_mod, "decode_packet")
    hub = MemoryHub()
    a_net = make_net()
    a = Fabric.v1_0(TorchStore(a_net), hub.transport(1), CFG, node_id=1, incarnation=1)
    b = Fabric.v1_0(TorchStore(make_net()), hub.transport(2), CFG, node_id=2, incarnation=1)
    with torch.no_grad():
        a_net.fc2.bias.add_(1.0)
    a.sync_now()
    b.step()
    assert b.stats()["receive"]["entries_accepted"] == 1
    assert b.stats()["accepted_by_hops"] == {"0": 1}
    assert b.origin_progress() == {1: (1, 1)}


def test_idle_step_is_constant_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step without sync and without traffic gathers nothing, receives nothing, copies nothing."""
    hub = MemoryHub()
    net = make_net()
    fab = Fabric.v1_0(
        TorchStore(net),
        hub.transport(1),
        SyncConfig.v1_0(sync_interval=10),
        node_id=1,
        incarnation=1,
    )
    hub.transport(2)  # a silent peer

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("O(N) work on an idle step")

    monkeypatch.setattr(fab.store, "gather", boom)
    monkeypatch.setattr(fab.engine, "receive", boom)
    monkeypatch.setattr(fab.engine, "generate", boom)
    monkeypatch.setattr(torch, "cat", boom)
    monkeypatch.setattr(net, "state_dict", boom)
    for _ in range(9):
        assert fab.step() == 0
    assert fab.steps == 9
    assert fab.stats()["syncs"] == 0


def test_sync_step_gathers_once_and_publishes() -> None:
    hub = MemoryHub()
    net = make_net()
    store = TorchStore(net)
    fab = Fabric.v1_0(
        store,
        hub.transport(1),
        SyncConfig.v1_0(sync_interval=3, ratio=0.05),
        node_id=1,
        incarnation=1,
    )
    peer = hub.transport(2)
    g0 = store.gathers  # the initial anchor
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4, 1, 8, 8)
    for step in range(1, 7):
        opt.zero_grad()
        net(x).square().mean().backward()
        opt.step()
        published = fab.step()
        assert published == (1 if step % 3 == 0 else 0)
    assert store.gathers - g0 == 2
    st = fab.stats()
    pkts = peer.drain()
    assert st["packets_sent"] == len(pkts) == 2
    assert st["bytes_sent"] == sum(len(p) for p in pkts) == fab.transport.stats.published_bytes
    k = SyncConfig.v1_0(ratio=0.05).num_selected(fab.num_params)
    assert st["own_values_sent"] == 2 * k


def hub_last(hub: MemoryHub, node: int) -> bytes:
    """The last packet ``node`` published, read back through a tap transport's queue."""
    return TAPS[node].drain()[-1]


TAPS: dict[int, MemoryTransport] = {}


def test_ring_relay_alpha_one_every_node_applies_each_delta_once() -> None:
    # REQ: DF-RCV-2
    # REQ: DF-RLY-4
    hub = MemoryHub()
    ids = [1, 2, 3, 4]
    ring = {i: [ids[(k - 1) % 4], ids[(k + 1) % 4]] for k, i in enumerate(ids)}
    nets = {i: make_net() for i in ids}
    TAPS.clear()
    TAPS.update({i: hub.transport(100 + i, neighbours=[i]) for i in ids})
    fabs = {
        i: Fabric.v1_0(
            TorchStore(nets[i]),
            hub.transport(i, neighbours=ring[i]),
            CFG,
            node_id=i,
            incarnation=7,
        )
        for i in ids
    }
    init = flat(fabs[1])
    gen = torch.Generator().manual_seed(1)
    total = np.zeros_like(init)
    for i in ids:
        with torch.no_grad():
            for p in nets[i].parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.01)
        fabs[i].sync_now()
        own = [e for e in decode_packet(hub_last(hub, i)).entries if e.origin == i]
        assert len(own) == 1
        total[own[0].indices] += own[
            0
        ].values  # what node i sent (its anchor took it: error feedback)
    for _ in range(6):
        for i in ids:
            fabs[i].poll()
    for i in ids:
        # anchor = init + every origin's sent delta once (own via error feedback, others received)
        np.testing.assert_allclose(fabs[i].engine.anchor, init + total, rtol=0, atol=1e-6)
        st = fabs[i].stats()
        assert st["receive"]["drops"][Admission.OWN_ORIGIN.value] > 0
        assert int(st["accepted_by_hops"].get("1", 0)) >= 1  # the far node arrives via one relay


def test_bootstrap_join_loads_snapshot_and_new_incarnation_is_accepted() -> None:
    # REQ: DF-RCV-4
    hub = MemoryHub()
    a_net = make_net(0)
    a = Fabric.v1_0(TorchStore(a_net), hub.transport(1), CFG, node_id=1, incarnation=5)
    with torch.no_grad():
        for p in a_net.parameters():
            p.mul_(1.5)
    a.sync_now()
    b_net = make_net(123)  # different weights: the snapshot must replace them
    b = Fabric.join(TorchStore(b_net), hub.transport(2), CFG, node_id=2, timeout=5.0)
    assert b.bootstrapped and b.stats()["bootstrapped"]
    np.testing.assert_array_equal(flat(b), a.engine.anchor)
    np.testing.assert_array_equal(b.engine.anchor, a.engine.anchor)
    assert b.incarnation > 5
    a.poll()
    with torch.no_grad():
        b_net.fc2.bias.add_(1.0)
    b.sync_now()
    a.step()
    assert a.stats()["receive"]["entries_accepted"] == 1
    assert a.stats()["values_received_applied"] == 3


def test_bootstrap_required_without_peer_fails_and_auto_falls_back() -> None:
    hub = MemoryHub()
    with pytest.raises(SnapshotUnavailable):
        Fabric.v1_0(
            TorchStore(make_net()),
            hub.transport(1),
            CFG,
            node_id=1,
            bootstrap=True,
            bootstrap_timeout=0.2,
        )
    net = make_net(3)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    fab = Fabric.v1_0(
        TorchStore(net), hub.transport(2), CFG, node_id=2, bootstrap="auto", bootstrap_timeout=0.2
    )
    assert not fab.bootstrapped
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k])


def test_restart_same_node_id_deltas_accepted_at_once() -> None:
    # REQ: DF-RCV-4
    hub = MemoryHub()
    a = Fabric.v1_0(TorchStore(make_net()), hub.transport(1), CFG, node_id=1, incarnation=10)
    b_net = make_net()
    tb = hub.transport(2)
    b = Fabric.v1_0(TorchStore(b_net), tb, CFG, node_id=2, incarnation=10)
    for _ in range(3):  # b sends seqs 1..3
        with torch.no_grad():
            b_net.fc2.bias.add_(0.1)
        b.sync_now()
        a.step()
    tb.close()
    b2_net = make_net(9)
    b2 = Fabric.join(
        TorchStore(b2_net), hub.transport(2), CFG, node_id=2, timeout=5.0
    )  # seq restarts at 1
    with torch.no_grad():
        b2_net.fc2.weight.add_(0.2)
    b2.sync_now()
    before = a.stats()["receive"]["entries_accepted"]
    a.step()
    assert a.stats()["receive"]["entries_accepted"] == before + 1


def test_non_contiguous_parameter_is_updated_correctly() -> None:
    hub = MemoryHub()
    a_net, b_net = make_net(), make_net()
    b_net.fc1.weight = nn.Parameter(
        b_net.fc1.weight.detach().t().contiguous().t()
    )  # strides (1, 8)
    assert not b_net.fc1.weight.is_contiguous()
    a = Fabric.v1_0(TorchStore(a_net), hub.transport(1), CFG, node_id=1, incarnation=1)
    b = Fabric.v1_0(TorchStore(b_net), hub.transport(2), CFG, node_id=2, incarnation=1)
    with torch.no_grad():
        a_net.fc1.weight[5, 33] += 3.0
    a.sync_now()
    b.step()
    assert float(b_net.fc1.weight[5, 33].detach()) == float(a_net.fc1.weight[5, 33].detach())
    np.testing.assert_array_equal(flat(a), flat(b))


def test_double_precision_module() -> None:
    hub = MemoryHub()
    a_net, b_net = make_net().double(), make_net().double()
    a = Fabric.v1_0(TorchStore(a_net), hub.transport(1), CFG, node_id=1, incarnation=1)
    b = Fabric.v1_0(TorchStore(b_net), hub.transport(2), CFG, node_id=2, incarnation=1)
    with torch.no_grad():
        a_net.fc1.bias[0] += 0.5
    a.sync_now()
    b.step()
    assert b_net.fc1.bias.dtype == torch.float64
    assert float(
        b_net.fc1.bias[0].detach() - make_net().double().fc1.bias[0].detach()
    ) == pytest.approx(0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_module_same_code_path() -> None:
    hub = MemoryHub()
    dev = torch.device("cuda")
    a_net, b_net = make_net().to(dev), make_net().to(dev)
    a = Fabric.v1_0(TorchStore(a_net), hub.transport(1), CFG, node_id=1, incarnation=1)
    b = Fabric.v1_0(TorchStore(b_net), hub.transport(2), CFG, node_id=2, incarnation=1)
    ptr = b_net.fc1.weight.data_ptr()
    before = flat(b)
    with torch.no_grad():
        a_net.fc1.weight[1, 2] += 0.75
    a.sync_now()
    b.step()
    after = flat(b)
    assert np.flatnonzero(after != before).tolist() == [b.manifest.offset("fc1.weight") + 64 + 2]
    assert b_net.fc1.weight.is_cuda and b_net.fc1.weight.data_ptr() == ptr
    np.testing.assert_array_equal(after, flat(a))


def test_torch_store_clamps_a_running_variance_at_zero_after_apply() -> None:
    # REQ: DF-RCV-245
    net = make_net(4)
    store = TorchStore(net, include_buffers=True)
    assert store.running_stats() == ("bn1.running_mean", "bn1.running_var")
    var = store.manifest.offset("bn1.running_var")
    mean = store.manifest.offset("bn1.running_mean")
    before = store.gather()
    idx = np.asarray([mean, mean + 1, var, var + 1], dtype=np.uint32)
    store.apply(idx, np.asarray([-5.0, 2.0, -5.0, 0.5], dtype=np.float32))
    got = store.gather()
    assert got[mean] == np.float32(before[mean] - np.float32(5.0))  # a mean may be negative
    assert got[var] == 0.0  # clamped: 1 - 5 would be a negative variance
    assert got[var + 1] == np.float32(before[var + 1] + np.float32(0.5))  # unchanged rule
    other = np.ones(got.size, dtype=bool)
    other[idx] = False
    np.testing.assert_array_equal(got[other], before[other])
    raw = TorchStore(make_net(4), include_buffers=True, clamp_running_var=False)
    raw.apply(idx, np.asarray([-5.0, 2.0, -5.0, 0.5], dtype=np.float32))
    assert raw.gather()[var] == np.float32(1.0 - 5.0)  # DF-RCV-7 exactly when off


def test_torch_store_sparse_gather_and_apply_match_the_dense_vector() -> None:
    # REQ: DF-RCV-7
    from delta_fabric.store import StoreError, WeightStore

    net = make_net(4)
    net.fc1.weight.data = net.fc1.weight.data.t().contiguous().t()  # non-contiguous
    net.fc2.to(torch.bfloat16)
    store = TorchStore(net, include_buffers=True, clamp_running_var=False)
    assert isinstance(store, WeightStore)
    dense = store.gather()
    n = store.manifest.num_params
    idx = np.unique(np.random.default_rng(0).integers(0, n, 300)).astype(np.uint32)
    np.testing.assert_array_equal(store.gather(idx), dense[idx])
    vals = np.random.default_rng(1).standard_normal(idx.size).astype(np.float32)
    store.apply(idx, vals)
    want = dense.copy()
    want[idx] = want[idx] + vals
    got = store.gather()
    bf16 = np.zeros(n, dtype=bool)
    for name in ("fc2.bias", "fc2.weight"):
        off = store.manifest.offset(name)
        bf16[off : off + store.manifest.spec(name).numel] = True
    np.testing.assert_array_equal(got[~bf16], want[~bf16])  # f32: exactly fl32(active + agg)
    ref = torch.from_numpy(want[bf16]).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(got[bf16], ref)  # bf16: added in f32, rounded back
    with pytest.raises(StoreError):
        store.apply(idx[::-1].copy(), vals)
    np.testing.assert_array_equal(store.gather(), got)
    fab = Fabric.v1_0(store, MemoryHub().transport(1), CFG, node_id=1)
    assert fab.framework == "torch" and fab.num_params == n


def test_torch_store_sparse_gather_reads_the_live_tensors_bit_for_bit() -> None:
    # REQ: DF-RCV-50
    # gather(indices) reads contiguous f32 CPU tensors through NumPy views: the values must be the
    # elements' exact bits (NaN payloads, -0, subnormals), the same as index_select, and must follow
    # a tensor whose storage was replaced (p.data = ...) after the store was made.
    net = make_net(3)
    store = TorchStore(net)
    n = store.manifest.num_params
    with torch.no_grad():
        w = net.fc1.weight
        w.view(-1)[:4] = torch.tensor([-0.0, float("nan"), 1e-45, float("-inf")])
        bits = w.view(-1).view(torch.int32)
        bits[4] = 0x7FC00123  # a NaN with a payload
    idx = np.unique(np.random.default_rng(2).integers(0, n, 200))
    off = store.manifest.offset("fc1.weight")
    idx = np.union1d(idx, np.arange(off, off + 5)).astype(np.uint32)

    def reference() -> np.ndarray:  # index_select on every tensor, as before the NumPy path
        dense = torch.cat([t.detach().reshape(-1) for t in store.tensors.values()])
        return dense.index_select(0, torch.from_numpy(idx.astype(np.int64))).numpy()

    got = store.gather(idx)
    assert got.dtype == np.float32 and got.flags.writeable
    np.testing.assert_array_equal(got.view(np.uint32), reference().view(np.uint32))
    assert int(got[np.searchsorted(idx, off + 4)].view(np.uint32)) == 0x7FC00123
    got[:] = 7.0  # a fresh array: writing to it changes no weight
    np.testing.assert_array_equal(store.gather(idx).view(np.uint32), reference().view(np.uint32))
    net.fc1.weight.data = torch.full_like(net.fc1.weight.data, 2.5)  # new storage
    after = store.gather(idx)
    np.testing.assert_array_equal(after.view(np.uint32), reference().view(np.uint32))
    assert bool((after[np.searchsorted(idx, off) : np.searchsorted(idx, off + 5)] == 2.5).all())


def test_torch_store_gather_parts_are_the_canonical_vector_without_a_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # REQ: DF-GEN-1
    # The OPTIONAL fast path of the store seam: one flat f32 array per tensor in canonical order,
    # views of the contiguous f32 CPU tensors (no torch.cat of the model), copies of the others;
    # the Fabric generates from them exactly what it generates from gather().
    net = make_net(4)
    net.fc2.to(torch.bfloat16)
    store = TorchStore(net, include_buffers=True)
    g0 = store.gathers
    parts = store.gather_parts()
    assert store.gathers == g0 + 1
    assert [p.size for p in parts] == [s.numel for s in store.manifest.tensors]
    np.testing.assert_array_equal(np.concatenate(parts), store.gather())
    for name, part in zip(store.manifest.names, parts, strict=True):
        t = store.tensors[name]
        assert part.dtype == np.float32 and part.ndim == 1
        shared = np.shares_memory(part, t.detach().numpy()) if t.dtype == torch.float32 else False
        assert shared == (t.dtype == torch.float32 and t.is_contiguous())
    hubs = [MemoryHub(), MemoryHub()]
    nets = [make_net(4), make_net(4)]
    fabs = [
        Fabric.v1_0(TorchStore(n), h.transport(1), CFG, node_id=1, incarnation=1)
        for n, h in zip(nets, hubs, strict=True)
    ]
    taps = [h.transport(2) for h in hubs]
    monkeypatch.setattr(fabs[1].store, "gather_parts", None)  # a store without the fast path
    for n in nets:
        with torch.no_grad():
            n.fc1.weight.add_(torch.linspace(-1.0, 1.0, 512).reshape(8, 64))
    for f in fabs:
        f.sync_now()
    assert taps[0].drain() == taps[1].drain() != []
    np.testing.assert_array_equal(fabs[0].engine.anchor, fabs[1].engine.anchor)
