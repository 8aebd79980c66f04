"""The transport contract on the in-process hub, the bounded receive queue, and the sans-IO snapshot chunk
codec / verification / server (DF-ZEN-5, DF-ZEN-11, DF-ZEN-12), which the Zenoh binding shares."""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from delta_fabric.snapshot import (
    SnapshotAssembler,
    SnapshotError,
    SnapshotErrorKind,
    SnapshotServer,
    SnapshotSource,
    chunk_count,
    decode_chunk,
    encode_chunk,
    fetch_snapshot_chunks,
    format_chunk_params,
    max_chunk_size,
    parse_chunk_params,
    snapshot_digest,
    trim_blanks,
)
from delta_fabric.transports import (
    MemoryHub,
    MemoryTransport,
    PacketQueue,
    PeerTimeoutError,
    Transport,
    TransportClosedError,
    node_hex,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FP = bytes(range(32))
OTHER_FP = bytes(range(1, 33))


def _source(n: int = 1000, incarnation: int = 7, seed: int = 0) -> SnapshotSource:
    rng = np.random.default_rng(seed)
    return SnapshotSource(incarnation, FP, rng.standard_normal(n).astype(np.float32))


# ---------------------------------------------------------------------------------------------------------
# Packet exchange
# ---------------------------------------------------------------------------------------------------------


def test_memory_transport_satisfies_protocol_and_exchanges_both_ways() -> None:
    hub = MemoryHub()
    a, b = hub.transport(1), hub.transport(2)
    assert isinstance(a, Transport)
    a.publish(b"a1")
    a.publish(b"a2")
    b.publish(b"b1")
    assert b.drain() == [b"a1", b"a2"]  # arrival order
    assert a.drain() == [b"b1"]  # never its own packets
    assert a.drain() == [] and b.drain() == []
    assert a.stats.published_packets == 2 and a.stats.published_bytes == 4
    assert b.stats.received_packets == 2 and b.stats.received_bytes == 4


def test_drain_max_packets_keeps_the_rest_in_order() -> None:
    hub = MemoryHub()
    a, b = hub.transport(1), hub.transport(2)
    for i in range(5):
        a.publish(bytes([i]))
    assert b.drain(2) == [b"\x00", b"\x01"]
    assert b.stats.queued_packets == 3
    assert b.drain(0) == []
    assert b.drain() == [b"\x02", b"\x03", b"\x04"]
    with pytest.raises(ValueError):
        b.drain(-1)


def test_neighbours_restrict_what_a_node_receives() -> None:
    # REQ: DF-ZEN-9
    hub = MemoryHub()
    a, b = hub.transport(1), hub.transport(2)
    c = hub.transport(3, neighbours=[1])
    a.publish(b"from-a")
    b.publish(b"from-b")
    assert c.drain() == [b"from-a"]
    assert b.drain() == [b"from-a"]
    assert a.drain() == [b"from-b"]


def test_queue_overflow_drops_oldest_and_counts() -> None:
    # REQ: DF-ZEN-17
    hub = MemoryHub()
    a, b = hub.transport(1), hub.transport(2, queue_capacity=3)
    for i in range(10):
        a.publish(bytes([i]) * 4)
    st_ = b.stats
    assert st_.received_packets == 10
    assert st_.dropped_packets == 7 and st_.dropped_bytes == 28
    assert b.drain() == [bytes([i]) * 4 for i in (7, 8, 9)]


def test_queue_byte_bound_drops_oldest_but_never_the_only_packet() -> None:
    q = PacketQueue(capacity=100, max_bytes=10)
    q.push(b"x" * 4)
    q.push(b"y" * 4)
    q.push(b"z" * 4)  # 12 > 10: the oldest goes
    assert q.drain() == [b"y" * 4, b"z" * 4]
    q.push(b"big" * 10)  # larger than the bound: kept when alone
    assert q.drain() == [b"big" * 10]
    assert q.dropped_packets == 1 and q.dropped_bytes == 4


def test_queue_push_is_thread_safe() -> None:
    q = PacketQueue(capacity=100_000)

    def producer(k: int) -> None:
        for i in range(2000):
            q.push(struct.pack("<II", k, i))

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    got: list[bytes] = []
    while any(t.is_alive() for t in threads):
        got.extend(q.drain())
    for t in threads:
        t.join()
    got.extend(q.drain())
    assert len(got) == 8000
    for k in range(4):  # per-producer order is kept
        seq = [struct.unpack("<II", p)[1] for p in got if struct.unpack("<II", p)[0] == k]
        assert seq == list(range(2000))


def test_wait_for_packets_wakes_up_on_arrival() -> None:
    hub = MemoryHub()
    a, b = hub.transport(1), hub.transport(2)
    assert not b.wait_for_packets(0.01)
    timer = threading.Timer(0.05, a.publish, args=(b"late",))
    timer.start()
    t0 = time.monotonic()
    assert b.wait_for_packets(5.0)
    assert time.monotonic() - t0 < 2.0
    assert b.drain() == [b"late"]
    timer.join()


# ---------------------------------------------------------------------------------------------------------
# Fault injection
# ---------------------------------------------------------------------------------------------------------


def _run_faulty(
    seed: int, drop_rate: float = 0.0, duplicate_rate: float = 0.0, reorder_rate: float = 0.0
) -> list[bytes]:
    hub = MemoryHub(
        seed=seed, drop_rate=drop_rate, duplicate_rate=duplicate_rate, reorder_rate=reorder_rate
    )
    a, b = hub.transport(1), hub.transport(2)
    for i in range(200):
        a.publish(struct.pack("<I", i))
    return b.drain()


def test_fault_injection_is_deterministic_per_seed() -> None:
    r1 = _run_faulty(3, drop_rate=0.2, duplicate_rate=0.2, reorder_rate=0.2)
    r2 = _run_faulty(3, drop_rate=0.2, duplicate_rate=0.2, reorder_rate=0.2)
    r3 = _run_faulty(4, drop_rate=0.2, duplicate_rate=0.2, reorder_rate=0.2)
    assert r1 == r2
    assert r1 != r3


def test_drop_duplicate_and_reorder_rates() -> None:
    assert _run_faulty(0, drop_rate=1.0) == []
    dup = _run_faulty(0, duplicate_rate=1.0)
    assert dup == [struct.pack("<I", i) for i in range(200) for _ in range(2)]
    reo = [struct.unpack("<I", p)[0] for p in _run_faulty(1, reorder_rate=0.5)]
    assert sorted(reo) == list(range(200))  # nothing lost or duplicated
    assert reo != list(range(200))  # but the order changed
    assert all(abs(v - i) <= 1 for i, v in enumerate(reo))  # adjacent swaps only


def test_held_back_packet_is_released_by_drain() -> None:
    hub = MemoryHub(reorder_rate=1.0)
    a, b = hub.transport(1), hub.transport(2)
    a.publish(b"only")
    assert b.drain() == [b"only"]


def test_intercept_hook_can_rewrite_drop_and_duplicate() -> None:
    seen: list[tuple[int, int]] = []

    def intercept(src: int, dst: int, packet: bytes) -> list[bytes]:
        seen.append((src, dst))
        if packet == b"drop":
            return []
        if packet == b"dup":
            return [packet, packet]
        return [packet.upper()]

    hub = MemoryHub(intercept=intercept)
    a, b = hub.transport(1), hub.transport(2)
    for p in (b"drop", b"dup", b"abc"):
        a.publish(p)
    assert b.drain() == [b"dup", b"dup", b"ABC"]
    assert seen == [(1, 2)] * 3


# ---------------------------------------------------------------------------------------------------------
# Liveliness
# ---------------------------------------------------------------------------------------------------------


def test_peers_appear_and_disappear_on_close() -> None:
    # REQ: DF-ZEN-4
    hub = MemoryHub()
    a = hub.transport(1)
    assert a.peers() == frozenset()
    b = hub.transport(2)
    assert a.peers() == {2} and b.peers() == {1}
    b.close()
    b.close()  # idempotent
    assert a.peers() == frozenset()
    with pytest.raises(TransportClosedError):
        b.publish(b"x")
    with pytest.raises(ValueError):
        hub.transport(1)  # id already live


def test_wait_for_peers_returns_and_times_out_with_the_missing_ids() -> None:
    hub = MemoryHub()
    a = hub.transport(1, neighbours=[2, 3])
    hub.transport(2)
    assert a.wait_for_peers(1, 1.0) == {2}
    threading.Timer(0.05, hub.transport, args=(3,)).start()
    assert a.wait_for_peers(2, 5.0) == {2, 3}
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError) as ei:
        a.wait_for_peers(3, 0.2, expected=[2, 3, 4])
    assert 0.15 <= time.monotonic() - t0 < 2.0
    assert ei.value.missing == {4}
    assert ei.value.present == {2, 3}
    assert ei.value.missing_count == 1
    assert node_hex(4) in str(ei.value)
    assert isinstance(ei.value, TimeoutError)


