"""Signed entries (spec 1.1 section 13.1): the signed message, key binding, the engine's signing,
verification, per-hop damping and relay of the origin's signature, and the size estimate."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from delta_fabric.config import SyncConfig
from delta_fabric.encodings import ValueEncoding
from delta_fabric.engine import Engine, max_values_per_entry
from delta_fabric.errors import ErrorCode
from delta_fabric.manifest import Manifest
from delta_fabric.signing import (
    SIGNATURE_DOMAIN,
    Signing,
    load_keys,
    load_secret,
    public_key_of,
    signed_message,
)
from delta_fabric.wire import (
    PACKET_OVERHEAD_BOUND,
    Entry,
    Packet,
    decode_packet,
    encode_packet,
    encoded_size_bound,
)

MANIFEST = Manifest.from_named_shapes({"w": (64,)})
FP = MANIFEST.fingerprint
SEEDS = {n: bytes([n]) * 32 for n in (1, 2, 3, 4)}
KEYS = {n: public_key_of(SEEDS[n]) for n in (1, 2, 3)}  # node 4 is not pinned


def _signing(n: int) -> Signing:
    return Signing(KEYS, SEEDS[n], node_id=n)


def _entry(origin: int = 2, seq: int = 1, hops: int = 0) -> Entry:
    return Entry(origin, 7, seq, hops, np.array([3, 9], np.uint32), np.array([0.5, -2], np.float32))


def test_signed_message_layout() -> None:
    # REQ: DF-SEC-141
    e = _entry()
    m = signed_message(FP, ValueEncoding.F32, e)
    assert len(SIGNATURE_DOMAIN) == 31 and SIGNATURE_DOMAIN.endswith(b"\0")
    head = SIGNATURE_DOMAIN + FP + struct.pack("<QQQBI", 2, 7, 1, 0, 2)
    assert m == head + struct.pack("<II", 3, 9) + struct.pack("<ff", 0.5, -2.0)
    # F16: the values as the 16-bit patterns on the wire; hops is not part of the message
    m16 = signed_message(FP, ValueEncoding.F16, e)
    assert m16[len(head) + 8 :] == struct.pack("<HH", 0x3800, 0xC000)
    assert m16[len(SIGNATURE_DOMAIN) + 32 + 24] == 1
    assert signed_message(FP, ValueEncoding.F32, replace(e, hops=9)) == m


def test_every_signed_field_is_bound_and_hops_is_not() -> None:
    # REQ: DF-SEC-141, DF-SEC-142, DF-SEC-144
    s = _signing(2)
    e = _entry()
    e = replace(e, signature=s.sign(FP, ValueEncoding.F32, e))
    assert s.verify(FP, ValueEncoding.F32, e) is None
    assert s.verify(FP, ValueEncoding.F32, replace(e, hops=5)) is None
    tampered = [
        replace(e, origin=3),
        replace(e, incarnation=8),
        replace(e, seq=2),
        replace(e, indices=np.array([3, 10], np.uint32)),
        replace(e, values=np.array([0.5, -2.5], np.float32)),
        replace(e, signature=None),
    ]
    for t in tampered:
        assert s.verify(FP, ValueEncoding.F32, t) is not None
    assert s.verify(bytes(32), ValueEncoding.F32, e) is not None
    assert s.verify(FP, ValueEncoding.BF16, e) is not None
    # an origin without a pinned key
    e4 = _entry(origin=4)
    e4 = replace(e4, signature=Signing({}, SEEDS[4], node_id=4).sign(FP, ValueEncoding.F32, e4))
    assert "no pinned key" in (s.verify(FP, ValueEncoding.F32, e4) or "")


def test_key_binding_errors(tmp_path: Path) -> None:
    # REQ: DF-SEC-145
    with pytest.raises(ValueError, match="32 bytes"):
        Signing({2: b"\0" * 31})
    with pytest.raises(ValueError, match="not the secret's"):
        Signing(KEYS, SEEDS[3], node_id=2)
    own = Signing({}, SEEDS[2], node_id=2)
    assert own.keys == {2: KEYS[2]} and own.can_sign
    assert not Signing(KEYS).can_sign
    with pytest.raises(ValueError, match="cannot sign"):
        Signing(KEYS).sign(FP, ValueEncoding.F32, _entry())
    f = tmp_path / "keys.json"
    f.write_text(
        json.dumps({"version": 1, "keys": {f"{n:016x}": k.hex() for n, k in KEYS.items()}})
    )
    assert Signing.from_json(load_keys(f)).keys == KEYS
    f.write_text(json.dumps({"keys": {}}))
    with pytest.raises(ValueError, match="version"):
        load_keys(f)
    with pytest.raises(ValueError, match="bad entry"):
        Signing.from_json({"zz": "00"})
    sec = tmp_path / "secret"
    sec.write_text(f"  {SEEDS[2].hex()}\n")
    assert Signing.from_json({}, load_secret(sec), node_id=2).keys == {2: KEYS[2]}
    with pytest.raises(ValueError, match="secret key file"):
        load_secret(tmp_path / "absent")
    # node ids are the non-zero u64 (DF-PKT-2): both ends accepted, one past either end refused
    assert set(Signing({1: KEYS[1], (1 << 64) - 1: KEYS[2]}).keys) == {1, (1 << 64) - 1}
    for bad in (0, 1 << 64, (1 << 65) - 1, True):
        with pytest.raises(ValueError, match="node id"):
            Signing({bad: KEYS[1]})


def _cluster(signed: bool, alpha: float = 0.5) -> dict[int, Engine]:
    cfg = SyncConfig.v1_0(ratio=0.25, alpha=alpha)
    return {
        n: Engine(MANIFEST, cfg, n, 100 + n, signing=_signing(n) if signed else None)
        for n in (1, 2, 3)
    }


def _line(signed: bool) -> tuple[dict[int, Engine], list[np.ndarray]]:
    """Node 1 generates; 2 hears 1 and relays to 3 (a line 1 - 2 - 3), for 4 rounds."""
    eng = _cluster(signed)
    act = {n: np.zeros(64, np.float32) for n in eng}
    rng = np.random.default_rng(5)
    for _ in range(4):
        act[1] += rng.standard_normal(64).astype(np.float32)
        _, out1 = eng[1].step(act[1], [], sync=True)
        _, out2 = eng[2].step(act[2], out1, sync=False)
        res3, _ = eng[3].step(act[3], out2, sync=False)
        assert res3.accepted_entries == len(out1)
    return eng, [act[n] for n in (1, 2, 3)]


def test_signed_cluster_applies_what_an_unsigned_one_applies() -> None:
    # REQ: DF-RCV-140, DF-RLY-140, DF-SEC-140
    eng_s, act_s = _line(True)
    _, act_u = _line(False)
    for a, b in zip(act_s, act_u, strict=True):
        assert a.view(np.uint32).tolist() == b.view(np.uint32).tolist()
    assert eng_s[3].counters.to_json()["errors"]["BAD_SIGNATURE"] == 0


def test_relay_forwards_the_origins_values_and_signature() -> None:
    # REQ: DF-RLY-140, DF-RLY-141
    eng = _cluster(True)
    act = np.arange(64, dtype=np.float32)
    _, out1 = eng[1].step(act, [], sync=True)
    _, out2 = eng[2].step(np.zeros(64, np.float32), out1, sync=False)
    sent = decode_packet(out1[0]).entries[0]
    relayed = decode_packet(out2[0]).entries[0]
    assert relayed.hops == 1 and relayed.signature == sent.signature
    assert relayed.values.tobytes() == sent.values.tobytes()  # undamped, all values


def test_bad_packets_are_rejected_whole_and_change_nothing() -> None:
    # REQ: DF-SEC-142, DF-SEC-146, DF-ERR-140, DF-RCV-1, DF-RCV-141
    eng = _cluster(True)
    _, out = eng[2].step(np.arange(64, dtype=np.float32), [], sync=True)
    good = decode_packet(out[0])
    e = good.entries[0]
    rx = eng[3]
    before = rx.anchor.copy()
    forged = [
        replace(good, entries=(replace(e, incarnation=e.incarnation + 1),)),  # replay under I + 1
        replace(good, entries=(replace(e, seq=(1 << 64) - 1),)),
        replace(good, entries=(e, replace(e, seq=2, signature=None))),
        replace(good, entries=(replace(e, values=e.values * 2),)),
        replace(good, encoding=ValueEncoding.F16),
    ]
    res = rx.receive([encode_packet(p) for p in forged])
    assert res.outcomes == [ErrorCode.BAD_SIGNATURE] * len(forged)
    assert rx.anchor.tobytes() == before.tobytes() and res.relay == []
    assert rx.state.save(2) is None  # no incarnation of node 2 was created
    assert rx.counters.to_json()["errors"]["BAD_SIGNATURE"] == len(forged)
    # the genuine packet is accepted afterwards; an index out of range comes before the signature
    assert rx.receive([out[0]]).outcomes == [None]
    oob = replace(good, entries=(replace(e, seq=9, indices=np.array([64], np.uint32)),))
    oob = replace(oob, entries=(replace(oob.entries[0], values=np.ones(1, np.float32)),))
    assert rx.receive([encode_packet(oob)]).outcomes == [ErrorCode.INDEX_OUT_OF_RANGE]


def test_unsigned_receiver_ignores_signatures() -> None:
    # REQ: DF-PKT-140
    signer = _cluster(True)[2]
    _, out = signer.step(np.arange(64, dtype=np.float32), [], sync=True)
    plain = Engine(MANIFEST, SyncConfig.v1_0(alpha=0.5), 3, 103)
    res = plain.receive(out)
    assert res.outcomes == [None] and all(r.signature is None for r in res.relay)


def test_signature_length_is_checked_by_every_decoder() -> None:
    # REQ: DF-PKT-140
    e = replace(_entry(), signature=b"\1" * 64)
    assert decode_packet(encode_packet(Packet(1, 1, FP, (e,)))).entries[0].signature == b"\1" * 64
    for n in (0, 63, 65):
        with pytest.raises(Exception, match="MALFORMED"):
            decode_packet(encode_packet(Packet(1, 1, FP, (replace(e, signature=b"\1" * n),))))


@pytest.mark.parametrize("enc", list(ValueEncoding))
def test_signed_size_estimate_is_an_upper_bound(enc: ValueEncoding) -> None:
    # REQ: DF-RLY-141
    sig = b"\7" * 64
    for n in (1, 2, 3, 7, 64, 65, 300):
        for k in (1, 2, 5):
            entries = tuple(
                Entry(1, 1, j + 1, 0, np.arange(n, dtype=np.uint32), np.ones(n, np.float32), sig)
                for j in range(k)
            )
            size = len(encode_packet(Packet(1, 1, FP, entries, enc)))
            assert size <= PACKET_OVERHEAD_BOUND + k * encoded_size_bound(n, signed=True)
    assert encoded_size_bound(10, signed=True) == 304
    assert max_values_per_entry(16777216, signed=True) == (16777216 - 160 - 224) // 8


def _fabric_run(signed: bool, forge: bool) -> tuple[list[np.ndarray], list[dict[str, object]], int]:
    """Three nodes on the in-memory transport, 20 rounds of a quadratic pull towards each node's own
    target; with ``forge``, node 3 (a member, holding its own key) also publishes every round an entry
    that claims to be node 1's, with a forged incarnation and a huge value."""
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.numpy import NumpyStore
    from delta_fabric.transports.memory import MemoryHub

    hub = MemoryHub(seed=7)
    rng = np.random.default_rng(3)
    targets = {n: rng.normal(size=64).astype(np.float32) for n in (1, 2, 3)}
    weights = {n: np.zeros(64, np.float32) for n in (1, 2, 3)}
    cfg = SyncConfig.v1_0(ratio=0.25, sync_interval=1)
    fabs = [
        Fabric.v1_0(
            NumpyStore({"w": weights[n]}),
            hub.transport(n),
            cfg,
            node_id=n,
            incarnation=100 + n,
            signing=_signing(n) if signed else None,
        )
        for n in (1, 2, 3)
    ]
    forger = hub.transport(0x5EED)
    s3 = _signing(3)
    for r in range(20):
        if forge:
            e = Entry(
                1, (1 << 64) - 1 - r, 1, 0, np.array([5], np.uint32), np.array([1e6], np.float32)
            )
            e = replace(e, signature=s3.sign(FP, ValueEncoding.F32, e))  # signed, but by node 3
            forger.publish(encode_packet(Packet(3, 103, FP, (e,))))
        for f, n in zip(fabs, (1, 2, 3), strict=True):
            weights[n] -= np.float32(0.1) * (weights[n] - targets[n])
            f.step()
    for f in fabs:
        f.poll()
    stats = [f.engine.counters.to_json() for f in fabs]
    out = [weights[n].copy() for n in (1, 2, 3)]
    for f in fabs:
        f.close()
    return out, stats, fabs[1].own_entries_sent


