"""``interop/implementations.json``: the implementations the suite runs, and their expected failures."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta_fabric_conformance.claims import TARGETS

__all__ = ["ExpectedFailures", "Implementation", "load_registry"]


@dataclass(frozen=True)
class Implementation:
    """One registry entry. ``command`` is an argv list; ``{python}`` is replaced by the runner's Python.

    ``requires`` lists what the driver needs to start, as ``{"python": [module, ...]}`` (modules importable
    by the runner's Python, which runs ``{python}`` drivers). An ``optional`` implementation whose
    requirements are missing is reported as skipped with the reason instead of failing. ``claims``:
    the conformance targets the implementation claims (``codec``, ``engine``, ``node``; added in 1.1),
    which its ``hello`` must state too.
    """

    name: str
    language: str
    framework: str
    command: tuple[str, ...]
    capabilities: tuple[str, ...]
    build: str = ""
    description: str = ""
    optional: bool = False
    requires_python: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Implementation:
        for key in ("name", "language", "framework", "command", "capabilities"):
            if key not in d:
                raise ValueError(f"implementation entry {d.get('name', '?')!r} lacks {key!r}")
        cmd = d["command"]
        if isinstance(cmd, str) or not all(isinstance(c, str) for c in cmd) or not cmd:
            raise ValueError(f"{d['name']}: command must be a non-empty list of strings")
        requires = d.get("requires", {})
        if not isinstance(requires, dict) or set(requires) - {"python"}:
            raise ValueError(f"{d['name']}: requires must be an object with only a 'python' list")
        modules = requires.get("python", [])
        if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
            raise ValueError(f"{d['name']}: requires.python must be a list of module names")
        claims = d.get("claims", [])
        if isinstance(claims, str) or not all(c in TARGETS for c in claims):
            raise ValueError(f"{d['name']}: claims must be a list of targets {list(TARGETS)}")
        optional = d.get("optional", False)
        if not isinstance(optional, bool):
            raise ValueError(f"{d['name']}: optional must be true or false")
        return cls(
            name=str(d["name"]),
            language=str(d["language"]),
            framework=str(d["framework"]),
            command=tuple(cmd),
            capabilities=tuple(str(c) for c in d["capabilities"]),
            build=str(d.get("build", "")),
            description=str(d.get("description", "")),
            optional=optional,
            requires_python=tuple(modules),
            claims=tuple(str(c) for c in claims),
        )

    def missing_requirements(self) -> str | None:
        """Why the driver cannot start here (a one-line reason), or None when nothing is missing."""
        missing = [m for m in self.requires_python if not _importable(m)]
        if not missing:
            return None
        return f"Python module(s) {', '.join(missing)} not installed for {sys.executable}" + (
            f" (install: {self.build})" if self.build else ""
        )

    def argv(self) -> list[str]:
        return [sys.executable if c == "{python}" else c for c in self.command]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing, or a malformed name
        return False


def load_registry(path: Path) -> list[Implementation]:
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    if d.get("version") != 1:
        raise ValueError(f"{path}: unsupported registry version {d.get('version')!r}")
    impls = [Implementation.from_json(x) for x in d["implementations"]]
    names = [i.name for i in impls]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate implementation names")
    return impls


@dataclass
class ExpectedFailures:
    """``conformance/expected-failures/<impl>.txt``: test-id patterns (fnmatch), ``#`` comments."""

    patterns: dict[str, str] = field(default_factory=dict)  # pattern -> reason
    used: set[str] = field(default_factory=set)

    @classmethod
    def load(cls, path: Path) -> ExpectedFailures:
        out = cls()
        if not path.exists():
            return out
        for raw in path.read_text(encoding="utf-8").splitlines():
            line, _, reason = raw.partition("#")
            pattern = line.strip()
            if pattern:
                out.patterns[pattern] = reason.strip()
        return out

    def match(self, test_id: str) -> str | None:
        """The pattern naming ``test_id`` (None if none)."""
        for p in self.patterns:
            if p == test_id or fnmatch.fnmatchcase(test_id, p):
                self.used.add(p)
                return p
        return None
