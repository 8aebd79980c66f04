"""Live scripted nodes of the Python driver's ``peer`` command (driver protocol section 5.6).

A node is the package's own adapter loop on the Zenoh transport
(:class:`~delta_fabric.transports.zenoh.ZenohTransport`): :class:`~delta_fabric.adapters.numpy.NumpyFabric`
over a flat f32 vector for the ``flat`` model (scripted deltas are added to it), and the PyTorch
:class:`~delta_fabric.adapters.torch.Fabric` around the demo's ``DigitsCNN`` for ``digits_cnn`` (trained
with plain SGD, ``Fabric.step()`` after every optimizer step). The only additions are a log of accepted
entries (the fabric's ``on_accepted`` callback) and a log of published packets (a transport wrapper).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.adapters._base import FabricBase
from delta_fabric.adapters.numpy import NumpyFabric
from delta_fabric.config import SyncConfig
from delta_fabric.engine import AcceptedEntry
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.replay import Counters
from delta_fabric.transports.base import SnapshotProvider, TransportStats
from delta_fabric.wire import decode_packet, encode_packet, packet_from_json

__all__ = ["PeerHost", "PeerNode", "model_manifest"]

#: The demo's digits CNN (``delta_fabric.demo.model.DigitsCNN``, ``df_node::model::DigitsCnn``).
DIGITS_CNN: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("bn1.bias", (16,)),
    ("bn1.running_mean", (16,)),
    ("bn1.running_var", (16,)),
    ("bn1.weight", (16,)),
    ("conv1.bias", (16,)),
    ("conv1.weight", (16, 1, 3, 3)),
    ("fc1.bias", (64,)),
    ("fc1.weight", (64, 256)),
    ("fc2.bias", (10,)),
    ("fc2.weight", (10, 64)),
)


def model_manifest(model: Mapping[str, Any], include_buffers: bool = False) -> Manifest:
    """The manifest of a scenario model (driver protocol 5.6 ``model``)."""
    kind = model["kind"]
    if kind == "flat":
        return Manifest(TensorSpec(str(t["name"]), tuple(t["shape"])) for t in model["tensors"])
    if kind == "digits_cnn":
        return Manifest(
            TensorSpec(name, shape)
            for name, shape in DIGITS_CNN
            if include_buffers or not name.startswith("bn1.running_")
        )
    raise ValueError(f"unknown model kind {kind!r}")


def _sha(a: NDArray[np.float32]) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def _b64(a: NDArray[np.float32]) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def _load_data(data: Mapping[str, Any]) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    n = int(data["count"])
    x = np.fromfile(str(data["x"]), dtype="<f4").reshape(n, 64).astype(np.float32)
    y = np.fromfile(str(data["y"]), dtype=np.uint8).astype(np.int64)
    if y.size != n:
        raise ValueError(f"data: {y.size} labels for {n} rows")
    return x, y


def _entry_id(e: Any) -> dict[str, Any]:
    return {
        "origin": f"{e.origin:016x}",
        "incarnation": f"{e.incarnation:016x}",
        "seq": int(e.seq),
        "hops": int(e.hops),
    }


def _log_accepted(log: list[dict[str, Any]]) -> Callable[[Sequence[AcceptedEntry]], None]:
    """An ``on_accepted`` callback appending every accepted entry's header to ``log``."""

    def on_accepted(entries: Sequence[AcceptedEntry]) -> None:
        log.extend(_entry_id(e) for e in entries)

    return on_accepted