# ---------------------------------------------------------------------------------------------------------
# Snapshots over the hub
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000, 5000])
def test_chunked_snapshot_fetch_is_bit_exact(chunk_size: int) -> None:
    # REQ: DF-ZEN-5, DF-ZEN-12
    hub = MemoryHub()
    server, joiner = hub.transport(1), hub.transport(2)
    src = _source(1000)
    server.serve_snapshot(lambda: src)
    anchor, incarnation = joiner.fetch_snapshot(1, FP, 10.0, chunk_size=chunk_size, num_params=1000)
    assert incarnation == 7
    assert anchor.dtype == np.float32 and anchor.flags.writeable
    assert anchor.tobytes() == src.anchor.tobytes()


def test_fetch_from_any_peer_skips_peers_without_a_snapshot() -> None:
    hub = MemoryHub()
    hub.transport(1)  # serves nothing
    server = hub.transport(2)
    joiner = hub.transport(3)
    server.serve_snapshot(lambda: _source(50, incarnation=9))
    anchor, incarnation = joiner.fetch_snapshot(None, FP, 5.0, chunk_size=8)
    assert incarnation == 9 and anchor.size == 50


def test_fetch_errors_are_typed() -> None:
    # REQ: DF-ZEN-12
    hub = MemoryHub()
    server, joiner = hub.transport(1), hub.transport(2)
    server.serve_snapshot(lambda: _source(100))
    with pytest.raises(SnapshotError) as ei:
        joiner.fetch_snapshot(1, OTHER_FP, 5.0, attempts=1)
    assert ei.value.kind is SnapshotErrorKind.FINGERPRINT_MISMATCH
    with pytest.raises(SnapshotError) as ei:
        joiner.fetch_snapshot(1, FP, 5.0, num_params=99, attempts=1)
    assert ei.value.kind is SnapshotErrorKind.INCONSISTENT
    with pytest.raises(SnapshotError) as ei:
        joiner.fetch_snapshot(1, FP, 5.0, chunk_size=max_chunk_size() + 1, attempts=1)
    assert ei.value.kind is SnapshotErrorKind.SERVER_ERROR
    lonely = MemoryHub().transport(5)
    with pytest.raises(SnapshotError) as ei:
        lonely.fetch_snapshot(None, FP, 1.0, attempts=1)
    assert ei.value.kind is SnapshotErrorKind.NO_SERVER


