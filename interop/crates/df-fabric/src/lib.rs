//! The DeltaFabric node runtime as a library (the Rust mirror of Python's `delta_fabric.fabric`).
//!
//! A [`fabric::Fabric`] drives one node: it drains a [`transport::Transport`], lets the sans-IO
//! [`df_core::Engine`] validate and aggregate what arrived, adds the aggregate to the weights held by
//! a [`store::WeightStore`], generates its own sparse delta every `sync_interval` steps and publishes
//! own and relayed entries. It is generic over both seams:
//!
//! | concept | Python | Rust |
//! |---|---|---|
//! | weight store seam | `delta_fabric.store.WeightStore` | [`store::WeightStore`] |
//! | transport seam | `delta_fabric.transports.base.Transport` | [`transport::Transport`] |
//! | in-memory transport | `delta_fabric.transports.memory` | [`memory::MemoryHub`] / [`memory::MemoryTransport`] |
//! | the node | `delta_fabric.fabric.Fabric` | [`fabric::Fabric`] |
//! | `DELTA_FABRIC_*` variables | `delta_fabric.env` | [`env`](mod@env) (`Fabric::from_env` is in `df_zenoh`) |
//!
//! The defaults are the recommended ones: `SyncConfig::default()` with `FabricOptions::default()`
//! (residual held aside, gap repair, `average_over` derived from the live cluster) needs no
//! learning-rate change and no cluster size, and [`fabric::Fabric::finish`] ends a run with the
//! nodes in agreement. A peer rejected for another model, version, encoding or signature is
//! reported once ([`fabric::Fabric::misconfigured_peers`]).
//!
//! Stores: `df_burn::BurnStore` (any Burn `Module`) and [`store::VecStore`] (a plain `Vec<f32>`).
//! Transports: `df_zenoh::ZenohTransport` and [`memory::MemoryTransport`].
//!
//! Lifecycle: dropping a `Fabric` closes its transport (peers see the node go), so a program that
//! returns early, propagates an error or unwinds from a panic releases the network. The library
//! installs no signal handler by itself: SIGINT / SIGTERM end the process at once (default
//! disposition) and peers see the node go when its links close. A binary that calls
//! [`lifecycle::install`] stops cleanly instead: the node loop stops at its next step
//! ([`FabricError::Stopped`]), the fabric is dropped (transport closed) and
//! [`lifecycle::exit_if_stopped`] prints the reason and exits with `128 + signal`
//! (`df-zenoh/tests/lifecycle.rs` measures these endings). Logging goes
//! through the [`log`] facade with target `delta_fabric` and is silent unless a logger is installed;
//! binaries call [`logging::init_from_env`] (`DELTA_FABRIC_LOG` or `RUST_LOG`).

pub mod env;
pub mod fabric;
pub mod lifecycle;
pub mod logging;
pub mod memory;
pub mod queue;
pub mod store;
pub mod transport;

pub use env::{Bootstrap, Env, EnvError};
pub use fabric::{Fabric, FabricError, FabricOptions, JoinOptions, TrustCounters};
pub use memory::{MemoryHub, MemoryTransport};
pub use store::{StoreError, VecStore, WeightStore};
pub use transport::{
    SnapshotError, SnapshotErrorKind, SnapshotProvider, SnapshotSource, SnapshotVersion, Transport,
    TransportError, TransportStats, VerifiedSnapshot,
};

/// The `log` target of every DeltaFabric record (the Python logger name).
pub const LOG_TARGET: &str = "delta_fabric";
