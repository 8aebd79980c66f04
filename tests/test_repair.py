"""Anti-entropy by gap repair (spec section 7.9): the vectors of conformance/vectors/repair, the
request codec's refusals, and a partition that heals between real `Fabric` nodes over the memory
transport, judged in sync rounds and exact state (no clock)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from delta_fabric import SyncConfig
from delta_fabric.fabric import Fabric
from delta_fabric.repair import (
    GapTracker,
    RepairError,
    RepairErrorKind,
    RepairRequest,
    ResendBuffer,
    decode_request,
    encode_request,
)
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import Entry

VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "vectors" / "repair"
FP = hashlib.sha256(b"repair-vectors").digest()


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return data


def test_request_vectors() -> None:
    """REQ: DF-RCV-160, DF-RCV-161"""
    data = _load("requests.json")
    for v in data["valid"]:
        want = v["request"]
        req = RepairRequest(
            want["sender"],
            want["sender_incarnation"],
            bytes.fromhex(want["fingerprint"]),
            want["origin"],
            want["incarnation"],
            tuple(want["seqs"]),
            want["version_minor"],
        )
        assert decode_request(bytes.fromhex(v["hex"])) == req, v["id"]
        assert decode_request(encode_request(req)) == req, v["id"]
    assert len(data["invalid"]) >= 7
    for v in data["invalid"]:
        with pytest.raises(RepairError) as info:
            decode_request(bytes.fromhex(v["hex"]))
        assert info.value.kind is RepairErrorKind(v["expect"]), v["id"]


def test_gap_vectors() -> None:
    """REQ: DF-RCV-162, DF-RCV-163"""
    for case in _load("gaps.json")["cases"]:
        g = GapTracker(**case["params"])
        for i, rnd in enumerate(case["rounds"]):
            for o, inc, s in rnd["accepted"]:
                g.observe(o, inc, s)
            got = [[o, inc, list(s)] for o, inc, s in g.round()]
            assert got == rnd["requests"], (case["id"], i)
        assert g.counters.seqs_given_up == case["seqs_given_up"], case["id"]


def test_resend_vectors() -> None:
    """REQ: DF-RCV-164"""
    for case in _load("resend.json")["cases"]:
        node, inc = case["node"], case["incarnation"]
        buf = ResendBuffer(node, inc, FP, **case["params"])
        for op in case["ops"]:
            if "add" in op:
                buf.add(
                    [
                        Entry(
                            node, inc, s, 0, np.arange(n, dtype=np.uint32), np.ones(n, np.float32)
                        )
                        for s, n in op["add"]
                    ]
                )
                assert buf.held == op["held"], case["id"]
            elif "request" in op:
                r = op["request"]
                req = RepairRequest(
                    0x0B,
                    7,
                    FP if r.get("fingerprint_ok", True) else bytes(32),
                    r.get("origin", node),
                    r.get("incarnation", inc),
                    tuple(r["seqs"]),
                )
                assert buf.request(req) is op["queued"], case["id"]
                assert buf.pending == op["pending"], case["id"]
            else:
                took = buf.take()
                assert [e.seq for e in took] == op["take"], case["id"]
                assert all(e.hops == 0 and e.origin == node for e in took)
        assert buf.counters.to_json() == case["counters"], case["id"]


def test_encoder_refuses_bad_fields() -> None:
    """REQ: DF-RCV-161"""
    good = dict(sender=1, sender_incarnation=1, fingerprint=FP, origin=2, incarnation=3, seqs=(1,))
    for bad in (
        {"seqs": ()},
        {"seqs": tuple(range(1, 258))},
        {"seqs": (2, 1)},
        {"origin": 0},
        {"fingerprint": b"x"},
    ):
        with pytest.raises(RepairError):
            encode_request(RepairRequest(**{**good, **bad}))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------
# A partition that heals, between real nodes (memory transport, lockstep, no clock)
# ------------------------------------------------------------------------------------------------------

N = 2000
INTERVAL = 5


def _run(
    *, cut: tuple[int, int], repair: bool, steps: int = 200, nodes: int = 3
) -> tuple[list[float], list[Fabric]]:
    """Every node adds its own seeded noise to its weights each step; the nodes ``< (nodes+1)//2``
    and the others lose every packet between them in steps ``cut[0] <= step < cut[1]``. Returns
    the anchor spread (max |a_i - a_j| at one index) after each step, and the fabrics."""
    cut_now = [False]
    ids = [0x100 + i for i in range(nodes)]
    side = {ids[i]: i < (nodes + 1) // 2 for i in range(nodes)}

    def intercept(src: int, dst: int, packet: bytes) -> list[bytes]:
        return [] if cut_now[0] and side[src] != side[dst] else [packet]

    hub = MemoryHub(intercept=intercept)
    cfg = SyncConfig(ratio=0.05, sync_interval=INTERVAL)
    init = np.random.default_rng(99).standard_normal(N).astype(np.float32)
    fabrics = []
    for i in range(nodes):
        store = NumpyStore({"w": init.copy()})
        fabrics.append(Fabric(store, hub.transport(ids[i]), cfg, node_id=ids[i], repair=repair))
    rngs = [np.random.default_rng(i) for i in range(nodes)]
    spread = []
    for step in range(1, steps + 1):
        cut_now[0] = cut[0] <= step < cut[1]
        for f, rng in zip(fabrics, rngs, strict=True):
            w = f.store.gather()
            f.store.load(w + 0.01 * rng.standard_normal(N).astype(np.float32))
            f.step()
        for _ in range(nodes + 1):  # deliver and relay until quiet
            if sum(f.poll() for f in fabrics) == 0:
                break
        anchors = np.stack([f.engine.anchor for f in fabrics])
        spread.append(float((anchors.max(0) - anchors.min(0)).max()))
    return spread, fabrics


def test_partition_heals_with_repair() -> None:
    """REQ: DF-RCV-162, DF-RCV-164, DF-RCV-165

    A 60-step (12 sync intervals) partition of 3 nodes: without repair the anchors stay apart for
    good; with it they return to the clean run's spread within 20 sync intervals of the heal."""
    heal = 100
    clean, _ = _run(cut=(0, 0), repair=True)
    broken, _ = _run(cut=(40, heal), repair=False)
    repaired, fabrics = _run(cut=(40, heal), repair=True)
    # The clean run's spread, or the rounding of the same sum applied in another order (every
    # node ends with the same deltas; a few ulps of the largest anchor magnitude), whichever is larger.
    mag = max(float(np.abs(f.engine.anchor).max()) for f in fabrics)
    bound = max(2 * max(clean), 8 * float(np.finfo(np.float32).eps) * mag)
    judge = heal + 20 * INTERVAL - 1  # index of the step 20 intervals after the heal
    assert broken[judge] > 1000 * bound, (broken[judge], bound)
    assert repaired[judge] <= bound, (repaired[judge], bound)
    assert max(repaired[judge:]) <= bound
    c = [f.repair_counters() for f in fabrics]
    assert sum(x.requests_sent for x in c) > 0
    assert sum(x.entries_resent for x in c) > 0
    assert sum(x.seqs_unavailable + x.seqs_given_up + x.requests_refused for x in c) == 0
    for f in fabrics:
        f.close()


def test_env_switch() -> None:
    """``DELTA_FABRIC_REPAIR`` (what ``Fabric.from_env`` and df-node read): off by default."""
    from delta_fabric import env as dfenv

    assert dfenv.repair({}) is False
    assert dfenv.repair({"DELTA_FABRIC_REPAIR": "1"}) is True
    assert dfenv.repair({"DELTA_FABRIC_REPAIR": "off"}) is False
    with pytest.raises(dfenv.EnvError, match="DELTA_FABRIC_REPAIR"):
        dfenv.repair({"DELTA_FABRIC_REPAIR": "maybe"})