def _corrupt_value(buf: bytes) -> bytes:
    chunk = decode_chunk(buf)
    pos = len(buf) - 4 * chunk.values.size  # values are the last vector of the buffer
    assert np.frombuffer(buf, "<f4", chunk.values.size, pos).tobytes() == chunk.values.tobytes()
    out = bytearray(buf)
    out[pos] ^= 0x01
    return bytes(out)


def test_corrupted_chunk_is_rejected_by_the_digest() -> None:
    # REQ: DF-ZEN-12
    hub = MemoryHub(
        snapshot_hook=lambda server, chunk, buf: _corrupt_value(buf) if chunk == 1 else buf
    )
    server, joiner = hub.transport(1), hub.transport(2)
    server.serve_snapshot(lambda: _source(100))
    with pytest.raises(SnapshotError) as ei:
        joiner.fetch_snapshot(1, FP, 5.0, chunk_size=30, attempts=2)
    assert ei.value.kind is SnapshotErrorKind.DIGEST_MISMATCH


def test_non_finite_snapshot_values_are_rejected() -> None:
    # REQ: DF-ZEN-12 -- a joiner refuses a chunk holding a NaN (a server that is not conforming: one
    # value of a served chunk patched to a NaN, which row 7 finds before the digest of row 9)
    values = np.arange(1, 11, dtype=np.float32)
    buf = bytearray(encode_chunk(SnapshotSource(3, FP, values), 1, 7, 0, 10))
    at = bytes(buf).index(np.float32(5.0).tobytes())
    buf[at : at + 4] = np.float32(np.nan).tobytes()
    assembler = SnapshotAssembler(FP, 10, expected_node=1)
    with pytest.raises(SnapshotError) as ei:
        assembler.add(0, decode_chunk(bytes(buf)))
    assert ei.value.kind is SnapshotErrorKind.NON_FINITE
    # REQ: DF-ZEN-43 -- a conforming server never serves it: the joiner gets the error reply
    values[4] = np.nan
    hub = MemoryHub()
    server, joiner = hub.transport(1), hub.transport(2)
    server.serve_snapshot(lambda: SnapshotSource(3, FP, values))
    with pytest.raises(SnapshotError) as ei:
        joiner.fetch_snapshot(1, FP, 5.0, attempts=1)
    assert ei.value.kind is SnapshotErrorKind.SERVER_ERROR
    assert "value 4 is not finite" in str(ei.value)


