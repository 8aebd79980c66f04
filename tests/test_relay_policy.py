"""Relay policy NEEDED (spec section 8.6, added in 1.1): delivery in partial topologies, no relay in a
full mesh once the advertisements are known, advertisement rules, interoperation with ALL / 1.0 nodes.

A lock-step simulation of engines behind a router (the same model as bench/bench_relay.py): in every
round each node receives the packets its in-neighbours published in the previous round, then generates
and publishes. Deterministic: no threads, no timing.
"""

from __future__ import annotations

import numpy as np
import pytest
from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from delta_fabric.replay import Admission
from delta_fabric.wire import Entry, Packet, decode_packet, encode_packet

MANIFEST = Manifest.from_named_shapes({"w": (64,)})
ALL, NEEDED = RelayPolicy.ALL, RelayPolicy.NEEDED


def hears(topology: str, n: int) -> list[set[int]]:
    """For each node index, the indices whose packets it receives."""
    if topology == "mesh":
        return [set(range(n)) - {i} for i in range(n)]
    if topology == "ring":
        return [{(i - 1) % n, (i + 1) % n} - {i} for i in range(n)]
    if topology == "line":
        return [{j for j in (i - 1, i + 1) if 0 <= j < n} for i in range(n)]
    if topology == "one_way_ring":  # not symmetric: i hears i - 1 only
        return [{(i - 1) % n} for i in range(n)]
    raise ValueError(topology)


class Sim:
    def __init__(self, topology: str, policies: list[RelayPolicy]) -> None:
        n = len(policies)
        self.n = n
        self.ids = [0x100 + i for i in range(n)]
        self.engines = [
            Engine(MANIFEST, SyncConfig.v1_0(ratio=0.1, relay_policy=p), self.ids[i], 1)
            for i, p in enumerate(policies)
        ]
        self.hears = hears(topology, n)
        self.rng = np.random.default_rng(3)
        self.actives = [np.zeros(64, dtype=np.float32) for _ in range(n)]
        # DF-RLY-63: every NEEDED node publishes an empty advertisement when it starts
        self.out: list[list[bytes]] = [
            [a] if (a := eng.advertisement()) is not None else [] for eng in self.engines
        ]
        self.generated: set[tuple[int, int]] = set()
        self.received: list[set[tuple[int, int]]] = [set() for _ in range(n)]
        self.relayed_per_round: list[int] = []

    def round(self, *, generate: bool = True) -> None:
        inboxes = [[p for j in sorted(self.hears[i]) for p in self.out[j]] for i in range(self.n)]
        out = []
        relayed = 0
        for i, eng in enumerate(self.engines):
            res = eng.receive(inboxes[i])
            assert all(o is None for o in res.outcomes)
            res.apply_to(self.actives[i])
            self.received[i].update((a.origin, a.seq) for a in res.accepted)
            own: list[Entry] = []
            if generate:
                self.actives[i] += self.rng.standard_normal(64).astype(np.float32)
                own = eng.generate(self.actives[i])
                self.generated.update((e.origin, e.seq) for e in own)
            relayed += len(res.relay)
            pk = eng.pack(own, res.relay)
            if generate and not pk:
                adv = eng.advertisement()
                pk = [] if adv is None else [adv]
            out.append(pk)
        self.out = out
        self.relayed_per_round.append(relayed)

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.round()
        for _ in range(self.n + 1):  # let the last entries travel
            self.round(generate=False)

    def all_delivered(self) -> bool:
        return all(
            self.received[i] == {g for g in self.generated if g[0] != self.ids[i]}
            for i in range(self.n)
        )

    def duplicate_ratio(self) -> float:
        drops = sum(
            e.counters.drops.get(Admission.OWN_ORIGIN, 0)
            + e.counters.drops.get(Admission.DUPLICATE, 0)
            for e in self.engines
        )
        return drops / sum(e.counters.entries_accepted for e in self.engines)


@pytest.mark.parametrize("topology", ["mesh", "ring", "line"])
@pytest.mark.parametrize("n", [3, 5, 8])
def test_needed_delivers_every_entry_on_symmetric_links(topology: str, n: int) -> None:
    # REQ: DF-RLY-60, DF-RLY-64
    sim = Sim(topology, [NEEDED] * n)
    sim.run(6)
    assert len(sim.generated) == 6 * n
    assert sim.all_delivered()
    base = Sim(topology, [ALL] * n)
    base.run(6)
    assert sim.duplicate_ratio() <= base.duplicate_ratio()


