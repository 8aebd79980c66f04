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

__all__ = [
    "ENV_VAR",
    "PARAMETER_RANGES",
    "Suite",
    "SuiteError",
    "SuiteNotFound",
    "find_suite",
    "parameter_problems",
]

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


class SuiteError(Exception):
    """The suite data itself is wrong (for example a vector context outside the spec's ranges); the
    runner refuses to run it (the message is one line)."""


#: Allowed ranges of the parameters a vector may set (spec/protocol.md Section 3, DF-PAR-1..8 and
#: DF-PAR-30; ``num_params``: N of a decode context, DF-MAN-7). ``(lo, hi, lo_open)``: ``lo``
#: excluded when ``lo_open``.
PARAMETER_RANGES: dict[str, tuple[float, float, bool]] = {
    "alpha": (0.0, 1.0, True),
    "ratio": (0.0, 1.0, True),
    "sync_interval": (1, 2**32 - 1, False),
    "relay_threshold": (0.0, float("inf"), False),
    "hop_limit": (0, 255, False),
    "max_packet_size": (296, 2**31 - 1, False),
    "replay_window": (1, 2**20, False),
    "max_incarnations": (1, 2**16, False),
    "max_origins": (1, 2**20, False),
    "num_params": (1, 2**32, False),  # DF-MAN-7: N <= 2^32 (indices are u32, 0 to N - 1)
}
ENCODINGS = ("F32", "F16", "BF16", "Q8")  # Q8: added in 1.1 (spec section 6.8)
INDEX_ENCODINGS = ("PLAIN", "PACKED")  # DF-PAR-110 (1.1)


def parameter_problems(values: object, where: str) -> list[str]:
    """Every parameter of ``values`` (a vector's ``context`` or ``config``) outside its allowed range,
    as ``"<where>.<name> <value> outside <range>"``. Unknown members are not judged here."""
    if not isinstance(values, dict):
        return [f"{where} is not an object"]
    out: list[str] = []
    for name, (lo, hi, lo_open) in PARAMETER_RANGES.items():
        if name not in values:
            continue
        x = values[name]
        ok = isinstance(x, (int, float)) and not isinstance(x, bool)
        if ok:
            ok = (lo < x if lo_open else lo <= x) and x <= hi
        if not ok:
            rng = f"{'(' if lo_open else '['}{lo}, {hi}]"
            out.append(f"{where}.{name} {x!r} outside {rng}")
    enc = values.get("encoding", "F32")
    if enc not in ENCODINGS:
        out.append(f"{where}.encoding {enc!r} not one of {list(ENCODINGS)}")
    ienc = values.get("index_encoding", "PLAIN")
    if ienc not in INDEX_ENCODINGS:
        out.append(f"{where}.index_encoding {ienc!r} not one of {list(INDEX_ENCODINGS)}")
    return out
