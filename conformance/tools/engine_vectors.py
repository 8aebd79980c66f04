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
from delta_fabric.config import RelayPolicy, SyncConfig
from delta_fabric.engine import Engine, NonFiniteDelta, max_values_per_entry
from delta_fabric.errors import DecodeError
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


def floats(a: NDArray[np.float32]) -> list[float | str]:
    """f32 values as JSON numbers; non-finite ones as ``"nan"``, ``"inf"``, ``"-inf"`` (driver
    protocol, section 4; the ``*_bits`` twin is exact)."""
    out: list[float | str] = []
    with np.errstate(invalid="ignore"):
        vals: list[float] = np.asarray(a, dtype=np.float32).astype(np.float64).tolist()
    for x in vals:
        out.append(
            x if np.isfinite(x) else ("nan" if np.isnan(x) else ("inf" if x > 0 else "-inf"))
        )
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


def _features(encodings: Sequence[ValueEncoding]) -> dict[str, list[str]]:
    """The OPTIONAL features a vector needs (index ``features``, DF-CNF-30): 16-bit encodings."""
    names = {F16: "encoding.f16", BF16: "encoding.bf16"}
    feats = sorted({names[e] for e in encodings if e in names})
    return {"features": feats} if feats else {}


def _packet_encodings(packets: Sequence[bytes]) -> list[ValueEncoding]:
    out = []
    for buf in packets:
        try:
            out.append(decode_packet(buf).encoding)
        except DecodeError:
            pass  # a packet that does not decode needs no encoding support
    return out


def _dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _f32(x: Sequence[float] | NDArray[Any]) -> NDArray[np.float32]:
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def _bits_f32(bits: Sequence[int]) -> NDArray[np.float32]:
    """f32 values from their bit patterns (NaN payloads, signed zeros and subnormals exactly)."""
    return np.array(bits, dtype=np.uint32).view(np.float32)


def _pattern(mul: int, mod: int, off: int, div: float) -> NDArray[np.float32]:
    """Deterministic inexact-looking values: ((i * mul) % mod - off) / div, rounded to f32."""
    i = np.arange(N, dtype=np.int64)
    return _f32(((i * mul) % mod - off) / div)


def _config_json(cfg: SyncConfig) -> dict[str, Any]:
    d = cfg.to_json()
    d.pop("include_buffers")  # the manifest is given: buffers are not a receive/generate concern
    if cfg.relay_policy is RelayPolicy.ALL:
        d.pop("relay_policy")  # 1.1 parameter: written only where a vector sets it
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
    # DF-GEN-9: the generation fails as a whole with this code
    error: str | None = None


