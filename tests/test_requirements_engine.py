"""Engine-level requirements: non-finite deltas (DF-GEN-9), manifest size bounds (DF-MAN-7), cluster-wide
parameters (DF-PAR-12), packing (DF-PKT-11, DF-RLY-6) and the bound on receiver state (DF-SEC-2)."""

from __future__ import annotations

import numpy as np
import pytest
from delta_fabric.config import MIN_MAX_PACKET_SIZE, SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.errors import ErrorCode
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.replay import DEFAULT_MAX_ORIGINS, Admission
from delta_fabric.wire import Entry, Packet, ValueEncoding, decode_packet, encode_packet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

N = 24
MANIFEST = Manifest.from_named_shapes({"a.weight": (4, 5), "a.bias": (4,)})
assert MANIFEST.num_params == N
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Key = tuple[int, int, int]


def _engine(node_id: int = 1, **cfg: object) -> Engine:
    return Engine(MANIFEST, SyncConfig.v1_0(**cfg), node_id, 1)  # type: ignore[arg-type]


def _reference_selection(d: np.ndarray, k: int) -> list[int]:
    cand = [i for i in range(d.size) if d[i] != 0 and not np.isnan(d[i])]
    cand.sort(key=lambda i: (-abs(float(d[i])), i))
    return sorted(cand[:k])


def _packet(sender: int, entries: list[Entry], enc: ValueEncoding = ValueEncoding.F32) -> bytes:
    return encode_packet(Packet(sender, 1, MANIFEST.fingerprint, tuple(entries), enc))


def _entry(origin: int, inc: int, seq: int, hops: int, idx: list[int], scale: float = 0.5) -> Entry:
    ix = np.array(sorted(set(idx)), dtype=np.uint32)
    vals = (np.arange(1, ix.size + 1, dtype=np.float32) * np.float32(scale)).astype(np.float32)
    return Entry(origin, inc, seq, hops, ix, vals)


# -------------------------------------------------------------------------------------------------
# DF-GEN-9

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)
delta_values = st.lists(
    st.one_of(finite, st.just(0.0), st.just(float("nan"))), min_size=N, max_size=N
)


@SETTINGS
@given(delta_values, st.sampled_from([0.05, 0.25, 0.5, 1.0]), st.sampled_from(list(ValueEncoding)))
def test_nan_deltas_are_never_selected(
    values: list[float], ratio: float, enc: ValueEncoding
) -> None:
    eng = _engine(ratio=ratio, encoding=enc)
    active = np.array(values, dtype=np.float32)
    d = active - eng.anchor
    k = eng.config.num_selected(N)
    entries = eng.generate(active.copy())
    sent = np.concatenate([e.indices for e in entries]) if entries else np.empty(0, np.uint32)
    # REQ: DF-GEN-9 -- a NaN delta is not a candidate; the selection is the reference one without it
    assert not np.isnan(d[sent]).any()
    assert sent.tolist() == _reference_selection(d, k)
    for e in entries:
        assert np.isfinite(e.values).all()  # no entry ever carries a non-finite value


@SETTINGS
@given(
    delta_values,
    st.lists(st.integers(0, N - 1), min_size=1, max_size=4),
    st.sampled_from([float("inf"), float("-inf")]),
    st.sampled_from(list(ValueEncoding)),
    st.booleans(),
    st.sampled_from([0.05, 0.5, 1.0]),
)
def test_infinite_delta_fails_the_whole_generation(
    values: list[float],
    inf_at: list[int],
    inf: float,
    enc: ValueEncoding,
    fast: bool,
    ratio: float,
) -> None:
    eng = _engine(ratio=ratio, encoding=enc)
    first = np.linspace(-1, 1, N, dtype=np.float32)
    assert eng.generate(first, fast=fast)  # seq 1 consumed, anchor moved
    anchor_before = eng.anchor.copy()
    seq_before, generated_before = eng.next_seq, eng.entries_generated
    active = np.array(values, dtype=np.float32) + first
    active[inf_at] = np.float32(inf)
    # REQ: DF-GEN-9 -- the generation fails as a whole and reports the error
    with pytest.raises(ValueError, match="infinite"):
        eng.generate(active, fast=fast)
    # REQ: DF-GEN-9 -- no entry, no seq consumed, anchor unchanged (bit for bit)
    assert eng.next_seq == seq_before and eng.entries_generated == generated_before
    assert eng.anchor.tobytes() == anchor_before.tobytes()
    # the next finite generation continues with the next seq
    active[inf_at] = first[inf_at] + np.float32(2.0)
    out = eng.generate(active, fast=fast)
    assert out and out[0].seq == seq_before