def test_fabric_signed_cluster_refuses_a_members_forgeries() -> None:
    # REQ: DF-SEC-140, DF-SEC-142, DF-SEC-146
    clean, _, sent = _fabric_run(signed=True, forge=False)
    attacked, stats, _ = _fabric_run(signed=True, forge=True)
    unsigned, _, _ = _fabric_run(signed=False, forge=False)
    assert sent > 0
    # the signed cluster trains exactly as the unsigned one, and the forgeries change nothing
    for a, b, c in zip(clean, attacked, unsigned, strict=True):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    for c in stats:
        errors = c["errors"]
        assert isinstance(errors, dict) and errors["BAD_SIGNATURE"] == 20
    with pytest.raises(ValueError, match="secret key"):
        _fabric_no_secret()


def _fabric_no_secret() -> None:
    from delta_fabric.fabric import Fabric
    from delta_fabric.stores.numpy import NumpyStore
    from delta_fabric.transports.memory import MemoryHub

    Fabric.v1_0(
        NumpyStore({"w": np.zeros(64, np.float32)}),
        MemoryHub().transport(1),
        node_id=1,
        signing=Signing(KEYS),
    )


def test_a_node_without_its_secret_key_cannot_generate() -> None:
    # REQ: DF-SEC-140
    eng = Engine(MANIFEST, SyncConfig.v1_0(), 1, 101, signing=Signing(KEYS))
    before = eng.anchor.copy()
    with pytest.raises(ValueError, match="no secret key"):
        eng.generate(np.ones(64, np.float32))
    assert eng.anchor.tobytes() == before.tobytes() and eng.next_seq == 1


def test_a_signed_cluster_needs_room_for_one_signed_value() -> None:
    # REQ: DF-RLY-141
    # 160 + 224 + 8 = 392 bytes hold one signed entry of one value; below that the engine refuses to
    # sign and stays as it was (as Rust's Engine::set_signing)
    eng = Engine(MANIFEST, SyncConfig.v1_0(max_packet_size=391), 1, 101)
    before = eng.max_entry_values
    with pytest.raises(ValueError, match="cannot hold one value"):
        eng.set_signing(_signing(1))
    assert eng.signing is None and eng.max_entry_values == before
    with pytest.raises(ValueError):
        Engine(MANIFEST, SyncConfig.v1_0(max_packet_size=391), 1, 101, signing=_signing(1))
    eng = Engine(MANIFEST, SyncConfig.v1_0(max_packet_size=392), 1, 101, signing=_signing(1))
    assert eng.max_entry_values == 1
    d = np.zeros(64, np.float32)
    d[3], d[9] = 1.0, -2.0
    packets = eng.pack(eng.generate(d), [])
    assert packets and all(len(p) <= 392 for p in packets)