def _brute_force(d: NDArray[np.float32], k: int) -> list[int]:
    cand = [i for i in range(d.size) if d[i] != 0 and not np.isnan(d[i])]
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
            SyncConfig.v1_0(ratio=0.25),
        ),
        GenCase(
            "ties",
            "Equal magnitudes of both signs across the k boundary: the lower indices win.",
            ["DF-GEN-3", "DF-GEN-4", "DF-GEN-5"],
            _f32([0.5, -2, 2, 1, -2, 0, 2, -1, 1, 2, -2, 0.5] * 2),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.2),  # k = ceil(4.8) = 5: the 8 values of magnitude 2 tie
        ),
        GenCase(
            "ties_below_a_larger_value",
            "k = ceil(24 * 0.2) = 5: one magnitude 3 and seven tied magnitudes 2 (both signs): the 3 and "
            "the four lowest indices of magnitude 2 are sent (ties are broken after the larger values "
            "are counted, so exactly k values leave).",
            ["DF-GEN-3", "DF-GEN-4", "DF-GEN-5"],
            _f32([0, 2, -2, 0, 3, 2, 0, -2, 2, 0, 2, -2, 0.5, 0, 0, 1] + [0] * 8),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.2),
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
            SyncConfig.v1_0(ratio=0.5),
        ),
        GenCase(
            "no_candidate",
            "active == anchor everywhere: no entry, and the seq is not consumed.",
            ["DF-GEN-8"],
            base_anchor.copy(),
            base_anchor.copy(),
            SyncConfig.v1_0(),
            seq_start=7,
        ),
        GenCase(
            "ratio_product_binary64",
            "N = 100, ratio 0.07: N * ratio in binary64 is 7.000000000000001, so k = 8.",
            ["DF-GEN-2", "DF-GEN-3"],
            _f32([((i * 37) % 101 - 50) / 7.0 for i in range(100)]),
            np.zeros(100, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.07),
            manifest=WIDE_MANIFEST,
        ),
        GenCase(
            "k_smallest_ratio",
            "ratio = 5e-324, the smallest positive binary64 (subnormal): N * ratio = 1.2e-322 is "
            "positive, so k = ceil(1.2e-322) = 1 (DF-GEN-2 erratum 1.1: k = ceil(N * ratio) is always "
            "in [1, N], the 1.0 clamps never act). A node that rounds ratio to f32 (0) or uses floor "
            "or round gets k = 0 and sends nothing. Replaces k_clamped_to_one (ratio 1e-9), whose "
            "name promised a clamp that cannot act.",
            ["DF-GEN-2", "DF-PAR-2"],
            _pattern(5, 17, 8, 3.0),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=5e-324),
        ),
        GenCase(
            "f32_inexact_difference",
            "d = active - anchor rounds in f32; anchor + d != active for some sent indices, so a "
            "residual stays (error feedback is anchor += sent value, not anchor = active).",
            ["DF-GEN-1", "DF-GEN-5"],
            _f32([0.1 * (i + 1) for i in range(N)]),
            _f32([1e8 if i % 4 == 0 else 0.1 * (i + 1) - 0.25 * (i % 4) for i in range(N)]),
            SyncConfig.v1_0(ratio=0.5),
        ),
        GenCase(
            "f16_error_feedback",
            "F16 send encoding: sent values are rounded to binary16 (nearest even, clamped to 65504); the "
            "anchor moves by the decoded f16 value, the rounding error stays in active - anchor.",
            ["DF-GEN-4", "DF-GEN-5"],
            _f32([1e5, -7e4, 1 / 3, -0.1, 1 + 2**-11, 1 + 3 * 2**-11, 2**-20, 3.14159] * 3),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.5, encoding=F16),
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
            SyncConfig.v1_0(ratio=0.5, encoding=BF16),
        ),
        GenCase(
            "nan_never_selected",
            "k = ceil(24 * 0.25) = 6 with 3 NaN deltas (NaN active values) and 9 finite nonzero ones: "
            "NaN is never a candidate (it must not rank above the finite magnitudes, as a sort or "
            "partition that orders NaN last would); the 6 largest finite deltas are sent and the anchor "
            "is unchanged at the NaN indices.",
            ["DF-GEN-3", "DF-GEN-9", "DF-GEN-5"],
            _bits_f32(
                [
                    *[0x7FC00000, 0x40400000, 0, 0xFFC00001, 0xC0A00000, 0x3F800000, 0, 0x7F800001],
                    *[0x3E800000, 0, 0xBF000000, 0x41000000, 0, 0, 0xC1100000, 0],
                    *[0x3D800000, 0, 0, 0, 0, 0, 0, 0],
                ]
            ),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.25),
        ),
        GenCase(
            "nan_all_candidates",
            "k = 12 above the 4 candidates; NaN, +0 and -0 deltas are never sent (a NaN compares false "
            "with every magnitude, so a 'not below the threshold' test would let it in).",
            ["DF-GEN-3", "DF-GEN-9", "DF-GEN-8"],
            _bits_f32(
                [0x7FC00000, 0x80000000, 0x3F800000, 0, 0xFFC00000, 0xC0000000] * 2 + [0] * 12
            ),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.5),
        ),
        GenCase(
            "subnormal_deltas_f32",
            "Subnormal deltas (f32 bits 00000001, 80000003, 007fffff) are candidates like any nonzero "
            "value and are sent bit for bit (no flush to zero); the subtraction of two normals can give "
            "a subnormal (1.5 * 2^-126 - 2^-126).",
            ["DF-GEN-1", "DF-GEN-3", "DF-GEN-4"],
            _bits_f32([0x00000001, 0, 0x80000003, 0, 0x007FFFFF, 0x00C00000, 0, 0] + [0] * 16),
            _bits_f32([0, 0, 0, 0, 0, 0x00800000, 0, 0] + [0] * 16),
            SyncConfig.v1_0(ratio=0.5),
        ),
        GenCase(
            "f16_subnormal_rounding",
            "F16: deltas in and below the binary16 subnormal range round to nearest even "
            "(2^-25 is half the smallest subnormal: ties to 0; 3 * 2^-25 ties up to 2^-23; "
            "-2^-26 gives -0; 2^-14 - 2^-25 rounds up to the smallest normal); a value sent as "
            "+0 or -0 still occupies its selected index and the anchor moves by that zero.",
            ["DF-GEN-4", "DF-GEN-5"],
            _f32(
                [2**-25, 3 * 2**-25, -(2**-26), 2**-14 - 2**-25, 5 * 2**-25, -(2**-24), 2**-15, 0]
                + [0] * 16
            ),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.5, encoding=F16),
        ),
        GenCase(
            "bf16_subnormal_rounding",
            "BF16 keeps the upper 16 bits of f32 with round to nearest even on the lower 16, subnormals "
            "included (bits 00008000 tie to 0000, 00018000 tie up to 00020000, 80000001 gives -0, "
            "007fffff rounds up to the smallest normal 00800000).",
            ["DF-GEN-4", "DF-GEN-5"],
            _bits_f32(
                [0x00008000, 0x00018000, 0x80000001, 0x007FFFFF, 0x00008001, 0x807F8000, 0, 0]
                + [0] * 16
            ),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.5, encoding=BF16),
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
            SyncConfig.v1_0(ratio=1.0, max_packet_size=320),
            seq_start=41,
            exact_split=False,
        ),
        # DF-GEN-6 (erratum 1.1): the trigger is the size estimate 288 + 8 n of a one-entry packet
        GenCase(
            "split_at_estimate_limit",
            "k = 24, max_packet_size 480 = 160 + 128 + 8 * 24: the estimate equals the limit, so the "
            "entry is not split (the boundary of DF-GEN-6 is inclusive).",
            ["DF-GEN-6", "DF-GEN-30"],
            _pattern(3, 31, 15, 4.0) + _f32([0.0625] * N),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=1.0, max_packet_size=480),
            seq_start=41,
        ),
        GenCase(
            "split_one_past_estimate_limit",
            "k = 24, max_packet_size 479: the estimate 480 is one byte past the limit, so the origin "
            "splits into pieces of at most floor((479 - 288) / 8) = 23 values, although the 24 values "
            "encode to about 360 bytes (a node that splits on the actual size does not split).",
            ["DF-GEN-6", "DF-GEN-30"],
            _pattern(3, 31, 15, 4.0) + _f32([0.0625] * N),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=1.0, max_packet_size=479),
            seq_start=41,
            exact_split=False,
        ),
        GenCase(
            "split_f16_pieces_fit_as_f32",
            "F16, k = 24, max_packet_size 340: the 24 F16 values fit one packet (about 320 bytes) but "
            "the same entry re-encoded as F32 by a relay would not (about 360 bytes). The estimate "
            "(8 bytes per value for every encoding) splits into pieces of at most 6 values, each of "
            "which a relay can re-encode as F32 (DF-GEN-11).",
            ["DF-GEN-6", "DF-GEN-11", "DF-GEN-30"],
            _pattern(3, 31, 15, 4.0) + _f32([0.0625] * N),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=1.0, max_packet_size=340, encoding=F16),
            seq_start=41,
            exact_split=False,
        ),
        GenCase(
            "infinite_delta_fails",
            "d[5] = +inf (active[5] = +inf): the generation fails as a whole (DF-GEN-9): no entry, the "
            "seq is not consumed, the anchor is unchanged; the driver answers ok with "
            '"error": "NON_FINITE" (erratum 1.1, driver protocol 5.4).',
            ["DF-GEN-9", "DF-GEN-31"],
            _f32([np.inf if i == 5 else 0.25 * (i + 1) for i in range(N)]),
            np.zeros(N, dtype=np.float32),
            SyncConfig.v1_0(ratio=0.25),
            seq_start=9,
            error="NON_FINITE",
        ),
        GenCase(
            "nan_delta_not_selected",
            "d[3] = NaN and d[7] = -inf - (-inf) = NaN are never candidates (DF-GEN-9), however large k "
            "is; the other deltas are sent.",
            ["DF-GEN-9", "DF-GEN-3"],
            _f32(
                [
                    np.nan if i == 3 else (-np.inf if i == 7 else 0.5 * (i % 5) - 1.0)
                    for i in range(N)
                ]
            ),
            _f32([-np.inf if i == 7 else 0.0 for i in range(N)]),
            SyncConfig.v1_0(ratio=1.0),
        ),
        GenCase(
            "average_over_3",
            "average_over = 3 (DF-GEN-70, added in 1.1): the sent values are "
            "fl32(fl32(1/3) * d), the anchor moves by them, and the active weights move by "
            "fl32(v' - d) at the sent indices (they keep a third of their progress there).",
            ["DF-GEN-4", "DF-GEN-5", "DF-GEN-70", "DF-PAR-70"],
            base_anchor + _pattern(11, 29, 14, 7.0),
            base_anchor,
            SyncConfig.v1_0(ratio=0.25, average_over=3),
        ),
        GenCase(
            "average_over_3_f16",
            "average_over = 3 with the F16 send encoding: the scaled delta is rounded to binary16; "
            "the correction uses the decoded value, so the rounding error is not carried over.",
            ["DF-GEN-4", "DF-GEN-5", "DF-GEN-70", "DF-PAR-70"],
            base_anchor + _pattern(11, 29, 14, 7.0),
            base_anchor,
            SyncConfig.v1_0(ratio=0.25, average_over=3, encoding=F16),
        ),
    ]
    return cases


