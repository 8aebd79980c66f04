"""Generate and receive conformance vectors (``conformance/vectors/generate/``, ``receive/``).

Called by ``make_vectors.py`` (``build(vectors_dir) -> index rows``); formats are documented in
``conformance/vectors/README.md`` ("Engine vectors"). Expected results come from the reference engine
(``delta_fabric.engine.Engine``) and are cross-checked here, while writing, against rules written out
independently (brute-force selection, plain f32 arithmetic), so a vector cannot silently encode an engine
bug. Inputs are built from integer formulas (no random generator): the same code writes the same bytes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from delta_fabric.replay import Admission, ReceiverState
from delta_fabric.wire import (
    Entry,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
    packet_to_json,
    quantize,
)
from numpy.typing import NDArray

__all__ = [
    "MANIFEST",
    "build",
    "entry_json",
    "f32_bits",
    "f32_from_bits",
]

MANIFEST = Manifest.from_named_shapes({"fc.bias": (4,), "fc.weight": (4, 5)})  # N = 24
N = MANIFEST.num_params
FP = MANIFEST.fingerprint
WIDE_MANIFEST = Manifest.from_named_shapes({"fc.weight": (10, 10)})  # N = 100

NODE = 0x0A0A_0000_0000_0001
NODE_INC = 0x0006_0000_0000_0001
B = 0x0B0B_0000_0000_0002
B_INC = 0x0006_0000_0000_0100
C = 0x0C0C_0000_0000_0003
C_INC = 0x0006_0000_0000_0200
D = 0x0D0D_0000_0000_0004
D_INC = 0x0006_0000_0000_0300

F32, F16, BF16 = ValueEncoding.F32, ValueEncoding.F16, ValueEncoding.BF16

# Requirement ids (spec/protocol.md); DF-PKT-1 = packet format (numbering of make_vectors.py).
GEN = [f"DF-GEN-{i}" for i in range(1, 9)]
RCV = [f"DF-RCV-{i}" for i in range(1, 8)]
RLY = [f"DF-RLY-{i}" for i in range(1, 5)]


# ------------------------------------------------------------------------------------------------------
# JSON helpers
# ------------------------------------------------------------------------------------------------------


def f32_bits(a: NDArray[np.float32]) -> list[str]:
    """Bit patterns of f32 values as 8 lowercase hex digits each."""
    return [f"{int(b):08x}" for b in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)]


def f32_from_bits(bits: Sequence[str]) -> NDArray[np.float32]:
    return np.array([int(b, 16) for b in bits], dtype=np.uint32).view(np.float32)


def floats(a: NDArray[np.float32]) -> list[float]:
    out: list[float] = np.asarray(a, dtype=np.float32).astype(np.float64).tolist()
    return out


def hex16(x: int) -> str:
    return f"{x:016x}"


def entry_json(e: Entry) -> dict[str, Any]:
    """An entry as in packet JSON, plus ``values_bits``."""
    return {
        "origin": hex16(e.origin),
        "incarnation": hex16(e.incarnation),
        "seq": int(e.seq),
        "hops": int(e.hops),
        "indices": e.indices.tolist(),
        "values": floats(e.values),
        "values_bits": f32_bits(e.values),
    }


def _dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _f32(x: Sequence[float] | NDArray[Any]) -> NDArray[np.float32]:
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def _pattern(mul: int, mod: int, off: int, div: float) -> NDArray[np.float32]:
    """Deterministic inexact-looking values: ((i * mul) % mod - off) / div, rounded to f32."""
    i = np.arange(N, dtype=np.int64)
    return _f32(((i * mul) % mod - off) / div)


def _config_json(cfg: SyncConfig) -> dict[str, Any]:
    d = cfg.to_json()
    d.pop("include_buffers")  # the manifest is given: buffers are not a receive/generate concern
    return d


# ------------------------------------------------------------------------------------------------------
# Generation vectors
# ------------------------------------------------------------------------------------------------------


@dataclass
class GenCase:
    name: str
    description: str
    requirements: list[str]
    active: NDArray[np.float32]
    anchor: NDArray[np.float32]
    config: SyncConfig
    seq_start: int = 1
    # False: the split points depend on the implementation's size accounting
    exact_split: bool = True
    manifest: Manifest = MANIFEST


def _brute_force(d: NDArray[np.float32], k: int) -> list[int]:
    cand = [i for i in range(d.size) if d[i] != 0]
    cand.sort(key=lambda i: (-abs(float(d[i])), i))
    return sorted(cand[:k])


def generate_cases() -> list[GenCase]:
    base_anchor = _pattern(7, 13, 6, 16.0)  # multiples of 1/16: exact
    cases = [
        GenCase(
            "basic",
            "k = ceil(24 * 0.25) = 6 of 24 deltas, f32; residuals stay in active - anchor.",
            ["DF-GEN-1", "DF-GEN-2", "DF-GEN-3", "DF-GEN-4", "DF-GEN-5", "DF-GEN-6"],
            base_anchor + _pattern(11, 29, 14, 7.0),
            base_anchor,
            SyncConfig(ratio=0.25),
        ),
        GenCase(
            "ties",
            "Equal magnitudes of both signs across the k boundary: the lower indices win.",
            ["DF-GEN-3", "DF-GEN-4", "DF-GEN-5"],
            _f32([0.5, -2, 2, 1, -2, 0, 2, -1, 1, 2, -2, 0.5] * 2),
            np.zeros(N, dtype=np.float32),
            SyncConfig(ratio=0.2),  # k = ceil(4.8) = 5: the 8 values of magnitude 2 tie
        ),
        GenCase(
            "zeros_and_k_above_candidates",
            "Only 5 nonzero deltas (one is -0.0 - 0.0 = -0.0) with k = 12: zeros are never sent.",
            ["DF-GEN-1", "DF-GEN-3"],
            _f32(
                [
                    0,
                    -0.0,
                    3,
                    0,
                    0,
                    -1.25,
                    0,
                    0,
                    0.001,
                    0,
                    0,
                    0,
                    0,
                    7,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    -4,
                    0,
                    0,
                ]
            ),
            np.zeros(N, dtype=np.float32),
            SyncConfig(ratio=0.5),
        ),
        GenCase(
            "no_candidate",
            "active == anchor everywhere: no entry, and the seq is not consumed.",
            ["DF-GEN-8"],
            base_anchor.copy(),
            base_anchor.copy(),
            SyncConfig(),
            seq_start=7,
        ),
        GenCase(
            "ratio_product_binary64",
            "N = 100, ratio 0.07: N * ratio in binary64 is 7.000000000000001, so k = 8.",
            ["DF-GEN-2", "DF-GEN-3"],
            _f32([((i * 37) % 101 - 50) / 7.0 for i in range(100)]),
            np.zeros(100, dtype=np.float32),
            SyncConfig(ratio=0.07),
            manifest=WIDE_MANIFEST,
        ),
        GenCase(
            "k_clamped_to_one",
            "ceil(24 * 1e-9) = 1.",
            ["DF-GEN-2"],
            _pattern(5, 17, 8, 3.0),
            np.zeros(N, dtype=np.float32),
            SyncConfig(ratio=1e-9),
        ),
        GenCase(
            "f32_inexact_difference",
            "d = active - anchor rounds in f32; anchor + d != active for some sent indices, so a "
            "residual stays (error feedback is anchor += sent value, not anchor = active).",
            ["DF-GEN-1", "DF-GEN-5"],
            _f32([0.1 * (i + 1) for i in range(N)]),
            _f32([1e8 if i % 4 == 0 else 0.1 * (i + 1) - 0.25 * (i % 4) for i in range(N)]),
            SyncConfig(ratio=0.5),
        ),
        GenCase(
            "f16_error_feedback",
            "F16 send encoding: sent values are rounded to binary16 (nearest even, clamped to 65504); the "
            "anchor moves by the decoded f16 value, the rounding error stays in active - anchor.",
            ["DF-GEN-4", "DF-GEN-5"],
            _f32([1e5, -7e4, 1 / 3, -0.1, 1 + 2**-11, 1 + 3 * 2**-11, 2**-20, 3.14159] * 3),
            np.zeros(N, dtype=np.float32),
            SyncConfig(ratio=0.5, encoding=F16),
        ),
        GenCase(
            "bf16_error_feedback",
            "BF16 send encoding: round to nearest even on the upper 16 bits, clamped to the finite "
            "range; the anchor moves by the decoded value.",
            ["DF-GEN-4", "DF-GEN-5"],
            _f32(
                [
                    3.4028235e38,
                    -1 / 3,
                    0.1,
                    1 + 2**-8,
                    1 + 3 * 2**-8,
                    -1e-30,
                    65504,
                    2.5,
                ]
                * 3
            ),
            _f32([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0] * 3),
            SyncConfig(ratio=0.5, encoding=BF16),
        ),
        GenCase(
            "split_entries",
            "k = 24 values with max_packet_size 320 (too small for 24 values in any encoding of the "
            "schema): the origin splits its delta into several entries with consecutive seqs (from 41) "
            "and disjoint ascending index ranges, each fitting a packet. The split points depend on "
            "the implementation's size accounting (exact_split false).",
            ["DF-GEN-6"],
            _pattern(3, 31, 15, 4.0) + _f32([0.0625] * N),
            np.zeros(N, dtype=np.float32),
            SyncConfig(ratio=1.0, max_packet_size=320),
            seq_start=41,
            exact_split=False,
        ),
    ]
    return cases


def _write_generate(vectors_dir: Path, case: GenCase) -> dict[str, Any]:
    eng = Engine(case.manifest, case.config, NODE, NODE_INC, anchor=case.anchor)
    eng.next_seq = case.seq_start
    k = case.config.num_selected(case.manifest.num_params)
    active = case.active.copy()
    entries = eng.generate(active)
    # independent cross-check of the engine's result
    d = case.active - case.anchor
    want = _brute_force(d, k)
    sent_idx = [int(i) for e in entries for i in e.indices]
    assert sent_idx == want, (case.name, sent_idx, want)
    sent = quantize(d[want], case.config.encoding)
    got_vals = np.concatenate([e.values for e in entries]) if entries else np.empty(0, np.float32)
    assert f32_bits(got_vals) == f32_bits(sent), case.name
    new_anchor = case.anchor.copy()
    new_anchor[want] = new_anchor[want] + sent
    assert f32_bits(eng.anchor) == f32_bits(new_anchor), case.name
    assert [e.seq for e in entries] == list(range(case.seq_start, case.seq_start + len(entries)))
    packets = eng.pack(entries, [])
    assert all(len(p) <= case.config.max_packet_size for p in packets)
    if case.exact_split:
        assert len(entries) <= 1, "only the split vector may carry several entries"
    else:
        assert len(entries) > 1, "the split vector must split"

    rel = f"generate/{case.name}"
    _dump(
        vectors_dir / f"{rel}.json",
        {
            "description": case.description,
            "requirements": sorted(set(case.requirements)),
            "manifest": case.manifest.to_json(),
            "config": _config_json(case.config),
            "node": {"id": hex16(NODE), "incarnation": hex16(NODE_INC)},
            "seq_start": case.seq_start,
            "fast": False,
            "k": k,
            "active": floats(case.active),
            "active_bits": f32_bits(case.active),
            "anchor": floats(case.anchor),
            "anchor_bits": f32_bits(case.anchor),
            "expected": {
                "exact_split": case.exact_split,
                "entries": [entry_json(e) for e in entries],
                "next_seq": eng.next_seq,
                "anchor": floats(eng.anchor),
                "anchor_bits": f32_bits(eng.anchor),
                "active_bits": f32_bits(active),
            },
        },
    )
    return {
        "id": f"generate.{case.name}",
        "kind": "generate",
        "path": rel,
        "requirements": sorted(set(case.requirements)),
        "expect": {"entries": len(entries), "values": len(sent_idx)},
    }


# ------------------------------------------------------------------------------------------------------
# Receive vectors
# ------------------------------------------------------------------------------------------------------


@dataclass
class RecvCase:
    name: str
    description: str
    requirements: list[str]
    packets: list[bytes]
    config: SyncConfig = field(default_factory=SyncConfig)
    history: list[tuple[int, int, int]] = field(default_factory=list)
    active: NDArray[np.float32] = field(default_factory=lambda: _pattern(7, 13, 6, 16.0))
    anchor: NDArray[np.float32] = field(default_factory=lambda: _pattern(5, 11, 5, 32.0))
    members: list[int] | None = None  # DF-RCV-51 (1.1); None: no membership (every origin)


def ent(
    origin: int,
    inc: int,
    seq: int,
    hops: int,
    idx: Sequence[int],
    vals: Sequence[float],
) -> Entry:
    return Entry(origin, inc, seq, hops, np.array(idx, dtype=np.uint32), _f32(vals))


def pkt(*entries: Entry, sender: int = B, enc: ValueEncoding = F32, fp: bytes = FP) -> bytes:
    return encode_packet(Packet(sender, B_INC if sender == B else C_INC, fp, tuple(entries), enc))


def receive_cases() -> list[RecvCase]:
    other_fp = Manifest.from_named_shapes({"fc.bias": (4,), "fc.weight": (5, 4)}).fingerprint
    return [
        RecvCase(
            "plain_apply",
            "One entry of origin B: applied to active and anchor (f32 adds) and relayed with hops + 1 "
            "and the node as sender.",
            ["DF-RCV-7", "DF-RLY-3", "DF-RLY-4"],
            [pkt(ent(B, B_INC, 1, 0, [0, 5, 23], [0.5, -1.25, 1e-3]))],
        ),
        RecvCase(
            "alpha_damping",
            "alpha 0.5 and 0.3 (not exact in f32): u = fl32(fl32(alpha) * v) is applied and relayed.",
            ["DF-RCV-5", "DF-RLY-3"],
            [pkt(ent(B, B_INC, 3, 2, [1, 2, 3], [1.0, -3.0, 0.1]))],
            config=SyncConfig(alpha=0.3),
        ),
        RecvCase(
            "alpha_half",
            "alpha 0.5: values halve exactly.",
            ["DF-RCV-5"],
            [pkt(ent(B, B_INC, 3, 0, [4, 8], [1.5, -6.0]))],
            config=SyncConfig(alpha=0.5),
        ),
        RecvCase(
            "aggregate_two_origins_one_index",
            "Index 7 gets 1.5 (B, packet 0), 1e8 (C, packet 1) and -1e8 (D, packet 1): summed in f32 in "
            "arrival order from 0, the 1.5 is absorbed (agg = 0), the node applies that sum once.",
            ["DF-RCV-6", "DF-RCV-7"],
            [
                pkt(ent(B, B_INC, 1, 0, [3, 7], [0.25, 1.5])),
                pkt(
                    ent(C, C_INC, 1, 0, [7, 9], [1e8, 2.0]),
                    ent(D, D_INC, 1, 1, [7], [-1e8]),
                    sender=C,
                ),
            ],
        ),
        RecvCase(
            "own_origin_dropped",
            "An entry of the node's own origin relayed back (hops 3) is dropped: never applied, never "
            "relayed; the other entry of the packet is processed.",
            ["DF-RCV-2"],
            [
                pkt(
                    ent(NODE, NODE_INC, 1, 3, [0, 1], [5.0, 5.0]),
                    ent(B, B_INC, 2, 0, [2], [1.0]),
                )
            ],
        ),
        RecvCase(
            "duplicate",
            "(B, seq 3) was accepted before: dropped as duplicate; seq 4 is new.",
            ["DF-RCV-3"],
            [pkt(ent(B, B_INC, 3, 0, [0], [1.0]), ent(B, B_INC, 4, 0, [1], [1.0]))],
            history=[(B, B_INC, 1), (B, B_INC, 2), (B, B_INC, 3)],
        ),
        RecvCase(
            "late_within_window",
            "Window 8, highest seq 10 (9 missing): seq 9 (bit clear) and seq 3 (10 - 8 < 3) are late "
            "arrivals, accepted.",
            ["DF-RCV-3"],
            [
                pkt(ent(B, B_INC, 9, 0, [0], [1.0])),
                pkt(ent(B, B_INC, 3, 0, [1], [2.0])),
            ],
            config=SyncConfig(replay_window=8),
            history=[(B, B_INC, 8), (B, B_INC, 10)],
        ),
        RecvCase(
            "too_old",
            "Window 8, highest seq 10: seq 2 (<= 10 - 8) is dropped as too old.",
            ["DF-RCV-3"],
            [pkt(ent(B, B_INC, 2, 0, [0], [1.0]))],
            config=SyncConfig(replay_window=8),
            history=[(B, B_INC, 10)],
        ),
        RecvCase(
            "restart_new_incarnation",
            "B restarted with a higher incarnation and seq 1: accepted at once.",
            ["DF-RCV-4"],
            [pkt(ent(B, B_INC + 1000, 1, 0, [6], [0.75]))],
            history=[(B, B_INC, s) for s in range(1, 21)],
        ),
        RecvCase(
            "stale_incarnation",
            "max_incarnations 2, B's incarnations 0x...0100 and 0x...0200 tracked: an entry of a lower "
            "incarnation is dropped as stale; a higher one evicts the lowest and is accepted.",
            ["DF-RCV-4"],
            [
                pkt(
                    ent(B, B_INC - 1, 5, 0, [0], [1.0]),
                    ent(B, B_INC + 0x300, 1, 0, [1], [1.0]),
                )
            ],
            config=SyncConfig(max_incarnations=2),
            history=[(B, B_INC, 1), (B, B_INC + 0x100, 1)],
        ),
        RecvCase(
            "hop_limit_not_relayed",
            "hop_limit 4: an entry with hops 4 is applied but not relayed (hops + 1 > hop_limit); the "
            "entry with hops 3 is relayed with hops 4.",
            ["DF-RLY-1"],
            [pkt(ent(B, B_INC, 1, 4, [0], [1.0]), ent(C, C_INC, 1, 3, [1], [1.0]))],
            config=SyncConfig(hop_limit=4),
        ),
        RecvCase(
            "threshold_filtering",
            "relay_threshold 0.01: damped values with |u| < 0.01 are applied but not relayed; an entry "
            "with none left is not relayed at all.",
            ["DF-RLY-2"],
            [
                pkt(
                    ent(B, B_INC, 1, 0, [0, 1, 2, 3], [0.5, 0.001, -0.02, -0.005]),
                    ent(C, C_INC, 1, 0, [4, 5], [0.009, -0.0099]),
                )
            ],
            config=SyncConfig(relay_threshold=0.01),
        ),
        RecvCase(
            "two_entries_same_origin_same_step",
            "B's seqs 7 and 8 in one step (and 7 again in the next packet): both accepted, both applied "
            "and both relayed, in acceptance order; the repeat is a duplicate.",
            ["DF-RCV-3", "DF-RCV-6", "DF-RLY-3"],
            [
                pkt(
                    ent(B, B_INC, 7, 0, [0, 1], [1.0, 2.0]),
                    ent(B, B_INC, 8, 0, [1, 2], [4.0, 8.0]),
                ),
                pkt(ent(B, B_INC, 7, 1, [0, 1], [1.0, 2.0]), sender=C),
            ],
        ),
        RecvCase(
            "rejected_packet_changes_nothing",
            "Packet 0 holds a valid entry (B seq 1) and one with an index >= N: the whole packet is "
            "rejected (INDEX_OUT_OF_RANGE), its valid entry is not applied and leaves no trace in the "
            "window, so packet 1 with B seq 1 is accepted.",
            ["DF-RCV-1"],
            [
                pkt(
                    ent(B, B_INC, 1, 0, [0], [9.0]),
                    ent(B, B_INC, 2, 0, [3, 24], [1.0, 1.0]),
                ),
                pkt(ent(B, B_INC, 1, 0, [0], [1.0])),
            ],
        ),
        RecvCase(
            "fingerprint_mismatch",
            "A packet for another manifest (fc.weight [5, 4]) is rejected with FINGERPRINT_MISMATCH and "
            "changes nothing; the packet after it is processed.",
            ["DF-RCV-1", "DF-MAN-5"],
            [
                pkt(ent(B, B_INC, 1, 0, [0], [9.0]), fp=other_fp),
                pkt(ent(C, C_INC, 1, 0, [1], [1.0]), sender=C),
            ],
        ),
        RecvCase(
            "hop_limit_rejects_packet",
            "An entry with hops > hop_limit makes the whole packet invalid (HOP_LIMIT).",
            ["DF-RCV-1"],
            [pkt(ent(B, B_INC, 1, 0, [0], [1.0]), ent(C, C_INC, 1, 17, [1], [1.0]))],
        ),
        RecvCase(
            "f16_in_f32_relay",
            "An F16 packet is applied with its decoded values; the node (F32 send encoding) relays the "
            "damped values as F32.",
            ["DF-RCV-5", "DF-RLY-3"],
            [pkt(ent(B, B_INC, 1, 0, [0, 1, 2], [1 / 3, -0.1, 1000.5]), enc=F16)],
            config=SyncConfig(alpha=0.75),
        ),
        RecvCase(
            "bf16_relay_rounds_again",
            "The node sends BF16: relayed damped values are rounded to bfloat16 again; the applied values "
            "are the unrounded damped ones.",
            ["DF-RCV-5", "DF-RLY-3"],
            [pkt(ent(B, B_INC, 1, 0, [0, 1], [1.0, -3.0]))],
            config=SyncConfig(alpha=0.3, encoding=BF16),
        ),
        RecvCase(
            "duplicate_within_step",
            "The same entry twice in one step (two senders): the second is a duplicate against the "
            "window as updated by the first.",
            ["DF-RCV-3"],
            [
                pkt(ent(D, D_INC, 5, 1, [10], [2.0])),
                pkt(ent(D, D_INC, 5, 1, [10], [2.0]), sender=C),
            ],
        ),
        *non_finite_result_cases(),
        *membership_cases(),
        *seq_jump_cases(),
    ]


def _set(base: NDArray[np.float32], at: dict[int, float]) -> NDArray[np.float32]:
    out = base.copy()
    for i, v in at.items():
        out[i] = np.float32(v)
    return out


F32_MAX = float(np.finfo(np.float32).max)  # 3.4028234663852886e38


def non_finite_result_cases() -> list[RecvCase]:
    """DF-RCV-50 (added in 1.1): no accepted packet makes the aggregate, the anchor or the active
    weights non-finite; such a packet is refused whole with NON_FINITE_RESULT and changes nothing."""
    req = ["DF-RCV-50", "DF-RCV-1", "DF-RCV-6", "DF-RCV-7", "DF-ERR-50"]
    return [
        RecvCase(
            "non_finite_result_two_entries_one_index",
            "The hostile packet of issue 12 (248 bytes there): two finite values 3e38 at one index (B "
            "and C): their f32 sum is +inf, so the packet is refused whole with NON_FINITE_RESULT. "
            "Packet 1 (an own-origin entry, then two entries of D that overflow index 7 together) is "
            "refused too, and its own-origin drop is not counted. Nothing of either counts (no drop, "
            "no window change): packet 2 carries B's seq 1 again with a sane value and is accepted, "
            "packet 3 carries D's seq 1 with sane values and is accepted.",
            req,
            [
                pkt(ent(B, B_INC, 1, 0, [7], [3e38]), ent(C, C_INC, 1, 1, [7], [3e38])),
                pkt(
                    ent(NODE, NODE_INC, 4, 1, [2], [1.0]),
                    ent(D, D_INC, 1, 0, [7], [3e38]),
                    ent(D, D_INC, 2, 0, [7], [3e38]),
                    sender=C,
                ),
                pkt(ent(B, B_INC, 1, 0, [7], [0.5])),
                pkt(ent(D, D_INC, 1, 0, [7, 8], [0.25, -2.0]), sender=C),
            ],
        ),
        RecvCase(
            "non_finite_result_across_packets",
            "Packet 0 puts -3e38 at index 3 (finite, accepted); packet 1 adds -3e38 at index 3 and 1.0 "
            "at index 4: the running aggregate of the step would be -inf at 3, so packet 1 is refused "
            "whole (its valid value at 4 is not applied either); packet 2 adds +3e38 at 3, accepted "
            "(the aggregate returns near 0).",
            req,
            [
                pkt(ent(B, B_INC, 1, 0, [3], [-3e38])),
                pkt(ent(C, C_INC, 1, 0, [3, 4], [-3e38, 1.0]), sender=C),
                pkt(ent(D, D_INC, 1, 0, [3], [3e38]), sender=C),
            ],
        ),
        RecvCase(
            "non_finite_result_active_only",
            "active[5] = 3e38 (the local model diverged there; anchor[5] is small): a value of 1e38 at "
            "index 5 keeps the aggregate and the anchor finite but active + agg = +inf: refused. The "
            "same value at index 6 is accepted from another packet.",
            req,
            [
                pkt(ent(B, B_INC, 1, 0, [5], [1e38])),
                pkt(ent(C, C_INC, 1, 0, [6], [1e38]), sender=C),
            ],
            active=_set(_pattern(7, 13, 6, 16.0), {5: 3e38}),
        ),
        RecvCase(
            "non_finite_result_anchor_only",
            "anchor[9] = -3e38, active[9] small: -1e38 at index 9 overflows the anchor only: refused. "
            "The replay window of B is unchanged, so B's seq 1 with a sane value in packet 1 is "
            "accepted.",
            req,
            [
                pkt(ent(B, B_INC, 1, 0, [9], [-1e38])),
                pkt(ent(B, B_INC, 1, 0, [9], [1.0])),
            ],
            anchor=_set(_pattern(5, 11, 5, 32.0), {9: -3e38}),
        ),
        RecvCase(
            "finite_result_rounds_to_max",
            "Near the top of the range: anchor[0] = active[0] = the largest finite f32; adding 1e31 "
            "(less than half an ulp, 2^103) rounds back to the largest finite f32: finite, accepted.",
            req,
            [pkt(ent(B, B_INC, 1, 0, [0], [1e31]))],
            active=_set(_pattern(7, 13, 6, 16.0), {0: F32_MAX}),
            anchor=_set(_pattern(5, 11, 5, 32.0), {0: F32_MAX}),
        ),
        RecvCase(
            "subnormal_result_accepted",
            "Subnormal values and results are finite: 1e-45 (the smallest subnormal) and -1e-40 at "
            "indices where active and anchor are 0 give subnormal weights; accepted, applied exactly.",
            req,
            [pkt(ent(B, B_INC, 1, 0, [10, 11], [1e-45, -1e-40]))],
            active=_set(_pattern(7, 13, 6, 16.0), {10: 0.0, 11: 0.0}),
            anchor=_set(_pattern(5, 11, 5, 32.0), {10: 0.0, 11: 0.0}),
        ),
    ]


def membership_cases() -> list[RecvCase]:
    """DF-RCV-51 (added in 1.1): a receiver with a membership tracks only members as origins."""
    req = ["DF-RCV-51", "DF-RCV-10"]
    strangers = [0x5EED_0000_0000_0000 + i for i in range(1, 4097)]
    return [
        RecvCase(
            "not_member_dropped",
            "Membership {B, C}: in one packet, the entries of B and C are accepted and relayed, the "
            "entry of D (a stranger) is dropped as not_member and not tracked; the own-origin entry is "
            "dropped as own_origin first.",
            req,
            [
                pkt(
                    ent(B, B_INC, 1, 0, [0, 1], [0.5, -0.5]),
                    ent(D, D_INC, 1, 0, [1], [100.0]),
                    ent(NODE, NODE_INC, 7, 2, [2], [1.0]),
                    ent(C, C_INC, 1, 1, [2], [0.25]),
                )
            ],
            members=[B, C],
        ),
        RecvCase(
            "not_member_origin_flood",
            "The origin flood of issue 12: one packet with 4,096 entries of 4,096 forged origins "
            "(which fill the default bound of 4,096 tracked origins at a receiver without a "
            "membership, so that every later joiner is dropped as origin_limit), then an entry of "
            "member B, a joiner: with the membership {B, C} every forged entry is dropped as "
            "not_member, none is tracked, and B's entry is accepted.",
            req,
            [
                pkt(
                    *[ent(o, 1, 1, 0, [3], [1e-30]) for o in strangers],
                    ent(B, B_INC, 1, 0, [3], [0.5]),
                )
            ],
            members=[B, C],
        ),
    ]


def seq_jump_cases() -> list[RecvCase]:
    """DF-RCV-52 (added in 1.1): an optional bound on how far a tracked incarnation's seq may jump."""
    req = ["DF-RCV-52", "DF-PAR-50", "DF-RCV-3", "DF-RCV-10"]
    history = [(B, B_INC, s) for s in (1, 2, 3)]
    forged = ent(B, B_INC, 2**64 - 1, 0, [0], [1.0])
    real = [ent(B, B_INC, s, 0, [s], [0.5]) for s in range(4, 14)]
    return [
        RecvCase(
            "forged_seq_max_without_bound",
            "The forged seq of issue 12 without max_seq_jump (1.0 behaviour): B's window is at H = 3; "
            "a forged entry with seq 2^64 - 1 is accepted and moves H there, after which all 10 real "
            "entries of B (seqs 4..13) are dropped as too_old.",
            ["DF-RCV-3", "DF-RCV-52"],
            [pkt(forged), pkt(*real)],
            history=history,
        ),
        RecvCase(
            "forged_seq_max_with_bound",
            "The same packets with max_seq_jump = 1000: the forged entry (2^64 - 1 - 3 > 1000) is "
            "dropped as seq_jump and changes nothing, the 10 real entries are accepted. An entry "
            "exactly max_seq_jump above H (seq 1013 after H = 13) is accepted; a new incarnation of B "
            "starts with any seq (here 5000: there is no H to compare with).",
            req,
            [
                pkt(forged),
                pkt(*real),
                pkt(ent(B, B_INC, 1013, 0, [20], [0.25])),
                pkt(ent(B, B_INC + 1, 5000, 0, [21], [0.25])),
            ],
            config=SyncConfig(max_seq_jump=1000),
            history=history,
        ),
    ]


