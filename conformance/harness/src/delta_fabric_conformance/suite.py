"""Where the suite's data lives: vectors, scenarios, expected failures, the driver-protocol schema, the
implementation registry and the spec.

The data is not packaged: it is the ``conformance/``, ``interop/`` and ``spec/`` folders of a DeltaFabric
checkout (the *suite root*). It is found, in this order:

1. an explicit path (``--suite DIR``);
2. the environment variable ``DELTA_FABRIC_SUITE``;
3. the current directory or the nearest parent that looks like a suite root.

``DIR`` may be the suite root or its ``conformance/`` folder. Nothing depends on where this package is
installed, so a non-editable install works given the path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENV_VAR", "Suite", "SuiteNotFound", "find_suite"]

ENV_VAR = "DELTA_FABRIC_SUITE"
#: Files whose presence marks a suite root.
MARKERS = ("conformance/vectors/index.json", "conformance/driver-protocol.schema.json")


class SuiteNotFound(Exception):
    """No suite data at the given or discovered place (the message is one line)."""


@dataclass(frozen=True)
class Suite:
    """The paths of one suite root."""

    root: Path

    @property
    def vectors(self) -> Path:
        return self.root / "conformance" / "vectors"

    @property
    def scenarios(self) -> Path:
        return self.root / "conformance" / "scenarios"

    @property
    def expected_failures(self) -> Path:
        return self.root / "conformance" / "expected-failures"

    @property
    def schema(self) -> Path:
        return self.root / "conformance" / "driver-protocol.schema.json"

    @property
    def registry(self) -> Path:
        return self.root / "interop" / "implementations.json"

    @property
    def spec(self) -> Path:
        return self.root / "spec" / "protocol.md"

    @classmethod
    def at(cls, path: Path) -> Suite:
        """The suite at ``path`` (the root or its ``conformance/`` folder); raises SuiteNotFound."""
        p = path.expanduser().resolve()
        if _is_root(p):
            return cls(p)
        if p.name == "conformance" and _is_root(p.parent):
            return cls(p.parent)
        raise SuiteNotFound(
            f"no conformance suite at {path} (expected {' and '.join(MARKERS)} under it)"
        )


def _is_root(p: Path) -> bool:
    return all((p / m).is_file() for m in MARKERS)


def find_suite(explicit: Path | None = None, cwd: Path | None = None) -> Suite:
    """The suite: ``explicit``, else ``$DELTA_FABRIC_SUITE``, else ``cwd`` or its nearest parent that is
    a suite root. Raises :class:`SuiteNotFound` with a one-line message naming what to pass."""
    if explicit is not None:
        return Suite.at(explicit)
    env = os.environ.get(ENV_VAR)
    if env:
        try:
            return Suite.at(Path(env))
        except SuiteNotFound as exc:
            raise SuiteNotFound(f"{ENV_VAR}={env}: {exc}") from None
    start = (cwd or Path.cwd()).resolve()
    for p in (start, *start.parents):
        if _is_root(p):
            return Suite(p)
    raise SuiteNotFound(
        f"no conformance suite found from {start}: pass --suite DIR or set {ENV_VAR} to a "
        "DeltaFabric checkout (the folder holding conformance/ and interop/)"
    )
