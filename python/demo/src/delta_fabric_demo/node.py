"""One demo node: ``python -m delta_fabric_demo.node ...`` (PyTorch). The Rust ``df-node`` takes the
same command line and speaks the same line protocol, so the demo can mix frameworks in one cluster.

Command line (all nodes of a run get the same values except identity and endpoints)::

    --index I --node-id HEX16 --data DIR --init FILE --steps S --batch B --lr LR --momentum M
    --seed SEED --sync on|off --alpha A --ratio R --sync-interval K [--include-buffers]
    --namespace NS --listen tcp/127.0.0.1:P [--connect EP]... [--neighbours HEX16,HEX16,...]
    --eval-every E [--wait-peers SECONDS] [--linger SECONDS]
    [--max-lead ROUNDS] [--lockstep] [--average-over C] [--bn-momentum M] [--weights-dir DIR]
    [--mode peer|client] [--zenoh-config FILE] [--cluster-size N] [--drain] [--dump FILE]
                                             (the demo passes these to df-node only when its
                                              --help lists them)

``--data DIR`` holds the partition files (see `delta_fabric_demo.data`), ``--init FILE`` the initial
canonical weights (raw little-endian f32, canonical order, with BatchNorm running statistics when
``--include-buffers``). Batches: uniform sampling with replacement from the node's partition with a
NumPy generator seeded ``seed * 1000 + index``.

Protocol on stdout, one JSON object per line:

* ``{"event": "ready", "index", "node", "framework", "num_params", "fingerprint"}`` once the
  transport is up and the neighbours are seen (or ``--wait-peers`` ran out);
* ``{"event": "progress", "index", "step", "accuracy" (null between evaluations), "bytes_sent"}``
  at least every 10 steps and at every evaluation (every ``--eval-every`` steps);
* ``{"event": "finished", "index", "step"}`` after the last step; with ``--drain`` the node then
  runs 3 sync rounds without training (DF-NUM-1's quiescent drain) and receives until every
  neighbour's last seq reached its own (every node makes as many entries when all run the same
  ``--steps`` and ``--sync-interval``), at most ``--wait-peers`` s (exit 1 if they did not); then it keeps receiving and relaying (no generation) until a line ``stop`` arrives on
  stdin, stdin closes, or ``--linger`` s pass;
* ``{"event": "done", "index", "accuracy", "per_class", "curve": [[step, acc], ...], "stats":
  {...}, "traffic": [[step, bytes_sent, bytes_received, bytes_relayed], ...], "last_seq",
  "origin_progress": {origin: last seq accepted}, "accepted_by_origin": {origin: entries
  accepted}}`` after a final evaluation; with sync on, optionally ``"shared_accuracy"`` and
  ``"shared_curve"``: the accuracy of the node's anchor, the model every node shares (its working
  weights also hold its unsent local progress). Then the node exits 0. ``traffic`` (optional) has a
  row per evaluation; the relayed
  bytes are the share of the sent bytes that carried relayed values (own and relayed entries share
  packets).

With ``--weights-dir DIR`` the node writes its canonical weights (raw little-endian f32, like
``--init``) at every evaluation as ``DIR/step{S:06d}.f32`` and after the final evaluation as
``DIR/final.f32``; the demo compares them across nodes (weight agreement, DF-NUM-1's measure).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from delta_fabric.fabric import Fabric


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--node-id", required=True, help="16 hex digits")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--init", type=Path, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sync", choices=("on", "off"), default="on")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--ratio", type=float, default=0.05)
    p.add_argument("--sync-interval", type=int, default=10)
    p.add_argument("--include-buffers", action="store_true")
    p.add_argument("--namespace", default="deltafabric/demo")
    p.add_argument("--listen", default=None)
    p.add_argument("--connect", action="append", default=[])
    p.add_argument(
        "--neighbours", default="", help="comma-separated node ids (hex); empty: every node"
    )
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument(
        "--bn-momentum",
        type=float,
        default=None,
        help="BatchNorm running-statistics momentum (default: PyTorch's 0.1)",
    )
    p.add_argument(
        "--max-lead",
        type=int,
        default=2,
        help="sync rounds this node may run ahead of the slowest peer it hears (0: no pacing)",
    )
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="apply every peer's round r at the same local step on every node (waits for it; "
        "full mesh only; see delta_fabric_demo.rounds); replaces --max-lead pacing",
    )
    p.add_argument(
        "--encoding",
        type=str.upper,
        choices=("F32", "F16", "BF16", "Q8"),
        default="F32",
        help="SyncConfig.encoding (DF-PAR-10; Q8 added in 1.1, section 6.8)",
    )
    p.add_argument(
        "--index-encoding",
        type=str.upper,
        choices=("PLAIN", "PACKED"),
        default="PLAIN",
        help="SyncConfig.index_encoding (DF-PAR-110, 1.1): PACKED = delta + varint or bitmap",
    )
    p.add_argument(
        "--average-over",
        type=int,
        default=1,
        help="SyncConfig.average_over (DF-GEN-70): C > 1 averages the progress of C nodes; "
        "1 sums it (1.0)",
    )
    p.add_argument(
        "--keys",
        default=None,
        help="keys file of a signed cluster (spec section 13.1; needs --secret-key)",
    )
    p.add_argument("--secret-key", default=None, help="file of this node's Ed25519 secret seed")
    p.add_argument(
        "--hold-residual",
        action="store_true",
        help="hold the unsent residual aside; the working weights restart from the shared model "
        "after every sync (Fabric.v1_0(hold_residual=True), DF-GEN-240, node-local)",
    )
    p.add_argument(
        "--relay-policy",
        choices=("ALL", "NEEDED"),
        default="ALL",
        help="SyncConfig.relay_policy (DF-PAR-60); NEEDED only on symmetric links (DF-RLY-64)",
    )
    p.add_argument(
        "--weights-dir",
        type=Path,
        default=None,
        help="write the canonical weights at every evaluation and at the end into this directory",
    )
    p.add_argument("--wait-peers", type=float, default=30.0)
    p.add_argument("--linger", type=float, default=30.0)
    p.add_argument("--mode", choices=("peer", "client"), default="peer", help="Zenoh session mode")
    p.add_argument(
        "--zenoh-config",
        type=Path,
        default=None,
        help="a Zenoh JSON5 config file used as is (endpoints and mode then come from the file)",
    )
    p.add_argument(
        "--cluster-size",
        type=int,
        default=1,
        help="number of nodes in the cluster; the learning rate used is --lr / --cluster-size",
    )
    p.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="write the final canonical weights here (raw little-endian f32, like --init)",
    )
    p.add_argument(
        "--drain",
        action="store_true",
        help="after the last step, 3 sync rounds without training (DF-NUM-1), then receive until "
        "every neighbour's last seq reached this node's (at most --wait-peers s; exit 1 if not)",
    )


class Channel(Protocol):
    """How a node talks to the demo parent: JSON events out, a stop signal in."""

    def emit(self, obj: dict[str, Any]) -> None: ...

    def stop_requested(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the stop signal; True once it came."""
        ...


