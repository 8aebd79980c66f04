"""DeltaFabric v1: decentralized sparse weight synchronization (reference implementation).

The package root re-exports the sans-IO protocol core (errors, wire types, configuration, manifest,
selection, engine) and the node runtime: `Fabric`, the `WeightStore` seam, `CanonicalLayout` and the
NumPy store. Zenoh and the framework stores that need a framework (`delta_fabric.stores.torch`) live in
their own modules and are imported on demand: importing ``delta_fabric`` imports neither torch nor
zenoh.
"""

from __future__ import annotations

from delta_fabric.config import SyncConfig
from delta_fabric.engine import (
    AcceptedEntry,
    Engine,
    ReceiveResult,
    Snapshot,
    max_values_per_entry,
)
from delta_fabric.errors import DecodeError, DeltaFabricError, ErrorCode
from delta_fabric.fabric import Fabric, FabricClosedError, SnapshotUnavailable
from delta_fabric.layout import CONV_HWIO, DENSE_IN_OUT, CanonicalLayout, LayoutError
from delta_fabric.log import _configure_from_env
from delta_fabric.manifest import Manifest, TensorSlice, TensorSpec
from delta_fabric.native import NativeError
from delta_fabric.replay import Admission, Counters, ReceiverState, ReplayWindow
from delta_fabric.selection import Selector, reference_select
from delta_fabric.store import FunctionalStore, StoreError, WeightStore
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.base import Transport, TransportClosedError, TransportError
from delta_fabric.transports.memory import MemoryHub, MemoryTransport
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

_configure_from_env()  # silent unless DELTA_FABRIC_LOG is set (delta_fabric.log)

__all__ = [
    "CONV_HWIO",
    "DENSE_IN_OUT",
    "AcceptedEntry",
    "Admission",
    "CanonicalLayout",
    "Counters",
    "DecodeError",
    "DeltaFabricError",
    "Engine",
    "Entry",
    "ErrorCode",
    "Fabric",
    "FabricClosedError",
    "FunctionalStore",
    "LayoutError",
    "Manifest",
    "MemoryHub",
    "MemoryTransport",
    "NativeError",
    "NumpyStore",
    "Packet",
    "ReceiveResult",
    "ReceiverState",
    "ReplayWindow",
    "Selector",
    "Snapshot",
    "SnapshotUnavailable",
    "StoreError",
    "SyncConfig",
    "TensorSlice",
    "TensorSpec",
    "Transport",
    "TransportClosedError",
    "TransportError",
    "ValueEncoding",
    "WeightStore",
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
