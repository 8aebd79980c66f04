"""The demo's weight-agreement figure (DF-NUM-1's measure) and its traffic totals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from delta_fabric_demo.runner import (
    AGREEMENT_TOLERANCE,
    _agreement,
    _traffic,
    max_relative_difference,
    relative_difference,
)


def test_relative_difference_is_df_num_1s_measure() -> None:
    # REQ: DF-NUM-1
    a = np.array([0.8, -0.2, 0.1], dtype=np.float32)
    b = np.array([0.8, -0.2, 0.14], dtype=np.float32)
    assert relative_difference(a, b) == pytest.approx(0.04 / 0.8, rel=1e-6)
    assert relative_difference(a, b) <= AGREEMENT_TOLERANCE == 5e-2
    c = np.array([0.8, -0.2, 0.15], dtype=np.float32)
    assert relative_difference(a, c) > AGREEMENT_TOLERANCE
    assert relative_difference(a, a) == 0.0
    z = np.zeros(3, dtype=np.float32)
    assert relative_difference(z, z) == 0.0
    assert relative_difference(a, np.array([np.nan, 0, 0], dtype=np.float32)) == math.inf
    assert max_relative_difference([a]) is None
    assert max_relative_difference([a, b, c]) == pytest.approx(0.05 / 0.8, rel=1e-5)


def _write(d: Path, name: str, v: list[float]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.f32").write_bytes(np.asarray(v, dtype="<f4").tobytes())


def test_agreement_from_the_nodes_weight_files(tmp_path: Path) -> None:
    nodes = [{"index": i} for i in range(3)]
    for i in range(3):
        d = tmp_path / f"sync-node{i}"
        _write(d, "step000000", [1.0, 0.0])
        _write(d, "step000010", [1.0, 0.1 * i])
        _write(d, "final", [1.0, 0.01 * i])
    _write(tmp_path / "sync-node0", "step000020", [1.0, 0.0])  # only one node reached step 20
    ag = _agreement(tmp_path, "sync", nodes)
    assert ag["curve"] == [[0, 0.0], [10, pytest.approx(0.2)]]
    assert ag["final"] == pytest.approx(0.02) and ag["within_tolerance"] is True
    assert ag["nodes_compared"] == 3 and ag["nodes_without_weights"] == 0
    # a node that writes no weights (a native node without --weights-dir) is left out and counted
    ag = _agreement(tmp_path, "sync", [*nodes, {"index": 3}])
    assert ag["nodes_compared"] == 3 and ag["nodes_without_weights"] == 1
    # fewer than two nodes with weights: no figure, and not within the tolerance
    ag = _agreement(tmp_path, "sync", nodes[:1])
    assert ag["final"] is None and ag["within_tolerance"] is False and ag["curve"] == []
    # diverged weights: no figure is invented (JSON has no inf), the check fails
    _write(tmp_path / "sync-node2", "final", [float("nan"), 0.0])
    ag = _agreement(tmp_path, "sync", nodes)
    assert ag["final"] is None and ag["within_tolerance"] is False


def test_traffic_totals_at_steps_every_node_reported() -> None:
    nodes = [
        {"traffic": [[0, 0, 0, 0], [10, 100, 50, 20], [20, 200, 90, 40]]},
        {"traffic": [[0, 0, 0, 0], [10, 10, 5, 2]]},
        {"traffic": None},  # a node that reports none is left out
    ]
    assert _traffic(nodes) == [[0, 0, 0, 0], [10, 110, 55, 22]]
    assert _traffic([{"traffic": None}]) == []


def test_versions_name_the_native_node_and_its_burn(tmp_path: Path) -> None:
    from delta_fabric_demo.runner import _versions

    fake = tmp_path / "df-node"
    fake.write_text("#!/bin/sh\necho 'df-node 9.9.9'\n")
    fake.chmod(0o755)
    v = _versions({"burn": str(fake)})
    assert v["df-node"] == "df-node 9.9.9"
    lock = Path(__file__).resolve().parents[1] / "interop" / "Cargo.lock"
    assert f'name = "burn"\nversion = "{v["burn"]}"' in lock.read_text()
    assert v["protocol"] == "1.1" and v["delta-fabric"] == "0.1.0"
    broken = tmp_path / "no-version"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    assert _versions({"burn": str(broken)})["df-node"] is None