def test_infinite_delta_through_step_publishes_nothing() -> None:
    eng = _engine(ratio=0.5, encoding=ValueEncoding.F16)
    active = np.zeros(N, dtype=np.float32)
    active[3] = np.inf
    active[5] = 1.0
    # REQ: DF-GEN-9 -- F16 would clamp inf to 65504: the check is on d, before encoding
    with pytest.raises(ValueError):
        eng.step(active, [], sync=True)
    assert eng.next_seq == 1 and not eng.anchor.any()


# -------------------------------------------------------------------------------------------------
# DF-MAN-7


def test_manifest_size_bounds() -> None:
    # REQ: DF-MAN-7 -- N is the sum of the shape products, a scalar counts 1
    m = Manifest([TensorSpec("s", ()), TensorSpec("w", (3, 4)), TensorSpec("z", (0, 5))])
    assert m.num_params == 13
    # REQ: DF-MAN-7 -- N = 2**32 is the largest accepted (metadata only: nothing is allocated)
    assert Manifest([TensorSpec("w", (65536, 65536))]).num_params == 2**32
    assert Manifest([TensorSpec("a", (2**31,)), TensorSpec("b", (2**31,))]).num_params == 2**32
    # REQ: DF-MAN-7 -- N > 2**32 does not fit the 32-bit indices: refused
    with pytest.raises(ValueError, match="2\\*\\*32"):
        Manifest([TensorSpec("w", (65536, 65536)), TensorSpec("x", ())])
    with pytest.raises(ValueError):
        Manifest([TensorSpec("w", (2**33,))])
    # REQ: DF-MAN-7 -- N = 0: a node refuses to start
    for empty in (Manifest([]), Manifest([TensorSpec("z", (0,))])):
        assert empty.num_params == 0
        with pytest.raises(ValueError):
            Engine(empty, SyncConfig.v1_0(), 1, 1)


# -------------------------------------------------------------------------------------------------
# DF-PAR-12


def test_nodes_disagreeing_on_max_packet_size_reject_oversize() -> None:
    big = _engine(1, ratio=1.0, max_packet_size=4096)
    small = _engine(2, max_packet_size=MIN_MAX_PACKET_SIZE + 16)
    own = big.generate(np.arange(1, N + 1, dtype=np.float32))
    (pkt,) = big.pack(own, [])
    assert len(pkt) > small.config.max_packet_size
    res = small.receive([pkt])
    # REQ: DF-PAR-12 -- a valid packet of one node is rejected by another (OVERSIZE)
    assert res.outcomes == [ErrorCode.OVERSIZE]
    assert small.counters.errors[ErrorCode.OVERSIZE] == 1
    assert not small.anchor.any() and res.accepted_entries == 0
    # the same packet is accepted by a node that agrees on the parameter
    assert _engine(3, max_packet_size=4096).receive([pkt]).outcomes == [None]


def test_nodes_disagreeing_on_hop_limit_reject_hop_limit() -> None:
    relay = _engine(1, hop_limit=8, relay_threshold=0.0)
    strict = _engine(2, hop_limit=3)
    incoming = _packet(7, [_entry(9, 1, 1, 3, [0, 4, 8])])
    res = relay.receive([incoming])
    assert res.outcomes == [None] and [e.hops for e in res.relay] == [4]
    (fwd,) = relay.pack([], res.relay)
    out = strict.receive([fwd])
    # REQ: DF-PAR-12 -- hops 4 is valid for the relay (hop_limit 8) and rejected by hop_limit 3
    assert out.outcomes == [ErrorCode.HOP_LIMIT]
    assert strict.counters.errors[ErrorCode.HOP_LIMIT] == 1
    assert not strict.anchor.any()


