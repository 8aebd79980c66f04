"""Clusters of adapter nodes over REAL Zenoh sessions on loopback.

Every node: multicast and gossip scouting off, ``tcp/127.0.0.1:<free port>`` listener, explicit
connect endpoints, its own namespace per test. Every wait is bounded; models are tiny.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import numpy as np
import pytest

zenoh = pytest.importorskip("zenoh")

from delta_fabric.config import SyncConfig  # noqa: E402
from delta_fabric.errors import ErrorCode  # noqa: E402
from delta_fabric.fabric import Fabric  # noqa: E402
from delta_fabric.manifest import Manifest  # noqa: E402
from delta_fabric.ports import free_ports  # noqa: E402
from delta_fabric.replay import Admission  # noqa: E402
from delta_fabric.stores.numpy import NumpyStore  # noqa: E402
from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport  # noqa: E402
from delta_fabric.wire import Entry, Packet, encode_packet  # noqa: E402

WAIT = 10.0  # bound for anything that should take milliseconds
CFG = SyncConfig.v1_0(ratio=0.25, sync_interval=5)


def ep(port: int) -> str:
    return f"tcp/127.0.0.1:{port}"


def params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "fc.weight": rng.standard_normal((4, 6)).astype(np.float32),
        "fc.bias": rng.standard_normal(4).astype(np.float32),
    }


@pytest.fixture
def ns() -> str:
    return f"dftest/cluster-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def transport(
    stack: ExitStack,
    ns: str,
    node: int,
    port: int,
    connect: list[int] = (),  # type: ignore[assignment]
    neighbours: list[int] | None = None,
) -> ZenohTransport:
    t = ZenohTransport(
        ZenohOptions(
            node_id=node,
            namespace=ns,
            listen=[ep(port)],
            connect=[ep(p) for p in connect],
            neighbours=neighbours,
        )
    )
    stack.callback(t.close)
    return t


def pump(fabs: list[Fabric], until: Callable[[], bool], timeout: float = WAIT) -> None:
    """Poll every node (receive + relay, no generation) until ``until()`` or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in fabs:
            f.poll()
        if until():
            return
        time.sleep(0.005)
    raise AssertionError("condition not reached in time")


def accepted(f: Fabric) -> int:
    return int(f.stats()["receive"]["entries_accepted"])


def test_two_node_exchange_torch(ns: str, stack: ExitStack) -> None:
    torch = pytest.importorskip("torch")
    from delta_fabric.stores.torch import TorchStore

    pa, pb = free_ports(2)
    ta = transport(stack, ns, 0xA1, pa)
    tb = transport(stack, ns, 0xB2, pb, connect=[pa])
    ta.wait_for_peers(1, WAIT)
    tb.wait_for_peers(1, WAIT)
    torch.manual_seed(0)
    net_a = torch.nn.Linear(5, 3)
    net_b = torch.nn.Linear(5, 3)
    net_b.load_state_dict(net_a.state_dict())
    a = Fabric.v1_0(TorchStore(net_a), ta, CFG, node_id=0xA1)
    b = Fabric.v1_0(TorchStore(net_b), tb, CFG, node_id=0xB2)
    with torch.no_grad():
        net_a.weight[1, 2] += 0.5
        net_b.bias[0] -= 0.25
    a.sync_now()
    b.sync_now()
    pump([a, b], lambda: accepted(a) == 1 and accepted(b) == 1)
    np.testing.assert_array_equal(a.active_vector(), b.active_vector())
    np.testing.assert_array_equal(a.engine.anchor, b.engine.anchor)
    assert float(net_b.weight[1, 2].detach()) == float(net_a.weight[1, 2].detach())
    assert a.stats()["bytes_sent"] == ta.stats.published_bytes > 0


def test_directed_ring_relay_reaches_far_node_and_origin_drops_it(
    ns: str, stack: ExitStack
) -> None:
    # REQ: DF-RCV-2
    # REQ: DF-RLY-4
    ids = [0x11, 0x22, 0x33]
    ports = free_ports(3)
    # node i receives only from node i-1: 0 -> 1 -> 2 -> 0; node 2 hears node 0 only through node 1
    ts = [
        transport(
            stack, ns, ids[i], ports[i], connect=[ports[(i + 1) % 3]], neighbours=[ids[i - 1]]
        )
        for i in range(3)
    ]
    for t in ts:
        t.wait_for_peers(2, WAIT)
    arrays = [params(0) for _ in range(3)]
    fabs = [Fabric.v1_0(NumpyStore(arrays[i]), ts[i], CFG, node_id=ids[i]) for i in range(3)]
    time.sleep(0.2)  # let the subscriptions propagate
    arrays[0]["fc.bias"][2] += 1.0
    fabs[0].sync_now()

    def far_has_it() -> bool:
        return fabs[2].stats()["accepted_by_hops"].get("1", 0) >= 1

    pump(fabs, far_has_it)
    own_drop = Admission.OWN_ORIGIN.value
    pump(fabs, lambda: fabs[0].stats()["receive"]["drops"][own_drop] >= 1)
    # the origin got its delta back (hops 2) and dropped it: applied exactly once everywhere
    assert accepted(fabs[0]) == 0
    assert fabs[0].stats()["values_received_applied"] == 0
    for f in fabs:
        np.testing.assert_array_equal(f.active_vector(), fabs[0].active_vector())
    assert arrays[2]["fc.bias"][2] == arrays[0]["fc.bias"][2]
    assert fabs[1].stats()["accepted_by_hops"] == {"0": 1}
    assert fabs[1].stats()["relay_entries_sent"] == 1


CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.numpy import NumpyStore
    from delta_fabric.config import SyncConfig
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport
    ns, node, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    connect = [f"tcp/127.0.0.1:{p}" for p in sys.argv[4].split(",")]
    t = ZenohTransport(ZenohOptions(node_id=node, namespace=ns, listen=[f"tcp/127.0.0.1:{port}"],
                                    connect=connect))
    rng = np.random.default_rng(node)
    arrays = {"fc.weight": np.zeros((4, 6), np.float32), "fc.bias": np.zeros(4, np.float32)}
    fab = Fabric.v1_0(NumpyStore(arrays), t, SyncConfig.v1_0(ratio=0.25, sync_interval=5), node_id=node)
    t.wait_for_peers(2, 10.0)
    print("ready", flush=True)
    while True:
        arrays["fc.weight"] += rng.standard_normal((4, 6)).astype(np.float32) * 1e-3
        fab.step()
        time.sleep(0.002)
    """
)


def test_node_killed_mid_run_others_keep_stepping(ns: str, stack: ExitStack) -> None:
    ids = [0x1A, 0x2B, 0x3C]
    pa, pb, pc = free_ports(3)
    ta = transport(stack, ns, ids[0], pa)
    tb = transport(stack, ns, ids[1], pb, connect=[pa])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, ns, str(ids[2]), str(pc), f"{pa},{pb}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stack.callback(lambda: (child.kill(), child.wait()))
    ta.wait_for_peers(2, WAIT, expected=[ids[1], ids[2]])
    tb.wait_for_peers(2, WAIT, expected=[ids[0], ids[2]])
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    arr_a = {k: np.zeros_like(v) for k, v in params().items()}
    arr_b = {k: np.zeros_like(v) for k, v in params().items()}
    a = Fabric.v1_0(NumpyStore(arr_a), ta, CFG, node_id=ids[0])
    b = Fabric.v1_0(NumpyStore(arr_b), tb, CFG, node_id=ids[1])
    rng = np.random.default_rng(1)

    def train_step(f: Fabric, arr: dict[str, np.ndarray]) -> float:
        arr["fc.bias"] += rng.standard_normal(4).astype(np.float32) * 1e-3
        t0 = time.monotonic()
        f.step()
        return time.monotonic() - t0

    deadline = time.monotonic() + WAIT
    while accepted(a) < 3 or accepted(b) < 3:  # the child's deltas arrive
        assert time.monotonic() < deadline, "no traffic from the child"
        train_step(a, arr_a)
        train_step(b, arr_b)
        time.sleep(0.002)
    child.kill()  # SIGKILL: no clean shutdown, no goodbye
    child.wait(timeout=WAIT)
    before_a, before_b = accepted(a), accepted(b)
    slowest = 0.0
    deadline = time.monotonic() + WAIT
    while ids[2] in ta.peers() or ids[2] in tb.peers() or accepted(a) < before_a + 3:
        assert time.monotonic() < deadline, "survivors stalled or the dead node is still listed"
        slowest = max(slowest, train_step(a, arr_a), train_step(b, arr_b))
        time.sleep(0.002)
    for _ in range(50):  # and they keep stepping afterwards
        slowest = max(slowest, train_step(a, arr_a), train_step(b, arr_b))
    assert slowest < 1.0  # a step never waits on the dead peer
    assert accepted(b) > before_b
    assert a.stats()["receive"]["packets_rejected"] == 0


def test_restarted_node_bootstraps_and_new_incarnation_is_accepted(
    ns: str, stack: ExitStack
) -> None:
    # REQ: DF-RCV-4
    pa, pb, pb2 = free_ports(3)
    ta = transport(stack, ns, 0xAA, pa)
    tb = transport(stack, ns, 0xBB, pb, connect=[pa])
    ta.wait_for_peers(1, WAIT)
    arr_a, arr_b = params(0), params(0)
    a = Fabric.v1_0(NumpyStore(arr_a), ta, CFG, node_id=0xAA)
    b = Fabric.v1_0(NumpyStore(arr_b), tb, CFG, node_id=0xBB)
    for k in range(3):  # b sends seqs 1..3 of its first incarnation
        arr_b["fc.weight"][k, k] += 0.5
        b.sync_now()
    pump([a], lambda: accepted(a) == 3)
    old_incarnation = b.incarnation
    tb.close()  # the node goes away
    arr_a["fc.bias"] += 0.125  # the cluster moves on
    a.sync_now()
    tb2 = transport(stack, ns, 0xBB, pb2, connect=[pa])
    tb2.wait_for_peers(1, WAIT)
    arr_b2 = params(99)  # stale local weights: the snapshot replaces them
    b2 = Fabric.join(NumpyStore(arr_b2), tb2, CFG, node_id=0xBB, timeout=WAIT)
    assert b2.bootstrapped
    assert b2.incarnation > old_incarnation
    np.testing.assert_array_equal(b2.active_vector(), a.engine.anchor)
    np.testing.assert_array_equal(b2.engine.anchor, a.engine.anchor)
    arr_b2["fc.bias"][1] -= 1.0  # seq restarts at 1 in the new incarnation
    b2.sync_now()
    pump([a], lambda: accepted(a) == 4)
    drops = a.stats()["receive"]["drops"]
    assert drops[Admission.STALE_INCARNATION.value] == 0
    assert drops[Admission.DUPLICATE.value] == 0
    assert arr_a["fc.bias"][1] == arr_b2["fc.bias"][1]


def test_invalid_packets_rejected_counted_and_move_no_weight(ns: str, stack: ExitStack) -> None:
    # REQ: DF-RCV-1
    # REQ: DF-ERR-2
    # REQ: DF-ERR-6
    # REQ: DF-ERR-10
    # REQ: DF-ERR-13
    pa, pe = free_ports(2)
    ta = transport(stack, ns, 0xAA, pa)
    attacker = transport(stack, ns, 0xEE, pe, connect=[pa])
    ta.wait_for_peers(1, WAIT)
    attacker.wait_for_peers(1, WAIT)
    arr = params(0)
    a = Fabric.v1_0(NumpyStore(arr), ta, CFG, node_id=0xAA)
    before = a.active_vector()
    anchor_before = a.engine.anchor.copy()
    fp = a.manifest.fingerprint
    n = a.num_params
    other_fp = Manifest.from_named_shapes({"fc.weight": (6, 4), "fc.bias": (4,)}).fingerprint

    def pkt(idx: list[int], vals: list[float], fingerprint: bytes = fp, seq: int = 1) -> bytes:
        e = Entry(
            origin=0xEE,
            incarnation=1,
            seq=seq,
            hops=0,
            indices=np.array(idx, dtype=np.uint32),
            values=np.array(vals, dtype=np.float32),
        )
        return encode_packet(
            Packet(sender=0xEE, sender_incarnation=1, fingerprint=fingerprint, entries=(e,))
        )

    time.sleep(0.2)
    bad = [
        b"garbage",  # BAD_IDENTIFIER (< 8 bytes)
        b"\x00" * 4 + b"XXXX" + b"\x00" * 32,  # BAD_IDENTIFIER (wrong identifier)
        pkt([0, 1], [1.0, 2.0], fingerprint=other_fp),  # FINGERPRINT_MISMATCH
        pkt([0, n], [1.0, 2.0]),  # INDEX_OUT_OF_RANGE
        pkt([3], [float("nan")]),  # NON_FINITE
    ]
    for b in bad:
        attacker.publish(b)
    attacker.publish(pkt([5], [0.5], seq=2))  # a valid marker, published last (order is kept)
    pump([a], lambda: a.stats()["receive"]["packets_received"] >= len(bad) + 1)
    rc = a.stats()["receive"]
    assert rc["packets_rejected"] == len(bad)
    assert rc["packets_accepted"] == 1
    assert rc["errors"][ErrorCode.BAD_IDENTIFIER.value] == 2
    assert rc["errors"][ErrorCode.FINGERPRINT_MISMATCH.value] == 1
    assert rc["errors"][ErrorCode.INDEX_OUT_OF_RANGE.value] == 1
    assert rc["errors"][ErrorCode.NON_FINITE.value] == 1
    after = a.active_vector()
    assert np.flatnonzero(after != before).tolist() == [5]  # only the valid marker moved a weight
    assert after[5] == np.float32(before[5] + np.float32(0.5))
    assert np.flatnonzero(a.engine.anchor != anchor_before).tolist() == [5]
    # the rejected seq-1 packets did not touch the window: a valid seq 1 is still accepted
    attacker.publish(pkt([6], [0.25], seq=1))
    pump([a], lambda: accepted(a) == 2)
