"""Membership, floods and pacing (issue 12 items 4 and 5, spec DF-ZEN-150..156).

Unit parts run without a network: the receive queue's per-sender shares and rate limit, the pre-queue
screen against the decoder, the membership options, liveliness membership and pacing on the in-memory
hub. The flood test runs a Zenoh node on tcp/127.0.0.1 (scouting off) with two members sending an
exact number of entries while a stranger floods garbage and hostile packets; it counts every member
entry (exact) and bounds the queue's memory.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from delta_fabric import env as dfenv
from delta_fabric.config import SyncConfig
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.fabric import Fabric
from delta_fabric.manifest import Manifest
from delta_fabric.ports import free_port as _free_port
from delta_fabric.replay import Admission
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.base import PacketQueue, TokenBuckets
from delta_fabric.transports.memory import MemoryHub
from delta_fabric.wire import Entry, Packet, decode_packet, encode_packet, screen

N = 64
MANIFEST = Manifest.from_named_shapes({"w": (N,)})
CFG = SyncConfig.v1_0(ratio=0.25, sync_interval=1, alpha=1.0)


# ---------------------------------------------------------------------------------------------------------
# The queue: shares and rate limit
# ---------------------------------------------------------------------------------------------------------


def test_a_flood_evicts_only_its_own_packets() -> None:
    # REQ: DF-ZEN-152
    q = PacketQueue(32, 1 << 20)
    member = []
    for i in range(1000):
        q.push(b"\xee" * 10, 99)
        if i % 100 == 0:
            p = i.to_bytes(4, "little")
            q.push(p, 1)
            member.append(p)
    assert q.queued_by_sender()[1] == 10  # all member packets still queued
    assert len(q) == 32 and q.dropped_packets == 1000 - 22
    drained = q.drain()
    assert [p for p in drained if len(p) == 4] == member  # arrival order kept
    # the same traffic through one share (what 1.0's drop-oldest queue did) loses member packets
    old = PacketQueue(32, 1 << 20)
    for i in range(1000):
        old.push(b"\xee" * 10)
        if i % 100 == 0:
            old.push(i.to_bytes(4, "little"))
    assert sum(len(p) == 4 for p in old.drain()) < 10
    # byte bound: big flood packets evict their own, the member's small one stays
    q = PacketQueue(1000, 1000)
    q.push(b"\x01" * 10, 1)
    for _ in range(50):
        q.push(b"\x00" * 300, 99)
    assert q.queued_by_sender()[1] == 1
    assert q.counters()[5] <= 1000
    assert q.drain(1) == [b"\x01" * 10]


def test_a_member_that_holds_the_most_is_evicted_first() -> None:
    # REQ: DF-ZEN-152
    # the share rule's other half: a burst of one member's packets (22 queued against two flood
    # keys' 20 each) makes that member the largest sender, and its oldest packet leaves first
    q = PacketQueue(64, 1 << 20)
    for i in range(22):
        q.push(b"m" + i.to_bytes(2, "little"), 3)
    q.push(b"n", 2)
    for i in range(40):
        q.push(b"\xee" * 5, 0x5EED + i % 2)
    assert len(q) == 63 and q.queued_by_sender() == {3: 22, 2: 1, 0x5EED: 20, 0x5EEE: 20}
    q.push(b"\xee" * 5, 0x5EED)  # fills the queue: nothing leaves
    q.push(b"\xee" * 5, 0x5EEE)  # one over: the member with 22 loses its oldest
    assert q.queued_by_sender() == {3: 21, 2: 1, 0x5EED: 21, 0x5EEE: 21}
    assert q.dropped_packets == 1
    q.push(b"\xee" * 5, 0x5EED)  # 21 each and a tie: the sender whose oldest packet is oldest
    assert q.queued_by_sender() == {3: 20, 2: 1, 0x5EED: 22, 0x5EEE: 21}
    drained = q.drain()
    assert drained[0] == b"m" + (2).to_bytes(2, "little")  # m0 and m1 were evicted, order kept
    assert b"n" in drained


def test_single_sender_is_drop_oldest_and_partial_drain_keeps_order() -> None:
    # REQ: DF-ZEN-17
    q = PacketQueue(4)
    for i in range(20):
        q.push(bytes([i]))
    assert q.dropped_packets == 16
    assert q.drain(2) == [bytes([16]), bytes([17])]
    q = PacketQueue(100)
    for i in range(10):
        q.push(bytes([i]), i % 3)
    assert q.drain(4) + q.drain() == [bytes([i]) for i in range(10)]


def test_rate_limit_per_sender() -> None:
    # REQ: DF-ZEN-153
    now = [0.0]
    q = PacketQueue(1000, 1 << 20, rate=10.0, burst=5.0, clock=lambda: now[0])
    assert sum(q.push(b"x", 7) for _ in range(100)) == 5  # the burst
    assert q.push(b"x", 8)  # another sender has its own bucket
    now[0] = 0.1
    assert q.push(b"x", 7) and not q.push(b"x", 7)
    assert q.rate_limited == 96
    with pytest.raises(ValueError):
        TokenBuckets(float("nan"), 1.0)
    with pytest.raises(ValueError):
        TokenBuckets(1.0, 0.5)
    b = TokenBuckets(1.0, 1.0, max_senders=16, clock=lambda: 0.0)
    for s in range(100):
        b.take(s)
    assert len(b._buckets) <= 17  # bounded: later senders share the overflow bucket


def test_screen_agrees_with_the_decoder() -> None:
    # REQ: DF-ZEN-154
    good = encode_packet(Packet(1, 1, MANIFEST.fingerprint, ()))
    rng = np.random.default_rng(5)
    cases = [b"", b"DFP1", good[:7], good, good + b"\0" * 100, b"\0" * 5000]
    cases += [rng.bytes(int(rng.integers(0, 64))) for _ in range(200)]
    cases += [good[:4] + b"DFP1" + rng.bytes(40) for _ in range(50)]
    for buf in cases:
        code = screen(buf, 4096)
        try:
            decode_packet(buf, 4096)
            decoded = None
        except DecodeError as exc:
            decoded = exc.code
        if code is not None:
            assert decoded is code
        else:
            assert decoded not in (ErrorCode.OVERSIZE, ErrorCode.BAD_IDENTIFIER)


# ---------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------


def test_membership_and_rate_options_from_env() -> None:
    # REQ: DF-ZEN-150
    env = {
        "DELTA_FABRIC_MEMBERS": "1, 0x2,3",
        "DELTA_FABRIC_LIVE_MEMBERS": "1",
        "DELTA_FABRIC_MEMBER_GRACE": "2.5",
        "DELTA_FABRIC_RATE_LIMIT": "100",
        "DELTA_FABRIC_MAX_SEQ_JUMP": "1000",
    }
    assert dfenv.membership(env) == (frozenset({1, 2, 3}), True, 2.5)
    assert dfenv.rate_limit(env) == (100.0, None)
    assert SyncConfig.from_env(env).max_seq_jump == 1000
    assert dfenv.membership({}) == (None, False, 10.0)
    for bad in ("1,,2", "0", "x", str(1 << 64)):
        with pytest.raises(dfenv.EnvError, match="DELTA_FABRIC_MEMBERS"):
            dfenv.membership({"DELTA_FABRIC_MEMBERS": bad})
    with pytest.raises(dfenv.EnvError, match="MEMBER_GRACE"):
        dfenv.membership({"DELTA_FABRIC_MEMBER_GRACE": "-1"})
    with pytest.raises(dfenv.EnvError, match="RATE_LIMIT"):
        dfenv.rate_limit({"DELTA_FABRIC_RATE_LIMIT": "-3"})
    # the launcher passes them on to every node it starts, and refuses a bad list
    import argparse

    from delta_fabric.launch import UsageError, plan_nodes

    base = dict(nodes=2, world_size=None, listen=None, connect=None, zenoh_config=None)
    base.update(namespace=None, node_id=0x10, metrics=None, metrics_interval=10.0)
    plans = plan_nodes(argparse.Namespace(**base, members="0x10,0x11", live_members=True))
    assert all(p.env["DELTA_FABRIC_MEMBERS"] == "0x10,0x11" for p in plans)
    assert all(p.env["DELTA_FABRIC_LIVE_MEMBERS"] == "1" for p in plans)
    with pytest.raises(UsageError, match="--members"):
        plan_nodes(argparse.Namespace(**base, members="0x10,zz", live_members=False))


# ---------------------------------------------------------------------------------------------------------
# Liveliness membership and pacing (in-memory hub: its live set is the liveliness of the binding)
# ---------------------------------------------------------------------------------------------------------


class _Trained(Fabric):
    """A fabric whose weights take one local step (a random move) before every `step`."""

    def step(self) -> int:
        w = self.store.gather()
        w += np.random.default_rng(self.steps + self.node_id).normal(size=N).astype(np.float32)
        self.store.load(w)
        return super().step()


def _node(hub: MemoryHub, n: int, incarnation: int | None = None, **kw: object) -> Fabric:
    return _Trained.v1_0(
        NumpyStore({"w": np.zeros(N, np.float32)}),
        hub.transport(n),
        CFG,
        node_id=n,
        incarnation=100 + n if incarnation is None else incarnation,
        **kw,  # type: ignore[arg-type]
    )


def _forged(origin: int, seq: int) -> bytes:
    e = Entry(origin, 1, seq, 0, np.array([1], np.uint32), np.array([0.5], np.float32))
    return encode_packet(Packet(0xBAD, 1, MANIFEST.fingerprint, (e,)))


def test_live_membership_tracks_tokens_with_a_grace_and_a_returning_member() -> None:
    # REQ: DF-ZEN-150
    hub = MemoryHub(seed=1)
    a = _node(hub, 1, live_members=True, member_grace=0.0)
    b = _node(hub, 2)
    stranger = hub.transport(0x5EED)
    a.step()
    assert a.members() == frozenset({2, 0x5EED})  # live tokens (no list: any live node)
    for seq in range(1, 50):
        stranger.publish(_forged(0x1000 + seq, 1))  # origins that hold no token
    b.step()
    a.step()
    # 49 from the stranger and the same 49 relayed by b (which has no membership)
    assert a.engine.counters.drops[Admission.NOT_MEMBER] == 98
    assert set(a.accepted_by_origin()) == {2}
    # with a configured list, live tokens outside it are no members
    a2 = _node(hub, 3, members=[1, 2], live_members=True)
    a2.step()
    assert a2.members() == frozenset({1, 2})
    # a member that leaves stops being one after the grace; when it returns (a new incarnation,
    # DF-ZEN-13) it is a member again and its old windows still hold (DF-RCV-51)
    b.close(close_transport=True)
    a.step()
    time.sleep(0.01)
    a.step()
    assert 2 not in (a.members() or frozenset())
    b2 = _node(hub, 2, incarnation=500)
    a.step()
    b2.step()
    a.step()
    assert 2 in (a.members() or frozenset())
    assert a.origin_progress()[2][0] == 500
    assert a.engine.counters.drops[Admission.NOT_MEMBER] == 98


def test_fake_ids_and_dead_peers_do_not_hold_pacing() -> None:
    # REQ: DF-ZEN-156
    hub = MemoryHub(seed=2)
    a, b = _node(hub, 1), _node(hub, 2)
    stranger = hub.transport(0x5EED)
    for _ in range(20):  # a is 20 rounds ahead of b
        a.step()
    b.poll()
    # the forged origin of the 176-byte packet: in origin_progress, but holds no token
    stranger.publish(_forged(0xFA4E, 1))
    a.poll()
    assert 0xFA4E in a.origin_progress()
    # b and the stranger are live and silent: they hold a back, until the deadline
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 2
    time.sleep(0.01)
    assert len(a.pace_blockers(2, peer_deadline=0.005)) == 0  # silent for longer than the deadline
    stranger.close()
    for _ in range(20):
        b.step()
    a.poll()
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0  # b caught up; the stranger is gone
    for _ in range(25):
        a.step()
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 1  # b is 25 rounds behind and moving
    # a dead peer: b closes while behind; pace returns without waiting for it
    b.close(close_transport=True)
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0
    assert a.pace(2, peer_deadline=60.0, timeout=60.0) < 60.0


def test_a_restarted_peer_does_not_hold_the_others_back() -> None:
    # REQ: DF-ZEN-156
    hub = MemoryHub(seed=3)
    a, b = _node(hub, 1), _node(hub, 2)
    for _ in range(30):
        a.step()
        b.step()
    a.poll()
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0
    b.close(close_transport=True)
    b2 = _node(hub, 2, incarnation=999)
    b2.step()  # seq 1 of the new incarnation, 30 rounds behind a
    a.poll()
    assert a.origin_progress()[2] == (999, 1)
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0  # the lead counts from its rejoin
    for _ in range(5):
        a.step()
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 1  # 5 rounds ahead since: it holds again


def test_a_peer_back_from_a_partition_is_behind_by_its_lag_not_by_its_stale_progress() -> None:
    # REQ: DF-ZEN-156
    # The lag counts from the round at which the peer's current incarnation was first heard: a
    # partition does not change that. The bug this pins: the base was forgotten while the peer was
    # not live and taken again at its return from its progress before the cut, so a node back from
    # a 30-round cut ran 30 rounds ahead of it (the fault report's partition: 330 rounds, and gap
    # repair's rounds then ran out before the slower origins' resends came).
    hub = MemoryHub(seed=4)
    a, b = _node(hub, 1), _node(hub, 2)
    for _ in range(10):
        a.step()
        b.step()
    a.poll()
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0
    hub.cut(1, 2)
    for _ in range(30):  # both run on alone; a paces on nobody
        a.step()
        b.step()
        assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0
    assert 2 not in a.transport.peers()
    hub.heal(1, 2)
    # b is live again and a has not heard it since round 10: 30 rounds behind as far as a knows,
    # so a waits for b's news (the stale progress never sets a lead of 30)
    assert a.origin_progress()[2] == (102, 10)
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 1
    b.step()  # round 41 of b: a hears it
    a.poll()
    assert a.origin_progress()[2] == (102, 41)
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0
    for _ in range(3):
        a.step()
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 0  # 2 rounds ahead of b: the lead allowed
    a.step()
    assert len(a.pace_blockers(2, peer_deadline=60.0)) == 1  # 3 rounds ahead: b holds a back


def test_memory_hub_cut_and_heal() -> None:
    hub = MemoryHub()
    a, b, c = hub.transport(1), hub.transport(2), hub.transport(3)
    hub.cut(1, 2)
    assert a.peers() == {3} and b.peers() == {3} and c.peers() == {1, 2}
    a.publish(b"x")
    assert b.drain() == [] and c.drain() == [b"x"]
    with pytest.raises(ValueError):
        hub.cut(1, 1)
    hub.heal(2, 1)
    assert a.peers() == {2, 3}
    a.publish(b"y")
    assert b.drain() == [b"y"]


# ---------------------------------------------------------------------------------------------------------
# The flood over Zenoh
# ---------------------------------------------------------------------------------------------------------


def _rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.parametrize("membership", ["configured", "none"])
def test_a_flood_does_not_evict_members_and_memory_stays_bounded(membership: str) -> None:
    # REQ: DF-ZEN-151, DF-ZEN-152, DF-ZEN-154
    # "configured": the stranger's keys are refused before the queue; "none": its packets reach the
    # queue and only the per-sender shares keep the members' packets in it.
    zenoh = pytest.importorskip("zenoh")
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport, delta_key

    ns = f"dftest/flood{os.getpid()}"
    port = _free_port()
    ep = f"tcp/127.0.0.1:{port}"
    qcap, qbytes = 64, 256 * 1024
    victim_t = ZenohTransport(
        ZenohOptions(node_id=1, namespace=ns, listen=[ep], queue_capacity=qcap, queue_bytes=qbytes)
    )
    seen: set[tuple[int, int]] = set()  # (origin, seq) of every entry the victim accepted
    victim = Fabric.v1_0(
        NumpyStore({"w": np.zeros(N, np.float32)}),
        victim_t,
        CFG,
        node_id=1,
        incarnation=101,
        members=[1, 2, 3] if membership == "configured" else None,
        own_transport=True,
        on_accepted=lambda acc: seen.update((e.origin, e.seq) for e in acc),
    )
    members = [
        ZenohTransport(
            ZenohOptions(
                node_id=n, namespace=ns, listen=[f"tcp/127.0.0.1:{_free_port()}"], connect=[ep]
            )
        )
        for n in (2, 3)
    ]
    raw = zenoh.Config()
    raw.insert_json5("mode", '"peer"')
    raw.insert_json5("connect/endpoints", f'["{ep}"]')
    raw.insert_json5("listen/endpoints", "[]")
    raw.insert_json5("scouting/multicast/enabled", "false")
    raw.insert_json5("scouting/gossip/enabled", "false")
    attacker = zenoh.open(raw)
    try:
        victim_t.wait_for_peers(2, 15.0)
        # each member sees the victim's liveliness token, which the victim declares after its
        # delta subscriber: declarations arrive in order, so the member's first put is routed to
        # the victim (without this wait, a fast first round was put before Zenoh knew the
        # subscriber and was lost: 37 of 40 accepted in a CI run on a quiet machine)
        for t in members:
            t.wait_for_peers(1, 15.0, expected=[1])
        # ... and, judged by state, until the victim accepted an entry of each member: the token
        # alone did not always mean the member's puts were routed (37 and 38 of 40 accepted in a
        # later quiet CI run). The warm-up entries are not counted below.
        next_seq = {t.node_id: 1 for t in members}

        def put(t: ZenohTransport) -> int:
            seq = next_seq[t.node_id]
            next_seq[t.node_id] += 1
            e = Entry(
                t.node_id, 7, seq, 0, np.array([seq % N], np.uint32), np.array([1e-3], np.float32)
            )
            t.publish(encode_packet(Packet(t.node_id, 7, MANIFEST.fingerprint, (e,))))
            return seq

        warm_deadline = time.monotonic() + 15.0
        while not all(any(o == t.node_id for o, _ in seen) for t in members):
            if time.monotonic() > warm_deadline:
                pytest.fail(f"no member entry reached the victim in 15 s: {sorted(seen)}")
            for t in members:
                put(t)
            victim_t.wait_for_packets(0.05)
            victim.poll()
        # DF-ZEN-152 is a property of the queue: record every member packet that reaches it (the
        # transport's push), so that a member packet lost before the queue (Zenoh, in this one
        # starved process under CI load: 31 and 32 of 40 delivered in one run) is told apart from
        # one the queue evicted, which is what this test forbids
        pushed: dict[int, set[int]] = {2: set(), 3: set()}
        queue = victim_t._queue
        push = queue.push

        def recording_push(packet: bytes, sender: int = 0) -> bool:
            if sender in pushed:
                pushed[sender].update(e.seq for e in decode_packet(packet).entries)
            return push(packet, sender)

        queue.push = recording_push  # type: ignore[method-assign]
        pubs = [attacker.declare_publisher(delta_key(ns, k)) for k in (0x5EED, 0x5EEE)]
        rng = np.random.default_rng(11)
        hostile = [_forged(0x7000 + i, 1) for i in range(64)]  # valid packets, stranger origins
        garbage = [rng.bytes(int(rng.integers(1, 400))) for _ in range(64)]
        mutated = [b"\0\0\0\0DFP1" + rng.bytes(200) for _ in range(64)]  # pass the screen
        sent = {2: 0, 3: 0}
        flood_seqs: dict[int, list[int]] = {2: [], 3: []}
        rss0 = _rss_kb()
        rounds, flood_per_round = 40, 200
        for _ in range(rounds):
            for i in range(flood_per_round):
                pubs[i % 2].put(
                    garbage[i % 64]
                    if i % 3 == 0
                    else hostile[i % 64]
                    if i % 3 == 1
                    else mutated[i % 64]
                )
            for t in members:
                flood_seqs[t.node_id].append(put(t))
                sent[t.node_id] += 1
            # judged by state: the victim drains once each member's packet of this round has
            # reached its queue, so a member holds at most one packet there, as a member that
            # sends no faster than the victim drains does. Without this wait, a starved process
            # (CI, two busy loops: 2 of 6 runs) had Zenoh deliver 20 rounds of one member's
            # packets at once; that member then held 22 queued packets against the flood keys'
            # 20 each, and DF-ZEN-152 rightly evicted its oldest (its share rule is pinned by
            # test_a_member_that_holds_the_most_is_evicted_first). The flood is not waited for.
            wait_deadline = time.monotonic() + 30.0
            while not all(flood_seqs[n][-1] in pushed[n] for n in pushed):
                if time.monotonic() > wait_deadline:
                    pytest.fail(
                        f"a member packet did not reach the victim's queue in 30 s: {pushed}"
                    )
                time.sleep(0.001)
            victim.poll()
            st = victim_t.stats
            assert st.queued_packets <= qcap and st.queued_bytes <= qbytes
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and any(
            (n, q) not in seen for n, qs in flood_seqs.items() for q in qs
        ):
            victim_t.wait_for_packets(0.1)
            victim.poll()
        got = {n: sum((n, q) in seen for q in qs) for n, qs in flood_seqs.items()}
        queued = {n: sum(q in pushed[n] for q in qs) for n, qs in flood_seqs.items()}
        st = victim_t.stats
        rc = victim.engine.counters
        print(
            f"\nflood: {rounds * flood_per_round} stranger puts, members sent {sent}, queued {queued}, accepted {dict((n, got.get(n, 0)) for n in sent)}; "
            f"queue dropped {st.dropped_packets}, not_member (pre-queue) {st.rejected_not_member}, "
            f"screened BAD_IDENTIFIER {rc.errors.get(ErrorCode.BAD_IDENTIFIER, 0)}, "
            f"RSS +{_rss_kb() - rss0} kB"
        )
        # exact: every member packet that reached the queue was accepted, not one evicted
        assert got == queued, f"queued {queued}, accepted {got}"
        assert all(queued[n] > 0 for n in sent), queued  # the members' packets did reach it
        screened = rc.errors.get(ErrorCode.BAD_IDENTIFIER, 0)
        assert screened > 0  # garbage screened before the queue
        if membership == "configured":  # the stranger's valid and mutated packets never queued
            # Exact and independent of how many of the stranger's puts Zenoh has delivered yet (its
            # puts may still be in flight, or dropped under congestion): every packet that reached
            # the queue is a member's, and the stranger's valid packets were refused before it.
            assert st.received_packets == sum(o in sent for o, _ in seen)  # warm-up included
            assert st.rejected_not_member > 0
            assert st.rejected_not_member + screened <= rounds * flood_per_round
            assert st.dropped_packets == 0
        else:  # they queued, and the queue overflowed with the stranger's packets only
            assert st.rejected_not_member == 0
            assert st.dropped_packets > 0
        assert _rss_kb() - rss0 < 200_000  # bounded: the queue holds at most 256 KiB
    finally:
        attacker.close()
        for t in members:
            t.close()
        victim.close()


def test_snapshot_answers_only_members() -> None:
    # REQ: DF-ZEN-155
    zenoh = pytest.importorskip("zenoh")
    from delta_fabric.snapshot import SnapshotError, SnapshotSource
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport, query_from, snapshot_key

    ns = f"dftest/snapmembers{os.getpid()}"
    port = _free_port()
    ep = f"tcp/127.0.0.1:{port}"

    def opts(n: int, **kw: object) -> ZenohOptions:
        return ZenohOptions(node_id=n, namespace=ns, **kw)  # type: ignore[arg-type]

    fp = MANIFEST.fingerprint
    values = np.arange(N, dtype=np.float32)
    with ZenohTransport(opts(1, listen=[ep])) as a:
        a.serve_snapshot(lambda: SnapshotSource(5, fp, values, "numpy"))
        a.set_members({1, 2})
        with (
            ZenohTransport(opts(2, listen=[f"tcp/127.0.0.1:{_free_port()}"], connect=[ep])) as b,
            ZenohTransport(opts(3, listen=[f"tcp/127.0.0.1:{_free_port()}"], connect=[ep])) as c,
        ):
            a.wait_for_peers(2, 15.0, expected=[2, 3])
            anchor, inc = b.fetch_snapshot(1, fp, 15.0)  # a member: its queries carry from=2
            assert inc == 5 and np.array_equal(anchor, values)
            with pytest.raises(SnapshotError):
                c.fetch_snapshot(1, fp, 5.0, attempts=1)
            replies = list(
                c.session.get(
                    f"{snapshot_key(ns, 1)}?chunk=0&chunk_size=16",
                    target=zenoh.QueryTarget.ALL,
                    timeout=5.0,
                )
            )
            assert len(replies) == 1 and replies[0].ok is None
            err = replies[0].err
            assert err is not None and len(err.payload.to_bytes()) <= 64
            assert a.stats.snapshot_refused >= 2
    assert query_from("chunk=0&from=0000000000000002") == 2
    assert query_from("chunk=0;from=2") is None
    # REQ: DF-ZEN-42 -- the first `from` counts; only spaces and tabs around it are removed
    assert query_from("from=0000000000000002&from=0000000000000003") == 2
    assert query_from("chunk=0&from=x;from=0000000000000002") is None
    assert query_from(" from \t= 0000000000000002\t") == 2
    assert query_from("from=\u00a00000000000000002") is None
