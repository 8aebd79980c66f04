"""Keep your own PyTorch model in sync across processes with DeltaFabric.

A small MLP (yours would go here) learns a synthetic regression task; every process trains on its own
data shard and the nodes exchange sparse weight deltas over Zenoh. Run three nodes on one machine:

    python torch_own_model.py --node 1 --nodes 3 --port 7451 &
    python torch_own_model.py --node 2 --nodes 3 --port 7451 &
    python torch_own_model.py --node 3 --nodes 3 --port 7451

Node ``i`` listens on ``tcp/127.0.0.1:<port + i - 1>`` and connects to the nodes before it (scouting
off). The rules a user must know: every node starts from the same weights (same seed here, or pass
``bootstrap="auto"`` to load a live peer's) and node ids are unique. The learning rate is a single
node's: ``SyncConfig()`` averages the nodes' progress. ``fabric.finish()`` ends the run with the same
shared model on every node; ``--out`` saves it (canonical weights) as ``.npy``.

``torch_launch.py`` is the same script with its settings read from environment variables
(``Fabric.from_env``), for ``delta-fabric run --nodes 3 python/examples/torch_launch.py``.
"""

from __future__ import annotations

import argparse

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


def shard(node: int, n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """This node's data: y = sin(x . w_true), the same w_true everywhere, different x per node."""
    w_true = torch.linspace(-1.0, 1.0, 8)
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(1000 + node))
    return x, torch.sin(x @ w_true).unsqueeze(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--node", type=int, required=True)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--port", type=int, default=7451)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--out", default=None)
    args = p.parse_args()

    torch.manual_seed(0)  # identical initial weights on every node
    model = MLP()
    x, y = shard(args.node)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)  # a single node's learning rate
    with torch.no_grad():
        first_loss = float(nn.functional.mse_loss(model(x), y))

    # --- DeltaFabric glue --------------------------------------------------------------------
    from delta_fabric import Fabric, SyncConfig
    from delta_fabric.stores.torch import TorchStore
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    endpoint = "tcp/127.0.0.1:{}".format
    options = ZenohOptions(
        node_id=args.node,
        namespace="examples/torch-own-model",
        listen=[endpoint(args.port + args.node - 1)],
        connect=[endpoint(args.port + i - 1) for i in range(1, args.node)],
    )
    with (
        ZenohTransport(options) as transport,
        Fabric(TorchStore(model), transport, SyncConfig(), node_id=args.node) as fabric,
    ):
        transport.wait_for_peers(args.nodes - 1, timeout=60.0)
        for _ in range(args.steps):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            fabric.step()  # send my progress, apply everyone else's
        weights = fabric.finish(timeout=60.0)  # the shared model, the same on every node
    # -----------------------------------------------------------------------------------------

    with torch.no_grad():
        final_loss = float(nn.functional.mse_loss(model(x), y))
    print(f"node {args.node}: loss {first_loss:.4f} -> {final_loss:.4f}", flush=True)
    if args.out:
        np.save(args.out, weights)


if __name__ == "__main__":
    main()
