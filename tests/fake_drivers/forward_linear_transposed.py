"""Fault: the adapter reads each canonical Linear weight ``[out, in]`` as if it were a Flax kernel
``[in, out]`` reshaped, then transposes it back: the manifest and the fingerprint are unchanged, the
function is not (the classic mapping mistake the ``forward`` check exists for)."""

from __future__ import annotations

from typing import Any

from _base import Driver, main
from delta_fabric_conformance.drivers.torch import TorchKit


class TransposedKit(TorchKit):
    def make_model(self, manifest: Any, weights: Any, config: Any) -> Any:
        import torch

        m = super().make_model(manifest, weights, config)
        with torch.no_grad():
            for layer in (m.fc1, m.fc2):
                w = layer.weight.detach().clone()
                layer.weight.copy_(w.reshape(w.shape[1], w.shape[0]).T)
        return m


class ForwardLinearTransposed(Driver):
    name = "forward_linear_transposed"

    def __init__(self) -> None:
        super().__init__()
        self.kit = TransposedKit()


if __name__ == "__main__":
    raise SystemExit(main(ForwardLinearTransposed()))
