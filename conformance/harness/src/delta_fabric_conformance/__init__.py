"""The DeltaFabric conformance suite: the runner (:mod:`delta_fabric_conformance.cli`) and the driver
kit for Python frameworks (:mod:`delta_fabric_conformance.kit`, drivers in
:mod:`delta_fabric_conformance.drivers`).

The suite's data (vectors, scenarios, expected failures, the driver-protocol schema, the implementation
registry) is read from a DeltaFabric checkout: see :mod:`delta_fabric_conformance.suite`.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
