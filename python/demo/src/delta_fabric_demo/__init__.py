"""`delta-fabric demo` / `delta-fabric-demo`: a local DeltaFabric cluster on loopback Zenoh trained on
label-skewed digits.

The CLI dispatcher calls `add_arguments` and `run`; see `delta_fabric_demo.runner`. Each node is a
process (`delta_fabric_demo.node`, or the Rust ``df-node`` with the same command line; the table
`delta_fabric_demo.runner.NODE_LAUNCHERS` says which).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from delta_fabric.cli_support import HelpFormatter, add_version_argument, one_line_errors

from delta_fabric_demo.runner import add_arguments, run

__all__ = ["__version__", "add_arguments", "main", "run"]

__version__ = "0.1.0"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``delta-fabric-demo`` console script."""
    parser = argparse.ArgumentParser(
        prog="delta-fabric-demo",
        description="Train a local DeltaFabric cluster on label-skewed digits (loopback Zenoh) and "
        "report accuracies, bytes and weight agreement.",
        formatter_class=HelpFormatter,
    )
    add_version_argument(parser, "delta-fabric-demo", __version__)
    add_arguments(parser)
    one_line_errors(parser)
    return run(parser.parse_args(argv))
