"""Lifecycle: a script with an open Zenoh transport exits promptly however it ends, with the transport
closed and a one-line reason on stderr (delta_fabric.lifecycle).

Each case runs a real child process: a Zenoh transport on tcp/127.0.0.1 (scouting off) under a
`Fabric`, then the script raises, gets SIGINT or SIGTERM, forgets ``close()``, or closes normally.
Waits are generous (30 s) so that load cannot flake the test; the measured exit times are printed
(``pytest -s``) and written to ``$DELTA_FABRIC_EXIT_TIMES`` when that variable names a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from delta_fabric.ports import free_port

pytest.importorskip("zenoh")

WAIT = 30.0

SCRIPT = """
import sys, time
import numpy as np
from delta_fabric import Fabric, NumpyStore, SyncConfig
from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

case = sys.argv[1]
t = ZenohTransport(ZenohOptions(node_id=7, namespace="dftest/life", listen=[sys.argv[2]]))
fab = Fabric.v1_0(NumpyStore({{"w": np.zeros(4, np.float32)}}), t, SyncConfig.v1_0(), node_id=7)
fab.step()
{body}
"""

BODIES = {
    "raise": 'print("last", time.time(), flush=True)\nraise RuntimeError("boom")',
    "forgot_close": 'print("last", time.time(), flush=True)',
    "signal": 'print("ready", time.time(), flush=True)\ntime.sleep(120)',
    "close": 'fab.close(close_transport=True)\nprint("last", time.time(), flush=True)',
    "with": (
        "fab.close()\n"
        "with ZenohTransport(ZenohOptions(node_id=8, namespace='dftest/life',"
        " listen=[sys.argv[3]])) as t2:\n"
        "    pass\n"
        "t.close()\n"
        'print("last", time.time(), flush=True)'
    ),
}


def record(case: str, seconds: float) -> None:
    print(f"exit time [{case}]: {seconds:.3f} s")
    path = os.environ.get("DELTA_FABRIC_EXIT_TIMES")
    if path:
        p = Path(path)
        data = json.loads(p.read_text()) if p.exists() else {}
        data[case] = round(seconds, 3)
        p.write_text(json.dumps(data, indent=1))


def run_case(
    tmp_path: Path, body: str, case: str, sig: signal.Signals | None = None
) -> tuple[int, str, str, float]:
    script = tmp_path / f"{case}.py"
    script.write_text(textwrap.dedent(SCRIPT.format(body=body)))
    env = dict(os.environ, DELTA_FABRIC_LOG="info", RUST_LOG="off")
    args = [
        sys.executable,
        str(script),
        case,
        f"tcp/127.0.0.1:{free_port()}",
        f"tcp/127.0.0.1:{free_port()}",
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "last <t>" or "ready <t>", or "" if the child died
        assert line.split()[:1] in (["last"], ["ready"]), (line, proc.stderr and proc.stderr.read())
        start = float(line.split()[1])
        if sig is not None:
            start = time.time()
            proc.send_signal(sig)
        try:
            rest, err = proc.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{case}: the process did not exit within {WAIT}s")
        elapsed = time.time() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    record(case, elapsed)
    return proc.returncode, line + rest, err, elapsed


def reason_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("delta_fabric: closing")]


def assert_closed_once(err: str) -> None:
    assert err.count("transport of node 0000000000000007 closed") == 1, err


def test_uncaught_exception_exits_and_closes(tmp_path: Path) -> None:
    rc, _, err, _ = run_case(tmp_path, BODIES["raise"], "raise")
    assert rc == 1
    assert "RuntimeError: boom" in err
    assert reason_lines(err) == [
        "delta_fabric: closing 1 open transport at exit (uncaught RuntimeError)"
    ]
    assert_closed_once(err)


def test_forgotten_close_exits_and_closes(tmp_path: Path) -> None:
    rc, _, err, _ = run_case(tmp_path, BODIES["forgot_close"], "forgot_close")
    assert rc == 0
    assert reason_lines(err) == [
        "delta_fabric: closing 1 open transport at exit (not closed by the program)"
    ]
    assert_closed_once(err)


def test_sigterm_exits_and_closes(tmp_path: Path) -> None:
    rc, _, err, _ = run_case(tmp_path, BODIES["signal"], "sigterm", signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM
    assert reason_lines(err) == ["delta_fabric: closing 1 open transport at exit (SIGTERM)"]
    assert_closed_once(err)


def test_sigint_exits_and_closes(tmp_path: Path) -> None:
    rc, _, err, _ = run_case(tmp_path, BODIES["signal"], "sigint", signal.SIGINT)
    assert rc in (1, -signal.SIGINT, 128 + signal.SIGINT)  # Python re-raises SIGINT on exit
    assert "KeyboardInterrupt" in err
    assert reason_lines(err) == ["delta_fabric: closing 1 open transport at exit (SIGINT)"]
    assert_closed_once(err)


@pytest.mark.parametrize("case", ["close", "with"])
def test_normal_close_exits_silently(tmp_path: Path, case: str) -> None:
    rc, _, err, _ = run_case(tmp_path, BODIES[case], case)
    assert rc == 0, err
    assert reason_lines(err) == []
    assert_closed_once(err)


def test_user_sigterm_handler_is_kept(tmp_path: Path) -> None:
    """A SIGTERM handler the application installed is not replaced; the exit hook still closes."""
    script = tmp_path / "own.py"
    src = textwrap.dedent(SCRIPT.format(body="")).replace(
        "case = sys.argv[1]",
        "import signal\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('own handler', flush=True),"
        " sys.exit(3)))\n"
        "case = sys.argv[1]",
    )
    src += 'print("ready", time.time(), flush=True)\ntime.sleep(120)\n'
    script.write_text(src)
    proc = subprocess.Popen(
        [sys.executable, str(script), "own", f"tcp/127.0.0.1:{free_port()}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("ready")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert "own handler" in out
    assert proc.returncode == 3
    # the user's handler ran (not ours), and the exit hook still closed the transport
    assert reason_lines(err) == [
        "delta_fabric: closing 1 open transport at exit (not closed by the program)"
    ]