def _write_generate(vectors_dir: Path, case: GenCase) -> dict[str, Any]:
    eng = Engine(case.manifest, case.config, NODE, NODE_INC, anchor=case.anchor)
    eng.next_seq = case.seq_start
    k = case.config.num_selected(case.manifest.num_params)
    active = case.active.copy()
    if case.error is not None:
        return _write_failed_generate(vectors_dir, case, eng, k)
    entries = eng.generate(active)
    # independent cross-check of the engine's result
    with np.errstate(invalid="ignore"):  # NaN inputs of nan_* cases
        d = case.active - case.anchor
    want = _brute_force(d, k)
    sent_idx = [int(i) for e in entries for i in e.indices]
    assert sent_idx == want, (case.name, sent_idx, want)
    w = np.float32(case.config.send_weight_f32)
    scaled = d[want] * w if case.config.average_over > 1 else d[want]
    sent = quantize(scaled.astype(np.float32), case.config.encoding)
    got_vals = np.concatenate([e.values for e in entries]) if entries else np.empty(0, np.float32)
    assert f32_bits(got_vals) == f32_bits(sent), case.name
    new_anchor = case.anchor.copy()
    new_anchor[want] = new_anchor[want] + sent
    assert f32_bits(eng.anchor) == f32_bits(new_anchor), case.name
    assert [e.seq for e in entries] == list(range(case.seq_start, case.seq_start + len(entries)))
    ci, cv = eng.last_correction
    if case.config.average_over > 1:  # DF-GEN-70: active += fl32(v' - d) at the sent indices
        assert ci.tolist() == want and f32_bits(cv) == f32_bits(sent - d[want]), case.name
        active[ci] = active[ci] + cv
    else:
        assert ci.size == 0, case.name
    packets = eng.pack(entries, [])
    assert all(len(p) <= case.config.max_packet_size for p in packets)
    per = max_values_per_entry(case.config.max_packet_size)
    assert all(e.indices.size <= per for e in entries)
    assert (len(entries) > 1) == (len(want) > per), "DF-GEN-6: split exactly when n > n_max"
    if case.exact_split:
        assert len(entries) <= 1, "split points are implementation-defined: exact_split false"

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
                **({} if case.exact_split else {"max_entry_values": per}),
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
        **_features([case.config.encoding]),
    }


