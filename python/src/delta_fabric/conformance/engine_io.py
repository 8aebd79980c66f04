"""Run a generate or receive vector's input through the reference engine (the Python driver's
``generate`` and ``receive`` commands). The vector format is ``conformance/vectors/README.md``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.state import ReceiverState
from delta_fabric.wire import Entry, decode_packet, packet_to_json

__all__ = ["bits_of", "f32_from_bits", "run_generate", "run_receive"]


def f32_from_bits(bits: Sequence[str]) -> NDArray[np.float32]:
    """Hex binary32 patterns -> float32 array."""
    return np.array([int(b, 16) for b in bits], dtype=np.uint32).view(np.float32)


def bits_of(a: NDArray[np.float32]) -> list[str]:
    """float32 array -> hex binary32 patterns."""
    return [f"{int(x):08x}" for x in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)]


def _hex_or_int(x: Any) -> int:
    return int(x, 16) if isinstance(x, str) else int(x)


def _vector(v: Mapping[str, Any], name: str) -> NDArray[np.float32]:
    if f"{name}_bits" in v:
        return f32_from_bits(v[f"{name}_bits"])
    return np.asarray(
        [float(x) if not isinstance(x, str) else float(x.replace("inf", "inf")) for x in v[name]],
        dtype=np.float64,
    ).astype(np.float32)


def _config(d: Mapping[str, Any]) -> SyncConfig:
    known = set(SyncConfig.__dataclass_fields__)
    return SyncConfig.from_json({k: v for k, v in d.items() if k in known})


def _manifest(v: Mapping[str, Any], n: int) -> Manifest:
    if "manifest" in v:
        return Manifest.from_json(v["manifest"])
    return Manifest([TensorSpec("flat", (n,))])


def _entry_json(e: Entry) -> dict[str, Any]:
    return {
        "origin": f"{e.origin:016x}",
        "incarnation": f"{e.incarnation:016x}",
        "seq": int(e.seq),
        "hops": int(e.hops),
        "indices": e.indices.tolist(),
        "values": e.values.astype(np.float64).tolist(),
        "values_bits": bits_of(e.values),
    }


def _node(v: Mapping[str, Any]) -> Mapping[str, Any]:
    node = v.get("node", {})
    return node if isinstance(node, Mapping) else {}


def run_generate(v: Mapping[str, Any]) -> dict[str, Any]:
    """DF-GEN on a generate vector's input: entries generated and the anchor after error feedback."""
    node = {**v, **_node(v)}
    active = _vector(node, "active")
    anchor = _vector(node, "anchor")
    cfg = _config(v.get("config", {}))
    eng = Engine(
        _manifest(v, active.size),
        cfg,
        _hex_or_int(node.get("id", node.get("node_id", 1))),
        _hex_or_int(node.get("incarnation", 1)),
        anchor,
    )
    eng.next_seq = int(node.get("seq_start", node.get("next_seq", 1)))
    fast = bool(v.get("fast", False)) or v.get("mode") == "fast"
    entries = eng.generate(active, fast=fast)
    return {
        "entries": [_entry_json(e) for e in entries],
        "anchor_bits": bits_of(eng.anchor),
        "next_seq": eng.next_seq,
    }


def run_receive(v: Mapping[str, Any], packets: Sequence[bytes]) -> dict[str, Any]:
    """One receive step (DF-RCV, DF-RLY) of a node set up as the vector says."""
    node = _node(v)
    active = _vector(node, "active")
    anchor = _vector(node, "anchor")
    cfg = _config(v.get("config", {}))
    node_id = _hex_or_int(node["id"])
    eng = Engine(_manifest(v, active.size), cfg, node_id, _hex_or_int(node.get("incarnation", 1)), anchor)
    history = node.get("history", node.get("window", []))
    if history:
        eng.state = ReceiverState.from_history(
            node_id,
            [(_hex_or_int(h[0]), _hex_or_int(h[1]), int(h[2])) for h in history],
            window=cfg.replay_window,
            max_incarnations=cfg.max_incarnations,
        )
    res = eng.receive(list(packets))
    res.apply_to(active)
    relay = [packet_to_json(decode_packet(p, cfg.max_packet_size)) for p in eng.pack([], res.relay)]
    return {
        "active_bits": bits_of(active),
        "anchor_bits": bits_of(eng.anchor),
        "relay": relay,
        "rejections": [None if o is None else o.value for o in res.outcomes],
        "counters": eng.counters.to_json(),
    }
