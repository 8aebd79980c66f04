"""Shared plumbing of the fake drivers: each is the reference driver with exactly one planted fault.

Run as ``python tests/fake_drivers/<fault>.py``; the conformance runner's self-test
(tests/test_conformance_selftest.py) registers them and asserts the runner catches every fault.
"""

from __future__ import annotations

import sys
from pathlib import Path

# the fakes run as scripts: make the library and the harness importable from a source checkout too
_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT / "python" / "src"), str(_ROOT / "conformance" / "harness" / "src")]

from delta_fabric_conformance.drivers.torch import TorchKit  # noqa: E402
from delta_fabric_conformance.kit import Driver as KitDriver  # noqa: E402
from delta_fabric_conformance.kit import Rejected, main  # noqa: E402

__all__ = ["Driver", "Rejected", "main"]


class Driver(KitDriver):
    """The PyTorch reference driver (registered like it), named after the fake's class attribute."""

    def __init__(self) -> None:
        super().__init__(None, "torch", TorchKit())
