"""The quick form of the fault report (``bench/fault_report.py --quick``, issue 12 item 9): the lighter
faults (the source of a joiner's snapshot killed mid-transfer beside a poisoning stranger, a partition
that heals, a garbage and hostile-packet flood, the 248-byte packet, forged seq / incarnation / origin
floods) each against a clean run measured in the same invocation, real node processes over real Zenoh
on loopback (scouting off, tcp/127.0.0.1, a namespace per run, a user-space proxy for the cut).

Asserts the report's structure and every verdict judged on counts and exact state (which seqs every
node accepted from every other, what each refused and why, which anchor a joiner installed), never a
wall-time figure: accuracy against the clean run and stalls are reported, not asserted. kill -9 with
pacing has its own CI test (tests/test_fault_pacing.py); delay with stalls is judged by accuracy, a
figure of the full run.

CI cost: six clusters of three or four Python node processes, 60 steps each (plus a 2 s cut): 117 s
and 121 s measured at load 10-11 on 2 cores (`pytest -q tests/test_fault_report.py`); less on a quiet
machine.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("zenoh")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fault_report", ROOT / "bench/fault_report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fault_report"] = mod
    spec.loader.exec_module(mod)
    return mod


FR = _load()


def test_bad_options_give_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["--out", "x", "--only", "nosuch"],
        ["--out", "x", "--seed", "-1"],
        ["--only", "flood"],
        ["--out", "x", "--cut-seconds", "0"],
        ["--out", "x", "--bogus"],
    ):
        assert FR.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("fault_report.py: "), err


def test_quick_report_of_the_lighter_faults(tmp_path: Path) -> None:
    # REQ: DF-RCV-50, DF-ERR-50, DF-SEC-142, DF-ZEN-151, DF-ZEN-152, DF-ZEN-154, DF-RCV-160, DF-RCV-162
    report = FR.run_report(tmp_path, FR.LIGHT, quick=True, seed=0, command="test", keep_going=False)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    md = (tmp_path / "report.md").read_text()
    assert list(report["faults"]) == list(FR.LIGHT)
    for name, r in report["faults"].items():
        assert f"| {name} |" in md
        # the figures of every fault: accuracy, peak memory of every node process, the longest
        # stall, counters of every finished node
        assert 0.0 <= r["accuracy_mean"] <= 1.0
        assert r["peak_rss_mib"] and all(v > 10 for v in r["peak_rss_mib"].values()), r
        assert r["longest_stall_s"] > 0.0
        assert set(r["counters"]) == set(r["accuracy"])
        for v in r["verdicts"]:
            assert v["basis"] in ("exact", "figure")
            if v["basis"] == "exact":  # judged on counts and state: must hold at any load
                assert v["pass"], (name, v, json.dumps(r, indent=1)[:4000])
        assert r["all_finite"] and r["exact_delivery"], (name, r)
    f = report["faults"]
    # the 248-byte packet: refused whole on every node, counted, no weight moved to a non-finite
    assert f["packet248"]["details"]["packet_bytes"] == 248
    for c in f["packet248"]["counters"].values():
        assert c["receive_errors"]["NON_FINITE_RESULT"] >= 1
    # forged claims: refused (unsigned or badly signed entries, strangers' keys), never tracked
    assert all(n == 2 for n in f["forged"]["origins_tracked"].values())
    # the flood: refused before the queue, no packet evicted from a queue, no member entry lost
    assert f["flood"]["details"]["stranger_puts"] == FR.QUICK.flood_puts
    for c in f["flood"]["counters"].values():
        assert c["transport"]["dropped_packets"] == 0 and c["transport"]["rejected_not_member"] > 0
    # the partition: entries were lost during the cut and every one was resent
    rep = [c["repair"] for c in f["partition"]["counters"].values()]
    assert sum(r.get("entries_resent", 0) for r in rep) > 0
    assert all(r.get("seqs_given_up", 0) == 0 for r in rep)
    # the snapshot: the source died mid-transfer, the stranger was refused, the joiner installed an
    # honest anchor and finished with the others
    d = f["snapshot_kill"]["details"]
    assert d["source_killed"] and d["joiner_bootstrapped"]
    assert d["joiner_snapshot_trust"]["sources_failed"] >= 1
    assert d["joiner_snapshot_trust"]["sources_refused"] >= 1
    assert "13" in f["snapshot_kill"]["accuracy"]
