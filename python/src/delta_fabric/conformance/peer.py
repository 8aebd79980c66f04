"""Live scripted nodes of the Python driver's ``peer`` command (driver protocol section 5.6).

A node is the sans-IO :class:`~delta_fabric.engine.Engine` over a flat f32 weight vector, on the Zenoh
transport (:mod:`delta_fabric.transports.zenoh`). For the ``digits_mlp`` model the PyTorch parameters are
views of that flat vector (canonical layout, DF-MAN-3), so optimizer steps and received deltas act on the
same memory.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.snapshot import SnapshotSource
from delta_fabric.state import Admission, Counters
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
        self.lock = threading.Lock()
        self.accepted: list[dict[str, Any]] = []
        self.past_counters: list[Counters] = []
        self.steps = 0
        self.transport: Any = None
        self.torch_model: Any = None
        self.active = np.zeros(self.manifest.num_params, dtype=np.float32)
        self._open_transport()
        init = join["init"]
        incarnation = int(join["incarnation"], 16)
        if init["kind"] == "zeros":
            pass
        elif init["kind"] == "weights":
            w = np.frombuffer(base64.b64decode(init["b64"]), dtype="<f4").astype(np.float32)
            if w.shape != self.active.shape:
                raise ValueError(f"init weights have {w.size} values, the model {self.active.size}")
            self.active[:] = w
        elif init["kind"] == "snapshot":
            assert self.transport is not None
            anchor, _inc = self.transport.fetch_snapshot(
                int(init["from"], 16),
                self.manifest.fingerprint,
                timeout=float(init.get("timeout_s", 30.0)),
                num_params=self.manifest.num_params,
            )
            self.active[:] = np.asarray(anchor, dtype=np.float32)
        else:
            raise ValueError(f"unknown init kind {init['kind']!r}")
        self.engine = Engine(
            self.manifest, self.config, self.node_id, incarnation, self.active.copy()
        )
        assert self.transport is not None
        self.transport.serve_snapshot(self._snapshot_source)

    # network ---------------------------------------------------------------------------------------
    def _open_transport(self) -> None:
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
        self.transport = ZenohTransport(opts)

    def _snapshot_source(self) -> SnapshotSource:
        with self.lock:
            return SnapshotSource(
                self.engine.incarnation,
                self.manifest.fingerprint,
                self.engine.anchor,
                self.framework,
            )

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    # protocol steps --------------------------------------------------------------------------------
    def step(self, sync: bool, delta: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """One protocol step; returns the ids of the entries published."""
        with self.lock:
            if delta is not None:
                idx = np.asarray(delta["indices"], dtype=np.int64)
                vals = np.asarray([float(v) for v in delta["values"]], dtype=np.float64).astype(
                    np.float32
                )
                self.active[idx] = self.active[idx] + vals
            packets = self.transport.drain()
            res, out = self.engine.step(self.active, packets, sync=sync)
            for buf, outcome, verdicts in zip(
                packets, res.outcomes, res.entry_outcomes, strict=True
            ):
                if outcome is not None or Admission.ACCEPTED not in verdicts:
                    continue
                pkt = decode_packet(buf, self.config.max_packet_size)
                for e, v in zip(pkt.entries, verdicts, strict=True):
                    if v is Admission.ACCEPTED:
                        self.accepted.append(
                            {
                                "origin": f"{e.origin:016x}",
                                "incarnation": f"{e.incarnation:016x}",
                                "seq": int(e.seq),
                                "hops": int(e.hops),
                            }
                        )
            self.steps += 1
        published = []
        for p in out:
            self.transport.publish(p)
            for e in decode_packet(p, self.config.max_packet_size).entries:
                published.append(
                    {
                        "origin": f"{e.origin:016x}",
                        "incarnation": f"{e.incarnation:016x}",
                        "seq": int(e.seq),
                        "hops": int(e.hops),
                    }
                )
        return published

    def _matches(self, want: Mapping[str, Any]) -> bool:
        return any(
            a["origin"] == want["origin"]
            and a["seq"] == int(want["seq"])
            and ("incarnation" not in want or a["incarnation"] == want["incarnation"])
            for a in self.accepted
        )

    def wait(self, until: Mapping[str, Any], timeout: float) -> bool:
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
        if connect is not None:
            self.join_args["connect"] = list(connect)
        with self.lock:
            self.past_counters.append(self.engine.counters.copy())
            anchor = self.engine.anchor.copy()
        self.close()
        self._open_transport()
        with self.lock:
            self.engine = Engine(self.manifest, self.config, self.node_id, incarnation, anchor)
        self.transport.serve_snapshot(self._snapshot_source)

    def counters(self) -> Counters:
        total = self.engine.counters.copy()
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

    def report(self, weights: bool) -> dict[str, Any]:
        with self.lock:
            out: dict[str, Any] = {
                "op": "report",
                "node_id": f"{self.node_id:016x}",
                "incarnation": f"{self.engine.incarnation:016x}",
                "fingerprint": self.manifest.fingerprint.hex(),
                "num_params": self.manifest.num_params,
                "accepted": list(self.accepted),
                "counters": self.counters().to_json(),
                "active_sha256": _sha(self.active),
                "anchor_sha256": _sha(self.engine.anchor),
                "steps": self.steps,
            }
            if weights:
                out["active_b64"] = _b64(self.active)
                out["anchor_b64"] = _b64(self.engine.anchor)
        return out

    # training (capability peer.train) ---------------------------------------------------------------
    def _torch_model(self) -> Any:
        import torch

        if self.torch_model is None:
            # One thread: live scenarios run several nodes on few cores, and intra-op threads of a tiny
            # model only contend (measured: 15x slower with the default thread count on 2 cores).
            torch.set_num_threads(1)
            if self.model["kind"] != "digits_cnn":
                raise ValueError("train needs the digits_cnn model")
            from delta_fabric.adapters.torch import module_manifest, module_tensors
            from delta_fabric.demo.model import DigitsCNN

            m = DigitsCNN()
            if module_manifest(m, self.config.include_buffers) != self.manifest:
                raise ValueError("DigitsCNN's manifest differs from the scenario model's")
            views = self.manifest.split(self.active)  # views into the flat vector, canonical layout
            with torch.no_grad():
                for name, t in module_tensors(m, self.config.include_buffers).items():
                    t.data = torch.from_numpy(views[name])  # parameters and BatchNorm statistics
            self.torch_model = m
        return self.torch_model

    def train(self, args: Mapping[str, Any]) -> int:
        import torch

        m = self._torch_model()
        x, y = _load_data(args["data"])
        gen = np.random.default_rng(int(args.get("seed", 0)))
        steps = int(args["steps"])
        lr = float(args["lr"])
        bs = int(args.get("batch_size", 32))
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        loss_fn = torch.nn.CrossEntropyLoss()
        xt, yt = torch.from_numpy(x).reshape(-1, 1, 8, 8), torch.from_numpy(y)
        m.train()
        interval = self.config.sync_interval
        for _ in range(steps):
            idx = torch.from_numpy(gen.integers(0, x.shape[0], size=bs))
            with self.lock:
                opt.zero_grad()
                loss_fn(m(xt[idx]), yt[idx]).backward()
                opt.step()
            self.step(sync=(self.steps + 1) % interval == 0)
        return steps

    def evaluate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        m = self._torch_model()
        x, y = _load_data(args["data"])
        m.eval()  # BatchNorm running statistics
        with self.lock, torch.no_grad():
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
            live = node.transport.wait_for_peers(
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
                node.transport.publish(encode_packet(packet_from_json(p)))
            return {"op": "send", "count": len(ins["packets"])}
        if op == "inject":
            for p in ins["packets"]:
                node.transport.publish(base64.b64decode(p))
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
