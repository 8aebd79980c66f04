"""The PyTorch driver (registry name ``python``): the kit plus PyTorch's digits CNN and store.

Run as ``python -m delta_fabric_conformance.drivers.torch``. The model is the reference digits CNN (spec
section 4.5): conv1 = Conv2d(1,16,3,padding=1); bn1 = BatchNorm2d(16); relu; max_pool2d(2); flatten
(C, H, W order) 256; fc1 = Linear(256,64); relu; fc2 = Linear(64,10). Input: pixels/16 as [B,1,8,8].
PyTorch is imported by the first live digits node only: the vector commands never need it.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.manifest import Manifest
from numpy.typing import NDArray

from delta_fabric_conformance.kit import Driver, KitFabric, NodeArgs, main
from delta_fabric_conformance.kit.forward import ForwardResult

if TYPE_CHECKING:
    from torch import nn


@cache
def digits_cnn_class() -> type[nn.Module]:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class DigitsCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(16)
            self.fc1 = nn.Linear(256, 64)
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.max_pool2d(F.relu(self.bn1(self.conv1(x.reshape(-1, 1, 8, 8)))), 2)
            out: torch.Tensor = self.fc2(F.relu(self.fc1(x.flatten(1))))
            return out

    return DigitsCNN


class TorchKit:
    """:class:`~delta_fabric_conformance.kit.ModelKit` for PyTorch (in place: the model is the store)."""

    framework = "torch"

    def new_model(self) -> nn.Module:
        """A fresh digits CNN (the conformance self-test plants layout mistakes here)."""
        return digits_cnn_class()()

    def make_model(
        self, manifest: Manifest, weights: NDArray[np.float32], config: SyncConfig
    ) -> Any:
        import torch
        from delta_fabric.stores.torch import module_manifest, module_tensors

        # one intra-op thread: live scenarios run several nodes on few cores (15x slower otherwise)
        torch.set_num_threads(1)
        m = self.new_model()
        if module_manifest(m, config.include_buffers) != manifest:
            raise ValueError("DigitsCNN's manifest differs from the scenario model's")
        with torch.no_grad():
            for name, t in module_tensors(m, config.include_buffers).items():
                t.copy_(torch.from_numpy(manifest.split(weights)[name]).reshape(t.shape))
        return m

    def make_fabric(self, model: Any, args: NodeArgs) -> KitFabric:
        from delta_fabric.stores.torch import TorchStore

        return args.fabric(TorchStore(model, args.config.include_buffers))

    def sgd_step(self, model: Any, x: Any, y: Any, lr: float) -> tuple[Any, float]:
        """One plain SGD step in training mode; the training-mode logits and the loss."""
        import torch
        from torch.nn import functional as F

        model.train()
        model.zero_grad()
        logits = model(torch.from_numpy(x))
        loss = F.cross_entropy(logits, torch.from_numpy(y))
        loss.backward()  # type: ignore[no-untyped-call]
        with torch.no_grad():  # plain SGD (torch.optim.SGD without momentum, same arithmetic)
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
        return logits.detach().numpy(), float(loss.item())

    def train_step(self, model: Any, fabric: KitFabric, x: Any, y: Any, lr: float) -> Any:
        self.sgd_step(model, x, y, lr)
        fabric.step()
        return model

    def forward_check(
        self,
        manifest: Manifest,
        weights: NDArray[np.float32],
        include_buffers: bool,
        x: NDArray[np.float32],
        y: NDArray[np.int64],
        lr: float,
    ) -> ForwardResult:
        import torch
        from delta_fabric.stores.torch import TorchStore

        model = self.make_model(manifest, weights, SyncConfig.v1_0(include_buffers=include_buffers))
        model.eval()
        with torch.no_grad():
            logits_eval = model(torch.from_numpy(x)).numpy()
        logits_train, loss = self.sgd_step(model, x, y, lr)
        after = TorchStore(model, include_buffers).gather()
        return logits_eval, logits_train, loss, np.asarray(after, dtype=np.float32)

    def predict(self, model: Any, fabric: KitFabric, x: Any) -> NDArray[np.int64]:
        import torch

        model.eval()
        with torch.no_grad():
            out: NDArray[np.int64] = model(torch.from_numpy(x)).argmax(dim=1).numpy()
        model.train()
        return out

    def active(self, model: Any, fabric: KitFabric) -> NDArray[np.float32]:
        return np.asarray(fabric.active_vector(), dtype=np.float32)


def make_driver() -> Driver:
    return Driver("python", "torch", TorchKit())


if __name__ == "__main__":
    sys.exit(main(make_driver()))
