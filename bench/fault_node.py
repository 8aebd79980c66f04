"""One node of ``bench/fault_report.py`` (not a benchmark of its own): a `delta_fabric.fabric.Fabric`
over Zenoh on ``tcp/127.0.0.1`` (scouting off) that trains a small MLP (64-H-10, NumPy, plain SGD) on
its label-skewed part of scikit-learn's digits, syncs every step and paces on its live peers.

usage: fault_node.py CONFIG.json

It prints one JSON line per step ``{"t": monotonic s, "step": n}`` (with ``"acc"``, its test
accuracy, every 10 steps), then ``{"done": ...}`` with its
incarnation and last seq. It then polls (receives, relays, repairs) until the file ``<ctl>/final.json``
names every other node's last ``[incarnation, seq]`` and it has accepted them all (or ``drain_s``
ran out), and prints ``{"final": ...}``: test accuracy, whether every weight is finite, counters,
``VmHWM``, and writes its anchor to ``<ctl>/anchor-<id>.npy``. Every loop is bounded.

The file ``<ctl>/stop-<id>`` ends the steps early (a fault bounded in time).
``die_on_chunk=K``: the node serves snapshot chunks ``0..K-1`` and SIGKILLs itself when asked for
chunk ``K``: a source killed mid-transfer. ``chunk_size``: the values per chunk a joiner asks for.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]


def signing_seed(node_id: int) -> bytes:
    """The bench's deterministic Ed25519 seed of a node (a test key, never a real one)."""
    return hashlib.sha256(b"delta-fabric fault report %d" % node_id).digest()


