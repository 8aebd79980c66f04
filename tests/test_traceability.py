"""Traceability, per implementation: every MUST-level requirement of spec/protocol.md is covered, for each
implementation of interop/implementations.json, by a test or a conformance vector or scenario that runs
against that implementation, or is listed in that implementation's ``spec/uncovered-<impl>.txt``.

The rules (what "runs against an implementation" means) are in conformance/tools/traceability.py; the
checked-in map of test sources to implementations is spec/traceability.json. A citation is a comment
``REQ: DF-XXX-N`` (comma-separated lists allowed) in a test source, or the ``requirements`` list of a vector
(conformance/vectors/index.json) or scenario (conformance/scenarios/*.json).

The tests fail when a citation names an id the spec does not define (a typo); when a citing source is not
mapped in spec/traceability.json; when an uncovered list is malformed or lists a non-MUST id; and when the
uncovered MUST ids of an implementation differ from its list in either direction, so the lists only shrink
and never go stale.

Run ``python conformance/tools/traceability.py`` for the report.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    path = ROOT / "conformance" / "tools" / "traceability.py"
    spec = importlib.util.spec_from_file_location("df_traceability", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


tr = _load()


def test_spec_defines_must_requirements() -> None:
    assert len(tr.must_ids(tr.spec_requirements())) >= 50, (
        "the parser found too few MUST-level requirements in spec/protocol.md"
    )


def test_every_citation_exists_in_spec() -> None:
    reqs = tr.spec_requirements()
    unknown = {rid: sorted(where) for rid, where in tr.collect().all.items() if rid not in reqs}
    assert not unknown, f"cited requirement ids not defined in spec/protocol.md: {unknown}"


def test_every_citing_source_is_mapped_to_an_implementation() -> None:
    smap = tr.SourceMap.load()
    problems = smap.problems() + [
        f"{rel}: cites requirements but spec/traceability.json does not say what it runs against"
        for rel in tr.collect(smap=smap).unmapped
    ]
    musts = tr.must_ids(tr.spec_requirements())
    problems += [
        f"implementation_independent: {rid} is not a MUST-level id"
        for rid in smap.independent
        if rid not in musts
    ]
    assert not problems, "\n".join(problems)


def test_map_rules_all_match_something() -> None:
    smap = tr.SourceMap.load()
    rels = [p.relative_to(ROOT).as_posix() for p in tr.source_files()]
    stale = [p for p in smap.rules if not any(r == p or fnmatch.fnmatchcase(r, p) for r in rels)]
    assert not stale, f"spec/traceability.json rules that name no source file: {stale}"


def test_harness_citations_cover_only_implementation_independent_ids() -> None:
    """A test of the runner proves nothing about a node: it cannot cover a node requirement."""
    smap = tr.SourceMap.load()
    cites = tr.collect(smap=smap)
    for impl in smap.implementations:
        own = cites.by_target.get(impl, {})
        extra = tr.covered_for(cites, smap, impl).keys() - own.keys()
        assert extra <= smap.independent.keys(), (impl, sorted(extra - smap.independent.keys()))


def test_vectors_count_only_for_implementations_that_run_them(tmp_path: Path) -> None:
    """A vector whose capability an implementation does not declare, or that its expected-failure list
    names, does not cover anything for it."""
    import json
    import shutil

    for rel in ("spec/protocol.md", "spec/traceability.json", "conformance/vectors/index.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / "conformance" / "scenarios").mkdir()
    registry = json.loads((ROOT / "interop" / "implementations.json").read_text())
    for impl in registry["implementations"]:
        if impl["name"] == "rust":
            impl["capabilities"] = [c for c in impl["capabilities"] if c != "receive"]
    (tmp_path / "interop").mkdir()
    (tmp_path / "interop" / "implementations.json").write_text(json.dumps(registry))
    xf = tmp_path / "conformance" / "expected-failures"
    xf.mkdir()
    (xf / "python.txt").write_text("Required.decode.*  # planted\n")
    cites = tr.collect(tmp_path)
    rows = json.loads((ROOT / "conformance" / "vectors" / "index.json").read_text())["vectors"]
    receive_only = {r for row in rows if row["kind"] == "receive" for r in row["requirements"]}
    receive_only -= {r for row in rows if row["kind"] != "receive" for r in row["requirements"]}
    decode_only = {r for row in rows if row["kind"] == "decode" for r in row["requirements"]}
    decode_only -= {r for row in rows if row["kind"] != "decode" for r in row["requirements"]}
    assert receive_only and decode_only
    rust, python = cites.by_target.get("rust", {}), cites.by_target.get("python", {})
    assert receive_only <= python.keys() and not receive_only & rust.keys()
    assert decode_only <= rust.keys() and not decode_only & python.keys()


def test_vectors_of_an_optional_feature_count_only_where_it_is_declared(tmp_path: Path) -> None:
    """A vector that needs an OPTIONAL feature (index ``features``, e.g. ``encoding.f16``) covers nothing
    for an implementation that does not declare it: its driver answers ``skipped`` there (issue 10,
    What to build 6: per implementation, only what runs against it)."""
    import json
    import shutil

    for rel in ("spec/protocol.md", "spec/traceability.json", "conformance/vectors/index.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / "conformance" / "scenarios").mkdir()
    (tmp_path / "conformance" / "expected-failures").mkdir()
    registry = json.loads((ROOT / "interop" / "implementations.json").read_text())
    for impl in registry["implementations"]:
        if impl["name"] == "rust":
            impl["capabilities"] = [c for c in impl["capabilities"] if c != "encoding.f16"]
    (tmp_path / "interop").mkdir()
    (tmp_path / "interop" / "implementations.json").write_text(json.dumps(registry))
    cites = tr.collect(tmp_path)
    rows = json.loads((ROOT / "conformance" / "vectors" / "index.json").read_text())["vectors"]
    f16 = [r for r in rows if "encoding.f16" in r.get("features", [])]
    assert f16, "the index marks the vectors that need F16"
    only = {rid for r in f16 for rid in r["requirements"]}
    only -= {rid for r in rows if r not in f16 for rid in r["requirements"]}
    rust, python = cites.by_target.get("rust", {}), cites.by_target.get("python", {})
    for rid in only:
        assert not any(p.startswith("vector:") for p in rust.get(rid, set())), rid
        assert any(p.startswith("vector:") for p in python.get(rid, set())), rid
    # and the vectors that need F16 do not count for rust at all
    f16_places = {f"vector:{r['id']}" for r in f16}
    assert not any(f16_places & set(places) for places in rust.values())


def test_not_applicable_ids_are_must_ids_that_nothing_covers() -> None:
    """An id excluded for an implementation is a MUST id, and not one its own tests cover (then it
    applies after all, and the exclusion is stale)."""
    smap = tr.SourceMap.load()
    musts = tr.must_ids(tr.spec_requirements())
    cites = tr.collect(smap=smap)
    problems: list[str] = []
    for impl, ids in smap.not_applicable.items():
        own = tr.covered_for(cites, smap, impl)
        problems += [f"{impl}: {rid} is not a MUST-level id" for rid in ids if rid not in musts]
        problems += [
            f"{impl}: {rid} is not applicable but cited by {sorted(own[rid])}"
            for rid in ids
            if rid in own
        ]
    assert not problems, "\n".join(problems)


def test_citations_count_for_the_mapped_implementations_only(tmp_path: Path) -> None:
    """A file's citations count for the implementation(s) its rule names, per top-level function when
    the rule says so; harness citations count only for implementation-independent ids."""
    import json
    import shutil

    for rel in ("spec/protocol.md", "interop/implementations.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / "conformance" / "vectors").mkdir(parents=True)
    (tmp_path / "conformance" / "vectors" / "index.json").write_text(
        '{"version": 1, "vectors": []}'
    )
    rules = {
        "tests/test_mixed.py": ["python", "rust"],
        "tests/test_split.py": {"*": "harness", "test_py": "python"},
    }
    independent = {"DF-CNF-1": "process"}
    (tmp_path / "spec" / "traceability.json").write_text(
        json.dumps({"sources": rules, "implementation_independent": independent})
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mixed.py").write_text(
        "def test_a() -> None:\n    # REQ: DF-GEN-1\n"
    )
    (tmp_path / "tests" / "test_split.py").write_text(
        "# REQ: DF-CNF-1, DF-GEN-2\n"
        "def test_py() -> None:\n    # REQ: DF-GEN-3\n"
        "def test_other() -> None:\n    # REQ: DF-GEN-4\n"
    )
    (tmp_path / "tests" / "test_unmapped.py").write_text("# REQ: DF-GEN-5\n")
    smap = tr.SourceMap.load(tmp_path)
    assert smap.problems() == []
    cites = tr.collect(tmp_path, smap)
    assert cites.unmapped == ["tests/test_unmapped.py"]
    python = tr.covered_for(cites, smap, "python").keys()
    rust = tr.covered_for(cites, smap, "rust").keys()
    assert python == {"DF-GEN-1", "DF-GEN-3", "DF-CNF-1"}
    assert rust == {"DF-GEN-1", "DF-CNF-1"}
    assert cites.all.keys() == {f"DF-GEN-{i}" for i in range(1, 6)} | {"DF-CNF-1"}


def test_uncovered_lists_are_well_formed() -> None:
    musts = tr.must_ids(tr.spec_requirements())
    problems: list[str] = []
    for impl in tr.SourceMap.load().implementations:
        path = tr.uncovered_path(ROOT, impl)
        listed, bad = tr.read_uncovered(path)
        problems += bad + [
            f"{path.name}: {rid} is not a MUST-level id" for rid in listed if rid not in musts
        ]
    assert not problems, "\n".join(problems)
    assert not (ROOT / "spec" / "uncovered.txt").exists(), "replaced by spec/uncovered-<impl>.txt"


def test_uncovered_lists_match_the_actual_coverage() -> None:
    print("\n" + tr.report())
    diffs: list[str] = []
    for impl, ids in tr.uncovered().items():
        path = tr.uncovered_path(ROOT, impl)
        listed, _ = tr.read_uncovered(path)
        new = [rid for rid in ids if rid not in listed]
        gone = sorted(listed.keys() - set(ids), key=tr.id_key)
        if new:
            diffs.append(f"{impl}: not covered for {impl} and not listed in {path.name}: {new}")
        if gone:
            diffs.append(f"{impl}: covered now, remove from {path.name}: {gone}")
    assert not diffs, "\n".join(diffs)


if __name__ == "__main__":
    print(tr.report())