def test_joiner_restarts_when_the_server_switches_snapshots() -> None:
    captures: list[int] = []

    def provider() -> SnapshotSource:
        captures.append(1)
        return _source(100, seed=len(captures))

    srv = SnapshotServer(1, provider, reuse_s=0.0)
    calls = {"n": 0}

    def request(chunk: int, size: int, _left: float) -> bytes:
        calls["n"] += 1
        if calls["n"] == 2:  # another joiner asks for chunk 0 in between: a new capture
            srv.answer({"chunk": "0", "chunk_size": str(size)})
        return srv.answer({"chunk": str(chunk), "chunk_size": str(size)})

    anchor, first = fetch_snapshot_chunks(request, FP, 5.0, chunk_size=40)
    assert len(captures) == 3
    assert anchor.tobytes() == _source(100, seed=3).anchor.tobytes()
    assert first.snapshot_id == 3


def test_engine_joins_from_a_fetched_snapshot() -> None:
    # REQ: DF-ZEN-13
    manifest = Manifest.from_named_shapes({"fc.weight": (8, 4), "fc.bias": (8,)})
    cfg = SyncConfig.v1_0(ratio=0.25, sync_interval=1)
    rng = np.random.default_rng(1)
    eng_a = Engine(
        manifest,
        cfg,
        1,
        100,
        rng.standard_normal(manifest.num_params).astype(np.float32),
    )
    hub = MemoryHub()
    ta, tb = hub.transport(1), hub.transport(2)

    def provide() -> SnapshotSource:
        snap = eng_a.snapshot()
        return SnapshotSource(eng_a.incarnation, snap.fingerprint, snap.anchor, framework="numpy")

    ta.serve_snapshot(provide)
    anchor, inc = tb.fetch_snapshot(
        1, manifest.fingerprint, 5.0, num_params=manifest.num_params, chunk_size=7
    )
    assert inc == 100
    eng_b = Engine(manifest, cfg, 2, 200, anchor)
    np.testing.assert_array_equal(eng_b.anchor, eng_a.anchor)
    # then deltas flow through the hub and are applied
    active_a = eng_a.anchor.copy()
    active_a[3] += 1.0
    _, out = eng_a.step(active_a, [], sync=True)
    for p in out:
        ta.publish(p)
    active_b = anchor.copy()
    res, _ = eng_b.step(active_b, tb.drain(), sync=False)
    assert res.indices.tolist() == [3]
    assert active_b[3] == active_a[3]


