"""A deterministic lockstep simulator of the demo: C nodes as real `delta_fabric.fabric.Fabric` +
`delta_fabric.stores.torch.TorchStore` over the in-process memory transport, stepped round-robin in one
process on the demo's label-skewed digits, CNN and optimizer. One run takes seconds and its result
does not depend on machine load or scheduling (no threads, no clocks): the same `SimConfig` gives
the same accuracies bit for bit.

Step ``t`` of the cluster: every node takes one local optimizer step, then every node calls
``fabric.step()`` (generate on sync steps, publish); the packets are delivered once every node has
stepped, and every node then receives, applies and relays them (``fabric.poll()``), hop after hop
until nothing is in flight. So every node applies every peer's round ``r`` at the same step as its
own, before anything is evaluated: the rounds of the demo's ``--lockstep`` mode
(`delta_fabric_demo.rounds`), with no link latency.

Wire bytes: every packet a node publishes is counted once per link it crosses (a full-mesh or ring
unicast fan-out, as Zenoh peers send it), each copy as its DeltaFabric bytes plus
``SimConfig.frame_overhead`` bytes of transport framing (Zenoh's per-message header, key expression
and TCP length prefix; measured by ``bench/sweep_converge.py --measure-overhead``).

``mode="periodic"`` is the baseline of issue 11: local SGD whose parameters (and BatchNorm buffers)
are averaged every ``interval`` steps, the arithmetic of a gloo ring all-reduce; its wire bytes are
what a ring all-reduce moves: ``2 (C - 1) / C * N * 4`` bytes per node per averaging (plus the same
framing per message, 2 (C - 1) messages per node), a lower bound on what gloo sends.
``mode="local"``: no communication at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from delta_fabric import config as _config
from delta_fabric.config import outer_average

__all__ = [
    "DEMO_DEFAULTS",
    "OUTER_INTERVAL",
    "OUTER_SPAN",
    "SimConfig",
    "SimResult",
    "default_average_over",
    "demo_num_params",
    "dense_fp32_bytes",
    "periodic_bytes_per_average",
    "run_sim",
]


#: The demo's sync defaults (`delta-fabric demo`), shared by the simulator's sweeps: chosen with
#: bench/sweep_converge.py (issue 11's bar: 3 label-skewed nodes >= 0.95 at >= 100x fewer wire
#: bytes than dense fp32 every step). Relay policy NEEDED is safe for the demo because its
#: topologies are symmetric (DF-RLY-64); in a full mesh it relays nothing (Section 8.6). Q8 values
#: with PACKED indices (section 6.8, 1.1) every 20 steps: 181.6x on the wire, every node's shared
#: model >= 0.961 and its working weights >= 0.950 in seeds 0..9 (`sweep_converge.py cells`); F32
#: with PACKED every 40 steps gives 150x at >= 0.958, Q8 every 40 steps 357x but seed 8 ends at 0.711.
#: Every node holds its unsent residual aside (DF-GEN-240, session 5): in seeds 0..9 every node's
#: shared model and working weights end >= 0.981 at 181.5x, and the working weights stay >= 0.636
#: after step 300 (0.419 without it, seeds 0..2); docs/convergence-sweep.md section 0.
DEMO_DEFAULTS: dict[str, Any] = {
    "ratio": 0.10,
    "interval": 20,
    "encoding": "Q8",
    "index_encoding": "PACKED",
    "relay_policy": "NEEDED",
    "topology": "all",
    "hold_residual": True,
}

#: The outer step's rule is the library's (`delta_fabric.config.outer_average`, DF-GEN-300): see its
#: docstring and docs/convergence-sweep.md section 0b for the measurements behind it.
OUTER_INTERVAL = _config.OUTER_INTERVAL
OUTER_SPAN = _config.OUTER_SPAN
MAX_AVERAGE_OVER = _config.MAX_AVERAGE_OVER


def default_average_over(nodes: int, interval: int, ratio: float) -> int:
    """The demo's ``average_over`` for ``nodes`` averaging nodes sending ``ratio`` of their weights
    every ``interval`` local steps (DF-GEN-300), at most DF-PAR-70's 65536; 1 for a single node:

    - C up to `OUTER_INTERVAL` steps (an outer learning rate of 1, DF-GEN-70);
    - beyond, ``ceil(C * interval / OUTER_INTERVAL)`` (an outer learning rate of about
      ``OUTER_INTERVAL / interval``: 1/2 at 80) when ``ratio * interval`` exceeds `OUTER_SPAN`;
    - else half that damping, ``ceil(C * (OUTER_INTERVAL + interval) / (2 * OUTER_INTERVAL))``
      (``1 / rate`` midway between 1 and ``interval / OUTER_INTERVAL``: about 2/3 at 80).
    """
    return outer_average(nodes, interval, ratio)


@dataclass(frozen=True)
class SimConfig:
    """One simulated run. ``lr=None``: the demo's default for ``mode`` (0.05 / C when deltas are
    summed, 0.05 when averaged). ``bn_momentum=None``: PyTorch's 0.1, divided by C when BatchNorm
    buffers are synced and summed (the demo's rule). ``average_over=0``: the demo's default when
    ``averaging`` (`default_average_over`: the cluster size, more beyond `OUTER_INTERVAL` steps;
    else 1, the 1.0 summing semantics)."""

    nodes: int = 3
    ratio: float = 0.05
    interval: int = 10
    steps: int = 1200
    seed: int = 0
    lr: float | None = None
    momentum: float = 0.9
    batch: int = 32
    include_buffers: bool = True
    bn_momentum: float | None = None
    alpha: float = 1.0
    averaging: bool = False
    average_over: int = 0
    topology: str = "ring"
    partition: str = "skewed"
    mode: str = "fabric"  # fabric | periodic | local
    encoding: str = "F32"
    eval_every: int = 50
    frame_overhead: int = 40
    #: further `delta_fabric.config.SyncConfig` fields (an encoding, a relay policy), as pairs
    sync_extra: tuple[tuple[str, Any], ...] = ()
    #: a network partition (issue 12 item 3): every packet between the nodes ``0 .. nodes//2`` and the
    #: others is lost in the steps ``cut[0] <= step < cut[1]`` (``(0, 0)``: none)
    cut: tuple[int, int] = (0, 0)
    #: anti-entropy by gap repair on every node (`Fabric.v1_0(repair=True)`, spec section 7.9)
    repair: bool = False
    #: link delay: every published packet is delivered ``delay`` steps later; with probability
    #: ``stall_rate`` (seeded) a packet stalls ``stall_steps`` more, and the sender's later packets
    #: wait behind it (one ordered stream per sender, as over TCP)
    delay: int = 0
    stall_rate: float = 0.0
    stall_steps: int = 0
    #: a misbehaving member (issue 12 item 8): node 0's own entries reach the others with their
    #: values multiplied by ``attack_scale`` (1: nobody misbehaves)
    attack_scale: float = 1.0
    #: bounded influence on every node (`Fabric.v1_0(influence_factor=...)`; 0: off)
    influence: float = 0.0
    #: the unsent residual held aside on every node (`Fabric.v1_0(hold_residual=True)`, DF-GEN-240)
    hold_residual: bool = False

    def resolved_lr(self) -> float:
        if self.lr is not None:
            return self.lr
        summed = self.mode == "fabric" and not self.averaging
        return 0.05 / self.nodes if summed else 0.05

    def resolved_average_over(self) -> int:
        if not self.averaging:
            return 1
        if self.average_over > 0:
            return self.average_over
        return default_average_over(self.nodes, self.interval, self.ratio)


@dataclass
class SimResult:
    config: dict[str, Any]
    #: (step, [accuracy per node]) at every evaluation and after the final flush
    curve: list[tuple[int, list[float]]] = field(default_factory=list)
    final: list[float] = field(default_factory=list)
    wire_bytes: int = 0
    payload_bytes: int = 0
    packets: int = 0
    dense_fp32: int = 0
    num_params: int = 0
    nonfinite: bool = False
    #: lowest BatchNorm running variance seen on any node at an evaluation (a diagnostic)
    min_running_var: float = math.inf
    #: share of the sent values that were relays (a full mesh needs none: issue 11 item 1)
    relay_share: float = 0.0
    #: (step, [accuracy of each node's anchor]): the shared model every node holds (mode fabric;
    #: for the other modes the same as ``curve``, their nodes hold no other model)
    anchor_curve: list[tuple[int, list[float]]] = field(default_factory=list)
    #: (step, spread): the largest |difference| between two nodes' anchors at one index, at every
    #: evaluation (mode fabric)
    spread_curve: list[tuple[int, float]] = field(default_factory=list)
    #: every node's `Fabric.stats()` ``repair`` counters, summed
    repair_counters: dict[str, int] = field(default_factory=dict)
    #: entries clipped by bounded influence, all nodes
    influence_clipped: int = 0

    def spread_at(self, step: int) -> float:
        """The spread at the first evaluation at or after ``step``."""
        for s, v in self.spread_curve:
            if s >= step:
                return v
        return self.spread_curve[-1][1] if self.spread_curve else 0.0

    @property
    def final_min(self) -> float:
        return min(self.final) if self.final else 0.0

    @property
    def min_after(self) -> float:
        """Lowest accuracy of any node at an evaluation after step 300."""
        vals = [a for s, accs in self.curve if s > 300 for a in accs]
        return min(vals) if vals else self.final_min

    @property
    def anchor_final_min(self) -> float:
        return min(self.anchor_curve[-1][1]) if self.anchor_curve else self.final_min

    @property
    def anchor_min_after(self) -> float:
        """Lowest accuracy of any node's shared model (anchor) at an evaluation after step 300."""
        vals = [a for s, accs in self.anchor_curve if s > 300 for a in accs]
        return min(vals) if vals else self.min_after

    @property
    def wire_compression(self) -> float:
        return self.dense_fp32 / self.wire_bytes if self.wire_bytes else math.inf

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "final": self.final,
            "final_min": self.final_min,
            "min_after_300": self.min_after,
            "curve": [[s, a] for s, a in self.curve],
            "wire_bytes": self.wire_bytes,
            "payload_bytes": self.payload_bytes,
            "packets": self.packets,
            "dense_fp32": self.dense_fp32,
            "wire_compression": self.wire_compression,
            "num_params": self.num_params,
            "nonfinite": self.nonfinite,
            "min_running_var": self.min_running_var,
            "anchor_curve": [[st, a] for st, a in self.anchor_curve],
            "anchor_final_min": self.anchor_final_min,
            "relay_share": self.relay_share,
            "anchor_min_after_300": self.anchor_min_after,
            "spread_curve": [[st, v] for st, v in self.spread_curve],
            "repair_counters": self.repair_counters,
            "influence_clipped": self.influence_clipped,
        }


