"""The reduced convergence sweep of issue 11 (``bench/sweep_converge.py ci``): the grid cells where
protocol 1.0's sums collapsed or dipped, run in the deterministic lockstep simulator with the demo's
defaults (averaging over the cluster, relay policy NEEDED, Q8 values, PACKED indices, every node
holding its residual aside), and a low-ratio cell that failed the bar before the residual was held
aside. A collapse or a cell below the bar fails CI, and so does the demo's default cell (3 nodes, 10 % every 20) falling below its regression
floor on seed 0 (shared model >= 0.95 at >= 178x fewer wire bytes than dense fp32; 181.6x measured,
issue 11's bar is 100x). The simulator does not depend on machine load, so
neither does this test. Cost: 5 runs of 1,200 steps (the first 4 measured 69-412 s per run, 797 s
in all, the 5-node run the longest, on the 2-core development machine at a load average of 15-20;
135 s for the 4 at a load average of 10), plus one cell with every node holding its residual aside
(DF-GEN-240: 3 nodes 1 % every 40, whose shared model ended at 0.711 without it and 0.975 with it;
47-62 s at a load average of 6). The 10 % every 80 cell runs with the demo's outer step below 1
(`average_over` 6, DF-GEN-300): 0.958, >= 0.906 after step 300 (0.603 with `average_over` 3); the
6 runs took 384 s at a load average of 6 (session 6). The 3 nodes 1 % every 80 cell pins the milder
outer step of the demo's rule when ``ratio * interval <= 1`` (`average_over` 5: 0.875, >= 0.656 after
step 300; with the 10 % rule's `average_over` 6 it fell to 0.447), session 7."""

from __future__ import annotations

import importlib.util
import json
import math
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
    assert out.count(": ok") == len(sweep.CI_CELLS) + len(sweep.CI_HELD_CELLS), out
    assert out.count("residual held aside") >= len(sweep.CI_HELD_CELLS), out
    assert "bar met" in out, out


def _row(
    seed: int, shared: float, shared_after: float, working: float, working_after: float
) -> str:
    return json.dumps(
        {
            "mode": "fabric",
            "nodes": 3,
            "ratio": 0.01,
            "interval": 40,
            "seed": seed,
            "final_min": working,
            "min_after_300": working_after,
            "shared_final_min": shared,
            "shared_min_after_300": shared_after,
            "wire_compression": 2000.0 + seed,
            "nonfinite": seed == 1,
        }
    )


def test_table_summarises_a_grid_run_in_several_invocations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``table`` reads the rows of several ``grid`` invocations (seed 0 first, then the others) and
    gives one row per cell: the lowest figures over the seeds, on the shared model and on the working
    weights, each judged against the bar (final >= 0.80, >= 0.5 after step 300). Cost: < 1 s."""
    sweep = _sweep()
    first, rest = tmp_path / "seed0.jsonl", tmp_path / "seeds12.jsonl"
    first.write_text(_row(0, 0.90, 0.60, 0.85, 0.55) + "\n")
    rest.write_text(
        _row(1, 0.95, 0.70, 0.30, 0.29) + "\n\n" + _row(2, 0.79, 0.65, 0.81, 0.51) + "\n"
    )
    rc = sweep.main(["table", "--rows", f"{first},{rest}"])
    out = capsys.readouterr().out
    assert rc == 1, out  # seed 2's shared model ends below 0.80
    cell = [line for line in out.splitlines() if line.startswith("| 3 | 1% | 40 |")]
    assert cell == [
        "| 3 | 1% | 40 | 0,1,2 | 2000.0 | 0.790 | 0.600 | 0.300 | 0.290 | 1/3 | 2/3 | 2/3 |"
    ], out
    assert "3 runs in 1 cells" in out and "shared model 2/3, working weights 2/3" in out, out
    first.write_text(_row(0, 0.90, 0.60, 0.30, 0.29) + "\n")
    assert sweep.main(["table", "--rows", str(first)]) == 0  # judged on the shared model


@pytest.mark.parametrize(
    "argv",
    [
        ["table"],
        ["table", "--rows", "/nonexistent/rows.jsonl"],
        ["bar", "--settings", "0.1-20"],
        ["cells", "--cells", "3:0.1"],
    ],
)
def test_bad_options_give_one_line_and_exit_2(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = _sweep()
    with pytest.raises(SystemExit) as e:
        sweep.main([*argv, "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("sweep_converge: "), err


def test_periodic_averaging_is_bracketed_around_our_bytes() -> None:
    """An all-reduce every k steps takes whole numbers of averagings: the baseline runs at the most
    averagings whose bytes stay at or below ours, and at one averaging more. Cost: < 1 s."""
    sweep = _sweep()
    for k, more in ((64, 60), (134, 120), (300, 240), (1, 1), (1200, 600)):
        assert sweep._one_more_average(k, 1200) == more
        if k > 1:
            assert math.ceil(1200 / more) == math.ceil(1200 / k) + 1


def test_bar_writes_its_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``bar`` at two short settings: our run and periodic averaging at the two bracketing k, one
    table row each (also written to ``bar-3nodes.md``) and the plot of accuracy against wire bytes.
    At 10 % every 20 over 40 steps even one averaging costs more bytes than ours, so only the
    bracket above ours runs. Cost: 5 simulated runs of 40 steps (12 s at a load average of 5)."""
    pytest.importorskip("matplotlib")
    sweep = _sweep()
    argv = ["bar", "--steps", "40", "--settings", "0.1/2,0.1/20", "--seeds", "0"]
    rc = sweep.main([*argv, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [json.loads(line) for line in (tmp_path / "bar.jsonl").read_text().splitlines()]
    modes = [r["mode"] for r in rows]
    assert modes == ["fabric", "periodic", "periodic", "fabric", "periodic"], rows
    ours, le, ge = rows[:3]
    # the baseline's bytes bracket ours: at most ours, then one averaging more
    assert (le["interval"], ge["interval"]) == (40, 20), rows
    assert le["wire_bytes"] <= ours["wire_bytes"] < ge["wire_bytes"], rows
    assert rows[3]["wire_bytes"] < rows[4]["wire_bytes"] and rows[4]["interval"] == 40, rows
    table = (tmp_path / "bar-3nodes.md").read_text()
    assert table.count("| 10% / 2 |") == 1 and table.count("| 10% / 20 |") == 1, table
    assert "none: one averaging costs more" in table and table in out + "\n", out
    assert (tmp_path / "bar-3nodes.png").stat().st_size > 0
