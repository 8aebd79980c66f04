"""Conformance claims (spec/protocol.md DF-CNF-1, DF-CNF-30; driver protocol 5.1, added in 1.1).

A driver's ``hello`` (and its registry entry) names the targets it claims: ``codec``, ``engine``,
``node``. Claiming a target implies the smaller ones (node > engine > codec). The runner

- refuses a claim whose capabilities the driver lacks (``Required.protocol.hello.claims`` fails), and
- fails a REQUIRED test of a claimed target that comes back *unsupported*, unless the test needs an
  OPTIONAL feature (``encoding.f16``, ``encoding.bf16``, ``generate.fast``, ``signing``, ``repair``)
  the driver does not declare.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "COMMAND_TARGET",
    "OPTIONAL_FEATURES",
    "TARGETS",
    "TARGET_CAPABILITIES",
    "claim_problems",
    "implied_targets",
    "target_of",
    "unsupported_claim_failure",
]

#: The targets, smallest first; each implies the ones before it.
TARGETS = ("codec", "engine", "node")
#: The capabilities a driver needs to run every REQUIRED test of a target.
TARGET_CAPABILITIES: dict[str, frozenset[str]] = {
    "codec": frozenset({"decode"}),
    "engine": frozenset({"decode", "encode", "generate", "receive"}),
    "node": frozenset(
        {"decode", "encode", "generate", "receive", "peer", "peer.snapshot", "peer.train"}
    ),
}
#: The OPTIONAL features of spec DF-CNF-2 as capabilities: a test that needs one an implementation
#: does not declare stays *unsupported* whatever it claims.
OPTIONAL_FEATURES = frozenset(
    {
        "encoding.f16",
        "encoding.bf16",
        "encoding.q8",
        "index.packed",
        "generate.fast",
        "signing",
        "repair",
    }
)
#: The target whose tests a command's test ids belong to (``<Level>.<command>.<area>.<case>``).
COMMAND_TARGET = {
    "decode": "codec",
    "encode": "engine",
    "generate": "engine",
    "receive": "engine",
    "live": "node",
}


def implied_targets(claims: Iterable[str]) -> set[str]:
    """The claimed targets with every smaller one they imply."""
    out: set[str] = set()
    for c in claims:
        if c in TARGETS:
            out.update(TARGETS[: TARGETS.index(c) + 1])
    return out


def claim_problems(claims: Iterable[str], capabilities: Iterable[str]) -> list[str]:
    """Why a claim is refused: an unknown target, or capabilities the claimed targets need."""
    caps = set(capabilities)
    problems = [f"unknown target {c!r}" for c in claims if c not in TARGETS]
    for t in sorted(implied_targets(claims), key=TARGETS.index):
        missing = sorted(TARGET_CAPABILITIES[t] - caps)
        if missing:
            problems.append(f"claims {t} without the capabilities {missing}")
    return problems


def target_of(test_id: str) -> str | None:
    """The target of a test id (None for protocol tests, which every driver must pass)."""
    parts = test_id.split(".")
    return COMMAND_TARGET.get(parts[1]) if len(parts) > 1 else None


def unsupported_claim_failure(
    test_id: str,
    claims: Iterable[str],
    capabilities: Iterable[str],
    features: Iterable[str] = (),
) -> str | None:
    """The failure message for an *unsupported* REQUIRED test that the claims make required (None:
    it may stay unsupported)."""
    target = target_of(test_id)
    if target is None or target not in implied_targets(claims):
        return None
    missing = sorted((set(features) & OPTIONAL_FEATURES) - set(capabilities))
    if missing:
        return None  # an optional feature the implementation does not offer
    return f"unsupported, but the implementation claims the {target} target (DF-CNF-30)"
