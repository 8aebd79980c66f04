"""`delta-fabric demo` / `delta-fabric-demo`: a local DeltaFabric cluster on loopback Zenoh trained on
label-skewed digits.

The CLI dispatcher calls `add_arguments` and `run`; see `delta_fabric_demo.runner`. Each node is a
process (`delta_fabric_demo.node`, or the Rust ``df-node`` with the same command line; the table
`delta_fabric_demo.runner.NODE_LAUNCHERS` says which).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from delta_fabric_demo.runner import add_arguments, run

__all__ = ["add_arguments", "main", "run"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``delta-fabric-demo`` console script."""
    parser = argparse.ArgumentParser(prog="delta-fabric-demo", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
