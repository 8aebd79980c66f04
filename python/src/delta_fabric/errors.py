"""Typed errors of the protocol. Every rejection carries one of the spec's codes (spec/protocol.md section 7.2)."""

from __future__ import annotations

from enum import Enum

__all__ = ["DecodeError", "DeltaFabricError", "ErrorCode"]


class ErrorCode(str, Enum):
    """Rejection codes of spec/protocol.md section 7.2 (DF-ERR)."""

    OVERSIZE = "OVERSIZE"
    BAD_IDENTIFIER = "BAD_IDENTIFIER"
    MALFORMED = "MALFORMED"
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    UNSUPPORTED_ENCODING = "UNSUPPORTED_ENCODING"
    FINGERPRINT_MISMATCH = "FINGERPRINT_MISMATCH"
    HOP_LIMIT = "HOP_LIMIT"
    LENGTH_MISMATCH = "LENGTH_MISMATCH"
    EMPTY_ENTRY = "EMPTY_ENTRY"
    INDEX_OUT_OF_RANGE = "INDEX_OUT_OF_RANGE"
    UNSORTED_INDICES = "UNSORTED_INDICES"
    DUPLICATE_INDEX = "DUPLICATE_INDEX"
    NON_FINITE = "NON_FINITE"
    NON_FINITE_RESULT = "NON_FINITE_RESULT"  # added in 1.1 (DF-RCV-50)
    BAD_SIGNATURE = "BAD_SIGNATURE"  # added in 1.1 (DF-SEC-142)

    def __str__(self) -> str:
        return self.value


class DeltaFabricError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigurationError(DeltaFabricError):
    """A node cannot start as it is configured: a bad environment variable, a node id already in
    use, a Zenoh configuration file that does not load. Its message is one line that names the
    setting; under ``delta-fabric run`` the node prints it alone and exits with 2."""


class DecodeError(DeltaFabricError):
    """A packet (or snapshot chunk) was rejected. ``code`` is the spec's error code."""

    def __init__(self, code: ErrorCode, detail: str = "") -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code.value}: {detail}" if detail else code.value)
