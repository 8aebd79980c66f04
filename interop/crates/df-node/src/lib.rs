//! DeltaFabric Burn node: the demo's digits CNN trained with Burn 0.21 (NdArray + Autodiff),
//! synchronised by the library node loop ([`df_fabric::Fabric`] over a [`df_burn::BurnStore`] and a
//! [`df_fabric::Transport`], Zenoh in the binary).
//!
//! The binary (`df-node`) speaks the same command line and stdout line protocol as the Python demo
//! node (`python -m delta_fabric.demo.node`), see [`cli`] and [`node`]. The data files are described
//! in [`data`].

pub mod cli;
pub mod data;
pub mod error;
pub mod model;
pub mod node;
pub mod rng;
pub mod rounds;
pub mod zenoh;

pub use error::NodeError;

/// The autodiff backend every node trains on.
pub type TrainBackend = burn::backend::Autodiff<burn::backend::NdArray<f32>>;
/// The inner (inference) backend.
pub type InnerBackend = burn::backend::NdArray<f32>;
