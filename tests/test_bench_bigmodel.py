"""The reduced form of bench/bench_bigmodel.py: 3 nodes in memory, a small MLP, 2 syncs at the demo's
settings (and at the old F32 settings, given as options).
Checks what the bench reports, not timings: every node accepted every own entry of the two others,
the bytes per node per sync are those of one own entry and the relays, and the figures are present."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from delta_fabric_demo.lockstep import DEMO_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "options",
    [
        [],  # the demo's defaults (DEMO_DEFAULTS)
        "--ratio 0.05 --interval 10 --encoding F32 --index-encoding PLAIN --relay all "
        "--average-over 1".split(),
    ],
)
def test_bigmodel_reduced(tmp_path: Path, options: list[str]) -> None:
    out = tmp_path / "big.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_bigmodel.py"), "--width", "64", *options]
    interval = (
        int(options[options.index("--interval") + 1]) if options else DEMO_DEFAULTS["interval"]
    )
    cmd += ["--steps", str(2 * interval), "--transport", "memory", "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    assert "sync / train:" in r.stdout
    d = json.loads(out.read_text())
    assert d["params"] == 64 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert d["interval"] == interval
    if not options:
        assert (d["ratio"], d["encoding"], d["index_encoding"], d["relay"]) == (
            DEMO_DEFAULTS["ratio"],
            DEMO_DEFAULTS["encoding"],
            DEMO_DEFAULTS["index_encoding"],
            DEMO_DEFAULTS["relay_policy"].lower(),
        )
        assert d["average_over"] == 3
    # 2 syncs per node, one own entry each (the selected parameters fit one packet)
    for node, accepted in enumerate(d["accepted_by_origin"], start=1):
        assert accepted == {f"{o:x}": 2 for o in (1, 2, 3) if o != node}
    k = math.ceil(d["params"] * d["ratio"])  # values per own entry at most (DF-GEN-2)
    for per_sync in d["bytes_per_node_per_sync"]:
        assert 0 < per_sync < 3 * (8 * k + 300)  # own entry + at most two relays, 8 B/value
    assert d["packets_received"] > 0 and d["sync_s"] > 0 and d["train_s"] > 0
    assert d["receive_s"] + d["generate_s"] + d["pack_s"] <= d["sync_s"]


def test_bigmodel_bad_option() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "bench_bigmodel.py"), "--ratio", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "ratio" in r.stderr