def vm_hwm_kib(pid: int | str = "self") -> int:
    """Peak resident set size (``VmHWM``) of a process, KiB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def init_params(hidden: int, seed: int) -> dict[str, F32]:
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((64, hidden)) * np.sqrt(2.0 / 64)).astype(np.float32),
        "b1": np.zeros(hidden, np.float32),
        "w2": (rng.standard_normal((hidden, 10)) * np.sqrt(1.0 / hidden)).astype(np.float32),
        "b2": np.zeros(10, np.float32),
    }


def logits(p: dict[str, F32], x: F32) -> tuple[F32, F32]:
    h = np.maximum(x @ p["w1"] + p["b1"], np.float32(0))
    return h, h @ p["w2"] + p["b2"]


def sgd_step(p: dict[str, F32], x: F32, y: NDArray[np.uint8], lr: float) -> None:
    """One cross-entropy SGD step, in place (the store holds these arrays)."""
    h, z = logits(p, x)
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    g = e / e.sum(1, keepdims=True)
    g[np.arange(y.size), y] -= 1.0
    g /= np.float32(y.size)
    gw2 = h.T @ g
    gh = (g @ p["w2"].T) * (h > 0)
    lr32 = np.float32(lr)
    p["w2"] -= lr32 * gw2.astype(np.float32)
    p["b2"] -= lr32 * g.sum(0).astype(np.float32)
    p["w1"] -= lr32 * (x.T @ gh).astype(np.float32)
    p["b1"] -= lr32 * gh.sum(0).astype(np.float32)


def accuracy(p: dict[str, F32], x: F32, y: NDArray[np.uint8]) -> float:
    if not all(bool(np.isfinite(v).all()) for v in p.values()):
        return 0.0
    return float((logits(p, x)[1].argmax(1) == y).mean())


def main(argv: list[str]) -> int:
    from delta_fabric.config import SyncConfig
    from delta_fabric.fabric import Fabric
    from delta_fabric.signing import Signing, public_key_of
    from delta_fabric.stores.numpy import NumpyStore
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

    c: dict[str, Any] = json.loads(Path(argv[0]).read_text())
    t_start = time.monotonic()
    nid = int(c["node_id"])
    ctl = Path(c["ctl"])
    data = np.load(c["data"])
    x, y = data[f"x{c['part']}"], data[f"y{c['part']}"]
    xt, yt = data["xt"], data["yt"]
    params = init_params(int(c["hidden"]), int(c["seed"]))
    store = NumpyStore(params)
    transport = ZenohTransport(
        ZenohOptions(
            node_id=nid,
            namespace=c["namespace"],
            listen=[f"tcp/127.0.0.1:{c['port']}"],
            connect=list(c["connect"]),
            queue_capacity=int(c["queue_capacity"]),
        )
    )
    if c.get("chunk_size"):  # the joiner asks for smaller chunks (its choice, DF-ZEN-5)
        setattr(  # noqa: B010 (mypy refuses assigning to a method)
            transport,
            "fetch_snapshot",
            functools.partial(transport.fetch_snapshot, chunk_size=int(c["chunk_size"])),
        )
    signing = None
    if c["signed"]:
        keys = {int(m): public_key_of(signing_seed(int(m))) for m in c["all_members"]}
        signing = Signing(keys, signing_seed(nid), node_id=nid)
    cfg = SyncConfig.v1_0(
        ratio=float(c["ratio"]),
        sync_interval=1,
        max_seq_jump=int(c["max_seq_jump"]),
        max_incarnation_ahead=int(c.get("max_incarnation_ahead", 0)),
        incarnation_grace=int(c.get("incarnation_grace", 0)),
    )
    # the first nodes start together: nothing is published before all listen; a joiner sees every
    # source (members and a stranger) before it chooses among them
    transport.wait_for_peers(len(c["peers"]), 60.0, expected=list(c["peers"]))
    fabric = Fabric.v1_0(
        store,
        transport,
        cfg,
        node_id=nid,
        bootstrap=bool(c["bootstrap"]),
        bootstrap_timeout=30.0,
        own_transport=True,
        members=c["members"],
        repair=bool(c["repair"]),
        snapshot_quorum=int(c["quorum"]),
        signing=signing,
    )
    die = c.get("die_on_chunk")
    srv = getattr(transport, "_server", None)
    if die is not None and srv is not None:
        answer = srv.answer

        def dying_answer(q: str) -> bytes:
            if f"chunk={die}" in q.replace(";", "&").split("&"):
                os.kill(os.getpid(), signal.SIGKILL)
            out: bytes = answer(q)
            return out

        srv.answer = dying_answer
    ready = {
        "ready": time.monotonic() - t_start,
        "bootstrapped": fabric.bootstrapped,
        "anchor_max_abs": float(np.abs(fabric.engine.anchor).max()),
        "incarnation": fabric.engine.incarnation,
    }
    print(json.dumps(ready), flush=True)
    rng = np.random.default_rng(int(c["seed"]) * 1000 + nid)
    batch, lr, step_s = int(c["batch"]), float(c["lr"]), float(c["step_s"])
    stop = ctl / f"stop-{nid:x}"
    for step in range(1, int(c["steps"]) + 1):
        if stop.exists():  # the orchestrator ends a time-bound fault early
            break
        sel = rng.integers(0, y.size, batch)
        sgd_step(params, x[sel], y[sel], lr)
        if step_s:
            time.sleep(step_s)  # the emulated compute of one step
        fabric.step()
        fabric.pace(2, peer_deadline=float(c["peer_deadline"]), timeout=10.0)
        line: dict[str, Any] = {
            "t": time.monotonic(),
            "step": step,
            # this node's last seq and the highest seq it accepted from each origin: the
            # orchestrator judges a healed link by these, not by time
            "seq": fabric.engine.next_seq - 1,
            "heard": {f"{o:x}": int(v[1]) for o, v in fabric.origin_progress().items()},
            "live": sorted(f"{p:x}" for p in transport.peers()),
        }
        if fabric.gaps is not None:  # repair on: the seqs missing now, and those given up
            line["missing"] = sum(len(fabric.gaps.missing(o)) for o in fabric.origin_progress())
            line["given_up"] = fabric.gaps.counters.seqs_given_up
        if step % 10 == 0:
            line["acc"] = accuracy(params, xt, yt)
        print(json.dumps(line), flush=True)
    mine = [fabric.engine.incarnation, fabric.engine.next_seq - 1]
    print(json.dumps({"done": mine, "t": time.monotonic()}), flush=True)
    deadline = time.monotonic() + float(c["drain_s"])
    complete = False
    final_file = ctl / "final.json"
    while time.monotonic() < deadline:
        fabric.poll()
        if final_file.exists():
            try:
                targets = json.loads(final_file.read_text())
            except ValueError:  # being written
                targets = None
            if targets is not None:
                prog = fabric.origin_progress()
                complete = all(
                    tuple(prog.get(int(o), (0, 0))) >= tuple(v)
                    for o, v in targets.items()
                    if int(o) != nid
                )
                if complete:
                    fabric.poll()
                    break
        transport.wait_for_packets(0.05)
    anchor = np.asarray(fabric.engine.anchor, np.float32)
    np.save(ctl / f"anchor-{nid:x}.npy", anchor)
    stats = fabric.stats()
    final = {
        "node_id": nid,
        "accuracy": accuracy(params, xt, yt),
        "finite": all(bool(np.isfinite(v).all()) for v in params.values()),
        "anchor_finite": bool(np.isfinite(anchor).all()),
        "max_abs_weight": float(max(np.abs(v).max() for v in params.values())),
        "delivery_complete": complete,
        "incarnation": fabric.engine.incarnation,
        "last_seq": fabric.engine.next_seq - 1,
        "origins_tracked": fabric.engine.state.num_origins,
        "origin_progress": {f"{o:x}": list(v) for o, v in fabric.origin_progress().items()},
        "accepted_by_origin": {f"{o:x}": n for o, n in fabric.accepted_by_origin().items()},
        "stats": stats,
        "vm_hwm_kib": vm_hwm_kib(),
    }
    fabric.close()
    print(json.dumps({"final": final}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