# ---------------------------------------------------------------------------------------------------------
# Snapshot codec, hostile input
# ---------------------------------------------------------------------------------------------------------


def test_spec_example_chunks_and_out_of_range_error() -> None:
    # REQ: DF-ZEN-5, DF-ZEN-11
    values = np.array(
        [0, 0, 1, 0.5, 0.1, -0.2, 0.5, 0.25, 0.75, -1, -0.875, 0.25], dtype=np.float32
    )
    src = SnapshotSource(5, FP, values)
    srv = SnapshotServer(10, lambda: src)
    digest = snapshot_digest(values)
    assert digest == __import__("hashlib").sha256(values.astype("<f4").tobytes()).digest()
    assert chunk_count(12, 5) == 3
    chunks = [decode_chunk(srv.answer(format_chunk_params(i, 5))) for i in range(3)]
    assert [c.offset for c in chunks] == [0, 5, 10]
    assert [c.values.size for c in chunks] == [5, 5, 2]
    assert len({c.snapshot_id for c in chunks}) == 1 and chunks[0].snapshot_id != 0
    for c in chunks:
        assert (c.total, c.digest, c.node, c.incarnation, c.fingerprint) == (
            12,
            digest,
            10,
            5,
            FP,
        )
        assert (c.version_major, c.version_minor) == (1, 1)
    with pytest.raises(SnapshotError) as ei:
        srv.answer("chunk=3&chunk_size=5")
    assert ei.value.kind is SnapshotErrorKind.BAD_REQUEST


def test_chunk_parameters_accept_both_separators_and_reject_garbage() -> None:
    # REQ: DF-ZEN-5
    assert parse_chunk_params("chunk=2&chunk_size=100") == (2, 100)
    assert parse_chunk_params("chunk=2;chunk_size=100") == (2, 100)
    assert parse_chunk_params("_anyke;chunk=0;chunk_size=1") == (0, 1)
    assert parse_chunk_params({"chunk": "1", "chunk_size": "3"}) == (1, 3)
    limit = max_chunk_size(16_777_216)
    assert 4 * limit + 1024 <= 16_777_216 < 4 * (limit + 1) + 1024
    for bad in (
        "",
        "chunk=1",
        "chunk_size=4",
        "chunk=-1&chunk_size=4",
        "chunk=x&chunk_size=4",
        "chunk=1&chunk_size=0",
        f"chunk=0&chunk_size={limit + 1}",
        "chunk=1&chunk_size=" + "9" * 30,
        "chunk=\u0661&chunk_size=4",  # a non-ASCII digit,
    ):
        with pytest.raises(SnapshotError) as ei:
            parse_chunk_params(bad)
        assert ei.value.kind is SnapshotErrorKind.BAD_REQUEST, bad
    assert parse_chunk_params("chunk=0&chunk_size=2000", max_packet_size=9024) == (
        0,
        2000,
    )
    with pytest.raises(SnapshotError):
        parse_chunk_params("chunk=0&chunk_size=2001", max_packet_size=9024)


