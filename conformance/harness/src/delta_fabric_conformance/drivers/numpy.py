"""The NumPy driver: wire, engine and the ``flat`` live model only (no framework, no ``peer.train``).

Run as ``python -m delta_fabric_conformance.drivers.numpy``.
"""

from __future__ import annotations

import sys

from delta_fabric_conformance.kit import Driver, main


def make_driver() -> Driver:
    return Driver("python-numpy", "numpy")


if __name__ == "__main__":
    sys.exit(main(make_driver()))