class StdioChannel:
    """Events as JSON lines on stdout; ``stop`` (or EOF) on stdin (the df-node contract)."""

    def __init__(self) -> None:
        self._stop = _stop_watcher()

    def emit(self, obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def stop_requested(self, timeout: float) -> bool:
        return self._stop.wait(timeout)


class PipeChannel:
    """Events as JSON text over a multiprocessing connection; stop via a multiprocessing event."""

    def __init__(self, conn: Connection, stop: Any) -> None:
        self._conn = conn
        self._stop = stop

    def emit(self, obj: dict[str, Any]) -> None:
        self._conn.send_bytes(json.dumps(obj).encode())

    def stop_requested(self, timeout: float) -> bool:
        return bool(self._stop.wait(timeout))


def child_entry(argv: list[str], conn: Connection, stop: Any, log_path: str) -> None:
    """Entry point of a node started by the demo through a multiprocessing (forkserver) context."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    try:
        rc = run_node(parse_args(argv), PipeChannel(conn, stop))
    except BaseException:
        import traceback

        traceback.print_exc()
        raise
    finally:
        conn.close()
    if rc:
        raise SystemExit(rc)


def _stop_watcher() -> threading.Event:
    """Set when stdin says ``stop`` or closes."""
    ev = threading.Event()

    def watch() -> None:
        try:
            for line in sys.stdin:
                if line.strip() == "stop":
                    break
        finally:
            ev.set()

    threading.Thread(target=watch, daemon=True).start()
    return ev


def node_signing(args: Any, node_id: int) -> Any:
    """The node's `delta_fabric.signing.Signing` from ``--keys`` / ``--secret-key`` (a signed
    cluster, spec section 13.1), or None without them."""
    if args.keys is None and args.secret_key is None:
        return None
    if args.keys is None or args.secret_key is None:
        raise SystemExit("--keys and --secret-key go together")
    from delta_fabric.signing import Signing, load_keys, load_secret

    return Signing.from_json(load_keys(args.keys), load_secret(args.secret_key), node_id=node_id)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m delta_fabric_demo.node", description=__doc__)
    add_node_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run_node(parse_args(argv), StdioChannel())


def run_node(args: argparse.Namespace, channel: Channel) -> int:
    """Train one node (see the module docstring); reports through ``channel``."""
    t_entry = time.monotonic()
    import torch
    from delta_fabric.config import SyncConfig
    from delta_fabric.encodings import codec
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.torch import TorchStore, module_manifest
    from torch.nn import functional as F

    from delta_fabric_demo.data import read_partition
    from delta_fabric_demo.model import DigitsCNN, canonical_vector, load_canonical
    from delta_fabric_demo.rounds import RoundGate

    problem = _check_cluster_options(args)
    if problem is not None:  # before anything is opened or read
        print(f"node: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    _emit = channel.emit
    train, test, _meta = read_partition(args.data)
    model = DigitsCNN()
    load_canonical(model, args.include_buffers, args.init)
    if args.bn_momentum is not None:
        model.bn1.momentum = args.bn_momentum
    node_id = int(args.node_id, 16)
    cfg = SyncConfig.v1_0(
        alpha=args.alpha,
        ratio=args.ratio,
        sync_interval=args.sync_interval,
        include_buffers=args.include_buffers,
        average_over=args.average_over,
        relay_policy=args.relay_policy,
        encoding=codec(args.encoding).encoding,
        index_encoding=args.index_encoding,
    )
    manifest = module_manifest(model, args.include_buffers)
    fabric: Fabric | None = None
    transport: Any = None
    gate: RoundGate | None = None
    origins: set[int] = set()
    neighbours: list[int] = []
    wait_peers_s = 0.0
    if args.sync == "on":
        from delta_fabric.transports.base import PeerTimeoutError
        from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

        neighbours = [int(h, 16) for h in args.neighbours.split(",") if h]
        transport = ZenohTransport(
            ZenohOptions(
                node_id=node_id,
                namespace=args.namespace,
                listen=[args.listen] if args.listen else [],
                connect=list(args.connect),
                mode=args.mode,
                config_file=args.zenoh_config,
                neighbours=neighbours or None,
                # plain TCP between the nodes, so that the demo's wire count (ss) sees every byte
                extra_config=[("transport/shared_memory/enabled", "false")],
            )
        )
        # Wait for the peers before the fabric starts: with relay policy NEEDED its start-up
        # advertisement (DF-RLY-63) then reaches them, so that none relays this node's first round.
        t_wait = time.monotonic()
        if neighbours:
            try:
                transport.wait_for_peers(len(neighbours), args.wait_peers, expected=neighbours)
            except PeerTimeoutError as exc:
                print(f"node {args.index}: {exc}; starting anyway", file=sys.stderr)
        wait_peers_s = time.monotonic() - t_wait
        if args.lockstep:
            gate = RoundGate(transport, cfg.max_packet_size)
        fabric = Fabric.v1_0(
            TorchStore(model, args.include_buffers),
            gate if gate is not None else transport,
            cfg,
            node_id=node_id,
            hold_residual=args.hold_residual,
            signing=node_signing(args, node_id),
        )
        origins = set(neighbours) or set(transport.peers())
    _emit(
        {
            "event": "ready",
            "index": args.index,
            "node": f"{node_id:016x}",
            "framework": "torch",
            "num_params": manifest.num_params,
            "fingerprint": manifest.fingerprint.hex(),
            "startup_s": round(time.monotonic() - t_entry, 3),
            "wait_peers_s": round(wait_peers_s, 3),
        }
    )

    t_ready = time.monotonic()
    xtr = torch.from_numpy(train.x)
    ytr = torch.from_numpy(train.y.astype(np.int64))
    xte = torch.from_numpy(test.x)
    yte = torch.from_numpy(test.y.astype(np.int64))
    lr = args.lr / args.cluster_size
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    rng = np.random.default_rng(args.seed * 1000 + args.index)

    def evaluate() -> tuple[float, list[float | None]]:
        model.eval()
        with torch.no_grad():
            pred = model(xte).argmax(1)
        model.train()
        per_class: list[float | None] = []
        for c in range(10):
            mask = yte == c
            n = int(mask.sum())
            per_class.append(float((pred[mask] == c).float().mean()) if n else None)
        return float((pred == yte).float().mean()), per_class

    shared_model: Any = None
    shared_store: Any = None
    if fabric is not None:  # the shared model (the anchor), evaluated beside the working weights
        shared_model = DigitsCNN()
        shared_store = TorchStore(shared_model, args.include_buffers)
    shared_curve: list[list[float]] = []

    def evaluate_shared(step: int) -> float | None:
        if fabric is None:
            return None
        shared_store.load(fabric.engine.anchor)
        shared_model.eval()
        with torch.no_grad():
            pred = shared_model(xte).argmax(1)
        acc = float((pred == yte).float().mean())
        shared_curve.append([step, acc])
        return acc

    paced_s = 0.0

    def pace(f: Fabric) -> float:
        """Bounded staleness, decided locally (`Fabric.pace`, DF-ZEN-156): wait (receiving and
        relaying) while this node is more than ``--max-lead`` sync rounds ahead of a live peer;
        a forged origin id never holds it back, a peer without progress for 5 s no longer does,
        and one call waits at most ``--wait-peers`` seconds."""
        return f.pace(args.max_lead, timeout=args.wait_peers)

    def lockstep(g: RoundGate, f: Fabric) -> float:
        """Release this node's latest round once every peer's same round is here (see
        delta_fabric_demo.rounds); a peer silent for ``--wait-peers`` s no longer holds it."""
        t0 = time.monotonic()
        r = f.engine.next_seq - 1
        if not g.wait_round(origins, r, args.wait_peers):
            print(
                f"node {args.index}: round {r} incomplete after {args.wait_peers}s", file=sys.stderr
            )
        g.release(r)
        f.poll()  # apply every peer's round r now, at the step of this node's own round r
        return time.monotonic() - t0

    if args.weights_dir is not None:
        args.weights_dir.mkdir(parents=True, exist_ok=True)

    def save_weights(name: str) -> None:
        if args.weights_dir is not None:
            vec = canonical_vector(model, args.include_buffers).astype("<f4")
            (args.weights_dir / f"{name}.f32").write_bytes(vec.tobytes())

    traffic: list[list[int]] = []

    def record_traffic(step: int) -> None:
        if fabric is None:
            traffic.append([step, 0, 0, 0])
            return
        values = fabric.own_values_sent + fabric.relay_values_sent
        relayed = fabric.bytes_sent * fabric.relay_values_sent // values if values else 0
        traffic.append([step, fabric.bytes_sent, fabric.transport.stats.received_bytes, relayed])

    curve: list[list[float]] = []
    acc0, _ = evaluate()
    curve.append([0, acc0])
    evaluate_shared(0)
    save_weights(f"step{0:06d}")
    record_traffic(0)
    model.train()
    t0 = time.monotonic()
    for step in range(1, args.steps + 1):
        sel = torch.from_numpy(rng.integers(0, ytr.numel(), size=args.batch))
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xtr[sel]), ytr[sel])
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        if fabric is not None:
            fabric.step()
            if gate is not None:
                if step % args.sync_interval == 0:
                    paced_s += lockstep(gate, fabric)
            elif args.max_lead > 0 and step % args.sync_interval == 0:
                paced_s += pace(fabric)
        acc: float | None = None
        if step % args.eval_every == 0 or step == args.steps:
            acc, _ = evaluate()
            curve.append([step, acc])
            evaluate_shared(step)
            save_weights(f"step{step:06d}")
            record_traffic(step)
        if acc is not None or step % 10 == 0:
            _emit(
                {
                    "event": "progress",
                    "index": args.index,
                    "step": step,
                    "accuracy": acc,
                    "bytes_sent": fabric.bytes_sent if fabric is not None else 0,
                }
            )
    train_s = time.monotonic() - t0
    if fabric is not None:
        fabric.sync_now()  # the last residual above the top-k goes out too
        if gate is not None:  # everyone's last round, then everything
            paced_s += lockstep(gate, fabric)
            gate.release_all()
            fabric.poll()
    _emit({"event": "finished", "index": args.index, "step": args.steps})
    if fabric is not None and args.drain:
        for _ in range(3):  # the quiescent drain of DF-NUM-1: sync rounds without training
            fabric.sync_now()
            fabric.poll()
    last_seq = fabric.engine.next_seq - 1 if fabric is not None else 0
    if fabric is not None and args.drain:
        drain_end = time.monotonic() + args.wait_peers
        while (behind := _behind(fabric, neighbours, last_seq)) and time.monotonic() < drain_end:
            transport.wait_for_packets(0.05)
            fabric.poll()
        if behind:
            print(
                f"node {args.index}: --drain: after {args.wait_peers:g} s these neighbours had not "
                f"reached seq {last_seq}: {behind}; counters {_drain_counters(fabric)}",
                file=sys.stderr,
            )
            transport.close()
            return 1
    deadline = time.monotonic() + args.linger
    while time.monotonic() < deadline:
        if fabric is not None:
            fabric.poll()
        if channel.stop_requested(0.01):
            break
    if fabric is not None:
        fabric.poll()
    acc, per_class = evaluate()
    shared_acc = evaluate_shared(args.steps)
    save_weights("final")
    if args.dump is not None:
        args.dump.write_bytes(canonical_vector(model, args.include_buffers).astype("<f4").tobytes())
    stats: dict[str, Any] = fabric.stats() if fabric is not None else {"bytes_sent": 0}
    stats["train_s"] = round(train_s, 3)
    stats["startup_s"] = round(t_ready - t_entry, 3)
    stats["wait_peers_s"] = round(wait_peers_s, 3)
    stats["paced_s"] = round(paced_s, 3)
    _emit(
        {
            "event": "done",
            "index": args.index,
            "accuracy": acc,
            "per_class": per_class,
            "curve": curve,
            "shared_accuracy": shared_acc,
            "shared_curve": shared_curve,
            "stats": stats,
            "traffic": traffic,
            "last_seq": last_seq,
            "origin_progress": {
                f"{q:016x}": seq
                for q, (_, seq) in sorted((fabric.origin_progress() if fabric else {}).items())
            },
            "accepted_by_origin": {
                f"{q:016x}": n
                for q, n in sorted((fabric.accepted_by_origin() if fabric else {}).items())
            },
        }
    )
    if transport is not None:
        transport.close()
    return 0


def _check_cluster_options(args: argparse.Namespace) -> str | None:
    """What is wrong with the cluster options (one line), or None."""
    if args.cluster_size < 1:
        return f"--cluster-size {args.cluster_size} must be >= 1"
    if args.zenoh_config is not None and (args.listen or args.connect or args.mode != "peer"):
        return "--zenoh-config is used as is: give the endpoints and the mode in the file"
    if args.drain and (args.sync != "on" or not [h for h in args.neighbours.split(",") if h]):
        return "--drain needs --neighbours (the nodes to wait for) and --sync on"
    return None


def _drain_counters(fabric: Fabric) -> dict[str, int]:
    """What tells a lost packet from a refused one or a seq never sent: the node's nonzero
    receive, repair and transport counters (rejections per code, drops per reason, queue drops,
    seqs requested and given up), flattened as ``section.name``."""
    out: dict[str, int] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(value, int) and not isinstance(value, bool) and value:
            out[prefix] = value

    stats = fabric.stats()
    for section in ("receive", "repair", "transport"):
        walk(section, stats.get(section))
    return out


def _behind(fabric: Fabric, neighbours: list[int], last_seq: int) -> dict[str, int]:
    """The neighbours whose last accepted seq is below ``last_seq``, with that seq."""
    progress = fabric.origin_progress()
    out = {f"{q:016x}": progress.get(q, (0, 0))[1] for q in neighbours}
    return {q: seq for q, seq in out.items() if seq < last_seq}


if __name__ == "__main__":
    sys.exit(main())
