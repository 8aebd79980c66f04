"""python/examples/jax_own_model.py: a user-defined JAX model synced across 3 processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax", reason="the JAX example needs jax (pip install 'delta-fabric[jax]')")
pytest.importorskip("zenoh", reason="the JAX example runs its nodes over Zenoh")

ROOT = Path(__file__).resolve().parents[1]


def test_jax_own_model_nodes_agree() -> None:
    """REQ: DF-NUM-1: three processes train their own JAX MLP through JaxStore and the Zenoh
    transport; after `finish()` every two nodes' canonical weights agree within the
    tolerance (the script exits 1 otherwise, or if training diverged)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python" / "src"), *filter(None, [env.get("PYTHONPATH")])]
    )
    script = ROOT / "python" / "examples" / "jax_own_model.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--nodes", "3", "--steps", "1500", "--timeout", "200"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agree" in proc.stdout
    mse = [float(line.rsplit("=", 1)[1]) for line in proc.stdout.splitlines() if "mse" in line]
    assert len(mse) == 3 and max(mse) < 0.1, proc.stdout  # every node learned the whole curve
