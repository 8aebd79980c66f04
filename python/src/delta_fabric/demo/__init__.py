"""`delta-fabric demo`: a local DeltaFabric cluster on loopback Zenoh trained on label-skewed
digits.

The CLI dispatcher calls `add_arguments` and `run`; see `delta_fabric.demo.runner`. Each node is a
process (`delta_fabric.demo.node`, or the Rust ``df-node`` with the same command line).
"""

from __future__ import annotations

from delta_fabric.demo.runner import add_arguments, run

__all__ = ["add_arguments", "run"]
