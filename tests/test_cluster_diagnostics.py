"""Diagnostics of a node that cannot join (no root needed: loopback only).

A refused or unreachable node must say why: the error names the likely causes, the one seen in Zenoh's
log first, and quotes Zenoh's log line; never a bare ``PeerTimeoutError ... 0 present``. The nodes run
in subprocesses (tests/cluster_probe.py), because the library's Zenoh log capture redirects the
process's stdout. Also: ``delta-fabric router`` starts, serves two clients, and stops on SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from delta_fabric.ports import free_port as _free_port

pytest.importorskip("zenoh")

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "cluster_probe.py"
NS = "dftest/diag"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python" / "src"), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.pop("DELTA_FABRIC_LOG", None)
    env.pop("RUST_LOG", None)
    return env


def _probe(config: Path, seconds: float = 2.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROBE), "open", str(config), "0x7", NS, str(seconds)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )


def _write(path: Path, config: dict[str, object]) -> Path:
    path.write_text(json.dumps(config))
    return path


class Router:
    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-m", "delta_fabric.cli", "router", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        )
        assert self.p.stdout is not None
        seen = []
        for line in self.p.stdout:  # Zenoh's log lines, then ours; ends at exit (EOF)
            seen.append(line)
            if line.startswith("router ") and " ready" in line:
                break
        else:
            raise AssertionError(f"the router did not start: {''.join(seen)}")

    def stop(self) -> tuple[int, str]:
        self.p.send_signal(signal.SIGTERM)
        out, _ = self.p.communicate(timeout=30)
        return self.p.returncode, out


def test_unreachable_router_is_named_as_the_cause(tmp_path: Path) -> None:
    # REQ: DF-ZEN-14 (client mode through a router: a clear error when the router is not there)
    port = _free_port()
    config = _write(
        tmp_path / "client.json5",
        {
            "mode": "client",
            "connect": {"endpoints": [f"tcp/127.0.0.1:{port}"]},
            "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
        },
    )
    res = _probe(config)
    assert res.returncode == 3, res
    out = res.stdout
    assert out.startswith("TransportError: cannot open the Zenoh session"), out
    causes = [ln for ln in out.splitlines() if ln.startswith("  - ")]
    assert causes[0].startswith("  - endpoint unreachable [seen in the Zenoh log]"), out
    assert "Zenoh log:" in out and f"127.0.0.1:{port}" in out.split("Zenoh log:")[1], out


def test_peer_that_sees_nobody_gets_the_diagnosis_not_a_bare_timeout(tmp_path: Path) -> None:
    port = _free_port()
    config = _write(
        tmp_path / "peer.json5",
        {
            "mode": "peer",
            "listen": {"endpoints": []},
            "connect": {"endpoints": [f"tcp/127.0.0.1:{port}"]},
            "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
        },
    )
    res = _probe(config, seconds=1.0)
    assert res.returncode == 3, res
    out = res.stdout
    assert out.startswith("PeerTimeoutError: waited 1s for 1 peer(s), 0 present"), out
    assert "likely causes (config file" in out, out
    for cause in ("endpoint unreachable", "certificate refused", "access control denial"):
        assert f"  - {cause}" in out, out


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_router_refuses_a_client_without_certificate_and_says_why(tmp_path: Path) -> None:
    # REQ: DF-ZEN-14 (mutual TLS through the user's Zenoh config)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(
            ["openssl", *args], check=True, capture_output=True, timeout=60, cwd=tmp_path
        )

    openssl(
        "req", "-x509", *ec, "-days", "1", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.pem"
    )
    openssl("req", *ec, "-subj", "/CN=router", "-keyout", "r.key", "-out", "r.csr")
    (tmp_path / "r.ext").write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n")
    openssl(
        *("x509", "-req", "-in", "r.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"),
        *("-days", "1", "-extfile", "r.ext", "-out", "r.pem"),
    )
    port = _free_port()
    tls = {
        "root_ca_certificate": str(tmp_path / "ca.pem"),
        "listen_certificate": str(tmp_path / "r.pem"),
        "listen_private_key": str(tmp_path / "r.key"),
        "enable_mtls": True,
    }
    router_config = _write(
        tmp_path / "router.json5",
        {
            "listen": {"endpoints": [f"tls/127.0.0.1:{port}"]},
            "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
            "transport": {"link": {"tls": tls}},
        },
    )
    stranger = _write(
        tmp_path / "stranger.json5",
        {
            "mode": "client",
            "connect": {"endpoints": [f"tls/127.0.0.1:{port}"]},
            "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
            "transport": {"link": {"tls": {"root_ca_certificate": str(tmp_path / "ca.pem")}}},
        },
    )
    router = Router("--zenoh-config", str(router_config), "--log", "warn")
    try:
        t0 = time.monotonic()
        res = _probe(stranger)
        assert time.monotonic() - t0 < 60
    finally:
        rc, _ = router.stop()
    assert rc == 0
    out = res.stdout
    assert res.returncode == 3, res
    causes = [ln for ln in out.splitlines() if ln.startswith("  - ")]
    assert causes[0].startswith("  - certificate refused [seen in the Zenoh log]"), out
    assert "CertificateRequired" in out.split("Zenoh log:")[1], out
    assert "0 present" not in out


def test_router_cli_rejects_a_missing_config_file(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "delta_fabric.cli", "router", "--zenoh-config", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert res.returncode == 2
    assert res.stderr.strip() == f"delta-fabric router: no such file: {tmp_path / 'x'}"


_CAPTURE_SCRIPT = """
import sys, zenoh
from delta_fabric import log
assert log.capture_zenoh_log()
print("program line 1", flush=True)
c = zenoh.Config()
c.insert_json5("mode", '"client"')
c.insert_json5("connect/endpoints", '["tcp/127.0.0.1:%d"]')
c.insert_json5("scouting/multicast/enabled", "false")
try:
    zenoh.open(c)
except Exception:
    pass
sys.stdout.write("program line 2\\n")
lines = log.zenoh_log_lines()
print("captured", len(lines), any("Unable to connect" in ln for ln in lines), flush=True)
"""


@pytest.mark.parametrize("echo", [False, True])
def test_log_capture_keeps_zenoh_lines_and_passes_the_program_output(echo: bool) -> None:
    env = _env()
    if echo:
        env["DELTA_FABRIC_LOG"] = "warning"
    res = subprocess.run(
        [sys.executable, "-c", _CAPTURE_SCRIPT % _free_port()],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert res.returncode == 0, res
    out = res.stdout.splitlines()
    program = [ln for ln in out if ln.startswith(("program", "captured"))]
    assert program[:2] == ["program line 1", "program line 2"], out
    assert program[2].startswith("captured ") and program[2].endswith(" True"), out
    zenoh_lines = [ln for ln in out if "Unable to connect" in ln]
    assert bool(zenoh_lines) == echo, out  # shown only when DELTA_FABRIC_LOG is set
