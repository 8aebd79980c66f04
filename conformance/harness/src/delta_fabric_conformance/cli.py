"""The conformance suite's command line (``delta-fabric-conformance run --output DIR``, also reachable as
``delta-fabric conformance run ...`` and ``python -m delta_fabric_conformance run ...``).

Finds the suite data as :mod:`delta_fabric_conformance.suite` says (``--suite DIR``,
``$DELTA_FABRIC_SUITE``, or the checkout around the current directory), reads
``interop/implementations.json``, starts every driver (``conformance/driver-protocol.md``), runs the
vectors of ``conformance/vectors/index.json``, the encode producer x consumer matrix and the live
scenarios of ``conformance/scenarios/``, and writes ``DIR/results.json`` and ``DIR/matrix.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from delta_fabric.cli_support import (
    HelpFormatter,
    add_version_argument,
    exit_quietly_on_broken_pipe,
    one_line_errors,
)

from delta_fabric_conformance import __version__
from delta_fabric_conformance.suite import ENV_VAR, Suite, SuiteError, SuiteNotFound, find_suite

__all__ = ["add_arguments", "main", "run", "run_suite"]

_SUITE_HELP = (
    f"suite root: a DeltaFabric checkout holding conformance/, interop/ and spec/ (default: "
    f"${ENV_VAR}, else the current directory or its nearest parent that is one)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser(
        "run",
        help="run the suite against the registered implementations",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--suite", type=Path, default=None, metavar="DIR", help=_SUITE_HELP)
    p.add_argument(
        "--output", type=Path, required=True, help="directory for results.json, matrix.md, logs"
    )
    p.add_argument(
        "--impl",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this implementation (repeatable; default: all registered)",
    )
    p.add_argument(
        "--enforce-recommended",
        action="store_true",
        help="an unexpected RECOMMENDED failure fails the run too",
    )
    p.add_argument("--registry", type=Path, default=None, help="default: SUITE/interop/...")
    p.add_argument("--vectors", type=Path, default=None, help="default: SUITE/conformance/vectors")
    p.add_argument(
        "--scenarios", type=Path, default=None, help="default: SUITE/conformance/scenarios"
    )
    p.add_argument(
        "--expected-failures",
        type=Path,
        default=None,
        help="default: SUITE/conformance/expected-failures",
    )
    p.add_argument("--spec", type=Path, default=None, help="default: SUITE/spec/protocol.md")
    p.add_argument(
        "--tests",
        action="append",
        default=[],
        metavar="GLOB",
        help="run only tests whose id matches (fnmatch, repeatable)",
    )
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this live scenario (repeatable)",
    )
    p.add_argument("--no-live", action="store_true", help="skip the live Zenoh scenarios")
    p.add_argument("-v", "--verbose", action="store_true", help="print every test result")
    c = sub.add_parser(
        "coverage",
        help="print requirement coverage of vectors and scenarios vs the spec",
        formatter_class=HelpFormatter,
    )
    c.add_argument("--suite", type=Path, default=None, metavar="DIR", help=_SUITE_HELP)
    c.add_argument("--vectors", type=Path, default=None, help="default: SUITE/conformance/vectors")
    c.add_argument(
        "--scenarios", type=Path, default=None, help="default: SUITE/conformance/scenarios"
    )
    c.add_argument("--spec", type=Path, default=None, help="default: SUITE/spec/protocol.md")


def _resolve(args: argparse.Namespace) -> Suite:
    """Find the suite and fill every path argument left at its default from it."""
    suite = find_suite(getattr(args, "suite", None))
    defaults = {
        "registry": suite.registry,
        "vectors": suite.vectors,
        "scenarios": suite.scenarios,
        "expected_failures": suite.expected_failures,
        "spec": suite.spec,
    }
    for key, value in defaults.items():
        if getattr(args, key, value) is None:
            setattr(args, key, value)
    args.suite = suite.root
    return suite


def _citations(vectors: Path, scenarios: Path) -> list[tuple[str, list[str]]]:
    from delta_fabric_conformance.live import load_scenarios  # numpy: imported only when needed

    out: list[tuple[str, list[str]]] = []
    index = vectors / "index.json"
    if index.is_file():
        with open(index, encoding="utf-8") as f:
            for row in json.load(f)["vectors"]:
                out.append((str(row["id"]), list(row.get("requirements", []))))
    for sc in load_scenarios(scenarios):
        out.append((f"live.{sc['id']}", list(sc.get("requirements", []))))
    return out


_CITE_RE = re.compile(r"\bREQ:\s*(DF-[A-Z]+-\d+(?:\s*,\s*DF-[A-Z]+-\d+)*)")
_TEST_FN_RE = re.compile(r"^\s*(?:async\s+)?(?:def|fn)\s+(\w+)")
_SKIP_DIRS = {".git", ".venv", "target", "__pycache__", "_generated", "generated"}


def _unit_test_citations(root: Path) -> list[tuple[str, list[str]]]:
    """``REQ: DF-...`` citations in the Python and Rust test code under the suite root ``root``,
    attributed to the enclosing test function: ``pytest:tests/test_x.py::test_y`` or
    ``cargo:interop/.../file.rs::name``."""
    out: list[tuple[str, list[str]]] = []
    sources = [(root / "tests", "*.py", "pytest"), (root / "interop", "*.rs", "cargo")]
    for base, pattern, runner in sources:
        if not base.is_dir():
            continue
        for path in sorted(base.rglob(pattern)):
            rel = path.relative_to(root)
            if _SKIP_DIRS.intersection(rel.parts) or rel.name == "test_traceability.py":
                continue
            func = "<module>"
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                fm = _TEST_FN_RE.match(line)
                if fm:
                    func = fm.group(1)
                m = _CITE_RE.search(line)
                if m:
                    ids = re.findall(r"DF-[A-Z]+-\d+", m.group(1))
                    out.append((f"{runner}:{rel}::{func}", ids))
    return out


def _per_implementation_coverage(root: Path) -> dict[str, Any] | None:
    """MUST coverage per implementation, by the rules of ``conformance/tools/traceability.py`` (the ones
    ``tests/test_traceability.py`` enforces): ``{impl: {"covered", "must", "uncovered"}}``; None when
    ``root`` is not a repository checkout holding that tool."""
    import importlib.util

    path = root / "conformance" / "tools" / "traceability.py"
    spec = importlib.util.spec_from_file_location("df_traceability", path)
    if not path.is_file() or spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    figures: dict[str, Any] = mod.figures(root)
    return figures


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; a missing suite is one line on stderr and exit status 2."""
    try:
        _resolve(args)
    except SuiteNotFound as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    from delta_fabric_conformance.report import compute_coverage

    if args.action == "coverage":
        cov = compute_coverage(args.spec, _citations(args.vectors, args.scenarios))
        full = compute_coverage(
            args.spec, _citations(args.vectors, args.scenarios) + _unit_test_citations(args.suite)
        )
        per_impl = _per_implementation_coverage(args.spec.resolve().parents[1])
        out = {"suite": cov.to_json(), "with_unit_tests": full.to_json()}
        print(json.dumps(out | {"per_implementation": per_impl}, indent=1))
        print(f"coverage by vectors and scenarios: {cov.figure()}", file=sys.stderr)
        print(f"coverage with unit tests of any language: {full.figure()}", file=sys.stderr)
        for name, fig in (per_impl or {}).items():
            print(
                f"coverage for {name} (tests, vectors and scenarios that run against it): "
                f"{fig['covered']}/{fig['must']} MUST ids, uncovered: {' '.join(fig['uncovered']) or 'none'}",
                file=sys.stderr,
            )
        return 0
    return run_suite(args)


