"""Run a generate or receive vector's input through the reference engine (a Python driver's ``generate``
and ``receive`` commands). The vector format is ``conformance/vectors/README.md``.

A framework's driver can route the weights through its own store with two hooks: ``gather`` (generate:
the canonical active vector, loaded into the framework and read back) and ``apply`` (receive: the
accepted aggregate added to the active weights by the framework). Both default to plain NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine, NonFiniteDelta
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.replay import ReceiverState
from delta_fabric.wire import Entry, decode_packet, packet_to_json
from numpy.typing import NDArray

if TYPE_CHECKING:
    from delta_fabric.signing import Signing

__all__ = [
    "Apply",
    "Gather",
    "bits_of",
    "f32_from_bits",
    "run_check_config",
    "run_generate",
    "run_receive",
]

#: ``gather(active) -> active'``: load the canonical f32 vector into the framework, read it back.
Gather = Callable[[NDArray[np.float32]], NDArray[np.float32]]
#: ``apply(active, indices, values) -> active'``: DF-RCV-7, ``active[i] = fl32(active[i] + values)``.
Apply = Callable[
    [NDArray[np.float32], NDArray[np.uint32], NDArray[np.float32]], NDArray[np.float32]
]


def f32_from_bits(bits: Sequence[str]) -> NDArray[np.float32]:
    """Hex binary32 patterns -> float32 array."""
    return np.array([int(b, 16) for b in bits], dtype=np.uint32).view(np.float32)


def bits_of(a: NDArray[np.float32]) -> list[str]:
    """float32 array -> hex binary32 patterns."""
    return [f"{int(x):08x}" for x in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)]


def _numbers(a: NDArray[np.float32]) -> list[float | str]:
    """f32 values as JSON numbers, non-finite ones as ``"nan"``, ``"inf"``, ``"-inf"`` (driver protocol
    section 4: a weight may be infinite, for example in the vector of DF-GEN-9)."""
    out: list[float | str] = []
    for x in np.asarray(a, dtype=np.float32).astype(np.float64).tolist():
        out.append(
            x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
        )
    return out


def _hex_or_int(x: Any) -> int:
    return int(x, 16) if isinstance(x, str) else int(x)


def _vector(v: Mapping[str, Any], name: str) -> NDArray[np.float32]:
    """An f32 array from its bit patterns (``<name>_bits``), else from its JSON numbers."""
    if f"{name}_bits" in v:
        return f32_from_bits(v[f"{name}_bits"])
    return np.asarray([float(x) for x in v[name]], dtype=np.float64).astype(np.float32)


def _config(d: Mapping[str, Any]) -> SyncConfig:
    known = set(SyncConfig.__dataclass_fields__)
    return SyncConfig.from_json({k: v for k, v in d.items() if k in known})


def _manifest(v: Mapping[str, Any], n: int) -> Manifest:
    if "manifest" in v:
        return Manifest.from_json(v["manifest"])
    return Manifest([TensorSpec("flat", (n,))])


def run_check_config(config: object, manifest: object) -> dict[str, Any]:
    """The ``check_config`` command (driver protocol 5.10, 1.1): would a node start with this
    configuration and manifest? ``{"accepted": true}``, or ``false`` with the refusal's message
    (DF-PAR-11, DF-PAR-260; DF-MAN-1; DF-MAN-7, whose ``1 <= N`` the engine checks at start)."""
    try:
        if not isinstance(config, dict):
            raise TypeError("config must be a JSON object")
        SyncConfig.from_json(config)
        m = Manifest.from_json(manifest)  # type: ignore[arg-type]  # checked: TypeError
        if m.num_params < 1:
            raise ValueError("manifest has no value (DF-MAN-7: 1 <= N)")
    except (TypeError, ValueError) as exc:
        return {"accepted": False, "message": str(exc)}
    return {"accepted": True}


def _entry_json(e: Entry) -> dict[str, Any]:
    return {
        "origin": f"{e.origin:016x}",
        "incarnation": f"{e.incarnation:016x}",
        "seq": int(e.seq),
        "hops": int(e.hops),
        "indices": e.indices.tolist(),
        "values": _numbers(e.values),
        "values_bits": bits_of(e.values),
        **({} if e.signature is None else {"signature": e.signature.hex()}),
    }


def _node(v: Mapping[str, Any]) -> Mapping[str, Any]:
    node = v.get("node", {})
    return node if isinstance(node, Mapping) else {}


def _flat_f32(a: NDArray[np.float32], n: int, hook: str) -> NDArray[np.float32]:
    out = np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
    if out.size != n:
        raise ValueError(f"the {hook} hook returned {out.size} values, expected {n}")
    return out


def _signing(node: Mapping[str, Any], node_id: int) -> Signing | None:
    """The vector's ``node.signing`` (1.1, driver protocol 5.5: pinned public keys and, optionally,
    the node's secret seed; spec section 13.1), or ``None``: not a signed cluster."""
    s = node.get("signing")
    if s is None:
        return None
    from delta_fabric.signing import Signing  # the `signing` extra (cryptography)

    return Signing.from_json(s["keys"], s.get("secret"), node_id=node_id)


