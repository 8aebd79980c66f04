"""The ``forward`` command (driver protocol section 5.9): the digits CNN of a framework's model kit
on a fixed batch, from fixed canonical weights: inference logits, training logits, loss, and the
canonical weights after one plain SGD step, through the same code the ``train`` instruction runs."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
from delta_fabric.manifest import Manifest
from numpy.typing import NDArray

from delta_fabric_conformance.kit.models import model_manifest

__all__ = ["ForwardKit", "ForwardResult", "run_forward"]

#: (inference logits [n, 10], training logits [n, 10], loss, canonical weights after the step)
ForwardResult = tuple[NDArray[np.float32], NDArray[np.float32], float, NDArray[np.float32]]


@runtime_checkable
class ForwardKit(Protocol):
    """A model kit that runs the forward check."""

    framework: str

    def forward_check(
        self,
        manifest: Manifest,
        weights: NDArray[np.float32],
        include_buffers: bool,
        x: NDArray[np.float32],
        y: NDArray[np.int64],
        lr: float,
    ) -> ForwardResult:
        """Build the digits CNN from ``weights``; logits in inference mode (running statistics),
        then one training step (training-mode logits, mean cross-entropy, ``w -= lr * grad``, running
        statistics updated); return both logits, the loss and the canonical weights afterwards."""
        ...


def _f32(s: Any, what: str) -> NDArray[np.float32]:
    raw = base64.b64decode(str(s), validate=True)
    if len(raw) % 4:
        raise ValueError(f"{what}: not a whole number of f32")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def run_forward(kit: ForwardKit, vector: Mapping[str, Any]) -> dict[str, Any]:
    include_buffers = bool(vector.get("include_buffers", False))
    manifest = model_manifest(vector["model"], include_buffers)
    if Manifest.from_json(vector["manifest"]) != manifest:
        raise ValueError("the vector's manifest is not the digits CNN's")
    if manifest.fingerprint.hex() != vector["fingerprint"]:
        raise ValueError("the vector's fingerprint is not the digits CNN's")
    n = int(vector["count"])
    x = _f32(vector["x_b64"], "x_b64").reshape(n, 64)
    y = np.asarray(vector["y"], dtype=np.int64)
    weights = _f32(vector["weights_b64"], "weights_b64")
    if y.shape != (n,) or weights.size != manifest.num_params:
        raise ValueError("y or weights_b64 do not match count / the manifest")
    le, lt, loss, w = kit.forward_check(
        manifest, weights, include_buffers, x, y, float(vector["lr"])
    )
    return {
        "logits_eval": np.asarray(le, dtype=np.float32).astype(np.float64).tolist(),
        "logits_train": np.asarray(lt, dtype=np.float32).astype(np.float64).tolist(),
        "loss": float(loss),
        "weights_b64": base64.b64encode(np.ascontiguousarray(w, dtype="<f4").tobytes()).decode(
            "ascii"
        ),
    }