def test_needed_full_mesh_stops_relaying_once_advertisements_are_known() -> None:
    # REQ: DF-RLY-60, DF-RLY-61, DF-RLY-62
    sim = Sim("mesh", [NEEDED] * 8)
    sim.run(10)
    assert sim.all_delivered()
    # the start-up advertisements (round 0) make every node a neighbour of every other, so the
    # packets of round 1 already advertise everyone: no entry is ever relayed
    assert sum(sim.relayed_per_round) == 0
    assert sim.duplicate_ratio() == 0.0  # issue 11's bar: <= 0.1
    assert sum(e.counters.relay_suppressed for e in sim.engines) == 7 * 8 * 10
    # without the start-up advertisement the first packets carry empty advertisements (their
    # senders had heard nobody yet), so round 2 relays everything, and then nothing
    late = Sim("mesh", [NEEDED] * 8)
    late.out = [[] for _ in range(8)]
    late.run(10)
    assert late.all_delivered()
    assert late.relayed_per_round[1] == 8 * 7 and sum(late.relayed_per_round[2:]) == 0


def test_one_way_ring_needs_policy_all() -> None:
    # REQ: DF-RLY-64 (the precondition is necessary: on one-way links NEEDED loses entries)
    sim = Sim("one_way_ring", [NEEDED] * 4)
    sim.run(4)
    assert not sim.all_delivered()
    base = Sim("one_way_ring", [ALL] * 4)
    base.run(4)
    assert base.all_delivered()


@pytest.mark.parametrize("topology", ["mesh", "ring", "line"])
def test_mixed_cluster_with_policy_all_nodes_delivers(topology: str) -> None:
    # REQ: DF-RLY-62 (a node without advertisement lacks every entry), DF-PAR-60 (may differ)
    policies = [NEEDED, ALL, NEEDED, NEEDED, ALL]
    sim = Sim(topology, policies)
    sim.run(6)
    assert sim.all_delivered()


def _pkt(sender: int, *entries: Entry, heard: tuple[int, ...] | None) -> bytes:
    return encode_packet(Packet(sender, 1, MANIFEST.fingerprint, entries, heard=heard))


def _entry(origin: int, seq: int) -> Entry:
    return Entry(origin, 1, seq, 0, np.array([seq], dtype=np.uint32), np.array([1.0], np.float32))


def test_advertisements_expire_after_two_sync_rounds() -> None:
    # REQ: DF-RLY-61, DF-RLY-62
    x, b, c = 0x10, 0x0B, 0x0C
    eng = Engine(MANIFEST, SyncConfig.v1_0(relay_policy=NEEDED), x, 1)
    active = np.zeros(64, dtype=np.float32)
    # C advertises that it hears B; B's entry is not relayed
    res = eng.receive([_pkt(c, heard=(b, x)), _pkt(b, _entry(b, 1), heard=(x,))])
    assert res.relay == [] and eng.counters.relay_suppressed == 1
    assert eng.heard == (b, c)
    eng.generate(active)  # end of round 1: C's advertisement is still current in round 2
    res = eng.receive([_pkt(b, _entry(b, 2), heard=(x,))])
    assert res.relay == [] and eng.heard == (b, c)
    eng.generate(active)  # end of round 2: C's advertisement (round 1) expires; C still heard
    assert eng.heard == (b,)  # C sent nothing in round 2: it is no longer heard either
    res = eng.receive([_pkt(c, heard=None), _pkt(b, _entry(b, 3), heard=(x,))])
    # C is heard again but carries no advertisement (a 1.0 node): it lacks everything
    assert [e.origin for e in res.relay] == [b]
    assert eng.counters.entries_relayed == 1


def test_packets_without_heard_keep_the_stored_advertisement() -> None:
    # REQ: DF-RLY-62
    x, b, c = 0x10, 0x0B, 0x0C
    eng = Engine(MANIFEST, SyncConfig.v1_0(relay_policy=NEEDED), x, 1)
    eng.receive([_pkt(c, heard=(b,))])
    res = eng.receive([_pkt(c, heard=None), _pkt(b, _entry(b, 1), heard=())])
    assert res.relay == []


