//! DeltaFabric protocol v1 core, sans-IO: the wire format, the value encodings, the manifest,
//! selection, the replay window, the sync engine and anchor snapshots.
//!
//! No I/O and no framework dependency: the runtime (`df-fabric`), the transport (`df-zenoh`) and
//! the training framework (`df-burn`) build on these types. Every rule implemented here is fixed
//! by `spec/protocol.md`; requirement ids are cited in the doc comments and tests. The modules
//! mirror the Python reference (`delta_fabric.*`) name for name:
//!
//! | module | Python | what |
//! |---|---|---|
//! | [`config`] | `delta_fabric.config` | [`SyncConfig`], checked parameters (DF-PAR) |
//! | [`encodings`] | `delta_fabric.encodings` | the value-codec table ([`ValueCodec`], [`CODECS`]) |
//! | [`wire`] | `delta_fabric.wire` | packet data model, encode, decode, validate (DF-PKT, DF-RCV-1) |
//! | [`replay`] | `delta_fabric.replay` | replay windows and incarnation tables (DF-RCV-2..4) |
//! | [`engine`] | `delta_fabric.engine` | generation, receive, relay packing ([`Engine`]) |
//! | [`snapshot`] | `delta_fabric.snapshot` | snapshot chunks, server policy, verification (DF-ZEN-5, -12) |
//! | [`manifest`] | `delta_fabric.manifest` | canonical manifest and fingerprint (DF-MAN) |
//! | [`selection`] | `delta_fabric.selection` | top-k selection (DF-GEN-3) |
//! | [`error`] | `delta_fabric.errors` | rejection codes (section 7.2) |

#![warn(missing_docs)]

pub mod compact;
pub mod config;
pub mod encodings;
pub mod engine;
pub mod error;
pub mod json;
pub mod manifest;
pub mod repair;
pub mod repair_io;
pub mod replay;
pub mod selection;
pub mod signing;
pub mod snapshot;
pub mod wire;

/// The flatc output for `schema/deltafabric.fbs` and `schema/snapshot.fbs` (checked in, never edited).
pub mod generated {
    /// `schema/deltafabric.fbs`: `Packet`, `Entry`, `ValueEncoding`.
    #[allow(
        unused_imports,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        deprecated,
        unsafe_op_in_unsafe_fn,
        mismatched_lifetime_syntaxes,
        clippy::all,
        clippy::pedantic,
        missing_docs
    )]
    #[rustfmt::skip]
    #[path = "deltafabric_generated.rs"]
    pub mod packet; /// `schema/snapshot.fbs`: `SnapshotChunk`.
    #[allow(
        unused_imports,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        deprecated,
        unsafe_op_in_unsafe_fn,
        mismatched_lifetime_syntaxes,
        clippy::all,
        clippy::pedantic,
        missing_docs
    )]
    #[rustfmt::skip]
    #[path = "snapshot_generated.rs"]
    pub mod snapshot; /// `schema/repair.fbs`: `RepairRequest` (added in 1.1).
    #[allow(
        unused_imports,
        dead_code,
        non_camel_case_types,
        non_snake_case,
        deprecated,
        unsafe_op_in_unsafe_fn,
        mismatched_lifetime_syntaxes,
        clippy::all,
        clippy::pedantic,
        missing_docs
    )]
    #[rustfmt::skip]
    #[path = "repair_generated.rs"]
    pub mod repair;
}

pub use config::{ConfigError, SyncConfig};
pub use encodings::{CODECS, ValueCodec, ValueEncoding};
pub use engine::{AcceptedEntry, Counters, Engine, EngineError, Outcome, ReceiveResult};
pub use error::{DecodeError, ErrorCode};
pub use manifest::{Manifest, ManifestError, TensorSpec};
pub use replay::{Admission, ReceiverState, ReplayWindow};
pub use wire::{
    DEFAULT_MAX_PACKET_SIZE, Entry, OwnedEntry, OwnedPacket, Packet, decode_packet, encode_packet,
    validate_packet,
};
