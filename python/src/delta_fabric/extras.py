"""Optional dependencies ("extras"): a missing one is reported with the ``pip install`` that adds it.

The base install (``pip install delta-fabric``) needs only NumPy and flatbuffers. The Zenoh transport
needs ``eclipse-zenoh`` (extra ``zenoh``), the PyTorch store needs ``torch`` (extra ``torch``).
"""

from __future__ import annotations

from typing import NoReturn

__all__ = ["EXTRAS", "MissingExtraError", "raise_missing_extra"]

#: top-level module -> (extra, distribution that provides it)
EXTRAS: dict[str, tuple[str, str]] = {
    "zenoh": ("zenoh", "eclipse-zenoh"),
    "torch": ("torch", "torch"),
    "jax": ("jax", "jax"),
}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra to install."""


def raise_missing_extra(exc: ModuleNotFoundError, what: str) -> NoReturn:
    """Re-raise ``exc`` (from an ``import`` of an optional dependency in the module ``what``) as a
    `MissingExtraError` naming the extra, when the missing module is one of `EXTRAS`; else re-raise
    it unchanged (a missing module of the package itself is a bug, not a missing extra)."""
    top = (exc.name or "").split(".")[0]
    if top not in EXTRAS:
        raise exc
    extra, dist = EXTRAS[top]
    raise MissingExtraError(
        f"{what} needs {dist}, which is not installed: pip install 'delta-fabric[{extra}]'",
        name=exc.name,
    ) from exc