def dense_fp32_bytes(nodes: int, steps: int, num_params: int) -> int:
    """Every node sends its dense f32 weights (or gradient) once per step (the demo's reference)."""
    return nodes * steps * num_params * 4


def periodic_bytes_per_average(nodes: int, num_params: int, frame_overhead: int) -> int:
    """Wire bytes of one ring all-reduce of ``num_params`` f32 over ``nodes`` nodes, whole cluster:
    every node sends 2 (C - 1) messages of ceil(N / C) values (reduce-scatter, all-gather)."""
    if nodes < 2:
        return 0
    return nodes * 2 * (nodes - 1) * (math.ceil(num_params / nodes) * 4 + frame_overhead)


def demo_num_params(include_buffers: bool = True) -> int:
    """N of the demo's CNN (with its BatchNorm running statistics when ``include_buffers``)."""
    from delta_fabric.stores.torch import module_manifest

    from delta_fabric_demo.model import DigitsCNN

    return module_manifest(DigitsCNN(), include_buffers).num_params


def _neighbours(n: int, topology: str) -> list[list[int]]:
    if topology == "all" or n <= 3:
        return [[j for j in range(n) if j != i] for i in range(n)]
    if topology != "ring":
        raise ValueError(f"unknown topology {topology!r}")
    return [sorted({(i - 1) % n, (i + 1) % n} - {i}) for i in range(n)]


