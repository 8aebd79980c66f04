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

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from delta_fabric.manifest import Manifest

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
    m = re.search(
        r"^## Appendix " + re.escape(title) + r".*?(?=^## |\Z)", text, re.DOTALL | re.MULTILINE
    )
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
        assert re.search(rf"^\| {field} \| .+ \|$", text, re.MULTILINE), (
            f"header field {field} missing"
        )
    date = re.search(r"^\| Date \| (\d{4}-\d{2}-\d{2}) \|$", text, re.MULTILINE)
    assert date, "header Date must be YYYY-MM-DD"
    newest = re.search(r"^## .*$", CHANGELOG.read_text(encoding="utf-8"), re.MULTILINE)
    assert newest and date.group(1) in newest.group(0), (
        "header Date must be the date of the newest spec/CHANGELOG.md entry"
    )
    assert re.search(r"^\| Editors \| DeltaFabric maintainers \|$", text, re.MULTILINE)


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
    assert mentioned - defined == set(), (
        f"ids mentioned but never defined: {sorted(mentioned - defined)}"
    )


def test_appendix_a_lists_exactly_the_defined_ids() -> None:
    text = spec_text()
    listed = [first_cell(r) for k, r in blocks(appendix(text, "A")) if k == "row"]
    listed = [x for x in listed if WELL_FORMED.fullmatch(x)]
    assert sorted(listed) == sorted(defined_ids(text))
    assert len(listed) == len(set(listed))


def test_appendix_a_levels_match_the_requirements() -> None:
    text = spec_text()
    bodies: dict[str, str] = {}
    for kind, body in blocks(text.replace(appendix(text, "A"), "")):
        lead = first_cell(body) if kind == "row" else LIST_MARK.sub("", body)
        m = DEF_RE.match(lead)
        if m and kind != "heading":
            bodies[m.group(1)] = body

    def level(body: str) -> str:
        for name, pattern in (
            ("MUST", r"\b(MUST|REQUIRED|SHALL)\b"),
            ("SHOULD", r"\b(SHOULD|RECOMMENDED)\b"),
        ):
            if re.search(pattern, body):
                return name
        return "MAY"

    rows = [
        r
        for k, r in blocks(appendix(text, "A"))
        if k == "row" and WELL_FORMED.fullmatch(first_cell(r))
    ]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[-1] == level(bodies[cells[0]]), cells


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
    assert not missing, "statements with RFC 2119 keywords but no requirement id:\n" + "\n".join(
        missing
    )


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
    row = re.search(r"^\| Version \| (\d+\.\d+) \|$", text, re.MULTILINE)
    assert title and row
    assert title.group(1) == row.group(1)
    return row.group(1)


def test_version_matches_readme_and_changelog() -> None:
    version = _spec_version()
    readme = README.read_text(encoding="utf-8")
    m = re.search(r"^Current version: \*\*(\d+\.\d+)\*\*", readme, re.MULTILINE)
    assert m, "spec/README.md must contain a line 'Current version: **X.Y**'"
    assert m.group(1) == version
    changelog = CHANGELOG.read_text(encoding="utf-8")
    first = re.search(r"^## \[?(\d+\.\d+)\]?", changelog, re.MULTILINE)
    assert first and first.group(1) == version, (
        "newest spec/CHANGELOG.md entry must be the spec version"
    )


def test_error_table_matches_error_code_enum() -> None:
    errors = pytest.importorskip("delta_fabric.errors")
    text = spec_text()
    section = re.search(r"^### 7\.2 Error codes$(.*?)(?=^#{2,3} )", text, re.DOTALL | re.MULTILINE)
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
    numbers = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.MULTILINE))
    numbers |= {n.split(".")[0] for n in numbers}
    refs = set(re.findall(r"\bSections? (\d+(?:\.\d+)?)", text))
    refs |= set(re.findall(r"\bSections \d+(?:\.\d+)?(?:,| and| to) (\d+(?:\.\d+)?)", text))
    assert refs - numbers == set(), f"references to missing sections: {sorted(refs - numbers)}"


# ------------------------------------------------------------------ the worked examples are correct
# Every number of the spec's examples is recomputed here with the reference implementation, so that the
# examples can neither drift from the normative text nor from the code.


