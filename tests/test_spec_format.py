"""Form of spec/protocol.md: boilerplate, requirement ids, versions, examples, error codes.

Conventions checked here (they are also stated in spec/README.md):
  * A requirement is a paragraph or table row that starts with ``**[DF-<AREA>-<n>]**``; ids are unique,
    ``n`` has no leading zero, and AREA is one of the prefixes of Appendix A.
  * Every paragraph or table row that uses an RFC 2119 keyword in capitals carries an id (the
    boilerplate paragraph of Section 1.1 and the
    index of Appendix A excepted).
  * Every id mentioned anywhere in the spec is defined, and Appendix A lists exactly the defined ids.
  * A normative table (one with a row whose first cell is an id) is followed, before the next heading,
    by a paragraph that starts with ``Example`` (optionally in bold or italics).
  * The version of the header equals the current version named in spec/README.md and the newest entry of
    spec/CHANGELOG.md.
  * The codes of the error table (Section 7.2) are exactly ``delta_fabric.errors.ErrorCode``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec" / "protocol.md"
README = ROOT / "spec" / "README.md"
CHANGELOG = ROOT / "spec" / "CHANGELOG.md"

AREAS = ("PAR", "MAN", "GEN", "PKT", "ERR", "RCV", "RLY", "ZEN", "NUM", "CNF", "VER", "SEC")
DEF_RE = re.compile(r"\*\*\[([^\]]*)\]\*\*")
WELL_FORMED = re.compile(r"DF-(" + "|".join(AREAS) + r")-[1-9]\d*")
MENTION_RE = re.compile(r"\bDF-[A-Z]+-\d+\b")
KEYWORD_RE = re.compile(r"\b(MUST|REQUIRED|SHALL|SHOULD|RECOMMENDED|MAY|OPTIONAL)\b")
EXAMPLE_RE = re.compile(r"^[*_]{0,2}Examples?\b")
HEADING_RE = re.compile(r"^#{1,6} ")
LIST_MARK = re.compile(r"^(?:[-+]\s+|\d+\.\s+)")

BOILERPLATE = (
    'The key words "MUST", "MUST NOT", "REQUIRED", "SHALL", "SHALL NOT", "SHOULD", "SHOULD NOT", '
    '"RECOMMENDED", "NOT RECOMMENDED", "MAY", and "OPTIONAL" in this document are to be interpreted as '
    "described in BCP 14 [RFC2119] [RFC8174] when, and only when, they appear in all capitals, as shown here."
)


def spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def blocks(text: str) -> list[tuple[str, str]]:
    """Split the spec into ('row', line) for table rows, ('para', text) for paragraphs, ('heading', line).

    Code blocks are dropped; a paragraph ends at a blank line, a heading, a table or a code fence.
    """
    out: list[tuple[str, str]] = []
    para: list[str] = []
    in_code = False

    def flush() -> None:
        if para:
            out.append(("para", " ".join(para)))
            para.clear()

    for line in text.splitlines():
        s = line.strip()
        if s.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code:
            continue
        if HEADING_RE.match(s):
            flush()
            out.append(("heading", s))
        elif s.startswith("|"):
            flush()
            out.append(("row", s))
        elif not s:
            flush()
        else:
            para.append(s)
    flush()
    return out


def first_cell(row: str) -> str:
    return row.strip().strip("|").split("|")[0].strip()


def defined_ids(text: str) -> list[str]:
    ids: list[str] = []
    for kind, body in blocks(text):
        lead = first_cell(body) if kind == "row" else LIST_MARK.sub("", body)
        m = DEF_RE.match(lead)
        if m and kind != "heading":
            ids.append(m.group(1))
    return ids


def appendix(text: str, title: str) -> str:
    m = re.search(r"^## Appendix " + re.escape(title) + r".*?(?=^## |\Z)", text, re.S | re.M)
    assert m, f"Appendix {title} not found"
    return m.group(0)


# --------------------------------------------------------------------------------------------- tests


def test_rfc2119_boilerplate_present() -> None:
    flat = " ".join(spec_text().split())
    assert BOILERPLATE in flat


def test_header_block() -> None:
    text = spec_text()
    assert text.startswith("# DeltaFabric Protocol, Version ")
    for field in ("Version", "Status", "Date", "Editors"):
        assert re.search(rf"^\| {field} \| .+ \|$", text, re.M), f"header field {field} missing"
    assert re.search(r"^\| Date \| 2026-11-29 \|$", text, re.M)
    assert re.search(r"^\| Editors \| DeltaFabric maintainers \|$", text, re.M)


def test_ids_well_formed_and_unique() -> None:
    text = spec_text()
    ids = defined_ids(text)
    assert ids, "no requirement ids found"
    bad = [i for i in ids if not WELL_FORMED.fullmatch(i)]
    assert not bad, f"malformed requirement ids: {bad}"
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"requirement ids defined more than once: {dup}"
    # every bold bracket marker anywhere must be a well-formed id
    markers = [m for m in DEF_RE.findall(text) if not WELL_FORMED.fullmatch(m)]
    assert not markers, f"malformed bold bracket markers: {markers}"


def test_every_mentioned_id_is_defined() -> None:
    text = spec_text()
    defined = set(defined_ids(text))
    mentioned = set(MENTION_RE.findall(text))
    assert mentioned - defined == set(), f"ids mentioned but never defined: {sorted(mentioned - defined)}"


def test_appendix_a_lists_exactly_the_defined_ids() -> None:
    text = spec_text()
    listed = [first_cell(r) for k, r in blocks(appendix(text, "A")) if k == "row"]
    listed = [x for x in listed if WELL_FORMED.fullmatch(x)]
    assert sorted(listed) == sorted(defined_ids(text))
    assert len(listed) == len(set(listed))


def test_normative_statements_carry_ids() -> None:
    missing = []
    text = spec_text()
    text = text.replace(appendix(text, "A"), "")  # the index repeats the levels of the requirements
    for kind, body in blocks(text):
        if kind == "heading" or body.startswith("The key words"):
            continue
        lead = first_cell(body) if kind == "row" else LIST_MARK.sub("", body)
        if KEYWORD_RE.search(body) and not DEF_RE.match(lead):
            missing.append(body[:100])
    assert not missing, "statements with RFC 2119 keywords but no requirement id:\n" + "\n".join(missing)


def test_every_normative_table_has_an_example() -> None:
    seq = blocks(spec_text())
    failures = []
    for i, (kind, body) in enumerate(seq):
        if kind != "row" or not DEF_RE.match(first_cell(body)):
            continue
        # first id row of a table: look forward to the next heading for an Example paragraph
        if i > 0 and seq[i - 1][0] == "row" and DEF_RE.match(first_cell(seq[i - 1][1])):
            continue
        found = False
        for kind2, body2 in seq[i + 1 :]:
            if kind2 == "heading":
                break
            if kind2 == "para" and EXAMPLE_RE.match(body2):
                found = True
                break
        if not found:
            failures.append(body[:80])
    assert not failures, f"normative tables without a following Example paragraph: {failures}"


def _spec_version() -> str:
    text = spec_text()
    title = re.match(r"# DeltaFabric Protocol, Version (\d+\.\d+)\s*$", text.splitlines()[0])
    row = re.search(r"^\| Version \| (\d+\.\d+) \|$", text, re.M)
    assert title and row
    assert title.group(1) == row.group(1)
    return row.group(1)


def test_version_matches_readme_and_changelog() -> None:
    version = _spec_version()
    readme = README.read_text(encoding="utf-8")
    m = re.search(r"^Current version: \*\*(\d+\.\d+)\*\*", readme, re.M)
    assert m, "spec/README.md must contain a line 'Current version: **X.Y**'"
    assert m.group(1) == version
    changelog = CHANGELOG.read_text(encoding="utf-8")
    first = re.search(r"^## \[?(\d+\.\d+)\]?", changelog, re.M)
    assert first and first.group(1) == version, "newest spec/CHANGELOG.md entry must be the spec version"


def test_error_table_matches_error_code_enum() -> None:
    errors = pytest.importorskip("delta_fabric.errors")
    text = spec_text()
    section = re.search(r"^### 7\.2 Error codes$(.*?)(?=^#{2,3} )", text, re.S | re.M)
    assert section, "Section 7.2 Error codes not found"
    codes = []
    for kind, row in blocks(section.group(1)):
        if kind == "row" and DEF_RE.match(first_cell(row)):
            assert first_cell(row).startswith("**[DF-ERR-")
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            m = re.fullmatch(r"`([A-Z_]+)`", cells[1])
            assert m, f"second cell of an error row must be a code in backticks: {row[:80]}"
            codes.append(m.group(1))
    assert len(codes) == len(set(codes))
    assert set(codes) == {c.value for c in errors.ErrorCode}


def test_section_references_exist() -> None:
    text = spec_text()
    numbers = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.M))
    numbers |= {n.split(".")[0] for n in numbers}
    refs = set(re.findall(r"\bSections? (\d+(?:\.\d+)?)", text))
    refs |= set(re.findall(r"\bSections \d+(?:\.\d+)?(?:,| and| to) (\d+(?:\.\d+)?)", text))
    assert refs - numbers == set(), f"references to missing sections: {sorted(refs - numbers)}"
