#!/usr/bin/env python3
"""Differential decode fuzz over the driver protocol: one verdict per packet in every implementation.

Seeded and bounded. It builds mutated packets (bit flips, byte patches, offset tweaks, shared and
overlapping offsets, truncation, extension, misalignment by shifting, special values and scalars,
splices) from a corpus of valid packets (the valid decode vectors and random packets of the reference
encoder), plus random byte strings, and sends them in batches (``decode_batch``, driver protocol 5.2a)
to every registered implementation (``interop/implementations.json``; an optional one only when it can
start here). For every packet it compares:

- the *acceptance* (accepted by one, rejected by another): the figure that must be 0;
- the *code* of a rejection (spec DF-RCV-20 makes it one code): must be 0 too;
- the *content* of an accepted packet (packet JSON, f32 values by bit pattern): must be 0 too.

Usage::

    .venv/bin/python conformance/tools/difffuzz.py --packets 1000000 --seed 1      # full campaign
    .venv/bin/python conformance/tools/difffuzz.py --packets 100000 --impl python --impl rust

It prints the figures and their cost, writes the disagreeing packets (at most 100, hex, with every
implementation's answer) to ``--out`` when given, and exits 1 on any disagreement. The CI test is
``tests/test_difffuzz.py`` (100,000 packets).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from delta_fabric.manifest import Manifest
from delta_fabric.wire import Entry, Packet, ValueEncoding, encode_packet
from delta_fabric_conformance.client import DriverClient, ProtocolViolation
from delta_fabric_conformance.registry import Implementation, load_registry

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA = REPO_ROOT / "conformance" / "driver-protocol.schema.json"
REGISTRY = REPO_ROOT / "interop" / "implementations.json"
VALID_VECTORS = REPO_ROOT / "conformance" / "vectors" / "decode" / "valid"
#: The manifest of the decode vectors (N = 101), the context of most batches.
MANIFEST = Manifest.from_named_shapes(
    [("layer.weight", (10, 9)), ("layer.bias", (10,)), ("scale", ())]
)
MAX_BATCH = 4096  # driver protocol 5.2a


# ------------------------------------------------------------------------------------------------
# Structure of a valid packet: where its offsets, lengths, scalars and values are
# ------------------------------------------------------------------------------------------------
@dataclass
class Layout:
    """Positions in one valid packet (for targeted mutations)."""

    data: bytes
    uoffsets: list[int] = field(default_factory=list)  # u32 uoffsets (root, fields, elements)
    soffsets: list[int] = field(default_factory=list)  # i32 at each table
    voffsets: list[int] = field(default_factory=list)  # u16 entries of vtables (sizes included)
    lengths: list[int] = field(default_factory=list)  # u32 vector lengths
    scalars: list[tuple[int, int]] = field(default_factory=list)  # (position, size)
    values32: list[int] = field(default_factory=list)  # f32 element positions
    values16: list[int] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # u32 element positions
    vec_fields: list[tuple[int, int]] = field(default_factory=list)  # (uoffset position, target)
    elements: list[tuple[int, int]] = field(default_factory=list)  # entries: (position, table)


def _u16(b: bytes, p: int) -> int:
    return int(struct.unpack_from("<H", b, p)[0])


def _u32(b: bytes, p: int) -> int:
    return int(struct.unpack_from("<I", b, p)[0])


def layout_of(data: bytes) -> Layout:
    """The positions of a packet that the reference decoder accepts (no checks repeated here)."""
    lay = Layout(data)

    def table(t: int, sizes: dict[int, int]) -> dict[int, int]:
        lay.soffsets.append(t)
        vt = t - struct.unpack_from("<i", data, t)[0]
        vsize = _u16(data, vt)
        lay.voffsets.extend(range(vt, vt + vsize, 2))
        out = {}
        for slot, size in sizes.items():
            if 4 + 2 * slot + 2 <= vsize and (o := _u16(data, vt + 4 + 2 * slot)):
                out[slot] = t + o
                if size:
                    lay.scalars.append((t + o, size))
        return out

    def vector(p: int) -> tuple[int, int]:
        lay.uoffsets.append(p)
        w = p + _u32(data, p)
        lay.lengths.append(w)
        lay.vec_fields.append((p, w))
        return w + 4, _u32(data, w)

    lay.uoffsets.append(0)
    root = table(_u32(data, 0), {0: 2, 1: 2, 2: 8, 3: 8, 4: 0, 5: 1, 6: 0})
    if 4 in root:
        vector(root[4])
    start, count = vector(root[6])
    for j in range(count):
        el = start + 4 * j
        lay.uoffsets.append(el)
        t = el + _u32(data, el)
        lay.elements.append((el, t))
        f = table(t, {0: 8, 1: 8, 2: 8, 3: 1, 4: 0, 5: 0, 6: 0})
        if 4 in f:
            s, c = vector(f[4])
            lay.indices.extend(range(s, s + 4 * c, 4))
        if 5 in f:
            s, c = vector(f[5])
            lay.values32.extend(range(s, s + 4 * c, 4))
        if 6 in f:
            s, c = vector(f[6])
            lay.values16.extend(range(s, s + 2 * c, 2))
    return lay


# ------------------------------------------------------------------------------------------------
# Corpus and mutations
# ------------------------------------------------------------------------------------------------
def random_packet(rng: np.random.Generator) -> bytes:
    """A packet of the reference encoder with random content (mostly valid for MANIFEST; some with
    indices >= N, hops > 16, another fingerprint)."""
    entries = []
    for _ in range(int(rng.integers(0, 5))):
        n = int(rng.integers(1, 9))
        top = 120 if rng.random() < 0.1 else MANIFEST.num_params
        idx = np.sort(rng.choice(top, size=min(n, top), replace=False)).astype(np.uint32)
        vals = rng.standard_normal(idx.size).astype(np.float32)
        entries.append(
            Entry(
                int(rng.integers(1, 1 << 63)),
                int(rng.integers(1, 1 << 40)),
                int(rng.integers(1, 1 << 20)),
                int(rng.choice([0, 1, 2, 16, 17])) if rng.random() < 0.2 else 0,
                idx,
                vals,
            )
        )
    fp = MANIFEST.fingerprint if rng.random() < 0.95 else bytes(32)
    enc = ValueEncoding(int(rng.choice([0, 0, 1, 2])))
    return encode_packet(
        Packet(
            int(rng.integers(1, 1 << 63)), int(rng.integers(1, 1 << 40)), fp, tuple(entries), enc
        )
    )


def corpus(rng: np.random.Generator, extra: int = 64) -> list[Layout]:
    seeds = [p.read_bytes() for p in sorted(VALID_VECTORS.glob("*.dfp"))]
    seeds += [random_packet(rng) for _ in range(extra)]
    out = []
    for s in seeds:
        try:
            out.append(layout_of(s))
        except (struct.error, KeyError, IndexError):  # a seed this walker cannot map: skip
            continue
    return out


SPECIAL_U32 = (0, 1, 2, 3, 4, 8, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFC)
SPECIAL_F32 = (0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x7F7FFFFF, 0xFF7FFFFF)
SPECIAL_U16 = (0x7C00, 0xFC00, 0x7E00, 0x7F80, 0xFF80, 0x7FC1, 0x8000, 0x0001, 0x7BFF)


def _put(b: bytearray, pos: int, fmt: str, value: int) -> None:
    if 0 <= pos and pos + struct.calcsize(fmt) <= len(b):
        struct.pack_into(fmt, b, pos, value)


def _get(b: bytes | bytearray, pos: int, fmt: str) -> int:
    """The value at ``pos`` (0 when it lies outside a buffer that a mutation shortened)."""
    if 0 <= pos and pos + struct.calcsize(fmt) <= len(b):
        return int(struct.unpack_from(fmt, b, pos)[0])
    return 0


def _pick(rng: np.random.Generator, xs: Sequence[Any]) -> Any:
    return xs[int(rng.integers(len(xs)))]


def m_bitflip(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    for _ in range(int(rng.integers(1, 5))):
        if b:
            i = int(rng.integers(len(b) * 8))
            b[i // 8] ^= 1 << (i % 8)


def m_byte(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    if b:
        b[int(rng.integers(len(b)))] = int(
            _pick(rng, (0, 1, 0x7F, 0x80, 0xFF, int(rng.integers(256))))
        )


def m_pointer(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    """An offset, soffset, voffset or length moved a little, or set to a special value."""
    kind = int(rng.integers(4))
    pools = (lay.uoffsets, lay.soffsets, lay.voffsets, lay.lengths)
    pool = pools[kind] or lay.uoffsets
    p = int(_pick(rng, pool))
    fmt = ("<I", "<i", "<H", "<I")[kind]
    if rng.random() < 0.7:
        cur = _get(b, p, fmt)
        delta = int(_pick(rng, (-8, -4, -2, -1, 1, 2, 3, 4, 8, 12, 16)))
        lo, hi = {"<I": (0, 0xFFFFFFFF), "<i": (-(1 << 31), (1 << 31) - 1), "<H": (0, 0xFFFF)}[fmt]
        _put(b, p, fmt, min(max(cur + delta, lo), hi))
    elif fmt == "<H":
        _put(b, p, fmt, int(_pick(rng, (0, 1, 2, 3, 4, 6, 0xFFFE, 0xFFFF))))
    elif fmt == "<i":
        _put(b, p, fmt, int(_pick(rng, (0, 1, -1, 4, -4, 1 << 30, -(1 << 31)))))
    else:
        _put(b, p, fmt, int(_pick(rng, SPECIAL_U32)))


def m_share(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    """A vector field pointed at another vector (shared), or inside it (overlap); or an entries
    element pointed at another entry's table."""
    if len(lay.elements) >= 2 and rng.random() < 0.3:
        (el, _), (_, t) = (
            lay.elements[int(rng.integers(len(lay.elements)))],
            _pick(rng, lay.elements),
        )
        if t > el:
            _put(b, el, "<I", t - el)
        return
    if len(lay.vec_fields) < 2:
        return
    p, _ = _pick(rng, lay.vec_fields)
    _, w = _pick(rng, lay.vec_fields)
    w += int(_pick(rng, (0, 0, 4, 8, 2)))
    if w > p:
        _put(b, p, "<I", w - p)
    # several entries onto one vector: the 4+-entry case
    if rng.random() < 0.3:
        for q, _ in lay.vec_fields:
            if w > q and rng.random() < 0.5:
                _put(b, q, "<I", w - q)