def section(number: str) -> str:
    """The text of section ``number`` (e.g. ``"5.9"``) up to the next heading of the same or a higher level."""
    text = spec_text()
    level = "##" if "." not in number else "###"
    m = re.search(
        rf"^{level} {re.escape(number)}\.? .*?(?=^#{{2,{len(level)}}} |\Z)",
        text,
        re.DOTALL | re.MULTILINE,
    )
    assert m, f"section {number} not found"
    return m.group(0)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table body row of ``text`` (header and separator rows dropped)."""
    rows = []
    lines = [ln.strip() for ln in text.splitlines()]
    for i, ln in enumerate(lines):
        if not ln.startswith("|") or set(ln) <= set("|-: "):
            continue
        if i + 1 < len(lines) and lines[i + 1].startswith("|") and set(lines[i + 1]) <= set("|-: "):
            continue  # header row
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def bits(x: Any) -> str:
    import numpy as np

    return format(int(np.float32(x).view(np.uint32)), "08x")


NON_NUMERIC_PARAMETERS = {"encoding", "include_buffers", "relay_policy", "index_encoding"}


def test_parameter_defaults_match_the_reference_configuration() -> None:
    # REQ: DF-PAR-1, DF-PAR-2, DF-PAR-3, DF-PAR-4, DF-PAR-5, DF-PAR-6, DF-PAR-7, DF-PAR-8, DF-PAR-9
    # REQ: DF-PAR-10, DF-PAR-11, DF-PAR-30, DF-PAR-50, DF-PAR-70
    from delta_fabric.config import SyncConfig

    cfg = SyncConfig.v1_0()
    rows = [r for r in table_rows(section("3")) if r[0].startswith("**[DF-PAR-")]
    # the table lists exactly the fields of the reference SyncConfig
    assert {r[1].strip("`") for r in rows} == {f.name for f in dataclasses.fields(SyncConfig)}
    for row in rows:
        name = row[1].strip("`")
        default = re.match(r"`([^`]+)`", row[4])
        assert default, row
        actual = getattr(cfg, name)
        if name == "encoding":
            assert actual.name == default.group(1)
        elif name == "relay_policy":  # REQ: DF-PAR-60
            assert actual.value == default.group(1)
        elif name == "index_encoding":  # REQ: DF-PAR-110
            assert actual.name == default.group(1)
        elif isinstance(actual, bool):
            assert str(actual).lower() == default.group(1)
        else:
            assert actual == type(actual)(float(default.group(1))), name


def test_parameter_ranges_are_enforced_as_specified() -> None:
    # REQ: DF-PAR-11
    from delta_fabric.config import SyncConfig

    rows = [r for r in table_rows(section("3")) if r[0].startswith("**[DF-PAR-")]
    checked = 0
    for row in rows:
        name = row[1].strip("`")
        rng = re.search(r"`(?:(-?[\d.]+) (<=|<) )?(\w+ )?(<=|>=) ?([\d.e-]+)`", row[3])
        if rng is None:
            continue
        lo, lo_op, _, op, hi = rng.groups()
        kind = float if row[3].startswith("binary64") else int
        eps = 1e-9 if kind is float else 1
        if op == ">=":  # "`>= x`": lower bound only
            lo, lo_op, hi = hi, "<=", None
        good: list[float] = []
        bad: list[float] = []
        if lo is not None:
            lo_v = kind(float(lo))
            (good if lo_op == "<=" else bad).append(lo_v)
            bad.append(lo_v - eps)
        if hi is not None:
            hi_v = kind(float(hi))
            good.append(hi_v)
            bad.append(hi_v + eps)
        for v in good:
            ok: dict[str, Any] = {name: v}
            SyncConfig.v1_0(**ok)
        for v in bad:
            wrong: dict[str, Any] = {name: v}
            with pytest.raises((ValueError, TypeError)):
                SyncConfig.v1_0(**wrong)
        checked += 1
    # every numeric parameter has a range in the table
    assert checked == sum(1 for r in rows if r[1].strip("`") not in NON_NUMERIC_PARAMETERS)


def test_k_examples() -> None:
    # REQ: DF-GEN-2
    from delta_fabric.config import SyncConfig

    found = re.findall(r"`N = (\d+), ratio = ([\d.]+)`: [^k]*?`k = (\d+)`", section("5.2"))
    assert len(found) >= 4
    for n, ratio, k in found:
        assert SyncConfig.v1_0(ratio=float(ratio)).num_selected(int(n)) == int(k)


def test_fingerprint_examples() -> None:
    # REQ: DF-MAN-2, DF-MAN-5
    import hashlib

    from delta_fabric.manifest import Manifest

    sec = section("4.4")
    block = re.search(r"```\n(deltafabric-manifest/1.*?)```", sec, re.DOTALL)
    assert block
    canonical = block.group(1).replace("\n", "").replace("\\t", "\t").replace("\\n", "\n")
    digests = re.findall(r"`?([0-9a-f]{64})`?", sec)
    assert hashlib.sha256(canonical.encode()).hexdigest() == digests[0]
    assert f"({len(canonical.encode())} bytes" in sec
    shapes: list[tuple[str, tuple[int, ...]]] = [
        ("fc.weight", (2, 3)),
        ("fc.bias", (2,)),
        ("bn.weight", (2,)),
        ("bn.bias", (2,)),
    ]
    buffers: list[tuple[str, tuple[int, ...]]] = [
        ("bn.running_mean", (2,)),
        ("bn.running_var", (2,)),
    ]
    assert Manifest.from_named_shapes(shapes).canonical_text() == canonical
    assert Manifest.from_named_shapes(shapes).fingerprint.hex() == digests[0]
    assert Manifest.from_named_shapes(shapes + buffers).fingerprint.hex() == digests[1]
    scalar: list[tuple[str, tuple[int, ...]]] = [("temperature", ())]
    assert Manifest.from_named_shapes(shapes + scalar).fingerprint.hex() == digests[2]


def _example_manifest() -> Manifest:

    return Manifest.from_named_shapes(
        [("fc.weight", (2, 3)), ("fc.bias", (2,)), ("bn.weight", (2,)), ("bn.bias", (2,))]
    )


def test_generation_example() -> None:
    # REQ: DF-GEN-1, DF-GEN-3, DF-GEN-4, DF-GEN-5, DF-GEN-6
    import numpy as np
    from delta_fabric.config import SyncConfig
    from delta_fabric.engine import Engine

    rows = [r for r in table_rows(section("5.9")) if r[0].isdigit()]
    assert len(rows) == 12
    active = np.array([float(r[1]) for r in rows], dtype=np.float32)
    anchor = np.array([float(r[2]) for r in rows], dtype=np.float32)
    d = active - anchor
    assert [bits(x) for x in d] == [r[4].strip("`") for r in rows]
    eng = Engine(_example_manifest(), SyncConfig.v1_0(ratio=0.25), 0x0A, 0x00066169085C7000, anchor)
    (entry,) = eng.generate(active)
    text = section("5.9")
    m = re.search(r"indices = \[([\d, ]+)\], values = \[([-\d., ]+)\]", text)
    assert m
    assert entry.seq == 1 and entry.hops == 0
    assert entry.indices.tolist() == [int(x) for x in m.group(1).split(",")]
    assert entry.values.tolist() == [float(x) for x in m.group(2).split(",")]
    updates = re.findall(r"`anchor\[(\d+)\] =\s+([-\d.]+)`", text)
    assert len(updates) == 3
    for i, v in updates:
        assert eng.anchor[int(i)] == np.float32(float(v))


def test_encoding_examples() -> None:
    # REQ: DF-GEN-4
    import numpy as np
    from delta_fabric.wire import ValueEncoding, quantize

    rows = table_rows(section("5.4"))
    assert len(rows) == 5
    for row in rows:
        m32 = re.search(r"`([0-9a-f]{8})`", row[0])
        m16 = re.match(r"`([0-9a-f]{4})`", row[1])
        mbf = re.match(r"`([0-9a-f]{4})`", row[2])
        assert m32 and m16 and mbf, row
        x = np.array([int(m32.group(1), 16)], dtype=np.uint32).view(np.float32)
        want16 = (
            np.array([int(m16.group(1), 16)], dtype=np.uint16).view(np.float16).astype(np.float32)
        )
        wantbf = np.array([int(mbf.group(1), 16) << 16], dtype=np.uint32).view(np.float32)
        assert bits(quantize(x, ValueEncoding.F16)[0]) == bits(want16[0])
        assert bits(quantize(x, ValueEncoding.BF16)[0]) == bits(wantbf[0])


def test_packet_example_hex_dump_decodes_to_its_json() -> None:
    # REQ: DF-PKT-1, DF-PKT-3, DF-PKT-7
    import json

    from delta_fabric.wire import decode_packet, packet_to_json

    sec = section("6.6")
    dump = re.search(r"is (\d+) bytes:\n\n```\n(.*?)```", sec, re.DOTALL)
    assert dump
    raw = bytes.fromhex("".join(line[6:] for line in dump.group(2).splitlines()))
    assert len(raw) == int(dump.group(1))
    want = json.loads(re.search(r"```json\n(.*?)```", sec, re.DOTALL).group(1))  # type: ignore[union-attr]
    assert packet_to_json(decode_packet(raw)) == want


def test_replay_window_trace() -> None:
    # REQ: DF-RCV-3, DF-RCV-4, DF-RCV-12
    from delta_fabric.replay import ReceiverState

    state = ReceiverState(0x99, window=4, max_incarnations=2)
    rows = [r for r in table_rows(section("7.4")) if r[0].isdigit()]
    assert len(rows) == 11
    for row in rows:
        got = state.admit(0x01, int(row[1]), int(row[2]))
        reason = re.match(r"dropped, `(\w+)`", row[3])
        assert str(got) == (reason.group(1) if reason else "accepted"), row


def test_receive_and_relay_examples() -> None:
    # REQ: DF-RCV-1, DF-RCV-2, DF-RCV-5, DF-RCV-6, DF-RCV-7, DF-RCV-10, DF-RLY-1, DF-RLY-3, DF-RLY-5
    import numpy as np
    from delta_fabric.config import SyncConfig
    from delta_fabric.engine import Engine
    from delta_fabric.wire import (
        Entry,
        Packet,
        ValueEncoding,
        decode_packet,
        encode_packet,
    )

    f = np.float32
    m = _example_manifest()
    a, b, x, d = 0x0A, 0x0B, 0x0C, 0x0D
    ia, ib, ix = 0x00066169085C7000, 0x0006616908A8BB40, 0x0006616A4A39E600

    def entry(o: int, inc: int, seq: int, hops: int, idx: list[int], val: list[float]) -> Entry:
        return Entry(o, inc, seq, hops, np.array(idx, dtype=np.uint32), np.array(val, dtype=f))

    def packet(sender: int, inc: int, *entries: Entry) -> bytes:
        return encode_packet(Packet(sender, inc, m.fingerprint, tuple(entries), ValueEncoding.F32))

    p1 = packet(
        a,
        ia,
        entry(a, ia, 1, 0, [3, 7, 10], [-0.5, 0.5, -1.0]),
        entry(b, ib, 4, 1, [7, 11], [0.25, 1.5e-6]),
    )
    p2 = packet(b, ib, entry(b, ib, 4, 0, [7, 11], [0.5, 3e-6]), entry(x, ix, 2, 1, [0], [0.25]))
    p3 = packet(d, ix, entry(d, ix, 1, 0, [0], [1.0]), entry(d, ix, 2, 0, [12], [1.0]))
    before = np.array([0, 0, 1, 1, 0.1, -0.2, 0.5, -0.25, 0.75, -1, 0.125, 0.3], dtype=f)
    anchor = before.copy()
    anchor[11] = f(0.25)
    eng = Engine(m, SyncConfig.v1_0(alpha=0.5), x, ix, anchor)
    for seq in (1, 2, 3):
        eng.state.admit(b, ib, seq)
    active = before.copy()
    res, _ = eng.step(active, [p1, p2, p3], sync=False)

    rows = [r for r in table_rows(section("7.8")) if r[0].isdigit()]
    assert len(rows) == 4
    for row in rows:
        i = int(row[0])
        assert bits(res.values[res.indices.tolist().index(i)]) == bits(float(row[1].split()[0]))
        for col, buf in ((4, active), (5, eng.anchor)):
            want = re.search(r"`([0-9a-f]{8})`", row[col])
            assert bits(buf[i]) == (want.group(1) if want else bits(float(row[col])))
    counters = eng.counters.to_json()
    named = re.findall(r"`([\w.]+)` (\d+)", section("7.8").split("Counters:")[1])
    assert len(named) == 7
    for name, n in named:
        group, _, key = name.partition(".")
        assert (counters[group][key] if key else counters[group]) == int(n), name

    relay = [(e.origin, e.seq, e.hops, e.indices.tolist(), e.values.tolist()) for e in res.relay]
    assert relay == [(a, 1, 1, [3, 7, 10], [-0.25, 0.25, -0.5]), (b, 4, 2, [7], [0.125])]
    own = [entry(x, ix, 3, 0, [0, 11], [0.25, -0.125])]
    sizes = {}
    for limit in (16777216, 500):
        eng.config = SyncConfig.v1_0(alpha=0.5, max_packet_size=limit)
        out = eng.pack(own, res.relay)
        sizes[limit] = [[(e.origin, e.seq) for e in decode_packet(p).entries] for p in out]
        assert all(decode_packet(p).sender == x for p in out)
    assert sizes[16777216] == [[(x, 3), (a, 1), (b, 4)]]
    assert sizes[500] == [[(x, 3), (a, 1)], [(b, 4)]]


def test_snapshot_digest_example() -> None:
    # REQ: DF-ZEN-11
    import numpy as np
    from delta_fabric.snapshot import snapshot_digest

    sec = section("9.5")
    values = re.search(r"little-endian\s+f32 values `([^`]+)`", sec)
    digest = re.search(r"the digest is\s+`([0-9a-f]{64})`", sec)
    assert values and digest
    anchor = np.array([float(v) for v in values.group(1).split(",")], dtype=np.float32)
    assert anchor.size == 12
    assert snapshot_digest(anchor).hex() == digest.group(1)
