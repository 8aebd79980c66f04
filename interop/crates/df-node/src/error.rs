//! Typed errors of the node (no panics on bad input).

use std::path::PathBuf;

/// Everything that can go wrong in a node run.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Bad command line.
    #[error("usage: {0}")]
    Usage(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A data file has the wrong size or content.
    #[error("data: {0}")]
    Data(String),
    /// Canonical mapping of the Burn model failed.
    #[error(transparent)]
    Map(#[from] df_burn::BurnMapError),
    /// The manifest could not be built.
    #[error("manifest: {0}")]
    Manifest(String),
    /// The sync engine refused an operation.
    #[error("engine: {0:?}")]
    Engine(df_core::EngineError),
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] df_fabric::TransportError),
    /// The node loop failed (store, engine, transport, `--join`).
    #[error(transparent)]
    Fabric(#[from] df_fabric::FabricError),
}

impl NodeError {
    /// An [`NodeError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        NodeError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<df_core::EngineError> for NodeError {
    fn from(e: df_core::EngineError) -> Self {
        NodeError::Engine(e)
    }
}
