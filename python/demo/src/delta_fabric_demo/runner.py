"""`delta-fabric demo`: a local DeltaFabric cluster on loopback Zenoh, trained on label-skewed
digits.

Three runs in one invocation (each node is a separate process, see `delta_fabric_demo.node`):

1. ``sync``: the cluster (default 3 nodes, ring) with DeltaFabric sync;
2. ``nosync``: the same nodes, same data and settings, no sync (flag ``--skip-nosync``);
3. ``baseline``: one node on all the training data (flag ``--skip-baseline``).

Writes ``accuracy.png`` and ``summary.json`` to ``--output``; ``--json`` prints the summary on
stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from delta_fabric.extras import MissingExtraError, raise_missing_extra
from delta_fabric.ports import free_ports
from numpy.typing import NDArray

from delta_fabric_demo.lockstep import (
    DEMO_DEFAULTS,
    OUTER_INTERVAL,
    OUTER_SPAN,
    default_average_over,
)

__all__ = ["add_arguments", "run"]


@dataclass(frozen=True)
class NodeLauncher:
    """How the demo starts one framework's node. Every node speaks the same command line and stdout
    protocol (``delta_fabric_demo.node``); a Python node runs as ``python -m python_module``, a
    native one as ``binary`` (found on PATH, or given with ``--<framework>-bin``)."""

    python_module: str | None = None
    binary: str | None = None
    forkable: bool = False  # may start forked from the PyTorch forkserver (--launcher forkserver)


#: framework -> launcher: adding a framework's demo node is one row here.
NODE_LAUNCHERS: dict[str, NodeLauncher] = {
    "torch": NodeLauncher(python_module="delta_fabric_demo.node", forkable=True),
    "burn": NodeLauncher(binary="df-node"),
    "jax": NodeLauncher(python_module="delta_fabric_demo.jax_node"),
}
DEFAULT_STEPS = 1200
BASE_LR = 0.05


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="cluster size (default: 3, or the number of --frameworks)",
    )
    p.add_argument(
        "--topology",
        choices=("ring", "all"),
        default=DEMO_DEFAULTS["topology"],
        help="who connects to whom (a ring of 3 or fewer is fully connected; default: all, a full "
        "mesh, which relay policy NEEDED keeps free of relays and which --lockstep needs)",
    )
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="local training steps per node")
    p.add_argument("--seed", type=int, default=0, help="seed of the data split, model and batches")
    p.add_argument(
        "--partition",
        choices=("skewed", "iid"),
        default="skewed",
        help="skewed: each node sees only some classes; iid: every node sees all ten",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=Path("demo-out"),
        help="directory for accuracy.png, summary.json, logs/ and data/",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "--frameworks",
        default=None,
        help="framework per node, comma-separated, e.g. torch,torch,burn (default: all torch)",
    )
    p.add_argument(
        "--burn-bin", default=None, help="path of the df-node binary (default: df-node on PATH)"
    )
    p.add_argument("--alpha", type=float, default=1.0, help="weight of a received delta, in (0, 1]")
    p.add_argument(
        "--ratio",
        type=float,
        default=DEMO_DEFAULTS["ratio"],
        help="share of the weights sent per sync (top-k by magnitude), in (0, 1]",
    )
    p.add_argument(
        "--sync-interval",
        type=int,
        default=DEMO_DEFAULTS["interval"],
        help="local steps between two syncs, >= 1",
    )
    p.add_argument(
        "--encoding",
        type=str.upper,
        choices=("F32", "F16", "BF16", "Q8"),
        default=None,
        help=f"value encoding of the packets (SyncConfig.encoding; default: "
        f"{DEMO_DEFAULTS['encoding']}, F32 with a native node that lacks the option)",
    )
    p.add_argument(
        "--relay-policy",
        choices=("ALL", "NEEDED"),
        default=None,
        help=f"SyncConfig.relay_policy (DF-PAR-60): NEEDED relays only where a neighbour may lack "
        f"an entry (none in a full mesh); the demo's topologies have symmetric links, as NEEDED "
        f"requires (DF-RLY-64) (default: {DEMO_DEFAULTS['relay_policy']}, ALL with a native node "
        f"that lacks the option)",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help=f"local SGD learning rate (default: {BASE_LR}; divided by the number of nodes when "
        "deltas are summed, --average-over 1)",
    )
    p.add_argument("--batch", type=int, default=32, help="mini-batch size")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum, in [0, 1)")
    p.add_argument(
        "--no-buffers", action="store_true", help="do not sync BatchNorm running statistics"
    )
    p.add_argument(
        "--eval-every", type=int, default=50, help="local steps between two test evaluations"
    )
    p.add_argument(
        "--bn-momentum",
        type=float,
        default=None,
        help="BatchNorm momentum of the PyTorch nodes (default: 0.1; divided by the cluster size "
        "when deltas are summed, --average-over 1, and BatchNorm statistics are synced, like the "
        "learning rate)",
    )
    p.add_argument(
        "--max-lead",
        type=int,
        default=2,
        help="sync rounds a node may run ahead of the slowest peer it hears (0: no pacing; "
        "used when the run is not in lockstep)",
    )
    p.add_argument(
        "--lockstep",
        choices=("auto", "on", "off"),
        default="auto",
        help="every node applies every peer's round r at the same local step, so the result does "
        "not depend on machine load (auto: on for a full mesh of PyTorch nodes)",
    )
    p.add_argument(
        "--average-over",
        type=int,
        default=None,
        help="C > 1: nodes average their progress over C (SyncConfig.average_over, DF-GEN-70); "
        "1: sum it as in protocol 1.0 (default: the cluster size, and beyond a sync interval of "
        f"{OUTER_INTERVAL} steps ceil(size * interval / {OUTER_INTERVAL}), an outer learning rate "
        f"below 1, DF-GEN-300; when ratio * interval <= {OUTER_SPAN:g} the milder "
        f"ceil(size * ({OUTER_INTERVAL} + interval) / {2 * OUTER_INTERVAL}))",
    )
    p.add_argument(
        "--index-encoding",
        type=str.upper,
        choices=("PLAIN", "PACKED"),
        default=None,
        help=f"index encoding every node sends (SyncConfig.index_encoding, 1.1; PACKED: delta "
        f"varints or a bitmap, lossless; default: {DEMO_DEFAULTS['index_encoding']}, PLAIN with a "
        f"native node that lacks the option)",
    )
    p.add_argument(
        "--signed",
        action="store_true",
        help="a signed cluster (spec section 13.1): per-run Ed25519 keys, every node signs its "
        "entries and pins every sync node's public key; it costs 64 bytes per entry (default: "
        "unsigned)",
    )
    p.add_argument(
        "--hold-residual",
        action=argparse.BooleanOptionalAction,
        default=DEMO_DEFAULTS["hold_residual"],
        help="every node that supports it holds its unsent residual aside, so its working weights "
        "restart from the shared model after every sync (DF-GEN-240, node-local; default: "
        f"{'on' if DEMO_DEFAULTS['hold_residual'] else 'off'})",
    )
    p.add_argument("--skip-nosync", action="store_true", help="skip the sync-off run")
    p.add_argument("--skip-baseline", action="store_true", help="skip the single-node baseline")
    p.add_argument("--no-plot", action="store_true", help="do not draw accuracy.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--launcher",
        choices=("forkserver", "subprocess"),
        default="forkserver" if sys.platform.startswith("linux") else "subprocess",
        help="how PyTorch nodes start: forked from a server that imported torch once, or "
        "`python -m delta_fabric_demo.node` each",
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="give up on a run after this many seconds"
    )


# --------------------------------------------------------------------------------------------------
@dataclass
class NodeSpec:
    run: str
    index: int
    framework: str
    node_id: int
    data_dir: Path
    lr: float
    sync: bool
    listen: str | None = None
    connect: list[str] = field(default_factory=list)
    neighbours: list[int] = field(default_factory=list)
    classes: list[int] = field(default_factory=list)
    bn_momentum: float | None = None

    @property
    def label(self) -> str:
        return f"{self.run} {_node_label(self.index, self.framework, self.classes)}"


def _classes_label(classes: list[int]) -> str:
    if not classes:
        return ""
    if classes == list(range(classes[0], classes[-1] + 1)) and len(classes) > 1:
        return f"{classes[0]}-{classes[-1]}"
    return ",".join(map(str, classes))


def _node_label(index: int, framework: str, classes: list[int]) -> str:
    """``n0 torch, classes 0-3``: which node, which framework, which part of the data."""
    what = "all classes" if classes == list(range(10)) else f"classes {_classes_label(classes)}"
    return f"n{index} {framework}, {what}"


def topology(n: int, kind: str) -> tuple[list[list[int]], list[list[int]]]:
    """(connect targets, neighbours) per node index. Ring: i connects to i+1; all: i connects to
    every j < i. Neighbours: whose packets a node receives (ring: i-1 and i+1; all: everyone
    else)."""
    connects: list[list[int]] = [[] for _ in range(n)]
    neigh: list[list[int]] = [[] for _ in range(n)]
    if n == 1:
        return connects, neigh
    if kind == "all" or n <= 3:
        for i in range(n):
            connects[i] = list(range(i))
            neigh[i] = [j for j in range(n) if j != i]
        if kind == "all" or n == 2:
            return connects, neigh
    for i in range(n):
        connects[i] = [(i + 1) % n]
        neigh[i] = sorted({(i - 1) % n, (i + 1) % n} - {i})
    return connects, neigh


_HELP_CACHE: dict[str, str] = {}


def _native_supports(binary: str, flag: str) -> bool:
    """Whether ``<binary> --help`` (``df-node``) mentions ``flag``."""
    if binary not in _HELP_CACHE:
        try:
            proc = subprocess.run(
                [binary, "--help"], capture_output=True, text=True, timeout=30, check=False
            )
            _HELP_CACHE[binary] = proc.stdout + proc.stderr
        except (OSError, subprocess.TimeoutExpired):
            _HELP_CACHE[binary] = ""
    return flag in _HELP_CACHE[binary]


def _node_command(spec: NodeSpec, args: argparse.Namespace, common: dict[str, Any]) -> list[str]:
    argv = [
        "--index", str(spec.index),
        "--node-id", f"{spec.node_id:016x}",
        "--data", str(spec.data_dir),
        "--init", str(common["init"]),
        "--steps", str(common["steps"]),
        "--batch", str(args.batch),
        "--lr", repr(spec.lr),
        "--momentum", repr(args.momentum),
        "--seed", str(args.seed),
        "--sync", "on" if spec.sync else "off",
        "--alpha", repr(args.alpha),
        "--ratio", repr(args.ratio),
        "--sync-interval", str(args.sync_interval),
        "--namespace", common["namespace"],
        "--eval-every", str(args.eval_every),
    ]  # fmt: skip
    if common["include_buffers"]:
        argv.append("--include-buffers")
    if spec.listen:
        argv += ["--listen", spec.listen]
    for c in spec.connect:
        argv += ["--connect", c]
    if spec.neighbours:
        argv += ["--neighbours", ",".join(f"{x:016x}" for x in spec.neighbours)]
    # options a native node build may not know yet: passed to it only when its --help lists them
    launcher = NODE_LAUNCHERS[spec.framework]
    binary = common["bins"].get(spec.framework) if launcher.binary else None
    if binary is not None and _native_supports(binary, "--v1-0"):
        # the run's settings are given in full below, every option left out at its 1.0 value
        # (as the demo node reads them): df-node's own defaults are the recommended profile
        argv.append("--v1-0")
    if binary is None or _native_supports(binary, "--max-lead"):
        argv += ["--max-lead", str(args.max_lead)]
    if common.get("lockstep") and spec.sync:
        argv.append("--lockstep")
    if common.get("average_over", 1) > 1:  # checked in _run: every node of the run supports it
        argv += ["--average-over", str(common["average_over"])]
    keys = common.get("keys")
    if keys is not None and spec.sync:  # a signed cluster: every sync node signs (DF-SEC-140)
        if binary is not None and not _native_supports(binary, "--keys"):
            raise SystemExit(
                f"{binary} has no --keys: it cannot join a signed cluster; leave out --signed"
            )
        from delta_fabric import env as dfenv

        files = keys[spec.node_id]
        argv += ["--keys", files[dfenv.KEYS], "--secret-key", files[dfenv.SECRET_KEY]]
    if getattr(args, "hold_residual", False) and (
        binary is None or _native_supports(binary, "--hold-residual")
    ):  # node-local (DF-GEN-240): a node without the option keeps 1.0's behaviour
        argv.append("--hold-residual")
    for opt, value, default in (
        ("--relay-policy", args.relay_policy, "ALL"),
        ("--encoding", args.encoding, "F32"),
        ("--index-encoding", getattr(args, "index_encoding", None), "PLAIN"),
    ):  # resolved in _run: every node of the run supports a value other than 1.0's
        if value is not None and value != default:
            argv += [opt, str(value)]
    if spec.bn_momentum is not None and (
        binary is None or _native_supports(binary, "--bn-momentum")
    ):
        argv += ["--bn-momentum", repr(spec.bn_momentum)]
    if common.get("weights") is not None and (
        binary is None or _native_supports(binary, "--weights-dir")
    ):
        argv += ["--weights-dir", str(common["weights"] / f"{spec.run}-node{spec.index}")]
    if binary is not None:
        return [binary, *argv]
    assert launcher.python_module is not None
    return [sys.executable, "-m", launcher.python_module, *argv]


class _Child:
    """A node process started as ``df-node`` / ``python -m delta_fabric_demo.node`` (stdio
    protocol)."""

    def __init__(self, spec: NodeSpec, cmd: list[str], log: Path, events: queue.Queue[Any]) -> None:
        self.spec = spec
        self.log_file: IO[bytes] = open(log, "wb")
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log_file,
            env=env,
            text=True,
            bufsize=1,
        )
        self.done: dict[str, Any] | None = None
        self.ready: dict[str, Any] | None = None
        self.finished = False
        self.stopped = False
        self.last_step = 0
        self._events = events
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _deliver(self, line: str) -> None:
        line = line.strip()
        if not line.startswith("{"):
            return
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return
        self._events.put((self, msg))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._deliver(line)
        self._events.put((self, {"event": "eof"}))

    def wait(self) -> int:
        return self.proc.wait()

    def stop(self) -> None:
        if self.stopped or self.proc.stdin is None:
            return
        self.stopped = True
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=5)
        self.log_file.close()


class _ForkChild(_Child):
    """A PyTorch node forked from a forkserver that imported torch once (saves seconds per node)."""

    def __init__(
        self, spec: NodeSpec, argv: list[str], log: Path, events: queue.Queue[Any], ctx: Any
    ) -> None:
        from delta_fabric_demo.node import child_entry

        self.spec = spec
        self.done = None
        self.ready = None
        self.finished = False
        self.stopped = False
        self.last_step = 0
        self._events = events
        self._conn, child_conn = ctx.Pipe(duplex=False)
        self._stop_ev = ctx.Event()
        self.fproc = ctx.Process(
            target=child_entry, args=(argv, child_conn, self._stop_ev, str(log)), daemon=True
        )
        self.fproc.start()
        child_conn.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._conn.recv_bytes()
            except (EOFError, OSError):
                break
            self._deliver(data.decode())
        self._events.put((self, {"event": "eof"}))

    def wait(self) -> int:
        self.fproc.join()
        return int(self.fproc.exitcode or 0)

    def stop(self) -> None:
        self.stopped = True
        self._stop_ev.set()

    def close(self) -> None:
        self.fproc.join(timeout=10)
        if self.fproc.is_alive():
            self.fproc.kill()
            self.fproc.join()
        self._reader.join(timeout=5)
        self._conn.close()


_FORK_CTX: Any = None


def _fork_context() -> Any:
    """A forkserver context whose server pre-imports torch and the node code (once per demo)."""
    global _FORK_CTX
    if _FORK_CTX is None:
        import multiprocessing as mp

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(
            ["torch", "delta_fabric_demo.node", "delta_fabric.fabric", "delta_fabric.stores.torch"]
        )
        _FORK_CTX = ctx
    return _FORK_CTX


def tcp_bytes_between(ports: list[int]) -> int | None:
    """Bytes the kernel sent on the established loopback TCP connections that have one of
    ``ports`` at either end (both sockets of each connection: both directions), from ``ss -tin``'s
    ``bytes_sent``: everything Zenoh wrote, its framing, declarations and keep-alives included (TCP
    and IP headers excluded). None when ``ss`` is missing or does not report ``bytes_sent``."""
    try:
        proc = subprocess.run(
            ["ss", "-tinH", "state", "established"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    wanted = {f"127.0.0.1:{p}" for p in ports}
    total = 0
    found = False
    current = False
    for line in proc.stdout.splitlines():
        if not line.startswith((" ", "\t")):  # a socket line: Recv-Q Send-Q local peer
            cols = line.split()
            current = len(cols) >= 4 and (cols[2] in wanted or cols[3] in wanted)
            continue
        if current:
            m = re.search(r"\bbytes_sent:(\d+)", line)
            if m:
                total += int(m.group(1))
                found = True
    return total if found else None


def _average_over(
    args: argparse.Namespace, frameworks: list[str], bins: dict[str, str], n: int
) -> int:
    """The run's ``average_over``: ``--average-over``, else `default_average_over` (the cluster
    size, more at sync intervals beyond `OUTER_INTERVAL`: DF-GEN-300) when every node supports it
    (a native node whose --help lacks the option sums: the run then sums too)."""
    if args.average_over is not None:
        for fw in set(frameworks):
            b = bins.get(fw)
            if (
                args.average_over > 1
                and b is not None
                and not _native_supports(b, "--average-over")
            ):
                raise UsageError(f"--average-over: the {fw} node {b} does not support it")
        return int(args.average_over)
    if any(b is not None and not _native_supports(b, "--average-over") for b in bins.values()):
        return 1
    return default_average_over(n, int(args.sync_interval), float(args.ratio))


def _native_option(
    args: argparse.Namespace, bins: dict[str, str], name: str, default: str, v10: str
) -> str:
    """The run's value of the option ``--name``: as given (every native node must support it when
    it is not 1.0's value ``v10``), else ``default``, or ``v10`` when a native node lacks it."""
    given = getattr(args, name.replace("-", "_"))
    lacking = [b for b in bins.values() if not _native_supports(b, f"--{name}")]
    if given is not None:
        if given != v10 and lacking:
            raise UsageError(f"--{name} {given}: the native node {lacking[0]} does not support it")
        return str(given)
    return v10 if lacking else default


