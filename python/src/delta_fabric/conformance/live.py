"""Live scenarios over real Zenoh (``conformance/scenarios/*.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delta_fabric.conformance.runner import ImplRun, Runner

__all__ = ["load_scenarios", "run_scenarios"]


def load_scenarios(folder: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(folder.glob("*.json")):
        with open(p, encoding="utf-8") as f:
            sc = json.load(f)
        sc.setdefault("id", p.stem)
        out.append(sc)
    return out


def run_scenarios(runner: Runner, runs: list[ImplRun]) -> None:
    pass
