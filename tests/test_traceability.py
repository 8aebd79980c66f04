"""Traceability: every MUST-level requirement of spec/protocol.md is cited by a test, or excused.

A requirement is a paragraph or table row of spec/protocol.md that starts with a bold bracketed id such as
``**[DF-GEN-3]**``. It is MUST-level when its text contains MUST, MUST NOT, REQUIRED, SHALL or SHALL NOT.

Citations are collected from:
  * ``REQ: DF-XXX-N`` comments (comma-separated lists allowed) in tests/**/*.py, python/tests/**/*.py,
    conformance/**/*.py and interop/**/*.rs;
  * the ``requirements`` lists of conformance/vectors/index.json and of conformance/scenarios/*.json.

The test fails when a citation names an id that the spec does not define (a typo), when a MUST-level id is
cited nowhere and is not listed in spec/uncovered.txt (``DF-XXX-N  reason``, one per line), or when
spec/uncovered.txt is malformed or lists an id that is not a MUST-level id of the spec.

Run ``python tests/test_traceability.py`` for the coverage report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec" / "protocol.md"
UNCOVERED = ROOT / "spec" / "uncovered.txt"

ID_RE = re.compile(r"DF-[A-Z]+-\d+")
DEF_RE = re.compile(r"^\*\*\[(DF-[A-Z]+-\d+)\]\*\*")
MUST_RE = re.compile(r"\b(MUST|REQUIRED|SHALL)\b")
CITE_RE = re.compile(r"\bREQ:\s*(DF-[A-Z]+-\d+(?:\s*,\s*DF-[A-Z]+-\d+)*)")
LIST_MARK = re.compile(r"^(?:[-+]\s+|\d+\.\s+)")
SKIP_DIRS = {".git", ".venv", "target", "node_modules", "__pycache__", "_generated", "generated"}


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


def spec_requirements() -> dict[str, str]:
    """Map every requirement id defined in the spec to its paragraph/row text."""
    out: dict[str, str] = {}
    for rid, body in _requirement_blocks(SPEC.read_text(encoding="utf-8")):
        out.setdefault(rid, body)
    return out


def must_ids(reqs: dict[str, str]) -> set[str]:
    return {rid for rid, body in reqs.items() if MUST_RE.search(body)}


def _source_files() -> Iterator[Path]:
    patterns = [
        (ROOT / "tests", "*.py"),
        (ROOT / "python" / "tests", "*.py"),
        (ROOT / "conformance", "*.py"),
        (ROOT / "interop", "*.rs"),
    ]
    for base, pattern in patterns:
        if not base.is_dir():
            continue
        for path in sorted(base.rglob(pattern)):
            if SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
                continue
            yield path


def _json_requirement_lists(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "requirements" and isinstance(value, list):
                for item in value:
                    if isinstance(item, str):
                        yield item
            else:
                yield from _json_requirement_lists(value)
    elif isinstance(node, list):
        for item in node:
            yield from _json_requirement_lists(item)


def _json_files() -> Iterable[Path]:
    files = [ROOT / "conformance" / "vectors" / "index.json"]
    scen = ROOT / "conformance" / "scenarios"
    if scen.is_dir():
        files += sorted(scen.glob("*.json"))
    return [f for f in files if f.is_file()]


def collect_citations() -> dict[str, set[str]]:
    """Map every cited id to the set of places (relative paths) that cite it."""
    cites: dict[str, set[str]] = {}
    for path in _source_files():
        rel = str(path.relative_to(ROOT))
        if rel == "tests/test_traceability.py":
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            m = CITE_RE.search(line)
            if m:
                for rid in ID_RE.findall(m.group(1)):
                    cites.setdefault(rid, set()).add(rel)
    for path in _json_files():
        rel = str(path.relative_to(ROOT))
        for rid in _json_requirement_lists(json.loads(path.read_text(encoding="utf-8"))):
            cites.setdefault(rid, set()).add(rel)
    return cites


def read_uncovered() -> tuple[dict[str, str], list[str]]:
    """Return ({id: reason}, [problems]) from spec/uncovered.txt."""
    excused: dict[str, str] = {}
    problems: list[str] = []
    if not UNCOVERED.is_file():
        return excused, problems
    for n, raw in enumerate(UNCOVERED.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"(DF-[A-Z]+-\d+)\s+(\S.*)", line)
        if not m:
            problems.append(f"spec/uncovered.txt:{n}: expected 'DF-XXX-N  reason', got {raw!r}")
            continue
        if m.group(1) in excused:
            problems.append(f"spec/uncovered.txt:{n}: {m.group(1)} listed twice")
        excused[m.group(1)] = m.group(2)
    return excused, problems


def report() -> str:
    reqs = spec_requirements()
    musts = must_ids(reqs)
    cites = collect_citations()
    covered = sorted(musts & cites.keys(), key=_key)
    uncovered = sorted(musts - cites.keys(), key=_key)
    excused, _ = read_uncovered()
    pct = 100.0 * len(covered) / max(len(musts), 1)
    lines = [
        f"MUST-level requirements covered: {len(covered)}/{len(musts)} ({pct:.1f} %)",
        f"all requirement ids cited: {len(reqs.keys() & cites.keys())}/{len(reqs)}",
        f"uncovered MUST ids ({len(uncovered)}): " + (" ".join(uncovered) or "none"),
        "uncovered and not excused: "
        + (" ".join(u for u in uncovered if u not in excused) or "none"),
        "excused but now covered (remove from spec/uncovered.txt): "
        + (" ".join(sorted(excused.keys() & set(covered), key=_key)) or "none"),
    ]
    return "\n".join(lines)


def _key(rid: str) -> tuple[str, int]:
    prefix, num = rid.rsplit("-", 1)
    return prefix, int(num)


# --------------------------------------------------------------------------------------------- tests


def test_spec_defines_must_requirements() -> None:
    reqs = spec_requirements()
    assert len(must_ids(reqs)) >= 50, (
        "the parser found too few MUST-level requirements in spec/protocol.md"
    )


def test_every_citation_exists_in_spec() -> None:
    reqs = spec_requirements()
    unknown = {rid: sorted(where) for rid, where in collect_citations().items() if rid not in reqs}
    assert not unknown, f"cited requirement ids not defined in spec/protocol.md: {unknown}"


def test_uncovered_list_is_well_formed() -> None:
    reqs = spec_requirements()
    musts = must_ids(reqs)
    excused, problems = read_uncovered()
    problems += [
        f"{rid} is not a MUST-level id of spec/protocol.md" for rid in excused if rid not in musts
    ]
    assert not problems, "\n".join(problems)


def test_every_must_requirement_is_covered_or_excused() -> None:
    reqs = spec_requirements()
    musts = must_ids(reqs)
    cites = collect_citations()
    excused, _ = read_uncovered()
    print("\n" + report())
    missing = sorted(musts - cites.keys() - excused.keys(), key=_key)
    assert not missing, (
        f"MUST-level requirements cited by no test and not listed in spec/uncovered.txt: {missing}"
    )


if __name__ == "__main__":
    print(report())