def _lockstep(
    args: argparse.Namespace, frameworks: list[str], bins: dict[str, str], n: int
) -> bool:
    """Lockstep needs nodes with the round gate (PyTorch: delta_fabric_demo.rounds; Burn: df-node
    --lockstep) in a full mesh."""
    gated = all(
        fw == "torch" or (fw in bins and _native_supports(bins[fw], "--lockstep"))
        for fw in frameworks
    )
    possible = gated and (args.topology == "all" or n <= 3)
    if args.lockstep == "on" and not possible:
        raise UsageError(
            "--lockstep on needs PyTorch nodes or df-node builds with --lockstep, in a full mesh "
            "(--topology all or <= 3 nodes)"
        )
    return possible and args.lockstep != "off"


def _run_phase(
    runs: dict[str, list[NodeSpec]],
    args: argparse.Namespace,
    common: dict[str, Any],
    logs: Path,
) -> dict[str, dict[str, Any]]:
    """Start every node of ``runs`` at once, follow their progress, stop each run when all its nodes
    finished; returns per run: node results and wall time."""
    from tqdm import tqdm

    events: queue.Queue[Any] = queue.Queue()
    children: list[_Child] = []
    bars: dict[int, Any] = {}
    t0 = time.monotonic()
    finished_at: dict[str, float] = {}
    wire: dict[str, int | None] = {}
    try:
        for run_name, specs in runs.items():
            for spec in specs:
                cmd = _node_command(spec, args, common)
                log = logs / f"{run_name}-node{spec.index}.log"
                if NODE_LAUNCHERS[spec.framework].forkable and args.launcher == "forkserver":
                    children.append(_ForkChild(spec, cmd[3:], log, events, _fork_context()))
                else:
                    children.append(_Child(spec, cmd, log, events))
        for pos, ch in enumerate(children):
            bars[id(ch)] = tqdm(
                total=common["steps"],
                desc=ch.spec.label,
                position=pos,
                leave=True,
                disable=args.no_progress or None,
                file=sys.stderr,
                unit="step",
                dynamic_ncols=True,
            )
        deadline = t0 + args.timeout
        pending = len(children)
        while pending:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise TimeoutError(
                    f"demo nodes did not finish within {args.timeout:.0f}s (logs: {logs})"
                )
            try:
                ch, msg = events.get(timeout=min(timeout, 1.0))
            except queue.Empty:
                continue
            ev = msg.get("event")
            bar = bars[id(ch)]
            if ev == "ready":
                ch.ready = msg
            elif ev == "progress":
                step = int(msg["step"])
                bar.update(step - ch.last_step)
                ch.last_step = step
                if msg.get("accuracy") is not None:
                    bar.set_postfix(acc=f"{msg['accuracy']:.3f}", refresh=False)
            elif ev == "finished":
                ch.finished = True
                run_name = ch.spec.run
                if all(c.finished for c in children if c.spec.run == run_name):
                    finished_at[run_name] = time.monotonic()
                    time.sleep(0.3)  # let the last deltas arrive and be relayed
                    if run_name == "sync" and common.get("wire_ports"):
                        wire[run_name] = tcp_bytes_between(common["wire_ports"])
                    for c in children:
                        if c.spec.run == run_name:
                            c.stop()
            elif ev == "done":
                ch.done = msg
                bar.set_postfix(acc=f"{msg['accuracy']:.3f}")
            elif ev == "eof":
                pending -= 1
                rc = ch.wait()
                if ch.done is None:
                    raise RuntimeError(
                        f"node {ch.spec.label} exited with {rc} before reporting "
                        f"(log: {logs / f'{ch.spec.run}-node{ch.spec.index}.log'})"
                    )
    finally:
        for bar in bars.values():
            bar.close()
        for ch in children:
            ch.stop()
            ch.close()
    out: dict[str, dict[str, Any]] = {}
    for run_name, specs in runs.items():
        nodes = []
        for ch in children:
            if ch.spec.run != run_name:
                continue
            assert ch.done is not None
            stats = ch.done.get("stats", {})
            nodes.append(
                {
                    "index": ch.spec.index,
                    "node": f"{ch.spec.node_id:016x}",
                    "framework": ch.spec.framework,
                    "classes": ch.spec.classes,
                    "accuracy": ch.done["accuracy"],
                    "per_class": ch.done.get("per_class"),
                    "curve": ch.done.get("curve", []),
                    "shared_accuracy": ch.done.get("shared_accuracy"),
                    "shared_curve": ch.done.get("shared_curve", []),
                    "traffic": ch.done.get("traffic"),
                    "bytes_sent": int(stats.get("bytes_sent", 0)),
                    "num_params": (ch.ready or {}).get("num_params"),
                    "fingerprint": (ch.ready or {}).get("fingerprint"),
                    "stats": stats,
                }
            )
        nodes.sort(key=lambda d: d["index"])
        accs = [d["accuracy"] for d in nodes]
        out[run_name] = {
            "nodes": nodes,
            "min_accuracy": min(accs),
            "max_accuracy": max(accs),
            "wall_s": round(finished_at.get(run_name, time.monotonic()) - t0, 2),
            "node_count": len(specs),
            "wire_bytes": wire.get(run_name),
        }
    return out


