"""Shared test fixtures (kept minimal)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO_ROOT / "conformance" / "vectors"

# Two shared cores: wall-clock deadlines would make property tests flaky.
settings.register_profile(
    "delta-fabric", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("delta-fabric")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    return VECTORS_DIR


@pytest.fixture(scope="session")
def make_vectors() -> ModuleType:
    """conformance/tools/make_vectors.py, imported as a module."""
    name = "make_vectors"
    if name in sys.modules:
        return sys.modules[name]
    path = REPO_ROOT / "conformance" / "tools" / "make_vectors.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
