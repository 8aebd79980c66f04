"""The scenario models of driver protocol section 5.6, framework-free: their manifests.

``flat``: the tensors the scenario lists. ``digits_cnn``: the reference digits CNN (spec section 4.5;
``df_node::model::DigitsCnn`` in Rust), in canonical (PyTorch) names and shapes; a framework's driver
builds its own model with this manifest (see :class:`delta_fabric_conformance.kit.ModelKit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from delta_fabric.manifest import Manifest, TensorSpec

__all__ = ["DIGITS_CNN", "model_manifest"]

#: The digits CNN's tensors in canonical order, BatchNorm running statistics included.
DIGITS_CNN: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("bn1.bias", (16,)),
    ("bn1.running_mean", (16,)),
    ("bn1.running_var", (16,)),
    ("bn1.weight", (16,)),
    ("conv1.bias", (16,)),
    ("conv1.weight", (16, 1, 3, 3)),
    ("fc1.bias", (64,)),
    ("fc1.weight", (64, 256)),
    ("fc2.bias", (10,)),
    ("fc2.weight", (10, 64)),
)


def model_manifest(model: Mapping[str, Any], include_buffers: bool = False) -> Manifest:
    """The manifest of a scenario model (driver protocol 5.6 ``model``)."""
    kind = model["kind"]
    if kind == "flat":
        return Manifest(TensorSpec(str(t["name"]), tuple(t["shape"])) for t in model["tensors"])
    if kind == "digits_cnn":
        return Manifest(
            TensorSpec(name, shape)
            for name, shape in DIGITS_CNN
            if include_buffers or not name.startswith("bn1.running_")
        )
    raise ValueError(f"unknown model kind {kind!r}")
