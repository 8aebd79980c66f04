//! DeltaFabric protocol v1 core: wire codec, manifest, selection and the sync engine.
//!
//! No I/O and no framework dependency: the transport (`df-zenoh`) and the training framework
//! (`df-burn`) build on these types. Every rule implemented here is fixed by
//! `spec/protocol.md`; requirement ids are cited in the doc comments and tests.

pub mod config;
pub mod engine;
pub mod error;
pub mod manifest;
pub mod replay;
pub mod selection;
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
    pub mod snapshot;
}

pub use config::{ConfigError, SyncConfig};
pub use engine::{AcceptedEntry, Counters, Engine, EngineError, Outcome, ReceiveResult};
pub use error::{DecodeError, ErrorCode};
pub use manifest::{Manifest, TensorSpec};
pub use replay::{Admission, ReceiverState, ReplayWindow};
pub use wire::{
    DEFAULT_MAX_PACKET_SIZE, Entry, OwnedEntry, OwnedPacket, Packet, ValueEncoding, decode_packet,
    encode_packet, validate_packet,
};
