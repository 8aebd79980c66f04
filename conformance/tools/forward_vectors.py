"""Forward vectors (``conformance/vectors/forward/``): one inference pass, one training pass and one
plain SGD step of the digits CNN (driver protocol section 5.6, "The digits CNN"), from fixed canonical
weights on a fixed batch. Called by ``make_vectors.py``.

The expected results come from :func:`reference`, a float64 NumPy transcription of the driver protocol's
text (no framework involved: convolution as written, no kernel flip; BatchNorm with the biased batch
variance and PyTorch's momentum convention with the unbiased variance for the running statistics;
``(c, h, w)`` flatten; ``y = x W^T + b``; mean cross-entropy; ``w -= lr * grad``), with the backward
pass written out by hand. A framework computing in float32 lands within the vector's ``tolerance``
(see ``TOLERANCE``); a layout mistake (a Linear weight read transposed, an NHWC flatten, a Flax
BatchNorm momentum given to PyTorch) lands orders of magnitude outside it.
"""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.manifest import Manifest
from numpy.typing import NDArray

__all__ = ["TOLERANCE", "build", "reference"]

EPS = 1e-5
BN_MOMENTUM = 0.1
SHAPES: dict[str, tuple[int, ...]] = {
    "bn1.bias": (16,),
    "bn1.running_mean": (16,),
    "bn1.running_var": (16,),
    "bn1.weight": (16,),
    "conv1.bias": (16,),
    "conv1.weight": (16, 1, 3, 3),
    "fc1.bias": (64,),
    "fc1.weight": (64, 256),
    "fc2.bias": (10,),
    "fc2.weight": (10, 64),
}
MANIFEST = Manifest.from_named_shapes(SHAPES)  # include_buffers: N = 17,322
#: Tolerances (driver protocol 5.9). Per logits array, for the loss and per tensor of the update
#: ``w' - w``: ``max |got - ref| <= rtol * max |ref| + atol``, with ``atol = 0`` for the logits and the
#: loss and ``atol = update_atol_ulps * 2^-23 * max |w|`` over the tensor's initial weights for the
#: update (the f32 rounding of ``w - lr * grad``; ``conv1.bias`` has an exactly zero gradient in
#: training mode, BatchNorm cancels it, so its update is that rounding noise). Float32 arithmetic lands
#: 1.4e-7 to 6.3e-7 from the float64 reference on these vectors (measured for PyTorch, JAX and Burn,
#: logits and updates); the smallest mistake measured (BatchNorm ``eps`` 1e-3 instead of 1e-5) moves the
#: training logits by 1.4e-2 and the updates by 1.5e-2; a Linear weight read transposed moves the logits
#: by 0.4, Flax's BatchNorm momentum 0.9 given to PyTorch moves the running statistics by 8x. ``1e-4``
#: leaves 150x headroom for other kernels and 100x margin to the smallest mistake.
TOLERANCE = {"rtol": 1e-4, "update_atol_ulps": 4}

F64 = NDArray[np.float64]


def _conv(x: F64, w: F64, b: F64) -> tuple[F64, F64]:
    """``y[b,o,h,w] = bias[o] + sum w[o,0,dy,dx] x[b,0,h+dy-1,w+dx-1]``; also the padded input."""
    n = x.shape[0]
    xp = np.zeros((n, 10, 10))
    xp[:, 1:9, 1:9] = x[:, 0]
    y = np.broadcast_to(b[None, :, None, None], (n, 16, 8, 8)).copy()
    for dy in range(3):
        for dx in range(3):
            y += w[None, :, 0, dy, dx, None, None] * xp[:, None, dy : dy + 8, dx : dx + 8]
    return y, xp


