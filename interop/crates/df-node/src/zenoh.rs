//! The Zenoh transport of a node run: [`df_zenoh::ZenohTransport`] with the given endpoints and
//! mode (or a Zenoh config file used as is), multicast scouting and gossip off, and the delta keys of the neighbours (or
//! `NS/v1/delta/*`).

use df_fabric::Transport;
use df_zenoh::{TransportConfig, ZenohTransport};

use crate::error::NodeError;
use crate::node::NodeOptions;

/// The transport configuration of a node run.
pub fn transport_config(o: &NodeOptions) -> TransportConfig {
    let mut c = TransportConfig::new(o.node_id);
    c.namespace = o.namespace.clone();
    c.listen = o.listen.clone();
    c.connect = o.connect.clone();
    c.mode = o.mode;
    c.config_file = o.zenoh_config.clone();
    c.multicast = false;
    c.neighbours = (!o.neighbours.is_empty()).then(|| o.neighbours.clone());
    c.max_packet_size = o.sync_config.max_packet_size;
    c.rate_limit = o.rate_limit;
    c.rate_burst = o.rate_burst;
    c
}

/// Opens the Zenoh transport described by the options.
pub fn open(o: &NodeOptions) -> Result<Box<dyn Transport + Send>, NodeError> {
    Ok(Box::new(ZenohTransport::open(transport_config(o))?))
}
