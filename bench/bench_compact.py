#!/usr/bin/env python3
"""Bytes per (index, value) pair of one packet, 1.0 encodings against the compact encodings of the
proposal spec/proposals/compact-encodings.md.

Usage: .venv/bin/python bench/bench_compact.py [--params N] [--densities 0.01,0.05,0.2]

For each density, one own entry of ``k = density * N`` values (the top-k of a Gaussian delta, so the
indices are spread as a real selection spreads them) is put into one packet and encoded for real:
F32 and F16 with the 1.0 encoder (`delta_fabric.wire.encode_packet`), and the proposal's layouts with a
FlatBuffers builder (the proposed fields appended to the 1.0 tables: Entry ``packed_indices`` [ubyte],
``values8`` [byte], ``scale`` float; Packet ``index_encoding``): packed indices (delta + varint, or a
bitmap where shorter, `delta_fabric.compact`) with F32, F16 and Q8 values. Reported: packet bytes per
value and the ratio to F32; the Q8 row also gives the relative error of the decoded values (RMS over
RMS). Prints only.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import flatbuffers
import numpy as np
from delta_fabric.compact import decode_indices, encode_indices, q8_decode, q8_encode
from delta_fabric.encodings import ValueEncoding, codec
from delta_fabric.wire import FILE_IDENTIFIER, Entry, Packet, encode_packet

FP = hashlib.sha256(b"bench").digest()


def compact_packet(idx: np.ndarray, values: np.ndarray, enc: str) -> bytes:
    """A packet with the proposal's fields: indices packed, values as F32 / F16 / Q8."""
    b = flatbuffers.Builder(1024 + 8 * idx.size)
    packed = encode_indices(idx)
    assert decode_indices(packed).tolist() == idx.tolist()
    packed_off = b.CreateByteVector(packed)
    empty_idx = b.CreateNumpyVector(np.empty(0, dtype="<u4"))
    scale = 0.0
    if enc == "Q8":
        s, q = q8_encode(values)
        scale = float(s)
        val_off = b.CreateNumpyVector(q.astype("i1"))
    else:
        vc = codec(ValueEncoding[enc])
        val_off = b.CreateNumpyVector(np.ascontiguousarray(vc.encode(values), dtype=vc.wire_dtype))
    b.StartObject(10)
    b.PrependUint64Slot(0, 0xB2, 0)
    b.PrependUint64Slot(1, 1, 0)
    b.PrependUint64Slot(2, 1, 0)
    b.PrependUOffsetTRelativeSlot(4, empty_idx, 0)
    slot = {"F32": 5, "F16": 6, "Q8": 8}[enc]
    b.PrependUOffsetTRelativeSlot(slot, val_off, 0)
    b.PrependUOffsetTRelativeSlot(7, packed_off, 0)
    if enc == "Q8":
        b.PrependFloat32Slot(9, scale, 0.0)
    entry = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(entry)
    entries = b.EndVector()
    fp = b.CreateByteVector(FP)
    b.StartObject(9)
    b.PrependUint16Slot(0, 1, 0)
    b.PrependUint16Slot(1, 1, 0)
    b.PrependUint64Slot(2, 0xA1, 0)
    b.PrependUint64Slot(3, 1, 0)
    b.PrependUOffsetTRelativeSlot(4, fp, 0)
    b.PrependUint8Slot(5, {"F32": 0, "F16": 1, "Q8": 3}[enc], 0)
    b.PrependUOffsetTRelativeSlot(6, entries, 0)
    b.PrependUint8Slot(8, 1, 0)  # index_encoding = PACKED
    b.Finish(b.EndObject(), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--params", type=int, default=1_000_000, help="N of the model")
    ap.add_argument("--densities", default="0.01,0.05,0.2")
    args = ap.parse_args()
    try:
        densities = [float(x) for x in args.densities.split(",")]
    except ValueError:
        print("bench_compact.py: --densities must be comma-separated numbers", file=sys.stderr)
        return 2
    if args.params < 100 or not all(0 < d <= 1 for d in densities):
        print("bench_compact.py: need --params >= 100 and densities in (0, 1]", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    n = args.params
    delta = rng.standard_normal(n).astype(np.float32)
    print(f"N = {n}; one entry of k = density * N values per packet; bytes per value (x F32)")
    hdr = (
        "density       k |    F32 (1.0)    F16 (1.0) |   packed+F32   packed+F16    packed+Q8"
        " | Q8 rel. err"
    )
    print(hdr)
    print("-" * len(hdr))
    for dens in densities:
        k = max(1, int(n * dens))
        idx = np.sort(np.argpartition(-np.abs(delta), k - 1)[:k]).astype(np.uint32)
        vals = delta[idx]
        base = len(encode_packet(Packet(0xA1, 1, FP, (Entry(0xB2, 1, 1, 0, idx, vals),))))
        f16 = len(
            encode_packet(
                Packet(0xA1, 1, FP, (Entry(0xB2, 1, 1, 0, idx, vals),), ValueEncoding.F16)
            )
        )
        rows = [base, f16] + [len(compact_packet(idx, vals, e)) for e in ("F32", "F16", "Q8")]
        s, q = q8_encode(vals)
        err = float(np.sqrt(np.mean((q8_decode(s, q) - vals) ** 2)) / np.sqrt(np.mean(vals**2)))
        cells = " ".join(f"{r / k:4.2f} ({base / r:3.1f}x)".rjust(12) for r in rows[:2])
        cells2 = " ".join(f"{r / k:4.2f} ({base / r:3.1f}x)".rjust(12) for r in rows[2:])
        print(f"{dens:7.2%} {k:7d} | {cells} | {cells2} | {err:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
