"""The driver kit: what a Python framework's conformance driver is built from.

A driver is a :class:`Driver` given its registry name, its framework and a :class:`ModelKit` (the
framework's digits CNN: build it from canonical weights, wrap it in the framework's fabric, one SGD
step, predictions, the active weights), served by :func:`main`. See
:mod:`delta_fabric_conformance.drivers.torch` (about 60 lines) for a complete one. Live nodes can be
replaced altogether with ``node_factory`` (:class:`PeerHost`); ``generate`` / ``receive`` vectors can
be routed through the framework with the ``gather`` / ``apply`` hooks of :func:`run_generate` /
:func:`run_receive`.
"""

from __future__ import annotations

from delta_fabric_conformance.kit.driver import Driver, Rejected, Skipped, main
from delta_fabric_conformance.kit.engine_io import Apply, Gather, run_generate, run_receive
from delta_fabric_conformance.kit.models import DIGITS_CNN, model_manifest
from delta_fabric_conformance.kit.peer import (
    KitFabric,
    ModelKit,
    NodeArgs,
    NodeFactory,
    PeerHost,
    PeerNode,
    accepted_logger,
    load_data,
)

__all__ = [
    "DIGITS_CNN",
    "Apply",
    "Driver",
    "Gather",
    "KitFabric",
    "ModelKit",
    "NodeArgs",
    "NodeFactory",
    "PeerHost",
    "PeerNode",
    "Rejected",
    "Skipped",
    "accepted_logger",
    "load_data",
    "main",
    "model_manifest",
    "run_generate",
    "run_receive",
]
