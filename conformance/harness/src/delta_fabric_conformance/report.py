"""Results: ``results.json``, ``matrix.md`` and the requirement coverage report."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta_fabric_conformance.claims import (
    OPTIONAL_FEATURES,
    TARGETS,
    implementation_level,
    implied_targets,
    target_of,
)

__all__ = [
    "Coverage",
    "compute_coverage",
    "impl_counts",
    "spec_requirement_ids",
    "summary_counts",
    "write_outputs",
]

_ID_DEF = re.compile(r"\*\*\[(DF-[A-Z]+-\d+)\]\*\*")
_NORMATIVE = re.compile(r"\b(MUST|MUST NOT|REQUIRED|SHALL|SHALL NOT)\b")
_MARK = {
    "passed": "✓",
    "failed": "✕",
    "unsupported": "?",
    "not_claimed": "n/c",
    "skipped": "skip",
}


_INDEX_ROW = re.compile(r"^\|\s*(DF-[A-Z]+-\d+)\s*\|[^|]*\|\s*([A-Z ]+?)\s*\|\s*$", re.MULTILINE)


def spec_requirement_ids(text: str) -> tuple[list[str], list[str]]:
    """(every id defined in the spec, the ids of MUST level).

    An id is defined where it appears as ``**[DF-XXX-N]**``. Its level comes from the spec's requirement
    index (Appendix A rows ``| DF-XXX-N | section | MUST |``) when the spec has one; otherwise an id is
    MUST level when its defining paragraph (up to the next blank line or definition) says MUST, MUST NOT,
    REQUIRED, SHALL or SHALL NOT.
    """
    all_ids: list[str] = []
    must: list[str] = []
    index = {m.group(1): m.group(2) for m in _INDEX_ROW.finditer(text)}
    matches = list(_ID_DEF.finditer(text))
    for i, m in enumerate(matches):
        start = text.rfind("\n\n", 0, m.start()) + 1
        end_par = text.find("\n\n", m.end())
        end_next = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        end = min(end_par if end_par >= 0 else len(text), end_next)
        start = max(start, matches[i - 1].end() if i > 0 else 0)
        rid = m.group(1)
        if rid not in all_ids:
            all_ids.append(rid)
        if index:
            is_must = index.get(rid) == "MUST"
        else:
            is_must = _NORMATIVE.search(text[start:end]) is not None
        if is_must and rid not in must:
            must.append(rid)
    return all_ids, must


@dataclass
class Coverage:
    spec_found: bool
    defined: list[str] = field(default_factory=list)
    must: list[str] = field(default_factory=list)
    cited: dict[str, list[str]] = field(default_factory=dict)  # id -> citing vectors / scenarios

    @property
    def covered(self) -> list[str]:
        return [r for r in self.must if r in self.cited]

    @property
    def uncovered(self) -> list[str]:
        return [r for r in self.must if r not in self.cited]

    @property
    def unknown(self) -> list[str]:
        """Cited ids the spec does not define."""
        return sorted(r for r in self.cited if self.spec_found and r not in self.defined)

    def figure(self) -> str:
        if not self.spec_found:
            return "n/a (spec/protocol.md not found)"
        n = len(self.must)
        pct = 100.0 * len(self.covered) / n if n else 100.0
        return f"{len(self.covered)}/{n} MUST requirements covered ({pct:.0f}%)"

    def to_json(self) -> dict[str, Any]:
        return {
            "spec_found": self.spec_found,
            "defined": self.defined,
            "must": self.must,
            "covered": self.covered,
            "uncovered": self.uncovered,
            "cited_not_in_spec": self.unknown,
            "citations": {k: sorted(v) for k, v in sorted(self.cited.items())},
            "figure": self.figure(),
        }


def compute_coverage(spec: Path, citations: Iterable[tuple[str, Iterable[str]]]) -> Coverage:
    """``citations``: (citing vector or scenario id, requirement ids)."""
    cov = Coverage(spec_found=spec.is_file())
    if cov.spec_found:
        cov.defined, cov.must = spec_requirement_ids(spec.read_text(encoding="utf-8"))
    for source, reqs in citations:
        for r in reqs:
            if str(r).startswith("DF-"):
                cov.cited.setdefault(str(r), []).append(source)
    return cov


def summary_counts(results: Sequence[Any]) -> dict[str, int]:
    out = {
        "passed": 0,
        "failed": 0,
        "unsupported": 0,
        "not_claimed": 0,
        "skipped": 0,
        "expected_failures": 0,
        "unexpected_failures": 0,
        "unexpected_passes": 0,
        "warnings": 0,
    }
    for r in results:
        out[r.result] += 1
        if r.verdict == "expected_failure":
            out["expected_failures"] += 1
        elif r.verdict == "unexpected_failure":
            out["unexpected_failures"] += 1
        elif r.verdict == "unexpected_pass":
            out["unexpected_passes"] += 1
        elif r.verdict == "warning":
            out["warnings"] += 1
    return out


def impl_counts(results: Sequence[Any], name: str) -> dict[str, int]:
    """:func:`summary_counts` of the tests that ran against implementation ``name`` alone (vectors,
    encode, protocol), without the live scenarios of a pair."""
    return summary_counts([r for r in results if tuple(r.impls) == (name,)])


def impl_claim(h: Mapping[str, Any]) -> tuple[str, list[str]]:
    """An implementation's claimed level and OPTIONAL features, from its report header (its hello)."""
    level = str(h.get("level") or implementation_level(h.get("spec_version")))
    return level, sorted(set(h.get("capabilities", [])) & OPTIONAL_FEATURES)