def test_chunk_parameters_are_read_by_the_rules_of_df_zen_42() -> None:
    # REQ: DF-ZEN-42
    ok = {
        "chunk=1;chunk_size=5&x": (1, 5),  # rule 1: separators in any mix
        "&chunk=1&&chunk_size=5;": (1, 5),  # rule 1: empty pieces skipped
        "=1&chunk=1&chunk_size=5": (1, 5),  # rule 2: an empty key is unknown
        " \tchunk\t = 01 \t&chunk_size= 5": (1, 5),  # rule 3: spaces and tabs; rule 4: zeros
        "chunk=00000000000000000001&chunk_size=5": (1, 5),  # rule 4: 20 digits
        "chunk=1&chunk=x&chunk_size=5&chunk_size=4": (1, 5),  # rule 5: the first counts
        "chunk=1& chunk =2&chunk_size=5": (1, 5),  # rule 5: the same key once trimmed
    }
    for query, want in ok.items():
        assert parse_chunk_params(query) == want, query
    for bad in (
        "chunk=x&chunk=1&chunk_size=5",  # rule 5: the first is not an integer
        "chunk=1=1&chunk_size=5",  # rule 2: '=' in the value
        "Chunk=1&chunk_size=5",  # rule 3: keys compare exactly
        "chunk=\u00a01&chunk_size=5",  # rule 3: a no-break space is not removed
        "chunk=1\n&chunk_size=5",  # rule 3: nor a line feed
        "chunk=1&chunk_size=\x0b5",  # nor a vertical tab
        "chunk=+1&chunk_size=5",  # rule 4: no sign
        "chunk=-0&chunk_size=5",
        "chunk=000000000000000000001&chunk_size=5",  # rule 4: 21 digits
        "chunk=\uff11&chunk_size=5",  # rule 4: a fullwidth digit
    ):
        with pytest.raises(SnapshotError) as ei:
            parse_chunk_params(bad)
        assert ei.value.kind is SnapshotErrorKind.BAD_REQUEST, repr(bad)
    assert trim_blanks(" \t x \t ") == "x"
    assert trim_blanks("\u00a0x\n") == "\u00a0x\n"


def test_a_snapshot_holding_a_non_finite_value_is_never_served() -> None:
    # REQ: DF-ZEN-43
    for bad_at, bad in ((11, np.inf), (0, np.nan), (6, -np.inf)):
        anchor = np.arange(12, dtype=np.float32)
        anchor[bad_at] = bad
        src = SnapshotSource(1, b"\x01" * 32, anchor)
        assert src.non_finite_at == bad_at
        srv = SnapshotServer(3, lambda src=src: src)  # type: ignore[misc]
        for query in ("chunk=0&chunk_size=5", "chunk=2&chunk_size=5", "chunk=0&chunk_size=12"):
            with pytest.raises(SnapshotError) as ei:
                srv.answer(query)
            assert ei.value.kind is SnapshotErrorKind.NON_FINITE, query
            assert f"value {bad_at} is not finite" in ei.value.detail
        # a query that DF-ZEN-5 refuses anyway is refused as before
        with pytest.raises(SnapshotError) as ei:
            srv.answer("chunk=3&chunk_size=5")
        assert ei.value.kind is SnapshotErrorKind.BAD_REQUEST
    assert SnapshotSource(1, b"\x01" * 32, np.zeros(3, np.float32)).non_finite_at is None


def test_server_reuses_a_recent_capture_for_chunk_zero() -> None:
    # REQ: DF-ZEN-11
    n = {"captures": 0}

    def provider() -> SnapshotSource:
        n["captures"] += 1
        return _source(20, seed=n["captures"])

    srv = SnapshotServer(1, provider)  # reuse_s = 10
    ids = {decode_chunk(srv.answer("chunk=0&chunk_size=5")).snapshot_id for _ in range(3)}
    assert ids == {1} and n["captures"] == 1
    srv2 = SnapshotServer(1, provider, reuse_s=0.0)
    ids2 = [decode_chunk(srv2.answer("chunk=0&chunk_size=5")).snapshot_id for _ in range(3)]
    assert ids2 == [1, 2, 3]
    assert (
        decode_chunk(srv2.answer("chunk=1&chunk_size=5")).snapshot_id == 3
    )  # later chunks: latest