def test_nodes_disagreeing_on_manifest_reject_fingerprint() -> None:
    other = Manifest.from_named_shapes(
        {"a.weight": (4, 5), "a.bias": (4,), "bn.running_mean": (2,)}
    )  # include_buffers on one node only
    a = Engine(other, SyncConfig.v1_0(ratio=1.0), 1, 1)
    own = a.generate(np.ones(other.num_params, dtype=np.float32))
    b = _engine(2)
    res = b.receive(a.pack(own, []))
    # REQ: DF-PAR-12 -- FINGERPRINT_MISMATCH
    assert res.outcomes == [ErrorCode.FINGERPRINT_MISMATCH]
    assert not b.anchor.any()


# -------------------------------------------------------------------------------------------------
# DF-PKT-11 and DF-RLY-6

incoming_entry = st.tuples(
    st.sampled_from([1, 2, 3, 4]),  # origin (1 is the receiving node itself)
    st.integers(1, 2),  # incarnation
    st.integers(1, 5),  # seq
    st.integers(0, 3),  # hops
    st.lists(st.integers(0, N - 1), min_size=1, max_size=N),
)


@SETTINGS
@given(
    st.lists(st.lists(incoming_entry, min_size=0, max_size=5), min_size=0, max_size=6),
    st.lists(finite, min_size=N, max_size=N),
    st.integers(MIN_MAX_PACKET_SIZE, 1200),
    st.sampled_from(list(ValueEncoding)),
)
def test_pack_never_repeats_a_key_in_a_packet(
    packets: list[list[tuple[int, int, int, int, list[int]]]],
    active_values: list[float],
    max_packet_size: int,
    enc: ValueEncoding,
) -> None:
    eng = _engine(1, ratio=0.5, relay_threshold=0.0, max_packet_size=max_packet_size, encoding=enc)
    wire = []
    for p in packets:  # packets from other senders, with replays, duplicates and own-origin echoes
        entries = [_entry(o, i, s, h, ix) for o, i, s, h, ix in p]
        while entries and 2 * len(entries) + sum(e.indices.size for e in entries) > 40:
            entries.pop()
        wire.append(_packet(5, entries))
    res = eng.receive(wire)
    active = np.array(active_values, dtype=np.float32) + eng.anchor
    own = eng.generate(active)
    dropped_before = eng.relay_dropped_oversize
    out = eng.pack(own, res.relay)
    seen: dict[Key, int] = {}
    for buf in out:
        assert len(buf) <= max_packet_size
        pkt = decode_packet(buf, max_packet_size)
        assert pkt.sender == 1
        keys = [(e.origin, e.incarnation, e.seq) for e in pkt.entries]
        # REQ: DF-PKT-11 -- no two entries with the same (origin, incarnation, seq) in one packet
        assert len(keys) == len(set(keys)), keys
        for e in pkt.entries:
            # REQ: DF-PKT-11 -- entries of the node's own origin only with hops 0
            assert e.origin != 1 or e.hops == 0
            seen[(e.origin, e.incarnation, e.seq)] = (
                seen.get((e.origin, e.incarnation, e.seq), 0) + 1
            )
    # every own entry is sent exactly once (own entries always fit), relay entries at most once
    for e in own:
        assert seen[(e.origin, e.incarnation, e.seq)] == 1
    missing = [e for e in res.relay if (e.origin, e.incarnation, e.seq) not in seen]
    assert len(missing) == eng.relay_dropped_oversize - dropped_before
    assert all(v == 1 for v in seen.values())


relay_spec = st.tuples(st.integers(1, 80), st.integers(1, 3))  # (values, hops)


@SETTINGS
@given(
    st.lists(relay_spec, min_size=1, max_size=8),
    st.integers(MIN_MAX_PACKET_SIZE, MIN_MAX_PACKET_SIZE + 400),
    st.sampled_from(list(ValueEncoding)),
)
def test_relay_entries_are_never_split(
    specs: list[tuple[int, int]], max_packet_size: int, enc: ValueEncoding
) -> None:
    n = 96
    m = Manifest.from_named_shapes({"w": (n,)})
    eng = Engine(m, SyncConfig.v1_0(max_packet_size=max_packet_size, encoding=enc), 1, 1)
    relay = []
    for j, (count, hops) in enumerate(specs):
        idx = np.arange(0, 2 * count, 2, dtype=np.uint32)[:count] % n
        idx = np.unique(idx)
        vals = np.linspace(-1, 1, idx.size, dtype=np.float32) + np.float32(0.125)
        relay.append(Entry(10 + j, 1, j + 1, hops, idx, vals))
    out = eng.pack([], relay)
    found: dict[Key, list[Entry]] = {}
    for buf in out:
        assert len(buf) <= max_packet_size
        for e in decode_packet(buf, max_packet_size).entries:
            found.setdefault((e.origin, e.incarnation, e.seq), []).append(e)
    dropped = 0
    for e in relay:
        key = (e.origin, e.incarnation, e.seq)
        alone = encode_packet(Packet(1, 1, m.fingerprint, (e,), enc))
        if key not in found:
            # REQ: DF-RLY-6 -- dropped only when it does not fit alone, and counted
            assert len(alone) > max_packet_size
            dropped += 1
            continue
        # REQ: DF-RLY-6 -- one piece, in one packet, whole (same indices, same encoded values)
        (got,) = found[key]
        assert got.hops == e.hops
        assert got.indices.tolist() == e.indices.tolist()
        from delta_fabric.wire import quantize

        assert got.values.tobytes() == quantize(e.values, enc).tobytes()
    assert eng.relay_dropped_oversize == dropped


