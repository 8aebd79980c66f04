"""The checked-in generated code equals a fresh run of schema/regen.sh, byte for byte."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
GENERATED = [
    Path("python/src/delta_fabric/_generated"),
    Path("interop/crates/df-core/src/generated"),
]


def _files(root: Path) -> dict[Path, bytes]:
    """Every generated file under ``root`` (caches left by the interpreter excluded)."""
    return {
        p.relative_to(root): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    env = dict(os.environ, FLATC=str(REPO_ROOT / ".venv" / "bin" / "flatc"))
    subprocess.run(
        ["bash", str(REPO_ROOT / "schema" / "regen.sh"), str(tmp_path)],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    for rel in GENERATED:
        fresh = _files(tmp_path / rel)
        checked_in = _files(REPO_ROOT / rel)
        assert fresh, f"regen.sh wrote nothing under {rel}"
        assert sorted(checked_in) == sorted(fresh), (
            f"{rel}: file lists differ (run schema/regen.sh)"
        )
        stale = [str(name) for name in fresh if fresh[name] != checked_in[name]]
        assert stale == [], f"{rel}: stale generated files (run schema/regen.sh): {stale}"
