"""The demo's JAX node (delta_fabric_demo.jax_node) in a cluster with a PyTorch node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax", reason="the JAX demo node needs jax (pip install 'delta-fabric[jax]')")
pytest.importorskip("torch", reason="the demo's reference nodes need torch")
pytest.importorskip("zenoh", reason="demo nodes talk over Zenoh")


def test_demo_torch_and_jax_nodes_exchange_deltas(tmp_path: Path) -> None:
    """REQ: DF-MAN-6, DF-MAN-5: a PyTorch node and a JAX node of the digits CNN share one
    fingerprint and accept each other's entries."""
    out = tmp_path / "demo"
    proc = subprocess.run(
        [
            sys.executable, "-m", "delta_fabric_demo",
            "--frameworks", "torch,jax", "--steps", "60", "--eval-every", "30",
            "--skip-nosync", "--skip-baseline", "--no-plot",
            "--json", "--no-progress", "--output", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    sync = summary["runs"]["sync"]["nodes"]
    assert [n["framework"] for n in sync] == ["torch", "jax"]
    assert summary["num_params"] == 17322
    assert all(n["curve"][-1][0] == 60 for n in sync)
    assert all(n["stats"]["receive"]["entries_accepted"] > 0 for n in sync)
    assert all(n["stats"]["fingerprint"] == sync[0]["stats"]["fingerprint"] for n in sync)