def test_info_object_matches_spec_members() -> None:
    # REQ: DF-ZEN-6
    srv = SnapshotServer(
        10,
        lambda: SnapshotSource(0x00066169085C7000, FP, np.zeros(12, np.float32), "pytorch"),
    )
    assert srv.info() == {
        "node": "000000000000000a",
        "incarnation": "00066169085c7000",
        "fingerprint": FP.hex(),
        "framework": "pytorch",
        "N": 12,
        "supports": {
            "encodings": ["F32", "F16", "BF16", "Q8"],
            "index_encodings": ["PLAIN", "PACKED"],
        },  # DF-ZEN-231
    }


def test_snapshot_source_is_a_frozen_copy() -> None:
    a = np.arange(10, dtype=np.float32)
    src = SnapshotSource(1, FP, a)
    a[0] = 99.0
    assert src.anchor[0] == 0.0
    assert not src.anchor.flags.writeable
    with pytest.raises(ValueError):
        SnapshotSource(0, FP, a)
    with pytest.raises(ValueError):
        SnapshotSource(1, FP[:31], a)
    with pytest.raises(ValueError):
        SnapshotSource(1, FP, np.zeros(0, np.float32))


def test_assembler_checks_offsets_lengths_and_consistency() -> None:
    src = _source(100)
    c0 = decode_chunk(encode_chunk(src, 1, 5, 0, 30))
    c1 = decode_chunk(encode_chunk(src, 1, 5, 1, 30))
    asm = SnapshotAssembler(FP, 30)
    with pytest.raises(SnapshotError) as ei:
        asm.add(1, c0)  # chunk 0 presented as chunk 1
    assert ei.value.kind is SnapshotErrorKind.BAD_OFFSET
    asm.add(0, c0)
    other = decode_chunk(encode_chunk(src, 1, 6, 1, 30))
    with pytest.raises(SnapshotError) as ei:
        asm.add(1, other)
    assert ei.value.kind is SnapshotErrorKind.INCONSISTENT
    asm.add(1, c1)
    with pytest.raises(SnapshotError) as ei:
        asm.add(9, c1)
    assert ei.value.kind is SnapshotErrorKind.BAD_OFFSET
    assert asm.missing == [2, 3]
    with pytest.raises(SnapshotError):
        asm.finish()
    short = decode_chunk(encode_chunk(src, 1, 5, 3, 25))  # 25 values where 10 are expected
    with pytest.raises(SnapshotError) as ei:
        asm.add(3, short)
    assert ei.value.kind is SnapshotErrorKind.BAD_OFFSET
    asm.add(2, decode_chunk(encode_chunk(src, 1, 5, 2, 30)))
    asm.add(3, decode_chunk(encode_chunk(src, 1, 5, 3, 30)))
    anchor, first = asm.finish()
    assert anchor.tobytes() == src.anchor.tobytes() and first.snapshot_id == 5


