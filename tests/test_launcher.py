"""``delta-fabric run`` (the launcher), ``Fabric.from_env`` and the ``DELTA_FABRIC_*`` variables,
duplicate node ids, ``delta-fabric status`` and the metrics JSON lines.

Every Zenoh node here is on tcp/127.0.0.1 with multicast and gossip scouting off (the launcher's
default). Every wait is bounded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from delta_fabric import Fabric, MemoryHub, NumpyStore, SyncConfig, ValueEncoding
from delta_fabric import env as dfenv
from delta_fabric.env import EnvError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "python" / "examples" / "torch_launch.py"
CLI = [sys.executable, "-m", "delta_fabric.cli"]
NODES = 3


def cli(
    *args: str, timeout: float = 60.0, extra_env: dict[str, str] | None = None, **kw: object
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **(extra_env or {}))
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kw,  # type: ignore[call-overload]
    )


# -- environment variables -------------------------------------------------------------------------


def test_sync_config_from_env_overrides_the_programs_defaults() -> None:
    env = {
        "DELTA_FABRIC_RATIO": "0.25",
        "DELTA_FABRIC_SYNC_INTERVAL": "3",
        "DELTA_FABRIC_ENCODING": "bf16",
        "DELTA_FABRIC_INCLUDE_BUFFERS": "yes",
        "DELTA_FABRIC_ALPHA": " ",  # empty counts as unset
    }
    c = SyncConfig.from_env(env, ratio=0.1, alpha=0.5, hop_limit=4)
    assert (c.ratio, c.sync_interval, c.alpha, c.hop_limit) == (0.25, 3, 0.5, 4)
    assert c.encoding is ValueEncoding.BF16 and c.include_buffers is True
    assert SyncConfig.from_env({}) == SyncConfig()


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("DELTA_FABRIC_RATIO", "abc"),
        ("DELTA_FABRIC_RATIO", "0"),
        ("DELTA_FABRIC_RATIO", "nan"),
        ("DELTA_FABRIC_ALPHA", "1.5"),
        ("DELTA_FABRIC_SYNC_INTERVAL", "0"),
        ("DELTA_FABRIC_SYNC_INTERVAL", "2.5"),
        ("DELTA_FABRIC_HOP_LIMIT", "256"),
        ("DELTA_FABRIC_ENCODING", "f64"),
        ("DELTA_FABRIC_INCLUDE_BUFFERS", "maybe"),
    ],
)
def test_bad_sync_variable_is_a_typed_error_naming_it(var: str, value: str) -> None:
    with pytest.raises(EnvError) as info:
        SyncConfig.from_env({var: value})
    assert info.value.variable == var and info.value.value == value
    assert str(info.value).startswith(f"{var}={value!r}: ")


def test_node_id_endpoints_and_launcher_variables() -> None:
    assert dfenv.node_id({"DELTA_FABRIC_NODE_ID": "0x2a"}) == 42
    assert dfenv.node_id({"DELTA_FABRIC_NODE_ID": str(2**64 - 1)}) == 2**64 - 1
    ids = {dfenv.node_id({}) for _ in range(8)}  # random 64-bit ids, never 0
    assert len(ids) == 8 and all(1 <= i < 2**64 for i in ids)
    for bad in ("0", "-1", str(2**64), "ten"):
        with pytest.raises(EnvError, match="DELTA_FABRIC_NODE_ID"):
            dfenv.node_id({"DELTA_FABRIC_NODE_ID": bad})
    env = {"DELTA_FABRIC_LISTEN": "tcp/127.0.0.1:1, tcp/127.0.0.1:2"}
    assert dfenv.endpoints(env, dfenv.LISTEN) == ["tcp/127.0.0.1:1", "tcp/127.0.0.1:2"]
    with pytest.raises(EnvError, match="DELTA_FABRIC_CONNECT"):
        dfenv.endpoints({"DELTA_FABRIC_CONNECT": "127.0.0.1:7447"}, dfenv.CONNECT)
    assert dfenv.nodes({"DELTA_FABRIC_NODES": "3"}) == 3 and dfenv.nodes({}) is None
    with pytest.raises(EnvError, match="DELTA_FABRIC_NODES"):
        dfenv.nodes({"DELTA_FABRIC_NODES": "0"})
    assert dfenv.bootstrap({"DELTA_FABRIC_BOOTSTRAP": "auto"}) == "auto"
    assert dfenv.bootstrap({"DELTA_FABRIC_BOOTSTRAP": "1"}) is True
    assert dfenv.bootstrap({}) is False
    with pytest.raises(EnvError, match="DELTA_FABRIC_METRICS_INTERVAL"):
        dfenv.metrics({"DELTA_FABRIC_METRICS_INTERVAL": "-1"})
    with pytest.raises(EnvError, match="DELTA_FABRIC_ZENOH_CONFIG"):
        dfenv.zenoh_config({"DELTA_FABRIC_ZENOH_CONFIG": "/nonexistent/zenoh.json5"})


# -- Zenoh: options, duplicate ids, Fabric.from_env, status ----------------------------------------

zenoh = pytest.importorskip("zenoh")

from delta_fabric.ports import free_port  # noqa: E402
from delta_fabric.transports import DuplicateNodeError  # noqa: E402
from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport  # noqa: E402


def test_zenoh_options_from_env(tmp_path: Path) -> None:
    env = {
        "DELTA_FABRIC_NODE_ID": "7",
        "DELTA_FABRIC_NAMESPACE": "team/run1",
        "DELTA_FABRIC_LISTEN": "tcp/127.0.0.1:7001",
        "DELTA_FABRIC_CONNECT": "tcp/127.0.0.1:7002,tcp/127.0.0.1:7003",
    }
    o = ZenohOptions.from_env(env=env)
    assert (o.node_id, o.namespace, o.mode) == (7, "team/run1", "peer")
    assert o.listen == ("tcp/127.0.0.1:7001",)
    assert o.connect == ("tcp/127.0.0.1:7002", "tcp/127.0.0.1:7003")
    assert not o.multicast_scouting and not o.gossip_scouting
    assert ZenohOptions.from_env(9, env).node_id == 9  # the argument wins
    with pytest.raises(EnvError, match="DELTA_FABRIC_NAMESPACE"):
        ZenohOptions.from_env(env={"DELTA_FABRIC_NAMESPACE": "a/*"})
    with pytest.raises(EnvError, match="DELTA_FABRIC_MODE"):
        ZenohOptions.from_env(env={"DELTA_FABRIC_MODE": "router"})
    # a config file is used as is; LISTEN / CONNECT replace its endpoints
    cfg = tmp_path / "zenoh.json5"
    cfg.write_text(
        '{mode: "peer", listen: {endpoints: ["tcp/127.0.0.1:1"]},'
        " scouting: {multicast: {enabled: false}, gossip: {enabled: false}}}"
    )
    o = ZenohOptions.from_env(
        env={"DELTA_FABRIC_ZENOH_CONFIG": str(cfg), "DELTA_FABRIC_LISTEN": "tcp/127.0.0.1:7001"}
    )
    built = json.loads(o.build_config().get_json("listen/endpoints"))
    assert o.config_file == cfg and built == ["tcp/127.0.0.1:7001"]


def test_duplicate_node_id_is_refused_through_liveliness() -> None:
    # REQ: DF-ZEN-7
    port = free_port()
    base = ZenohOptions(node_id=0xABC, namespace="dftest/dup", listen=[f"tcp/127.0.0.1:{port}"])
    with ZenohTransport(base) as first:
        dup = ZenohOptions(node_id=0xABC, namespace="dftest/dup", connect=[f"tcp/127.0.0.1:{port}"])
        with pytest.raises(DuplicateNodeError) as info:
            ZenohTransport(dup)
        assert info.value.node_id == 0xABC and "0000000000000abc" in str(info.value)
        # another id, or the same id in another namespace, is welcome
        for opts in (dup.with_node(0xABD), dataclasses.replace(dup, namespace="dftest/x")):
            with ZenohTransport(opts) as other:
                assert other.node_id in (0xABC, 0xABD)
        assert first.peers() <= {0xABD}


@pytest.fixture
def two_nodes() -> Iterator[tuple[list[Fabric], list[str]]]:
    """Two in-process nodes built by Fabric.from_env (as the launcher's variables would)."""
    ports = [free_port(), free_port()]
    eps = [f"tcp/127.0.0.1:{p}" for p in ports]
    with ExitStack() as stack:
        fabrics = []
        for i in range(2):
            env = {
                "DELTA_FABRIC_NODE_ID": str(0x51 + i),
                "DELTA_FABRIC_NAMESPACE": "dftest/status",
                "DELTA_FABRIC_LISTEN": eps[i],
                "DELTA_FABRIC_CONNECT": ",".join(eps[:i]),
                "DELTA_FABRIC_SYNC_INTERVAL": "2",
                "DELTA_FABRIC_RATIO": "0.5",
            }
            store = NumpyStore({"w": np.arange(16, dtype=np.float32)})
            fabrics.append(stack.enter_context(Fabric.from_env(store, env=env)))
        fabrics[0].transport.wait_for_peers(1, timeout=10.0)
        fabrics[1].transport.wait_for_peers(1, timeout=10.0)
        yield fabrics, eps


def test_fabric_from_env_and_status_of_a_live_cluster(
    two_nodes: tuple[list[Fabric], list[str]],
) -> None:
    # REQ: DF-ZEN-6
    fabrics, eps = two_nodes
    assert [f.node_id for f in fabrics] == [0x51, 0x52]
    assert fabrics[0].config.sync_interval == 2 and fabrics[0].config.ratio == 0.5
    for step in range(4):
        for f in fabrics:
            f.store.apply(np.array([step], np.uint32), np.array([1.0], np.float32))
            f.step()
    sent = [f.transport.stats.published_bytes for f in fabrics]
    assert all(s > 0 for s in sent)

    res = cli("status", "--connect", ",".join(eps), "--namespace", "dftest/status", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["namespace"] == "dftest/status"
    rows = {r["node"]: r for r in doc["nodes"]}
    assert set(rows) == {"0000000000000051", "0000000000000052"}
    for f in fabrics:
        row = rows[f"{f.node_id:016x}"]
        info = row["info"]
        assert row["alive"] is True
        assert info["fingerprint"] == f.fingerprint.hex() and info["framework"] == "numpy"
        assert info["incarnation"] == f"{f.incarnation:016x}" and info["N"] == 16
        # REQ: DF-ZEN-231 (the encodings it receives; every Python node receives them all)
        assert info["supports"] == {
            "encodings": ["F32", "F16", "BF16", "Q8"],
            "index_encodings": ["PLAIN", "PACKED"],
        }
        assert row["optional_encodings"] == "F16,BF16,Q8,PACKED"
        assert info["stats"]["steps"] == 4 and info["stats"]["syncs"] == 2
        assert info["stats"]["transport"]["published_bytes"] == f.transport.stats.published_bytes
        assert info["stats"]["transport"]["dropped_packets"] == 0
        assert info["stats"]["snapshots_served"] == 0  # an info query captures no snapshot

    table = cli("status", "--connect", ",".join(eps), "--namespace", "dftest/status")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "namespace dftest/status: 2 live node(s)"
    assert lines[1].split()[:6] == [
        "node",
        "framework",
        "N",
        "fingerprint",
        "incarnation",
        "optional_enc",
    ]
    assert [ln.split()[0] for ln in lines[2:]] == ["0000000000000051", "0000000000000052"]
    assert all(ln.split()[5] == "F16,BF16,Q8,PACKED" for ln in lines[2:])
    more = cli(
        "status", "--connect", ",".join(eps), "--namespace", "dftest/status", "--expect", "3"
    )
    assert more.returncode == 1 and "2 live node(s)" in more.stdout
    expect = cli(
        "status", "--connect", ",".join(eps), "--namespace", "dftest/other", "--expect", "1"
    )
    assert expect.returncode == 1 and "0 live node(s)" in expect.stdout


# -- metrics -----------------------------------------------------------------------------------------


def test_metrics_json_lines_from_step_and_close(tmp_path: Path) -> None:
    hub = MemoryHub()
    path = tmp_path / "m.jsonl"
    store = NumpyStore({"w": np.zeros(8, np.float32)})
    with Fabric.v1_0(store, hub.transport(1), node_id=1, metrics=path, metrics_interval=3600) as f:
        for _ in range(5):
            f.step()  # the first step writes (due at start); the next one is an hour away
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [ln["event"] for ln in lines] == ["step", "close"]
    assert [ln["steps"] for ln in lines] == [1, 5]
    assert lines[1]["node_id"] == "0000000000000001" and "transport" in lines[1]
    with pytest.raises(ValueError, match="metrics interval"):
        Fabric.v1_0(store, hub.transport(2), node_id=2, metrics=path, metrics_interval=0)
    with pytest.raises(OSError):
        Fabric.v1_0(store, hub.transport(3), node_id=3, metrics=tmp_path / "no" / "dir" / "m.jsonl")


# -- the launcher --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--nodes", "0", "x.py"],
        ["--nodes", "two", "x.py"],
        ["--timeout", "0", "x.py"],
        ["--timeout", "-1", "x.py"],
        ["--grace", "inf", "x.py"],
        ["--listen", "127.0.0.1:7447", "x.py"],
        ["--connect", "tcp/host", "x.py"],
        ["--node-id", "0", "x.py"],
        ["--metrics-interval", "0", "x.py"],
        ["--nodes", "2", "--world-size", "1", "x.py"],
        ["--zenoh-config", "/nonexistent.json5", "x.py"],
        ["--namespace", "a/*", "x.py"],
        ["--namespace", "/a", "x.py"],
        ["/nonexistent/train.py"],
        [],
    ],
)
def test_bad_run_option_is_one_line_and_exit_2(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('never run')\n")
    res = cli("run", *argv, cwd=tmp_path)
    assert res.returncode == 2, res
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("delta-fabric run: error: ") and "Traceback" not in res.stderr


def test_help_shows_defaults() -> None:
    for cmd in ("run", "status"):
        res = cli(cmd, "--help")
        assert res.returncode == 0
        assert "(default: " in res.stdout
    assert "--nodes NODES" in cli("run", "--help").stdout


SCRIPT = """
import os, sys, time
rank = int(os.environ["DELTA_FABRIC_LOCAL_RANK"])
print("rank", rank, "id", os.environ["DELTA_FABRIC_NODE_ID"], "of",
      os.environ["DELTA_FABRIC_LOCAL_NODES"], os.environ["DELTA_FABRIC_NODES"],
      "listen", os.environ["DELTA_FABRIC_LISTEN"], "connect", os.environ["DELTA_FABRIC_CONNECT"],
      flush=True)
marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marks")
os.makedirs(marks, exist_ok=True)
open(os.path.join(marks, str(rank)), "w").close()
if rank == int(sys.argv[1]):
    deadline = time.monotonic() + 30  # fail once every node has printed its line
    while len(os.listdir(marks)) < int(os.environ["DELTA_FABRIC_LOCAL_NODES"]):
        if time.monotonic() > deadline:
            sys.exit(99)
        time.sleep(0.05)
    print("failing", file=sys.stderr, flush=True)
    sys.exit(int(sys.argv[2]))
time.sleep(float(sys.argv[3]))
"""


def test_failing_node_stops_the_others_with_its_code(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    t0 = time.monotonic()
    res = cli("run", "--nodes", "3", "--grace", "2", str(script), "1", "7", "120", timeout=60)
    took = time.monotonic() - t0
    assert res.returncode == 7, res
    assert took < 30.0  # the others slept 120 s: they were stopped
    assert "[1]: failing" in res.stderr
    assert "node [1] exited with code 7: stopping the others" in res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "rank" in ln]
    assert sorted(ln[:4] for ln in lines) == ["[0]:", "[1]:", "[2]:"]
    ids = set()
    for ln in lines:
        m = re.match(r"\[(\d)\]: rank (\d) id (\d+) of 3 3 listen (\S+) connect (\S*)", ln)
        assert m is not None, ln
        assert m.group(1) == m.group(2)
        ids.add(int(m.group(3)))
        assert m.group(4).startswith("tcp/127.0.0.1:")
        assert len([c for c in m.group(5).split(",") if c]) == int(m.group(1))  # full mesh
    assert len(ids) == 3


def test_timeout_stops_every_node(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    res = cli(
        "run", "--nodes", "2", "--timeout", "3", "--grace", "2", str(script), "-1", "0", "120"
    )
    assert res.returncode == 124, res
    assert "--timeout 3s reached: stopping every node" in res.stderr


def test_join_line_lists_the_reachable_endpoints(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    port = free_port()
    res = cli(
        "run",
        "--nodes",
        "2",
        "--listen",
        f"tcp/127.0.0.1:{port}",
        "--advertise",
        "trainer-a.example",
        "--namespace",
        "team/run",
        "--world-size",
        "4",
        str(script),
        "-1",
        "0",
        "0",
        extra_env={"DELTA_FABRIC_RUN_KEY": RUN_KEY_HEX},
    )
    assert res.returncode == 0, res
    want = (
        f"to join this run: DELTA_FABRIC_RUN_KEY={RUN_KEY_HEX} delta-fabric run --connect "
        f"tcp/trainer-a.example:{port},tcp/trainer-a.example:{port + 1} --namespace team/run "
        f"--world-size 4 --nodes 2 --first-rank 2 {script} -1 0 0"
    )
    assert want in res.stderr.splitlines()
    assert f"listen tcp/127.0.0.1:{port + 1} connect tcp/127.0.0.1:{port}" in res.stdout


def test_run_three_nodes_of_the_example_agree(tmp_path: Path) -> None:
    # REQ: DF-NUM-1
    pytest.importorskip("torch")
    out = tmp_path / "weights"
    metrics = tmp_path / "metrics.jsonl"
    res = cli(
        "run",
        "--nodes",
        str(NODES),
        "--timeout",
        "280",
        "--metrics",
        str(metrics),
        str(EXAMPLE),
        "--steps",
        "200",
        "--out",
        str(out),
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    losses = re.findall(
        r"^\[\d\]: node ([0-9a-f]{16}): 2 peers, loss ([0-9.]+) -> ([0-9.]+)$", res.stdout, re.M
    )
    assert len(losses) == NODES, res.stdout
    for _, first, last in losses:
        assert float(last) < 0.5 * float(first)
    w = [np.load(out / f"{node}.npy") for node, _, _ in losses]
    assert all(x.dtype == np.float32 and x.shape == w[0].shape for x in w)
    for a in range(NODES):
        for b in range(a + 1, NODES):
            diff = float(np.abs(w[a] - w[b]).max())
            scale = max(float(np.abs(w[a]).max()), float(np.abs(w[b]).max()))
            assert diff <= 5e-2 * scale, (a, b, diff, scale)  # DF-NUM-1
            # finish() leaves the shared model on every node: equal up to summation order
            assert diff <= 1e-5 * max(1.0, scale), (a, b, diff, scale)
    closing_lines = [json.loads(ln) for ln in metrics.read_text().splitlines() if '"close"' in ln]
    assert sorted(c["node_id"] for c in closing_lines) == sorted(n for n, _, _ in losses)
    assert all(c["steps"] == 200 and c["bytes_sent"] > 0 for c in closing_lines)


def test_fabric_from_env_refuses_bad_input_and_leaves_nothing_open() -> None:
    from delta_fabric import lifecycle

    before = lifecycle.open_count()
    with pytest.raises(EnvError, match="DELTA_FABRIC_SYNC_INTERVAL"):
        Fabric.from_env(
            NumpyStore({"w": np.zeros(4, np.float32)}), env={"DELTA_FABRIC_SYNC_INTERVAL": "x"}
        )
    with pytest.raises(TypeError, match="WeightStore"):
        Fabric.from_env(object(), env={"DELTA_FABRIC_NODE_ID": "3"})  # type: ignore[arg-type]
    assert lifecycle.open_count() == before


INTERRUPTIBLE = """
import os, sys, time
marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marks")
os.makedirs(marks, exist_ok=True)
try:
    open(os.path.join(marks, os.environ["DELTA_FABRIC_LOCAL_RANK"]), "w").close()
    time.sleep(120)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _interrupt(tmp_path: Path, script: str, nodes: int) -> tuple[int, str, str]:
    """Start ``nodes`` nodes of ``script`` (which marks its start in ``marks/<local rank>``), send
    the launcher SIGINT once every node has started: (exit code, stdout, stderr)."""
    path = tmp_path / "train.py"
    path.write_text(script)
    proc = subprocess.Popen(
        [*CLI, "run", "--nodes", str(nodes), "--grace", "5", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "marks").is_dir() or len(os.listdir(tmp_path / "marks")) < nodes:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    return proc.returncode, out, err


def test_ctrl_c_is_passed_on_to_every_node(tmp_path: Path) -> None:
    code, out, err = _interrupt(tmp_path, INTERRUPTIBLE, 2)
    assert code == 130, (out, err)
    assert sorted(ln for ln in out.splitlines()) == ["[0]: interrupted", "[1]: interrupted"]
    assert "delta-fabric run: SIGINT: stopping every node" in err


JOINER = """
import os, sys, time
import numpy as np
from delta_fabric import Fabric, NumpyStore, SyncConfig, env
store = NumpyStore({"w": np.zeros(64, np.float32)})
with Fabric.from_env(store, SyncConfig.v1_0(ratio=0.25, sync_interval=1)) as fabric:
    peers = fabric.transport.wait_for_peers((env.nodes() or 1) - 1, timeout=30)
    print("namespace", fabric.transport.namespace, "peers", len(peers), flush=True)
    print("rank", env.rank(), "of", env.nodes(), "RANK", os.environ["RANK"], flush=True)
    print("signed", fabric.engine.signing is not None, flush=True)
    # Leave only once every peer has shown, by a packet, that it saw this node too: a peer
    # publishes only after its wait_for_peers returned. Seeing a peer's token is not enough: a
    # node that left at once could be gone before the other saw its token (a race under load).
    # The subscriber is declared before the token, so this packet reaches every peer that saw us.
    store.load(np.ones(64, np.float32))
    fabric.sync_now()
    deadline = time.monotonic() + 30
    while not peers <= fabric.origin_progress().keys():
        if time.monotonic() > deadline:
            sys.exit(3)
        fabric.transport.wait_for_packets(0.05)
        fabric.poll()
"""


def test_second_machine_joins_with_the_printed_line(tmp_path: Path) -> None:
    """Two launchers (two "machines" on loopback): the second runs the line the first printed."""
    script = tmp_path / "train.py"
    script.write_text(JOINER)
    port = free_port()
    first = subprocess.Popen(
        [
            *CLI,
            "run",
            "--listen",
            f"tcp/127.0.0.1:{port}",
            "--advertise",
            "127.0.0.1",
            "--world-size",
            "2",
            "--namespace",
            "dftest/join",
            "--timeout",
            "60",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stderr is not None
        line = ""
        for _ in range(10):  # the header: one line per node, then the join line
            line = first.stderr.readline()
            if line.startswith("to join this run: "):
                break
        prefix = "to join this run: DELTA_FABRIC_RUN_KEY="
        assert line.startswith(prefix), line  # a signed run: the line hands on its run key
        run_key, rest = line.removeprefix(prefix).split(" ", 1)
        assert re.fullmatch("[0-9a-f]{64}", run_key), line
        join = shlex.split(rest.removeprefix("delta-fabric "))
        assert join == [
            "run",
            "--connect",
            f"tcp/127.0.0.1:{port}",
            "--namespace",
            "dftest/join",
            "--world-size",
            "2",
            "--nodes",
            "1",
            "--first-rank",
            "1",
            str(script),
        ]
        second = cli(
            *join[:-1],
            "--timeout",
            "60",
            join[-1],
            timeout=90,
            extra_env={"DELTA_FABRIC_RUN_KEY": run_key},
        )
        out, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(5)
    assert second.returncode == 0, f"{second.stdout}\n{second.stderr}"
    assert first.returncode == 0, (out, err)
    assert "[0]: namespace dftest/join peers 1" in second.stdout.splitlines()
    assert "[0]: namespace dftest/join peers 1" in out.splitlines()
    # global ranks across the two launchers (torchrun's RANK too): 0 here, 1 on the joiner
    assert "[0]: rank 0 of 2 RANK 0" in out.splitlines()
    assert "[0]: rank 1 of 2 RANK 1" in second.stdout.splitlines()
    # signed across the two launchers: each node accepted the other's signed packet (the script
    # waits for it in origin_progress), with keys both derived from the printed run key
    assert "[0]: signed True" in out.splitlines()
    assert "[0]: signed True" in second.stdout.splitlines()


def test_plan_with_a_zenoh_config_file_keeps_its_endpoints(tmp_path: Path) -> None:
    from delta_fabric.launch import plan_nodes

    cfg = tmp_path / "z.json5"
    cfg.write_text("{}")
    base = dict(
        nodes=2,
        world_size=None,
        listen=None,
        connect=None,
        zenoh_config=str(cfg),
        namespace=None,
        node_id=0x10,
        metrics=None,
        metrics_interval=10.0,
    )
    plans = plan_nodes(argparse.Namespace(**base))
    assert [p.env["DELTA_FABRIC_LISTEN"] for p in plans] == ["", ""]
    assert [p.env["DELTA_FABRIC_CONNECT"] for p in plans] == ["", ""]
    assert [p.env["DELTA_FABRIC_NODE_ID"] for p in plans] == ["16", "17"]
    assert all(p.env["DELTA_FABRIC_ZENOH_CONFIG"] == str(cfg) for p in plans)
    base["listen"] = ["tcp/127.0.0.1:7000"]
    plans = plan_nodes(argparse.Namespace(**base))
    assert [p.env["DELTA_FABRIC_LISTEN"] for p in plans] == [
        "tcp/127.0.0.1:7000",
        "tcp/127.0.0.1:7001",
    ]
    assert [p.env["DELTA_FABRIC_CONNECT"] for p in plans] == ["", "tcp/127.0.0.1:7000"]


@pytest.mark.parametrize(
    ("info", "want"),
    [
        (None, "-"),
        ({"node": "1"}, "none"),  # a 1.0 node: F32 and PLAIN only
        ({"supports": {"encodings": ["F32"], "index_encodings": ["PLAIN"]}}, "none"),
        ({"supports": {"encodings": ["F32", "Q8"], "index_encodings": ["PLAIN"]}}, "Q8"),
        ({"supports": {"encodings": "junk", "index_encodings": ["PLAIN", "PACKED"]}}, "PACKED"),
        ({"supports": "junk"}, "none"),
    ],
)
def test_status_optional_encodings(info: dict[str, Any] | None, want: str) -> None:
    """REQ: DF-ZEN-231 (a reader treats a node without ``supports`` as F32 and PLAIN only)"""
    from delta_fabric.cli_status import optional_encodings

    assert optional_encodings(info) == want


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no endpoint to ask
        ["--connect", "localhost:7447"],
        ["--connect", "tcp/127.0.0.1:1", "--timeout", "0"],
        ["--connect", "tcp/127.0.0.1:1", "--namespace", "a/*"],
        ["--zenoh-config", "/nonexistent.json5"],
        ["--expect", "x"],
        ["--connect", "tcp/127.0.0.1:1", "--expect", "-2"],
        ["--connect", "tcp/127.0.0.1:1", "--expect", "0"],
    ],
)
def test_bad_status_option_is_one_line_and_exit_2(argv: list[str]) -> None:
    env_keys = [k for k in os.environ if k.startswith("DELTA_FABRIC_")]
    assert not env_keys, env_keys  # the test relies on a clean environment
    res = cli("status", *argv)
    assert res.returncode == 2, res
    assert "DELTA_FABRIC" not in res.stderr or not argv  # names the option given
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("delta-fabric status: error: ")


def test_status_says_when_nothing_answers_at_the_endpoints() -> None:
    # a dead endpoint is not an empty cluster: one line and exit 1, nothing on stdout
    from delta_fabric.ports import free_ports

    (port,) = free_ports(1)
    res = cli("status", "--connect", f"tcp/127.0.0.1:{port}", "--timeout", "0.5")
    assert res.returncode == 1, res
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith(
        f"delta-fabric status: no Zenoh peer or router reached at tcp/127.0.0.1:{port} "
    )


def test_run_falls_back_to_exported_variables(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    exported = {
        "DELTA_FABRIC_NODE_ID": "0x20",
        "DELTA_FABRIC_CONNECT": "tcp/127.0.0.1:9",
        "DELTA_FABRIC_NAMESPACE": "team/exported",
    }
    res = cli("run", "--nodes", "2", str(script), "-1", "0", "0", extra_env=exported)
    assert res.returncode == 0, res
    assert "node [0] id 0000000000000020" in res.stderr
    assert "node [1] id 0000000000000021" in res.stderr
    lines = sorted(ln for ln in res.stdout.splitlines() if "rank" in ln)
    assert [ln.split()[4] for ln in lines] == ["32", "33"]
    assert all(" connect tcp/127.0.0.1:9" in ln for ln in lines)
    bad = cli("run", str(script), extra_env={"DELTA_FABRIC_NODE_ID": "zero"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "DELTA_FABRIC_NODE_ID='zero'" in bad.stderr


def test_no_python_runs_an_executable(tmp_path: Path) -> None:
    script = tmp_path / "node.sh"
    script.write_text('#!/bin/sh\necho "rank $DELTA_FABRIC_LOCAL_RANK of $DELTA_FABRIC_NODES $1"\n')
    script.chmod(0o755)
    res = cli("run", "--nodes", "2", "--no-python", str(script), "hello")
    assert res.returncode == 0, res
    assert sorted(res.stdout.splitlines()) == ["[0]: rank 0 of 2 hello", "[1]: rank 1 of 2 hello"]


FROM_ENV = """
import numpy as np
from delta_fabric import Fabric, NumpyStore
with Fabric.from_env(NumpyStore({"w": np.zeros(8, np.float32)})) as fabric:
    print("started", flush=True)
"""


@pytest.mark.parametrize(
    ("extra_env", "says"),
    [
        ({"DELTA_FABRIC_RATIO": "lots"}, "error: DELTA_FABRIC_RATIO='lots': "),
        ({"DELTA_FABRIC_AVERAGE_OVER": "0"}, "error: DELTA_FABRIC_AVERAGE_OVER='0': "),
        ({"DELTA_FABRIC_REPAIR": "maybe"}, "error: DELTA_FABRIC_REPAIR='maybe': "),
    ],
)
def test_a_bad_setting_is_one_line_per_node_and_exit_2(
    tmp_path: Path, extra_env: dict[str, str], says: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text(FROM_ENV)
    res = cli("run", "--nodes", "2", str(script), extra_env=extra_env)
    assert res.returncode == 2, res
    node_lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[")]
    assert len(node_lines) in (1, 2), res.stderr  # the launcher stops the other after the first
    assert all(ln[5:].startswith(says) for ln in node_lines), res.stderr
    assert "Traceback" not in res.stderr and "likely causes" not in res.stderr


def test_a_malformed_zenoh_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(FROM_ENV)
    bad = tmp_path / "zenoh.json5"
    bad.write_text("{ mode: 'peer', listen: [ }")
    res = cli("run", "--zenoh-config", str(bad), str(script))
    assert res.returncode == 2, res
    node_lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[")]
    assert len(node_lines) == 1 and node_lines[0].startswith(f"[0]: error: Zenoh config {bad}: ")
    assert "Traceback" not in res.stderr and "likely causes" not in res.stderr


def test_ctrl_c_without_any_handler_prints_one_line(tmp_path: Path) -> None:
    script = (
        "import os, time\n"
        "marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'marks')\n"
        "os.makedirs(marks, exist_ok=True)\n"
        "open(os.path.join(marks, os.environ['DELTA_FABRIC_LOCAL_RANK']), 'w').close()\n"
        "time.sleep(120)\n"
    )
    code, out, err = _interrupt(tmp_path, script, 3)
    assert code == 130, (out, err)
    node_err = sorted(ln for ln in err.splitlines() if ln.startswith("["))
    assert node_err == ["[0]: interrupted", "[1]: interrupted", "[2]: interrupted"], err
    assert "Traceback" not in err


def test_ranks_and_world_size_in_the_environment(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import os\n"
        "print(*(os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE',"
        " 'DELTA_FABRIC_RANK', 'DELTA_FABRIC_NODES')))\n"
    )
    res = cli("run", "--nodes", "2", "--world-size", "5", "--first-rank", "3", str(script))
    assert res.returncode == 0, res
    assert sorted(res.stdout.splitlines()) == ["[0]: 3 5 0 2 3 5", "[1]: 4 5 1 2 4 5"]
    bad = cli("run", "--nodes", "3", "--world-size", "4", "--first-rank", "2", str(script))
    assert bad.returncode == 2 and "--world-size 4 is smaller than --first-rank 2" in bad.stderr
    assert dfenv.rank({"DELTA_FABRIC_RANK": "4"}) == 4 and dfenv.rank({}) is None
    assert dfenv.bootstrap({"DELTA_FABRIC_RANK": "1"}) is True  # ranks above 0 start from rank 0
    assert dfenv.bootstrap({"DELTA_FABRIC_RANK": "0"}) is False
    assert dfenv.bootstrap({"DELTA_FABRIC_RANK": "1", "DELTA_FABRIC_BOOTSTRAP": "0"}) is False
    with pytest.raises(EnvError, match="DELTA_FABRIC_RANK"):
        dfenv.rank({"DELTA_FABRIC_RANK": "-1"})


def test_status_reports_misconfigured_peers() -> None:
    from delta_fabric.cli_status import misconfiguration

    rows = [
        {
            "node": "0000000000000001",
            "info": {
                "fingerprint": "aa" * 32,
                "stats": {"misconfigured_peers": {"0000000000000002": "FINGERPRINT_MISMATCH"}},
            },
        },
        {"node": "0000000000000002", "info": {"fingerprint": "bb" * 32, "stats": {}}},
    ]
    lines = misconfiguration(rows)
    assert lines[0] == (
        "node 0000000000000001 rejects the packets of node 0000000000000002: FINGERPRINT_MISMATCH"
    )
    assert lines[1].startswith("the live nodes have 2 different models")
    assert misconfiguration(rows[1:]) == []


MISMATCHED = """
import os, time
import numpy as np
from delta_fabric import Fabric, NumpyStore, SyncConfig, env
rank = env.rank()
store = NumpyStore({"w": np.zeros(8 + rank, np.float32)})  # a different model on each node
with Fabric.from_env(store, SyncConfig(sync_interval=1)) as fabric:
    fabric.transport.wait_for_peers(1, timeout=30)
    deadline = time.monotonic() + 20
    while not fabric.misconfigured_peers() and time.monotonic() < deadline:
        store.arrays["w"][:] += 1.0
        fabric.step()
        fabric.transport.wait_for_packets(0.05)
    for _ in range(5):  # more rejected packets: still one line
        store.arrays["w"][:] += 1.0
        fabric.step()
        fabric.transport.wait_for_packets(0.05)
    time.sleep(1.0)  # the peer may still be sending
    fabric.poll()
print("done", rank, flush=True)
"""


def test_two_nodes_with_different_models_say_so_once_each(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(MISMATCHED)
    # two runs that meet in one namespace, each starting from its own weights (under one
    # launcher rank 1 would bootstrap from rank 0, whose snapshot is of the other model)
    res = cli(
        "run",
        "--nodes",
        "2",
        "--timeout",
        "60",
        str(script),
        timeout=90,
        extra_env={"DELTA_FABRIC_BOOTSTRAP": "0"},
    )
    assert res.returncode == 0, res
    ids = re.findall(r"node \[(\d)\] id ([0-9a-f]{16})", res.stderr)
    hexes = {int(r): h for r, h in ids}
    warned = [ln for ln in res.stderr.splitlines() if "has another model" in ln]
    assert len(warned) == 2, res.stderr
    for rank, other in ((0, 1), (1, 0)):
        mine = [ln for ln in warned if ln.startswith(f"[{rank}]: ")]
        assert len(mine) == 1, warned
        assert f"node {hexes[other]} has another model" in mine[0]
        assert "FINGERPRINT_MISMATCH" in mine[0] and f"N={8 + rank}" in mine[0]


RESTARTED = """
import os
import numpy as np
from delta_fabric import Fabric, NumpyStore, SyncConfig, env
store = NumpyStore({"w": np.zeros(16, np.float32)})
rank = env.rank()
restarted = os.environ.get("DELTA_FABRIC_BOOTSTRAP") == "1"
with Fabric.from_env(store, SyncConfig(sync_interval=2)) as fabric:
    fabric.transport.wait_for_peers(1, timeout=60)
    for step in range(40):
        store.arrays["w"][:] += np.float32(0.01 * (rank + 1))
        fabric.step()
        if rank == 1 and step == 10 and not restarted:
            os._exit(3)  # a crash
    shared = fabric.finish(timeout=60)
    print("rank", rank, "restarted" if restarted else "first", "bootstrapped",
          fabric.bootstrapped, "sum", round(float(shared.sum()), 3), flush=True)
"""


def test_max_restarts_restarts_a_failed_node_from_a_live_peer(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(RESTARTED)
    res = cli(
        "run", "--nodes", "2", "--max-restarts", "1", "--timeout", "100", str(script), timeout=120
    )
    assert res.returncode == 0, res
    assert "node [1] exited with code 3: restarting it from a live peer" in res.stderr
    out = sorted(ln for ln in res.stdout.splitlines() if " bootstrapped " in ln)
    assert len(out) == 2, res.stdout
    assert out[0].startswith("[0]: rank 0 first bootstrapped False sum ")
    assert out[1].startswith("[1]: rank 1 restarted bootstrapped True sum ")
    assert out[0].rsplit(" ", 1)[1] == out[1].rsplit(" ", 1)[1]  # the same shared model
    # without restarts left, the failure stops the run with the node's code
    res = cli("run", "--nodes", "2", "--timeout", "100", str(script), timeout=120)
    assert res.returncode == 3, res


def test_the_join_line_names_an_address_not_a_loopback_host_name() -> None:
    from delta_fabric.launch import _advertised, _this_host, interface_addresses

    addrs = interface_addresses()
    assert all(not a.startswith("127.") and a.count(".") == 3 for a in addrs)
    host = _this_host()
    if addrs:  # a machine with a network interface advertises an address of it, not "localhost"
        assert not host.startswith("127.") and host != "localhost"
    assert _advertised("tcp/0.0.0.0:7447", None) == f"tcp/{host}:7447"
    assert _advertised("tcp/0.0.0.0:7447", "10.1.2.3") == "tcp/10.1.2.3:7447"


DIGITS = Path(__file__).resolve().parent.parent / "python" / "examples" / "torch_digits.py"


def test_digits_with_the_defaults_across_two_launchers(tmp_path: Path) -> None:
    """python/examples/torch_digits.py under two launchers (2 nodes + 1, joined by the printed
    line): every node shards by its global rank, trains with SyncConfig() and a single node's
    learning rate, and finish() leaves one shared model above the demo's bar on every node."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    port = free_port()
    first = subprocess.Popen(
        [
            *CLI,
            "run",
            "--listen",
            f"tcp/127.0.0.1:{port}",
            "--advertise",
            "127.0.0.1",
            "--nodes",
            "2",
            "--world-size",
            "3",
            "--namespace",
            "dftest/digits",
            "--timeout",
            "240",
            str(DIGITS),
            "--out",
            str(tmp_path / "w.npy"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    try:
        assert first.stderr is not None
        line = ""
        for _ in range(10):
            line = first.stderr.readline()
            if line.startswith("to join this run: "):
                break
        words = shlex.split(line.removeprefix("to join this run: "))
        key_var, run_key = words[0].split("=", 1)  # a signed run hands on its run key
        assert key_var == "DELTA_FABRIC_RUN_KEY" and words[1] == "delta-fabric", line
        join = words[2:]
        assert join[:1] == ["run"] and "--first-rank" in join, line
        assert (
            join[join.index("--first-rank") + 1] == "2" and join[join.index("--nodes") + 1] == "1"
        )
        second = cli(*join, timeout=260, extra_env={"DELTA_FABRIC_RUN_KEY": run_key})
        out, err = first.communicate(timeout=260)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(5)
    assert first.returncode == 0 and second.returncode == 0, (err, second.stderr)
    lines = out.splitlines() + second.stdout.splitlines()
    accs = {
        int(m.group(1)): float(m.group(2))
        for ln in lines
        if (m := re.search(r"rank (\d) of 3: shared model test accuracy ([0-9.]+)", ln))
    }
    assert sorted(accs) == [0, 1, 2], lines  # three distinct global ranks, one per shard
    assert min(accs.values()) >= 0.95, accs
    assert len(set(accs.values())) == 1, accs  # the same shared model on every node


def test_a_duplicate_node_id_under_the_launcher_is_one_line_and_exit_2(tmp_path: Path) -> None:
    port = free_port()
    base = ZenohOptions(node_id=0xD0D, namespace="dftest/dup-run", listen=[f"tcp/127.0.0.1:{port}"])
    script = tmp_path / "train.py"
    script.write_text(FROM_ENV)
    with ZenohTransport(base):  # a live node that already holds the id
        res = cli(
            "run",
            "--node-id",
            str(0xD0D),
            "--namespace",
            "dftest/dup-run",
            "--connect",
            f"tcp/127.0.0.1:{port}",
            str(script),
        )
    assert res.returncode == 2, res
    node_lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[")]
    assert len(node_lines) == 1, res.stderr
    assert node_lines[0].startswith("[0]: error: node id 0000000000000d0d is already used")
    assert "Traceback" not in res.stderr and "likely causes" not in res.stderr


def test_a_rank_that_bootstraps_from_another_model_is_one_line_and_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(MISMATCHED)  # rank r has a model of 8 + r values
    res = cli("run", "--nodes", "2", "--timeout", "60", str(script), timeout=90)
    assert res.returncode == 2, res
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[1]: ")]
    assert len(lines) == 1 and lines[0].startswith("[1]: error: the live peers serve another model")
    assert "Traceback" not in res.stderr


# -- signed runs (spec section 13.1) ------------------------------------------------------------------

RUN_KEY_HEX = "5eed" * 16


def _plan_args(**kw: Any) -> Any:
    from delta_fabric.launch import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    argv = [str(x) for pair in kw.items() for x in ("--" + pair[0].replace("_", "-"), pair[1])]
    return p.parse_args([*argv, "train.py"])


def test_a_signed_runs_ids_members_and_keys_follow_from_the_run_key(tmp_path: Path) -> None:
    # REQ: DF-SEC-145, DF-RCV-51
    from delta_fabric.launch import node_secret, plan_nodes, rank_node_id, write_run_keys
    from delta_fabric.signing import load_keys, public_key_of

    key = bytes.fromhex(RUN_KEY_HEX)
    a = _plan_args(nodes=2, world_size=3)
    b = _plan_args(nodes=1, world_size=3, first_rank=2)
    a.run_key = b.run_key = key
    pa, pb = plan_nodes(a), plan_nodes(b)
    ids = [rank_node_id(key, r) for r in range(3)]
    assert len(set(ids)) == 3 and all(0 < i < 2**64 for i in ids)
    assert [p.node_id for p in pa + pb] == ids  # two machines agree on every rank's id
    members = {p.env[dfenv.MEMBERS] for p in pa + pb}
    assert members == {",".join(f"0x{i:x}" for i in ids)}
    files = write_run_keys(str(tmp_path), key, ids, [p.node_id for p in pa])
    keys = load_keys(files[ids[0]][dfenv.KEYS])
    assert keys == {f"{i:016x}": public_key_of(node_secret(key, i)).hex() for i in ids}
    secret = Path(files[ids[1]][dfenv.SECRET_KEY])
    assert secret.read_text().strip() == node_secret(key, ids[1]).hex()
    assert secret.stat().st_mode & 0o777 == 0o600
    # another key gives other ids and keys; --node-id gives that id plus the global rank
    assert rank_node_id(bytes(32), 0) != ids[0]
    c = _plan_args(nodes=1, world_size=3, first_rank=2, node_id=100)
    c.run_key = key
    assert [p.node_id for p in plan_nodes(c)] == [102]
    # --unsigned (no run key): the plan is 1.0's, random ids and no members
    d = _plan_args(nodes=2)
    assert all(dfenv.MEMBERS not in p.env and dfenv.KEYS not in p.env for p in plan_nodes(d))


@pytest.mark.parametrize(
    ("argv", "extra", "want"),
    [
        ([], {"DELTA_FABRIC_RUN_KEY": "xyz"}, "DELTA_FABRIC_RUN_KEY: expected 64 hex digits"),
        ([], {"DELTA_FABRIC_RUN_KEY": "ab" * 31}, "DELTA_FABRIC_RUN_KEY: expected 64 hex digits"),
        (["--members", "1,2"], {}, "--members: a signed run's members are its ranks"),
    ],
)
def test_a_bad_run_key_or_members_of_a_signed_run_is_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], extra: dict[str, str], want: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    res = cli("run", *argv, str(script), extra_env=extra)
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and want in lines[0], res.stderr
    assert "never runs" not in res.stdout


STRANGER_TARGET = """
import os, sys, time
import numpy as np
from delta_fabric import Fabric, NumpyStore, SyncConfig, env
from delta_fabric.errors import ErrorCode
store = NumpyStore({"w": np.zeros(64, np.float32)})
marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marks")
with Fabric.from_env(store, SyncConfig.v1_0(ratio=0.25, sync_interval=1)) as fabric:
    peers = fabric.transport.wait_for_peers((env.nodes() or 1) - 1, timeout=30)
    print("signed", fabric.engine.signing is not None, flush=True)
    store.load(np.full(64, env.rank() + 1, np.float32))
    fabric.sync_now()
    deadline = time.monotonic() + 30
    while not peers <= fabric.origin_progress().keys():
        if time.monotonic() > deadline:
            sys.exit(3)
        fabric.transport.wait_for_packets(0.05)
        fabric.poll()
    open(os.path.join(marks, f"ready{env.rank()}"), "w").close()
    while not os.path.exists(os.path.join(marks, "forged")):  # the test's stranger publishes
        if time.monotonic() > deadline:
            sys.exit(4)
        fabric.transport.wait_for_packets(0.05)
        fabric.poll()
    until = time.monotonic() + 2.0
    while time.monotonic() < until:
        fabric.transport.wait_for_packets(0.05)
        fabric.poll()
    w = store.arrays["w"]
    bad = fabric.engine.counters.errors.get(ErrorCode.BAD_SIGNATURE, 0)
    print("bad_signature", bad, "max", float(np.abs(w).max()), "finite", bool(np.isfinite(w).all()),
          flush=True)
"""


def test_a_signed_run_refuses_a_strangers_packet_under_a_members_id(tmp_path: Path) -> None:
    """The default run is signed: a stranger that reaches the nodes' network and publishes on a
    member's key, under that member's id, an entry of 3e38 changes no weight; it is counted."""
    # REQ: DF-SEC-142
    import zenoh
    from delta_fabric.launch import rank_node_id
    from delta_fabric.transports.zenoh import ZenohOptions, delta_key
    from delta_fabric.wire import Entry, Packet, encode_packet

    script = tmp_path / "train.py"
    script.write_text(STRANGER_TARGET)
    (tmp_path / "marks").mkdir()
    port = free_port()
    ns = "dftest/signed"
    run = subprocess.Popen(
        [
            *CLI,
            "run",
            "--nodes",
            "2",
            "--listen",
            f"tcp/127.0.0.1:{port}",
            "--namespace",
            ns,
            "--timeout",
            "60",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1", DELTA_FABRIC_RUN_KEY=RUN_KEY_HEX),
    )
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / "marks" / f"ready{r}").exists() for r in (0, 1)):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        member = rank_node_id(bytes.fromhex(RUN_KEY_HEX), 1)
        opts = ZenohOptions(node_id=0x5EED, namespace=ns, connect=[f"tcp/127.0.0.1:{port}"])
        from delta_fabric.manifest import Manifest

        fp = Manifest.from_named_shapes({"w": (64,)}).fingerprint
        forged = Entry(member, 1, 10**6, 0, np.array([7], np.uint32), np.array([3e38], np.float32))
        data = encode_packet(Packet(member, 1, fp, (forged,)))
        with zenoh.open(opts.build_config()) as session:
            pub = session.declare_publisher(delta_key(ns, member))
            time.sleep(1.0)  # the route to the nodes' subscribers
            for _ in range(3):
                pub.put(data)
            time.sleep(0.5)
        (tmp_path / "marks" / "forged").touch()
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(5)
    assert run.returncode == 0, (out, err)
    assert "[0]: signed True" in out.splitlines() and "[1]: signed True" in out.splitlines()
    got = re.findall(r"^\[0\]: bad_signature (\d+) max ([0-9.e+]+) finite (\w+)$", out, re.M)
    assert got and int(got[0][0]) >= 1, out  # node 0 refused the forgery under rank 1's id
    assert float(got[0][1]) <= 2.0 and got[0][2] == "True", out  # no weight moved by it