def run_sim(cfg: SimConfig) -> SimResult:
    """Run one simulation (see the module docstring)."""
    import torch
    from delta_fabric.config import SyncConfig
    from delta_fabric.encodings import codec
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.torch import TorchStore
    from delta_fabric.transports.memory import MemoryHub, MemoryTransport
    from torch.nn import functional as F

    from delta_fabric_demo.data import load_split, partition
    from delta_fabric_demo.model import DigitsCNN, canonical_vector, init_model

    if cfg.mode not in ("fabric", "periodic", "local"):
        raise ValueError(f"unknown mode {cfg.mode!r}")
    torch.set_num_threads(1)
    n = cfg.nodes
    digits = load_split(cfg.seed)
    parts = partition(digits.train, n, cfg.partition, cfg.seed)
    init = init_model(cfg.seed)
    lr = cfg.resolved_lr()
    bn_m = cfg.bn_momentum
    if bn_m is None:
        summed = cfg.mode == "fabric" and not cfg.averaging
        bn_m = 0.1 / n if (cfg.include_buffers and summed and n > 1) else 0.1
    models = []
    for _ in range(n):
        m = DigitsCNN()
        m.load_state_dict(init.state_dict())
        m.bn1.momentum = bn_m
        m.train()
        models.append(m)
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=cfg.momentum) for m in models]
    rngs = [np.random.default_rng(cfg.seed * 1000 + i) for i in range(n)]
    xtr = [torch.from_numpy(p.x) for p in parts]
    ytr = [torch.from_numpy(p.y.astype(np.int64)) for p in parts]
    xte = torch.from_numpy(digits.test.x)
    yte = torch.from_numpy(digits.test.y.astype(np.int64))
    num_params = int(canonical_vector(models[0], cfg.include_buffers).size)
    res = SimResult(
        config={
            **asdict(cfg),
            "lr": lr,
            "bn_momentum": bn_m,
            "average_over": cfg.resolved_average_over(),  # the value the nodes ran with
        }
    )
    res.num_params = num_params
    res.dense_fp32 = dense_fp32_bytes(n, cfg.steps, num_params)

    neigh = _neighbours(n, cfg.topology)
    ids = [0x1000 + i for i in range(n)]
    fanout = [sum(1 for j in range(n) if i in neigh[j]) for i in range(n)]
    pending: list[list[bytes]] = [[] for _ in range(n)]
    fabrics: list[Fabric] = []
    transports: list[MemoryTransport] = []

    now = [0]
    stall_rng = np.random.default_rng(cfg.seed + 777)
    held: list[list[tuple[int, bytes]]] = [[] for _ in range(n)]

    class _Lockstep(MemoryTransport):
        """Publishes at the end of the cluster step (see the module docstring), counting bytes."""

        slot = 0

        def publish(self, packet: bytes) -> None:
            data = bytes(packet)
            pending[self.slot].append(data)
            res.packets += fanout[self.slot]
            res.payload_bytes += len(data)
            res.wire_bytes += (len(data) + cfg.frame_overhead) * fanout[self.slot]

        def flush(self) -> None:
            out, pending[self.slot] = pending[self.slot], []
            if not (cfg.delay or cfg.stall_rate):
                for p in out:
                    super().publish(p)
                return
            q = held[self.slot]
            for p in out:
                if now[0] > cfg.steps:  # the wind-down: what is held and relayed goes at once
                    q.append((0, p))
                    continue
                due = now[0] + cfg.delay
                if cfg.stall_rate and stall_rng.random() < cfg.stall_rate:
                    due += cfg.stall_steps
                q.append((max(due, q[-1][0] if q else 0), p))
            while q and q[0][0] <= now[0]:
                super().publish(q.pop(0)[1])

    if cfg.mode == "fabric":
        extra: dict[str, Any] = dict(cfg.sync_extra)
        if cfg.averaging:
            extra["average_over"] = cfg.resolved_average_over()
        sc = SyncConfig.v1_0(
            alpha=cfg.alpha,
            ratio=cfg.ratio,
            sync_interval=cfg.interval,
            include_buffers=cfg.include_buffers,
            encoding=codec(cfg.encoding.upper()).encoding,
            **extra,
        )
        cut_now = [False]
        side = [i < (n + 1) // 2 for i in range(n)]
        slot_of = {ids[i]: i for i in range(n)}

        def intercept(src: int, dst: int, packet: bytes) -> list[bytes]:
            if cut_now[0] and side[slot_of[src]] != side[slot_of[dst]]:
                return []
            if cfg.attack_scale != 1.0 and src == ids[0]:
                return [_scaled(packet, ids[0], cfg.attack_scale)]
            return [packet]

        hub = MemoryHub(seed=cfg.seed, intercept=intercept)
        for i in range(n):
            lt = _Lockstep(hub, ids[i], neighbours=[ids[j] for j in neigh[i]])
            lt.slot = i
            transports.append(lt)
        for i in range(n):
            store = TorchStore(models[i], cfg.include_buffers)
            fabrics.append(
                Fabric.v1_0(
                    store,
                    transports[i],
                    sc,
                    node_id=ids[i],
                    repair=cfg.repair,
                    influence_factor=cfg.influence or None,
                    hold_residual=cfg.hold_residual,
                )
            )

    def evaluate() -> list[float]:
        out = []
        with torch.no_grad():
            for m in models:
                rv = m.bn1.running_var
                if isinstance(rv, torch.Tensor):
                    res.min_running_var = min(res.min_running_var, float(rv.min()))
                m.eval()
                logits = m(xte)
                m.train()
                if not bool(torch.isfinite(logits).all()):
                    res.nonfinite = True
                out.append(float((logits.argmax(1) == yte).float().mean()))
        return out

    scratch = DigitsCNN()
    scratch.load_state_dict(init.state_dict())
    scratch_store = TorchStore(scratch, cfg.include_buffers)

    def evaluate_anchor(step: int) -> None:
        if not fabrics:
            res.anchor_curve.append(res.curve[-1])
            return
        accs = []
        for f in fabrics:
            scratch_store.load(f.engine.anchor)
            scratch.eval()
            with torch.no_grad():
                pred = scratch(xte).argmax(1)
            accs.append(float((pred == yte).float().mean()))
        res.anchor_curve.append((step, accs))
        anchors = np.stack([f.engine.anchor for f in fabrics])
        spread = float((anchors.max(axis=0) - anchors.min(axis=0)).max())
        res.spread_curve.append((step, spread))

    def average_all() -> None:
        from delta_fabric.stores.torch import module_tensors

        tensors = [module_tensors(m, cfg.include_buffers) for m in models]
        with torch.no_grad():
            for name in tensors[0]:
                mean = torch.stack([t[name].detach().float() for t in tensors]).mean(0)
                for t in tensors:
                    t[name].copy_(mean.to(t[name].dtype))
        res.wire_bytes += periodic_bytes_per_average(n, num_params, cfg.frame_overhead)
        res.payload_bytes += n * 2 * (n - 1) * math.ceil(num_params / n) * 4
        res.packets += n * 2 * (n - 1)

    res.curve.append((0, evaluate()))
    evaluate_anchor(0)
    for step in range(1, cfg.steps + 1):
        for i in range(n):
            sel = torch.from_numpy(rngs[i].integers(0, ytr[i].numel(), size=cfg.batch))
            opts[i].zero_grad(set_to_none=True)
            loss = F.cross_entropy(models[i](xtr[i][sel]), ytr[i][sel])
            loss.backward()  # type: ignore[no-untyped-call]
            opts[i].step()
        if cfg.mode == "fabric":
            cut_now[0] = cfg.cut[0] <= step < cfg.cut[1]
            now[0] = step
            for f in fabrics:
                f.step()
            _deliver(fabrics, transports, hops=n)
        elif cfg.mode == "periodic" and n > 1 and step % cfg.interval == 0:
            average_all()
        if step % cfg.eval_every == 0 and step != cfg.steps:
            res.curve.append((step, evaluate()))
            evaluate_anchor(step)
    if cfg.mode == "fabric":
        now[0] = cfg.steps + cfg.delay + cfg.stall_steps * (1 + cfg.steps)  # deliver what is held
        _wind_down(fabrics, transports, hops=n)
    elif cfg.mode == "periodic" and n > 1 and cfg.steps % cfg.interval:
        average_all()
    res.final = evaluate()
    res.curve.append((cfg.steps, res.final))
    evaluate_anchor(cfg.steps)
    own = sum(f.own_values_sent for f in fabrics)
    relayed = sum(f.relay_values_sent for f in fabrics)
    res.relay_share = relayed / (own + relayed) if own + relayed else 0.0
    for f in fabrics:
        inf = f.stats()["influence"]
        if inf is not None:
            res.influence_clipped += int(inf["entries_clipped"])
        for k, v in f.stats()["repair"].items():
            res.repair_counters[k] = res.repair_counters.get(k, 0) + int(v)
    for f in fabrics:
        f.close()
    return res


def _scaled(packet: bytes, origin: int, k: float) -> bytes:
    """``packet`` with the values of ``origin``'s entries multiplied by ``k`` (a misbehaving member;
    other bytes, e.g. a repair request, pass unchanged)."""
    import dataclasses

    from delta_fabric.errors import DecodeError
    from delta_fabric.wire import decode_packet, encode_packet

    try:
        pkt = decode_packet(packet)
    except DecodeError:
        return packet
    entries = tuple(
        dataclasses.replace(e, values=(e.values * np.float32(k)).astype(np.float32))
        if e.origin == origin
        else e
        for e in pkt.entries
    )
    return encode_packet(dataclasses.replace(pkt, entries=entries))


def _deliver(fabrics: Sequence[Any], transports: Sequence[Any], hops: int) -> None:
    """Deliver what was published, then receive and relay hop after hop until quiet."""
    for t in transports:
        t.flush()
    for _ in range(hops + 1):
        if sum(f.poll() for f in fabrics) == 0:
            break
        for t in transports:
            t.flush()


def _wind_down(fabrics: Sequence[Any], transports: Sequence[Any], hops: int) -> None:
    """The demo's end: every node sends its last residual, then receives and relays until quiet."""
    for f in fabrics:
        f.sync_now()
    _deliver(fabrics, transports, hops)
