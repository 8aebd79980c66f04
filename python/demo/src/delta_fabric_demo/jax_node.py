"""One JAX demo node: ``python -m delta_fabric_demo.jax_node ...``, the same command line and stdout
line protocol as the PyTorch node (`delta_fabric_demo.node`, where both are documented).

The model is the reference digits CNN in plain JAX
(`delta_fabric_conformance.drivers.jax_digits`: PyTorch's BatchNorm semantics, SGD with PyTorch's
momentum convention) in a `delta_fabric.stores.jax.JaxStore`; every step hands the variables through
``variables = fabric.update(variables)``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from delta_fabric_demo.node import Channel, StdioChannel, node_signing, parse_args


def main(argv: list[str] | None = None) -> int:
    return run_node(parse_args(argv), StdioChannel())


def run_node(args: Any, channel: Channel) -> int:
    """Train one node (protocol of `delta_fabric_demo.node`); reports through ``channel``."""
    t_entry = time.monotonic()
    import jax.numpy as jnp
    from delta_fabric.config import SyncConfig
    from delta_fabric.encodings import codec
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.jax import JaxStore
    from delta_fabric_conformance.drivers import jax_digits

    from delta_fabric_demo.data import read_partition

    emit = channel.emit
    train, test, _meta = read_partition(args.data)
    store = JaxStore(jax_digits.digits_variables(), include_buffers=args.include_buffers)
    init = np.fromfile(args.init, dtype="<f4").astype(np.float32)
    store.load(init)  # StoreError if the file does not hold this model's canonical weights
    jax_digits.warm_up(store.state(), args.batch)  # compile now, not during the first steps
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
    fabric: Fabric | None = None
    transport: Any = None
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
                neighbours=neighbours or None,
            )
        )
        fabric = Fabric.v1_0(
            store,
            transport,
            cfg,
            node_id=node_id,
            hold_residual=args.hold_residual,
            signing=node_signing(args, node_id),
        )
        t_wait = time.monotonic()
        if neighbours:
            try:
                transport.wait_for_peers(len(neighbours), args.wait_peers, expected=neighbours)
            except PeerTimeoutError as exc:
                print(f"node {args.index}: {exc}; starting anyway", file=sys.stderr)
        wait_peers_s = time.monotonic() - t_wait
    emit(
        {
            "event": "ready",
            "index": args.index,
            "node": f"{node_id:016x}",
            "framework": "jax",
            "num_params": store.manifest.num_params,
            "fingerprint": store.manifest.fingerprint.hex(),
            "startup_s": round(time.monotonic() - t_entry, 3),
            "wait_peers_s": round(wait_peers_s, 3),
        }
    )

    t_ready = time.monotonic()
    xtr, ytr = jnp.asarray(train.x), jnp.asarray(train.y.astype(np.int32))
    yte = test.y.astype(np.int64)
    lr, momentum = jnp.float32(args.lr), jnp.float32(args.momentum)
    bn_momentum = jnp.float32(0.1 if args.bn_momentum is None else args.bn_momentum)
    rng = np.random.default_rng(args.seed * 1000 + args.index)
    variables = store.state()
    velocity = jax_digits.zeros_like_params(variables)

    def evaluate() -> tuple[float, list[float | None]]:
        pred = jax_digits.predict(store.state(), test.x)
        per_class = [
            float((pred[yte == c] == c).mean()) if (yte == c).any() else None for c in range(10)
        ]
        return float((pred == yte).mean()), per_class

    paced_s = 0.0

    def pace(f: Fabric) -> float:
        """Bounded staleness, decided locally (`Fabric.pace`, DF-ZEN-156): wait (receiving and
        relaying) while this node is more than ``--max-lead`` sync rounds ahead of a live peer;
        a forged origin id never holds it back, a peer without progress for 5 s no longer does,
        and one call waits at most ``--wait-peers`` seconds."""
        return f.pace(args.max_lead, timeout=args.wait_peers)

    curve: list[list[float]] = []
    acc0, _ = evaluate()
    curve.append([0, acc0])
    t0 = time.monotonic()
    for step in range(1, args.steps + 1):
        sel = jnp.asarray(rng.integers(0, int(ytr.shape[0]), size=args.batch))
        variables, velocity, _ = jax_digits.sgd_step(
            variables, velocity, xtr[sel], ytr[sel], lr, momentum, bn_momentum
        )
        if fabric is not None:
            variables = fabric.update(variables)
            if args.max_lead > 0 and step % args.sync_interval == 0:
                paced_s += pace(fabric)
                variables = store.state()  # pacing received and applied updates
        else:
            store.set_state(variables)
        acc: float | None = None
        if step % args.eval_every == 0 or step == args.steps:
            acc, _ = evaluate()
            curve.append([step, acc])
        if acc is not None or step % 10 == 0:
            emit(
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
    emit({"event": "finished", "index": args.index, "step": args.steps})
    deadline = time.monotonic() + args.linger
    while time.monotonic() < deadline:
        if fabric is not None:
            fabric.poll()
        if channel.stop_requested(0.01):
            break
    if fabric is not None:
        fabric.poll()
    acc, per_class = evaluate()
    stats: dict[str, Any] = fabric.stats() if fabric is not None else {"bytes_sent": 0}
    stats["train_s"] = round(train_s, 3)
    stats["startup_s"] = round(t_ready - t_entry, 3)
    stats["wait_peers_s"] = round(wait_peers_s, 3)
    stats["paced_s"] = round(paced_s, 3)
    emit(
        {
            "event": "done",
            "index": args.index,
            "accuracy": acc,
            "per_class": per_class,
            "curve": curve,
            "stats": stats,
        }
    )
    if fabric is not None:
        fabric.close()
    if transport is not None:
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
