"""DeltaFabric v1: decentralized sparse weight synchronization (reference implementation).

The package root re-exports the sans-IO protocol core: errors, wire types, configuration, manifest,
selection and the engine. Networking (Zenoh) and framework bindings (PyTorch) live in their own modules
and are imported on demand.
"""

from __future__ import annotations

from delta_fabric.config import SyncConfig
from delta_fabric.engine import Engine, ReceiveResult, Snapshot, max_values_per_entry
from delta_fabric.errors import DecodeError, DeltaFabricError, ErrorCode
from delta_fabric.manifest import Manifest, TensorSlice, TensorSpec
from delta_fabric.selection import Selector, reference_select
from delta_fabric.state import Admission, Counters, ReceiverState, ReplayWindow
from delta_fabric.wire import (
    Entry,
    Packet,
    ValueEncoding,
    decode_packet,
    encode_packet,
    encoded_size_bound,
    packet_from_json,
    packet_to_json,
    quantize,
    validate_packet,
)

__version__ = "0.1.0"

__all__ = [
    "Admission",
    "Counters",
    "DecodeError",
    "DeltaFabricError",
    "Engine",
    "Entry",
    "ErrorCode",
    "Manifest",
    "Packet",
    "ReceiveResult",
    "ReceiverState",
    "ReplayWindow",
    "Selector",
    "Snapshot",
    "SyncConfig",
    "TensorSlice",
    "TensorSpec",
    "ValueEncoding",
    "__version__",
    "decode_packet",
    "encode_packet",
    "encoded_size_bound",
    "max_values_per_entry",
    "packet_from_json",
    "packet_to_json",
    "quantize",
    "reference_select",
    "validate_packet",
]
