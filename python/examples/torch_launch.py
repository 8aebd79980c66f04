"""Your own PyTorch training script, started by ``delta-fabric run`` (or alone).

The same MLP as ``torch_own_model.py``, but every setting comes from the ``DELTA_FABRIC_*`` environment
variables that the launcher sets (node id, endpoints, namespace, sync parameters), read by
``Fabric.from_env``. Three nodes on this machine:

    delta-fabric run --nodes 3 python/examples/torch_launch.py --out /tmp/weights

Alone (no variable set: one node with a random id, no peers):

    python python/examples/torch_launch.py

Each node trains on its own data shard, waits for the ``DELTA_FABRIC_NODES - 1`` other nodes before it
starts (the script's choice: the library never waits, DF-ZEN-16), and ends with ``fabric.finish()``,
which leaves the same shared model on every node. ``--out DIR`` saves the final canonical weights as
``DIR/<node id>.npy``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def shard(seed: int, n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """This node's data: y = sin(x . w_true), the same w_true everywhere, different x per node."""
    w_true = torch.linspace(-1.0, 1.0, 8)
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
    return x, torch.sin(x @ w_true).unsqueeze(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--out", type=Path, default=None, help="directory for <node id>.npy")
    p.add_argument("--peer-timeout", type=float, default=60.0)
    args = p.parse_args()

    from delta_fabric import Fabric, SyncConfig, env
    from delta_fabric.stores.torch import TorchStore

    world = env.nodes() or 1
    torch.manual_seed(0)  # identical initial weights on every node
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.2)  # a single node's learning rate

    # SyncConfig() is the recommended profile; DELTA_FABRIC_RATIO, ..._SYNC_INTERVAL... override it
    with Fabric.from_env(TorchStore(model), SyncConfig()) as fabric:
        accepted: Counter[int] = Counter()  # entries accepted per origin (each is accepted once)
        fabric.on_accepted = lambda entries: accepted.update(e.origin for e in entries)
        x, y = shard(1000 + fabric.node_id % 1_000_000)
        with torch.no_grad():
            first_loss = float(nn.functional.mse_loss(model(x), y))
        peers = fabric.transport.wait_for_peers(world - 1, timeout=args.peer_timeout)
        for _ in range(args.steps):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            fabric.step()  # send my progress, apply everyone else's
        weights = fabric.finish(timeout=60.0)  # every node ends with the same shared model
        last_seq = fabric.engine.next_seq - 1
        node = f"{fabric.node_id:016x}"
        progress = {f"{q:016x}": seq for q, (_, seq) in sorted(fabric.origin_progress().items())}
        counts = {f"{q:016x}": n for q, n in sorted(accepted.items())}

    with torch.no_grad():
        final_loss = float(nn.functional.mse_loss(model(x), y))
    print(f"node {node}: {len(peers)} peers, loss {first_loss:.4f} -> {final_loss:.4f}", flush=True)
    # the last entry (seq) accepted from each origin; every node sends `last_seq` entries
    print(
        f"node {node} progress: last seq {last_seq}, from origins {json.dumps(progress)}",
        flush=True,
    )
    print(f"node {node} accepted entries: {json.dumps(counts)}", flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        np.save(args.out / f"{node}.npy", weights)


if __name__ == "__main__":
    main()
