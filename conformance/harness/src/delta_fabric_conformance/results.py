"""Result vocabulary shared by the runner and the live scenarios (no import of either): the verdict
constants, :class:`TestResult`, the run :class:`Options`, one implementation's driver record
:class:`ImplRun`, and :class:`ResultSink`, what a scenario needs from the runner."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from delta_fabric_conformance.claims import LEVELS, implementation_level
from delta_fabric_conformance.client import DriverClient, ProtocolViolation, Reply
from delta_fabric_conformance.registry import Implementation
from delta_fabric_conformance.suite import Suite

__all__ = [
    "FAILED",
    "NOT_CLAIMED",
    "PASSED",
    "SKIPPED",
    "UNSUPPORTED",
    "ImplRun",
    "Options",
    "ResultSink",
    "TestResult",
    "level_prefix",
]

PASSED, FAILED, UNSUPPORTED = "passed", "failed", "unsupported"
#: A test that needs an OPTIONAL feature or a level the implementation's hello does not claim
#: (spec DF-CNF-30, driver protocol 5.1): not run, never a failure, counted on its own.
NOT_CLAIMED = "not_claimed"
#: An optional implementation that cannot run here (its framework is not installed); never a failure.
SKIPPED = "skipped"
MAX_RESTARTS = 3
HELLO_TIMEOUT = 120.0
CALL_TIMEOUT = 30.0


def level_prefix(level: str) -> str:
    lv = level.upper()
    if lv not in ("REQUIRED", "RECOMMENDED"):
        raise ValueError(f"unknown level {level!r}")
    return "Required" if lv == "REQUIRED" else "Recommended"


@dataclass
class TestResult:
    id: str
    level: str  # REQUIRED | RECOMMENDED
    impls: tuple[str, ...]
    result: str  # passed | failed | unsupported | not_claimed | skipped
    message: str = ""
    requirements: list[str] = field(default_factory=list)
    expected_failure: str | None = None  # the expected-failures pattern naming this test
    verdict: str = ""  # ok | expected_failure | unexpected_failure | unexpected_pass | warning
    duration_s: float = 0.0
    category: str = ""
    features: list[str] = field(default_factory=list)  # the OPTIONAL features the test needs
    spec_level: str = ""  # the level that requires it ("1.0", "1.1"; "" for protocol tests)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "level": self.level,
            "impls": list(self.impls),
            "result": self.result,
            "verdict": self.verdict,
            "message": self.message,
            "requirements": self.requirements,
            "expected_failure": self.expected_failure,
            "duration_s": round(self.duration_s, 4),
            "category": self.category,
            "features": self.features,
            "spec_level": self.spec_level,
        }


@dataclass
class Options:
    """What to run and where the data is (every path explicit: see :mod:`delta_fabric_conformance.suite`)."""

    output: Path
    registry: Path
    vectors: Path
    scenarios: Path
    expected_failures: Path
    spec: Path
    schema: Path  # conformance/driver-protocol.schema.json
    cwd: Path  # the drivers' working directory (the suite root)
    impls: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)  # fnmatch patterns; empty = all
    scenario_names: list[str] = field(default_factory=list)  # empty = all
    live: bool = True
    enforce_recommended: bool = False
    verbose: bool = False

    @classmethod
    def from_suite(cls, suite: Suite, output: Path, **kw: Any) -> Options:
        """Options with every path taken from ``suite`` (``kw`` overrides any field)."""
        paths: dict[str, Any] = {
            "registry": suite.registry,
            "vectors": suite.vectors,
            "scenarios": suite.scenarios,
            "expected_failures": suite.expected_failures,
            "spec": suite.spec,
            "schema": suite.schema,
            "cwd": suite.root,
        }
        paths.update(kw)
        return cls(output=output, **paths)


class ResultSink(Protocol):
    """What the live scenarios need from the runner."""

    @property
    def opts(self) -> Options: ...

    def wanted(self, test_id: str) -> bool: ...

    def add(
        self,
        test_id: str,
        level: str,
        impls: Iterable[str],
        result: str,
        message: str = "",
        requirements: Iterable[str] = (),
        duration: float = 0.0,
        category: str = "",
        features: Iterable[str] = (),
        *,
        enforce_claims: bool = True,
        spec_level: str = "",
    ) -> TestResult: ...


class ImplRun:
    """One implementation's long-lived driver (vectors and encode) and its protocol record."""

    def __init__(self, impl: Implementation, opts: Options) -> None:
        self.impl = impl
        self.client = DriverClient(
            impl.name,
            impl.argv(),
            opts.output / "logs" / f"{impl.name}.stderr.log",
            schema=opts.schema,
            cwd=opts.cwd,
        )
        self.skipped: str | None = None  # why an optional implementation did not run
        self.hello: dict[str, Any] | None = None
        self.caps: set[str] = set()
        # the level hello.spec_version claims ("1.0" or "1.1", spec DF-CNF-30)
        self.level: str = LEVELS[-1]
        # the targets hello claims (DF-CNF-30), and those the runner accepted (capabilities present)
        self.claims: tuple[str, ...] = ()
        self.accepted_claims: tuple[str, ...] = ()
        self.restarts = 0
        self.abandoned: str | None = None
        self.violations: dict[str, list[str]] = {}

    @property
    def name(self) -> str:
        return self.impl.name

    @property
    def framework(self) -> str:
        return str(self.hello["framework"]) if self.hello else self.impl.framework

    def record(self, v: ProtocolViolation, context: str) -> None:
        self.violations.setdefault(v.rule, []).append(f"{context}: {v}")

    def start(self) -> str | None:
        """Start the driver and shake hands; returns a failure message or None."""
        self.client.start()
        try:
            r = self.client.request(
                {"cmd": "hello", "versions": [1], "spec_version": "1.1"}, timeout=HELLO_TIMEOUT
            )
        except ProtocolViolation as v:
            self.record(v, "hello")
            return str(v)
        if r.kind != "ok":
            return f"hello answered {r.kind}: {r.body}"
        if r.body["name"] != self.impl.name:
            return f"hello name {r.body['name']!r} != registry name {self.impl.name!r}"
        self.hello = r.body
        self.caps = set(r.body["capabilities"])
        self.level = implementation_level(r.body.get("spec_version"))
        self.claims = tuple(str(c) for c in r.body.get("claims", []))
        return None

    def restart(self) -> bool:
        """After a protocol violation: start again, unless the restart budget is spent."""
        if self.abandoned is not None:
            return False
        if self.restarts >= MAX_RESTARTS:
            self.abandoned = f"driver abandoned after {MAX_RESTARTS} restarts"
            self.client.kill()
            return False
        self.restarts += 1
        problem = self.start()
        if problem is not None:
            self.abandoned = f"driver failed to restart: {problem}"
            self.client.kill()
            return False
        return True

    def call(
        self, args: Mapping[str, Any], context: str, timeout: float = CALL_TIMEOUT
    ) -> Reply | str:
        """A checked request; a string is the failure message (protocol violation, dead driver)."""
        if self.abandoned is not None:
            return self.abandoned
        if not self.client.alive and not self.restart():
            return self.abandoned or "driver not running"
        try:
            return self.client.request(args, timeout=timeout)
        except ProtocolViolation as v:
            self.record(v, context)
            self.restart()
            return f"protocol violation: {v}"
