"""The PyTorch driver (registry name ``python``): the kit plus PyTorch's digits CNN and store.

Run as ``python -m delta_fabric_conformance.drivers.torch``. The model is the reference digits CNN (spec
section 4.5): conv1 = Conv2d(1,16,3,padding=1); bn1 = BatchNorm2d(16); relu; max_pool2d(2); flatten
(C, H, W order) 256; fc1 = Linear(256,64); relu; fc2 = Linear(64,10). Input: pixels/16 as [B,1,8,8].
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from delta_fabric.adapters.torch import Fabric, module_manifest, module_tensors
from delta_fabric.config import SyncConfig
from delta_fabric.manifest import Manifest
from numpy.typing import NDArray
from torch import nn
from torch.nn import functional as F

from delta_fabric_conformance.kit import Driver, KitFabric, NodeArgs, main


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


class TorchKit:
    """:class:`~delta_fabric_conformance.kit.ModelKit` for PyTorch (in place: the model is the store)."""

    framework = "torch"

    def make_model(
        self, manifest: Manifest, weights: NDArray[np.float32], config: SyncConfig
    ) -> Any:
        # one intra-op thread: live scenarios run several nodes on few cores (15x slower otherwise)
        torch.set_num_threads(1)
        m = DigitsCNN()
        if module_manifest(m, config.include_buffers) != manifest:
            raise ValueError("DigitsCNN's manifest differs from the scenario model's")
        with torch.no_grad():
            for name, t in module_tensors(m, config.include_buffers).items():
                t.copy_(torch.from_numpy(manifest.split(weights)[name]).reshape(t.shape))
        return m

    def make_fabric(self, model: Any, args: NodeArgs) -> KitFabric:
        return args.build(Fabric, model)

    def train_step(self, model: Any, fabric: KitFabric, x: Any, y: Any, lr: float) -> Any:
        model.train()
        model.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()  # type: ignore[no-untyped-call]
        with torch.no_grad():  # plain SGD (torch.optim.SGD without momentum, same arithmetic)
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
        fabric.step()
        return model

    def predict(self, model: Any, fabric: KitFabric, x: Any) -> NDArray[np.int64]:
        model.eval()
        with torch.no_grad():
            out: NDArray[np.int64] = model(torch.from_numpy(x)).argmax(dim=1).numpy()
        model.train()
        return out

    def active(self, model: Any, fabric: KitFabric) -> NDArray[np.float32]:
        return np.asarray(fabric.active_vector(), dtype=np.float32)  # type: ignore[attr-defined]


def torch_apply(active: Any, indices: Any, values: Any) -> NDArray[np.float32]:
    """DF-RCV-7 through PyTorch: ``index_add_`` in f32, as the adapter applies an aggregate."""
    t = torch.from_numpy(active)
    t.index_add_(0, torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(values))
    out: NDArray[np.float32] = t.numpy()
    return out


def make_driver() -> Driver:
    return Driver("python", "torch", TorchKit(), apply=torch_apply)


if __name__ == "__main__":
    sys.exit(main(make_driver()))