def run_suite(args: argparse.Namespace) -> int:
    """``run``: ``args`` as :func:`add_arguments` parses them, every path filled (see :func:`run`)."""
    from delta_fabric_conformance.claims import OPTIONAL_FEATURES
    from delta_fabric_conformance.registry import load_registry
    from delta_fabric_conformance.report import compute_coverage, impl_counts, write_outputs
    from delta_fabric_conformance.runner import Options, Runner

    suite = Suite.at(args.suite)

    impls = load_registry(args.registry)
    if args.impl:
        unknown = sorted(set(args.impl) - {i.name for i in impls})
        if unknown:
            print(f"conformance: unknown implementation(s) {unknown}", file=sys.stderr)
            return 2
        impls = [i for i in impls if i.name in args.impl]
    opts = Options.from_suite(
        suite,
        args.output,
        impls=list(args.impl),
        registry=args.registry,
        vectors=args.vectors,
        scenarios=args.scenarios,
        expected_failures=args.expected_failures,
        spec=args.spec,
        tests=list(args.tests),
        scenario_names=list(args.scenario),
        live=not args.no_live,
        enforce_recommended=args.enforce_recommended,
        verbose=args.verbose,
    )
    t0 = time.time()
    runner = Runner(impls, opts)
    try:
        results = runner.run()
    except SuiteError as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    coverage = compute_coverage(args.spec, _citations(args.vectors, args.scenarios))
    header: dict[str, Any] = {
        "version": 1,
        "suite": "deltafabric-conformance",
        "driver_protocol": "1.0",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "duration_s": round(time.time() - t0, 2),
        "implementations": [
            {"name": r.name, "skipped": r.skipped}
            if r.skipped is not None
            else {
                "name": r.name,
                "registered_framework": r.impl.framework,
                "command": list(r.impl.command),
                **(r.hello or {"hello": None}),
                "level": r.level,
                "features": sorted(r.caps & OPTIONAL_FEATURES),
                "restarts": r.restarts,
                "abandoned": r.abandoned,
            }
            for r in runner.runs
        ],
    }
    # strict expected-failure lists: patterns that named no test at all are reported (not fatal: a
    # pattern may name tests of a --tests/--impl subset that did not run)
    stale = {
        n: sorted(set(x.patterns) - x.used)
        for n, x in runner.xfail.items()
        if set(x.patterns) - x.used
    }
    header["expected_failure_patterns_unused"] = stale
    full = compute_coverage(
        args.spec, _citations(args.vectors, args.scenarios) + _unit_test_citations(args.suite)
    )
    header["coverage_with_unit_tests"] = full.to_json()
    counts = write_outputs(
        args.output, results, [i.name for i in impls], runner.encode_matrix, coverage, header
    )
    for skipped in runner.runs:
        if skipped.skipped is not None:
            print(f"  skipped: {skipped.name}: {skipped.skipped}", file=sys.stderr)
    for r in results:
        if r.verdict in ("unexpected_failure", "unexpected_pass"):
            print(
                f"  {r.verdict.upper()}: {r.id} [{', '.join(r.impls)}] {r.message[:300]}",
                file=sys.stderr,
            )
        elif r.verdict == "warning":
            print(f"  warning: {r.id} [{', '.join(r.impls)}] {r.message[:300]}", file=sys.stderr)
    print(
        f"conformance: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['unsupported']} unsupported, {counts['not_claimed']} not claimed, "
        f"{counts['skipped']} skipped"
    )
    for run in runner.runs:
        if run.skipped is not None or run.hello is None:
            continue
        n = impl_counts(results, run.name)
        feats = ", ".join(sorted(run.caps & OPTIONAL_FEATURES)) or "none"
        print(
            f"  {run.name}: level {run.level}, optional features {feats}: {n['passed']} passed, "
            f"{n['failed']} failed, {n['unsupported']} unsupported, {n['not_claimed']} not claimed"
        )
    print(
        f"  {counts['expected_failures']} expected failures, {counts['unexpected_failures']} unexpected "
        f"failures, {counts['unexpected_passes']} unexpected passes; coverage by vectors and "
        f"scenarios: {coverage.figure()}, with unit tests: {full.figure()}; "
        f"results: {args.output / 'results.json'}, {args.output / 'matrix.md'}"
    )
    return 1 if counts["unexpected_failures"] or counts["unexpected_passes"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``delta-fabric-conformance`` console script."""
    parser = argparse.ArgumentParser(
        prog="delta-fabric-conformance",
        description="Run the DeltaFabric conformance suite against the registered implementations "
        "(vectors, encode matrix, live scenarios) or report its requirement coverage.",
        formatter_class=HelpFormatter,
    )
    add_version_argument(parser, "delta-fabric-conformance", __version__)
    add_arguments(parser)
    one_line_errors(parser)
    args = parser.parse_args(argv)
    return exit_quietly_on_broken_pipe(lambda: run(args))
