"""The conformance harness as its own package: where it finds the suite, optional implementations
(skipped with the reason, never failed), the driver kit's seams, the ``delta-fabric`` delegation, and
the gating of tests by the claimed level and OPTIONAL features (fakes in tests/fake_drivers/ that claim
less: F32 only, version 1.0)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from delta_fabric.cli import SUBCOMMANDS
from delta_fabric.cli import main as cli_main
from delta_fabric_conformance.claims import (
    COMMANDS_1_1,
    FEATURES_1_1,
    OPTIONAL_FEATURES,
    config_features,
    implementation_level,
    not_claimed_reason,
    packet_features,
    spec_1_1_ids,
    vector_level,
)
from delta_fabric_conformance.cli import main as harness_main
from delta_fabric_conformance.kit import Driver, PeerHost, run_generate, run_receive
from delta_fabric_conformance.registry import Implementation, load_registry
from delta_fabric_conformance.runner import expected_at_level, vector_test_id
from delta_fabric_conformance.suite import ENV_VAR, Suite, SuiteNotFound, find_suite

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "conformance" / "vectors"
MISSING = "delta_fabric_no_such_framework"


# --- where the suite is -----------------------------------------------------------------------------
def test_suite_paths_from_root_or_its_conformance_folder() -> None:
    for given in (ROOT, ROOT / "conformance"):
        s = Suite.at(given)
        assert s.root == ROOT
        assert (s.vectors / "index.json").is_file() and s.schema.is_file()
        assert s.registry.is_file() and s.spec.is_file() and s.scenarios.is_dir()


def test_find_suite_explicit_env_then_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert find_suite(ROOT).root == ROOT
    assert find_suite(cwd=ROOT / "tests" / "fake_drivers").root == ROOT  # nearest parent
    with pytest.raises(SuiteNotFound, match="--suite DIR"):
        find_suite(cwd=tmp_path)
    monkeypatch.setenv(ENV_VAR, str(ROOT))
    assert find_suite(cwd=tmp_path).root == ROOT
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(SuiteNotFound, match=ENV_VAR):
        find_suite(cwd=ROOT)
    with pytest.raises(SuiteNotFound, match="no conformance suite at"):
        find_suite(tmp_path / "absent")


def test_missing_suite_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert harness_main(["run", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--suite DIR" in err
    assert not (tmp_path / "out").exists()
    assert harness_main(["coverage", "--suite", str(tmp_path)]) == 2
    assert "no conformance suite at" in capsys.readouterr().err


# --- optional implementations ----------------------------------------------------------------------
def _entry(name: str, **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "language": "python",
        "framework": "jaxish",
        "command": ["{python}", "-c", f"import {MISSING}"],
        "capabilities": ["decode"],
        **kw,
    }


def _write_registry(tmp: Path, *entries: Mapping[str, Any]) -> Path:
    p = tmp / "implementations.json"
    p.write_text(json.dumps({"version": 1, "implementations": list(entries)}))
    return p


def _run(registry: Path, out: Path) -> int:
    args = ["--suite", str(ROOT), "--registry", str(registry), "--no-live", "--output", str(out)]
    return cli_main(["conformance", "run", *args])


def test_registry_optional_and_requires(tmp_path: Path) -> None:
    reg = _write_registry(
        tmp_path,
        _entry("a", optional=True, requires={"python": [MISSING, "numpy"]}, build="pip install x"),
        _entry("b"),
    )
    a, b = load_registry(reg)
    assert a.optional and a.requires_python == (MISSING, "numpy")
    reason = a.missing_requirements()
    assert reason is not None and MISSING in reason and "numpy" not in reason
    assert "pip install x" in reason
    assert not b.optional and b.missing_requirements() is None
    # the checked-in registry names what the Python driver needs
    registry = load_registry(ROOT / "interop" / "implementations.json")
    python = next(i for i in registry if i.name == "python")
    assert set(python.requires_python) >= {"torch"}
    for bad in (
        {"optional": "yes"},
        {"requires": ["torch"]},
        {"requires": {"rust": ["x"]}},
        {"requires": {"python": "torch"}},
    ):
        with pytest.raises(ValueError):
            Implementation.from_json(_entry("c", **bad))


def test_optional_implementation_not_installed_is_skipped_with_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reg = _write_registry(tmp_path, _entry("jaxish", optional=True, requires={"python": [MISSING]}))
    out = tmp_path / "out"
    rc = _run(reg, out)
    captured = capsys.readouterr()
    assert rc == 0  # a skipped optional implementation never fails the run
    results = json.loads((out / "results.json").read_text())
    (only,) = results["tests"]
    assert only["id"] == "Required.protocol.hello.handshake"
    assert only["result"] == "skipped" and only["verdict"] == "skipped"
    assert MISSING in only["message"] and "not installed" in only["message"]
    assert results["summary"]["skipped"] == 1 and results["summary"]["failed"] == 0
    assert results["implementations"] == [{"name": "jaxish", "skipped": only["message"]}]
    assert f"skipped: jaxish: optional implementation not run: Python module(s) {MISSING}" in (
        captured.err
    )
    assert "1 skipped" in captured.out
    assert "`jaxish`: SKIPPED:" in (out / "matrix.md").read_text()
    assert not (out / "logs" / "jaxish.stderr.log").exists()  # never started


def test_required_implementation_not_installed_fails_naming_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reg = _write_registry(tmp_path, _entry("jaxish", requires={"python": [MISSING]}))
    out = tmp_path / "out"
    rc = _run(reg, out)
    capsys.readouterr()
    assert rc == 1
    results = json.loads((out / "results.json").read_text())
    hs = next(t for t in results["tests"] if t["id"] == "Required.protocol.hello.handshake")
    assert hs["result"] == "failed" and MISSING in hs["message"]
    assert results["summary"]["skipped"] == 0


# --- the delta-fabric entry point delegates ----------------------------------------------------------
def test_delta_fabric_conformance_names_the_package_when_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module, help_text, dist = SUBCOMMANDS["conformance"]
    assert module.startswith("delta_fabric_conformance") and "delta-fabric-conformance" in dist
    monkeypatch.setitem(
        SUBCOMMANDS, "conformance", ("delta_fabric_absent_pkg.cli", help_text, dist)
    )
    assert cli_main(["conformance", "run", "--output", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "delta-fabric-conformance" in err and "conformance/harness" in err


# --- the driver kit -----------------------------------------------------------------------------------
def test_driver_framework_is_explicit_and_capabilities_follow_the_kit() -> None:
    from delta_fabric_conformance.drivers.numpy import make_driver as numpy_driver
    from delta_fabric_conformance.drivers.torch import TorchKit
    from delta_fabric_conformance.drivers.torch import make_driver as torch_driver

    t = torch_driver().hello({"versions": [1]})
    assert (t["name"], t["framework"]) == ("python", "torch")
    n = numpy_driver().hello({"versions": [1]})
    assert (n["name"], n["framework"]) == ("python-numpy", "numpy")
    if "peer" in t["capabilities"]:  # zenoh installed
        assert "peer.train" in t["capabilities"] and "peer.train" not in n["capabilities"]
    with pytest.raises(ValueError, match="model kit"):
        Driver("x", "jax", TorchKit())


def test_driver_logs_with_its_name_and_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    d = Driver("mydriver", "numpy")
    out = d.respond({"cmd": "generate", "vector": {}})
    assert "errored" in out and "Traceback" in out["errored"]["traceback"]
    err = capsys.readouterr().err
    assert err.startswith("[mydriver-driver] generate failed: KeyError")
    assert "Traceback (most recent call last)" in err


def _case(path: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((VECTORS / path).read_text())
    return case


def torch_apply(active: Any, indices: Any, values: Any) -> Any:
    """DF-RCV-7 through PyTorch: ``index_add_`` in f32, as the PyTorch adapter applies an aggregate."""
    import torch

    t = torch.from_numpy(active)
    t.index_add_(0, torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(values))
    return t.numpy()


def test_engine_hooks_route_weights_and_agree_with_numpy() -> None:
    case = _case("receive/plain_apply/case.json")
    vector = {k: v for k, v in case.items() if k not in ("expected", "description")}
    packets = [(VECTORS / "receive/plain_apply" / str(p)).read_bytes() for p in case["packets"]]
    calls: list[int] = []

    def counting_apply(active: Any, indices: Any, values: Any) -> Any:
        calls.append(int(indices.size))
        return torch_apply(active, indices, values)

    plain = run_receive(vector, packets)
    hooked = run_receive(vector, packets, apply=counting_apply)
    assert calls and calls[0] > 0
    assert hooked == plain
    with pytest.raises(ValueError, match="apply hook returned"):
        run_receive(vector, packets, apply=lambda a, i, v: a[:-1])

    gen = _case("generate/basic.json")
    gvec = {k: v for k, v in gen.items() if k not in ("expected", "description")}
    seen: list[np.ndarray[Any, Any]] = []

    def gather(active: Any) -> Any:
        seen.append(active.copy())
        return active

    assert run_generate(gvec, gather=gather) == run_generate(gvec)
    assert len(seen) == 1
    with pytest.raises(ValueError, match="gather hook returned"):
        run_generate(gvec, gather=lambda a: np.zeros(1, dtype=np.float32))


def test_peer_host_builds_nodes_with_the_node_factory() -> None:
    joined: list[Mapping[str, Any]] = []

    class FakeNode:
        def __init__(self, join: Mapping[str, Any]) -> None:
            joined.append(join)
            self.manifest = type("M", (), {"fingerprint": b"\x01" * 8, "num_params": 3})()
            self.closed = False

        def report(self, weights: bool) -> dict[str, Any]:
            return {"op": "report", "weights": weights}

        def close(self) -> None:
            self.closed = True

    host = PeerHost(node_factory=FakeNode)  # type: ignore[arg-type]
    events = host.run(
        "s", [{"op": "join", "node_id": "01"}, {"op": "report", "weights": True}], 5.0
    )
    assert joined == [{"op": "join", "node_id": "01"}]
    assert events == [
        {"op": "join", "fingerprint": "01" * 8, "num_params": 3},
        {"op": "report", "weights": True},
    ]
    node = host.nodes["s"]
    host.close()
    assert node.closed and not host.nodes  # type: ignore[attr-defined]


def test_harness_does_not_import_the_demo_or_pull_it_in() -> None:
    harness = ROOT / "conformance" / "harness" / "src" / "delta_fabric_conformance"
    for path in harness.rglob("*.py"):
        assert "delta_fabric_demo" not in path.read_text(encoding="utf-8"), path
    library = ROOT / "python" / "src" / "delta_fabric"
    assert not (library / "conformance").exists() and not (library / "demo").exists()
    assert not (library / "conformance_driver.py").exists()


def test_harness_modules_have_no_import_cycle() -> None:
    """Every import between the harness's modules, lazy ones included, forms no cycle (the runner and
    the live scenarios share ``results``, not each other)."""
    import ast

    src = ROOT / "conformance" / "harness" / "src"
    graph: dict[str, set[str]] = {}
    for path in (src / "delta_fabric_conformance").rglob("*.py"):
        name = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = {
            node.module
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("delta_fabric_conformance")
        }
    assert "delta_fabric_conformance.results" in graph["delta_fabric_conformance.live"]
    assert "delta_fabric_conformance.runner" not in graph["delta_fabric_conformance.live"]

    def reaches(start: str, target: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep == target:
                    return True
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return False

    cycles = [m for m in graph if reaches(m, m)]
    assert not cycles


def test_node_args_record_accepted_entry_headers() -> None:
    from types import SimpleNamespace

    from delta_fabric.config import SyncConfig
    from delta_fabric_conformance.kit import NodeArgs

    log: list[dict[str, Any]] = []
    args = NodeArgs(None, SyncConfig.v1_0(), 1, 2, False, 0.0, log)
    args.record_accepted(
        [SimpleNamespace(origin=0xAB, incarnation=7, seq=3, hops=1, packet=0, entry=0)]
    )
    assert log == [
        {"origin": "00000000000000ab", "incarnation": "0000000000000007", "seq": 3, "hops": 1}
    ]


# --- claims: the level and the OPTIONAL features gate every test ------------------------------------
FAKES = ROOT / "tests" / "fake_drivers"
_F32_ONLY_DROPS = {"encoding.f16", "encoding.bf16", "encoding.q8", "index.packed"}
#: fake driver (tests/fake_drivers/, the reference driver filtered to a smaller claim) -> the reference
#: capabilities it does not declare
LEVEL_FAKES: dict[str, set[str]] = {
    "f32_only": _F32_ONLY_DROPS,
    "spec_1_0": set(FEATURES_1_1 | COMMANDS_1_1),
    "f16_claimed_rejected": _F32_ONLY_DROPS - {"encoding.f16"},
    "v10_minor_1": set(FEATURES_1_1 | COMMANDS_1_1),
    "v10_packed_empty_entry": set(FEATURES_1_1 | COMMANDS_1_1),
}


def _fake_registry(tmp: Path, *names: str) -> Path:
    ref = json.loads((ROOT / "interop" / "implementations.json").read_text())["implementations"]
    python = next(i for i in ref if i["name"] == "python")
    entries = [
        {
            **python,
            "name": n,
            "command": ["{python}", f"tests/fake_drivers/{n}.py"],
            "capabilities": [c for c in python["capabilities"] if c not in LEVEL_FAKES[n]],
        }
        for n in names
    ]
    return _write_registry(tmp, *entries)


@pytest.fixture(scope="module")
def level_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[int, dict[str, Any], Path]]:
    """One run (no live scenarios, no expected failures) per group of fakes: name -> (exit status,
    results.json, output folder)."""
    import contextlib
    import io

    out: dict[str, tuple[int, dict[str, Any], Path]] = {}
    for group in (
        ("f32_only",),
        ("spec_1_0",),
        ("f16_claimed_rejected", "v10_minor_1", "v10_packed_empty_entry"),
    ):
        tmp = tmp_path_factory.mktemp("_".join(group))
        (tmp / "xfail").mkdir()
        args = ["--suite", str(ROOT), "--registry", str(_fake_registry(tmp, *group))]
        args += [
            "--expected-failures",
            str(tmp / "xfail"),
            "--no-live",
            "--output",
            str(tmp / "out"),
        ]
        with contextlib.redirect_stdout(io.StringIO()):
            rc = cli_main(["conformance", "run", *args])
        results = json.loads((tmp / "out" / "results.json").read_text())
        for name in group:
            out[name] = (rc, results, tmp / "out")
    return out


def _mine(results: Mapping[str, Any], name: str) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in results["tests"] if t["impls"] == [name]}


def test_f32_only_driver_passes_its_claim_with_exit_0(
    level_runs: dict[str, tuple[int, dict[str, Any], Path]],
) -> None:
    # REQ: DF-CNF-30, DF-CNF-2, DF-CNF-4
    rc, results, out = level_runs["f32_only"]
    tests = _mine(results, "f32_only")
    assert rc == 0
    assert results["summary"]["failed"] == results["summary"]["unsupported"] == 0
    not_claimed = {t for t, r in tests.items() if r["result"] == "not_claimed"}
    assert results["summary"]["not_claimed"] == len(not_claimed) > 0
    # every test that needs an OPTIONAL encoding is not claimed, and only those
    for tid, r in tests.items():
        assert (tid in not_claimed) == bool(set(r["features"]) & _F32_ONLY_DROPS), tid
        assert r["spec_level"] in ("1.0", "1.1", "")
    for row in json.loads((VECTORS / "index.json").read_text())["vectors"]:
        if set(row.get("features", [])) & _F32_ONLY_DROPS:
            assert vector_test_id(row) in not_claimed, row["id"]
    # derived from the packet's bytes, not from the index: an F16 packet with an infinite value
    assert "encoding.f16" in tests["Required.decode.invalid.f16_inf_value"]["features"]
    assert "Required.decode.invalid.f16_inf_value" in not_claimed
    # the OPTIONAL features it does claim (1.1, signing, repair) still run
    assert tests["Required.receive.step.plain_apply"]["result"] == "passed"
    assert any(
        t.startswith("Required.repair.") and r["result"] == "passed" for t, r in tests.items()
    )
    # a valid packet of an encoding it does not claim is refused as the spec says (DF-PKT-13,
    # DF-PKT-14, DF-VER-114): UNSUPPORTED_ENCODING at 1.1
    refused = {t: r for t, r in tests.items() if t.startswith("Required.decode.refused.")}
    assert refused and all(r["result"] == "passed" for r in refused.values())
    for case in ("f16_basic", "bf16_basic", "q8_basic", "packed_delta", "packed_f16"):
        assert f"Required.decode.refused.{case}" in refused, case
    assert "Required.decode.refused.single_entry_f32" not in refused
    # and the report says what it claims
    matrix = (out / "matrix.md").read_text()
    row = next(ln for ln in matrix.splitlines() if ln.startswith("| `f32_only` |"))
    assert "| 1.1 | generate.fast, repair, signing |" in row and "**holds**" in row
    assert f"| {len(not_claimed)} |" in row
    assert "not claimed" in matrix.splitlines()[2]


def test_spec_1_0_driver_passes_the_1_0_level_with_exit_0(
    level_runs: dict[str, tuple[int, dict[str, Any], Path]],
) -> None:
    # REQ: DF-CNF-30, DF-VER-1, DF-VER-2
    rc, results, out = level_runs["spec_1_0"]
    tests = _mine(results, "spec_1_0")
    assert rc == 0
    assert results["summary"]["failed"] == results["summary"]["unsupported"] == 0
    (head,) = results["implementations"]
    assert head["spec_version"] == head["level"] == "1.0"
    assert head["features"] == ["encoding.bf16", "encoding.f16", "generate.fast"]
    for tid, r in tests.items():
        # what 1.1 added is not claimed; everything of 1.0 runs and passes
        if tid.startswith("Required.decode.refused."):
            assert r["result"] == "passed", (tid, r["message"])
        elif r["spec_level"] == "1.1":
            assert r["result"] == "not_claimed" and "a 1.1 addition" in r["message"], tid
        else:
            assert r["result"] == "passed", (tid, r["message"])
    ran = [t for t, r in tests.items() if r["spec_level"] == "1.0"]
    assert len(ran) > 150
    # a 1.0 node's relay packets carry version_minor 0 (DF-VER-1), and the vector's 1 is not asked
    assert tests["Required.receive.step.plain_apply"]["result"] == "passed"
    # 1.1's additions: Q8, PACKED, signing, the order of checks, the verifier rules
    for tid in (
        "Required.decode.valid.q8_basic",
        "Required.decode.valid.packed_delta",
        "Required.decode.invalid.order_duplicate_and_nan",
        "Required.receive.step.signed_extreme_node_ids",
    ):
        assert tests[tid]["result"] == "not_claimed", tid
    # DF-VER-114 at 1.0: a PACKED packet is LENGTH_MISMATCH (empty indices, values), a Q8 one
    # UNSUPPORTED_ENCODING (encoding 3 is unknown to 1.0), and an F16 one decodes
    assert set(tests["Required.decode.refused.packed_delta"]["requirements"]) == {
        "DF-ERR-8",
        "DF-VER-114",
    }
    assert "DF-ERR-5" in tests["Required.decode.refused.packed_q8"]["requirements"]
    assert "Required.decode.refused.f16_basic" not in tests
    assert "Required.decode.refused.packed_no_entries" in tests  # Q8: refused at 1.0 too
    row = next(
        ln for ln in (out / "matrix.md").read_text().splitlines() if ln.startswith("| `spec_1_0` |")
    )
    assert "| 1.0 | encoding.bf16, encoding.f16, generate.fast |" in row


def test_a_feature_or_level_claimed_and_failed_still_fails(
    level_runs: dict[str, tuple[int, dict[str, Any], Path]],
) -> None:
    # REQ: DF-CNF-30, DF-VER-1
    rc, results, _out = level_runs["f16_claimed_rejected"]
    assert rc == 1
    f16 = _mine(results, "f16_claimed_rejected")
    r = f16["Required.decode.valid.f16_basic"]
    assert r["result"] == "failed" and r["verdict"] == "unexpected_failure"
    assert "UNSUPPORTED_ENCODING" in r["message"]
    assert f16["Required.decode.valid.bf16_basic"]["result"] == "not_claimed"
    failed = {t for t, r in f16.items() if r["result"] == "failed"}
    assert failed and all("encoding.f16" in f16[t]["features"] for t in failed)
    # a 1.0 claim is judged by 1.0's text: a relay packet with version_minor 1 fails
    v10 = _mine(results, "v10_minor_1")
    r = v10["Required.receive.step.plain_apply"]
    assert r["result"] == "failed" and "version_minor: expected 0, got 1" in r["message"]
    # a 1.0 driver that answers EMPTY_ENTRY to a PACKED packet fails the refusal tests
    empty = _mine(results, "v10_packed_empty_entry")
    r = empty["Required.decode.refused.packed_delta"]
    assert r["result"] == "failed" and "expected LENGTH_MISMATCH" in r["message"]
    length_mismatch = {
        t
        for t, r in empty.items()
        if t.startswith("Required.decode.refused.") and "DF-ERR-8" in r["requirements"]
    }
    assert length_mismatch and {t for t, r in empty.items() if r["result"] == "failed"} == (
        length_mismatch
    )


def test_levels_and_features_of_vectors_follow_the_spec_and_their_content() -> None:
    # REQ: DF-CNF-30
    text = (ROOT / "spec" / "protocol.md").read_text()
    ids = spec_1_1_ids(text)
    # marked in the definition, in the requirement index, or by the section's heading
    assert {"DF-CNF-30", "DF-VER-114", "DF-RLY-60", "DF-PKT-110", "DF-RCV-20"} <= ids
    assert not {"DF-PKT-1", "DF-RCV-3", "DF-GEN-6", "DF-VER-1"} & ids
    assert vector_level("decode", [], ["DF-PKT-1"], ids) == "1.0"
    assert vector_level("decode", ["encoding.f16"], ["DF-PKT-13"], ids) == "1.0"
    assert vector_level("decode", ["encoding.q8"], [], ids) == "1.1"
    assert vector_level("config", [], [], ids) == "1.1"
    assert vector_level("receive", [], ["DF-RCV-3", "DF-RLY-60"], ids) == "1.1"
    assert not_claimed_reason("1.0", ["encoding.f16"], "1.1", ["encoding.f16"]) is None
    why = not_claimed_reason("1.1", ["encoding.q8", "x.unknown"], "1.0", [])
    assert why is not None and "1.1 addition" in why and "encoding.q8" in why
    assert "x.unknown" not in why  # only OPTIONAL features gate
    assert implementation_level("1.0") == "1.0" and implementation_level("1.1") == "1.1"
    assert config_features({"encoding": "BF16", "index_encoding": "PACKED"}) == {
        "encoding.bf16",
        "index.packed",
    }
    # every decode vector's index features agree with what its packet states
    for row in json.loads((VECTORS / "index.json").read_text())["vectors"]:
        if row["kind"] != "decode" or row.get("expect", "ok") != "ok":
            continue
        data = json.loads((VECTORS / f"{row['path']}.json").read_text())
        stated = set(row.get("features", [])) & OPTIONAL_FEATURES
        assert packet_features(data["packet"]) == stated, row["id"]
    # live scenarios: today's are 1.0 and need no OPTIONAL feature; a cluster configured to send Q8,
    # or a scenario that injects an F16 vector, needs the feature
    from delta_fabric_conformance.live import load_scenarios, scenario_needs

    for sc in load_scenarios(ROOT / "conformance" / "scenarios"):
        assert scenario_needs(sc, ids, VECTORS) == ([], "1.0"), sc["id"]
    q8 = {"config": {"encoding": "Q8"}, "requirements": ["DF-RCV-3"], "phases": []}
    assert scenario_needs(q8, ids, VECTORS) == (["encoding.q8"], "1.1")
    inject = {"phases": [{"b": [{"op": "inject", "vectors": ["decode/invalid/f16_inf_value"]}]}]}
    assert scenario_needs(inject, ids, VECTORS) == (["encoding.f16"], "1.0")
    # a 1.0 receiver's relay packets: version_minor 0, and no counter that 1.1 added
    exp = {
        "relay": [{"version_minor": 1, "sender": "x"}],
        "rejections": [None],
        "counters": {
            "packets_received": 1,
            "packets_accepted": 1,
            "values_applied": 3,
            "relay_dropped_oversize": 0,
        },
    }
    assert expected_at_level("receive", exp, "1.0") == {
        "relay": [{"version_minor": 0, "sender": "x"}],
        "rejections": [None],
        "counters": {"packets_accepted": 1},  # compared since 1.1
    }
    assert expected_at_level("receive", exp, "1.1") is exp
    # a 1.1 driver that leaves out a counter of DF-RCV-30 fails the comparison (the schema lets a 1.0
    # driver leave it out)
    from delta_fabric_conformance.engine_checks import check_engine_result

    got = {"counters": {"packets_accepted": 1, "values_applied": 3, "relay_dropped_oversize": 0}}
    problem = check_engine_result("receive", {}, {"counters": exp["counters"]}, got)
    assert problem is not None and "packets_received" in problem
    only = {"counters": exp["counters"]}
    assert (
        check_engine_result("receive", {}, expected_at_level("receive", only, "1.0"), got) is None
    )
    assert expected_at_level("generate", exp, "1.0") is exp
    split = {"entries": [], "exact_split": False, "max_entry_values": 4}
    assert expected_at_level("generate", split, "1.0") == {"entries": [], "exact_split": False}
    assert expected_at_level("generate", split, "1.1") is split