def run_generate(v: Mapping[str, Any], *, gather: Gather | None = None) -> dict[str, Any]:
    """DF-GEN on a generate vector's input: entries generated and the anchor after error feedback.
    ``gather`` reads the active weights back through the framework (default: as given)."""
    node = _node(v)
    active = _vector(v, "active")
    if gather is not None:
        active = _flat_f32(gather(active.copy()), active.size, "gather")
    anchor = _vector(v, "anchor")
    cfg = _config(v.get("config", {}))
    eng = Engine(
        _manifest(v, active.size),
        cfg,
        _hex_or_int(node["id"]),
        _hex_or_int(node["incarnation"]),
        anchor,
        signing=_signing(node, _hex_or_int(node["id"])),
    )
    eng.next_seq = int(v.get("seq_start", 1))
    error: dict[str, str] = {}
    try:
        entries = eng.generate(active, fast=bool(v.get("fast", False)))
    except NonFiniteDelta:
        # DF-GEN-9: the generation failed as a whole (driver protocol 5.4: ok with "error")
        entries, error = [], {"error": "NON_FINITE"}
    else:
        ci, cv = eng.last_correction
        if ci.size:  # average_over > 1 (DF-GEN-70): the own weights keep what was sent
            active[ci] = active[ci] + cv
    return {
        **error,
        "entries": [_entry_json(e) for e in entries],
        "next_seq": eng.next_seq,
        "anchor": _numbers(eng.anchor),
        "anchor_bits": bits_of(eng.anchor),
        "active_bits": bits_of(active),
        # sizes of each entry alone in a packet (the split checks of exact_split = false)
        "entry_packet_sizes": [len(p) for e in entries for p in eng.pack([e], [])],
    }


def run_receive(
    v: Mapping[str, Any], packets: Sequence[bytes], *, apply: Apply | None = None
) -> dict[str, Any]:
    """One receive step (DF-RCV, DF-RLY) of a node set up as the vector says. ``apply`` adds the
    aggregate to the active weights through the framework (default: NumPy, in place)."""
    node = _node(v)
    active = _vector(node, "active")
    anchor = _vector(node, "anchor")
    cfg = _config(v.get("config", {}))
    node_id = _hex_or_int(node["id"])
    eng = Engine(
        _manifest(v, active.size),
        cfg,
        node_id,
        _hex_or_int(node["incarnation"]),
        anchor,
        signing=_signing(node, node_id),
    )
    history = node.get("accepted", [])
    if history:
        eng.state = ReceiverState.from_history(
            node_id,
            [(_hex_or_int(h[0]), _hex_or_int(h[1]), int(h[2])) for h in history],
            window=cfg.replay_window,
            max_incarnations=cfg.max_incarnations,
            max_origins=cfg.max_origins,  # DF-PAR-30 (1.1)
            # DF-RCV-178 (1.1): an optional 4th member, the clock reading (hex16) of the acceptance
            accepted_at=[_hex_or_int(h[3]) if len(h) > 3 else None for h in history],
        )
    eng.state.max_seq_jump = cfg.max_seq_jump  # DF-RCV-52 (1.1)
    eng.state.max_incarnation_ahead = cfg.max_incarnation_ahead  # DF-RCV-175 (1.1)
    eng.state.incarnation_grace = cfg.incarnation_grace  # DF-RCV-178 (1.1)
    now_us = node.get("now_us")
    if now_us is not None:  # DF-RCV-175 (1.1): the receiver's clock, hex16
        eng.set_now_us(_hex_or_int(now_us))
    members = node.get("members")
    if members is not None:  # DF-RCV-51 (1.1)
        eng.set_members(_hex_or_int(m) for m in members)
    res = eng.receive(list(packets), active=active)
    if apply is None:
        res.apply_to(active)
    else:
        active = _flat_f32(apply(active.copy(), res.indices, res.values), active.size, "apply")
    relay = [packet_to_json(decode_packet(p, cfg.max_packet_size)) for p in eng.pack([], res.relay)]
    # DF-RCV-10 counters of this step (driver protocol 5.5); relay_dropped_oversize is counted by pack
    counters = {**eng.counters.to_json(), "relay_dropped_oversize": eng.relay_dropped_oversize}
    return {
        "rejections": [None if o is None else o.value for o in res.outcomes],
        "outcomes": ["ok" if o is None else o.value for o in res.outcomes],
        "entry_outcomes": [[a.value for a in verdicts] for verdicts in res.entry_outcomes],
        "aggregate": {
            "indices": res.indices.tolist(),
            "values": _numbers(res.values),
            "values_bits": bits_of(res.values),
        },
        "active": _numbers(active),
        "active_bits": bits_of(active),
        "anchor": _numbers(eng.anchor),
        "anchor_bits": bits_of(eng.anchor),
        "relay_entries": [_entry_json(e) for e in res.relay],
        "relay": relay,
        "counters": counters,
    }
