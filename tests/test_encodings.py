"""The value-codec table (``delta_fabric.encodings``): one row per encoding, used by wire, config and engine."""

from __future__ import annotations

import numpy as np
import pytest
from delta_fabric.config import SyncConfig
from delta_fabric.encodings import CODECS, MAX_VALUE_BYTES, ValueEncoding, codec, quantize
from delta_fabric.engine import Engine
from delta_fabric.manifest import Manifest, TensorSpec
from delta_fabric.wire import Entry, Packet, decode_packet, encode_packet, encoded_size_bound


def test_table_has_one_consistent_row_per_encoding() -> None:
    """REQ: DF-PAR-10 (F32, F16, BF16, Q8)"""
    assert list(CODECS) == list(ValueEncoding)
    for enc, vc in CODECS.items():
        assert vc.encoding is enc and vc.name == enc.name
        assert codec(enc) is vc and codec(int(enc)) is vc and codec(enc.name) is vc
        assert vc.wide == (vc.field == "values") == (vc.value_bytes == 4)
        assert np.dtype(vc.wire_dtype).itemsize == vc.value_bytes <= MAX_VALUE_BYTES
    assert encoded_size_bound(3) == 128 + (4 + MAX_VALUE_BYTES) * 3
    assert [vc.scale_of is not None for vc in CODECS.values()] == [False, False, False, True]
    for bad in (4, -1, "F8", "f16", True, None):
        with pytest.raises(ValueError, match="encoding must be one of F32, F16, BF16, Q8"):
            codec(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("enc", list(ValueEncoding))
def test_quantize_is_what_a_receiver_decodes(enc: ValueEncoding) -> None:
    """REQ: DF-GEN-4"""
    rng = np.random.default_rng(int(enc))
    values = np.concatenate(
        [
            (rng.standard_normal(200) * 10.0 ** rng.integers(-8, 8, 200)).astype(np.float32),
            np.array([1e9, -1e9, 65504.0, 3.4e38, -3.4e38, 0.0, -0.0], dtype=np.float32),
        ]
    )
    vc = CODECS[enc]
    q = vc.quantize(values)
    assert q.dtype == np.float32
    assert np.isfinite(q).all(), "a finite input never becomes infinite"
    assert q.tobytes() == quantize(values, enc).tobytes()
    assert vc.quantize(q).tobytes() == q.tobytes(), "quantize is idempotent"
    scale = np.float32(0.0) if vc.scale_of is None else vc.scale_of(values)
    assert vc.decode(vc.encode(values), scale).tobytes() == q.tobytes()
    pkt = Packet(
        sender=1,
        sender_incarnation=1,
        fingerprint=b"\x01" * 32,
        entries=(Entry(2, 3, 4, 0, np.arange(values.size, dtype=np.uint32), values),),
        encoding=enc,
    )
    got = decode_packet(encode_packet(pkt)).entries[0].values
    assert got.tobytes() == q.tobytes()


@pytest.mark.parametrize("enc", list(ValueEncoding))
def test_generation_quantizes_each_entry_after_the_split(enc: ValueEncoding) -> None:
    """REQ: DF-GEN-4, DF-GEN-5, DF-GEN-6"""
    n = 300
    manifest = Manifest([TensorSpec("w", (n,))])
    # 296 + 8 * 20 bytes: entries of at most 20 values
    cfg = SyncConfig.v1_0(ratio=1.0, encoding=enc, max_packet_size=296 + 8 * 19)
    eng = Engine(manifest, cfg, node_id=1, incarnation=1)
    rng = np.random.default_rng(5)
    active = (rng.standard_normal(n) * 3.0).astype(np.float32)
    entries = eng.generate(active)
    assert len(entries) > 1 and [e.seq for e in entries] == list(range(1, len(entries) + 1))
    idx = np.concatenate([e.indices for e in entries])
    vals = np.concatenate([e.values for e in entries])
    assert np.array_equal(np.sort(idx), np.arange(n))
    # anchor was 0: d = active; quantized per entry (Q8: one scale per entry, DF-PKT-110)
    want = np.concatenate([quantize(active[e.indices], enc) for e in entries])
    assert vals.tobytes() == want.tobytes()
    assert eng.anchor[idx].tobytes() == want.tobytes()
