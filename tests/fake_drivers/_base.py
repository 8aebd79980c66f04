"""Shared plumbing of the fake drivers: each is the reference driver with exactly one planted fault.

Run as ``python tests/fake_drivers/<fault>.py``; the conformance runner's self-test
(tests/test_conformance_selftest.py) registers them and asserts the runner catches every fault.
"""

from __future__ import annotations

import sys
from pathlib import Path

# the fakes run as scripts: make `delta_fabric` importable from a source checkout too
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python" / "src"))

from delta_fabric.conformance_driver import Driver, Rejected, main

__all__ = ["Driver", "Rejected", "main"]