def _head(p: dict[str, F64], y: F64, mu: F64, var: F64) -> tuple[F64, dict[str, F64]]:
    """BatchNorm with (mu, var), ReLU, pool, flatten, fc1, ReLU, fc2: logits and the saved values."""
    inv = 1.0 / np.sqrt(var + EPS)
    xhat = (y - mu[None, :, None, None]) * inv[None, :, None, None]
    z = xhat * p["bn1.weight"][None, :, None, None] + p["bn1.bias"][None, :, None, None]
    r = np.maximum(z, 0.0)
    n = y.shape[0]
    windows = r.reshape(n, 16, 4, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, 16, 4, 4, 4)
    arg = windows.argmax(axis=-1)
    pooled = np.take_along_axis(windows, arg[..., None], axis=-1)[..., 0]
    f = pooled.reshape(n, 256)  # (c, h, w) order
    h = f @ p["fc1.weight"].T + p["fc1.bias"]
    a = np.maximum(h, 0.0)
    logits = a @ p["fc2.weight"].T + p["fc2.bias"]
    saved = {"inv": inv, "xhat": xhat, "z": z, "arg": arg, "f": f, "h": h, "a": a}
    return logits, saved


def reference(weights: F64, x: F64, y: NDArray[np.int64], lr: float) -> dict[str, Any]:
    """Inference logits, training logits, loss and the weights after one SGD step (float64)."""
    p = {k: v.astype(np.float64) for k, v in MANIFEST.split(weights).items()}
    n = x.shape[0]
    x4 = x.reshape(n, 1, 8, 8)
    conv, xp = _conv(x4, p["conv1.weight"], p["conv1.bias"])
    logits_eval, _ = _head(p, conv, p["bn1.running_mean"], p["bn1.running_var"])
    m = n * 64
    mu = conv.mean(axis=(0, 2, 3))
    var = ((conv - mu[None, :, None, None]) ** 2).mean(axis=(0, 2, 3))  # biased
    logits, s = _head(p, conv, mu, var)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-logp[np.arange(n), y].mean())
    # backward
    d_logits = np.exp(logp)
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    g: dict[str, F64] = {}
    g["fc2.weight"] = d_logits.T @ s["a"]
    g["fc2.bias"] = d_logits.sum(axis=0)
    d_h = (d_logits @ p["fc2.weight"]) * (s["h"] > 0)
    g["fc1.weight"] = d_h.T @ s["f"]
    g["fc1.bias"] = d_h.sum(axis=0)
    d_pooled = (d_h @ p["fc1.weight"]).reshape(n, 16, 4, 4)
    d_windows = np.zeros((n, 16, 4, 4, 4))
    np.put_along_axis(d_windows, s["arg"][..., None], d_pooled[..., None], axis=-1)
    d_r = d_windows.reshape(n, 16, 4, 4, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, 16, 8, 8)
    d_z = d_r * (s["z"] > 0)
    g["bn1.weight"] = (d_z * s["xhat"]).sum(axis=(0, 2, 3))
    g["bn1.bias"] = d_z.sum(axis=(0, 2, 3))
    d_xhat = d_z * p["bn1.weight"][None, :, None, None]
    sum1 = d_xhat.sum(axis=(0, 2, 3))[None, :, None, None]
    sum2 = (d_xhat * s["xhat"]).sum(axis=(0, 2, 3))[None, :, None, None]
    d_conv = s["inv"][None, :, None, None] / m * (m * d_xhat - sum1 - s["xhat"] * sum2)
    g["conv1.bias"] = d_conv.sum(axis=(0, 2, 3))
    gw = np.zeros((16, 1, 3, 3))
    for dy in range(3):
        for dx in range(3):
            gw[:, 0, dy, dx] = (d_conv * xp[:, None, dy : dy + 8, dx : dx + 8]).sum(axis=(0, 2, 3))
    g["conv1.weight"] = gw
    new = {k: (v - lr * g[k] if k in g else v) for k, v in p.items()}
    new["bn1.running_mean"] = (1 - BN_MOMENTUM) * p["bn1.running_mean"] + BN_MOMENTUM * mu
    new["bn1.running_var"] = (1 - BN_MOMENTUM) * p["bn1.running_var"] + BN_MOMENTUM * var * m / (
        m - 1
    )
    flat = np.concatenate([new[t.name].reshape(-1) for t in MANIFEST.tensors])
    return {
        "logits_eval": logits_eval,
        "logits_train": logits,
        "loss": loss,
        "weights": flat,
        "batch_mean": mu,
        "batch_var": var,
    }


