"""Decode conformance vectors: fresh, complete, and decoded or rejected as their JSON says."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from delta_fabric.compact import decode_indices
from delta_fabric.errors import DecodeError, ErrorCode
from delta_fabric.wire import (
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
    packet_from_json,
    packet_to_json,
    quantize_packet,
    validate_packet,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO_ROOT / "conformance" / "vectors"
FLATC = REPO_ROOT / ".venv" / "bin" / "flatc"
SCHEMA = REPO_ROOT / "schema" / "deltafabric.fbs"
REQ_ID = re.compile(r"^DF-[A-Z]+-\d+$")


def _index() -> dict[str, Any]:
    d: dict[str, Any] = json.loads((VECTORS_DIR / "index.json").read_text(encoding="utf-8"))
    return d


def _decode_rows() -> list[dict[str, Any]]:
    return [r for r in _index()["vectors"] if r["kind"] == "decode"]


DECODE_ROWS = _decode_rows()
VALID_ROWS = [r for r in DECODE_ROWS if r["expect"] == "ok"]


def _load(row: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    base = VECTORS_DIR / row["path"]
    data = base.with_suffix(".dfp").read_bytes()
    meta: dict[str, Any] = json.loads(base.with_suffix(".json").read_text(encoding="utf-8"))
    return data, meta


def _decode_with_context(data: bytes, ctx: dict[str, Any]) -> Packet:
    p = decode_packet(data, ctx["max_packet_size"])
    validate_packet(
        p,
        fingerprint=bytes.fromhex(ctx["fingerprint"]),
        num_params=ctx["num_params"],
        hop_limit=ctx["hop_limit"],
    )
    return p


def test_forward_staleness_allows_platform_noise_only(
    tmp_path: Path, make_vectors: ModuleType
) -> None:
    # The float64 forward reference differs between CPUs by about 1e-12 (BLAS and SIMD summation
    # order); the staleness check allows that much and no more (make_vectors.same_forward).
    src = VECTORS_DIR / "forward" / "batch8.json"
    base = json.loads(src.read_text(encoding="utf-8"))
    upd = np.frombuffer(base64.b64decode(base["expected"]["update_b64"]), dtype="<f4").copy()
    big = int(np.argmax(np.abs(upd)))

    def variant(name: str, change: Any) -> Path:
        d = json.loads(json.dumps(base))
        change(d)
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d), encoding="utf-8")
        return p

    def set_update(d: dict[str, Any], u: np.ndarray[Any, Any]) -> None:
        d["expected"]["update_b64"] = base64.b64encode(u.astype("<f4").tobytes()).decode()

    def scaled_logit(f: float) -> Any:
        return lambda d: d["expected"]["logits_eval"][0].__setitem__(
            0, d["expected"]["logits_eval"][0][0] * f
        )

    def nudged(steps: int) -> Any:
        u = upd.copy()
        for _ in range(steps):
            u[big] = np.nextafter(u[big], np.float32(np.inf))
        return lambda d: set_update(d, u)

    same = make_vectors.same_forward
    assert same(src, src) is None
    assert same(variant("noise_f64", scaled_logit(1 + 1e-12)), src) is None
    assert same(variant("noise_f32", nudged(1)), src) is None
    assert same(variant("change_f64", scaled_logit(1 + 1e-6)), src) is not None
    assert same(variant("change_f32", nudged(3)), src) is not None
    assert same(variant("lr", lambda d: d.__setitem__("lr", d["lr"] * 2)), src) is not None
    assert (
        same(variant("weights", lambda d: d.__setitem__("weights_b64", d["x_b64"])), src)
        is not None
    )


def test_checked_in_vectors_equal_a_fresh_generation(
    tmp_path: Path, make_vectors: ModuleType
) -> None:
    rows = make_vectors.generate(tmp_path)
    problems = make_vectors.compare_trees(tmp_path, VECTORS_DIR)
    assert problems == [], "stale vectors: run .venv/bin/python conformance/tools/make_vectors.py"
    assert rows == _index()["vectors"]
    # deterministic: a second run writes the same bytes
    again = tmp_path / "again"
    make_vectors.generate(again)
    assert make_vectors.compare_trees(again, tmp_path) == []


def test_index_lists_every_decode_vector() -> None:
    index = _index()
    assert index["version"] == 1
    ids = [r["id"] for r in index["vectors"]]
    assert len(ids) == len(set(ids))
    listed = {r["path"] for r in DECODE_ROWS}
    on_disk = {
        str(p.relative_to(VECTORS_DIR).with_suffix(""))
        for p in (VECTORS_DIR / "decode").rglob("*")
        if p.is_file()
    }
    assert listed == on_disk
    for r in DECODE_ROWS:
        group = "valid" if r["expect"] == "ok" else "invalid"
        assert r["path"] == f"decode/{group}/{r['id'].split('.')[-1]}"
        assert r["id"] == f"decode.{group}.{r['id'].split('.')[-1]}"
        assert r["requirements"] and all(REQ_ID.match(q) for q in r["requirements"])
        assert (VECTORS_DIR / f"{r['path']}.dfp").is_file()
        assert (VECTORS_DIR / f"{r['path']}.json").is_file()
    assert len(VALID_ROWS) >= 20
    assert len(DECODE_ROWS) - len(VALID_ROWS) >= 20
    # every error code has at least one vector: a decode vector, or for NON_FINITE_RESULT (a verdict
    # of the receive step, DF-RCV-50, not of the packet alone) and BAD_SIGNATURE (a verdict that needs
    # the receiver's pinned keys, DF-SEC-142) a receive vector
    step_codes = {ErrorCode.NON_FINITE_RESULT.value, ErrorCode.BAD_SIGNATURE.value}
    codes = {c.value for c in ErrorCode}
    assert {r["expect"] for r in DECODE_ROWS} == {"ok", *(codes - step_codes)}
    receive_codes = {
        c
        for r in _index()["vectors"]
        if r["kind"] == "receive"
        for c in r["expect"]["rejections"]
        if c is not None
    }
    assert step_codes <= receive_codes


@pytest.mark.parametrize("row", DECODE_ROWS, ids=[r["id"] for r in DECODE_ROWS])
def test_vector(row: dict[str, Any]) -> None:
    # REQ: DF-RCV-1
    data, meta = _load(row)
    ctx = meta["context"]
    assert set(ctx) == {"fingerprint", "num_params", "hop_limit", "max_packet_size"}
    assert meta["requirements"] == row["requirements"] and meta["description"]
    if row["expect"] == "ok":
        assert "error" not in meta
        p = _decode_with_context(data, ctx)
        assert packet_to_json(p) == meta["packet"]
        # the JSON is exact: parsed back and encoded, it decodes to its quantized form, the same packet
        # (a raw Q8 vector, e.g. q = -128, holds values no encoder writes: REQ: DF-PKT-111)
        again = packet_from_json(meta["packet"])
        assert decode_packet(encode_packet(again)) == quantize_packet(again)
        assert ValueEncoding(p.encoding) is ValueEncoding.Q8 or quantize_packet(again) == p
    else:
        assert "packet" not in meta and meta["error"] == row["expect"]
        with pytest.raises(DecodeError) as info:
            _decode_with_context(data, ctx)
        assert info.value.code.value == row["expect"]


def test_vector_manifests_match_their_fingerprints() -> None:
    # REQ: DF-MAN-5
    for row in DECODE_ROWS:
        _, meta = _load(row)
        text = "deltafabric-manifest/1\n" + "".join(
            f"{t['name']}\tf32\t{','.join(str(d) for d in t['shape'])}\n"
            for t in sorted(meta["manifest"]["tensors"], key=lambda t: t["name"].encode())
        )
        n = sum(int(np.prod(t["shape"], dtype=np.int64)) for t in meta["manifest"]["tensors"])
        if row["id"] != "decode.invalid.fingerprint_mismatch":
            assert hashlib.sha256(text.encode()).hexdigest() == meta["context"]["fingerprint"], row[
                "id"
            ]
        assert n == meta["context"]["num_params"], row["id"]


def test_valid_vectors_read_by_flatc(tmp_path: Path) -> None:
    # REQ: DF-PKT-1
    files = [VECTORS_DIR / f"{r['path']}.dfp" for r in VALID_ROWS]
    out = tmp_path / "flatc"
    subprocess.run(
        [
            str(FLATC),
            "--json",
            "--strict-json",
            "--raw-binary",
            "-o",
            str(out),
            str(SCHEMA),
            "--",
            *map(str, files),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for r, f in zip(VALID_ROWS, files, strict=True):
        got = json.loads((out / f"{f.stem}.json").read_text(encoding="utf-8"))
        want = _load(r)[1]["packet"]
        assert got.get("version_major") == want["version_major"]
        assert got.get("version_minor", 0) == want["version_minor"]
        assert got["sender"] == int(want["sender"], 16)
        assert got["sender_incarnation"] == int(want["sender_incarnation"], 16)
        assert bytes(got["fingerprint"]).hex() == want["fingerprint"]
        assert got.get("encoding", "F32") == want["encoding"]
        assert len(got["entries"]) == len(want["entries"])
        for ge, we in zip(got["entries"], want["entries"], strict=True):
            assert ge["origin"] == int(we["origin"], 16) and ge["incarnation"] == int(
                we["incarnation"], 16
            )
            assert ge["seq"] == we["seq"] and ge.get("hops", 0) == we["hops"]
            if want.get("index_encoding") == "PACKED":  # 1.1, REQ: DF-PKT-110
                assert ge.get("indices", []) == []
                assert decode_indices(bytes(ge["packed_indices"])).tolist() == we["indices"]
            else:
                assert ge["indices"] == we["indices"]
            values = np.asarray(we["values"], dtype=np.float32)
            if want["encoding"] == "Q8":  # 1.1: fl32(q * scale), flatc prints the scale rounded
                q = np.asarray(ge.get("values8", []), dtype=np.float64)
                nz = q != 0
                assert not values[~nz].any()
                # flatc prints the scale with 6 decimals: each value / q is the scale, to 5e-7
                np.testing.assert_allclose(
                    values[nz] / q[nz], float(ge.get("scale", 0.0)), rtol=1e-6, atol=5e-7
                )
            elif want["encoding"] == "F32":
                assert "values16" not in ge
                np.testing.assert_allclose(
                    ge["values"], values, rtol=1e-6, atol=1e-6
                )  # flatc prints 6 decimals
            else:
                assert "values" not in ge
                if want["encoding"] == ValueEncoding.F16.name:
                    bits = values.astype(np.float16).view(np.uint16)
                else:
                    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
                assert ge["values16"] == bits.tolist()
