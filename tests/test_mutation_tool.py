"""The mutation tool's verdict (conformance/tools/mutation.py): an unlisted survivor and a listed
mutant that a vector kills (a stale line, whose reason is wrong) both fail a campaign."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance" / "tools"))

from mutation import Campaign


def test_stale_listed_mutants_are_reported_and_unlisted_survivors_too() -> None:
    listed = {"a": "equivalent: ...", "c": "api-only: ..."}
    camp = Campaign("python", 4, 2, 1, ["c", "d"], listed, 1.0, caught=["a", "b"])
    assert camp.stale == ["a"] and camp.unlisted == ["d"]
    report = camp.report().splitlines()
    assert report[0].startswith(
        "python: 4 mutants (0 unviable not counted), 3 killed (1 by timeout)"
    )
    assert "  SURVIVED d" in report
    assert any(line.startswith("  STALE    a  (listed, but a vector kills it") for line in report)
    clean = Campaign("rust", 2, 1, 0, ["c"], listed, 1.0, caught=["b"])
    assert clean.stale == [] and clean.unlisted == []
    assert len(clean.report().splitlines()) == 1