@dataclass
class ForwardCase:
    name: str
    description: str
    seed: int
    n: int
    lr: float


CASES = [
    ForwardCase(
        "batch8",
        "Eight images, lr 0.1, random weights and running statistics: inference logits, training "
        "logits, loss and the weights after one plain SGD step.",
        seed=20261130,
        n=8,
        lr=0.1,
    ),
    ForwardCase(
        "batch3_lr05",
        "Three images, lr 0.5 (BatchNorm over m = 192 values).",
        seed=7,
        n=3,
        lr=0.5,
    ),
]


def _inputs(c: ForwardCase) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64]]:
    rng = np.random.default_rng(c.seed)

    def u(shape: tuple[int, ...], lo: float, hi: float) -> NDArray[np.float64]:
        return rng.uniform(lo, hi, size=shape)

    parts = {
        "bn1.bias": u((16,), -0.5, 0.5),
        "bn1.running_mean": u((16,), -0.5, 0.5),
        "bn1.running_var": u((16,), 0.5, 2.0),
        "bn1.weight": u((16,), 0.5, 1.5),
        "conv1.bias": u((16,), -1 / 3, 1 / 3),
        "conv1.weight": u((16, 1, 3, 3), -1 / 3, 1 / 3),
        "fc1.bias": u((64,), -1 / 16, 1 / 16),
        "fc1.weight": u((64, 256), -1 / 16, 1 / 16),
        "fc2.bias": u((10,), -1 / 8, 1 / 8),
        "fc2.weight": u((10, 64), -1 / 8, 1 / 8),
    }
    weights = np.concatenate([parts[t.name].reshape(-1) for t in MANIFEST.tensors]).astype(
        np.float32
    )
    x = (rng.integers(0, 17, size=(c.n, 64)) / 16.0).astype(np.float32)  # digits pixels / 16
    y = rng.integers(0, 10, size=c.n).astype(np.int64)
    return weights, x, y


def _b64(a: NDArray[Any]) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write ``forward/`` under ``vectors_dir``; return its index rows."""
    root = vectors_dir / "forward"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    rows = []
    for c in CASES:
        weights, x, y = _inputs(c)
        ref = reference(weights.astype(np.float64), x.astype(np.float64), y, c.lr)
        update = ref["weights"] - weights.astype(np.float64)
        # the Burn node's running variance uses the biased batch variance (driver protocol 5.6, bn1):
        # tolerated, so the vector carries that alternative for bn1.running_var's update
        m = c.n * 64
        rv = MANIFEST.split(weights.astype(np.float64))["bn1.running_var"]
        biased = (1 - BN_MOMENTUM) * rv + BN_MOMENTUM * ref["batch_var"] - rv
        assert m > 1
        vector = {
            "description": c.description,
            "requirements": ["DF-NUM-1", "DF-MAN-6"],
            "model": {"kind": "digits_cnn"},
            "include_buffers": True,
            "manifest": {
                "tensors": [
                    {"name": t.name, "dtype": "f32", "shape": list(t.shape)}
                    for t in MANIFEST.tensors
                ]
            },
            "fingerprint": MANIFEST.fingerprint.hex(),
            "count": c.n,
            "x_b64": _b64(x),
            "y": y.tolist(),
            "lr": c.lr,
            "weights_b64": _b64(weights),
            "tolerance": TOLERANCE,
            "expected": {
                "logits_eval": ref["logits_eval"].tolist(),
                "logits_train": ref["logits_train"].tolist(),
                "loss": ref["loss"],
                "update_b64": _b64(update),
                "running_var_update_biased_b64": _b64(biased),
            },
        }
        path = root / f"{c.name}.json"
        path.write_text(json.dumps(vector, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        rows.append(
            {
                "id": f"forward.digits_cnn.{c.name}",
                "kind": "forward",
                "path": f"forward/{c.name}",
                "requirements": vector["requirements"],
                "expect": "ok",
            }
        )
    return rows
