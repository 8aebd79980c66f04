"""`delta-fabric inspect` on the decode vectors: in-process for all, as a subprocess for some."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from delta_fabric.cli import main
from delta_fabric.wire import Entry, Packet, encode_packet

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO_ROOT / "conformance" / "vectors"
CLI = REPO_ROOT / ".venv" / "bin" / "delta-fabric"
ROWS = [
    r
    for r in json.loads((VECTORS_DIR / "index.json").read_text())["vectors"]
    if r["kind"] == "decode"
]


def _meta(row: dict[str, Any]) -> dict[str, Any]:
    d: dict[str, Any] = json.loads((VECTORS_DIR / f"{row['path']}.json").read_text())
    return d


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_inspect_every_vector_in_process(
    row: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # REQ: DF-RCV-1
    base = VECTORS_DIR / row["path"]
    rc = main(
        [
            "inspect",
            str(base.with_suffix(".dfp")),
            "--context",
            str(base.with_suffix(".json")),
        ]
    )
    out, err = capsys.readouterr()
    got = json.loads(out)
    if row["expect"] == "ok":
        assert rc == 0 and err == ""
        assert got == _meta(row)["packet"]
    else:
        assert rc == 1
        assert got["error"] == row["expect"] and isinstance(got["detail"], str)
        assert len(err.strip().splitlines()) == 1 and row["expect"] in err


def test_context_may_be_a_plain_context_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # REQ: DF-ERR-7
    base = VECTORS_DIR / "decode/invalid/hop_limit_exceeded"
    ctx = _meta({"path": "decode/invalid/hop_limit_exceeded"})["context"]
    plain = tmp_path / "ctx.json"
    plain.write_text(json.dumps(ctx))
    assert main(["inspect", str(base.with_suffix(".dfp")), "--context", str(plain)]) == 1
    assert json.loads(capsys.readouterr().out)["error"] == "HOP_LIMIT"
    plain.write_text(json.dumps(ctx | {"hop_limit": 255}))
    assert main(["inspect", str(base.with_suffix(".dfp")), "--context", str(plain)]) == 0
    # without a context only the context-free checks run
    assert main(["inspect", str(base.with_suffix(".dfp"))]) == 0
    capsys.readouterr()


def test_max_packet_size_option_overrides_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # REQ: DF-ERR-1
    base = VECTORS_DIR / "decode/valid/single_entry_f32"
    dfp, ctx = str(base.with_suffix(".dfp")), str(base.with_suffix(".json"))
    size = base.with_suffix(".dfp").stat().st_size
    assert main(["inspect", dfp, "--context", ctx, "--max-packet-size", str(size)]) == 0
    assert main(["inspect", dfp, "--context", ctx, "--max-packet-size", str(size - 1)]) == 1
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["error"] == "OVERSIZE"


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"context": {"num_params": 1}}',
        '{"fingerprint": "00", "num_params": 1, "hop_limit": 1}',
    ],
)
def test_bad_context_file_is_a_usage_error(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "ctx.json"
    bad.write_text(content)
    dfp = VECTORS_DIR / "decode/valid/single_entry_f32.dfp"
    assert main(["inspect", str(dfp), "--context", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "bad context file" in err


def test_non_finite_values_print_as_strings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # inspect without context prints a valid packet; NaN is rejected by decode, so print via JSON
    # helper path
    p = Packet(1, 2, bytes(32), (Entry(3, 4, 5, 0, [1, 2], [-0.0, 1e-45]),))
    f = tmp_path / "p.dfp"
    f.write_bytes(encode_packet(p))
    assert main(["inspect", str(f)]) == 0
    values = json.loads(capsys.readouterr().out)["entries"][0]["values"]
    assert str(values[0]) == "-0.0" and values[1] == float.fromhex("0x1p-149")


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(CLI), "inspect", *args],
        input=stdin,
        capture_output=True,
        check=False,
        timeout=60,
    )


SUBPROCESS_CASES = [
    "decode/valid/multi_origin",
    "decode/valid/bf16_extremes",
    "decode/invalid/truncated_buffer",
    "decode/invalid/fingerprint_mismatch",
    "decode/invalid/f16_inf_value",
]


@pytest.mark.parametrize("path", SUBPROCESS_CASES)
def test_inspect_subprocess(path: str) -> None:
    base = VECTORS_DIR / path
    meta = _meta({"path": path})
    r = _run(str(base.with_suffix(".dfp")), "--context", str(base.with_suffix(".json")))
    got = json.loads(r.stdout)
    assert b"Traceback" not in r.stderr
    if "packet" in meta:
        assert r.returncode == 0 and got == meta["packet"] and r.stderr == b""
    else:
        assert r.returncode == 1 and got["error"] == meta["error"]
        assert len(r.stderr.decode().strip().splitlines()) == 1


def test_inspect_subprocess_stdin_and_missing_file(tmp_path: Path) -> None:
    data = (VECTORS_DIR / "decode/valid/zero_entries.dfp").read_bytes()
    r = _run("-", stdin=data)
    assert r.returncode == 0 and json.loads(r.stdout)["entries"] == []
    r = _run(str(tmp_path / "missing.dfp"))
    assert r.returncode == 2 and r.stdout == b"" and b"Traceback" not in r.stderr
    assert len(r.stderr.decode().strip().splitlines()) == 1
    r = _run("-", stdin=b"garbage!")
    assert r.returncode == 1 and json.loads(r.stdout)["error"] == "BAD_IDENTIFIER"


def test_module_entry_point() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "delta_fabric.cli",
            "inspect",
            str(VECTORS_DIR / "decode/invalid/empty_buffer.dfp"),
        ],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert r.returncode == 1 and json.loads(r.stdout)["error"] == "BAD_IDENTIFIER"
