"""The JAX store (delta_fabric.stores.jax) and the JAX digits CNN against PyTorch's.

Checks the JAX/Flax rows of spec section 4.5 (DF-MAN-6): the manifest of the JAX digits CNN equals the
PyTorch one, Conv HWIO and Dense [in, out] really are the transposes, the forward pass and one SGD step
(BatchNorm statistics included) agree with PyTorch within 1e-5, the sparse apply is bit-exact
(DF-RCV-7), and leaves that cannot be mapped are refused (DF-MAN-12).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX store needs jax (pip install 'delta-fabric[jax]')")
torch = pytest.importorskip("torch", reason="the comparison with PyTorch needs torch")

import jax.numpy as jnp  # noqa: E402
from delta_fabric.layout import CanonicalLayout  # noqa: E402
from delta_fabric.manifest import Manifest  # noqa: E402
from delta_fabric.store import FunctionalStore, StoreError  # noqa: E402
from delta_fabric.stores.jax import JaxStore, UnmappableLeaf  # noqa: E402
from delta_fabric.stores.torch import module_manifest, module_tensors  # noqa: E402
from delta_fabric_conformance.drivers import jax_digits  # noqa: E402
from delta_fabric_demo.model import DigitsCNN  # noqa: E402
from numpy.typing import NDArray  # noqa: E402
from torch.nn import functional as F  # noqa: E402


def torch_model(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    m = DigitsCNN()
    with torch.no_grad():  # non-trivial BatchNorm parameters and statistics
        m.bn1.weight.uniform_(0.5, 1.5)
        m.bn1.bias.uniform_(-0.2, 0.2)
        m.bn1.running_mean.uniform_(-0.1, 0.1)
        m.bn1.running_var.uniform_(0.5, 2.0)
    return m


def torch_flat(m: Any, include_buffers: bool) -> NDArray[np.float32]:
    ts = module_tensors(m, include_buffers)
    return np.concatenate([t.detach().reshape(-1).numpy() for t in ts.values()]).astype(np.float32)


def jax_store_from(m: Any, include_buffers: bool) -> JaxStore:
    store = JaxStore(jax_digits.digits_variables(1), include_buffers=include_buffers)
    store.load(torch_flat(m, include_buffers))
    return store


def batch(n: int = 32, seed: int = 0) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    x = (rng.integers(0, 17, size=(n, 64)) / 16.0).astype(np.float32)
    return x, rng.integers(0, 10, size=n).astype(np.int64)


@pytest.mark.parametrize("include_buffers", [False, True])
def test_manifest_equals_pytorch(include_buffers: bool) -> None:
    """REQ: DF-MAN-6 (JAX/Flax rows): same names, shapes, order and fingerprint as PyTorch."""
    store = JaxStore(jax_digits.digits_variables(), include_buffers=include_buffers)
    assert store.manifest == module_manifest(DigitsCNN(), include_buffers)
    assert store.manifest.fingerprint == module_manifest(DigitsCNN(), include_buffers).fingerprint


def test_running_stats_are_the_batch_stats() -> None:
    # REQ: DF-GEN-244
    store = JaxStore(jax_digits.digits_variables(), include_buffers=True)
    assert store.running_stats() == ("bn1.running_mean", "bn1.running_var")
    assert set(store.running_stats()) <= set(store.manifest.names)
    assert JaxStore(jax_digits.digits_variables()).running_stats() == ()


def test_round_trip_is_exact() -> None:
    """REQ: DF-MAN-3: load then gather returns the same bits; gather(indices) = gather()[indices]."""
    store = JaxStore(jax_digits.digits_variables(), include_buffers=True)
    rng = np.random.default_rng(3)
    flat = rng.standard_normal(store.manifest.num_params).astype(np.float32)
    flat[:5] = [np.float32(1e-45), -0.0, np.float32(3.4e38), np.float32(-1e-40), 0.0]
    store.load(flat)
    assert store.gather().tobytes() == flat.tobytes()
    idx = np.unique(rng.integers(0, store.manifest.num_params, size=500)).astype(np.uint32)
    assert store.gather(idx).tobytes() == flat[idx].tobytes()
    again = JaxStore(store.variables, include_buffers=True)
    assert again.gather().tobytes() == flat.tobytes()


def test_conv_and_dense_are_the_transposes() -> None:
    """REQ: DF-MAN-6: canonical conv1.weight = kernel.transpose(3, 2, 0, 1) (HWIO -> OIHW),
    canonical fc*.weight = kernel.T, scale -> bn1.weight, batch_stats mean/var -> running_*."""
    v = jax_digits.digits_variables(5)
    v["batch_stats"]["bn1"]["mean"] = jnp.arange(16, dtype=jnp.float32)
    store = JaxStore(v, include_buffers=True)
    views = store.manifest.split(store.gather())
    p = jax.device_get(v["params"])
    np.testing.assert_array_equal(views["conv1.weight"], p["conv1"]["kernel"].transpose(3, 2, 0, 1))
    np.testing.assert_array_equal(views["fc1.weight"], p["fc1"]["kernel"].T)
    np.testing.assert_array_equal(views["fc2.weight"], p["fc2"]["kernel"].T)
    np.testing.assert_array_equal(views["bn1.weight"], p["bn1"]["scale"])
    np.testing.assert_array_equal(views["bn1.running_mean"], np.arange(16, dtype=np.float32))
    # element by element, as the spec's example states it
    k = p["conv1"]["kernel"]
    assert views["conv1.weight"][7, 0, 2, 1] == k[2, 1, 0, 7]
    off = store.manifest.offset("conv1.weight")
    assert store.gather()[off + 9 * 7 + 3 * 2 + 1] == k[2, 1, 0, 7]


def test_spec_section_4_5_flax_example() -> None:
    """REQ: DF-MAN-6: the worked example of the JAX/Flax rows (Section 4.3 model in Flax)."""
    v = {
        "params": {
            "fc": {
                "kernel": jnp.asarray([[1, 2], [3, 4], [5, 6]], jnp.float32),
                "bias": jnp.zeros(2),
            },
            "bn": {"scale": jnp.asarray([0.9, 1.1], jnp.float32), "bias": jnp.zeros(2)},
        },
        "batch_stats": {"bn": {"mean": jnp.zeros(2), "var": jnp.ones(2)}},
    }
    store = JaxStore(v)
    assert store.manifest.fingerprint.hex().startswith("9e58231f")
    flat = store.gather()
    np.testing.assert_array_equal(flat[6:12], [1, 3, 5, 2, 4, 6])
    np.testing.assert_array_equal(flat[2:4], np.asarray([0.9, 1.1], np.float32))
    assert JaxStore(v, include_buffers=True).manifest.fingerprint.hex().startswith("17da77a3")


def test_eval_logits_match_pytorch() -> None:
    """REQ: DF-MAN-6: same canonical weights, same function (layouts, (c,h,w) flatten, BatchNorm)."""
    m = torch_model()
    store = jax_store_from(m, include_buffers=True)
    x, _ = batch(64)
    m.eval()
    with torch.no_grad():
        want = m(torch.from_numpy(x).reshape(-1, 1, 8, 8)).numpy()
    got, _ = jax_digits.forward(store.variables, jnp.asarray(x), False)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_steps_match_pytorch(momentum: float) -> None:
    """REQ: DF-MAN-6: two SGD steps in training mode (batch statistics, biased variance in the
    normalisation, unbiased running_var update, momentum 0.1) give the same canonical weights and
    BatchNorm statistics as PyTorch within 1e-5."""
    m = torch_model(1)
    store = jax_store_from(m, include_buffers=True)
    variables = store.variables
    velocity = jax_digits.zeros_like_params(variables)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=momentum)
    m.train()
    for s in range(2):
        x, y = batch(32, seed=10 + s)
        opt.zero_grad()
        F.cross_entropy(m(torch.from_numpy(x).reshape(-1, 1, 8, 8)), torch.from_numpy(y)).backward()
        opt.step()
        variables, velocity, _ = jax_digits.sgd_step(
            variables,
            velocity,
            jnp.asarray(x),
            jnp.asarray(y),
            jnp.float32(0.1),
            jnp.float32(momentum),
            jnp.float32(0.1),
        )
    store.set_state(variables)
    want = torch_flat(m, include_buffers=True)
    got = store.gather()
    assert np.abs(got - want).max() <= 1e-5
    views = store.manifest.split(got)
    ref = store.manifest.split(want)
    assert np.abs(views["bn1.running_var"] - ref["bn1.running_var"]).max() <= 1e-5
    assert not np.array_equal(views["bn1.running_var"], torch_flat(torch_model(1), True)[32:48])


def numpy_apply(
    active: NDArray[np.float32], idx: NDArray[np.uint32], vals: NDArray[np.float32]
) -> NDArray[np.float32]:
    out = active.copy()
    out[idx] = out[idx] + vals  # fl32(active + v), DF-RCV-7
    return out


def big_variables(seed: int) -> dict[str, Any]:
    """A model whose Dense kernel (300 x 400 = 120000 elements) takes the jitted sparse path."""
    rng = np.random.default_rng(seed)
    return {
        "params": {
            "big": {"kernel": jnp.asarray(rng.standard_normal((300, 400)), jnp.float32)},
            "small": {"kernel": jnp.asarray(rng.standard_normal((400, 10)), jnp.float32)},
        }
    }


@pytest.mark.parametrize("model", ["digits", "big"])
@pytest.mark.parametrize("k", [1, 2, 3, 17, 600, 17322])
def test_sparse_apply_bit_exact(k: int, model: str) -> None:
    """REQ: DF-RCV-7, DF-NUM-2: the apply gives the bits of fl32(active + v), subnormals included
    (XLA's CPU backend would flush them), through the host round trip (small leaves) and the
    jitted gather/scatter (large leaves)."""
    if model == "digits":
        store = JaxStore(jax_digits.digits_variables(2), include_buffers=True)
    else:
        store = JaxStore(big_variables(k))
    n = store.manifest.num_params
    rng = np.random.default_rng(k)
    active = store.gather()
    active[:8] = np.float32(1e-39)  # subnormal operands and results
    store.load(active)
    idx = np.sort(rng.choice(np.arange(8, n), size=min(k, n - 8), replace=False))
    idx = np.concatenate([np.arange(min(k, 8)), idx[: max(0, k - 8)]]).astype(np.uint32)
    vals = rng.standard_normal(idx.size).astype(np.float32) * np.float32(1e-3)
    vals[idx < 8] = np.float32(-2e-39)  # 1e-39 - 2e-39: a subnormal result, flushed by XLA on CPU
    want = numpy_apply(active, idx, vals)
    store.apply(idx, vals)
    assert store.gather().tobytes() == want.tobytes()


def test_sparse_apply_rounds_back_to_bf16() -> None:
    """REQ: DF-RCV-7, DF-MAN-4: a bf16 leaf is read as f32, added in f32 and rounded back (RNE)."""
    import ml_dtypes

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    v = {"params": {"fc": {"kernel": jnp.asarray(w, jnp.bfloat16), "bias": jnp.zeros(4)}}}
    store = JaxStore(v)
    active = store.gather()
    idx = np.arange(4, 16, dtype=np.uint32)  # fc.weight, canonical [4, 3]
    vals = np.full(12, np.float32(1e-3))
    store.apply(idx, vals)
    want = (active[4:] + vals).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(store.gather()[4:], want)
    assert store.variables["params"]["fc"]["kernel"].dtype == jnp.bfloat16


def test_apply_compiles_a_bounded_number_of_programs() -> None:
    """Small leaves compile nothing; a large leaf pads index counts to powers of two (at least 64):
    300 different counts stay within 3 gather and 3 scatter programs (64, 128, 256 and 512 for
    k <= 300 minus the ones compiled before)."""
    from delta_fabric.stores import jax as jax_store

    store = JaxStore(big_variables(0))
    assert store.manifest.names[0] == "big.weight"  # flat indices 0..119999
    before = jax_store._take._cache_size() + jax_store._put._cache_size()
    want = store.gather()
    for k in range(1, 301):
        idx, vals = np.arange(k, dtype=np.uint32), np.full(k, 0.5, np.float32)
        store.apply(idx, vals)
        want = numpy_apply(want, idx, vals)
    after = jax_store._take._cache_size() + jax_store._put._cache_size()
    assert after - before <= 2 * 4  # buckets 64, 128, 256, 512
    assert store.gather().tobytes() == want.tobytes()


def test_refuses_unmappable_leaves() -> None:
    """REQ: DF-MAN-12: a leaf with no canonical name and shape is refused with a typed error;
    integer leaves are never synchronised (DF-MAN-4)."""
    ok = {"params": {"fc": {"kernel": jnp.zeros((3, 2)), "bias": jnp.zeros(2)}}}
    cases = [
        # a rank-3 kernel (1-D conv or DenseGeneral: ambiguous)
        {"params": {"conv": {"kernel": jnp.zeros((3, 1, 4))}}},
        {"params": {"fc": {"weights": jnp.zeros((3, 2))}}},  # unknown leaf name
        {"params": {"w": jnp.zeros(3)}},  # not params/<layer>/<leaf>
        {"cache": {"fc": {"kernel": jnp.zeros((3, 2))}}},  # unknown collection
        {"batch_stats": {"bn": {"mean": jnp.zeros(2), "std": jnp.ones(2)}}},
        {"params": {"fc": {"count": jnp.zeros(2, jnp.int32)}}},  # nothing floating left
    ]
    for v in cases:
        with pytest.raises(UnmappableLeaf):
            JaxStore(v)
    with_int = {"params": {**ok["params"], "n": {"steps": jnp.zeros((), jnp.int32)}}}
    assert JaxStore(with_int).manifest == JaxStore(ok).manifest
    kernel = ("params", "fc", "kernel")
    with pytest.raises(UnmappableLeaf):  # explicit layouts: unknown path, wrong shape
        JaxStore(ok, CanonicalLayout([(("params", "fc", "w"), "fc.weight", (3, 2))]))
    with pytest.raises(UnmappableLeaf):
        JaxStore(ok, CanonicalLayout([(kernel, "fc.weight", (2, 3))]))


def test_explicit_table_and_rename() -> None:
    """REQ: DF-MAN-6: Flax auto-names are renamed to PyTorch's; an explicit table maps any pytree."""
    v = {"params": {"Conv_0": {"kernel": jnp.zeros((3, 3, 1, 16)), "bias": jnp.zeros(16)}}}
    store = JaxStore(v, rename={"Conv_0": "conv1"})
    assert store.manifest.names == ("conv1.bias", "conv1.weight")
    assert store.manifest.spec("conv1.weight").shape == (16, 1, 3, 3)
    plain = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    layout = CanonicalLayout([(("w",), "lin.weight", (2, 3), (1, 0)), (("b",), "lin.bias", (3,))])
    store = JaxStore(plain, layout)
    assert store.manifest == Manifest.from_named_shapes({"lin.weight": (3, 2), "lin.bias": (3,)})
    np.testing.assert_array_equal(store.gather()[3:], [0, 3, 1, 4, 2, 5])


def test_functional_store_contract() -> None:
    """A FunctionalStore: set_state checks structure, shapes and dtypes (StoreError, nothing
    changes); bad sparse input and bad flat vectors are refused with StoreError."""
    store = JaxStore(jax_digits.digits_variables())
    assert isinstance(store, FunctionalStore)
    before = store.gather()
    v = jax_digits.digits_variables()
    v["params"]["fc1"]["kernel"] = jnp.zeros((64, 256))
    for bad in (v, {"params": {}}):
        with pytest.raises(StoreError):
            store.set_state(bad)
    with pytest.raises(StoreError):
        store.apply(np.asarray([3, 2], np.uint32), np.ones(2, np.float32))
    with pytest.raises(StoreError):
        store.apply(np.asarray([store.manifest.num_params], np.uint32), np.ones(1, np.float32))
    with pytest.raises(StoreError):
        store.load(np.zeros(3, np.float32))
    assert store.gather().tobytes() == before.tobytes()


def test_real_flax_module_maps_to_the_pytorch_manifest() -> None:
    """REQ: DF-MAN-6: the variables of a real Flax Linen CNN (auto-names renamed) have the PyTorch
    digits CNN's manifest, and Flax BatchNorm with momentum 1 - p in eval mode computes what PyTorch
    computes from the same canonical weights."""
    nn = pytest.importorskip("flax.linen", reason="optional: checks the spec rows against Flax")

    class Net(nn.Module):  # type: ignore[misc]
        @nn.compact
        def __call__(self, x: Any, train: bool) -> Any:
            x = nn.Conv(16, (3, 3), padding=1)(x.reshape(-1, 8, 8, 1))
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
            x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
            x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
            x = nn.relu(nn.Dense(64)(x))  # Dense_0 (fc1): constructed first
            return nn.Dense(10)(x)

    rename = {"Conv_0": "conv1", "BatchNorm_0": "bn1", "Dense_0": "fc1", "Dense_1": "fc2"}
    v = Net().init(jax.random.PRNGKey(0), jnp.zeros((1, 64)), False)
    store = JaxStore(v, include_buffers=True, rename=rename)
    assert store.manifest == module_manifest(DigitsCNN(), True)
    m = torch_model(4)
    store.load(torch_flat(m, True))
    x, _ = batch(16)
    got = Net().apply(store.variables, jnp.asarray(x), False)
    m.eval()
    with torch.no_grad():
        want = m(torch.from_numpy(x).reshape(-1, 1, 8, 8)).numpy()
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-5)


