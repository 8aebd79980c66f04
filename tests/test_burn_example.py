"""The Burn own-model example with a PyTorch peer in one cluster (issue 8, item 4).

Two processes of ``cargo run -p df-burn --example own_model`` (a user-defined MLP, not the CNN) and one
``interop/examples/own_model_peer.py`` (the same MLP in PyTorch) train over loopback Zenoh (scouting off,
explicit ``tcp/127.0.0.1`` endpoints, full mesh). After training every node calls ``finish`` (no
coordinator: each learns the others' last entries from their node information), then writes the shared
model's canonical weights; the weights must agree within the spec's cross-framework tolerance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
from delta_fabric.ports import free_ports

pytest.importorskip("zenoh")
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent
PEER = REPO / "interop" / "examples" / "own_model_peer.py"
TARGET = Path(
    os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "delta-fabric" / "target"))
)
EXAMPLE = Path(os.environ.get("DF_OWN_MODEL", str(TARGET / "debug" / "examples" / "own_model")))
TIMEOUT = 180.0

pytestmark = pytest.mark.skipif(
    not EXAMPLE.is_file(),
    reason=f"{EXAMPLE} not built (cd interop && cargo build -p df-burn --example own_model)",
)


def _read_event(out: IO[str], want: str) -> dict[str, Any]:
    """The next JSON event named ``want`` on a node's stdout (other lines are skipped)."""
    for line in out:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(ev, dict) and ev.get("event") == want:
            return ev
    raise AssertionError(f"stdout closed before the {want!r} event")


def test_burn_nodes_and_a_pytorch_node_train_one_user_model(tmp_path: Path) -> None:
    """REQ: DF-NUM-1 (Burn and PyTorch nodes agree within the cross-framework tolerance after a
    quiescent drain) and REQ: DF-MAN-6 (Burn's transposed Linear weights map to the PyTorch names)."""
    ids = [0xA1, 0xB2, 0xC3]
    ports = free_ports(3)
    ns = f"dftest/own-model-{uuid.uuid4().hex[:12]}"
    procs: list[subprocess.Popen[str]] = []
    outs = [tmp_path / f"node{i}.f32" for i in range(3)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    try:
        for i, node in enumerate(ids):
            common = [
                "--node-id", f"{node:x}",
                "--index", str(i),
                "--peers", ",".join(f"{p:x}" for p in ids if p != node),
                "--listen", f"tcp/127.0.0.1:{ports[i]}",
                "--namespace", ns,
                "--steps", "150",
                "--out", str(outs[i]),
            ]  # fmt: skip
            for j in range(i):  # full mesh: i connects to every earlier node
                common += ["--connect", f"tcp/127.0.0.1:{ports[j]}"]
            cmd = [str(EXAMPLE), *common] if i < 2 else [sys.executable, str(PEER), *common]
            procs.append(
                subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
                )
            )
        finished = []
        for p in procs:
            assert p.stdout is not None
            finished.append(_read_event(p.stdout, "finished"))
        final = {ev["node"]: ev["seq"] for ev in finished}
        assert all(s > 0 for s in final.values()), final
        stats = []
        for p in procs:
            assert p.stdout is not None
            stats.append(_read_event(p.stdout, "done")["stats"])
        for p in procs:
            assert p.wait(timeout=TIMEOUT) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    weights = [np.fromfile(o, dtype="<f4") for o in outs]
    assert {w.size for w in weights} == {16 * 4 + 16 + 16 + 1}
    for s in stats:
        assert s["receive"]["packets_rejected"] == 0, s
        assert s["values_received_applied"] > 0, s
    scale = max(float(np.abs(w).max()) for w in weights)
    for a in range(3):
        for b in range(a + 1, 3):
            diff = float(np.abs(weights[a] - weights[b]).max())
            assert diff <= 5e-2 * scale, (a, b, diff, scale)
    # Training moved the weights away from the shared start (the agreement is not trivial).
    assert float(np.abs(weights[0] - weights[2]).max()) < float(
        np.abs(weights[0] - _initial(weights[0].size)).max()
    )


def _initial(n: int) -> np.ndarray:
    """The shared initial weights (seed 7), as both examples draw them."""
    sys.path.insert(0, str(PEER.parent))
    try:
        import own_model_peer

        return own_model_peer.initial_weights(7, n)
    finally:
        sys.path.remove(str(PEER.parent))


def test_delta_fabric_run_starts_a_burn_node_next_to_a_pytorch_node(tmp_path: Path) -> None:
    """REQ: DF-NUM-1: two launchers, as on two machines: the first starts the PyTorch peer (rank 0),
    the second the Burn example's binary (``--no-python``, rank 1, which bootstraps from rank 0);
    both read the launcher's variables, train, ``finish`` and write the same shared model. No
    coordinator, no ids or endpoints given to the programs."""
    cli = [sys.executable, "-m", "delta_fabric.cli", "run"]
    (port,) = free_ports(1)
    ns = ["--namespace", f"dftest/burn-run-{uuid.uuid4().hex[:12]}", "--world-size", "2"]
    a_out, b_out = tmp_path / "a.f32", tmp_path / "b.f32"
    # one signed run (the default): both launchers derive the ranks' ids and keys from one run key
    env = dict(os.environ, OMP_NUM_THREADS="1", DELTA_FABRIC_RUN_KEY="b0" * 32)
    first = subprocess.Popen(
        [
            *cli,
            "--listen",
            f"tcp/127.0.0.1:{port}",
            *ns,
            "--timeout",
            "150",
            str(PEER),
            "--out",
            str(a_out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        second = subprocess.run(
            [
                *cli,
                "--connect",
                f"tcp/127.0.0.1:{port}",
                "--first-rank",
                "1",
                *ns,
                "--timeout",
                "150",
                "--no-python",
                str(EXAMPLE),
                "--out",
                str(b_out),
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
            check=False,
        )
        _out, err = first.communicate(timeout=TIMEOUT)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(5)
    assert first.returncode == 0 and second.returncode == 0, (err, second.stderr)
    a, b = np.fromfile(a_out, "<f4"), np.fromfile(b_out, "<f4")
    assert a.shape == b.shape and a.size > 0
    scale = max(float(np.abs(a).max()), float(np.abs(b).max()))
    assert float(np.abs(a - b).max()) <= 5e-2 * scale  # DF-NUM-1
    assert float(np.abs(a - b).max()) <= 1e-5 * max(1.0, scale)  # finish: one shared model
    burn = [json.loads(ln.split(": ", 1)[1]) for ln in second.stdout.splitlines() if '"done"' in ln]
    assert burn and burn[0]["stats"]["bootstrapped"] is True  # rank 1 starts from rank 0's weights
