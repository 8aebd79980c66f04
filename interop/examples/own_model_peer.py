"""The PyTorch peer of the Burn example ``cargo run -p df-burn --example own_model``.

Defines the same MLP (``fc1: Linear(4, 16)``, ReLU, ``fc2: Linear(16, 1)``), starts from the same
initial weights (drawn from one seed in canonical order by the same SplitMix64 generator), trains on its
own shard of the same synthetic task, syncs with the Burn nodes over Zenoh and ends with
``Fabric.finish``. Same stdout protocol as the Rust example (see its module documentation)::

    python interop/examples/own_model_peer.py --node-id 0c --peers 0a,0b \\
        --listen tcp/127.0.0.1:7502 --connect tcp/127.0.0.1:7500 --connect tcp/127.0.0.1:7501 \\
        --out c.f32

Without ``--node-id`` it takes its settings from the launcher's variables (``Fabric.from_env``), so
that ``delta-fabric run`` starts it next to a Burn node started the same way::

    delta-fabric run --listen tcp/127.0.0.1:7500 --advertise 127.0.0.1 --world-size 2 \\
        interop/examples/own_model_peer.py --out a.f32
    delta-fabric run --connect tcp/127.0.0.1:7500 --world-size 2 --first-rank 1 \\
        --no-python target/debug/examples/own_model --out b.f32
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
import torch
from delta_fabric.config import SyncConfig
from delta_fabric.fabric import Fabric
from delta_fabric.stores.torch import TorchStore, module_tensors
from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport
from torch import nn

_M64 = (1 << 64) - 1


class SplitMix64:
    """The generator of the Rust example (same constants, same 24-bit unit floats)."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _M64

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def unit(self) -> float:
        return float(np.float32(self.next_u64() >> 40) / np.float32(1 << 24))


class Mlp(nn.Module):
    """The user's model (canonical names = these state_dict keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def initial_weights(seed: int, n: int) -> np.ndarray:
    r = SplitMix64(seed)
    return np.array([np.float32(r.unit()) - np.float32(0.5) for _ in range(n)], dtype=np.float32)


def shard(index: int) -> tuple[torch.Tensor, torch.Tensor]:
    r = SplitMix64(1000 + index)
    xs, ys = [], []
    for _ in range(256):
        v = [np.float32(2.0 * r.unit() - 1.0) for _ in range(4)]
        ys.append(math.sin(v[0]) + 0.5 * v[1] * v[2] - 0.3 * v[3])
        xs.append(v)
    return torch.tensor(xs, dtype=torch.float32), torch.tensor(ys, dtype=torch.float32)[:, None]


def canonical(module: nn.Module) -> np.ndarray:
    tensors = module_tensors(module, False)
    return np.concatenate([t.detach().cpu().numpy().ravel() for t in tensors.values()])


def emit(event: dict[str, object]) -> None:
    print(json.dumps(event), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--node-id", default=None, type=lambda s: int(s, 16))
    p.add_argument("--index", type=int, default=None)
    p.add_argument("--peers", default="", help="comma-separated hex ids of the other nodes")
    p.add_argument("--listen", default=None)
    p.add_argument("--connect", action="append", default=[])
    p.add_argument("--namespace", default="deltafabric/own-model")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args()
    peers = [int(s, 16) for s in a.peers.split(",") if s]
    from delta_fabric import env

    if a.index is None:
        a.index = env.rank() or 0

    torch.manual_seed(0)
    model = Mlp()
    init = initial_weights(a.seed, sum(t.numel() for t in module_tensors(model, False).values()))
    with torch.no_grad():
        off = 0
        for t in module_tensors(model, False).values():
            t.copy_(torch.from_numpy(init[off : off + t.numel()]).view_as(t))
            off += t.numel()

    # the recommended profile (averaged over the cluster: the single-node learning rate), with
    # more of this small model's weights sent more often, as the Rust example
    config = SyncConfig(ratio=0.5, sync_interval=5)
    if a.node_id is None:  # under delta-fabric run: every setting from its variables
        fabric = Fabric.from_env(TorchStore(model), config)
        transport = fabric.transport
        transport.wait_for_peers((env.nodes() or 1) - 1, a.timeout)
    else:
        transport = ZenohTransport(
            ZenohOptions(
                node_id=a.node_id,
                namespace=a.namespace,
                listen=[a.listen] if a.listen else [],
                connect=a.connect,
            )
        )
    try:
        if a.node_id is not None:
            transport.wait_for_peers(len(peers), a.timeout, expected=peers)
            fabric = Fabric(TorchStore(model), transport, config, node_id=a.node_id)
        emit({"event": "ready", "node": f"{fabric.node_id:016x}", "num_params": fabric.num_params})
        xs, ys = shard(a.index)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        rng = SplitMix64(2000 + a.index)
        loss = torch.zeros(())
        for _ in range(a.steps):
            idx = torch.tensor([rng.next_u64() % len(ys) for _ in range(16)])
            opt.zero_grad()
            loss = ((model(xs[idx]) - ys[idx]) ** 2).mean()
            loss.backward()
            opt.step()
            fabric.step()
        # one call to finish: every live peer's last entry applied, the shared model in the store
        shared = fabric.finish(a.timeout)
        emit(
            {
                "event": "finished",
                "node": f"{fabric.node_id:016x}",
                "seq": fabric.engine.next_seq - 1,
                "loss": float(loss),
            }
        )
        shared.astype("<f4").tofile(a.out)
        emit({"event": "done", "stats": fabric.stats()})
    finally:
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