def test_mixed_sync_torch_and_jax_over_memory() -> None:
    """REQ: DF-NUM-1, DF-MAN-6: a PyTorch node (TorchStore) and a JAX node (JaxStore, through
    ``variables = fabric.update(variables)``) train the digits CNN from the same canonical weights on
    different data over the memory transport; after a quiescent drain their canonical weights agree
    within DF-NUM-1 and their anchors within f32 rounding; a late JAX joiner bootstraps from a snapshot
    of the PyTorch node (DF-ZEN-5) and gets its anchor bit for bit."""
    from delta_fabric.config import SyncConfig
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.torch import TorchStore
    from delta_fabric.transports.memory import MemoryHub

    cfg = SyncConfig.v1_0(alpha=1.0, ratio=0.05, sync_interval=2, include_buffers=True)
    m = torch_model(7)
    init = torch_flat(m, include_buffers=True)
    jstore = JaxStore(jax_digits.digits_variables(), include_buffers=True)
    jstore.load(init)
    hub = MemoryHub()
    tnode = Fabric.v1_0(TorchStore(m, include_buffers=True), hub.transport(1), cfg, node_id=1)
    jnode = Fabric.v1_0(jstore, hub.transport(2), cfg, node_id=2)
    variables = jstore.state()
    velocity = jax_digits.zeros_like_params(variables)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    lr, mom, bnm = jnp.float32(0.05), jnp.float32(0.0), jnp.float32(0.1)
    for s in range(12):
        xt, yt = batch(16, seed=100 + s)
        opt.zero_grad()
        F.cross_entropy(
            m(torch.from_numpy(xt).reshape(-1, 1, 8, 8)), torch.from_numpy(yt)
        ).backward()
        opt.step()
        tnode.step()
        xj, yj = batch(16, seed=200 + s)
        variables, velocity, _ = jax_digits.sgd_step(
            variables, velocity, jnp.asarray(xj), jnp.asarray(yj), lr, mom, bnm
        )
        variables = jnode.update(variables)
    assert tnode.engine.counters.entries_accepted > 0 and jnode.engine.counters.entries_accepted > 0
    for _ in range(40):  # quiescent drain: generation and relaying continue, training does not
        tnode.sync_now()
        variables = jnode.update(variables)
        jnode.sync_now()
    tnode.poll()
    jnode.poll()
    wt, wj = tnode.active_vector(), jnode.active_vector()
    assert np.array_equal(wj, JaxStore(variables, include_buffers=True).gather())
    scale = max(np.abs(wt).max(), np.abs(wj).max())
    assert np.abs(wt - wj).max() <= 5e-2 * scale  # DF-NUM-1
    assert np.abs(wt - wj).max() <= 1e-4 * scale  # in practice: the residuals are drained
    np.testing.assert_allclose(tnode.snapshot().anchor, jnode.snapshot().anchor, rtol=0, atol=1e-6)
    assert not np.array_equal(wt, init)
    late = JaxStore(jax_digits.digits_variables(3), include_buffers=True)
    joiner = Fabric.join(late, hub.transport(3), cfg, node_id=3, timeout=5.0)
    assert joiner.bootstrapped
    assert late.gather().tobytes() == tnode.snapshot().anchor.tobytes()
    for f in (tnode, jnode, joiner):
        f.close()


