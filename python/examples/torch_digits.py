"""Three nodes, each seeing only some classes of scikit-learn's digits, train one model together.

Every node trains a small CNN (no BatchNorm) on its own classes (rank 0: 0-3, rank 1: 4-6, rank 2: 7-9, the demo's
label-skewed split) with the learning rate of a single node, and DeltaFabric keeps the model in sync
with its defaults. At the end ``fabric.finish()`` makes the nodes agree, and every node scores the
shared model on all ten classes: a node alone scores about 0.3 (its own classes only), the cluster
above 0.95. Nothing to download: the digits ship with scikit-learn.

    delta-fabric run --nodes 3 python/examples/torch_digits.py

Across two machines (or two launchers on one), the first prints the line that the second runs::

    delta-fabric run --listen tcp/0.0.0.0:7447 --nodes 2 --world-size 3 torch_digits.py
    delta-fabric run --connect tcp/<first>:7447 --world-size 3 --nodes 1 --first-rank 2 torch_digits.py

Each node shards the data by its global rank (``RANK``, ``WORLD_SIZE``), as under ``torchrun``.
``--out FILE`` saves the shared model's canonical weights (``.npy``).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from delta_fabric import Fabric, SyncConfig
from delta_fabric.stores.torch import TorchStore
from torch import nn


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every node
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(256, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def load_digits_split(
    rank: int, world: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's training classes (label-skewed: ``np.array_split`` of the ten classes) and the
    shared test set of 360 images on all ten classes."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = np.asarray(d.data, dtype=np.float32) / 16.0
    y = np.asarray(d.target, dtype=np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=360, stratify=y, random_state=0)
    mine = np.array_split(np.arange(10), world)[rank] if world <= 10 else [rank % 10]
    keep = np.isin(ytr, mine)
    return (
        torch.from_numpy(xtr[keep]),
        torch.from_numpy(ytr[keep]),
        torch.from_numpy(xte),
        torch.from_numpy(yte),
    )


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def train(fabric: Fabric, model: nn.Module, rank: int, world: int, steps: int) -> float:
    """The training loop of one node; returns the shared model's test accuracy after `finish`."""
    xtr, ytr, xte, yte = load_digits_split(rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # a single node's rate
    gen = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        batch = torch.randint(0, ytr.numel(), (32,), generator=gen)
        loss = nn.functional.cross_entropy(model(xtr[batch]), ytr[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        fabric.step()  # send my progress, apply everyone else's
    fabric.finish(timeout=120.0)  # every node ends with the same shared model, now in `model`
    return accuracy(model, xte, yte)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    model = make_model()
    with Fabric.from_env(TorchStore(model), SyncConfig()) as fabric:
        fabric.transport.wait_for_peers(world - 1, timeout=120.0)
        acc = train(fabric, model, rank, world, args.steps)
        if args.out:
            np.save(args.out, fabric.active_vector())
    print(f"rank {rank} of {world}: shared model test accuracy {acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