def _counters_json(eng: Engine) -> dict[str, Any]:
    c = eng.counters.to_json()
    return {
        "packets_accepted": c["packets_accepted"],
        "packets_rejected": c["packets_rejected"],
        "entries_accepted": c["entries_accepted"],
        "entries_relayed": c["entries_relayed"],
        "errors": c["errors"],
        "drops": {
            r: c["drops"][r]
            for r in (
                "own_origin",
                "duplicate",
                "too_old",
                "stale_incarnation",
                "not_member",
                "seq_jump",
            )
        },
    }


def _write_receive(vectors_dir: Path, case: RecvCase) -> dict[str, Any]:
    eng = Engine(MANIFEST, case.config, NODE, NODE_INC, anchor=case.anchor)
    eng.state = ReceiverState.from_history(
        NODE,
        case.history,
        window=case.config.replay_window,
        max_incarnations=case.config.max_incarnations,
    )
    eng.state.max_seq_jump = case.config.max_seq_jump  # DF-RCV-52 (from_history has no jump bound)
    if case.members is not None:
        eng.set_members(case.members)
    active = case.active.copy()
    res = eng.receive(case.packets, active=active)
    res.apply_to(active)
    # DF-RCV-50: finite weights stay finite whatever the packets
    assert bool(np.isfinite(active).all()) and bool(np.isfinite(eng.anchor).all()), case.name
    relay_packets = eng.pack([], res.relay)

    # independent cross-checks: the aggregate equals the in-order f32 sum of the accepted damped values
    alpha = np.float32(case.config.alpha)
    agg: dict[int, np.float32] = {}
    for p_i, buf in enumerate(case.packets):
        if res.outcomes[p_i] is not None:
            continue
        p = decode_packet(buf)
        for e, verdict in zip(p.entries, res.entry_outcomes[p_i], strict=True):
            if verdict is Admission.ACCEPTED:
                for i, v in zip(e.indices.tolist(), e.values, strict=True):
                    agg[i] = np.float32(agg.get(i, np.float32(0.0)) + np.float32(alpha * v))
    assert sorted(agg) == res.indices.tolist(), case.name
    assert f32_bits(_f32([agg[i] for i in sorted(agg)])) == f32_bits(res.values), case.name
    want_active = case.active.copy()
    want_anchor = case.anchor.copy()
    for i, v in agg.items():
        want_active[i] = np.float32(want_active[i] + v)
        want_anchor[i] = np.float32(want_anchor[i] + v)
    assert f32_bits(active) == f32_bits(want_active) and f32_bits(eng.anchor) == f32_bits(
        want_anchor
    )
    assert len(relay_packets) <= 1  # small cases: packing is not what these vectors check

    d = vectors_dir / "receive" / case.name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    names = []
    for i, buf in enumerate(case.packets):
        names.append(f"p{i}.dfp")
        (d / names[-1]).write_bytes(buf)
    rejections = [None if o is None else o.value for o in res.outcomes]
    _dump(
        d / "case.json",
        {
            "description": case.description,
            "requirements": sorted(set(case.requirements)),
            "manifest": MANIFEST.to_json(),
            "config": _config_json(case.config),
            "node": {
                "id": hex16(NODE),
                "incarnation": hex16(NODE_INC),
                "active": floats(case.active),
                "active_bits": f32_bits(case.active),
                "anchor": floats(case.anchor),
                "anchor_bits": f32_bits(case.anchor),
                "accepted": [[hex16(o), hex16(i), s] for o, i, s in case.history],
                **({} if case.members is None else {"members": [hex16(m) for m in case.members]}),
            },
            "packets": names,
            "expected": {
                "rejections": rejections,
                "outcomes": ["ok" if r is None else r for r in rejections],
                "entry_outcomes": [[v.value for v in eo] for eo in res.entry_outcomes],
                "aggregate": {
                    "indices": res.indices.tolist(),
                    "values": floats(res.values),
                    "values_bits": f32_bits(res.values),
                },
                "active": floats(active),
                "active_bits": f32_bits(active),
                "anchor": floats(eng.anchor),
                "anchor_bits": f32_bits(eng.anchor),
                "relay_entries": [entry_json(e) for e in res.relay],
                "relay": [packet_to_json(decode_packet(p)) for p in relay_packets],
                "counters": _counters_json(eng),
            },
        },
    )
    return {
        "id": f"receive.{case.name}",
        "kind": "receive",
        "path": f"receive/{case.name}",
        "requirements": sorted(set(case.requirements)),
        "expect": {"rejections": rejections, "accepted_entries": res.accepted_entries},
    }


# ------------------------------------------------------------------------------------------------------


def build(vectors_dir: Path) -> list[dict[str, Any]]:
    """Write ``generate/`` and ``receive/`` under ``vectors_dir``; return their index rows."""
    for sub in ("generate", "receive"):
        if (vectors_dir / sub).exists():
            shutil.rmtree(vectors_dir / sub)
    rows = [_write_generate(vectors_dir, c) for c in generate_cases()]
    rows += [_write_receive(vectors_dir, c) for c in receive_cases()]
    return rows


if __name__ == "__main__":
    import sys

    out = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "vectors"
    )
    for row in build(out):
        print(row["id"], row["expect"])
