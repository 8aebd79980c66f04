"""Conformance claims (spec/protocol.md DF-CNF-1, DF-CNF-2, DF-CNF-30; driver protocol 5.1).

A driver's ``hello`` (and its registry entry) names the targets it claims: ``codec``, ``engine``,
``node``. Claiming a target implies the smaller ones (node > engine > codec). Its ``spec_version``
(``"1.0"`` or ``"1.1"``) is the level it claims, and its ``capabilities`` name the OPTIONAL features it
claims (:data:`OPTIONAL_FEATURES`). The runner

- refuses a claim whose capabilities the driver lacks (``Required.protocol.hello.claims`` fails);
- runs a vector or live scenario only against an implementation that claims what it needs: every
  OPTIONAL feature it needs (:func:`packet_features`, :func:`config_features`: derived from the
  vector's packets and configuration, with the index row's ``features``) and its level
  (:func:`vector_level`: ``1.1`` for what 1.1 added); the others get ``not claimed``
  (:func:`not_claimed_reason`), which is never a failure; and
- fails a REQUIRED test of a claimed target that comes back *unsupported*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from delta_fabric._generated.deltafabric.v1 import Packet as _gen_packet

__all__ = [
    "COMMANDS_1_1",
    "COMMAND_TARGET",
    "ENCODING_FEATURES",
    "ENCODING_NAMES",
    "FEATURES_1_1",
    "INDEX_ENCODING_FEATURES",
    "INDEX_ENCODING_NAMES",
    "LEVELS",
    "OPTIONAL_FEATURES",
    "TARGETS",
    "TARGET_CAPABILITIES",
    "claim_problems",
    "config_features",
    "implementation_level",
    "implied_targets",
    "not_claimed_reason",
    "packet_features",
    "packet_file_features",
    "packet_header",
    "refusal_code",
    "spec_1_1_ids",
    "target_of",
    "unsupported_claim_failure",
    "vector_level",
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
#: does not declare is *not claimed* for it, whatever targets it claims.
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
#: The conformance levels, oldest first: a driver's ``hello.spec_version``.
LEVELS = ("1.0", "1.1")
#: OPTIONAL features that 1.1 added (spec sections 6.8, 7.9, 13.1): a test that needs one is 1.1.
FEATURES_1_1 = frozenset({"encoding.q8", "index.packed", "signing", "repair"})
#: Commands that test what 1.1 added (driver protocol 5.10, 5.11, 5.12): their vectors are 1.1.
COMMANDS_1_1 = frozenset({"config", "repair", "snapshot.serve"})
#: Value and index encodings (DF-PAR-10, DF-PAR-110) -> the feature that offers them (spec Section 6.8).
ENCODING_FEATURES = {"F16": "encoding.f16", "BF16": "encoding.bf16", "Q8": "encoding.q8"}
INDEX_ENCODING_FEATURES = {"PACKED": "index.packed"}
#: ``Packet.encoding`` and ``Packet.index_encoding`` values (schema/deltafabric.fbs) by name.
ENCODING_NAMES = {0: "F32", 1: "F16", 2: "BF16", 3: "Q8"}
INDEX_ENCODING_NAMES = {0: "PLAIN", 1: "PACKED"}
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


def implementation_level(spec_version: object) -> str:
    """The level a ``hello.spec_version`` claims: ``"1.0"`` for 1.0, else ``"1.1"`` (the newest the
    runner knows; a later minor version includes it, DF-VER-3)."""
    return "1.0" if str(spec_version) == "1.0" else LEVELS[-1]


def packet_features(packet: Mapping[str, Any]) -> set[str]:
    """The OPTIONAL features a packet needs of its receiver (its JSON form, spec Appendix B.2): its
    value encoding and its index encoding (DF-PKT-13, DF-PKT-14, DF-PKT-115, DF-PKT-110)."""
    out = set()
    enc = ENCODING_FEATURES.get(str(packet.get("encoding", "F32")))
    if enc is not None:
        out.add(enc)
    ienc = INDEX_ENCODING_FEATURES.get(str(packet.get("index_encoding", "PLAIN")))
    if ienc is not None:
        out.add(ienc)
    return out


def packet_header(data: bytes) -> tuple[str, str] | None:
    """A packet's ``encoding`` and ``index_encoding`` by name (``"?"`` for a value no version
    defines), or None when the bytes are too broken to read them. Read without verifying: only to know
    which OPTIONAL features a vector's packet states (spec DF-RCV-20 step 6)."""
    try:
        root = _gen_packet.Packet.GetRootAs(data, 0)
        enc, ienc = int(root.Encoding()), int(root.IndexEncoding())
    except Exception:  # a broken buffer states nothing
        return None
    return ENCODING_NAMES.get(enc, "?"), INDEX_ENCODING_NAMES.get(ienc, "?")


def packet_file_features(path: Path) -> set[str]:
    """:func:`packet_features` of the packet file at ``path`` (by :func:`packet_header`; nothing for
    a missing or unreadable file)."""
    head = packet_header(path.read_bytes()) if path.is_file() else None
    if head is None:
        return set()
    return packet_features({"encoding": head[0], "index_encoding": head[1]})


