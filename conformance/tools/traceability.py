"""Per-implementation requirement traceability (stdlib only).

A requirement of ``spec/protocol.md`` is a paragraph or table row that starts with a bold bracketed id such as
``**[DF-GEN-3]**``; it is MUST-level when its text contains MUST, MUST NOT, REQUIRED, SHALL or SHALL NOT.

A MUST id is *covered for an implementation* when it is cited by something that runs against that
implementation:

* a ``REQ: DF-XXX-N`` comment (comma-separated lists allowed) in a test source that ``spec/traceability.json``
  maps to that implementation. Every source file that carries a citation MUST be mapped there, by exact path
  or by glob, optionally per top-level function (``{"*": default, "test_name": other}``): nothing is guessed;
* a conformance vector (``conformance/vectors/index.json``) whose ``requirements`` list names the id, when
  the implementation's entry in ``interop/implementations.json`` declares the capability the runner needs
  to run it (the vector's kind, ``generate.fast`` for fast-mode generation, ``snapshot.serve`` for
  ``snapshot/serve``) and every OPTIONAL feature the
  vector needs (its index row's ``features``, e.g. ``encoding.f16``: a driver without it answers
  ``skipped``), and its expected-failure list (``conformance/expected-failures/<impl>.txt``) does not name
  the test;
* a live scenario (``conformance/scenarios/*.json``) whose ``requirements`` name the id, under the same two
  conditions with the scenario's ``capabilities`` (default ``["peer"]``).

Sources mapped to ``harness`` test language-independent artifacts (the conformance runner, the vector
generator): their citations count for every implementation, but only for the ids listed under
``implementation_independent`` in the map (requirements on the conformance process and the spec's
evolution, not on a node's behaviour); for any other id they count for no implementation.

An id listed under ``not_applicable`` for an implementation (a requirement on another framework's nodes)
is left out of that implementation's count.

Run ``python conformance/tools/traceability.py`` for the report.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HARNESS = "harness"

ID_RE = re.compile(r"DF-[A-Z]+-\d+")
DEF_RE = re.compile(r"^\*\*\[(DF-[A-Z]+-\d+)\]\*\*")
MUST_RE = re.compile(r"\b(MUST|REQUIRED|SHALL)\b")
CITE_RE = re.compile(r"\bREQ:\s*(DF-[A-Z]+-\d+(?:\s*,\s*DF-[A-Z]+-\d+)*)")
LIST_MARK = re.compile(r"^(?:[-+]\s+|\d+\.\s+)")
PY_TOP_RE = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)")
SKIP_DIRS = {".git", ".venv", "target", "node_modules", "__pycache__", "_generated", "generated"}
# where REQ citations are looked for (every file found must be mapped in spec/traceability.json)
SOURCE_GLOBS = (("tests", "*.py"), ("python", "*.py"), ("conformance", "*.py"), ("interop", "*.rs"))
# files that quote the citation syntax without citing (this module and its test)
NOT_SOURCES = {"tests/test_traceability.py", "conformance/tools/traceability.py"}


# ------------------------------------------------------------------------------------------------ spec


def _requirement_blocks(text: str) -> Iterator[tuple[str, str]]:
    """Yield (id, text) for every paragraph or table row that starts with a bold bracketed id."""
    current: list[str] | None = None
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            if current is not None:
                yield current[0], current[1]
                current = None
            continue
        if in_code:
            continue
        stripped = line.strip()
        if stripped.startswith("|"):
            if current is not None:
                yield current[0], current[1]
                current = None
            first_cell = stripped.strip("|").split("|")[0].strip()
            m = DEF_RE.match(first_cell)
            if m:
                yield m.group(1), stripped
            continue
        m = DEF_RE.match(LIST_MARK.sub("", stripped))
        if m:
            if current is not None:
                yield current[0], current[1]
            current = [m.group(1), stripped]
        elif current is not None and stripped and not stripped.startswith("#"):
            current[1] += " " + stripped
        elif current is not None:
            yield current[0], current[1]
            current = None
    if current is not None:
        yield current[0], current[1]


def spec_requirements(root: Path = ROOT) -> dict[str, str]:
    """Map every requirement id defined in the spec to its paragraph/row text."""
    out: dict[str, str] = {}
    text = (root / "spec" / "protocol.md").read_text(encoding="utf-8")
    for rid, body in _requirement_blocks(text):
        out.setdefault(rid, body)
    return out


def must_ids(reqs: Mapping[str, str]) -> set[str]:
    return {rid for rid, body in reqs.items() if MUST_RE.search(body)}


def id_key(rid: str) -> tuple[str, int]:
    prefix, num = rid.rsplit("-", 1)
    return prefix, int(num)


# ------------------------------------------------------------------------------------------------- map


Target = (
    str | list[str]
)  # an implementation, "harness", or several (a test that runs against several)
Rule = Target | dict[str, Target]  # or per top-level function, "*" the default


def targets_of(target: object) -> list[str]:
    """The targets a rule value names (a name or a list of names)."""
    if isinstance(target, str):
        return [target]
    if isinstance(target, list):
        return [str(t) for t in target]
    return []


@dataclass
class SourceMap:
    """``spec/traceability.json``: which implementation each citing source runs against."""

    implementations: list[str]
    rules: dict[str, Rule]  # path or glob -> target(s), or {function | "*": target(s)}
    independent: dict[str, str]  # id -> why it constrains no single implementation
    not_applicable: dict[str, dict[str, str]]  # impl -> id -> why it does not apply to that impl

    @classmethod
    def load(cls, root: Path = ROOT) -> SourceMap:
        d = json.loads((root / "spec" / "traceability.json").read_text(encoding="utf-8"))
        registry = json.loads(
            (root / "interop" / "implementations.json").read_text(encoding="utf-8")
        )
        return cls(
            implementations=[str(i["name"]) for i in registry["implementations"]],
            rules=dict(d["sources"]),
            independent=dict(d["implementation_independent"]),
            not_applicable={k: dict(v) for k, v in d.get("not_applicable", {}).items()},
        )

    def rule_for(self, rel: str) -> Rule | None:
        """The rule of a source: its exact path first, else the first glob that matches."""
        if rel in self.rules:
            return self.rules[rel]
        for pattern, target in self.rules.items():
            if any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(rel, pattern):
                return target
        return None

    def problems(self) -> list[str]:
        out: list[str] = []
        targets = set(self.implementations) | {HARNESS}
        for pattern, target in self.rules.items():
            values = list(target.values()) if isinstance(target, dict) else [target]
            named = [t for v in values for t in targets_of(v)]
            if not named or any(not targets_of(v) for v in values):
                out.append(f"spec/traceability.json: {pattern}: empty or malformed target")
            out += [
                f"spec/traceability.json: {pattern}: unknown target {t!r}"
                for t in named
                if t not in targets
            ]
            if isinstance(target, dict) and "*" not in target:
                out.append(
                    f'spec/traceability.json: {pattern}: a per-function rule needs a "*" default'
                )
        out += [
            f"spec/traceability.json: not_applicable: unknown implementation {impl!r}"
            for impl in self.not_applicable
            if impl not in self.implementations
        ]
        return out


# ------------------------------------------------------------------------------------------- citations


@dataclass
class Citations:
    all: dict[str, set[str]] = field(
        default_factory=dict
    )  # id -> places, whatever they run against
    by_target: dict[str, dict[str, set[str]]] = field(
        default_factory=dict
    )  # target -> id -> places
    unmapped: list[str] = field(default_factory=list)  # citing sources with no rule

    def add(self, target: str | None, rid: str, place: str) -> None:
        self.all.setdefault(rid, set()).add(place)
        if target is not None:
            self.by_target.setdefault(target, {}).setdefault(rid, set()).add(place)


def source_files(root: Path = ROOT) -> Iterator[Path]:
    for top, pattern in SOURCE_GLOBS:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob(pattern)):
            rel = path.relative_to(root)
            if SKIP_DIRS.intersection(rel.parts) or rel.as_posix() in NOT_SOURCES:
                continue
            yield path


def _json_requirements(node: object) -> list[str]:
    if isinstance(node, dict):
        reqs = node.get("requirements")
        return [str(r) for r in reqs] if isinstance(reqs, list) else []
    return []


def _expected_failures(root: Path, impl: str) -> list[str]:
    path = root / "conformance" / "expected-failures" / f"{impl}.txt"
    if not path.is_file():
        return []
    lines = (raw.partition("#")[0].strip() for raw in path.read_text(encoding="utf-8").splitlines())
    return [p for p in lines if p]


def _level_prefix(level: object) -> str:
    return "Recommended" if str(level).upper() == "RECOMMENDED" else "Required"


def _xfail(patterns: Iterable[str], test_ids: Iterable[str]) -> bool:
    ids = list(test_ids)
    return any(p == t or fnmatch.fnmatchcase(t, p) for p in patterns for t in ids)


def _vector_needs(root: Path, row: Mapping[str, Any]) -> str:
    """The capability the conformance runner requires to run a vector (runner.judge_*)."""
    kind = str(row["kind"])
    if kind.startswith("decode"):
        return "decode"
    if kind == "generate":
        base = root / "conformance" / "vectors" / str(row["path"])
        case = base / "case.json" if base.is_dir() else base.with_name(base.name + ".json")
        data = json.loads(case.read_text(encoding="utf-8")) if case.is_file() else {}
        if row.get("fast") or data.get("fast") or data.get("mode") == "fast":
            return "generate.fast"
    if kind == "snapshot" and Path(str(row["path"])).parent.name == "serve":
        return "snapshot.serve"  # the server side, driver protocol 5.12 (h63)
    return kind


def _vector_test_id(row: Mapping[str, Any]) -> str:
    vid = str(row["id"])
    parts = vid.split(".")
    if len(parts) == 2 and parts[0] == "generate":
        vid = f"generate.{'fast' if row.get('fast') else 'exact'}.{parts[1]}"
    elif len(parts) == 2 and parts[0] == "receive":
        vid = f"receive.step.{parts[1]}"
    return f"{_level_prefix(row.get('level', 'REQUIRED'))}.{vid}"


def collect(root: Path = ROOT, smap: SourceMap | None = None) -> Citations:
    """Every citation, attributed to the implementation(s) it runs against."""
    smap = SourceMap.load(root) if smap is None else smap
    cites = Citations()
    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        rule = smap.rule_for(rel)
        func = "*"
        cited = False
        for n, line in enumerate(
            path.read_text(encoding="utf-8", errors="replace").splitlines(), 1
        ):
            top = PY_TOP_RE.match(line) if path.suffix == ".py" else None
            if top:
                func = top.group(1)
            m = CITE_RE.search(line)
            if not m:
                continue
            cited = True
            chosen = rule.get(func, rule.get("*")) if isinstance(rule, dict) else rule
            for rid in ID_RE.findall(m.group(1)):
                cites.add(None, rid, f"{rel}:{n}")
                for target in targets_of(chosen):
                    cites.add(target, rid, f"{rel}:{n}")
        if cited and rule is None:
            cites.unmapped.append(rel)

    registry = json.loads((root / "interop" / "implementations.json").read_text(encoding="utf-8"))
    impls = {str(i["name"]): i for i in registry["implementations"]}
    xfails = {name: _expected_failures(root, name) for name in impls}
    caps = {name: set(i.get("capabilities", [])) for name, i in impls.items()}

    index = root / "conformance" / "vectors" / "index.json"
    for row in json.loads(index.read_text(encoding="utf-8"))["vectors"]:
        place, tid = f"vector:{row['id']}", _vector_test_id(row)
        needs = {_vector_needs(root, row), *(str(f) for f in row.get("features", []))}
        for rid in _json_requirements(row):
            cites.add(None, rid, place)
            for name in impls:
                if needs <= caps[name] and not _xfail(xfails[name], [tid]):
                    cites.add(name, rid, place)

    for path in sorted((root / "conformance" / "scenarios").glob("*.json")):
        sc = json.loads(path.read_text(encoding="utf-8"))
        needs = {str(c) for c in sc.get("capabilities", ["peer"])}
        able = [name for name in impls if needs <= caps[name]]
        place = f"scenario:{sc.get('id', path.stem)}"
        prefix = _level_prefix(sc.get("level", "REQUIRED"))
        for rid in _json_requirements(sc):
            cites.add(None, rid, place)
            for name in able:
                # the runner's test ids name the pair by framework (by name when two share one)
                ids = [
                    f"{prefix}.live.{x}_x_{y}.{sc.get('id', path.stem)}"
                    for other in able
                    for a, b in ((name, other), (other, name))
                    for x, y in (
                        (impls[a].get("framework", a), impls[b].get("framework", b)),
                        (a, b),
                    )
                ]
                if not _xfail(xfails[name], ids):
                    cites.add(name, rid, place)
    return cites


# ------------------------------------------------------------------------------------------- coverage


def uncovered_path(root: Path, impl: str) -> Path:
    return root / "spec" / f"uncovered-{impl}.txt"


def covered_for(cites: Citations, smap: SourceMap, impl: str) -> dict[str, set[str]]:
    """id -> places that cover it for ``impl``."""
    out = {rid: set(places) for rid, places in cites.by_target.get(impl, {}).items()}
    for rid, places in cites.by_target.get(HARNESS, {}).items():
        if rid in smap.independent:
            out.setdefault(rid, set()).update(places)
    return out


def uncovered(root: Path = ROOT) -> dict[str, list[str]]:
    """impl -> sorted MUST ids that apply to it and are not covered for it."""
    smap = SourceMap.load(root)
    musts = must_ids(spec_requirements(root))
    cites = collect(root, smap)
    return {
        impl: sorted(
            musts
            - covered_for(cites, smap, impl).keys()
            - smap.not_applicable.get(impl, {}).keys(),
            key=id_key,
        )
        for impl in smap.implementations
    }


def read_uncovered(path: Path) -> tuple[dict[str, str], list[str]]:
    """({id: reason}, [problems]) from a ``spec/uncovered-<impl>.txt``: ``DF-XXX-N  reason`` lines."""
    listed: dict[str, str] = {}
    problems: list[str] = []
    if not path.is_file():
        return listed, [f"{path.name}: missing"]
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"(DF-[A-Z]+-\d+)\s+(\S.*)", line)
        if not m:
            problems.append(f"{path.name}:{n}: expected 'DF-XXX-N  reason', got {raw!r}")
            continue
        if m.group(1) in listed:
            problems.append(f"{path.name}:{n}: {m.group(1)} listed twice")
        listed[m.group(1)] = m.group(2)
    return listed, problems


def figures(root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """impl -> {"covered": n, "must": n, "uncovered": [ids], "not_applicable": [ids]} (for reports);
    ``must`` counts the MUST ids that apply to the implementation."""
    musts = must_ids(spec_requirements(root))
    na = SourceMap.load(root).not_applicable
    out: dict[str, dict[str, Any]] = {}
    for impl, ids in uncovered(root).items():
        skip = sorted(musts & na.get(impl, {}).keys(), key=id_key)
        must = len(musts) - len(skip)
        out[impl] = {
            "covered": must - len(ids),
            "must": must,
            "uncovered": ids,
            "not_applicable": skip,
        }
    return out


def report(root: Path = ROOT) -> str:
    lines: list[str] = []
    for impl, fig in figures(root).items():
        pct = 100.0 * fig["covered"] / max(fig["must"], 1)
        listed, _ = read_uncovered(uncovered_path(root, impl))
        ids = fig["uncovered"]
        lines += [
            f"{impl}: MUST-level requirements that apply, covered: {fig['covered']}/{fig['must']} "
            f"({pct:.1f} %)",
            f"  uncovered ({len(ids)}): " + (" ".join(ids) or "none"),
            "  not applicable (spec/traceability.json): "
            + (" ".join(fig["not_applicable"]) or "none"),
            f"  uncovered but not in {uncovered_path(root, impl).name}: "
            + (" ".join(i for i in ids if i not in listed) or "none"),
            f"  listed in {uncovered_path(root, impl).name} but covered (remove them): "
            + (" ".join(sorted(listed.keys() - set(ids), key=id_key)) or "none"),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``traceability.py [ROOT]``: print the report for the checkout ROOT (default: this one). A bad
    argument is one line on stderr and exit 2."""
    import argparse

    ap = argparse.ArgumentParser(description="Per-implementation requirement traceability.")
    ap.add_argument("root", nargs="?", type=Path, default=ROOT, help="a DeltaFabric checkout")
    args = ap.parse_args(argv)
    if not (args.root / "spec" / "protocol.md").is_file():
        ap.error(f"{args.root} is not a DeltaFabric checkout (no spec/protocol.md)")
    print(report(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
