"""Test oracle: K SGD steps of the digits CNN in PyTorch from canonical weights, on fixed batches.

Usage: python torch_steps.py INIT.f32 DATA_DIR OUT.f32 STEPS LR MOMENTUM BATCH
Step s trains on training samples [s*BATCH, (s+1)*BATCH). Reads/writes canonical vectors (sorted
state_dict keys without num_batches_tracked, running statistics included; raw little-endian f32).
Self-contained (torch + numpy only) so the Rust test does not depend on the demo package.
"""

import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.fc1 = nn.Linear(256, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def tensors(m):
    sd = m.state_dict(keep_vars=True)
    return {k: sd[k] for k in sorted(sd) if not k.endswith("num_batches_tracked")}


def main() -> None:
    init, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
    steps, lr, momentum, batch = (
        int(sys.argv[4]),
        float(sys.argv[5]),
        float(sys.argv[6]),
        int(sys.argv[7]),
    )
    torch.set_num_threads(1)
    m = Net()
    flat = np.fromfile(init, dtype="<f4")
    off = 0
    with torch.no_grad():
        for t in tensors(m).values():
            n = t.numel()
            t.copy_(torch.from_numpy(flat[off : off + n].copy()).view(t.shape))
            off += n
    assert off == flat.size
    x = torch.from_numpy(
        np.fromfile(f"{data}/train_x.f32", dtype="<f4").reshape(-1, 1, 8, 8).copy()
    )
    y = torch.from_numpy(np.fromfile(f"{data}/train_y.u8", dtype=np.uint8).astype(np.int64))
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)
    m.train()
    for s in range(steps):
        xb, yb = x[s * batch : (s + 1) * batch], y[s * batch : (s + 1) * batch]
        opt.zero_grad()
        F.cross_entropy(m(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        res = torch.cat([t.detach().reshape(-1) for t in tensors(m).values()]).numpy()
    res.astype("<f4").tofile(out)


if __name__ == "__main__":
    main()
