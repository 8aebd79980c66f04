"""Self-test of the conformance runner: it must catch every fault planted in tests/fake_drivers/, pass the
real Python driver on every REQUIRED vector, keep expected-failure lists strict both ways, and run one
short live scenario over real Zenoh (Python x Python)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from delta_fabric.cli import main as cli_main
from delta_fabric_conformance.runner import vector_test_id

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "interop" / "implementations.json"
INDEX = ROOT / "conformance" / "vectors" / "index.json"

# fake driver -> test ids (fnmatch-free, exact) that the runner must fail for it
FAULTS: dict[str, list[str]] = {
    # REQ: DF-ERR-12
    "ok_on_invalid": ["Required.decode.invalid.duplicate_index"],
    # REQ: DF-ERR-7
    "wrong_code": ["Required.decode.invalid.hop_limit_exceeded"],
    "bad_unsupported": ["Required.protocol.unknown_command.unsupported"],
    # REQ: DF-CNF-4
    "bad_encoder": ["Required.encode.valid.single_entry_f32"],
    # REQ: DF-GEN-5
    "generate_bitflip": ["Required.generate.exact.basic"],
    "stdout_log": ["Required.protocol.framing.stdout_json_lines"],
    "wrong_seq": ["Required.protocol.framing.seq_echo"],
    "crash": ["Required.protocol.lifecycle.no_crash"],
    # REQ: DF-CNF-30
    "over_claim": ["Required.protocol.hello.claims"],
    "claimed_unsupported": ["Required.receive.step.plain_apply", "Required.receive.step.duplicate"],
    # REQ: DF-GEN-30
    "split_actual_size": [
        "Required.generate.exact.split_one_past_estimate_limit",
        "Required.generate.exact.split_f16_pieces_fit_as_f32",
        # a pinning vector of the mutation campaign (h22): max_packet_size 296 splits by the estimate
        "Required.generate.exact.smallest_max_packet_size",
        # strength vectors of session 6 (h54, h55): signed entries split by the signed estimate
        "Required.generate.exact.signed_split_at_estimate_limit",
        "Required.generate.exact.signed_split_by_signed_bound",
        # session 7: the smallest signed max_packet_size, 392, one value per signed entry
        "Required.generate.exact.signed_smallest_packet_size",
    ],
    # REQ: DF-GEN-7 (fast mode judged by its bounds, 1.1: the first k candidates by index fail (d))
    "fast_first_k_by_index": [
        "Required.generate.fast.fast_basic",
        "Required.generate.fast.fast_large_dense",
        "Required.generate.fast.fast_large_sample_overestimates",
        "Required.generate.fast.fast_large_sample_underestimates",
    ],
    # REQ: DF-RCV-30
    "relayed_excludes_dropped": ["Required.receive.step.relay_dropped_oversize"],
    # REQ: DF-ZEN-41
    "snapshot_keep_first": [
        "Required.snapshot.assemble.duplicate_replaces",
        "Required.snapshot.assemble.duplicate_replaced_by_bad",
    ],
    # REQ: DF-ZEN-5
    "snapshot_serve_strict_bound": [
        "Required.snapshot.serve.packet_size_exact",
        "Required.snapshot.serve.packet_size_one_value",
        "Required.snapshot.serve.packet_size_default",
    ],
    # REQ: DF-MAN-6
    "forward_linear_transposed": [
        "Required.forward.digits_cnn.batch8",
        "Required.forward.digits_cnn.batch3_lr05",
    ],
    # REQ: DF-MAN-6
    "forward_flatten_hwc": [
        "Required.forward.digits_cnn.batch8",
        "Required.forward.digits_cnn.batch3_lr05",
    ],
    "forward_bn_flax_momentum": [
        "Required.forward.digits_cnn.batch8",
        "Required.forward.digits_cnn.batch3_lr05",
    ],
}
#: registry members of a fake that differ from the reference driver's (what its hello says)
REGISTRY_OVERRIDES: dict[str, dict[str, Any]] = {
    "over_claim": {
        "capabilities": [
            "decode",
            "encode",
            "generate",
            "generate.fast",
            "receive",
            "encoding.f16",
            "encoding.bf16",
        ]
    },
}


def _registry(tmp: Path, fakes: list[str], with_python: bool = True) -> Path:
    ref = json.loads(REGISTRY.read_text())["implementations"]
    python = next(i for i in ref if i["name"] == "python")
    impls = [python] if with_python else []
    for f in fakes:
        impls.append(
            {
                **python,
                "name": f,
                "command": ["{python}", f"tests/fake_drivers/{f}.py"],
                **REGISTRY_OVERRIDES.get(f, {}),
            }
        )
    path = tmp / "implementations.json"
    path.write_text(json.dumps({"version": 1, "implementations": impls}))
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict[str, Any]]:
    out_dir = Path(args[args.index("--output") + 1])
    rc = cli_main(["conformance", "run", "--suite", str(ROOT), *args])
    printed = capsys.readouterr().out
    return rc, printed, json.loads((out_dir / "results.json").read_text())


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("selftest")
    reg = _registry(tmp, list(FAULTS))
    empty = tmp / "xfail"
    empty.mkdir()
    out = tmp / "out"
    import argparse

    from delta_fabric_conformance.cli import run_suite

    ns = argparse.Namespace(
        action="run",
        suite=ROOT,
        output=out,
        impl=[],
        enforce_recommended=False,
        registry=reg,
        vectors=ROOT / "conformance" / "vectors",
        scenarios=ROOT / "conformance" / "scenarios",
        expected_failures=empty,
        spec=ROOT / "spec" / "protocol.md",
        tests=[],
        scenario=[],
        no_live=True,
        verbose=False,
    )
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = run_suite(ns)
    return rc, buf.getvalue(), json.loads((out / "results.json").read_text()), out


def _by_impl(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for t in results["tests"]:
        if len(t["impls"]) == 1:
            out[t["impls"][0]][t["id"]] = t
    return out


@pytest.mark.parametrize("fake", sorted(FAULTS))
def test_runner_catches_planted_fault(
    fake: str, fake_run: tuple[int, str, dict[str, Any], Path]
) -> None:
    _rc, _out, results, _dir = fake_run
    tests = _by_impl(results)[fake]
    for tid in FAULTS[fake]:
        assert tid in tests, f"{tid} not run for {fake}"
        assert tests[tid]["result"] == "failed", (fake, tid, tests[tid])
        assert tests[tid]["verdict"] == "unexpected_failure"


def test_faults_are_blamed_on_the_faulty_driver_only(
    fake_run: tuple[int, str, dict[str, Any], Path],
) -> None:
    _rc, _out, results, _dir = fake_run
    tests = _by_impl(results)
    # a fake whose fault is in one command fails nothing else (faults with restarts cascade by design)
    # the 1.0 misreadings pass every other vector: only the 1.1 boundary vectors tell them apart
    assert {t for t, r in tests["split_actual_size"].items() if r["result"] == "failed"} == set(
        FAULTS["split_actual_size"]
    )
    assert {
        t for t, r in tests["relayed_excludes_dropped"].items() if r["result"] == "failed"
    } == set(FAULTS["relayed_excludes_dropped"])
    assert {t for t, r in tests["wrong_code"].items() if r["result"] == "failed"} == {
        "Required.decode.invalid.hop_limit_exceeded",
        "Required.decode.invalid.hop_limit_255",
        "Required.decode.invalid.order_index_range_then_hop_limit",
    }
    assert {t for t, r in tests["ok_on_invalid"].items() if r["result"] == "failed"} == {
        "Required.decode.invalid.duplicate_index",
        "Required.decode.invalid.duplicate_index_zero",
        "Required.decode.invalid.order_duplicate_and_nan",
        "Required.decode.invalid.packed_gap_zero",  # 1.1, section 6.8
        "Required.decode.invalid.order_scale_nan_and_gap_zero",
        # pinning vectors of the mutation campaign (h22): a duplicate in a later entry
        "Required.decode.invalid.duplicate_index_after_lower_entry",
        "Required.decode.invalid.duplicate_index_after_lower_third_entry",
    }
    # the model mistakes fail the forward check and nothing else: the vectors and the protocol tests
    # cannot see them (same manifest, same fingerprint); the snapshot fault fails the two duplicate cases,
    # the strict packet-size bound the three serve vectors where 4 * c + 1024 = max_packet_size
    for fake in (
        "forward_linear_transposed",
        "forward_flatten_hwc",
        "forward_bn_flax_momentum",
        "snapshot_keep_first",
        "snapshot_serve_strict_bound",
    ):
        assert {t for t, r in tests[fake].items() if r["result"] == "failed"} == set(FAULTS[fake])
    assert all(
        not t.startswith("Required.decode.")
        for t, r in tests["bad_encoder"].items()
        if r["result"] == "failed"
    )
    # the bad encoder's bytes are read differently by every sound consumer: the matrix shows it
    cell = results["encode_matrix"]["bad_encoder"]["python"]
    assert cell["failed"] > 0
    assert results["encode_matrix"]["python"]["bad_encoder"]["failed"] == 0


def test_reference_driver_passes_every_required_vector(
    fake_run: tuple[int, str, dict[str, Any], Path],
) -> None:
    _rc, _out, results, _dir = fake_run
    tests = _by_impl(results)["python"]
    failed = {t: r["message"] for t, r in tests.items() if r["result"] != "passed"}
    assert not failed
    index = json.loads(INDEX.read_text())["vectors"]
    for row in index:
        tid = vector_test_id(row, row.get("level", "REQUIRED"))
        assert tid in tests, row["id"]
        assert len(tid.split(".")) == 4  # <Level>.<command>.<area>.<case>
    valid = [
        r
        for r in index
        if r["kind"] == "decode" and r.get("expect", "ok") == "ok" and r.get("encode", True)
    ]  # "encode": false: a decoder-only vector (1.1, raw Q8 values) has no encode test
    assert sum(t.startswith("Required.encode.") for t in tests) == len(valid)


def test_exit_status_summary_and_outputs(fake_run: tuple[int, str, dict[str, Any], Path]) -> None:
    rc, printed, results, out = fake_run
    assert rc == 1  # REQUIRED tests failed unexpectedly
    s = results["summary"]
    assert (
        f"conformance: {s['passed']} passed, {s['failed']} failed, {s['unsupported']} unsupported"
        in printed
    )
    matrix = (out / "matrix.md").read_text()
    assert "## Encode: producer x consumer" in matrix and "| bad_encoder |" in matrix
    assert results["coverage"]["figure"]
    for f in FAULTS:
        assert (out / "logs" / f"{f}.stderr.log").exists()


def test_every_message_schema_checked_by_runner() -> None:
    """The schema the runner validates against accepts the protocol document's example session and
    rejects responses with two outcome members or a wrong error code."""
    from delta_fabric_conformance.client import schema_validator

    schema = ROOT / "conformance" / "driver-protocol.schema.json"
    resp = schema_validator(schema, "response")
    text = (ROOT / "conformance" / "driver-protocol.md").read_text()
    block = text.split("## 8. Example session")[1]
    lines = [ln[2:] for ln in block.splitlines() if ln.startswith(("> {", "< {"))]
    assert len(lines) == 8
    req = schema_validator(schema, "request")
    for ln in lines:
        msg = json.loads(ln)
        v = req if "cmd" in msg else resp
        assert not list(v.iter_errors(msg)), ln
    assert list(resp.iter_errors({"seq": 1, "ok": {}, "errored": {"message": "x"}}))
    assert list(resp.iter_errors({"seq": 1, "rejected": {"code": "NOT_A_CODE"}}))
    assert list(resp.iter_errors({"seq": 0, "ok": {}}))


def test_expected_failures_strict_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reg = _registry(tmp_path, ["wrong_code"], with_python=False)
    xf = tmp_path / "xfail"
    xf.mkdir()
    (xf / "wrong_code.txt").write_text(
        "# planted fault\n"
        "Required.decode.invalid.hop_limit_*   # answers MALFORMED\n"
        "Required.decode.invalid.order_index_range_then_hop_limit   # answers MALFORMED\n"
        "Required.decode.valid.single_entry_f32  # passes: must come back as an unexpected pass\n"
    )
    rc, _printed, results = _run(
        [
            "--output",
            str(tmp_path / "out"),
            "--registry",
            str(reg),
            "--expected-failures",
            str(xf),
            "--no-live",
            "--tests",
            "Required.decode.*",
        ],
        capsys,
    )
    verdicts = {t["id"]: t["verdict"] for t in results["tests"]}
    assert verdicts["Required.decode.invalid.hop_limit_exceeded"] == "expected_failure"
    assert verdicts["Required.decode.invalid.hop_limit_255"] == "expected_failure"
    assert verdicts["Required.decode.valid.single_entry_f32"] == "unexpected_pass"
    assert results["summary"]["unexpected_failures"] == 0
    assert rc == 1  # the unexpected pass fails the run

    (xf / "wrong_code.txt").write_text(
        "Required.decode.invalid.hop_limit_*  # answers MALFORMED\n"
        "Required.decode.invalid.order_index_range_then_hop_limit  # answers MALFORMED\n"
    )
    rc, _printed, results = _run(
        [
            "--output",
            str(tmp_path / "out2"),
            "--registry",
            str(reg),
            "--expected-failures",
            str(xf),
            "--no-live",
            "--tests",
            "Required.decode.*",
        ],
        capsys,
    )
    assert rc == 0 and results["summary"]["expected_failures"] == 3


def test_live_python_x_python_exchange(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # REQ: DF-ZEN-1, DF-ZEN-9
    rc, printed, results = _run(
        [
            "--output",
            str(tmp_path / "out"),
            "--impl",
            "python",
            "--tests",
            "Required.live.*",
            "--scenario",
            "exchange",
        ],
        capsys,
    )
    live = [t for t in results["tests"] if t["category"] == "live"]
    assert [t["id"] for t in live] == ["Required.live.torch_x_torch.exchange"]
    assert live[0]["result"] == "passed", live[0]["message"]
    assert rc == 0, printed
    events = json.loads(
        (tmp_path / "out" / "live" / "exchange" / "python_x_python" / "events.json").read_text()
    )
    assert {e["op"] for e in events["b"]} >= {"join", "wait_alive", "wait", "report", "leave"}


def test_claims_are_enforced(fake_run: tuple[int, str, dict[str, Any], Path]) -> None:
    # REQ: DF-CNF-30
    # REQ: DF-CNF-1
    _rc, _out, results, out = fake_run
    tests = _by_impl(results)
    # the reference driver's claim (codec, engine, node) is accepted
    assert tests["python"]["Required.protocol.hello.claims"]["result"] == "passed"
    # over-claiming: refused, with the missing capabilities named
    msg = tests["over_claim"]["Required.protocol.hello.claims"]["message"]
    assert "node" in msg and "peer" in msg
    # a claimed target's REQUIRED test answered skipped is a failure, not "unsupported"
    r = tests["claimed_unsupported"]["Required.receive.step.plain_apply"]
    assert r["result"] == "failed" and "claims the engine target" in r["message"]
    # an OPTIONAL feature's test stays unsupported when the feature is not declared: the reference
    # runs all of them, so check the rule on the units instead
    from delta_fabric_conformance.claims import unsupported_claim_failure

    assert (
        unsupported_claim_failure(
            "Required.decode.valid.f16_basic", ["codec"], ["decode"], ["encoding.f16"]
        )
        is None
    )
    assert unsupported_claim_failure("Required.decode.valid.f16_basic", [], ["decode"]) is None
    assert unsupported_claim_failure("Required.live.torch_x_burn.exchange", ["engine"], []) is None
    assert (
        unsupported_claim_failure("Required.live.torch_x_burn.exchange", ["node"], []) is not None
    )
    # matrix.md shows the claims per implementation
    matrix = (out / "matrix.md").read_text()
    assert "## Claims" in matrix
    over = next(ln for ln in matrix.splitlines() if ln.startswith("| `over_claim` |"))
    assert "claim refused" in over
    assert "claims: codec, engine, node" in matrix
    row = next(ln for ln in matrix.splitlines() if ln.startswith("| `claimed_unsupported` |"))
    assert "**fails**" in row