def test_decode_rejects_identifier_version_and_bad_sizes() -> None:
    buf = encode_chunk(_source(10), 1, 1, 0, 10)
    assert decode_chunk(buf).values.size == 10
    with pytest.raises(SnapshotError) as ei:
        decode_chunk(buf[:7])
    assert ei.value.kind is SnapshotErrorKind.BAD_IDENTIFIER
    with pytest.raises(SnapshotError) as ei:
        decode_chunk(buf[:4] + b"DFP1" + buf[8:])
    assert ei.value.kind is SnapshotErrorKind.BAD_IDENTIFIER
    with pytest.raises(SnapshotError) as ei:
        decode_chunk(buf[: len(buf) // 2])
    assert ei.value.kind is SnapshotErrorKind.MALFORMED


def _mutations() -> st.SearchStrategy[tuple[int, int]]:
    return st.tuples(
        st.integers(min_value=0, max_value=10_000),
        st.integers(min_value=0, max_value=255),
    )


@settings(max_examples=300)
@given(
    n=st.integers(min_value=1, max_value=40),
    chunk_size=st.integers(min_value=1, max_value=40),
    muts=st.lists(_mutations(), min_size=1, max_size=6),
    cut=st.integers(min_value=0, max_value=10_000),
)
def test_decode_chunk_never_raises_anything_but_snapshot_error(
    n: int, chunk_size: int, muts: list[tuple[int, int]], cut: int
) -> None:
    src = _source(n)
    buf = bytearray(encode_chunk(src, 3, 4, 0, chunk_size))
    for pos, val in muts:
        buf[pos % len(buf)] = val
    for candidate in (bytes(buf), bytes(buf[: cut % (len(buf) + 1)])):
        try:
            c = decode_chunk(candidate)
        except SnapshotError:
            continue
        # whatever decoded is internally consistent
        assert c.offset + c.values.size <= c.total
        assert len(c.fingerprint) == 32 and len(c.digest) == 32
        assert c.node and c.incarnation and c.snapshot_id


@settings(max_examples=100)
@given(st.binary(max_size=300))
def test_decode_chunk_on_random_bytes(data: bytes) -> None:
    for candidate in (data, b"\x10\x00\x00\x00DFS1" + data):
        try:
            decode_chunk(candidate)
        except SnapshotError:
            pass


@settings(max_examples=60)
@given(
    values=st.lists(
        st.floats(width=32, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=60,
    ),
    chunk_size=st.integers(min_value=1, max_value=70),
)
def test_chunk_roundtrip_property(values: list[float], chunk_size: int) -> None:
    # REQ: DF-ZEN-11
    src = SnapshotSource(11, FP, np.array(values, dtype=np.float32))
    asm = SnapshotAssembler(FP, chunk_size, expected_total=len(values))
    for i in range(chunk_count(len(values), chunk_size)):
        asm.add(i, decode_chunk(encode_chunk(src, 2, 1, i, chunk_size)))
    anchor, _ = asm.finish()
    assert anchor.tobytes() == src.anchor.tobytes()


def test_closed_memory_transport_rejects_use() -> None:
    hub = MemoryHub()
    t: MemoryTransport = hub.transport(1)
    t.close()
    assert t.peers() == frozenset()
    with pytest.raises(TransportClosedError):
        t.serve_snapshot(lambda: _source())
    with pytest.raises(TransportClosedError):
        t.fetch_snapshot(None, FP, 1.0)
    with pytest.raises(TransportClosedError):
        t.wait_for_peers(1, 0.1)


def test_a_young_capture_is_reused_only_while_the_versioned_state_is_unchanged() -> None:
    """A node restarted within the server's reuse window once installed the capture of its first
    join (all zeros) although the anchor had moved since: a `VersionedProvider` capture is reused
    only while its version holds."""
    from delta_fabric.snapshot import SnapshotServer, SnapshotSource, VersionedProvider

    state = {"version": 0, "value": 0.0, "captures": 0}

    class Provider:
        def __call__(self) -> SnapshotSource:
            state["captures"] += 1
            return SnapshotSource(1, b"\x01" * 32, np.full(4, state["value"], np.float32))

        def version(self) -> int:
            return int(state["version"])

    assert isinstance(Provider(), VersionedProvider)
    srv = SnapshotServer(7, Provider(), reuse_s=10.0)
    first, src = srv.current(fresh=True)
    again, _ = srv.current(fresh=True)  # unchanged: the same capture (concurrent joiners)
    assert again == first and state["captures"] == 1
    state["version"], state["value"] = 1, 2.5
    newer, src = srv.current(fresh=True)  # changed within reuse_s: a new capture
    assert newer != first and state["captures"] == 2
    assert float(np.asarray(src.anchor)[0]) == 2.5
    later, _ = srv.current(fresh=False)  # later chunks keep the capture they started from
    assert later == newer and state["captures"] == 2
