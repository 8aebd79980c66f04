"""Live scripted nodes of a Python driver's ``peer`` command (driver protocol section 5.6), and the
model kit a framework plugs into them.

A node is the package's own node, :class:`~delta_fabric.fabric.Fabric`, on the Zenoh transport
(:class:`~delta_fabric.transports.zenoh.ZenohTransport`): around a
:class:`~delta_fabric.stores.numpy.NumpyStore` over a flat f32 vector for the ``flat`` model (scripted
deltas are added to it, no framework needed), and for ``digits_cnn`` around the framework's store of the
framework's digits CNN, built by the driver's :class:`ModelKit` (trained with plain SGD,
``fabric.step()`` after every optimizer step). The only additions are a log of accepted entries (the
fabric's ``on_accepted`` callback, :func:`accepted_logger`) and a log of published packets (a transport
wrapper). :class:`PeerHost` takes a ``node_factory`` to replace :class:`PeerNode` altogether.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.engine import AcceptedEntry
from delta_fabric.manifest import Manifest
from delta_fabric.replay import Counters
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.base import SnapshotProvider, TransportStats
from delta_fabric.wire import decode_packet, encode_packet, packet_from_json
from numpy.typing import NDArray

from delta_fabric_conformance.kit.models import model_manifest

__all__ = [
    "KitFabric",
    "ModelKit",
    "NodeArgs",
    "NodeFactory",
    "PeerHost",
    "PeerNode",
    "accepted_logger",
    "load_data",
]


class KitFabric(Protocol):
    """What a live node uses of a fabric (a subset of `delta_fabric.fabric.Fabric`'s API)."""

    @property
    def manifest(self) -> Manifest: ...

    @property
    def incarnation(self) -> int: ...

    @property
    def steps(self) -> int: ...

    @property
    def engine(self) -> Any: ...  # .counters: delta_fabric Counters

    def step(self) -> int: ...

    def poll(self) -> int: ...

    def sync_now(self) -> int: ...

    def snapshot(self) -> Any: ...  # .anchor: the f32 anchor vector

    def active_vector(self) -> NDArray[np.float32]: ...  # the store's weights, canonical flat f32

    def close(self) -> None: ...


@dataclass(frozen=True)
class NodeArgs:
    """Everything a live node's fabric is built from, except the model."""

    transport: Any  # a delta_fabric Transport (wrapped: it records what is published)
    config: SyncConfig
    node_id: int
    incarnation: int
    bootstrap: bool  # load a live peer's snapshot before the first step (DF-ZEN-5)
    bootstrap_timeout: float
    accepted: list[dict[str, Any]]  # the log every accepted entry must be appended to

    def fabric(self, store: Any) -> KitFabric:
        """A `delta_fabric.fabric.Fabric` around a weight store (``delta_fabric.store.WeightStore``)
        that logs accepted entries: the one line a :class:`ModelKit` needs for a store."""
        from delta_fabric.fabric import Fabric

        fabric: KitFabric = Fabric.v1_0(
            store,
            self.transport,
            self.config,
            node_id=self.node_id,
            incarnation=self.incarnation,
            bootstrap=self.bootstrap,
            bootstrap_timeout=self.bootstrap_timeout,
            on_accepted=accepted_logger(self.accepted),
        )
        return fabric

    def record_accepted(self, entries: Iterable[Any]) -> None:
        """Log accepted entries (objects with ``origin``, ``incarnation``, ``seq``, ``hops``, such as
        the engine's accepted-entry headers): for a fabric not built with :meth:`build`."""
        self.accepted.extend(_entry_id(e) for e in entries)


class ModelKit(Protocol):
    """A framework's digits CNN for live scenarios: the part of a driver that knows the framework.

    ``weights`` and every vector are canonical flat f32 (the manifest's order and shapes); data rows are
    ``[n, 64]`` f32 pixels (row-major 8x8 images) with ``int64`` labels.
    """

    #: the ``framework`` a driver reports in ``hello`` (``torch``, ``jax``, ...)
    framework: str

    def make_model(
        self, manifest: Manifest, weights: NDArray[np.float32], config: SyncConfig
    ) -> Any:
        """The digits CNN with these canonical weights; its manifest must equal ``manifest``."""
        ...

    def make_fabric(self, model: Any, args: NodeArgs) -> KitFabric:
        """The node around ``model`` (usually ``args.fabric(FrameworkStore(model))``)."""
        ...

    def train_step(
        self,
        model: Any,
        fabric: KitFabric,
        x: NDArray[np.float32],
        y: NDArray[np.int64],
        lr: float,
    ) -> Any:
        """One plain SGD step on the batch (mean cross-entropy, training mode), then ``fabric.step()``.
        Returns the model (a functional framework returns the updated one)."""
        ...

    def predict(self, model: Any, fabric: KitFabric, x: NDArray[np.float32]) -> NDArray[np.int64]:
        """Class predictions in evaluation mode (BatchNorm uses its running statistics)."""
        ...

    def active(self, model: Any, fabric: KitFabric) -> NDArray[np.float32]:
        """The model's current canonical flat weights."""
        ...


def load_data(data: Mapping[str, Any]) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """A ``data`` argument of ``train`` / ``evaluate`` (driver protocol 5.6): rows and labels."""
    n = int(data["count"])
    x = np.fromfile(str(data["x"]), dtype="<f4").reshape(n, 64).astype(np.float32)
    y = np.fromfile(str(data["y"]), dtype=np.uint8).astype(np.int64)
    if y.size != n:
        raise ValueError(f"data: {y.size} labels for {n} rows")
    return x, y


def _sha(a: NDArray[np.float32]) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def _b64(a: NDArray[np.float32]) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def _entry_id(e: Any) -> dict[str, Any]:
    return {
        "origin": f"{e.origin:016x}",
        "incarnation": f"{e.incarnation:016x}",
        "seq": int(e.seq),
        "hops": int(e.hops),
    }


def accepted_logger(log: list[dict[str, Any]]) -> Callable[[Sequence[AcceptedEntry]], None]:
    """An ``on_accepted`` callback (`delta_fabric.fabric.Fabric`) appending every accepted entry's
    ``{origin, incarnation, seq, hops}`` to ``log``."""

    def on_accepted(entries: Sequence[AcceptedEntry]) -> None:
        log.extend(_entry_id(e) for e in entries)

    return on_accepted


class _RecordingTransport:
    """Delegates to a transport and keeps the packets published since the last `take`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.published: list[bytes] = []

    @property
    def node_id(self) -> int:
        return int(self.inner.node_id)

    def publish(self, packet: bytes) -> None:
        self.inner.publish(packet)
        self.published.append(bytes(packet))

    def take(self) -> list[bytes]:
        out, self.published = self.published, []
        return out

    def drain(self, max_packets: int | None = None) -> list[bytes]:
        out: list[bytes] = self.inner.drain(max_packets)
        return out

    def take_screened(self) -> dict[Any, int]:
        """The inner transport's payloads refused before its queue (DF-ZEN-154), for the node to
        count as the engine counts them."""
        return dict(self.inner.take_screened())

    def set_members(self, members: Collection[int] | None, *, live: bool = False) -> None:
        self.inner.set_members(members, live=live)  # DF-ZEN-151, DF-ZEN-155

    def serve_info(self, provider: Any) -> None:
        self.inner.serve_info(provider)

    def info(self, peer: int | None = None, timeout: float = 2.0) -> dict[int, dict[str, Any]]:
        return dict(self.inner.info(peer, timeout))

    def wait_for_packets(self, timeout: float) -> bool:
        return bool(self.inner.wait_for_packets(timeout))

    def peers(self) -> frozenset[int]:
        return frozenset(self.inner.peers())

    def wait_for_peers(
        self, n: int, timeout: float, *, expected: Collection[int] | None = None
    ) -> frozenset[int]:
        return frozenset(self.inner.wait_for_peers(n, timeout, expected=expected))

    def serve_snapshot(self, provider: SnapshotProvider) -> None:
        self.inner.serve_snapshot(provider)

    def fetch_snapshot(
        self, peer: int | None, fingerprint: bytes, timeout: float = 30.0
    ) -> tuple[NDArray[np.float32], int]:
        out: tuple[NDArray[np.float32], int] = self.inner.fetch_snapshot(peer, fingerprint, timeout)
        return out

    @property
    def stats(self) -> TransportStats:
        st: TransportStats = self.inner.stats
        return st

    def close(self) -> None:
        self.inner.close()


class PeerNode:
    """One live node (one ``peer`` session). ``kit`` builds the digits CNN (None: flat model only)."""

    def __init__(self, join: Mapping[str, Any], kit: ModelKit | None = None) -> None:
        self.kit = kit
        self.join_args = dict(join)
        self.node_id = int(join["node_id"], 16)
        self.model = dict(join["model"])
        known = set(SyncConfig.__dataclass_fields__)
        self.config = SyncConfig.from_json({k: v for k, v in join["config"].items() if k in known})
        self.manifest = model_manifest(self.model, self.config.include_buffers)
        self.accepted: list[dict[str, Any]] = []
        self.past_counters: list[Counters] = []
        self.past_dropped_oversize = 0  # relay_dropped_oversize of earlier incarnations
        self.transport: _RecordingTransport | None = None
        self.module: Any = None
        # the flat model's weights
        self.flat: NDArray[np.float32] = np.zeros(self.manifest.num_params, dtype=np.float32)
        init = join["init"]
        if init["kind"] == "weights":
            w = np.frombuffer(base64.b64decode(init["b64"]), dtype="<f4").astype(np.float32)
            if w.shape != self.flat.shape:
                raise ValueError(f"init weights have {w.size} values, the model {self.flat.size}")
            self.flat[:] = w
        elif init["kind"] not in ("zeros", "snapshot"):
            raise ValueError(f"unknown init kind {init['kind']!r}")
        if self.model["kind"] == "digits_cnn":
            if kit is None:
                raise ValueError(
                    "this driver has no model kit: the digits_cnn model is not supported"
                )
            self.module = kit.make_model(self.manifest, self.flat.copy(), self.config)
        self.fabric = self._make_fabric(
            int(join["incarnation"], 16),
            bootstrap=init["kind"] == "snapshot",
            timeout=float(init.get("timeout_s", 30.0)),
        )

    def _open_transport(self) -> _RecordingTransport:
        from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

        j = self.join_args
        sub = list(j.get("subscribe", ["*"]))
        neighbours = None if sub == ["*"] else [int(s, 16) for s in sub]
        opts = ZenohOptions(
            node_id=self.node_id,
            namespace=str(j["namespace"]),
            mode="peer",
            listen=list(j["listen"]),
            connect=list(j["connect"]),
            multicast_scouting=False,
            gossip_scouting=False,
            neighbours=neighbours,
            max_packet_size=self.config.max_packet_size,
        )
        return _RecordingTransport(ZenohTransport(opts))

    def _make_fabric(self, incarnation: int, *, bootstrap: bool, timeout: float) -> KitFabric:
        self.transport = self._open_transport()
        args = NodeArgs(
            self.transport,
            self.config,
            self.node_id,
            incarnation,
            bootstrap,
            timeout,
            self.accepted,
        )
        fabric: KitFabric
        if self.module is not None:
            assert self.kit is not None
            fabric = self.kit.make_fabric(self.module, args)
        else:
            arrays = self.manifest.split(self.flat)  # views: the fabric updates self.flat in place
            fabric = args.fabric(NumpyStore(arrays))
        if fabric.manifest.fingerprint != self.manifest.fingerprint:
            raise ValueError("the fabric's manifest differs from the scenario model's")
        return fabric

    def close(self) -> None:
        if self.transport is not None:
            self.fabric.close()
            self.transport.close()
            self.transport = None

    def net(self) -> _RecordingTransport:
        if self.transport is None:
            raise ValueError("the node's transport is closed")
        return self.transport

    def raw_publish(self, packet: bytes) -> None:
        """Publish bytes on the node's delta key as they are (no engine, not logged as a step)."""
        self.net().inner.publish(packet)

    def _published(self) -> list[dict[str, Any]]:
        assert self.transport is not None
        out: list[dict[str, Any]] = []
        for p in self.transport.take():
            out.extend(_entry_id(e) for e in decode_packet(p, self.config.max_packet_size).entries)
        return out

    # protocol steps --------------------------------------------------------------------------------
    def step(self, sync: bool, delta: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """One protocol step (receive, apply, relay; generate when ``sync``); the entries published."""
        if delta is not None:
            if self.module is not None:
                raise ValueError("a scripted delta needs the flat model")
            idx = np.asarray(delta["indices"], dtype=np.int64)
            vals = np.asarray([float(v) for v in delta["values"]], dtype=np.float64).astype(
                np.float32
            )
            self.flat[idx] = self.flat[idx] + vals
        if sync:
            self.fabric.sync_now()
        else:
            self.fabric.poll()
        return self._published()

    def _matches(self, want: Mapping[str, Any]) -> bool:
        return any(
            a["origin"] == want["origin"]
            and a["seq"] == int(want["seq"])
            and ("incarnation" not in want or a["incarnation"] == want["incarnation"])
            for a in self.accepted
        )

    def wait(self, until: Mapping[str, Any], timeout: float) -> bool:
        assert self.transport is not None
        deadline = time.monotonic() + timeout
        while True:
            self.step(False)
            if "accepted" in until and all(self._matches(w) for w in until["accepted"]):
                return True
            if "packets_received" in until and self.counters().packets_received >= int(
                until["packets_received"]
            ):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.transport.wait_for_packets(min(0.05, left))

    def settle(self, quiet_ms: float, timeout: float) -> None:
        assert self.transport is not None
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            before = self.counters().packets_received
            self.step(False)
            if self.counters().packets_received != before:
                last = time.monotonic()
            elif time.monotonic() - last >= quiet_ms / 1000.0:
                return
            self.transport.wait_for_packets(0.02)

    def restart(self, incarnation: int, connect: Sequence[str] | None = None) -> None:
        """A process restart that kept its weights: a new fabric (anchor = the current weights), a new
        incarnation, seqs from 1, no replay windows (DF-ZEN-13)."""
        if connect is not None:
            self.join_args["connect"] = list(connect)
        self.past_counters.append(self.fabric.engine.counters.copy())
        self.past_dropped_oversize += self.fabric.engine.relay_dropped_oversize
        self.close()
        self.fabric = self._make_fabric(incarnation, bootstrap=False, timeout=0.0)

    def counters(self) -> Counters:
        total: Counters = self.fabric.engine.counters.copy()
        for c in self.past_counters:
            total.packets_received += c.packets_received
            total.packets_accepted += c.packets_accepted
            total.packets_rejected += c.packets_rejected
            total.entries_accepted += c.entries_accepted
            total.entries_relayed += c.entries_relayed
            total.values_applied += c.values_applied
            for code, n in c.errors.items():
                total.errors[code] = total.errors.get(code, 0) + n
            for reason, n in c.drops.items():
                total.drops[reason] = total.drops.get(reason, 0) + n
        return total

    def active(self) -> NDArray[np.float32]:
        if self.module is not None:
            assert self.kit is not None
            return np.ascontiguousarray(self.kit.active(self.module, self.fabric), dtype=np.float32)
        flat: NDArray[np.float32] = np.array(self.flat, dtype=np.float32)
        return flat

    def report(self, weights: bool) -> dict[str, Any]:
        active = self.active()
        anchor = self.fabric.snapshot().anchor
        out: dict[str, Any] = {
            "op": "report",
            "node_id": f"{self.node_id:016x}",
            "incarnation": f"{self.fabric.incarnation:016x}",
            "fingerprint": self.manifest.fingerprint.hex(),
            "num_params": self.manifest.num_params,
            "accepted": list(self.accepted),
            "counters": {
                **self.counters().to_json(),
                "relay_dropped_oversize": self.past_dropped_oversize
                + self.fabric.engine.relay_dropped_oversize,
            },
            "active_sha256": _sha(active),
            "anchor_sha256": _sha(anchor),
            "steps": self.fabric.steps,
        }
        if weights:
            out["active_b64"] = _b64(active)
            out["anchor_b64"] = _b64(anchor)
        return out

    # training (capability peer.train) ---------------------------------------------------------------
    def train(self, args: Mapping[str, Any]) -> int:
        if self.module is None or self.kit is None:
            raise ValueError("train needs the digits_cnn model")
        x, y = load_data(args["data"])
        gen = np.random.default_rng(int(args.get("seed", 0)))
        steps = int(args["steps"])
        bs = int(args.get("batch_size", 32))
        lr = float(args["lr"])
        for _ in range(steps):
            idx = gen.integers(0, x.shape[0], size=bs)
            # the kit: one SGD step, then fabric.step() (receive/apply/relay, generate every interval)
            self.module = self.kit.train_step(self.module, self.fabric, x[idx], y[idx], lr)
        if self.transport is not None:
            self.transport.take()  # what training published is not reported entry by entry
        return steps

    def evaluate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if self.module is None or self.kit is None:
            raise ValueError("evaluate needs the digits_cnn model")
        x, y = load_data(args["data"])
        pred = np.asarray(self.kit.predict(self.module, self.fabric, x), dtype=np.int64)
        per_class = [
            float((pred[y == c] == c).mean()) if (y == c).any() else 0.0 for c in range(10)
        ]
        return {"op": "evaluate", "accuracy": float((pred == y).mean()), "per_class": per_class}


#: Builds the node of one session from its ``join`` instruction.
NodeFactory = Callable[[Mapping[str, Any]], PeerNode]


class PeerHost:
    """The sessions of one driver process. A session's node is ``node_factory(join)``, by default
    ``PeerNode(join, kit)``."""

    def __init__(
        self, kit: ModelKit | None = None, *, node_factory: NodeFactory | None = None
    ) -> None:
        self.kit = kit
        self.node_factory: NodeFactory = node_factory or (lambda join: PeerNode(join, kit))
        self.nodes: dict[str, PeerNode] = {}

    def close(self) -> None:
        for n in self.nodes.values():
            n.close()
        self.nodes.clear()

    def run(
        self, session: str, script: Sequence[Mapping[str, Any]], timeout: float
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        events: list[dict[str, Any]] = []
        for ins in script:
            if time.monotonic() > deadline:
                raise TimeoutError(f"peer script of {session!r} ran past {timeout}s")
            events.append(self._run_one(session, ins, deadline))
        return events

    def _node(self, session: str) -> PeerNode:
        node = self.nodes.get(session)
        if node is None:
            raise ValueError(f"session {session!r} has not joined")
        return node

    def _run_one(self, session: str, ins: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        op = ins["op"]
        left = max(0.0, deadline - time.monotonic())
        if op == "join":
            if session in self.nodes:
                raise ValueError(f"session {session!r} already joined")
            node = self.node_factory(ins)
            self.nodes[session] = node
            return {
                "op": "join",
                "fingerprint": node.manifest.fingerprint.hex(),
                "num_params": node.manifest.num_params,
            }
        node = self._node(session)
        if op == "wait_alive":
            ids = [int(n, 16) for n in ins["nodes"]]
            live = node.net().wait_for_peers(
                len(ids), min(float(ins.get("timeout_s", 20.0)), left), expected=ids
            )
            time.sleep(
                float(ins.get("grace_ms", 300)) / 1000.0
            )  # subscriptions propagate after tokens
            return {"op": "wait_alive", "alive": [f"{n:016x}" for n in sorted(live)]}
        if op == "step":
            published = node.step(bool(ins["sync"]), ins.get("delta"))
            return {"op": "step", "published": published}
        if op == "send":
            for p in ins["packets"]:
                node.raw_publish(encode_packet(packet_from_json(p)))
            return {"op": "send", "count": len(ins["packets"])}
        if op == "inject":
            for p in ins["packets"]:
                node.raw_publish(base64.b64decode(p))
            return {"op": "inject", "count": len(ins["packets"])}
        if op == "wait":
            ok = node.wait(ins["until"], min(float(ins["timeout_s"]), left))
            return {"op": "wait", "satisfied": ok}
        if op == "settle":
            node.settle(
                float(ins.get("quiet_ms", 300)), min(float(ins.get("timeout_s", 10.0)), left)
            )
            return {"op": "settle"}
        if op == "restart":
            node.restart(int(ins["incarnation"], 16), ins.get("connect"))
            return {"op": "restart"}
        if op == "train":
            return {"op": "train", "steps": node.train(ins)}
        if op == "evaluate":
            return node.evaluate(ins)
        if op == "report":
            return node.report(bool(ins.get("weights", False)))
        if op == "leave":
            node.close()
            del self.nodes[session]
            return {"op": "leave"}
        raise ValueError(f"unknown instruction {op!r}")
