"""The Zenoh binding over real Zenoh sessions on loopback (DF-ZEN).

Every node: multicast and gossip scouting off, listening on tcp/127.0.0.1 with a free port, explicit
connect endpoints. Every wait is bounded by an explicit timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from pathlib import Path

import numpy as np
import pytest

zenoh = pytest.importorskip("zenoh")

from delta_fabric.config import SyncConfig  # noqa: E402
from delta_fabric.engine import Engine  # noqa: E402
from delta_fabric.errors import ErrorCode  # noqa: E402
from delta_fabric.manifest import Manifest  # noqa: E402
from delta_fabric.ports import free_port  # noqa: E402
from delta_fabric.snapshot import (  # noqa: E402
    SnapshotError,
    SnapshotErrorKind,
    SnapshotSource,
    decode_chunk,
    encode_chunk,
)
from delta_fabric.transports import (  # noqa: E402
    PeerTimeoutError,
    Transport,
    TransportClosedError,
)
from delta_fabric.transports.zenoh import (  # noqa: E402
    PACKET_SCHEMA,
    ZENOH_MESSAGE_MARGIN,
    ZenohOptions,
    ZenohTransport,
    alive_key,
    delta_key,
    info_key,
    snapshot_key,
)

FP = bytes(range(32))
NS = "dftest/zenoh"
WAIT = 10.0  # generous bound for anything that should take milliseconds


#: Payloads through the transport carry the packet identifier at bytes 4..8, else the pre-queue
#: screen (DF-ZEN-154) refuses them before the queue.
P = b"\0\0\0\0DFP1"


def ep(port: int) -> str:
    return f"tcp/127.0.0.1:{port}"


def port_is_open(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def raw_config(listen: list[str], connect: list[str]) -> zenoh.Config:
    c = zenoh.Config()
    c.insert_json5("mode", '"peer"')
    c.insert_json5("listen/endpoints", json.dumps(listen))
    c.insert_json5("connect/endpoints", json.dumps(connect))
    c.insert_json5("scouting/multicast/enabled", "false")
    c.insert_json5("scouting/gossip/enabled", "false")
    return c


def wait_until(pred: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def recv(t: ZenohTransport, count: int, timeout: float = WAIT) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        t.wait_for_packets(min(0.2, max(0.0, deadline - time.monotonic())))
        got.extend(t.drain())
    return got


class Cluster:
    """Full mesh of transports on loopback: node i listens on its own port and connects to all before."""

    def __init__(self) -> None:
        self.stack = ExitStack()
        self.ports: list[int] = []

    def add(self, node_id: int, **kw: object) -> ZenohTransport:
        port = free_port()
        opts = ZenohOptions(
            node_id=node_id,
            namespace=NS,
            listen=[ep(port)],
            connect=[ep(p) for p in self.ports],
            **kw,  # type: ignore[arg-type]
        )
        self.ports.append(port)
        return self.stack.enter_context(ZenohTransport(opts))

    def close(self) -> None:
        self.stack.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.close()


def _connected(*ts: ZenohTransport) -> None:
    for t in ts:
        t.wait_for_peers(len(ts) - 1, WAIT)
    # liveliness may arrive before the subscriber declarations have propagated: give them a moment by
    # probing with a throw-away put until it is seen everywhere.
    _settle(ts)


def _settle(ts: tuple[ZenohTransport, ...]) -> None:
    deadline = time.monotonic() + WAIT
    for t in ts:
        others = [
            o for o in ts if o is not t and (o.neighbours is None or t.node_id in o.neighbours)
        ]
        while others and time.monotonic() < deadline:
            t.publish(b"probe")
            time.sleep(0.02)
            if all(any(p == b"probe" for p in o.drain()) for o in others):
                break
    for t in ts:
        t.drain()


# ---------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------


def test_default_options_disable_scouting_and_listen_nowhere() -> None:
    # REQ: DF-ZEN-15
    c = ZenohOptions(node_id=1).build_config()
    assert json.loads(c.get_json("scouting/multicast/enabled")) is False
    assert json.loads(c.get_json("scouting/gossip/enabled")) is False
    assert json.loads(c.get_json("listen/endpoints")) == []
    assert json.loads(c.get_json("connect/endpoints")) == []
    lan = ZenohOptions.lan_default(1).build_config()
    assert json.loads(lan.get_json("scouting/multicast/enabled")) is True


def test_options_validate_namespace_mode_and_ids() -> None:
    # REQ: DF-ZEN-7, DF-ZEN-8
    for ns in ("", "/a", "a/", "a//b", "a/*", "a/$x", "a?b", "a#b"):
        with pytest.raises(ValueError):
            ZenohOptions(node_id=1, namespace=ns)
    with pytest.raises(ValueError):
        ZenohOptions(node_id=0)
    with pytest.raises(ValueError):
        ZenohOptions(node_id=1 << 64)
    with pytest.raises(ValueError):
        ZenohOptions(node_id=1, mode="router")
    assert delta_key("deltafabric/default", 10) == "deltafabric/default/v1/delta/000000000000000a"
    assert alive_key("lab42/run7", 10) == "lab42/run7/v1/alive/000000000000000a"
    assert snapshot_key("n", 0xFFFFFFFFFFFFFFFF) == "n/v1/snapshot/ffffffffffffffff"
    assert info_key("n", 1) == "n/v1/info/0000000000000001"


def test_config_file_is_used_as_is(tmp_path: Path) -> None:
    # REQ: DF-ZEN-14
    file_port = free_port()
    # The ignored port stays reserved for the whole test: bound (so no other test or process can take
    # it, which made "nothing listens there" fail by chance) but never listening (so a connection to it
    # is refused; a session that tried to listen there too would fail to open).
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as hold:
        hold.bind(("127.0.0.1", 0))
        ignored_port = hold.getsockname()[1]
        _config_file_is_used_as_is(tmp_path, file_port, ignored_port)


def _config_file_is_used_as_is(tmp_path: Path, file_port: int, ignored_port: int) -> None:
    cfg = tmp_path / "zenoh.json5"
    cfg.write_text(
        textwrap.dedent(
            f"""\
            // DeltaFabric test node, JSON5 with comments and trailing commas
            {{
              mode: "peer",
              listen: {{ endpoints: ["tcp/127.0.0.1:{file_port}"], }},
              connect: {{ endpoints: [] }},
              scouting: {{ multicast: {{ enabled: false }}, gossip: {{ enabled: false }} }},
            }}
            """
        )
    )
    opts = ZenohOptions(node_id=1, namespace=NS, config_file=cfg, listen=[ep(ignored_port)])
    assert json.loads(opts.build_config().get_json("listen/endpoints")) == [ep(file_port)]
    with ZenohTransport(opts) as a:
        assert port_is_open(file_port)
        assert not port_is_open(ignored_port)
        other = ZenohOptions(
            node_id=2, namespace=NS, listen=[ep(free_port())], connect=[ep(file_port)]
        )
        with ZenohTransport(other) as b:
            _connected(a, b)
            b.publish(P + b"through the file's listener")
            assert recv(a, 1) == [P + b"through the file's listener"]


# ---------------------------------------------------------------------------------------------------------
# Packets
# ---------------------------------------------------------------------------------------------------------


def test_two_transports_exchange_packets_both_ways(cluster: Cluster) -> None:
    # REQ: DF-ZEN-1, DF-ZEN-9
    a, b = cluster.add(1), cluster.add(2)
    assert isinstance(a, Transport)
    _connected(a, b)
    for i in range(20):
        a.publish(P + b"a%d" % i)
        b.publish(P + b"b%d" % i)
    assert recv(b, 20) == [P + b"a%d" % i for i in range(20)]  # in order, none of its own
    assert recv(a, 20) == [P + b"b%d" % i for i in range(20)]
    assert a.drain() == [] and b.drain() == []
    assert a.stats.published_packets >= 20 and b.stats.received_packets >= 20


def test_four_megabyte_packet_arrives_intact(cluster: Cluster) -> None:
    # REQ: DF-ZEN-3
    a, b = cluster.add(1), cluster.add(2)
    _connected(a, b)
    big = P + np.random.default_rng(0).bytes(4 * 1024 * 1024)
    for _ in range(3):
        a.publish(big)
    got = recv(b, 3, timeout=30.0)
    assert len(got) == 3 and all(g == big for g in got)


def test_publication_carries_encoding_schema_and_qos(cluster: Cluster) -> None:
    # REQ: DF-ZEN-2, DF-ZEN-3
    a = cluster.add(1)
    samples: list[zenoh.Sample] = []
    session = zenoh.open(raw_config([ep(free_port())], [ep(cluster.ports[0])]))
    try:
        sub = session.declare_subscriber(f"{NS}/v1/delta/*", samples.append)

        def publish_and_check() -> bool:
            a.publish(b"x")
            return bool(samples)

        assert wait_until(publish_and_check)
        s = samples[0]
        assert str(s.key_expr) == delta_key(NS, 1)
        assert str(s.encoding) == f"application/octet-stream;{PACKET_SCHEMA}"
        assert s.congestion_control == zenoh.CongestionControl.BLOCK
        assert s.priority == zenoh.Priority.DATA
        assert s.payload.to_bytes() == b"x"
        sub.undeclare()
    finally:
        session.close()


def test_neighbours_restrict_subscriptions(cluster: Cluster) -> None:
    # REQ: DF-ZEN-9
    a, b = cluster.add(1), cluster.add(2)
    c = cluster.add(3, neighbours=[1])
    _connected(a, b, c)
    b.publish(P + b"from-b")
    a.publish(P + b"from-a")
    assert recv(c, 1) == [P + b"from-a"]
    assert sorted(recv(b, 1) + recv(a, 1)) == [P + b"from-a", P + b"from-b"]
    time.sleep(0.2)
    assert c.drain() == []


def test_receive_queue_overflow_drops_oldest(cluster: Cluster) -> None:
    # REQ: DF-ZEN-17
    a, b = cluster.add(1), cluster.add(2, queue_capacity=4)
    _connected(a, b)
    for i in range(20):
        a.publish(P + bytes([i]))
    assert wait_until(lambda: b.stats.received_packets >= 20)
    assert b.stats.dropped_packets == 16 == b.stats.packets_dropped
    assert b.drain() == [P + bytes([i]) for i in range(16, 20)]


def test_engines_sync_over_zenoh(cluster: Cluster) -> None:
    # REQ: DF-ZEN-1
    manifest = Manifest.from_named_shapes({"w": (64,)})
    cfg = SyncConfig.v1_0(ratio=0.25, sync_interval=1)
    init = np.zeros(64, dtype=np.float32)
    ta, tb = cluster.add(1), cluster.add(2)
    _connected(ta, tb)
    ea, eb = Engine(manifest, cfg, 1, 11, init), Engine(manifest, cfg, 2, 22, init)
    wa, wb = init.copy(), init.copy()
    wa[:8] += np.arange(1, 9, dtype=np.float32)
    _, out = ea.step(wa, ta.drain(), sync=True)
    assert len(out) == 1
    ta.publish(out[0])
    got = recv(tb, 1)
    res, _ = eb.step(wb, got, sync=False)
    assert res.outcomes == [None] and res.accepted_entries == 1
    np.testing.assert_array_equal(wb, wa)


def test_receiver_ignores_encoding_key_and_attachment(cluster: Cluster) -> None:
    # REQ: DF-ZEN-10
    manifest = Manifest.from_named_shapes({"w": (8,)})
    cfg = SyncConfig.v1_0(ratio=1.0, sync_interval=1)
    receiver = cluster.add(2)
    sender_engine = Engine(manifest, cfg, 0x77, 1, np.zeros(8, np.float32))
    active = np.zeros(8, np.float32)
    active[5] = 2.5
    _, out = sender_engine.step(active, [], sync=True)
    session = zenoh.open(raw_config([ep(free_port())], [ep(cluster.ports[0])]))
    try:
        # published on another node's key, no encoding, with an attachment: still a packet
        key = delta_key(NS, 0x1234)
        pub = session.declare_publisher(key, congestion_control=zenoh.CongestionControl.BLOCK)

        def publish_and_check() -> bool:
            pub.put(out[0], attachment=b"ignored")
            return receiver.wait_for_packets(0.05)

        assert wait_until(publish_and_check)
        got = receiver.drain()
        assert got and all(p == out[0] for p in got)
        eng = Engine(manifest, cfg, 2, 1, np.zeros(8, np.float32))
        res = eng.receive(got[:1])
        assert res.outcomes == [None] and res.indices.tolist() == [5]
        pub.undeclare()
    finally:
        session.close()


def test_node_starts_and_publishes_with_no_peer_reachable() -> None:
    # REQ: DF-ZEN-16
    port_a, port_b = free_port(), free_port()
    t0 = time.monotonic()
    a = ZenohTransport(
        ZenohOptions(node_id=1, namespace=NS, listen=[ep(port_a)], connect=[ep(port_b)])
    )
    try:
        assert time.monotonic() - t0 < 5.0
        t0 = time.monotonic()
        for _ in range(10):
            a.publish(b"nobody listens" * 1000)
        assert time.monotonic() - t0 < 1.0
        assert a.peers() == frozenset()
        # the peer that comes up later is connected to by Zenoh's connect retry
        with ZenohTransport(ZenohOptions(node_id=2, namespace=NS, listen=[ep(port_b)])) as b:
            assert a.wait_for_peers(1, 15.0) == {2}
            _connected(a, b)
            a.publish(P + b"late")
            assert recv(b, 1) == [P + b"late"]
    finally:
        a.close()


# ---------------------------------------------------------------------------------------------------------
# Liveliness
# ---------------------------------------------------------------------------------------------------------


def test_peer_appears_then_disappears_when_its_session_closes(cluster: Cluster) -> None:
    # REQ: DF-ZEN-4
    a = cluster.add(1)
    assert a.peers() == frozenset()
    b = ZenohTransport(
        ZenohOptions(
            node_id=2,
            namespace=NS,
            listen=[ep(free_port())],
            connect=[ep(cluster.ports[0])],
        )
    )
    try:
        assert a.wait_for_peers(1, WAIT) == {2}
        assert b.wait_for_peers(1, WAIT) == {1}
    finally:
        b.close()
    assert wait_until(lambda: a.peers() == frozenset(), 5.0)
    with pytest.raises(TransportClosedError):
        b.publish(b"x")


def test_other_namespace_is_invisible(cluster: Cluster) -> None:
    a = cluster.add(1)
    other = ZenohOptions(
        node_id=2,
        namespace="dftest/other",
        listen=[ep(free_port())],
        connect=[ep(cluster.ports[0])],
    )
    with ZenohTransport(other) as b:
        with pytest.raises(PeerTimeoutError):
            a.wait_for_peers(1, 0.5)
        b.publish(b"elsewhere")
        time.sleep(0.2)
        assert a.drain() == []


def test_wait_for_peers_returns_and_times_out(cluster: Cluster) -> None:
    a = cluster.add(1, neighbours=[2, 3])
    threading.Timer(0.2, lambda: cluster.add(2)).start()
    t0 = time.monotonic()
    assert a.wait_for_peers(1, WAIT) == {2}
    assert time.monotonic() - t0 < WAIT
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError) as ei:
        a.wait_for_peers(2, 0.3)
    elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 3.0
    assert ei.value.missing == {3}  # the configured neighbour that is absent
    assert ei.value.present == {2}
    assert "0000000000000003" in str(ei.value)
    with pytest.raises(PeerTimeoutError) as ei:
        a.wait_for_peers(1, 0.1, expected=[2, 9])
    assert ei.value.missing == {9}


CHILD = textwrap.dedent(
    """
    import sys, time
    from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport
    t = ZenohTransport(ZenohOptions(node_id=int(sys.argv[1]), namespace=sys.argv[2],
                                    listen=[sys.argv[3]], connect=[sys.argv[4]]))
    t.wait_for_peers(1, 20.0)
    print("ready", flush=True)
    time.sleep(120)
    """
)


def test_liveliness_token_goes_away_when_the_process_is_killed(
    cluster: Cluster,
) -> None:
    # REQ: DF-ZEN-4
    a = cluster.add(1)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, "77", NS, ep(free_port()), ep(cluster.ports[0])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert a.wait_for_peers(1, 20.0) == {77}
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert wait_until(lambda: 77 not in a.peers(), 15.0), "token of the killed node still alive"
        gone_after = time.monotonic() - t0
        assert gone_after < 15.0
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()


# ---------------------------------------------------------------------------------------------------------
# Snapshots and info
# ---------------------------------------------------------------------------------------------------------


def test_chunked_snapshot_fetch_with_digest_verification(cluster: Cluster) -> None:
    # REQ: DF-ZEN-5, DF-ZEN-11, DF-ZEN-12
    server, joiner = cluster.add(1), cluster.add(2)
    _connected(server, joiner)
    values = np.random.default_rng(3).standard_normal(100_003).astype(np.float32)
    captures = []

    def provider() -> SnapshotSource:
        captures.append(1)
        return SnapshotSource(0x1234, FP, values, framework="numpy")

    server.serve_snapshot(provider)
    anchor, inc = joiner.fetch_snapshot(1, FP, WAIT, chunk_size=8192, num_params=values.size)
    assert inc == 0x1234 and anchor.tobytes() == values.tobytes()
    assert len(captures) == 1  # 13 chunks from one capture
    anchor2, _ = joiner.fetch_snapshot(None, FP, WAIT)  # any server, default chunk size
    assert anchor2.tobytes() == values.tobytes()


def test_info_queryable_returns_json(cluster: Cluster) -> None:
    # REQ: DF-ZEN-6
    server, joiner = cluster.add(10), cluster.add(2)
    _connected(server, joiner)
    server.serve_snapshot(
        lambda: SnapshotSource(0x00066169085C7000, FP, np.zeros(12, np.float32), "pytorch")
    )
    info = joiner.info(10, timeout=WAIT)
    assert info == {
        10: {
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
    }


def test_snapshot_queryable_answers_both_separators_and_errors(
    cluster: Cluster,
) -> None:
    # REQ: DF-ZEN-5
    server = cluster.add(10)
    values = np.arange(12, dtype=np.float32)
    server.serve_snapshot(lambda: SnapshotSource(5, FP, values))
    session = zenoh.open(raw_config([ep(free_port())], [ep(cluster.ports[0])]))
    try:
        assert wait_until(lambda: 10 in _alive(session))

        def ask(params: str) -> tuple[bytes | None, str | None, str | None]:
            for reply in session.get(f"{snapshot_key(NS, 10)}?{params}", timeout=WAIT):
                if reply.ok is not None:
                    return reply.ok.payload.to_bytes(), str(reply.ok.encoding), None
                if reply.err is not None:
                    return None, None, reply.err.payload.to_bytes().decode()
            return None, None, None

        for params in ("chunk=2&chunk_size=5", "chunk=2;chunk_size=5"):
            buf, enc, err = ask(params)
            assert err is None and buf is not None
            assert enc == "application/octet-stream;deltafabric.v1.SnapshotChunk"
            chunk = decode_chunk(buf)
            assert (chunk.offset, chunk.values.tolist(), chunk.total) == (
                10,
                [10.0, 11.0],
                12,
            )
        buf, _, err = ask("chunk=3&chunk_size=5")
        assert buf is None and err is not None and "BAD_REQUEST" in err
    finally:
        session.close()


def _alive(session: zenoh.Session) -> set[int]:
    out = set()
    for reply in session.liveliness().get(f"{NS}/v1/alive/*", timeout=1.0):
        if reply.ok is not None:
            out.add(int(str(reply.ok.key_expr).rsplit("/", 1)[1], 16))
    return out


def _fake_server(
    session: zenoh.Session, node: int, mangle: list[Callable[[int, bytes], bytes]]
) -> zenoh.Queryable:
    """A raw Zenoh queryable serving a snapshot whose chunks pass through ``mangle[0]`` (swappable)."""
    src = SnapshotSource(3, FP, np.linspace(-1, 1, 100, dtype=np.float32))
    key = snapshot_key(NS, node)

    def on_query(q: zenoh.Query) -> None:
        params = dict(
            part.split("=", 1) for part in str(q.parameters).replace(";", "&").split("&") if part
        )
        i, size = int(params["chunk"]), int(params["chunk_size"])
        q.reply(key, mangle[0](i, encode_chunk(src, node, 1, i, size)))

    return session.declare_queryable(key, on_query)


def test_corrupted_chunk_is_rejected_with_a_typed_error(cluster: Cluster) -> None:
    # REQ: DF-ZEN-12
    joiner = cluster.add(2)
    session = zenoh.open(raw_config([ep(free_port())], [ep(cluster.ports[0])]))
    mangle: list[Callable[[int, bytes], bytes]] = [lambda i, buf: buf]
    queryable = _fake_server(session, 0xBAD, mangle)
    token = session.liveliness().declare_token(alive_key(NS, 0xBAD))  # after the queryable
    try:
        joiner.wait_for_peers(1, WAIT, expected=[0xBAD])
        anchor, inc = joiner.fetch_snapshot(0xBAD, FP, WAIT, chunk_size=30, attempts=1)
        assert inc == 3 and anchor.size == 100  # the honest server is accepted

        def flip(i: int, buf: bytes) -> bytes:
            if i != 1:
                return buf
            b = bytearray(buf)
            b[-5] ^= 0x40  # inside the last value of the values vector
            return bytes(b)

        def truncate(i: int, buf: bytes) -> bytes:
            return buf[: len(buf) // 2] if i == 2 else buf

        def wrong_offset(i: int, buf: bytes) -> bytes:
            if i != 1:
                return buf
            c = decode_chunk(buf)
            src = SnapshotSource(3, FP, np.linspace(-1, 1, 100, dtype=np.float32))
            return encode_chunk(src, c.node, c.snapshot_id, 2, 30)  # chunk 2 answered for chunk 1

        def other_fingerprint(i: int, buf: bytes) -> bytes:
            src = SnapshotSource(3, bytes(32), np.linspace(-1, 1, 100, dtype=np.float32))
            return encode_chunk(src, 0xBAD, 1, i, 30)

        for fault, kind in (
            (flip, SnapshotErrorKind.DIGEST_MISMATCH),
            (truncate, SnapshotErrorKind.MALFORMED),
            (wrong_offset, SnapshotErrorKind.BAD_OFFSET),
            (other_fingerprint, SnapshotErrorKind.FINGERPRINT_MISMATCH),
        ):
            mangle[0] = fault
            with pytest.raises(SnapshotError) as ei:
                joiner.fetch_snapshot(0xBAD, FP, WAIT, chunk_size=30, attempts=2)
            assert ei.value.kind is kind, fault.__name__
    finally:
        token.undeclare()
        queryable.undeclare()
        session.close()


def test_fetch_from_absent_server_fails_in_time(cluster: Cluster) -> None:
    joiner = cluster.add(2)
    t0 = time.monotonic()
    with pytest.raises(SnapshotError) as ei:
        joiner.fetch_snapshot(0x99, FP, 1.0, attempts=2)
    assert ei.value.kind in (SnapshotErrorKind.NO_SERVER, SnapshotErrorKind.TIMEOUT)
    assert time.monotonic() - t0 < 5.0
    with pytest.raises(SnapshotError) as ei:
        joiner.fetch_snapshot(None, FP, 1.0, attempts=1)
    assert ei.value.kind is SnapshotErrorKind.NO_SERVER


def test_oversize_message_is_dropped_by_zenoh_before_the_node(cluster: Cluster) -> None:
    # REQ: DF-SEC-50
    # The node caps Zenoh's reassembly at max_packet_size + margin: a 2 MiB put from a stranger never
    # reaches its queue (with Zenoh's default 1 GiB cap it does), and the link still carries the next
    # small put (sent after it on the same link, so its arrival proves the big one was dropped).
    a = cluster.add(1, max_packet_size=4096)
    assert a.options.max_message_size == 4096 + ZENOH_MESSAGE_MARGIN
    session = zenoh.open(raw_config([ep(free_port())], [ep(cluster.ports[0])]))
    try:
        pub = session.declare_publisher(delta_key(NS, 0x77))
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT
        while not got and time.monotonic() < deadline:  # until a's subscriber is reachable
            pub.put(P + b"probe")
            a.wait_for_packets(0.2)
            got = a.drain()
        assert got and set(got) == {P + b"probe"}
        big = b"x" * (2 << 20)
        pub.put(big)
        pub.put(P + b"after")
        got = []
        deadline = time.monotonic() + WAIT
        while P + b"after" not in got and time.monotonic() < deadline:
            a.wait_for_packets(0.2)
            got.extend(a.drain())
        assert P + b"after" in got
        assert all(len(p) <= 4096 + ZENOH_MESSAGE_MARGIN for p in got)
        # Zenoh dropped it: the node's own pre-queue screen (DF-ZEN-154) never saw it
        assert ErrorCode.OVERSIZE not in a.take_screened()
    finally:
        session.close()
