"""`FastBuilder` writes the same bytes as `flatbuffers.Builder` (issue 11, item 5: the relay re-encode
without the pure-Python builder): random packets, edge cases, and every packet of the conformance
vectors, encoded both ways and compared byte for byte."""

from __future__ import annotations

from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from delta_fabric._fastbuild import FastBuilder
from delta_fabric.errors import DecodeError
from delta_fabric.wire import (
    Entry,
    Packet,
    ValueEncoding,
    _encode_packet,
    decode_packet,
    encode_packet,
)

VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "vectors"
U64 = (1 << 64) - 1


def both(packet: Packet) -> tuple[bytes, bytes]:
    return _encode_packet(packet, FastBuilder), _encode_packet(packet, flatbuffers.Builder)


def _u64(rng: np.random.Generator) -> int:
    kind = int(rng.integers(0, 5))
    if kind == 0:
        return 0  # the default: the builder leaves the field out
    if kind == 1:
        return U64
    if kind == 2:
        return int(rng.integers(1, 256))
    return int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2))


def random_packet(rng: np.random.Generator) -> Packet:
    entries = []
    for _ in range(int(rng.choice([0, 1, 1, 2, 3, 7, 20]))):
        n = int(rng.choice([0, 1, 2, 3, 5, 8, 33, 1000]))
        if rng.random() < 0.8:
            idx = np.sort(rng.choice(1 << 20, size=n, replace=False)).astype(np.uint32)
        else:  # anything: the encoder serialises what it is given
            idx = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
        vals = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8)).astype(np.float32)
        entries.append(
            Entry(_u64(rng), _u64(rng), _u64(rng), int(rng.choice([0, 1, 2, 255])), idx, vals)
        )
    heard: tuple[int, ...] | None = None
    if rng.random() < 0.5:
        heard = tuple(_u64(rng) for _ in range(int(rng.integers(0, 6))))
    return Packet(
        sender=_u64(rng),
        sender_incarnation=_u64(rng),
        fingerprint=bytes(rng.integers(0, 256, size=int(rng.choice([0, 1, 31, 32, 33]))).tolist()),
        entries=tuple(entries),
        encoding=ValueEncoding(int(rng.integers(0, 3))),
        version_major=int(rng.choice([0, 1, 1, 2, 0xFFFF])),
        version_minor=int(rng.choice([0, 0, 1, 7, 0xFFFF])),
        heard=heard,
    )


