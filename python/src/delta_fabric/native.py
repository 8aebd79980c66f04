"""The OPTIONAL native kernels: ``delta_fabric_native``, a Rust extension (``python/native``).

The NumPy core is the reference and is complete without it. When the extension is installed, the
engine hands a few numeric passes to it: the sparse aggregate of a receive step (a merge of sorted
index lists instead of a dense N-value scratch), the DF-RCV-50 sums and checks, the anchor writes,
the candidate pass of the selection and the packed-index decoder. Each kernel gives the bits of the
NumPy pass it replaces (``tests/test_native.py`` compares them, and the engine vectors and the
conformance suite run with it on and off). Nothing in the protocol's decisions moves to Rust.

``DELTA_FABRIC_NATIVE`` chooses: ``auto`` (the default: the extension when it is installed), ``off``
(never), ``on`` (required: an error when it is missing). Install it with ``pip install
./python/native`` (needs cargo) or ``scripts/setup.sh`` (which builds it when cargo is there).
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from delta_fabric.errors import DeltaFabricError

__all__ = ["API", "NativeError", "aligned", "describe", "kernels", "mode", "ready"]

#: The kernel set this core calls (``delta_fabric_native.API`` must be equal).
API = 2
_MODES = {"auto": "auto", "": "auto", "on": "on", "1": "on", "off": "off", "0": "off"}
_loaded: dict[str, ModuleType | None] = {}
log = logging.getLogger("delta_fabric.native")


class NativeError(DeltaFabricError, ImportError):
    """``DELTA_FABRIC_NATIVE=on`` without a usable ``delta_fabric_native``, or a bad value of it."""


def mode() -> str:
    """``auto``, ``on`` or ``off``, from ``DELTA_FABRIC_NATIVE`` (`NativeError` for another value)."""
    raw = os.environ.get("DELTA_FABRIC_NATIVE", "auto").strip().lower()
    if raw not in _MODES:
        raise NativeError(f"DELTA_FABRIC_NATIVE={raw!r}: expected auto, on or off (or 1, 0)")
    return _MODES[raw]


def kernels() -> ModuleType | None:
    """The native kernel module, or None (NumPy only). Read once per mode per process."""
    m = mode()
    if m in _loaded:
        return _loaded[m]
    mod: ModuleType | None = None
    if m != "off":
        try:
            mod = importlib.import_module("delta_fabric_native")
        except ImportError as exc:
            if m == "on":
                raise NativeError(
                    "DELTA_FABRIC_NATIVE=on but delta_fabric_native is not installed "
                    "(pip install ./python/native)"
                ) from exc
            mod = None
        if mod is not None and getattr(mod, "API", None) != API:
            why = (
                f"delta_fabric_native has kernel API {getattr(mod, 'API', None)}, this core "
                f"needs {API}: reinstall it from this checkout (pip install ./python/native)"
            )
            if m == "on":
                raise NativeError(why)
            log.warning("%s; the NumPy core runs instead", why)
            mod = None
    _loaded[m] = mod
    return mod


def describe() -> str:
    """Whether the kernels run in this process, in words: ``used``, ``off by DELTA_FABRIC_NATIVE``,
    ``not used: ...`` (a stale build), or the `NativeError` of a bad setting. Imports the extension
    only (for ``--version`` and the demo's summary)."""
    try:
        m = mode()
        if m == "off":
            return "off by DELTA_FABRIC_NATIVE"
        mod = kernels()
    except NativeError as exc:
        return f"error: {exc}"
    if mod is not None:
        return "used"
    try:
        got = getattr(importlib.import_module("delta_fabric_native"), "API", None)
    except ImportError:
        return "not installed"
    return f"not used: kernel API {got}, this core needs {API}"


def ready(a: object, dtype: DTypeLike) -> bool:
    """Whether ``a`` can go to a kernel as it is: a 1-D NumPy array of ``dtype`` in this host's byte
    order, C-contiguous and aligned. The callers fall back to NumPy (or to `aligned`) otherwise."""
    return (
        isinstance(a, np.ndarray)
        and a.ndim == 1
        and a.dtype == np.dtype(dtype)
        and a.dtype.isnative
        and bool(a.flags.c_contiguous)
        and bool(a.flags.aligned)
    )


def aligned(a: Any, dtype: DTypeLike) -> Any:
    """``a`` as a kernel takes it (see `ready`): ``a`` itself when it is, else a copy."""
    if ready(a, dtype):
        return a
    return np.require(
        np.asarray(a, dtype=np.dtype(dtype).newbyteorder("=")), requirements=["C", "A"]
    )
