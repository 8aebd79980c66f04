"""The ``forward`` check (driver protocol section 5.9): its float64 reference is right (finite
differences), the PyTorch and JAX kits pass it, and every layout or convention mistake planted in an
otherwise correct adapter fails it. The runner-level version (fake drivers through the conformance
runner) is in tests/test_conformance_selftest.py; the Burn driver is judged by the conformance run."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from delta_fabric_conformance.forward_checks import check_forward_result
from delta_fabric_conformance.kit.forward import ForwardKit, run_forward

ROOT = Path(__file__).resolve().parents[1]
VECTORS = sorted((ROOT / "conformance" / "vectors" / "forward").glob("*.json"))


def _tool(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "conformance" / "tools" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fv = _tool("forward_vectors")


def _vector(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _request(v: dict[str, Any]) -> dict[str, Any]:
    return {k: x for k, x in v.items() if k not in ("expected", "description", "requirements")}


def test_vectors_exist() -> None:
    assert [p.stem for p in VECTORS] == sorted(c.name for c in fv.CASES)


def test_reference_gradient_matches_finite_differences() -> None:
    """The hand-written backward pass of the reference is the gradient of its own loss."""
    case = fv.CASES[1]
    weights, x, y = fv._inputs(case)
    w = weights.astype(np.float64)
    lr = 1.0  # the update is then -grad
    grad = -(fv.reference(w, x.astype(np.float64), y, lr)["weights"] - w)
    offsets = np.cumsum([0] + [int(np.prod(t.shape)) for t in fv.MANIFEST.tensors])
    rng = np.random.default_rng(1)
    checked = 0
    for i, t in enumerate(fv.MANIFEST.tensors):
        if t.name.startswith("bn1.running_"):
            continue  # not trained: their "update" is the running-statistics update
        for j in rng.choice(np.arange(offsets[i], offsets[i + 1]), size=3, replace=False):
            h = 1e-6
            up, down = w.copy(), w.copy()
            up[j] += h
            down[j] -= h
            numeric = (
                fv.reference(up, x.astype(np.float64), y, lr)["loss"]
                - fv.reference(down, x.astype(np.float64), y, lr)["loss"]
            ) / (2 * h)
            assert abs(numeric - grad[j]) <= 1e-6 * max(1.0, abs(grad[j])), (t.name, j)
            checked += 1
    assert checked == 3 * 8


def test_reference_running_statistics_follow_the_spec_example() -> None:
    """Driver protocol 5.6 Example: conv1.bias = 1, everything else zero, bn1.weight = 1, running
    statistics 0 / 1: inference logits = fc2.bias, running_mean 0.1 and running_var 0.9 after a step."""
    parts = {t.name: np.zeros(t.shape) for t in fv.MANIFEST.tensors}
    parts["conv1.bias"][:] = 1.0
    parts["bn1.weight"][:] = 1.0
    parts["bn1.running_var"][:] = 1.0
    parts["fc2.bias"][:] = np.arange(10) / 10
    w = np.concatenate([parts[t.name].reshape(-1) for t in fv.MANIFEST.tensors])
    x = np.full((2, 64), 0.5)
    ref = fv.reference(w, x, np.array([0, 1]), 0.1)
    np.testing.assert_allclose(ref["logits_eval"], np.tile(np.arange(10) / 10, (2, 1)), atol=1e-12)
    after = fv.MANIFEST.split(ref["weights"])
    np.testing.assert_allclose(after["bn1.running_mean"], 0.1, atol=1e-12)
    np.testing.assert_allclose(after["bn1.running_var"], 0.9, atol=1e-12)


def _torch_kit() -> ForwardKit:
    pytest.importorskip("torch")
    from delta_fabric_conformance.drivers.torch import TorchKit

    return TorchKit()


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_torch_kit_passes(path: Path) -> None:
    # REQ: DF-MAN-6
    v = _vector(path)
    assert check_forward_result(v, run_forward(_torch_kit(), _request(v))) is None


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_jax_kit_passes(path: Path) -> None:
    # REQ: DF-MAN-6
    pytest.importorskip("jax")
    from delta_fabric_conformance.drivers.jax import JaxKit

    v = _vector(path)
    assert check_forward_result(v, run_forward(JaxKit(), _request(v))) is None


def _mistakes() -> dict[str, Callable[[Any], None]]:
    """Mistakes planted in a correct PyTorch model after its weights were loaded."""
    import torch
    from torch.nn import functional as F

    def linear_transposed(m: Any) -> None:  # a Flax kernel [in, out] read by reshape
        with torch.no_grad():
            w = m.fc1.weight.detach().clone()
            m.fc1.weight.copy_(w.reshape(w.shape[1], w.shape[0]).T)

    def flatten_hwc(m: Any) -> None:
        def fwd(x: Any) -> Any:
            x = F.max_pool2d(F.relu(m.bn1(m.conv1(x.reshape(-1, 1, 8, 8)))), 2)
            return m.fc2(F.relu(m.fc1(x.permute(0, 2, 3, 1).flatten(1))))

        m.forward = fwd

    def bn_flax_momentum(m: Any) -> None:
        m.bn1.momentum = 0.9

    def bn_eps(m: Any) -> None:
        m.bn1.eps = 1e-3

    def bn_swapped(m: Any) -> None:  # BatchNorm scale and bias exchanged by a mapping
        with torch.no_grad():
            g = m.bn1.weight.detach().clone()
            m.bn1.weight.copy_(m.bn1.bias)
            m.bn1.bias.copy_(g)

    def conv_flipped(m: Any) -> None:  # a true convolution (kernel flipped) instead of correlation
        with torch.no_grad():
            m.conv1.weight.copy_(torch.flip(m.conv1.weight, dims=(2, 3)))

    return {
        "linear_transposed": linear_transposed,
        "flatten_hwc": flatten_hwc,
        "bn_flax_momentum": bn_flax_momentum,
        "bn_eps": bn_eps,
        "bn_swapped": bn_swapped,
        "conv_flipped": conv_flipped,
    }


MISTAKES = [
    "linear_transposed",
    "flatten_hwc",
    "bn_flax_momentum",
    "bn_eps",
    "bn_swapped",
    "conv_flipped",
]


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_planted_mistake_fails(mistake: str, path: Path) -> None:
    # REQ: DF-MAN-6
    kit = _torch_kit()
    plant = _mistakes()[mistake]
    make = kit.make_model  # type: ignore[attr-defined]

    def make_wrong(*args: Any) -> Any:
        m = make(*args)
        plant(m)
        return m

    kit.make_model = make_wrong  # type: ignore[attr-defined]
    v = _vector(path)
    problem = check_forward_result(v, run_forward(kit, _request(v)))
    assert problem is not None, mistake


def test_tolerance_is_far_from_float32_error_and_from_mistakes() -> None:
    """The margins TOLERANCE claims: the PyTorch result is >= 100x inside rtol, and the smallest
    mistake (BatchNorm eps) is >= 10x outside it, on every vector."""
    kit = _torch_kit()
    rtol = fv.TOLERANCE["rtol"]
    for path in VECTORS:
        v = _vector(path)
        got = run_forward(kit, _request(v))
        ref = np.asarray(v["expected"]["logits_train"])
        err = np.abs(np.asarray(got["logits_train"]) - ref).max() / np.abs(ref).max()
        assert err <= rtol / 100, (path.stem, err)
        tight = {**v, "tolerance": {**v["tolerance"], "rtol": rtol / 100}}
        assert check_forward_result(tight, got) is None, path.stem
        loose = {**v, "tolerance": {**v["tolerance"], "rtol": rtol * 10}}
        make = kit.make_model  # type: ignore[attr-defined]

        def eps_model(*args: Any, make: Any = make) -> Any:
            m = make(*args)
            m.bn1.eps = 1e-3
            return m

        wrong = type(kit)()
        wrong.make_model = eps_model  # type: ignore[attr-defined]
        assert check_forward_result(loose, run_forward(wrong, _request(v))) is not None


def test_unreadable_results_are_failures_not_crashes() -> None:
    v = _vector(VECTORS[0])
    good = run_forward(_torch_kit(), _request(v))
    for bad in (
        {**good, "logits_eval": [[0.0] * 10]},
        {**good, "loss": "nan"},
        {k: x for k, x in good.items() if k != "weights_b64"},
        {**good, "weights_b64": "AAAA"},
        {**good, "logits_train": [["x"] * 10] * v["count"]},
    ):
        assert check_forward_result(v, bad) is not None
