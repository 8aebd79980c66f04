"""Logging: logger ``delta_fabric``, silent by default; ``DELTA_FABRIC_LOG`` turns on ours and Zenoh's."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from delta_fabric import Fabric, NumpyStore, SyncConfig
from delta_fabric.log import LOG_ENV, enable_logging, env_level
from delta_fabric.ports import free_port
from delta_fabric.transports.memory import MemoryHub


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in (LOG_ENV, "RUST_LOG")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=full,
    )


MEMORY_NODES = """
import numpy as np
from delta_fabric import Fabric, MemoryHub, NumpyStore, SyncConfig
hub = MemoryHub()
w = np.zeros(4, np.float32)
a = Fabric.v1_0(NumpyStore({"w": w}), hub.transport(1), SyncConfig.v1_0(), node_id=1)
b = Fabric.join(NumpyStore({"w": np.ones(4, np.float32)}), hub.transport(2), node_id=2)
w[0] = 1.0
a.sync_now()
hub.transport(3).publish(b"junk")
b.step()
a.close(close_transport=True)
b.close(close_transport=True)
print("ok")
"""


def test_silent_by_default() -> None:
    assert any(
        isinstance(h, logging.NullHandler) for h in logging.getLogger("delta_fabric").handlers
    )
    out = run(MEMORY_NODES)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n" and out.stderr == ""


def test_env_var_turns_on_our_log() -> None:
    out = run(MEMORY_NODES, DELTA_FABRIC_LOG="debug")
    assert out.returncode == 0, out.stderr
    err = out.stderr
    for needle in (
        "INFO delta_fabric.fabric: node 0000000000000001 started",
        "INFO delta_fabric.fabric: snapshot served",
        "INFO delta_fabric.fabric: snapshot fetched: 4 values",
        "bootstrapped from a peer's snapshot",
        "DEBUG delta_fabric.fabric: packet 1 of 2 rejected: BAD_IDENTIFIER",
        "INFO delta_fabric.fabric: node 0000000000000002 closed",
    ):
        assert needle in err, (needle, err)
    info = run(MEMORY_NODES, DELTA_FABRIC_LOG="info")
    assert "snapshot served" in info.stderr and "rejected" not in info.stderr


def test_env_var_turns_on_zenoh_log_and_transport_events() -> None:
    pytest.importorskip("zenoh")
    p1, p2 = free_port(), free_port()
    code = f"""
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport
    a = ZenohTransport(ZenohOptions(node_id=1, namespace="dftest/log",
                                    listen=["tcp/127.0.0.1:{p1}"]))
    b = ZenohTransport(ZenohOptions(node_id=2, namespace="dftest/log",
                                    listen=["tcp/127.0.0.1:{p2}"],
                                    connect=["tcp/127.0.0.1:{p1}"]))
    a.wait_for_peers(1, 20.0)
    b.close()
    import time
    deadline = time.monotonic() + 20.0
    while a.peers() and time.monotonic() < deadline:
        time.sleep(0.02)
    a.close()
    """
    out = run(code, DELTA_FABRIC_LOG="info")
    assert out.returncode == 0, out.stderr
    err = out.stderr
    assert "transport of node 0000000000000002 open: namespace dftest/log, mode peer, " in err
    assert f"connect ['tcp/127.0.0.1:{p1}']" in err
    assert "delta_fabric.transport: peer 0000000000000002 joined" in err
    assert "delta_fabric.transport: peer 0000000000000002 left" in err
    assert "transport of node 0000000000000001 closed" in err
    assert "zenoh" in out.stdout and "INFO" in out.stdout  # Zenoh's own log (on stdout)
    assert "\x1b[" not in out.stdout  # no colour codes through a pipe
    assert "Gossip is disabled" not in out.stdout  # every gossip-less peer session says it
    quiet = run(code)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""


def test_in_process_records_and_levels(caplog: pytest.LogCaptureFixture) -> None:
    hub = MemoryHub()
    with caplog.at_level(logging.DEBUG, logger="delta_fabric"):
        fab = Fabric.v1_0(NumpyStore({"w": np.zeros(2, np.float32)}), hub.transport(1), SyncConfig.v1_0(),
                     node_id=1)  # fmt: skip
        hub.transport(2).publish(b"\x00" * 8)
        fab.step()
    msgs = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("delta_fabric.fabric", logging.DEBUG, "packet 0 of 1 rejected: BAD_IDENTIFIER") in msgs
    assert any(n == "delta_fabric.fabric" and "started" in m for n, _, m in msgs)


def test_level_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in (("", None), ("off", None), ("DEBUG", "debug"), ("bogus", "info")):
        monkeypatch.setenv(LOG_ENV, raw)
        assert env_level() == want
    with pytest.raises(ValueError):
        enable_logging("loud")
