"""python/examples: a user's own PyTorch model synced across 3 processes over loopback Zenoh.

Each node runs the example script as a user would (its own process, Zenoh on tcp/127.0.0.1 with
scouting off); the nodes' final canonical weights must agree within the spec's tolerance after the
script's quiescent drain (DF-NUM-1), and every node must have learned (loss down).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from delta_fabric.ports import ephemeral_low, free_port

pytest.importorskip("torch")
pytest.importorskip("zenoh")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "python" / "examples" / "torch_own_model.py"
NODES = 3


def free_base_port(n: int) -> int:
    """A base port with ``n`` consecutive free ports (checked by binding them), all below the
    kernel's ephemeral range (`delta_fabric.ports`: never a source port of another connection)."""
    for _ in range(50):
        base = free_port()
        if base + n >= ephemeral_low():
            continue
        socks = []
        try:
            for i in range(n):
                t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(t)
                t.bind(("127.0.0.1", base + i))
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
        return base
    raise RuntimeError("no block of free ports")


def test_torch_own_model_three_processes_agree(tmp_path: Path) -> None:
    # REQ: DF-NUM-1
    port = free_base_port(NODES)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLE),
                "--node",
                str(i),
                "--nodes",
                str(NODES),
                "--port",
                str(port),
                "--steps",
                "200",
                "--out",
                str(tmp_path / f"w{i}.npy"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(1, NODES + 1)
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    for i, out in enumerate(outs, 1):
        m = re.search(rf"node {i}: loss ([0-9.]+) -> ([0-9.]+)", out)
        assert m is not None, out
        assert float(m.group(2)) < 0.5 * float(m.group(1)), out
    w = [np.load(tmp_path / f"w{i}.npy") for i in range(1, NODES + 1)]
    assert all(x.dtype == np.float32 and x.shape == w[0].shape for x in w)
    for a in range(NODES):
        for b in range(a + 1, NODES):
            diff = float(np.abs(w[a] - w[b]).max())
            scale = max(float(np.abs(w[a]).max()), float(np.abs(w[b]).max()))
            assert diff <= 5e-2 * scale, (a + 1, b + 1, diff, scale)
