//! The Zenoh transport of the node (binding DF-ZEN over `df-zenoh`).

use crate::error::NodeError;
use crate::node::NodeOptions;
use crate::transport::Transport;

/// Opens the Zenoh transport described by the options.
pub fn open(_o: &NodeOptions) -> Result<Box<dyn Transport>, NodeError> {
    Err(NodeError::Transport(
        "the Zenoh transport (df-zenoh) is not available in this build; use --sync off".into(),
    ))
}
