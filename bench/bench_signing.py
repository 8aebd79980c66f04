#!/usr/bin/env python3
"""Cost of signed entries (spec 1.1 section 13.1) in the Python implementation.

Usage: .venv/bin/python bench/bench_signing.py [--reps R] [--values 10,865,10000] [--entries 1,4]

For packets of E entries of n F32 values each, measured interleaved in the same run (rounds of one
decode, one verification of every entry, one signing of every entry, one unsigned and one signed
``Engine.receive`` of the same packet on fresh engines), best of ``--reps`` rounds (the minimum: the load of a shared machine only adds time):

- bytes per entry: (signed packet - unsigned packet) / E, as encoded;
- ``verify / decode``: verifying every entry's signature (``Signing.verify``, the message built from the
  decoded entry) against ``decode_packet`` of the same bytes;
- ``sign / decode``: signing every entry (what an origin pays per generated entry);
- ``receive signed / unsigned``: the whole ``Engine.receive`` step with and without a signed cluster.

Prints only; asserts no timing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.encodings import ValueEncoding
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest
from delta_fabric.replay import ReceiverState
from delta_fabric.signing import Signing, public_key_of
from delta_fabric.wire import Entry, Packet, decode_packet, encode_packet

N = 200_000
MANIFEST = Manifest.from_named_shapes({"w": (N,)})
FP = MANIFEST.fingerprint
ORIGINS = [2 + j for j in range(8)]
SEEDS = {o: o.to_bytes(1, "little") * 32 for o in [1, *ORIGINS]}
KEYS = {o: public_key_of(s) for o, s in SEEDS.items()}


def _packets(n: int, entries: int) -> tuple[bytes, bytes, list[Entry]]:
    rng = np.random.default_rng(n * 31 + entries)
    es = []
    for j in range(entries):
        idx = np.sort(rng.choice(N, size=n, replace=False)).astype(np.uint32)
        es.append(Entry(ORIGINS[j], 7, 1, 0, idx, rng.standard_normal(n).astype(np.float32)))
    signed = [
        replace(e, signature=Signing({}, SEEDS[e.origin]).sign(FP, ValueEncoding.F32, e))
        for e in es
    ]
    plain = encode_packet(Packet(ORIGINS[0], 1, FP, tuple(es)))
    sig = encode_packet(Packet(ORIGINS[0], 1, FP, tuple(signed)))
    return plain, sig, es


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--values", default="10,865,10000")
    ap.add_argument("--entries", default="1,4")
    args = ap.parse_args()
    verifier = Signing(KEYS)
    signers = {o: Signing({}, s) for o, s in SEEDS.items()}
    cfg = SyncConfig.v1_0()
    print(
        "values/entry entries  bytes/entry  decode_us  verify/decode  sign/decode  "
        "receive_signed/unsigned"
    )
    for entries in (int(x) for x in args.entries.split(",")):
        for n in (int(x) for x in args.values.split(",")):
            plain, sig, es = _packets(n, entries)
            extra = (len(sig) - len(plain)) / entries
            pkt = decode_packet(sig)
            t_dec, t_ver, t_sign, t_rs, t_ru = [], [], [], [], []
            for _ in range(args.reps):
                t_dec.append(_timed(partial(decode_packet, sig)))
                t_ver.append(_timed(partial(_verify_all, verifier, pkt.entries)))
                t_sign.append(_timed(partial(_sign_all, signers, es)))
                eng_s = Engine(MANIFEST, cfg, 1, 1, signing=Signing(KEYS, SEEDS[1], node_id=1))
                eng_u = Engine(MANIFEST, cfg, 1, 1)
                eng_s.receive([plain])  # allocate the O(N) scratch outside the timing
                eng_u.receive([plain])
                eng_u.state = ReceiverState(1)  # the warm-up's entries would be duplicates
                t_rs.append(_timed(partial(eng_s.receive, [sig])))
                t_ru.append(_timed(partial(eng_u.receive, [plain])))
            dec = min(t_dec)
            print(
                f"{n:12d} {entries:8d} {extra:12.1f} {dec * 1e6:10.1f} "
                f"{min(t_ver) / dec:14.2f} {min(t_sign) / dec:12.2f} "
                f"{min(t_rs) / min(t_ru):24.2f}"
            )


def _verify_all(verifier: Signing, entries: tuple[Entry, ...]) -> None:
    for e in entries:
        assert verifier.verify(FP, ValueEncoding.F32, e) is None


def _sign_all(signers: dict[int, Signing], entries: list[Entry]) -> None:
    for e in entries:
        signers[e.origin].sign(FP, ValueEncoding.F32, e)


if __name__ == "__main__":
    main()