def test_oversize_relay_entry_is_dropped_counted_and_applied() -> None:
    """A 16-bit entry that fits a packet but not once relayed as F32 (DF-RLY-6, DF-GEN-11)."""
    n = 256
    m = Manifest.from_named_shapes({"w": (n,)})
    limit = 1400
    relay_node = Engine(m, SyncConfig.v1_0(max_packet_size=limit, relay_threshold=0.0), 1, 1)
    idx = np.arange(200, dtype=np.uint32)
    e = Entry(7, 1, 1, 0, idx, np.full(200, 0.5, dtype=np.float32))
    pkt = encode_packet(Packet(7, 1, m.fingerprint, (e,), ValueEncoding.F16))
    assert len(pkt) <= limit
    res = relay_node.receive([pkt])
    assert res.accepted_entries == 1 and len(res.relay) == 1
    # REQ: DF-RLY-6 -- applied locally, not split, dropped from the relay and counted
    assert np.all(relay_node.anchor[:200] == np.float32(0.5))
    assert relay_node.pack([], res.relay) == []
    assert relay_node.relay_dropped_oversize == 1


# -------------------------------------------------------------------------------------------------
# DF-SEC-2


def test_origin_and_incarnation_state_is_bounded() -> None:
    assert DEFAULT_MAX_ORIGINS == 4096  # the RECOMMENDED default
    max_origins, max_inc, window = 8, 2, 16
    eng = Engine(
        MANIFEST,
        SyncConfig.v1_0(replay_window=window, max_incarnations=max_inc),
        1,
        1,
        max_origins=max_origins,
    )
    origins = list(range(100, 160))
    sent = 0
    for inc in range(1, 6):
        wire = []
        for o in origins:
            wire.append(_packet(o, [_entry(o, inc, s, 0, [s % N]) for s in range(1, 4)]))
            sent += 3
        eng.receive(wire)
        st_ = eng.state
        # REQ: DF-SEC-2 -- the number of tracked origins and incarnations stays within the bounds
        assert st_.num_origins <= max_origins
        for o in origins:
            assert len(st_.incarnations(o)) <= max_inc
        for _o, _i, win in st_:
            assert win.width == window and len(win.seen()) <= window
    tracked = origins[:max_origins]
    # REQ: DF-SEC-2 -- the first origins are kept (never evicted), every further one is dropped
    assert sorted(o for o in origins if eng.state.incarnations(o)) == tracked
    dropped = eng.counters.drops[Admission.ORIGIN_LIMIT]
    assert dropped == 5 * 3 * (len(origins) - max_origins)
    assert eng.counters.to_json()["drops"]["origin_limit"] == dropped
    # a tracked origin's replayed entries are still recognised (its windows were not forgotten)
    before = eng.anchor.copy()
    replay = eng.receive([_packet(tracked[0], [_entry(tracked[0], 5, 2, 0, [2])])])
    assert replay.entry_outcomes == [[Admission.DUPLICATE]]
    assert eng.anchor.tobytes() == before.tobytes()
    # and a new origin is still refused, however many entries it sends
    late = eng.receive([_packet(999, [_entry(999, 1, s, 0, [0]) for s in range(1, 6)])])
    assert late.entry_outcomes == [[Admission.ORIGIN_LIMIT] * 5]
    assert eng.state.num_origins == max_origins