def config_features(config: object) -> set[str]:
    """The OPTIONAL features a node's configuration (spec Section 3) needs: its send ``encoding`` and
    ``index_encoding`` (DF-VER-114: a node is configured to send only what it supports)."""
    if not isinstance(config, Mapping):
        return set()
    return packet_features(config)


_ID_MARK = re.compile(r"\*\*\[(DF-[A-Z]+-\d+)\]\*\*\s*(\([^)]*\))?")
_HEADING = re.compile(r"^(#{2,4}) (.*)$", re.MULTILINE)
_INDEX_ROW = re.compile(r"^\|\s*(DF-[A-Z]+-\d+)\s*\|([^|]*)\|", re.MULTILINE)


def spec_1_1_ids(text: str) -> frozenset[str]:
    """The requirement ids of ``spec/protocol.md`` that 1.1 added or changed: an id whose definition
    is marked ``(added in 1.1)`` or ``(erratum, 1.1)``, whose row in the requirement index (Appendix A)
    says ``1.1``, or that is defined in a section whose heading says ``(added in 1.1)``."""
    out: set[str] = set()
    headings = [(m.start(), len(m.group(1)), m.group(2)) for m in _HEADING.finditer(text)]
    for m in _ID_MARK.finditer(text):
        if m.group(2) and "1.1" in m.group(2):
            out.add(m.group(1))
            continue
        # the headings around the definition, innermost last
        stack: list[tuple[int, str]] = []
        for pos, depth, title in headings:
            if pos > m.start():
                break
            stack = [h for h in stack if h[0] < depth] + [(depth, title)]
        if any("(added in 1.1)" in title for _d, title in stack):
            out.add(m.group(1))
    for m in _INDEX_ROW.finditer(text):
        if "1.1" in m.group(2):
            out.add(m.group(1))
    return frozenset(out)


def vector_level(
    command: str,
    features: Iterable[str],
    requirements: Iterable[str],
    ids_1_1: Iterable[str],
    content_1_1: bool = False,
) -> str:
    """The level that requires a vector: ``"1.1"`` when it tests what 1.1 added: a command of
    :data:`COMMANDS_1_1`, a feature of :data:`FEATURES_1_1`, a requirement that 1.1 added or changed
    (:func:`spec_1_1_ids`), or (``content_1_1``) a packet field that only 1.1 defines; else ``"1.0"``."""
    if command in COMMANDS_1_1 or set(features) & FEATURES_1_1 or content_1_1:
        return "1.1"
    return "1.1" if set(requirements) & set(ids_1_1) else "1.0"


def not_claimed_reason(
    level: str, features: Iterable[str], impl_level: str, capabilities: Iterable[str]
) -> str | None:
    """Why a test that needs ``features`` at ``level`` is not run against an implementation of
    ``impl_level`` with ``capabilities`` (None: it is claimed and runs)."""
    why = []
    if LEVELS.index(level) > LEVELS.index(impl_level):
        why.append(f"a {level} addition (the implementation claims {impl_level})")
    missing = sorted((set(features) & OPTIONAL_FEATURES) - set(capabilities))
    if missing:
        why.append(f"needs {', '.join(missing)}, not declared")
    return "not claimed: " + "; ".join(why) if why else None


def refusal_code(
    packet: Mapping[str, Any], impl_level: str, capabilities: Iterable[str]
) -> tuple[str, list[str]] | None:
    """What an implementation of ``impl_level`` with ``capabilities`` answers to a valid packet (JSON
    form) that states an encoding it does not claim, and the requirements that say so; None when it
    claims every encoding the packet states (or the packet gives it nothing to refuse).

    A value encoding it lacks is ``UNSUPPORTED_ENCODING`` (DF-PKT-13, DF-PKT-14, DF-PKT-115: ``Q8`` is
    an unknown encoding to 1.0, DF-VER-3). A ``PACKED`` index encoding it lacks is
    ``UNSUPPORTED_ENCODING`` at 1.1, and ``LENGTH_MISMATCH`` at 1.0 when the packet has an entry: a 1.0
    receiver reads neither ``index_encoding`` nor ``packed_indices`` (DF-VER-2), so an entry's
    ``indices`` is empty and its values are not (DF-VER-114, DF-ERR-8); a 1.0 receiver accepts a
    ``PACKED`` packet without entries."""
    caps = set(capabilities)
    enc = str(packet.get("encoding", "F32"))
    feature = ENCODING_FEATURES.get(enc)
    if feature is not None and (
        feature not in caps or (impl_level == "1.0" and feature in FEATURES_1_1)
    ):
        reqs = {"F16": "DF-PKT-13", "BF16": "DF-PKT-14", "Q8": "DF-VER-114"}[enc]
        return "UNSUPPORTED_ENCODING", sorted({"DF-ERR-5", reqs})
    packed = str(packet.get("index_encoding", "PLAIN")) == "PACKED"
    if not packed or ("index.packed" in caps and impl_level != "1.0"):
        return None
    if impl_level != "1.0":
        return "UNSUPPORTED_ENCODING", ["DF-ERR-5", "DF-VER-114"]
    if not packet.get("entries"):
        return None
    return "LENGTH_MISMATCH", ["DF-ERR-8", "DF-VER-114"]