def _cell(r: Any) -> str:
    mark = _MARK[r.result]
    if r.verdict == "expected_failure":
        return f"{mark} (xfail)"
    if r.verdict == "unexpected_pass":
        return f"{mark} (XPASS)"
    return mark


def _claims_md(results: Sequence[Any], header: Mapping[str, Any]) -> list[str]:
    """The claims table (DF-CNF-30): per implementation and target, whether it is claimed and how its
    REQUIRED tests came out. A claim holds when the hello check passed and no REQUIRED test of the
    target failed or stayed unsupported."""
    heads = [h for h in header.get("implementations", []) if not h.get("skipped")]
    if not heads:
        return []
    out = [
        "",
        "## Claims",
        "",
        "What each `hello` claims: the level (`spec_version`), the OPTIONAL features (capabilities, "
        "spec DF-CNF-2) and the targets (a claim implies the smaller targets). A test that needs a "
        "level or feature the implementation does not claim is *not claimed* (n/c): not run, never a "
        "failure. Target cells: REQUIRED tests of the target passed / failed / unsupported / not "
        "claimed; **holds** when a claimed target has no failed test.",
        "",
        "| implementation | level | optional features | "
        + " | ".join(TARGETS)
        + " | not claimed |",
        "|---|---|---|" + "---|" * len(TARGETS) + "---|",
    ]
    for h in heads:
        name = h["name"]
        claimed = implied_targets(h.get("claims", []))
        refused = any(
            r.id == "Required.protocol.hello.claims" and r.result == "failed" and name in r.impls
            for r in results
        )
        cells = []
        for t in TARGETS:
            mine = [
                r
                for r in results
                if name in r.impls and r.level == "REQUIRED" and target_of(r.id) == t
            ]
            n = {
                k: sum(r.result == k for r in mine)
                for k in ("passed", "failed", "unsupported", "not_claimed")
            }
            fig = f"{n['passed']} / {n['failed']} / {n['unsupported']} / {n['not_claimed']}"
            if t not in claimed:
                cells.append(f"not claimed ({fig})")
            elif refused:
                cells.append(f"claim refused ({fig})")
            elif not mine:
                cells.append("claimed, not run")
            else:
                cells.append(("**holds**" if n["failed"] == 0 else "**fails**") + f" ({fig})")
        level, feats = impl_claim(h)
        n_nc = impl_counts(results, name)["not_claimed"]
        out.append(
            f"| `{name}` | {level} | {', '.join(feats) or 'none'} | "
            + " | ".join(cells)
            + f" | {n_nc} |"
        )
    return out