@pytest.mark.parametrize("seed", range(8))
def test_random_packets_byte_identical(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(60):
        p = random_packet(rng)
        fast, ref = both(p)
        assert fast == ref, p
        assert encode_packet(p) == fast


def test_growth_and_shared_vtables() -> None:
    """A packet far over the builder's initial size (growth), and many entries with identical
    vtables (de-duplication) next to ones that differ (hops 0 leaves a field out)."""
    rng = np.random.default_rng(99)
    es = tuple(
        Entry(j + 1, 1, j + 1, j % 2, np.arange(j + 1, dtype=np.uint32), rng.random(j + 1))
        for j in range(300)
    )
    p = Packet(1, 1, b"\x01" * 32, es, heard=tuple(range(1, 500)))
    fast, ref = both(p)
    assert fast == ref
    small = FastBuilder(0)  # starts empty, grows on every write
    assert small.Offset() == 0
    big = flatbuffers.Builder(0)
    for b in (small, big):
        off = b.CreateNumpyVector(np.arange(5, dtype=">u4"))  # byte-swapped like the builder
        b.StartObject(3)
        b.PrependUint8Slot(0, 7, 0)
        b.PrependUOffsetTRelativeSlot(2, off, 0)
        root = b.EndObject()
        b.Finish(root, file_identifier=b"DFP1")
    assert bytes(small.Output()) == bytes(big.Output())


def test_conformance_vector_packets_byte_identical() -> None:
    """Every packet of the conformance vectors that decodes: re-encoded both ways, the same bytes
    (and the packets the project's encoder wrote come back unchanged)."""
    paths = sorted(VECTORS.rglob("*.dfp"))
    assert len(paths) > 100
    decoded = 0
    for path in paths:
        data = path.read_bytes()
        try:
            p = decode_packet(data)
        except DecodeError:
            continue
        decoded += 1
        fast, ref = both(p)
        assert fast == ref, path
    assert decoded > 30


def test_bad_input_raises() -> None:
    b = FastBuilder(16)
    with pytest.raises(TypeError):
        b.CreateByteVector("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        b.CreateNumpyVector(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(ValueError):
        FastBuilder(-1)
    with pytest.raises(ValueError):
        encode_packet(Packet(1, 1, b"\x00" * 32, (Entry(1, 1, 1, 256, [1], [1.0]),)))


def test_entry_writer_grows_like_the_helpers() -> None:
    """`FastBuilder.entry_v1` and `uoffset_vector` from an empty buffer (growth inside the entry
    writer) against the generated helpers over `flatbuffers.Builder(0)`."""
    from delta_fabric._generated.deltafabric.v1 import Entry as gen

    rng = np.random.default_rng(5)
    fast, ref = FastBuilder(0), flatbuffers.Builder(0)
    offs_fast, offs_ref = [], []
    for j in range(40):
        n = int(rng.integers(0, 50))
        idx = np.arange(n, dtype="<u4")
        wide = j % 3 != 0
        vals = rng.random(n).astype("<f4" if wide else "<u2")
        head = (int(rng.integers(0, 3)), j % 2, int(rng.integers(0, 1 << 64, dtype=np.uint64)))
        origin, incarnation, seq = head
        hops = j % 4
        offs_fast.append(fast.entry_v1(origin, incarnation, seq, hops, idx, vals, 5 if wide else 6))
        i_off, v_off = ref.CreateNumpyVector(idx), ref.CreateNumpyVector(vals)
        gen.EntryStart(ref)
        gen.EntryAddOrigin(ref, origin)
        gen.EntryAddIncarnation(ref, incarnation)
        gen.EntryAddSeq(ref, seq)
        gen.EntryAddHops(ref, hops)
        gen.EntryAddIndices(ref, i_off)
        (gen.EntryAddValues if wide else gen.EntryAddValues16)(ref, v_off)
        offs_ref.append(gen.EntryEnd(ref))
    assert offs_fast == offs_ref
    root_fast = fast.uoffset_vector(offs_fast)
    ref.StartVector(4, len(offs_ref), 4)
    for off in reversed(offs_ref):
        ref.PrependUOffsetTRelative(off)
    assert root_fast == ref.EndVector()
    fast.Finish(root_fast, b"DFP1")
    ref.Finish(root_fast, file_identifier=b"DFP1")
    assert bytes(fast.Output()) == bytes(ref.Output())


def _outcome(data: bytes) -> object:
    try:
        return decode_packet(data)
    except DecodeError as exc:
        return exc.code


def test_few_entry_decode_same_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry-by-entry decode of small packets (`wire._few_entries`) and the vectorised one give
    the same packet or the same error code, on valid packets, on every decode vector and on packets
    with random bytes overwritten or cut."""
    import delta_fabric.wire as wire

    rng = np.random.default_rng(11)
    samples = [p.read_bytes() for p in sorted(VECTORS.rglob("*.dfp"))]
    for _ in range(150):
        p = random_packet(rng)
        p = Packet(
            1 + p.sender % 1000, 1, bytes(32), p.entries[: int(rng.integers(0, 9))], p.encoding
        )
        samples.append(encode_packet(p))
    mutated = []
    for data in samples:
        for _ in range(6 if data else 0):
            b = bytearray(data)
            if rng.random() < 0.2 and len(b) > 8:
                b = b[: int(rng.integers(8, len(b)))]
            for _ in range(int(rng.integers(1, 4))):
                b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
            mutated.append(bytes(b))
    few = [_outcome(d) for d in samples + mutated]
    monkeypatch.setattr(wire, "_FEW_ENTRIES", 0)
    vectorised = [_outcome(d) for d in samples + mutated]
    assert few == vectorised
    assert sum(isinstance(x, Packet) for x in few) > 150
    assert len({x for x in few if not isinstance(x, Packet)}) >= 5  # several error codes seen
