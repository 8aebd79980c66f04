"""The reduced convergence sweep of issue 11 (``bench/sweep_converge.py ci``): the grid cells where
protocol 1.0's sums collapsed or dipped, run in the deterministic lockstep simulator with the demo's
defaults (averaging over the cluster, relay policy NEEDED, Q8 values, PACKED indices). A collapse
fails CI, and so does the demo's default cell (3 nodes, 10 % every 20) falling below its regression
floor on seed 0 (shared model >= 0.95 at >= 178x fewer wire bytes than dense fp32; 181.6x measured,
issue 11's bar is 100x). The simulator does not depend on machine load, so
neither does this test. Cost: 5 runs of 1,200 steps (the first 4 measured 69-412 s per run, 797 s
in all, the 5-node run the longest, on the 2-core development machine at a load average of 15-20;
135 s for the 4 at a load average of 10)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[1]


def _sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sweep_converge", ROOT / "bench/sweep_converge.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sweep_converge"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_no_collapse_on_the_cells_that_collapsed_with_sums(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = _sweep()
    rc = sweep.main(["ci", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count(": ok") == len(sweep.CI_CELLS), out
    assert "bar met" in out, out