def _write_failed_generate(vectors_dir: Path, case: GenCase, eng: Engine, k: int) -> dict[str, Any]:
    """DF-GEN-9: a generation that fails changes nothing; the vector expects the error code."""
    before = eng.anchor.copy()
    try:
        eng.generate(case.active.copy())
    except NonFiniteDelta:
        pass
    else:  # pragma: no cover - the generator's own check
        raise AssertionError(f"{case.name}: generation did not fail")
    assert eng.next_seq == case.seq_start and f32_bits(eng.anchor) == f32_bits(before)
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
                "exact_split": True,
                "error": case.error,
                "entries": [],
                "next_seq": case.seq_start,
                "anchor": floats(before),
                "anchor_bits": f32_bits(before),
                "active_bits": f32_bits(case.active),
            },
        },
    )
    return {
        "id": f"generate.{case.name}",
        "kind": "generate",
        "path": rel,
        "requirements": sorted(set(case.requirements)),
        "expect": {"entries": 0, "values": 0, "error": case.error},
        **_features([case.config.encoding]),
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
    config: SyncConfig = field(default_factory=SyncConfig.v1_0)
    history: list[tuple[int, int, int]] = field(default_factory=list)
    active: NDArray[np.float32] = field(default_factory=lambda: _pattern(7, 13, 6, 16.0))
    anchor: NDArray[np.float32] = field(default_factory=lambda: _pattern(5, 11, 5, 32.0))
    # how many relay packets the case publishes (the packing vectors of DF-RLY-3/-6 publish several)
    relay_packets: int = 1
    members: list[int] | None = None  # DF-RCV-51 (1.1); None: no membership (every origin)
    now_us: int | None = None  # DF-RCV-175 (1.1): the receiver's clock; None: no reading
    # DF-RCV-178 (1.1): per history entry, the clock reading of its acceptance (None: without one),
    # written as the 4th member of that ``accepted`` element; None: no entry has one
    history_at: list[int | None] | None = None


def ent(
    origin: int,
    inc: int,
    seq: int,
    hops: int,
    idx: Sequence[int],
    vals: Sequence[float] | NDArray[np.float32],
) -> Entry:
    return Entry(origin, inc, seq, hops, np.array(idx, dtype=np.uint32), _f32(vals))


def pkt(
    *entries: Entry,
    sender: int = B,
    enc: ValueEncoding = F32,
    fp: bytes = FP,
    heard: Sequence[int] | None = None,
) -> bytes:
    return encode_packet(
        Packet(
            sender,
            B_INC if sender == B else C_INC,
            fp,
            tuple(entries),
            enc,
            heard=None if heard is None else tuple(heard),
        )
    )


F32_BELOW_QUARTER = float(np.nextafter(np.float32(0.25), np.float32(0)))
U64_MAX = (1 << 64) - 1


def _signed_zero_base() -> NDArray[np.float32]:
    """The receive pattern with -0 at indices 3, 5 and 8."""
    a = _pattern(7, 13, 6, 16.0)
    a[[3, 5, 8]] = np.float32(-0.0)
    return a


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
            config=SyncConfig.v1_0(alpha=0.3),
        ),
        RecvCase(
            "alpha_half",
            "alpha 0.5: values halve exactly.",
            ["DF-RCV-5"],
            [pkt(ent(B, B_INC, 3, 0, [4, 8], [1.5, -6.0]))],
            config=SyncConfig.v1_0(alpha=0.5),
        ),
        RecvCase(
            "aggregate_two_origins_one_index",
            "Index 7 gets 1.5 (B, packet 0), 1e8 (C, packet 1) and -1e8 (D, packet 1): summed in f32 in "
            "arrival order from 0, the 1.5 is absorbed (agg = 0), the node applies that sum once.",
            ["DF-RCV-6", "DF-RCV-7", "DF-RCV-30"],
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
            config=SyncConfig.v1_0(replay_window=8),
            history=[(B, B_INC, 8), (B, B_INC, 10)],
        ),
        RecvCase(
            "too_old",
            "Window 8, highest seq 10: seq 2 (<= 10 - 8) is dropped as too old.",
            ["DF-RCV-3"],
            [pkt(ent(B, B_INC, 2, 0, [0], [1.0]))],
            config=SyncConfig.v1_0(replay_window=8),
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
            config=SyncConfig.v1_0(max_incarnations=2),
            history=[(B, B_INC, 1), (B, B_INC + 0x100, 1)],
        ),
        RecvCase(
            "hop_limit_not_relayed",
            "hop_limit 4: an entry with hops 4 is applied but not relayed (hops + 1 > hop_limit); the "
            "entry with hops 3 is relayed with hops 4.",
            ["DF-RLY-1"],
            [pkt(ent(B, B_INC, 1, 4, [0], [1.0]), ent(C, C_INC, 1, 3, [1], [1.0]))],
            config=SyncConfig.v1_0(hop_limit=4),
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
            config=SyncConfig.v1_0(relay_threshold=0.01),
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
            ["DF-RCV-1", "DF-RCV-30"],
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
            config=SyncConfig.v1_0(alpha=0.75),
        ),
        RecvCase(
            "bf16_relay_rounds_again",
            "The node sends BF16: relayed damped values are rounded to bfloat16 again; the applied values "
            "are the unrounded damped ones.",
            ["DF-RCV-5", "DF-RLY-3"],
            [pkt(ent(B, B_INC, 1, 0, [0, 1], [1.0, -3.0]))],
            config=SyncConfig.v1_0(alpha=0.3, encoding=BF16),
        ),
        # relay policy NEEDED (1.1, spec section 8.6)
        RecvCase(
            "relay_needed_mesh",
            "Relay policy NEEDED in a full mesh: B advertises that it hears C and the node, C that it "
            "hears B and the node. B's entry is not relayed (its only other neighbour C hears B), nor "
            "is C's: nothing is published, relay_suppressed = 2.",
            ["DF-PAR-60", "DF-RLY-60", "DF-RLY-61", "DF-RLY-62", "DF-PKT-60"],
            [
                pkt(ent(B, B_INC, 1, 0, [0, 5], [0.5, -1.0]), heard=[NODE, C]),
                pkt(ent(C, C_INC, 1, 0, [5, 9], [0.25, 2.0]), sender=C, heard=[NODE, B]),
            ],
            config=SyncConfig.v1_0(relay_policy=RelayPolicy.NEEDED),
        ),
        RecvCase(
            "relay_needed_line",
            "Relay policy NEEDED on a line B - node - C: B and C each advertise only the node. Both "
            "entries are relayed (each for the other neighbour) in one packet that carries the "
            "node's advertisement heard = [B, C] (ascending).",
            ["DF-PAR-60", "DF-RLY-60", "DF-RLY-61", "DF-RLY-3", "DF-PKT-60"],
            [
                pkt(ent(B, B_INC, 1, 0, [0, 5], [0.5, -1.0]), heard=[NODE]),
                pkt(ent(C, C_INC, 1, 0, [5, 9], [0.25, 2.0]), sender=C, heard=[NODE]),
            ],
            config=SyncConfig.v1_0(relay_policy=RelayPolicy.NEEDED),
        ),
        RecvCase(
            "relay_needed_v10_neighbour",
            "Relay policy NEEDED with a 1.0 neighbour: C's packet carries no advertisement, so C is "
            "treated as lacking every entry and B's entry is relayed for it; C's entry is not "
            "relayed, since B advertises that it hears C.",
            ["DF-RLY-60", "DF-RLY-62"],
            [
                pkt(ent(B, B_INC, 1, 0, [0, 5], [0.5, -1.0]), heard=[NODE, C]),
                pkt(ent(C, C_INC, 1, 0, [5, 9], [0.25, 2.0]), sender=C),
            ],
            config=SyncConfig.v1_0(relay_policy=RelayPolicy.NEEDED),
        ),
        RecvCase(
            "relay_needed_copy_heard",
            "Relay policy NEEDED: D's entry arrives from B and, as a duplicate, from C in one step; "
            "neither advertises D. Both neighbours sent a copy, so the entry is not relayed.",
            ["DF-RLY-60"],
            [
                pkt(ent(D, D_INC, 4, 1, [3], [1.5]), heard=[NODE]),
                pkt(ent(D, D_INC, 4, 1, [3], [1.5]), sender=C, heard=[NODE]),
            ],
            config=SyncConfig.v1_0(relay_policy=RelayPolicy.NEEDED),
        ),
        RecvCase(
            "relay_needed_refused_packet_not_heard",
            "Relay policy NEEDED: B's first packet advertises [X] and carries B's entry, C's packet "
            "advertises [X, B] and carries C's entry; B's second packet advertises [X, C] but is refused "
            "with NON_FINITE_RESULT (two entries of D at one index overflow). A refused packet updates "
            "no advertisement (DF-RLY-62), so B's stays [X]: C's entry is relayed for B. B's entry is "
            "not relayed: its only other neighbour, C, hears B.",
            ["DF-RLY-60", "DF-RLY-61", "DF-RLY-62", "DF-RCV-50"],
            [
                pkt(ent(B, B_INC, 1, 0, [2], [0.5]), heard=[NODE]),
                pkt(ent(C, C_INC, 1, 0, [4], [0.25]), sender=C, heard=[NODE, B]),
                pkt(
                    ent(D, D_INC, 1, 1, [7], [3e38]),
                    ent(D, D_INC, 2, 1, [7], [3e38]),
                    heard=[NODE, C],
                ),
            ],
            config=SyncConfig.v1_0(relay_policy=RelayPolicy.NEEDED),
        ),
        RecvCase(
            "relay_needed_refused_copy",
            "Relay policy NEEDED: as relay_needed_refused_packet_not_heard, but B's second packet "
            "carries no advertisement and a copy of C's entry next to the two overflowing entries of D. "
            "The packet is refused (NON_FINITE_RESULT), so its copy does not count (DF-RLY-60 (b) "
            "counts only accepted packets): C's entry is still relayed for B.",
            ["DF-RLY-60", "DF-RCV-50"],
            [
                pkt(ent(B, B_INC, 1, 0, [2], [0.5]), heard=[NODE]),
                pkt(ent(C, C_INC, 1, 0, [4], [0.25]), sender=C, heard=[NODE, B]),
                pkt(
                    ent(C, C_INC, 1, 1, [4], [0.25]),
                    ent(D, D_INC, 1, 1, [7], [3e38]),
                    ent(D, D_INC, 2, 1, [7], [3e38]),
                ),
            ],
            config=SyncConfig.v1_0(relay_policy=RelayPolicy.NEEDED),
        ),
        RecvCase(
            "relay_threshold_boundary",
            "relay_threshold 0.25 (exact in f32), alpha 1: |u| == 0.25 passes (>=), the f32 just below "
            "0.25 does not; the other entry has only values below the threshold and is not relayed.",
            ["DF-RLY-5", "DF-RLY-2"],
            [
                pkt(
                    ent(B, B_INC, 1, 0, [0, 1, 2, 3, 4], [0.25, -0.25, F32_BELOW_QUARTER, -0.5, 0]),
                    ent(C, C_INC, 1, 0, [5, 6], [F32_BELOW_QUARTER, -F32_BELOW_QUARTER]),
                )
            ],
            config=SyncConfig.v1_0(relay_threshold=0.25),
        ),
        RecvCase(
            "relay_threshold_binary64",
            "relay_threshold 0.1000000015 lies just above fl32(0.1) = 0.100000001490116119...: the "
            "damped value fl32(0.1) is compared exactly (as binary64) and is not relayed; comparing with "
            "fl32(relay_threshold) (which equals fl32(0.1)) would wrongly relay it. 0.2 passes.",
            ["DF-RLY-5", "DF-RLY-2"],
            [pkt(ent(B, B_INC, 1, 0, [0, 1, 2], [0.1, -0.1, 0.2]))],
            config=SyncConfig.v1_0(relay_threshold=0.1000000015),
        ),
        RecvCase(
            "signed_zero_aggregate",
            "-0 values (relay_threshold 0): the aggregate starts from +0, so +0 + -0 = +0 at index 3 "
            "(one entry) and at index 5 (two entries of -0); active and anchor hold -0 there and become "
            "+0 (-0 + +0 = +0). The relay entries carry the damped values, -0 bit for bit.",
            ["DF-RCV-6", "DF-RCV-7", "DF-RLY-5"],
            [
                pkt(ent(B, B_INC, 1, 0, [3, 5], [-0.0, -0.0])),
                pkt(ent(C, C_INC, 1, 0, [5, 8], [-0.0, -0.0]), sender=C),
            ],
            config=SyncConfig.v1_0(relay_threshold=0.0),
            active=_signed_zero_base(),
            anchor=_signed_zero_base(),
        ),
        RecvCase(
            "signed_zero_single_entry",
            "One entry of -0 values in the step (relay_threshold 0): the aggregate is +0 even though no "
            "sum of two values occurs (an implementation that copies the only entry's values keeps -0).",
            ["DF-RCV-6", "DF-RCV-7"],
            [pkt(ent(B, B_INC, 1, 0, [3, 8], [-0.0, -0.0]))],
            config=SyncConfig.v1_0(relay_threshold=0.0),
            active=_signed_zero_base(),
            anchor=_signed_zero_base(),
        ),
        RecvCase(
            "subnormal_damping",
            "alpha 0.5 on subnormal and tiny values: fl32 rounds to nearest even without flushing to "
            "zero (bits 00000003 * 0.5 ties to 00000002, 00000001 * 0.5 ties to +0, 80000005 * 0.5 to "
            "80000002, the smallest normal halves to a subnormal), relay_threshold 0 keeps them all.",
            ["DF-RCV-5", "DF-RCV-6", "DF-RLY-5"],
            [
                pkt(
                    ent(
                        B,
                        B_INC,
                        1,
                        0,
                        [0, 1, 2, 3, 4],
                        _bits_f32([0x00000003, 0x00000001, 0x80000005, 0x00800000, 0x00000002]),
                    )
                )
            ],
            config=SyncConfig.v1_0(alpha=0.5, relay_threshold=0.0),
            active=np.zeros(N, dtype=np.float32),
            anchor=np.zeros(N, dtype=np.float32),
        ),
        RecvCase(
            "window_slides_by_width",
            "Window 8 holding seqs 3..10 (H = 10); seq 18 slides it by exactly W (every old bit leaves), "
            "then 10 is too old (10 <= 18 - 8), 11 is a late arrival, 11 again a duplicate, 17 late, 12 "
            "late, and 18 again a duplicate: arrivals out of order within one step.",
            ["DF-RCV-3", "DF-RCV-12"],
            [
                pkt(ent(B, B_INC, 18, 0, [0], [1.0]), ent(B, B_INC, 10, 0, [1], [1.0])),
                pkt(
                    ent(B, B_INC, 11, 0, [2], [1.0]),
                    ent(B, B_INC, 11, 1, [3], [1.0]),
                    ent(B, B_INC, 17, 0, [4], [1.0]),
                    ent(B, B_INC, 12, 0, [5], [1.0]),
                    ent(B, B_INC, 18, 1, [6], [1.0]),
                    sender=C,
                ),
            ],
            config=SyncConfig.v1_0(replay_window=8),
            history=[(B, B_INC, s) for s in range(3, 11)],
        ),
        RecvCase(
            "window_slides_less_than_width",
            "Window 8, H = 10 with seqs 4, 6 and 10 seen: seq 13 slides the window by 3 < W and the "
            "seen bits move with it: 6 and 10 stay duplicates, 5 (= 13 - 8) is too old, 7 and 12 are "
            "late arrivals.",
            ["DF-RCV-3"],
            [
                pkt(
                    ent(B, B_INC, 13, 0, [0], [1.0]),
                    ent(B, B_INC, 6, 0, [1], [1.0]),
                    ent(B, B_INC, 5, 0, [2], [1.0]),
                    ent(B, B_INC, 7, 0, [3], [1.0]),
                    ent(B, B_INC, 10, 0, [4], [1.0]),
                    ent(B, B_INC, 12, 0, [5], [1.0]),
                )
            ],
            config=SyncConfig.v1_0(replay_window=8),
            history=[(B, B_INC, 4), (B, B_INC, 6), (B, B_INC, 10)],
        ),
        RecvCase(
            "window_u64_top",
            "Window 8 near the top of the seq range: seq 2^64 - 1 is accepted, then 2^64 - 9 is too "
            "old, 2^64 - 8 and 2^64 - 2 are late arrivals and 2^64 - 1 a duplicate. seq + W overflows "
            "64 bits here: the classification must be done without overflow.",
            ["DF-RCV-3"],
            [
                pkt(
                    ent(B, B_INC, U64_MAX, 0, [0], [1.0]),
                    ent(B, B_INC, U64_MAX - 8, 0, [1], [1.0]),
                    ent(B, B_INC, U64_MAX - 7, 0, [2], [1.0]),
                    ent(B, B_INC, U64_MAX, 1, [3], [1.0]),
                    ent(B, B_INC, U64_MAX - 1, 0, [4], [1.0]),
                )
            ],
            config=SyncConfig.v1_0(replay_window=8),
            history=[(B, B_INC, 1), (B, B_INC, 2)],
        ),
        RecvCase(
            "window_below_width",
            "Window 8 with H = 3 (fewer seqs than W so far): seqs 1 and 2 are late arrivals (H - W "
            "is negative: nothing is too old), 3 is a duplicate.",
            ["DF-RCV-3"],
            [
                pkt(
                    ent(B, B_INC, 2, 0, [0], [1.0]),
                    ent(B, B_INC, 1, 0, [1], [1.0]),
                    ent(B, B_INC, 3, 0, [2], [1.0]),
                )
            ],
            config=SyncConfig.v1_0(replay_window=8),
            history=[(B, B_INC, 3)],
        ),
        RecvCase(
            "incarnation_evicts_lowest",
            "max_incarnations 3, B's incarnations tracked in the order 0x...0300, 0x...0100, 0x...0200: "
            "0x...0150 is above the lowest (0x...0100) and evicts it (the lowest, not the first "
            "tracked); then 0x...0100 is stale, 0x...0300 seq 1 a duplicate (still tracked), 0x...0120 "
            "stale (below 0x...0150), 0x...0400 evicts 0x...0150, whose next entry is then stale.",
            ["DF-RCV-4"],
            [
                pkt(
                    ent(B, B_INC + 0x50, 1, 0, [0], [1.0]),
                    ent(B, B_INC, 2, 0, [1], [1.0]),
                    ent(B, B_INC + 0x200, 1, 0, [2], [1.0]),
                    ent(B, B_INC + 0x20, 1, 0, [3], [1.0]),
                    ent(B, B_INC + 0x300, 5, 0, [4], [1.0]),
                    ent(B, B_INC + 0x50, 2, 0, [5], [1.0]),
                )
            ],
            config=SyncConfig.v1_0(max_incarnations=3),
            history=[(B, B_INC + 0x200, 1), (B, B_INC, 1), (B, B_INC + 0x100, 1)],
        ),
        RecvCase(
            "relay_multi_packet",
            "max_packet_size 600: four relay entries of 10 values do not fit one packet by the size "
            "estimate (160 + 128 + 8 n per entry, DF-RLY-30): they are packed greedily in "
            "acceptance order into packets of two entries; the own-origin entry between them is not "
            "relayed and does not break the order.",
            ["DF-RLY-3", "DF-RLY-4", "DF-RLY-7"],
            [
                pkt(
                    ent(B, B_INC, 1, 0, list(range(0, 10)), [0.5] * 10),
                    ent(NODE, NODE_INC, 1, 2, [0], [1.0]),
                    ent(C, C_INC, 1, 0, list(range(10, 20)), [-0.25] * 10),
                ),
                pkt(
                    ent(D, D_INC, 1, 1, list(range(5, 15)), [2.0] * 10),
                    ent(B, B_INC, 2, 0, list(range(14, 24)), [1.5] * 10),
                    sender=C,
                ),
            ],
            config=SyncConfig.v1_0(max_packet_size=600),
            relay_packets=2,
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
        # DF-RLY-3 / DF-RLY-6 (erratum 1.1): packing by the estimate 160 + sum(128 + 8 n), fit alone
        # by the actual size, a dropped relay entry counted in entries_relayed and
        # relay_dropped_oversize
        RecvCase(
            "relay_packing_at_estimate_limit",
            "Relay entries of 10 and 5 values, max_packet_size 536 = 160 + (128 + 80) + (128 + 40): "
            "the estimate equals the limit, so both go into one packet.",
            ["DF-RLY-3", "DF-RLY-30"],
            [
                pkt(ent(B, B_INC, 1, 0, list(range(10)), [0.5] * 10)),
                pkt(ent(C, C_INC, 1, 0, list(range(10, 15)), [0.25] * 5), sender=C),
            ],
            config=SyncConfig.v1_0(max_packet_size=536),
        ),
        RecvCase(
            "relay_packing_one_past_estimate_limit",
            "The same relay entries with max_packet_size 535: the estimate 536 is one byte past the "
            "limit, so the second entry starts a second packet (together they encode to about 330 "
            "bytes: a node that packs by the actual size makes one packet).",
            ["DF-RLY-3", "DF-RLY-30"],
            [
                pkt(ent(B, B_INC, 1, 0, list(range(10)), [0.5] * 10)),
                pkt(ent(C, C_INC, 1, 0, list(range(10, 15)), [0.25] * 5), sender=C),
            ],
            config=SyncConfig.v1_0(max_packet_size=535),
            relay_packets=2,
        ),
        RecvCase(
            "relay_alone_when_estimate_exceeds",
            "max_packet_size 400 (estimate room: 14 values); B's entry of 20 F32 values (from a node "
            "that split by the actual size, about 330 bytes) has the estimate 448 > 400 but fits "
            "alone: it is relayed alone in its own packet, between C's and D's entries, which are "
            "not packed with it.",
            ["DF-RLY-3", "DF-RLY-6", "DF-RLY-30"],
            [
                pkt(ent(C, C_INC, 1, 0, [0, 1, 2], [1.0, 2.0, 3.0]), sender=C),
                pkt(ent(B, B_INC, 1, 0, list(range(20)), [0.125] * 20)),
                pkt(ent(D, D_INC, 1, 1, [23], [4.0]), sender=C),
            ],
            config=SyncConfig.v1_0(max_packet_size=400),
            relay_packets=3,
        ),
        RecvCase(
            "relay_dropped_oversize",
            "max_packet_size 340, node sends F32: B's F16 entry of 24 values arrives in a packet of "
            "about 320 bytes; re-encoded as F32 it needs about 360, so it is applied, counted in "
            "entries_relayed (produced) and in relay_dropped_oversize, and not published; C's entry "
            "is relayed.",
            ["DF-RLY-6", "DF-RLY-30", "DF-RCV-10", "DF-RCV-30"],
            [
                pkt(ent(B, B_INC, 1, 0, list(range(N)), [0.5] * N), enc=F16),
                pkt(ent(C, C_INC, 1, 0, [3], [1.0]), sender=C),
            ],
            config=SyncConfig.v1_0(max_packet_size=340),
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
            config=SyncConfig.v1_0(max_seq_jump=1000),
            history=history,
        ),
    ]