#: DF-NUM-1: two nodes agree when max_i |w_P[i] - w_Q[i]| <= 5e-2 * max(max |w_P|, max |w_Q|).
AGREEMENT_TOLERANCE = 5e-2


def relative_difference(a: NDArray[np.float32], b: NDArray[np.float32]) -> float:
    """DF-NUM-1's measure for two nodes: ``max|a - b| / max(max|a|, max|b|)`` (inf if non-finite)."""
    diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    scale = max(float(np.max(np.abs(a))), float(np.max(np.abs(b))))
    if not (math.isfinite(diff) and math.isfinite(scale)):
        return math.inf
    if scale == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / scale


def max_relative_difference(vectors: list[NDArray[np.float32]]) -> float | None:
    """The largest `relative_difference` over every pair of nodes (``None`` for fewer than two)."""
    if len(vectors) < 2:
        return None
    return max(relative_difference(a, b) for a, b in itertools.combinations(vectors, 2))


def _json_float(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _agreement(weights: Path, run: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Weight agreement of one run from the files its nodes wrote (``--weights-dir``): per
    evaluation step present on every reporting node, and at the end. A node that writes no weights
    (a native node without ``--weights-dir``) is left out and counted."""
    dirs = [weights / f"{run}-node{n['index']}" for n in nodes]
    present = [d for d in dirs if (d / "final.f32").is_file()]

    def load(path: Path) -> NDArray[np.float32]:
        return np.fromfile(path, dtype="<f4")

    curve: list[list[float | None]] = []
    final: float | None = None
    if len(present) >= 2:
        steps = set.intersection(*({f.stem for f in d.glob("step*.f32")} for d in present))
        for stem in sorted(steps):
            mrd = max_relative_difference([load(d / f"{stem}.f32") for d in present])
            curve.append([int(stem[4:]), _json_float(mrd)])
        final = max_relative_difference([load(d / "final.f32") for d in present])
    return {
        "final": _json_float(final),
        "within_tolerance": bool(final is not None and final <= AGREEMENT_TOLERANCE),
        "nodes_compared": len(present),
        "nodes_without_weights": len(dirs) - len(present),
        "curve": curve,
    }


def _traffic(nodes: list[dict[str, Any]]) -> list[list[int]]:
    """Cluster totals per evaluation step: [step, sent, received, relayed] summed over the nodes
    that report traffic, at the steps every one of them reported."""
    rows = [{int(r[0]): r[1:] for r in n["traffic"]} for n in nodes if n.get("traffic")]
    if not rows:
        return []
    steps = sorted(set.intersection(*(set(r) for r in rows)))
    return [[st, *(int(sum(r[st][k] for r in rows)) for k in range(3))] for st in steps]


def _plot(
    results: dict[str, dict[str, Any]],
    agreement: dict[str, dict[str, Any]],
    dense_per_step: int,
    path: Path,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [
        ("sync", "DeltaFabric sync"),
        ("nosync", "same nodes, no sync"),
        ("baseline", "one node, all data"),
    ]
    present = [(k, t) for k, t in names if k in results]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9), squeeze=False)
    for ax, (key, label) in zip(axes[0], present, strict=False):
        for node in results[key]["nodes"]:
            curve = np.asarray(node["curve"], dtype=float)
            if curve.size == 0:
                continue
            ax.plot(
                curve[:, 0],
                curve[:, 1],
                label=_node_label(node["index"], node["framework"], node["classes"]),
            )
        ax.set_title(f"accuracy: {label}")
        ax.set_xlabel("local step")
        ax.set_ylabel("test accuracy (all ten classes)")
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1)
        ax.legend(
            loc="lower right", fontsize=8, title="node, framework, its data", title_fontsize=8
        )
    for ax in axes[0][len(present) :]:
        ax.axis("off")

    ax = axes[1][0]  # bytes over steps, the whole sync cluster
    sync_nodes = results["sync"]["nodes"]
    traffic = np.asarray(_traffic(sync_nodes), dtype=float)
    reporting = sum(1 for node in sync_nodes if node.get("traffic"))
    if traffic.size:
        traffic = traffic[traffic[:, 0] > 0]  # step 0: nothing sent yet (log scale)
        st = traffic[:, 0]
        mb = 1e-6
        for col, label in ((1, "sent"), (2, "received"), (3, "relayed (share of sent)")):
            keep = traffic[:, col] > 0
            if (
                not keep.any()
            ):  # e.g. relays under NEEDED in a full mesh: nothing to draw on a log axis
                ax.plot([], [], " ", label=f"{label}: none")
                continue
            ax.plot(st[keep], traffic[keep, col] * mb, marker=".", label=label)
        ax.plot(st, st * dense_per_step * mb, "k--", lw=1, label="dense fp32 every step")
        ax.set_yscale("log")
        ax.legend(fontsize=8, loc="best")
    who = "all nodes" if reporting == len(sync_nodes) else f"{reporting} of {len(sync_nodes)} nodes"
    ax.set_title(f"bytes, {who} together (sync run)")
    ax.set_xlabel("local step")
    ax.set_ylabel("cumulative MB (log)")
    ax.grid(alpha=0.3, which="both")

    ax = axes[1][1]  # weight agreement
    for key, label, style in (("sync", "sync on", "-"), ("nosync", "sync off", ":")):
        ag = agreement.get(key)
        if not ag or not ag["curve"]:
            continue
        pts = np.asarray([(x, y) for x, y in ag["curve"] if y is not None and y > 0], dtype=float)
        if pts.size:
            (line,) = ax.plot(pts[:, 0], pts[:, 1], style, marker=".", label=label)
            if ag["final"] is not None and ag["final"] > 0:
                end = max(float(r[0]) for r in ag["curve"])
                ax.plot([end], [ag["final"]], "*", ms=11, color=line.get_color())
    ax.plot([], [], "*", color="gray", ms=9, label="at the end, after the drain (run's colour)")
    ax.axhline(AGREEMENT_TOLERANCE, color="tab:red", lw=1, ls="--", label="DF-NUM-1 tolerance")
    ax.set_yscale("log")
    ag = agreement.get("sync", {})
    compared = ag.get("nodes_compared", 0)
    who = (
        "nodes"
        if not ag.get("nodes_without_weights")
        else f"the {compared} nodes reporting weights"
    )
    ax.set_title(f"weight agreement between {who}")
    ax.set_xlabel("local step")
    ax.set_ylabel("max relative difference (log)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="best")

    ax = axes[1][2]  # the numbers
    ax.axis("off")
    lines = []
    for key, label in (("sync", "sync on"), ("nosync", "sync off"), ("baseline", "baseline")):
        if key not in results:
            continue
        lines.append(f"{label}:")
        for node in results[key]["nodes"]:
            who = _node_label(node["index"], node["framework"], node["classes"])
            lines.append(f"  {who}: accuracy {node['accuracy']:.3f}")
    ag = agreement.get("sync", {})
    if ag.get("final") is not None:
        ok = "within" if ag["within_tolerance"] else "outside"
        lines.append(
            f"agreement at the end: {ag['final']:.2e} ({ok} DF-NUM-1's {AGREEMENT_TOLERANCE:g})"
        )
    ax.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _versions(bins: dict[str, str]) -> dict[str, str | None]:
    """The software of the run: delta-fabric, the protocol, the demo, Python, torch, zenoh, and the
    ``--version`` line of each native node binary used (``burn``: df-node)."""
    from delta_fabric.cli_support import software_versions
    from delta_fabric.native import describe

    from delta_fabric_demo import __version__

    out = software_versions()
    if out.get("delta-fabric-native") is not None:  # installed: whether the nodes used it
        out["delta-fabric-native"] = f"{out['delta-fabric-native']} ({describe()})"
    out["delta-fabric-demo"] = __version__
    for fw, binary in sorted(bins.items()):
        name = NODE_LAUNCHERS[fw].binary or fw
        try:
            proc = subprocess.run(
                [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
            )
            line = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
            out[name] = line if proc.returncode == 0 and line else None
        except (OSError, subprocess.TimeoutExpired):
            out[name] = None
        out[fw] = _locked_crate_version(fw)
    return out


def _locked_crate_version(crate: str) -> str | None:
    """The version of ``crate`` in the checkout's ``interop/Cargo.lock`` (the native nodes are built
    from it with ``--locked``), or ``None`` outside a checkout."""
    lock = Path(__file__).resolve().parents[4] / "interop" / "Cargo.lock"
    try:
        text = lock.read_text()
    except OSError:
        return None
    m = re.search(rf'\[\[package\]\]\nname = "{re.escape(crate)}"\nversion = "([^"]+)"', text)
    return m.group(1) if m else None


def _human(summary: dict[str, Any]) -> str:
    lines = [
        f"DeltaFabric demo: {summary['nodes']} nodes, {summary['topology']}, "
        f"{summary['partition']} partition, "
        f"{summary['steps']} steps, N = {summary['num_params']} values, "
        f"wall {summary['wall_s']:.1f}s",
    ]
    for key, label in (("sync", "sync on "), ("nosync", "sync off"), ("baseline", "baseline")):
        r = summary["runs"].get(key)
        if r is None:
            continue
        accs = ", ".join(
            f"n{n['index']}({n['framework']}, {_classes_label(n['classes'])}): {n['accuracy']:.3f}"
            for n in r["nodes"]
        )
        lines.append(f"  {label}: {accs}")
    b = summary["bytes"]
    if b:
        lines.append(
            f"  bytes sent {b['sent']:,} vs dense fp32 every step {b['dense_fp32']:,}: "
            f"{b['compression']:.1f}x fewer"
        )
        if b.get("wire"):
            lines.append(
                f"  on the wire (TCP payload, Zenoh framing included) {b['wire']:,}: "
                f"{b['wire_compression']:.1f}x fewer than dense fp32"
            )
    ag = summary["agreement"]
    if ag["final"] is not None:
        ok = "within" if ag["within_tolerance"] else "OUTSIDE"
        lines.append(
            f"  weight agreement at the end: max relative difference {ag['final']:.2e} "
            f"({ok} DF-NUM-1's {ag['tolerance']:g}; {ag['nodes_compared']} nodes compared"
            + (
                f", {ag['nodes_without_weights']} native node(s) report no weights)"
                if ag["nodes_without_weights"]
                else ")"
            )
        )
    dw = summary["done_when"]
    lines.append(
        f"  every node >= 0.90: {dw['all_nodes_ge_0.90']}; "
        f"compression >= 30x: {dw['compression_ge_30x']}"
    )
    if summary.get("plot"):
        lines.append(f"  plot: {summary['plot']}")
    lines.append(f"  summary: {summary['summary_path']}")
    return "\n".join(lines)


class UsageError(Exception):
    """A bad option value: the demo prints the message as one line and exits 2."""


def _check_options(args: argparse.Namespace) -> list[str]:
    """Every option's value checked before any node starts; returns the framework per node. Raises
    `UsageError` with a one-line message naming the option."""
    frameworks: list[str]
    if args.frameworks is not None:
        frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
        if not frameworks:
            raise UsageError(f"--frameworks {args.frameworks!r} names no framework")
        bad = [f for f in frameworks if f not in NODE_LAUNCHERS]
        if bad:
            known = ", ".join(NODE_LAUNCHERS)
            raise UsageError(
                f"unknown framework(s) {', '.join(bad)} in --frameworks; choose from {known}"
            )
        if args.nodes is not None and args.nodes != len(frameworks):
            raise UsageError(
                f"--nodes {args.nodes} disagrees with --frameworks, which names {len(frameworks)} nodes"
            )
    else:
        if args.nodes is not None and args.nodes < 1:
            raise UsageError(f"--nodes must be >= 1, got {args.nodes}")
        frameworks = ["torch"] * (args.nodes if args.nodes is not None else 3)
    if args.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {args.steps}")
    if args.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {args.batch}")
    if args.eval_every < 1:
        raise UsageError(f"--eval-every must be >= 1, got {args.eval_every}")
    if args.max_lead < 0:
        raise UsageError(f"--max-lead must be >= 0, got {args.max_lead}")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        raise UsageError(f"--lr must be a finite number > 0, got {args.lr}")
    if not (math.isfinite(args.momentum) and 0 <= args.momentum < 1):
        raise UsageError(f"--momentum must be in [0, 1), got {args.momentum}")
    if args.bn_momentum is not None and not (
        math.isfinite(args.bn_momentum) and 0 <= args.bn_momentum <= 1
    ):
        raise UsageError(f"--bn-momentum must be in [0, 1], got {args.bn_momentum}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    if args.average_over is not None and not 1 <= args.average_over <= 65536:
        raise UsageError(f"--average-over must be in [1, 65536], got {args.average_over}")
    from delta_fabric.config import SyncConfig

    try:  # the sync parameters: the library's own validation and message
        SyncConfig.v1_0(alpha=args.alpha, ratio=args.ratio, sync_interval=args.sync_interval)
    except (TypeError, ValueError) as exc:
        name = str(exc).split(" ", 1)[0]
        option = {"alpha": "--alpha", "ratio": "--ratio", "sync_interval": "--sync-interval"}
        raise UsageError(f"{option.get(name, 'sync parameters')}: {exc}") from None
    return frameworks


def _check_output(out: Path) -> None:
    """``out`` is (or can be made) a writable directory; creates it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--output {str(out)!r} is not a writable directory: {reason}") from None


def run(args: argparse.Namespace) -> int:
    from delta_fabric.native import NativeError, kernels

    try:
        kernels()  # DELTA_FABRIC_NATIVE is checked before any node starts
    except NativeError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(args)
    except UsageError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    except (TimeoutError, RuntimeError) as exc:  # a node failed or hung: its log says more
        print(f"demo: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    frameworks = _check_options(args)
    n = len(frameworks)
    bins: dict[str, str] = {}
    for fw in sorted(set(frameworks)):
        name = NODE_LAUNCHERS[fw].binary
        if name is None:
            continue
        given = getattr(args, f"{fw}_bin", None)
        if given is not None and not Path(given).is_file():
            raise UsageError(f"--{fw}-bin {given}: no such file")
        found = given or shutil.which(name)
        if not found or not Path(found).exists():
            raise UsageError(
                f"a {fw} node was asked for but the {name} binary was not found "
                f"(build interop/ and put {name} on PATH, or pass --{fw}-bin)"
            )
        bins[fw] = found
    average_over = _average_over(args, frameworks, bins, n)
    lockstep = _lockstep(args, frameworks, bins, n)
    args.relay_policy = _native_option(
        args, bins, "relay-policy", DEMO_DEFAULTS["relay_policy"], "ALL"
    )
    args.encoding = _native_option(args, bins, "encoding", DEMO_DEFAULTS["encoding"], "F32")
    args.index_encoding = _native_option(
        args, bins, "index-encoding", DEMO_DEFAULTS["index_encoding"], "PLAIN"
    )
    try:
        try:
            import delta_fabric_demo.model  # noqa: F401 (torch, checked before any work)
            from delta_fabric_demo.prepare import prepare
        except ModuleNotFoundError as exc:
            raise_missing_extra(exc, "the demo")
    except MissingExtraError as exc:
        raise UsageError(str(exc)) from None
    _check_output(args.output)

    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    work = out / "data"
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    include_buffers = not args.no_buffers

    init_path, parts, manifest = prepare(
        work, n, partition=args.partition, seed=args.seed, include_buffers=include_buffers
    )

    summed = average_over == 1
    lr = args.lr if args.lr is not None else (BASE_LR / n if summed else BASE_LR)
    # Summed (protocol 1.0, average_over 1): every node's delta is applied everywhere, so n nodes
    # move a shared quantity n times per step: the lr is divided by n, and so is the BatchNorm
    # running-statistics momentum when those statistics are synced (else n EMA moves of 0.1
    # overshoot). Averaged (DF-GEN-70): the nodes move by the mean of their progress, as one node.
    bn_momentum = args.bn_momentum
    if bn_momentum is None and include_buffers and n > 1 and summed:
        bn_momentum = 0.1 / n
    common: dict[str, Any] = {
        "init": init_path.resolve(),
        "steps": args.steps,
        "include_buffers": include_buffers,
        "bins": bins,
        "namespace": f"deltafabric/demo-{os.getpid()}-{int(time.time())}",
        "weights": (out / "weights").resolve(),
        "lockstep": lockstep,
        "average_over": average_over,
        "wire_ports": [],
    }
    base_id = 0xDF00_0000_0000_0000
    ports = free_ports(n)
    common["wire_ports"] = ports
    connects, neigh = topology(n, args.topology)
    ids = [base_id | (0x100 + i + 1) for i in range(n)]
    if getattr(args, "signed", False):  # per-run keys: only the sync nodes' entries count
        from delta_fabric.launch import write_run_keys

        keys_dir = out / "keys"
        keys_dir.mkdir(mode=0o700, exist_ok=True)
        for old_file in keys_dir.iterdir():
            old_file.unlink()
        common["keys"] = write_run_keys(str(keys_dir), os.urandom(32), ids, ids)
    sync_specs = [
        NodeSpec(
            run="sync",
            index=i,
            framework=frameworks[i],
            node_id=ids[i],
            data_dir=(work / f"node{i}").resolve(),
            lr=lr,
            sync=True,
            listen=f"tcp/127.0.0.1:{ports[i]}",
            connect=[f"tcp/127.0.0.1:{ports[j]}" for j in connects[i]],
            neighbours=[ids[j] for j in neigh[i]],
            classes=sorted(int(c) for c in np.unique(parts[i].y)),
            bn_momentum=bn_momentum,
        )
        for i in range(n)
    ]
    results: dict[str, dict[str, Any]] = {}
    results.update(_run_phase({"sync": sync_specs}, args, common, logs))
    second: dict[str, list[NodeSpec]] = {}
    if not args.skip_nosync:
        second["nosync"] = [
            NodeSpec(
                run="nosync",
                index=i,
                framework=frameworks[i],
                node_id=base_id | (0x200 + i + 1),
                data_dir=(work / f"node{i}").resolve(),
                lr=lr,
                sync=False,
                classes=sync_specs[i].classes,
                bn_momentum=bn_momentum,
            )
            for i in range(n)
        ]
    if not args.skip_baseline:
        second["baseline"] = [
            NodeSpec(
                run="baseline",
                index=0,
                framework="torch",
                node_id=base_id | 0x301,
                data_dir=(work / "full").resolve(),
                lr=args.lr if args.lr is not None else BASE_LR,
                sync=False,
                classes=list(range(10)),
                bn_momentum=args.bn_momentum,
            )
        ]
    if second:
        results.update(_run_phase(second, args, common, logs))

    sent = sum(node["bytes_sent"] for node in results["sync"]["nodes"])
    dense = n * args.steps * manifest.num_params * 4
    compression = dense / sent if sent else float("inf")
    wire = results["sync"].get("wire_bytes")
    agreement: dict[str, dict[str, Any]] = {
        key: _agreement(common["weights"], key, results[key]["nodes"])
        for key in ("sync", "nosync")
        if key in results
    }
    wall = time.monotonic() - t_start
    summary: dict[str, Any] = {
        "nodes": n,
        "frameworks": frameworks,
        "topology": args.topology,
        "partition": args.partition,
        "steps": args.steps,
        "seed": args.seed,
        "num_params": manifest.num_params,
        "fingerprint": manifest.fingerprint.hex(),
        "include_buffers": include_buffers,
        "config": {
            "alpha": args.alpha,
            "ratio": args.ratio,
            "sync_interval": args.sync_interval,
            "lr": lr,
            "momentum": args.momentum,
            "batch": args.batch,
            "max_lead": args.max_lead,
            "lockstep": lockstep,
            "average_over": average_over,
            "relay_policy": args.relay_policy,
            "encoding": args.encoding,
            "index_encoding": args.index_encoding,
            "hold_residual": bool(args.hold_residual),
            "bn_momentum": bn_momentum if bn_momentum is not None else 0.1,
            "signed": "keys" in common,
        },
        "runs": results,
        "bytes": {
            "sent": sent,
            "dense_fp32": dense,
            "compression": compression if sent else None,
            "wire": wire,
            "wire_compression": dense / wire if wire else None,
            "wire_measure": "bytes sent on the sync run's loopback TCP connections (both ends, "
            "from ss -tin bytes_sent: DeltaFabric packets with Zenoh's framing, declarations and "
            "keep-alives; TCP/IP headers excluded), sampled once every node finished; Zenoh "
            "shared memory is not used (plain puts)",
        },
        "accuracy": {key: [node["accuracy"] for node in r["nodes"]] for key, r in results.items()},
        "done_when": {
            "all_nodes_ge_0.90": bool(results["sync"]["min_accuracy"] >= 0.90),
            "compression_ge_30x": bool(sent and compression >= 30.0),
            "wire_compression_ge_100x": bool(wire and dense / wire >= 100.0),
        },
        "agreement": {
            "measure": "max over node pairs of max_i |w_P[i] - w_Q[i]| / max(max|w_P|, max|w_Q|) "
            "on the canonical weights (DF-NUM-1), after the run's last sync and a short drain",
            "tolerance": AGREEMENT_TOLERANCE,
            "final": agreement["sync"]["final"],
            "within_tolerance": agreement["sync"]["within_tolerance"],
            "nodes_compared": agreement["sync"]["nodes_compared"],
            "nodes_without_weights": agreement["sync"]["nodes_without_weights"],
            "curve": agreement["sync"]["curve"],
            "nosync_final": agreement["nosync"]["final"] if "nosync" in agreement else None,
        },
        "versions": _versions(bins),
        "wall_s": round(wall, 2),
        "cpu_count": os.cpu_count(),
        "plot": None,
        "summary_path": str(out / "summary.json"),
    }
    if not args.no_plot:
        plot = out / "accuracy.png"
        _plot(
            results,
            agreement,
            n * manifest.num_params * 4,
            plot,
            f"DeltaFabric demo: {n} nodes ({args.topology}, {args.partition}), "
            f"{compression:.0f}x fewer payload bytes than dense fp32"
            + (f", {dense / wire:.0f}x on the wire" if wire else ""),
        )
        summary["plot"] = str(plot)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if args.json:
        print(_human(summary), file=sys.stderr)
        print(json.dumps(summary))
    else:
        print(_human(summary))
    return 0
