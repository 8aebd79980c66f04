"""Unit tests of the conformance runner's pieces: float comparison, coverage, registry, scenarios."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from delta_fabric_conformance.compare import diff_json, f32_bits
from delta_fabric_conformance.engine_checks import check_engine_result
from delta_fabric_conformance.live import load_scenarios
from delta_fabric_conformance.registry import ExpectedFailures, load_registry
from delta_fabric_conformance.report import compute_coverage, spec_requirement_ids
from delta_fabric_conformance.runner import packed_form_problems, shorter_packed_form

ROOT = Path(__file__).resolve().parents[1]


def test_floats_compare_as_f32_bit_patterns() -> None:
    assert diff_json({"v": [0.1]}, {"v": [0.100000001]}) is None  # same f32
    assert diff_json({"v": [0.1]}, {"v": [0.10000002]}) is not None  # next f32
    assert diff_json({"v": [0.0]}, {"v": [-0.0]}) is not None  # sign of zero matters
    assert diff_json({"v": [1.0]}, {"v": [1]}) is None  # an integral JSON number is the same value
    assert diff_json({"seq": 1}, {"seq": 1.0}) is not None  # integers stay integers
    assert diff_json({"v": ["nan"]}, {"v": ["nan"]}) is None
    assert diff_json({"v": ["inf"]}, {"v": [math.inf]}) is not None
    assert f32_bits(1e39) == 0x7F800000


def test_long_arrays_compare_by_the_same_rules() -> None:
    """diff_json's fast path for long arrays (the N = 2^17 vectors) keeps the item rules: floats by
    f32 pattern, ints and strings exactly, and the first difference is still reported."""
    n = 1000
    floats = [i / 3 for i in range(n)]
    assert diff_json(floats, [float(f"{x:.9g}") for x in floats]) is None  # same f32 patterns
    assert diff_json([float(i) for i in range(n)], list(range(n))) is None  # integral numbers
    zero = [0.0] * n
    assert (
        diff_json(zero, [*zero[:-1], -0.0])
        == f"/{n - 1}: expected 0.0 (f32 00000000), got -0.0 (f32 80000000)"
    )
    assert diff_json(zero, [*zero[:-1], False]) is not None  # a bool is not a number
    assert diff_json([1e39] * n, [math.inf] * n) is None  # beyond f32: the item rules (inf)
    assert diff_json(list(range(n)), [*range(n - 1), float(n - 1)]) is not None  # ints stay ints
    bits = [f"{i:08x}" for i in range(n)]
    assert diff_json(bits, list(bits)) is None
    assert (
        diff_json(bits, [*bits[:-1], "ffffffff"])
        == f"/{n - 1}: expected {bits[-1]!r}, got {'ffffffff'!r}"
    )


def test_objects_strict_or_subset() -> None:
    assert diff_json({"a": 1}, {"a": 1, "b": 2}) is not None
    assert diff_json({"a": 1}, {"a": 1, "b": 2}, subset=True) is None
    assert diff_json({"a": {"x": 1}}, {"a": {"x": 1, "y": 0}}, subset=True) is None
    assert "missing" in (diff_json({"a": 1, "c": 2}, {"a": 1}, subset=True) or "")


def test_split_invariants_for_inexact_split() -> None:
    # REQ: DF-GEN-6
    exp = {
        "exact_split": False,
        "entries": [
            {
                "origin": "01",
                "incarnation": "02",
                "indices": [0, 1, 2],
                "values_bits": ["3f800000"] * 3,
            }
        ],
        "next_seq": 3,
    }
    vec = {"seq_start": 1, "config": {"max_packet_size": 320}}

    def entry(seq: int, idx: list[int]) -> dict[str, object]:
        return {
            "origin": "01",
            "incarnation": "02",
            "seq": seq,
            "hops": 0,
            "indices": idx,
            "values_bits": ["3f800000"] * len(idx),
        }

    good = {
        "entries": [entry(1, [0, 1]), entry(2, [2])],
        "next_seq": 3,
        "entry_packet_sizes": [300, 290],
    }
    assert check_engine_result("generate", vec, exp, good) is None
    one = {"entries": [entry(1, [0, 1, 2])], "next_seq": 3}
    assert check_engine_result("generate", vec, exp, one) is not None
    gap = {"entries": [entry(1, [0, 1]), entry(3, [2])], "next_seq": 3}
    assert check_engine_result("generate", vec, exp, gap) is not None
    big = {**good, "entry_packet_sizes": [330, 290]}
    assert check_engine_result("generate", vec, exp, big) is not None


def test_spec_requirement_levels() -> None:
    text = (
        "**[DF-A-1]** A node MUST do it.\n\n**[DF-A-2]** A node SHOULD do it.\n\n"
        "## Appendix A\n\n| requirement | section | level |\n|---|---|---|\n"
        "| DF-A-1 | 1 | MUST |\n| DF-A-2 | 1 | SHOULD |\n"
    )
    assert spec_requirement_ids(text) == (["DF-A-1", "DF-A-2"], ["DF-A-1"])
    no_index = "**[DF-B-1]** It MUST.\n\n**[DF-B-2]** It MAY.\n"
    assert spec_requirement_ids(no_index) == (["DF-B-1", "DF-B-2"], ["DF-B-1"])


def test_coverage_of_the_checked_in_suite() -> None:
    from delta_fabric_conformance.cli import _citations

    cov = compute_coverage(
        ROOT / "spec" / "protocol.md",
        _citations(ROOT / "conformance" / "vectors", ROOT / "conformance" / "scenarios"),
    )
    assert cov.spec_found and cov.must
    assert not cov.unknown  # every cited id exists in the spec
    assert len(cov.covered) / len(cov.must) > 0.5


def test_expected_failure_patterns(tmp_path: Path) -> None:
    p = tmp_path / "x.txt"
    p.write_text("# comment\nRequired.decode.invalid.*  # reason\n\nRequired.live.a_x_b.ring\n")
    xf = ExpectedFailures.load(p)
    assert xf.match("Required.decode.invalid.nan_value") == "Required.decode.invalid.*"
    assert xf.match("Required.decode.valid.nan_value") is None
    assert xf.match("Required.live.a_x_b.ring") == "Required.live.a_x_b.ring"
    assert ExpectedFailures.load(tmp_path / "absent.txt").patterns == {}


def test_registry_and_scenarios_are_well_formed() -> None:
    impls = load_registry(ROOT / "interop" / "implementations.json")
    assert {i.name for i in impls} >= {"python", "rust"}
    for i in impls:
        assert "decode" in i.capabilities
    names = {
        "exchange",
        "ring_relay",
        "reorder_duplicate",
        "restart_incarnation",
        "invalid_live",
        "late_joiner",
        "mixed_training",
    }
    scenarios = {s["id"]: s for s in load_scenarios(ROOT / "conformance" / "scenarios")}
    assert names <= set(scenarios)
    for sc in scenarios.values():
        assert sc["level"] in ("REQUIRED", "RECOMMENDED")
        nodes = {n["name"] for n in sc["nodes"]}
        assert {n["role"] for n in sc["nodes"]} <= {"A", "B"}
        for ph in sc["phases"]:
            assert set(ph) <= nodes | {"*", "timeout_s"}
        assert sc["requirements"] and sc["checks"]


def test_registry_rejects_duplicates(tmp_path: Path) -> None:
    entry = {
        "name": "x",
        "language": "l",
        "framework": "f",
        "command": ["x"],
        "capabilities": ["decode"],
    }
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"version": 1, "implementations": [entry, entry]}))
    with pytest.raises(ValueError, match="duplicate"):
        load_registry(p)


def test_levels_and_verdicts(tmp_path: Path) -> None:
    from delta_fabric_conformance.runner import Options, Runner
    from delta_fabric_conformance.suite import Suite

    xf = tmp_path / "xf"
    xf.mkdir()
    (xf / "a.txt").write_text("Required.x.y.listed\n")
    impls = load_registry(ROOT / "interop" / "implementations.json")[:1]
    impls = [type(impls[0])(**{**impls[0].__dict__, "name": "a"})]
    suite = Suite.at(ROOT)
    r = Runner(impls, Options.from_suite(suite, tmp_path / "o", expected_failures=xf))
    assert r.add("Recommended.x.y.z", "RECOMMENDED", ["a"], "failed").verdict == "warning"
    assert r.add("Required.x.y.z", "REQUIRED", ["a"], "failed").verdict == "unexpected_failure"
    assert r.add("Required.x.y.listed", "REQUIRED", ["a"], "failed").verdict == "expected_failure"
    assert (
        r.add("Required.x.y.listed", "REQUIRED", ["a", "b"], "passed").verdict == "unexpected_pass"
    )
    assert r.add("Required.x.y.u", "REQUIRED", ["a"], "unsupported").verdict == "ok"
    strict = Runner(
        impls,
        Options.from_suite(suite, tmp_path / "o", expected_failures=xf, enforce_recommended=True),
    )
    assert (
        strict.add("Recommended.x.y.z", "RECOMMENDED", ["a"], "failed").verdict
        == "unexpected_failure"
    )


def test_vector_contexts_are_judged_at_the_spec_bounds() -> None:
    # the runner refuses a vector outside the spec's ranges, at the exact bounds (DF-MAN-7: N <= 2^32)
    from delta_fabric_conformance.suite import parameter_problems

    assert parameter_problems({"num_params": 2**32, "max_packet_size": 296}, "ctx") == []
    assert parameter_problems({"num_params": 2**32 + 1}, "ctx") == [
        "ctx.num_params 4294967297 outside [1, 4294967296]"
    ]
    assert parameter_problems({"max_packet_size": 295}, "ctx") != []
    assert parameter_problems({"encoding": "f16"}, "ctx") != []


def test_encode_round_trip_checks_the_shorter_packed_form() -> None:
    """The encode round trip checks DF-PKT-116's sender rule on the producer's bytes: the runner's own
    shorter-form computation gives the spec's examples, accepts the delta form written for a tie and
    flags the bitmap written for the same indices (decode vectors of section 6.8)."""
    # REQ: DF-PKT-116, DF-PKT-110
    assert shorter_packed_form([3, 7, 100]).hex() == "0003045d"
    assert shorter_packed_form([8, 9, 11, *range(16, 24)]).hex() == "01080bff"
    assert shorter_packed_form([0, 7]).hex() == "000007"  # a tie: delta
    assert shorter_packed_form([300]).hex() == "00ac02"
    assert shorter_packed_form([2**32 - 2]).hex() == "00feffffff0f"
    base = ROOT / "conformance" / "vectors" / "decode" / "valid"
    tie = json.loads((base / "packed_tie_is_delta.json").read_text())
    assert (
        packed_form_problems(tie["packet"], (base / "packed_tie_is_delta.dfp").read_bytes()) == []
    )
    bitmap = json.loads((base / "packed_bitmap_as_written.json").read_text())
    problems = packed_form_problems(
        bitmap["packet"], (base / "packed_bitmap_as_written.dfp").read_bytes()
    )
    assert problems == [
        "entries[0] packs its indices as 01 00 81, not the shorter form 00 00 07 (DF-PKT-116)"
    ]
    assert packed_form_problems({"index_encoding": "PLAIN", "entries": []}, b"") == []