def _counters_json(eng: Engine) -> dict[str, Any]:
    c = eng.counters.to_json()
    return {
        "packets_received": c["packets_received"],  # every packet of the step, rejected ones too
        "packets_accepted": c["packets_accepted"],
        "packets_rejected": c["packets_rejected"],
        "entries_accepted": c["entries_accepted"],
        "entries_relayed": c["entries_relayed"],
        "values_applied": c["values_applied"],  # indices of the step's aggregate (DF-RCV-6)
        "relay_dropped_oversize": eng.relay_dropped_oversize,
        **({"relay_suppressed": c["relay_suppressed"]} if c["relay_suppressed"] else {}),
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
        }
        # DF-PAR-30 (1.1): written only where a vector reaches the origin bound
        | ({"origin_limit": c["drops"]["origin_limit"]} if c["drops"]["origin_limit"] else {})
        # DF-RCV-175 (1.1): written only where a vector sets a clock
        | (
            {"future_incarnation": c["drops"]["future_incarnation"]}
            if c["drops"]["future_incarnation"]
            else {}
        )
        | (
            {"live_incarnation": c["drops"]["live_incarnation"]}
            if c["drops"]["live_incarnation"]
            else {}
        ),
    }


def _accepted_json(case: RecvCase) -> list[list[Any]]:
    """The vector's ``accepted`` history: ``[origin, incarnation, seq]``, and in 1.1 a 4th member,
    the clock reading of the acceptance (hex16, DF-RCV-178), for the entries that have one."""
    times = case.history_at or [None] * len(case.history)
    assert len(times) == len(case.history), case.name
    return [
        [hex16(o), hex16(i), s, *([] if at is None else [hex16(at)])]
        for (o, i, s), at in zip(case.history, times, strict=True)
    ]