def _torch_fabric_class() -> Callable[..., FabricBase]:
    from delta_fabric.adapters.torch import Fabric

    return Fabric


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
    """One live node (one ``peer`` session)."""

    def __init__(self, join: Mapping[str, Any], framework: str) -> None:
        self.framework = framework
        self.join_args = dict(join)
        self.node_id = int(join["node_id"], 16)
        self.model = dict(join["model"])
        known = set(SyncConfig.__dataclass_fields__)
        self.config = SyncConfig.from_json({k: v for k, v in join["config"].items() if k in known})
        self.manifest = model_manifest(self.model, self.config.include_buffers)
        self.accepted: list[dict[str, Any]] = []
        self.past_counters: list[Counters] = []
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
            self.module = self._make_module(self.flat)
        self.fabric = self._make_fabric(
            int(join["incarnation"], 16),
            bootstrap=init["kind"] == "snapshot",
            timeout=float(init.get("timeout_s", 30.0)),
        )

    def _make_module(self, flat: NDArray[np.float32]) -> Any:
        import torch

        # One thread: live scenarios run several nodes on few cores, and intra-op threads of a small
        # model only contend (measured: 15x slower with the default thread count on 2 cores).
        torch.set_num_threads(1)
        from delta_fabric.adapters.torch import module_manifest, module_tensors
        from delta_fabric.demo.model import DigitsCNN

        m = DigitsCNN()
        if module_manifest(m, self.config.include_buffers) != self.manifest:
            raise ValueError("DigitsCNN's manifest differs from the scenario model's")
        views = self.manifest.split(flat)
        with torch.no_grad():
            for name, t in module_tensors(m, self.config.include_buffers).items():
                t.copy_(torch.from_numpy(views[name]).reshape(t.shape))
        return m

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

    def _make_fabric(self, incarnation: int, *, bootstrap: bool, timeout: float) -> FabricBase:
        self.transport = self._open_transport()
        common: dict[str, Any] = {
            "node_id": self.node_id,
            "incarnation": incarnation,
            "bootstrap": bootstrap,
            "bootstrap_timeout": timeout,
            "on_accepted": _log_accepted(self.accepted),
        }
        fabric: FabricBase
        if self.module is not None:
            cls = _torch_fabric_class()
            fabric = cls(self.module, self.transport, self.config, **common)
        else:
            arrays = self.manifest.split(self.flat)  # views: the fabric updates self.flat in place
            fabric = NumpyFabric(arrays, self.transport, self.config, **common)
        if fabric.manifest.fingerprint != self.manifest.fingerprint:
            raise ValueError("the adapter's manifest differs from the scenario model's")
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
        self.close()
        self.fabric = self._make_fabric(incarnation, bootstrap=False, timeout=0.0)

    def counters(self) -> Counters:
        total = self.fabric.engine.counters.copy()
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
            out: NDArray[np.float32] = self.fabric.active_vector()
            return out
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
            "counters": self.counters().to_json(),
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
        import torch

        m = self.module
        if m is None:
            raise ValueError("train needs the digits_cnn model")
        x, y = _load_data(args["data"])
        gen = np.random.default_rng(int(args.get("seed", 0)))
        steps = int(args["steps"])
        bs = int(args.get("batch_size", 32))
        opt = torch.optim.SGD(m.parameters(), lr=float(args["lr"]))
        loss_fn = torch.nn.CrossEntropyLoss()
        xt, yt = torch.from_numpy(x).reshape(-1, 1, 8, 8), torch.from_numpy(y)
        m.train()
        for _ in range(steps):
            idx = torch.from_numpy(gen.integers(0, x.shape[0], size=bs))
            opt.zero_grad()
            loss_fn(m(xt[idx]), yt[idx]).backward()
            opt.step()
            self.fabric.step()  # the adapter: receive/apply/relay, generate every sync_interval
        if self.transport is not None:
            self.transport.take()  # what training published is not reported entry by entry
        return steps

    def evaluate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        m = self.module
        if m is None:
            raise ValueError("evaluate needs the digits_cnn model")
        x, y = _load_data(args["data"])
        m.eval()  # BatchNorm running statistics
        with torch.no_grad():
            pred = m(torch.from_numpy(x).reshape(-1, 1, 8, 8)).argmax(dim=1).numpy()
        m.train()
        per_class = [
            float((pred[y == c] == c).mean()) if (y == c).any() else 0.0 for c in range(10)
        ]
        return {"op": "evaluate", "accuracy": float((pred == y).mean()), "per_class": per_class}


class PeerHost:
    """The sessions of one driver process."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
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
            node = PeerNode(ins, self.framework)
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