def m_truncate(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    del b[int(rng.integers(len(b) + 1)) :]


def m_extend(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    b.extend(rng.integers(0, 256, int(rng.integers(1, 17)), dtype=np.uint8).tobytes())


def m_shift(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    """Every object moved by k bytes (inserted after the identifier, root offset fixed): k not a
    multiple of 8 misaligns u64 fields, of 4 tables and vectors, of 2 vtables."""
    if len(b) < 8:
        return
    k = int(rng.integers(1, 9))
    root = _get(b, 0, "<I")
    b[8:8] = bytes(k)
    _put(b, 0, "<I", (root + k) & 0xFFFFFFFF)


def m_value(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    r = rng.random()
    if r < 0.35 and lay.values32:
        _put(b, int(_pick(rng, lay.values32)), "<I", int(_pick(rng, SPECIAL_F32)))
    elif r < 0.5 and lay.values16:
        _put(b, int(_pick(rng, lay.values16)), "<H", int(_pick(rng, SPECIAL_U16)))
    elif lay.indices:
        p = int(_pick(rng, lay.indices))
        choice = int(rng.integers(4))
        if choice == 0 and p - 4 in lay.indices:  # duplicate of the previous
            _put(b, p, "<I", _get(b, p - 4, "<I"))
        elif choice == 1:
            _put(b, p, "<I", int(_pick(rng, (0, 100, 101, 0xFFFFFFFF))))
        else:
            _put(b, p, "<I", int(rng.integers(0, 128)))


def m_scalar(rng: np.random.Generator, lay: Layout, b: bytearray) -> None:
    if not lay.scalars:
        return
    p, size = _pick(rng, lay.scalars)
    fmt = {1: "<B", 2: "<H", 8: "<Q"}[size]
    v = {1: (0, 1, 2, 3, 16, 17, 255), 2: (0, 1, 2, 0xFFFF), 8: (0, 1, (1 << 64) - 1)}[size]
    _put(b, p, fmt, int(_pick(rng, v)))


MUTATORS: tuple[Callable[[np.random.Generator, Layout, bytearray], None], ...] = (
    m_bitflip,
    m_byte,
    m_pointer,
    m_pointer,
    m_share,
    m_share,
    m_truncate,
    m_extend,
    m_shift,
    m_value,
    m_scalar,
)


def random_bytes(rng: np.random.Generator) -> bytes:
    n = int(rng.integers(0, 320))
    b = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    if n >= 8 and rng.random() < 0.7:
        b[4:8] = b"DFP1"
        if rng.random() < 0.7:
            _put(b, 0, "<I", int(rng.integers(8, max(9, n))) & ~3)
    return bytes(b)


def packets(seed: int, count: int) -> Iterator[bytes]:
    """``count`` fuzz packets, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    seeds = corpus(rng)
    for _ in range(count):
        r = rng.random()
        if r < 0.05:
            yield random_bytes(rng)
            continue
        lay = _pick(rng, seeds)
        b = bytearray(lay.data)
        if r < 0.08 and len(seeds) > 1:  # splice two packets
            other = _pick(rng, seeds).data
            cut = int(rng.integers(len(b) + 1))
            b = b[:cut] + other[min(cut, len(other)) :]
        elif r < 0.10:  # unchanged (the accepted side of the comparison)
            yield bytes(b)
            continue
        for _ in range(int(rng.choice([1, 1, 1, 2, 3]))):
            _pick(rng, MUTATORS)(rng, lay, b)
        yield bytes(b)


# ------------------------------------------------------------------------------------------------
# Running the implementations
# ------------------------------------------------------------------------------------------------
def contexts() -> list[dict[str, Any]]:
    base = {
        "fingerprint": MANIFEST.fingerprint.hex(),
        "num_params": MANIFEST.num_params,
        "hop_limit": 16,
        "max_packet_size": 16 * 1024 * 1024,
    }
    return [base, base, base, {**base, "max_packet_size": 320}, {**base, "hop_limit": 0}]


def _f32_key(x: Any) -> Any:
    if isinstance(x, str):
        return x
    return int(np.array([x], dtype=np.float64).astype(np.float32).view(np.uint32)[0])


def normalize(pkt: dict[str, Any]) -> str:
    """Packet JSON with the values as f32 bit patterns (the comparison of spec Appendix B.2)."""
    d = dict(pkt)
    d["entries"] = [{**e, "values": [_f32_key(v) for v in e["values"]]} for e in pkt["entries"]]
    return json.dumps(d, sort_keys=True)


@dataclass
class Figures:
    packets: int = 0
    accepted: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)  # reference's codes
    acceptance: int = 0
    code: int = 0
    content: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0  # wall clock of the whole run
    driver_seconds: Counter[str] = field(default_factory=Counter)  # wall clock to each answer
    cpu_drivers: float = 0.0  # CPU seconds (user + system) of the driver processes
    cpu_runner: float = 0.0  # CPU seconds of this process (generation, comparison, JSON)


class Fleet:
    """The drivers of the implementations under test, each started once."""

    def __init__(self, impls: Sequence[Implementation], log_dir: Path) -> None:
        self.clients: dict[str, DriverClient] = {}
        self.checked: set[str] = set()
        for impl in impls:
            c = DriverClient(
                impl.name, impl.argv(), log_dir / f"{impl.name}.log", schema=SCHEMA, cwd=REPO_ROOT
            )
            c.start()
            hello = c.request({"cmd": "hello", "versions": [1], "spec_version": "1.1"}, timeout=120)
            caps = (hello.body or {}).get("capabilities", []) if hello.kind == "ok" else []
            if "decode.batch" not in caps:
                c.kill()
                raise SystemExit(
                    f"difffuzz: {impl.name} does not answer decode.batch ({hello.kind})"
                )
            self.clients[impl.name] = c

    def send(self, name: str, b64: list[str], ctx: dict[str, Any]) -> int:
        """Send one ``decode_batch`` request; its seq. The first request and answer of each driver
        are checked against the schema in full; the schema check of thousands of packet JSONs costs
        more than the decoding, so later ones get the framing, seq-echo and envelope checks (and
        normalize() reads every packet JSON)."""
        return self.clients[name].send(
            {"cmd": "decode_batch", "packets": b64, "context": ctx},
            check_schema=name not in self.checked,
        )

    def answer(self, name: str, seq: int, n: int) -> list[dict[str, Any]]:
        first = name not in self.checked
        self.checked.add(name)
        reply = self.clients[name].receive(seq, 600, "decode_batch", check_schema=first)
        if reply.kind != "ok" or reply.body is None:
            raise SystemExit(f"difffuzz: {name} answered {reply.kind}: {reply.body}")
        results: list[dict[str, Any]] = reply.body["results"]
        if len(results) != n:
            raise SystemExit(f"difffuzz: {name} answered {len(results)} results for {n}")
        return results

    def close(self) -> None:
        for c in self.clients.values():
            c.stop()


def run(
    impls: Sequence[Implementation],
    *,
    seed: int,
    count: int,
    batch: int = 2048,
    log_dir: Path | None = None,
    progress: Callable[[Figures], None] | None = None,
) -> Figures:
    """Fuzz ``count`` packets through every implementation; the figures of the comparison."""
    batch = max(1, min(batch, MAX_BATCH))
    fig = Figures()
    t0 = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Fleet(impls, log_dir or Path(tmp))
        try:
            names = list(fleet.clients)
            ctxs = contexts()
            gen = packets(seed, count)
            made = 0

            def next_batch() -> list[bytes]:
                nonlocal made
                out = [p for _, p in zip(range(min(batch, count - made)), gen, strict=False)]
                made += len(out)
                return out

            k = 0
            bufs = next_batch()
            while bufs:
                ctx = ctxs[k % len(ctxs)]
                k += 1
                b64 = [base64.b64encode(p).decode("ascii") for p in bufs]
                # every driver works on the batch at once while the next one is generated
                t = time.perf_counter()
                seqs = {name: fleet.send(name, b64, ctx) for name in names}
                following = next_batch()
                answers = {}
                for name in names:
                    answers[name] = fleet.answer(name, seqs[name], len(b64))
                    fig.driver_seconds[name] += time.perf_counter() - t
                for i, buf in enumerate(bufs):
                    rs = [answers[n][i] for n in names]
                    acc = ["packet" in r for r in rs]
                    for n, a in zip(names, acc, strict=True):
                        fig.accepted[n] += a
                    if not acc[0]:
                        fig.codes[str(rs[0]["rejected"])] += 1
                    kind = None
                    if len(set(acc)) > 1:
                        fig.acceptance += 1
                        kind = "acceptance"
                    elif not acc[0] and len({r["rejected"] for r in rs}) > 1:
                        fig.code += 1
                        kind = "code"
                    elif acc[0] and len({normalize(r["packet"]) for r in rs}) > 1:
                        fig.content += 1
                        kind = "content"
                    if kind and len(fig.samples) < 100:
                        fig.samples.append(
                            {
                                "kind": kind,
                                "packet": buf.hex(),
                                "context": ctx,
                                "answers": dict(zip(names, rs, strict=True)),
                            }
                        )
                fig.packets += len(bufs)
                bufs = following
                if progress is not None:
                    progress(fig)
        finally:
            fleet.close()
    fig.seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the drivers have exited (stop)
    fig.cpu_runner = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    fig.cpu_drivers = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    return fig


def available(registry: Path, only: Sequence[str]) -> list[Implementation]:
    """The registered implementations to fuzz: ``only`` (all registered when empty), minus the
    optional ones that cannot start here."""
    impls = load_registry(registry)
    if only:
        unknown = set(only) - {i.name for i in impls}
        if unknown:
            raise SystemExit(f"difffuzz: unknown implementation(s) {sorted(unknown)}")
        impls = [i for i in impls if i.name in only]
    out = []
    for i in impls:
        why = i.missing_requirements()
        if why is None:
            out.append(i)
        elif not i.optional or only:
            raise SystemExit(f"difffuzz: {i.name} cannot start: {why}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--packets", type=int, default=100_000, help="packets to fuzz (default 100000)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the packet generator (default 1)")
    ap.add_argument("--batch", type=int, default=2048, help=f"packets per request (<= {MAX_BATCH})")
    ap.add_argument(
        "--impl", action="append", default=[], help="only this implementation (repeatable)"
    )
    ap.add_argument("--registry", type=Path, default=REGISTRY)
    ap.add_argument(
        "--out", type=Path, help="write the figures and disagreeing packets here (JSON)"
    )
    args = ap.parse_args(argv)
    if args.packets < 1 or args.batch < 1:
        ap.error("--packets and --batch must be >= 1")
    impls = available(args.registry, args.impl)
    if len(impls) < 2:
        ap.error(f"need two implementations or more, have {[i.name for i in impls]}")
    last = [0.0]

    def progress(f: Figures) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(
                f"difffuzz: {f.packets} packets, {f.acceptance} acceptance disagreements",
                file=sys.stderr,
                flush=True,
            )

    try:
        fig = run(impls, seed=args.seed, count=args.packets, batch=args.batch, progress=progress)
    except ProtocolViolation as exc:
        print(f"difffuzz: driver failure: {exc}", file=sys.stderr)
        return 1
    names = [i.name for i in impls]
    report = {
        "seed": args.seed,
        "packets": fig.packets,
        "implementations": names,
        "accepted": dict(fig.accepted),
        "reference_codes": dict(sorted(fig.codes.items())),
        "disagreements": {"acceptance": fig.acceptance, "code": fig.code, "content": fig.content},
        "seconds": round(fig.seconds, 2),
        "driver_seconds": {k: round(v, 2) for k, v in fig.driver_seconds.items()},
        "cpu_seconds": {"drivers": round(fig.cpu_drivers, 2), "runner": round(fig.cpu_runner, 2)},
        "samples": fig.samples,
    }
    print(
        f"difffuzz: {fig.packets} packets (seed {args.seed}) through {', '.join(names)}: "
        f"accepted {dict(fig.accepted)}; disagreements: acceptance {fig.acceptance}, "
        f"code {fig.code}, content {fig.content}; {fig.seconds:.1f} s "
        f"({fig.packets / max(fig.seconds, 1e-9):,.0f} packets/s; per driver "
        f"{', '.join(f'{k} {v:.1f} s' for k, v in fig.driver_seconds.items())}); CPU: drivers "
        f"{fig.cpu_drivers:.1f} s, runner {fig.cpu_runner:.1f} s"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 1 if fig.acceptance or fig.code or fig.content else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