def _matrix_md(
    results: Sequence[Any],
    impls: Sequence[str],
    encode_matrix: Mapping[str, Mapping[str, Mapping[str, int]]],
    coverage: Coverage,
    header: Mapping[str, Any],
) -> str:
    lines = ["# DeltaFabric conformance results", ""]
    counts = summary_counts(results)
    lines.append(
        f"`conformance: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['unsupported']} unsupported, {counts['not_claimed']} not claimed, "
        f"{counts['skipped']} skipped` "
        f"({counts['expected_failures']} expected failures, {counts['unexpected_failures']} unexpected "
        f"failures, {counts['unexpected_passes']} unexpected passes, {counts['warnings']} warnings)"
    )
    lines += ["", f"Requirement coverage by vectors and scenarios: {coverage.figure()}"]
    full = header.get("coverage_with_unit_tests")
    if isinstance(full, Mapping):
        lines.append(
            f"Requirement coverage with unit tests (pytest, cargo test `REQ:` citations): "
            f"{full.get('figure')}"
        )
        if full.get("uncovered"):
            lines.append("Not cited by any test: " + ", ".join(full["uncovered"]))
    lines.append("")
    lines += ["Implementations:", ""]
    for h in header.get("implementations", []):
        if h.get("skipped"):
            lines.append(f"- `{h['name']}`: SKIPPED: {h['skipped']}")
            continue
        level, feats = impl_claim(h)
        n = impl_counts(results, h["name"])
        lines.append(
            f"- `{h['name']}`: {h.get('language', '?')} / {h.get('framework', '?')} "
            f"{h.get('version', '')} capabilities: {', '.join(h.get('capabilities', []))}; "
            f"claims: {', '.join(h.get('claims', [])) or 'none'}; level {level}; optional "
            f"features: {', '.join(feats) or 'none'}; {n['passed']} passed, {n['failed']} failed, "
            f"{n['unsupported']} unsupported, {n['not_claimed']} not claimed"
        )
    lines += _claims_md(results, header)
    lines += [
        "",
        "✓ passed, ✕ failed, ? unsupported, n/c not claimed (needs a level or OPTIONAL feature the "
        "implementation does not claim), skip: skipped (optional, not installed); (xfail) listed in "
        "expected-failures, (XPASS) listed but passed",
        "",
    ]

    single = [r for r in results if len(r.impls) == 1]
    by_test: dict[str, dict[str, Any]] = {}
    for r in single:
        by_test.setdefault(r.id, {})[r.impls[0]] = r
    lines += [
        "## Tests x implementations",
        "",
        "| test | " + " | ".join(impls) + " |",
        "|---|" + "---|" * len(impls),
    ]
    for tid, row in by_test.items():
        cells = [_cell(row[i]) if i in row else "" for i in impls]
        lines.append(f"| `{tid}` | " + " | ".join(cells) + " |")

    lines += [
        "",
        "## Encode: producer x consumer",
        "",
        "Each cell: packets the producer encoded that the consumer decoded to the vector's JSON / "
        "packets tried (consumers are judged only on vectors they decode correctly).",
        "",
    ]
    lines += ["| producer \\ consumer | " + " | ".join(impls) + " |", "|---|" + "---|" * len(impls)]
    for p in impls:
        cells = []
        for c in impls:
            cell = encode_matrix.get(p, {}).get(c)
            if cell is None:
                cells.append("?")
            else:
                total = cell["passed"] + cell["failed"]
                errs = cell.get("consumer_errors", 0)
                note = f" ({errs} consumer errors)" if errs else ""
                cells.append(
                    f"{'✓' if cell['failed'] == 0 else '✕'} {cell['passed']}/{total}{note}"
                )
        lines.append(f"| {p} | " + " | ".join(cells) + " |")

    multi = [r for r in results if len(r.impls) > 1]
    if multi:
        lines += [
            "",
            "## Live scenarios",
            "",
            "| test | implementations (roles A, B) | result | note |",
            "|---|---|---|---|",
        ]
        for r in multi:
            note = r.message.replace("|", "\\|")[:200]
            lines.append(f"| `{r.id}` | {' x '.join(r.impls)} | {_cell(r)} | {note} |")

    failures = [r for r in results if r.result == "failed"]
    if failures:
        lines += ["", "## Failures", ""]
        for r in failures:
            lines.append(f"- `{r.id}` [{', '.join(r.impls)}] ({r.verdict}): {r.message[:400]}")
    if coverage.spec_found:
        lines += ["", "## Requirement coverage", "", coverage.figure(), ""]
        if coverage.uncovered:
            lines.append("Not cited by any vector or scenario: " + ", ".join(coverage.uncovered))
        if coverage.unknown:
            lines.append("")
            lines.append(
                "Cited but not defined in spec/protocol.md: " + ", ".join(coverage.unknown)
            )
    return "\n".join(lines) + "\n"


def write_outputs(
    out: Path,
    results: Sequence[Any],
    impls: Sequence[str],
    encode_matrix: Mapping[str, Mapping[str, Mapping[str, int]]],
    coverage: Coverage,
    header: Mapping[str, Any],
) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    counts = summary_counts(results)
    doc = {
        **header,
        "summary": counts,
        "tests": [r.to_json() for r in results],
        "encode_matrix": encode_matrix,
        "coverage": coverage.to_json(),
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / "matrix.md").write_text(
        _matrix_md(results, impls, encode_matrix, coverage, header), encoding="utf-8"
    )
    return counts
