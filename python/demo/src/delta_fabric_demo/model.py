"""The demo's CNN (identical on the Burn side, interop/crates/df-node) and its canonical weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from delta_fabric.manifest import Manifest
from delta_fabric.stores.torch import module_manifest, module_tensors
from numpy.typing import NDArray
from torch import nn
from torch.nn import functional as F

__all__ = ["DigitsCNN", "init_model", "load_canonical", "save_canonical"]


class DigitsCNN(nn.Module):
    """conv1 = Conv2d(1,16,3,padding=1); bn1 = BatchNorm2d(16); relu; max_pool2d(2) (8x8 -> 4x4);
    flatten 256; fc1 = Linear(256,64); relu; fc2 = Linear(64,10). Input: pixel/16 as [B,1,8,8]."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.fc1 = nn.Linear(256, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        out: torch.Tensor = self.fc2(x)
        return out


def init_model(seed: int) -> DigitsCNN:
    """The initial model every node starts from (``torch.manual_seed(seed)`` then PyTorch's
    init)."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = DigitsCNN()
    torch.random.set_rng_state(gen_state)
    return model


def canonical_vector(model: nn.Module, include_buffers: bool) -> NDArray[np.float32]:
    """The model's synchronised tensors as one flat f32 vector in canonical order (DF-MAN-3)."""
    tensors = module_tensors(model, include_buffers)
    with torch.no_grad():
        flat = torch.cat([t.detach().reshape(-1).to(torch.float32).cpu() for t in tensors.values()])
    out: NDArray[np.float32] = flat.numpy().copy()
    return out


def save_canonical(model: nn.Module, include_buffers: bool, path: Path) -> Manifest:
    """Write the canonical weights as raw little-endian f32 to ``path`` (and return the
    manifest)."""
    path.write_bytes(canonical_vector(model, include_buffers).astype("<f4").tobytes())
    return module_manifest(model, include_buffers)


def load_canonical(model: nn.Module, include_buffers: bool, path: Path) -> None:
    """Overwrite the synchronised tensors from a raw f32 canonical file."""
    tensors = module_tensors(model, include_buffers)
    flat = np.fromfile(path, dtype="<f4").astype(np.float32)
    total = sum(t.numel() for t in tensors.values())
    if flat.size != total:
        raise ValueError(f"{path}: {flat.size} values, the model has {total}")
    off = 0
    with torch.no_grad():
        for t in tensors.values():
            n = t.numel()
            t.copy_(torch.from_numpy(flat[off : off + n]).view(t.shape).to(t.dtype))
            off += n
