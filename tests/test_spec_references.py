"""Every section reference into the specification names a heading that exists.

A reference is "Section N", "Section N.M", "§N.M", "Appendix X" or "Appendix X.N" (also "sections A and
B", "Sections A, B and C"):

- inside ``spec/protocol.md`` every such reference is to protocol.md itself;
- in the other documents and in the docstrings and comments of the Python and Rust sources, a reference
  qualified as the spec's ("spec section 4.5", "spec/protocol.md Section 7.2", "spec Appendix B.2", "§9.5")
  is to protocol.md, and one qualified as the driver protocol's ("driver protocol section 5.6") is to
  ``conformance/driver-protocol.md``.

Unqualified references in other files ("section 5" of a document to itself, "RFC 4648 section 4") are
not judged. Cheap, and it catches a renumbered or misquoted section (spec erratum 1.1, item 13 of
issue 10: docstrings cited sections 1, 2 and 8 for 3, 4 and Appendix B.2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec" / "protocol.md"
DRIVER = ROOT / "conformance" / "driver-protocol.md"

_NUM = r"(?:\d+(?:\.\d+)*|[A-C](?:\.\d+)*)"
_LIST = rf"{_NUM}(?:(?:,\s*|\s+and\s+|\s+to\s+|,\s+and\s+){_NUM})*"
_REF = re.compile(rf"(?:[Ss]ections?|[Aa]ppendi(?:x|ces)|§)\s*({_LIST})")
_SPEC_QUAL = re.compile(
    rf"(?:\bspec(?:ification)?(?:/protocol\.md)?|protocol\.md)(?:'s)?\s+"
    rf"((?:[Ss]ections?|[Aa]ppendi(?:x|ces))\s*{_LIST})"
)
_SECTION_SIGN = re.compile(rf"§\s*({_LIST})")
_DRIVER_QUAL = re.compile(rf"driver[- ]protocol(?:\.md)?(?:'s)?\s+((?:[Ss]ections?)\s*{_LIST})")


def _numbers(ref: str) -> list[str]:
    return re.findall(_NUM, re.sub(r"^(?:[Ss]ections?|[Aa]ppendi(?:x|ces)|§)\s*", "", ref))


def _headings(path: Path) -> set[str]:
    """'4', '4.5', 'A', 'B.2' for every numbered heading of a Markdown document."""
    out: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{2,4}\s+(?:Appendix\s+)?(\d+(?:\.\d+)*|[A-Z](?:\.\d+)*)[.\s]", line)
        if m:
            out.add(m.group(1))
    return out


SPEC_HEADINGS = _headings(SPEC)
DRIVER_HEADINGS = _headings(DRIVER)


def _sources() -> Iterator[Path]:
    for pattern in ("*.md",):
        yield from (p for p in ROOT.glob(pattern))
    for folder in ("spec", "conformance", "interop", "schema", "docs", "python", "bench"):
        base = ROOT / folder
        for p in base.rglob("*"):
            if p.suffix not in (".md", ".py", ".rs", ".fbs") or not p.is_file():
                continue
            parts = set(p.relative_to(ROOT).parts)
            if parts & {"_generated", "generated", "target", "proposals", "node_modules"}:
                continue
            yield p
    yield from (ROOT / "tests").glob("*.py")


def _references() -> Iterator[tuple[str, str, str]]:
    """(file:line, document, number) for every judged reference."""
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            where = f"{rel}:{lineno}"
            if path == SPEC:
                for m in _REF.finditer(line):
                    for n in _numbers(m.group(0)):
                        yield where, "spec", n
                continue
            if path == Path(__file__).resolve():
                continue
            for m in _SPEC_QUAL.finditer(line):
                for n in _numbers(m.group(1)):
                    yield where, "spec", n
            for m in _SECTION_SIGN.finditer(line):
                for n in _numbers(m.group(0)):
                    yield where, "spec", n
            for m in _DRIVER_QUAL.finditer(line):
                for n in _numbers(m.group(1)):
                    yield where, "driver", n


REFERENCES = list(_references())


def test_reference_scan_finds_references() -> None:
    # the scan itself works: the spec refers to its sections, other files to the spec and the driver
    # protocol (an empty scan would pass every check below vacuously)
    docs = {d for _w, d, _n in REFERENCES}
    assert docs == {"spec", "driver"}, docs
    assert sum(1 for _w, d, _n in REFERENCES if d == "spec") > 100
    assert {"4.5", "7.2", "B.2", "9.5"} <= SPEC_HEADINGS
    assert "5.6" in DRIVER_HEADINGS


def test_reference_parser() -> None:
    assert _numbers("Sections 7.1 and 7.2") == ["7.1", "7.2"]
    assert _numbers("Appendix B.2") == ["B.2"]
    assert _numbers("§9.5") == ["9.5"]
    m = _SPEC_QUAL.search("(spec sections 5.3 and 5.7: DF-GEN-3")
    assert m is not None and _numbers(m.group(1)) == ["5.3", "5.7"]
    assert _SPEC_QUAL.search("RFC 4648 section 4") is None


@pytest.mark.parametrize("doc", ["spec", "driver"])
def test_every_section_reference_names_an_existing_heading(doc: str) -> None:
    headings = SPEC_HEADINGS if doc == "spec" else DRIVER_HEADINGS
    bad = [
        f"{where}: {'spec/protocol.md' if d == 'spec' else 'driver-protocol.md'} has no section {n}"
        for where, d, n in REFERENCES
        if d == doc and n not in headings
    ]
    assert not bad, "\n".join(bad)


def _definitions() -> dict[str, set[str]]:
    """Requirement id and id prefix ('DF-GEN-3', 'DF-GEN') -> the sections that define one."""
    out: dict[str, set[str]] = {}
    section = ""
    for line in SPEC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{2,4}\s+(?:Appendix\s+)?(\d+(?:\.\d+)*|[A-Z](?:\.\d+)*)[.\s]", line)
        if m:
            section = m.group(1)
        for d in re.findall(r"\*\*\[(DF-[A-Z]+-\d+)\]\*\*", line):
            out.setdefault(d, set()).add(section)
            out.setdefault(d.rsplit("-", 1)[0], set()).add(section)
    return out


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def test_a_reference_next_to_a_requirement_id_names_its_section() -> None:
    # "(spec section 3: DF-GEN-3 exact)" exists as a heading but is the wrong section: DF-GEN-3 is
    # defined in 5.3. A qualified reference followed by ", " or ": " and requirement ids (or an id
    # prefix such as DF-PAR) must name a section that defines one of them.
    defs = _definitions()
    bad = []
    for path in _sources():
        if path in (SPEC, Path(__file__).resolve()):
            continue
        rel = path.relative_to(ROOT).as_posix()
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in _SPEC_QUAL.finditer(line):
                tail = re.match(r"[,:]\s*((?:DF-[A-Z]+(?:-\d+)?(?:,\s*|\s+)?)+)", line[m.end() :])
                if tail is None:
                    continue
                ids = [i for i in re.findall(r"DF-[A-Z]+(?:-\d+)?", tail.group(1)) if i in defs]
                cited = _numbers(m.group(1))
                homes = {s for i in ids for s in defs[i]}
                if ids and not any(_related(c, h) for c in cited for h in homes):
                    bad.append(f"{rel}:{lineno}: cites section {cited} for {ids} (in {homes})")
    assert not bad, "\n".join(bad)


def test_no_reference_to_documents_outside_the_repository() -> None:
    # the vectors README cited "the brief section 8", a document that was never in the repository
    bad = [
        f"{p.relative_to(ROOT).as_posix()}:{n}"
        for p in _sources()
        if p != Path(__file__).resolve()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bbrief(?:'s)? sections?\b", line, re.IGNORECASE)
    ]
    assert not bad, bad