def test_driver_protocol_digits_cnn_example() -> None:
    """The example of driver protocol 5.6 ("The digits CNN"), in PyTorch and in JAX: conv1.bias = 1,
    bn1.weight = 1, every other weight 0, running statistics 0 / 1. Inference: the logits are fc2.bias;
    one training forward pass (batch mean 1, variance 0): running_mean becomes 0.1, running_var 0.9."""
    m = DigitsCNN()
    store = JaxStore(jax_digits.digits_variables(), include_buffers=True)
    views = store.manifest.split(np.zeros(store.manifest.num_params, np.float32))
    views["conv1.bias"][:] = 1.0
    views["bn1.weight"][:] = 1.0
    views["bn1.running_var"][:] = 1.0
    views["fc2.bias"][:] = np.arange(10, dtype=np.float32)
    flat = store.manifest.flatten(views)
    store.load(flat)
    with torch.no_grad():
        for name, t in module_tensors(m, True).items():
            t.copy_(torch.from_numpy(views[name]).reshape(t.shape))
    x, _ = batch(8)
    m.eval()
    with torch.no_grad():
        np.testing.assert_array_equal(
            m(torch.from_numpy(x).reshape(-1, 1, 8, 8)).numpy()[0], views["fc2.bias"]
        )
    logits, _ = jax_digits.forward(store.state(), jnp.asarray(x), False)
    np.testing.assert_array_equal(np.asarray(logits)[3], views["fc2.bias"])
    m.train()
    with torch.no_grad():
        m(torch.from_numpy(x).reshape(-1, 1, 8, 8))
    np.testing.assert_allclose(m.bn1.running_var.numpy(), 0.9, rtol=0, atol=1e-7)
    np.testing.assert_allclose(m.bn1.running_mean.numpy(), 0.1, rtol=0, atol=1e-7)
    _, stats = jax_digits.forward(store.state(), jnp.asarray(x), True)
    np.testing.assert_allclose(np.asarray(stats["bn1"]["var"]), 0.9, rtol=0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(stats["bn1"]["mean"]), 0.1, rtol=0, atol=1e-7)