def test_advertisement_is_written_only_with_policy_needed_and_every_round() -> None:
    # REQ: DF-RLY-61, DF-RLY-63, DF-PKT-60
    x, b = 0x10, 0x0B
    active = np.zeros(64, dtype=np.float32)
    all_eng = Engine(MANIFEST, SyncConfig.v1_0(), x, 1)
    assert all_eng.advertisement() is None
    _, out = all_eng.step(active, [_pkt(b, _entry(b, 1), heard=None)], sync=True)
    assert [decode_packet(p).heard for p in out] == [None]  # the relay, no advertisement
    eng = Engine(MANIFEST, SyncConfig.v1_0(relay_policy=NEEDED), x, 1)
    active = np.zeros(64, dtype=np.float32)
    _, out = eng.step(active, [], sync=True)  # nothing to send: an empty advertisement packet
    assert [(decode_packet(p).entries, decode_packet(p).heard) for p in out] == [((), ())]
    c = 0x0C  # a neighbour that does not hear B: B's entry is relayed for it
    _, out = eng.step(active, [_pkt(c, heard=()), _pkt(b, _entry(b, 1), heard=())], sync=False)
    assert [decode_packet(p).heard for p in out] == [(b, c)]
    _, out = eng.step(active, [], sync=False)  # no sync round ended: nothing to publish
    assert out == []


def test_advertisement_is_left_out_when_it_does_not_fit() -> None:
    # REQ: DF-RLY-61
    x = 0x10
    cfg = SyncConfig.v1_0(relay_policy=NEEDED, max_packet_size=296)
    eng = Engine(MANIFEST, cfg, x, 1)
    senders = list(range(0x20, 0x2C))
    eng.receive([_pkt(s, heard=()) for s in senders])
    assert len(eng.heard) == 12  # 24 + 8 * 12 = 120 bytes: no room beside a one-value entry
    own = [Entry(x, 1, 1, 0, np.array([3], np.uint32), np.array([0.5], np.float32))]
    (p,) = eng.pack(own, [])
    assert decode_packet(p).heard is None and len(p) <= 296
    adv = eng.advertisement()  # an empty packet has room (160 + 120 <= 296)
    assert adv is not None and decode_packet(adv).heard == tuple(senders)


def test_heard_must_be_nonzero_and_ascending() -> None:
    # REQ: DF-PKT-60
    from delta_fabric.errors import DecodeError, ErrorCode

    for bad in [(0,), (5, 5), (7, 3)]:
        buf = encode_packet(Packet(1, 1, MANIFEST.fingerprint, (), heard=bad))
        with pytest.raises(DecodeError) as ei:
            decode_packet(buf)
        assert ei.value.code is ErrorCode.MALFORMED
    assert decode_packet(encode_packet(Packet(1, 1, MANIFEST.fingerprint, ()))).heard is None


def test_fabric_line_over_memory_hub_advertises_at_start_and_delivers() -> None:
    # REQ: DF-RLY-63, DF-RLY-60
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.numpy import NumpyStore
    from delta_fabric.transports.memory import MemoryHub

    hub = MemoryHub()
    cfg = SyncConfig.v1_0(ratio=0.5, relay_policy=NEEDED)
    line = {1: [2], 2: [1, 3], 3: [2]}  # 1 - 2 - 3: each transport hears its neighbours only
    weights = {i: np.zeros(4, np.float32) for i in line}
    transports = {i: hub.transport(i, neighbours=line[i]) for i in line}
    spy = hub.transport(99, neighbours=[1])  # hears node 1, publishes nothing
    fabs = {
        i: Fabric.v1_0(NumpyStore({"w": weights[i]}), transports[i], cfg, node_id=i) for i in line
    }
    # each node published one start-up advertisement (no entry, empty heard) before anything else
    assert all(t.stats.published_packets == 1 for t in transports.values())
    probe = decode_packet(spy.drain(10)[0])
    assert (probe.sender, probe.entries, probe.heard) == (1, (), ())
    for _ in range(3):
        for i in line:
            weights[i][i] += 1.0
            fabs[i].sync_now()
    for _ in range(3):
        for f in fabs.values():
            f.poll()
    # every node holds every node's progress (1 and 3 only through 2's relays)
    for i in line:
        np.testing.assert_array_equal(weights[i], np.array([0, 3, 3, 3], np.float32))
    # the ends relay nothing: their only neighbour sent them the entry
    assert fabs[1].relay_entries_sent == 0 and fabs[3].relay_entries_sent == 0
    assert fabs[2].relay_entries_sent == 6
    assert fabs[1].engine.counters.drops.get(Admission.DUPLICATE, 0) == 0
    for f in fabs.values():
        f.close()
