"""The reference engine against every generate/receive conformance vector (conformance/vectors/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine, NonFiniteDelta
from delta_fabric.manifest import Manifest
from delta_fabric.replay import ReceiverState
from delta_fabric.signing import Signing
from delta_fabric.wire import Packet, decode_packet, encode_packet, packet_to_json
from delta_fabric_conformance.engine_checks import check_engine_result
from delta_fabric_conformance.recipes import expand_vector
from numpy.typing import NDArray

VECTORS = Path(__file__).resolve().parent.parent / "conformance" / "vectors"


def _rows(kind: str) -> list[dict[str, Any]]:
    index = json.loads((VECTORS / "index.json").read_text())
    return [r for r in index["vectors"] if r["kind"] == kind]


def _bits(a: NDArray[np.float32]) -> list[str]:
    return [f"{int(b):08x}" for b in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)]


def _from_bits(bits: list[str]) -> NDArray[np.float32]:
    return np.array([int(b, 16) for b in bits], dtype=np.uint32).view(np.float32)


def _entry(e: Any) -> dict[str, Any]:
    return {
        "origin": f"{e.origin:016x}",
        "incarnation": f"{e.incarnation:016x}",
        "seq": int(e.seq),
        "hops": int(e.hops),
        "indices": e.indices.tolist(),
        "values_bits": _bits(e.values),
        **({} if e.signature is None else {"signature": e.signature.hex()}),
    }


def _signing(node: dict[str, Any]) -> Signing | None:
    """A signed cluster's keys (1.1, spec section 13.1), when the vector's node has them."""
    s = node.get("signing")
    if s is None:
        return None
    # REQ: DF-SEC-145
    return Signing.from_json(s["keys"], s.get("secret"), node_id=int(node["id"], 16))


def _strip(e: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in e.items() if k != "values"}


def test_enough_engine_vectors() -> None:
    gen, rcv = _rows("generate"), _rows("receive")
    assert len(gen) >= 8 and len(rcv) >= 12
    for r in gen + rcv:
        assert r["requirements"] and r["id"].startswith(r["kind"] + ".")


@pytest.mark.parametrize("row", _rows("generate"), ids=lambda r: r["id"])
def test_generate_vector(row: dict[str, Any]) -> None:
    # REQ: DF-GEN-1
    # REQ: DF-GEN-3
    # REQ: DF-GEN-5
    case = expand_vector(json.loads((VECTORS / f"{row['path']}.json").read_text()))
    manifest = Manifest.from_json(case["manifest"])
    cfg = SyncConfig.from_json(case["config"])
    node = case["node"]
    active = _from_bits(case["active_bits"])
    numbers = np.array([float(x) for x in case["active"]], dtype=np.float32)  # "nan", "inf" too
    assert np.array_equal(active, numbers, equal_nan=True)
    eng = Engine(
        manifest,
        cfg,
        int(node["id"], 16),
        int(node["incarnation"], 16),
        anchor=_from_bits(case["anchor_bits"]),
        signing=_signing(node),
    )
    eng.next_seq = case["seq_start"]
    assert cfg.num_selected(manifest.num_params) == case["k"]
    exp = case["expected"]
    if "error" in exp:
        # REQ: DF-GEN-9 -- a failed generation changes nothing
        assert exp["error"] == "NON_FINITE" and exp["entries"] == []
        with pytest.raises(NonFiniteDelta):
            eng.generate(active, fast=case["fast"])
        assert eng.next_seq == exp["next_seq"] == case["seq_start"]
        assert _bits(eng.anchor) == exp["anchor_bits"] == case["anchor_bits"]
        return
    if "fast" in exp:
        # REQ: DF-GEN-7 -- judged by its bounds (1.1): the reference engine's fast set and its
        # reference set (DF-GEN-7's last sentence: a fast node offers both) must both pass
        assert case["fast"] is True
        for fast in (True, False):
            e = Engine(
                manifest,
                cfg,
                int(node["id"], 16),
                int(node["incarnation"], 16),
                anchor=_from_bits(case["anchor_bits"]),
            )
            e.next_seq = case["seq_start"]
            made = e.generate(active.copy(), fast=fast)
            result = {
                "entries": [_entry(x) for x in made],
                "next_seq": e.next_seq,
                "anchor_bits": _bits(e.anchor),
                "active_bits": _bits(active),
            }
            assert check_engine_result("generate", case, exp, result) is None
        return
    entries = eng.generate(active, fast=case["fast"])
    got = [_entry(e) for e in entries]
    want = [_strip(e) for e in exp["entries"]]
    if exp["exact_split"]:
        assert got == want
        assert eng.next_seq == exp["next_seq"]
    else:

        def cat(es, k):
            return [x for e in es for x in e[k]]

        assert cat(got, "indices") == cat(want, "indices")
        assert cat(got, "values_bits") == cat(want, "values_bits")
        seqs = [e["seq"] for e in got]
        assert seqs == list(range(case["seq_start"], case["seq_start"] + len(got)))
        assert len(got) > 1
        assert all(len(e["indices"]) <= exp["max_entry_values"] for e in got)
        for e in entries:
            one = Packet(eng.node_id, eng.incarnation, manifest.fingerprint, (e,), cfg.encoding)
            assert len(encode_packet(one)) <= cfg.max_packet_size
    assert all(e.origin == eng.node_id and e.hops == 0 for e in entries)
    assert _bits(eng.anchor) == exp["anchor_bits"]
    ci, cv = eng.last_correction  # average_over > 1 (DF-GEN-70): the caller applies it
    active[ci] = active[ci] + cv
    assert _bits(active) == exp["active_bits"]


@pytest.mark.parametrize("row", _rows("receive"), ids=lambda r: r["id"])
def test_receive_vector(row: dict[str, Any]) -> None:
    # REQ: DF-RCV-1
    # REQ: DF-RCV-3
    # REQ: DF-RCV-6
    # REQ: DF-RLY-3
    base = VECTORS / row["path"]
    case = expand_vector(json.loads((base / "case.json").read_text()))
    manifest = Manifest.from_json(case["manifest"])
    cfg = SyncConfig.from_json(case["config"])
    node = case["node"]
    node_id = int(node["id"], 16)
    eng = Engine(
        manifest,
        cfg,
        node_id,
        int(node["incarnation"], 16),
        anchor=_from_bits(node["anchor_bits"]),
        signing=_signing(node),
    )
    eng.state = ReceiverState.from_history(
        node_id,
        [(int(h[0], 16), int(h[1], 16), h[2]) for h in node["accepted"]],
        window=cfg.replay_window,
        max_incarnations=cfg.max_incarnations,
        max_origins=cfg.max_origins,  # REQ: DF-PAR-30
        # REQ: DF-RCV-178 (the 4th member: the clock reading at which the entry was accepted)
        accepted_at=[int(h[3], 16) if len(h) > 3 else None for h in node["accepted"]],
    )
    eng.state.max_seq_jump = cfg.max_seq_jump  # REQ: DF-RCV-52
    eng.state.max_incarnation_ahead = cfg.max_incarnation_ahead  # REQ: DF-RCV-175
    eng.state.incarnation_grace = cfg.incarnation_grace  # REQ: DF-RCV-178
    if "members" in node:  # REQ: DF-RCV-51
        eng.set_members(int(m, 16) for m in node["members"])
    if "now_us" in node:  # REQ: DF-RCV-175
        eng.set_now_us(int(node["now_us"], 16))
    active = _from_bits(node["active_bits"])
    packets = [(base / name).read_bytes() for name in case["packets"]]
    res = eng.receive(packets, active=active)  # REQ: DF-RCV-50
    res.apply_to(active)
    exp = case["expected"]
    assert [None if o is None else o.value for o in res.outcomes] == exp["rejections"]
    assert [[v.value for v in eo] for eo in res.entry_outcomes] == exp["entry_outcomes"]
    assert res.indices.tolist() == exp["aggregate"]["indices"]
    assert _bits(res.values) == exp["aggregate"]["values_bits"]
    assert _bits(active) == exp["active_bits"]
    assert _bits(eng.anchor) == exp["anchor_bits"]
    assert [_entry(e) for e in res.relay] == [_strip(e) for e in exp["relay_entries"]]
    relay = [packet_to_json(decode_packet(p)) for p in eng.pack([], res.relay)]
    assert relay == exp["relay"]
    c = eng.counters.to_json()
    for key in (
        "packets_accepted",
        "packets_rejected",
        "entries_accepted",
        "entries_relayed",
    ):
        assert c[key] == exp["counters"][key], key
    # REQ: DF-RLY-60 (1.1: counted only by the relay policy NEEDED vectors)
    assert c["relay_suppressed"] == exp["counters"].get("relay_suppressed", 0)
    assert c["errors"] == exp["counters"]["errors"]
    for reason, n in exp["counters"]["drops"].items():
        assert c["drops"][reason] == n, reason