def _write_receive(vectors_dir: Path, case: RecvCase) -> dict[str, Any]:
    eng = Engine(MANIFEST, case.config, NODE, NODE_INC, anchor=case.anchor)
    eng.state = ReceiverState.from_history(
        NODE,
        case.history,
        window=case.config.replay_window,
        max_incarnations=case.config.max_incarnations,
        max_origins=case.config.max_origins,  # DF-PAR-30 (1.1)
        accepted_at=case.history_at,  # DF-RCV-178 (1.1)
    )
    eng.state.max_seq_jump = case.config.max_seq_jump  # DF-RCV-52 (from_history has no jump bound)
    eng.state.max_incarnation_ahead = case.config.max_incarnation_ahead  # DF-RCV-175 (nor this one)
    eng.state.incarnation_grace = case.config.incarnation_grace  # DF-RCV-178
    if case.members is not None:
        eng.set_members(case.members)
    if case.now_us is not None:
        eng.set_now_us(case.now_us)  # DF-RCV-175 (1.1)
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
    want_packets = (
        case.relay_packets if res.relay and len(res.relay) > eng.relay_dropped_oversize else 0
    )
    assert len(relay_packets) == want_packets, (case.name, len(relay_packets))
    assert all(len(p) <= case.config.max_packet_size for p in relay_packets)

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
                "accepted": _accepted_json(case),
                **({} if case.members is None else {"members": [hex16(m) for m in case.members]}),
                **({} if case.now_us is None else {"now_us": hex16(case.now_us)}),
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
        **_features([case.config.encoding, *_packet_encodings(case.packets)]),
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
