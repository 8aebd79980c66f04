"""kill -9 of one of four paced nodes, and its restart (issue 12 item 5, DF-ZEN-156).

Four Python nodes on tcp/127.0.0.1 (scouting off, a namespace of this test) train a noisy quadratic
towards one shared target (no noise: the loss falls all along a clean run), pacing on their live peers with a maximum lead of 2 rounds. Node 3 is
killed with SIGKILL, then restarted from a peer's snapshot. Judged on state, not on time: each survivor
logs, every step, the peers it sees live and the peers that held its pacing back
(`Fabric.pace_blockers`). After the kill the dead node holds a survivor back in at most 2 steps (the
wait in progress at the kill and one more: its deadline counts once, DF-ZEN-156), every survivor sees
its token go, and after that it never holds anybody back until it rejoins. The survivors' steps per
second in the 5 s after the kill against the 5 s before are printed, not asserted (they move with the
machine's load: a ratio bar of 0.9 failed under a load of 8). The loss (RMS distance to the target)
after the rejoin is compared with the loss before the kill. Bounded: every node stops after its
duration, the test after 120 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from delta_fabric.ports import free_port as _free_port

pytest.importorskip("zenoh")

HERE = Path(__file__).parent
NODE = HERE / "fault_pacing_node.py"
WINDOW = 5.0


def _start(
    nid: int, ns: str, ports: list[int], end: float, join: bool, out: Path
) -> subprocess.Popen[bytes]:
    connect = ",".join(str(p) for p in ports[:nid])
    args = [str(nid + 1), ns, str(ports[nid]), connect, str(end), "1" if join else "0"]
    with out.open("w") as f:
        return subprocess.Popen(
            [sys.executable, str(NODE), *args],
            stdout=f,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "off"},
        )


def _lines(out: Path) -> list[dict[str, Any]]:
    text = out.read_text() if out.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def _rate(rows: list[dict[str, Any]], t0: float, t1: float) -> float:
    steps = [r["step"] for r in rows if "step" in r and t0 <= r["t"] < t1]
    return (max(steps) - min(steps)) / (t1 - t0) if len(steps) > 1 else 0.0


def _mean_loss(rows: list[dict[str, Any]], t0: float, t1: float) -> float:
    losses = [r["loss"] for r in rows if "loss" in r and t0 <= r["t"] < t1]
    assert losses, (t0, t1)
    return sum(losses) / len(losses)


def test_kill_one_of_four_and_restart_it(tmp_path: Path) -> None:
    # REQ: DF-ZEN-156
    ns = f"dftest/pacing{os.getpid()}"
    ports = [_free_port() for _ in range(4)]
    end = time.monotonic() + 75.0
    outs = [tmp_path / f"node{i}.jsonl" for i in range(5)]
    procs = [_start(i, ns, ports, end, False, outs[i]) for i in range(4)]
    restarted: subprocess.Popen[bytes] | None = None
    try:
        # wait until every node has taken 50 paced steps, then let them run for 2 windows
        deadline = time.monotonic() + 40.0
        while time.monotonic() < deadline and not all(
            any(r.get("step", 0) >= 50 for r in _lines(o)) for o in outs[:4]
        ):
            time.sleep(0.5)
        assert time.monotonic() < deadline, "the cluster did not start"
        time.sleep(2 * WINDOW)
        t_kill = time.monotonic()
        procs[3].send_signal(signal.SIGKILL)
        procs[3].wait(10)
        time.sleep(2 * WINDOW)
        t_rejoin = time.monotonic()
        restarted = _start(3, ns, ports, end, True, outs[4])
        for p in [*procs[:3], restarted]:
            p.wait(max(1.0, end - time.monotonic() + 30.0))
    finally:
        for p in [*procs, *([restarted] if restarted is not None else [])]:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    rows = [_lines(o) for o in outs[:3]]
    rows_new = _lines(outs[4])
    before = [_rate(r, t_kill - WINDOW, t_kill) for r in rows]
    after = [_rate(r, t_kill, t_kill + WINDOW) for r in rows]
    ratios = [a / b for a, b in zip(after, before, strict=True)]
    # accuracy: the loss falls all along a clean run; the survivors' loss in the last 3 s against
    # their loss in the second before the rejoin (a joiner that did not start from the anchor
    # would send the whole distance to the target as deltas and push everybody past it)
    loss_before = [_mean_loss(r, t_rejoin - 1.0, t_rejoin) for r in rows]
    t_end = min(max(x["t"] for x in r if "t" in x) for r in rows)
    loss_after = [_mean_loss(r, t_end - 3.0, t_end) for r in rows]
    new_loss = _mean_loss(rows_new, t_end - 3.0, t_end)
    print(
        f"\nsteps/s before the kill {[round(x, 1) for x in before]}, "
        f"after {[round(x, 1) for x in after]}, ratio {[round(x, 3) for x in ratios]}; "
        f"loss before the rejoin {[round(x, 5) for x in loss_before]}, "
        f"at the end {[round(x, 5) for x in loss_after]}, restarted node {new_loss:.5f} "
        f"({rows_new[0]})"
    )
    dead = 4  # node 3's id
    for i, r in enumerate(rows):
        window = [x for x in r if "step" in x and t_kill < x["t"] < t_rejoin]
        held = [x for x in window if dead in x["held_by"]]
        # the dead node costs a survivor at most the wait in progress at the kill and one more
        # (its progress deadline counts once, not once per round)
        assert len(held) <= 2, (i, held)
        gone = [k for k, x in enumerate(window) if dead not in x["live"]]
        assert gone, f"survivor {i} still saw the killed node live at the rejoin"
        # once its token went it holds nobody back, and it does not come back before its rejoin
        assert all(dead not in x["held_by"] and dead not in x["live"] for x in window[gone[0] :])
        # only live peers ever hold a node back (DF-ZEN-156)
        assert all(set(x["held_by"]) <= set(x["live"]) for x in r if "step" in x)
    # the restarted node rejoined from a snapshot: it trains with the others, pulls nobody away
    assert rows_new[0].get("bootstrapped") is True
    assert all(la <= lb for la, lb in zip(loss_after, loss_before, strict=True))
    assert new_loss <= 1.1 * max(loss_after)
