//! The Zenoh transport of the node: DF-ZEN over [`df_zenoh::ZenohTransport`] (loopback endpoints,
//! multicast scouting and gossip off, delta keys of the neighbours or `NS/v1/delta/*`, liveliness
//! token, snapshot and info queryables serving the anchor).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use df_zenoh::{SnapshotSource, TransportConfig, ZenohTransport};
use serde_json::{Value, json};

use crate::error::NodeError;
use crate::node::NodeOptions;
use crate::transport::Transport;

fn terr(e: df_zenoh::TransportError) -> NodeError {
    NodeError::Transport(e.to_string())
}

/// [`Transport`] over one Zenoh session.
pub struct ZenohNodeTransport {
    inner: Option<ZenohTransport>,
    anchor: Option<Arc<Mutex<Arc<Vec<f32>>>>>,
}

impl ZenohNodeTransport {
    /// Opens the session (see [`TransportConfig`]).
    pub fn open(cfg: TransportConfig) -> Result<Self, NodeError> {
        Ok(ZenohNodeTransport {
            inner: Some(ZenohTransport::open(cfg).map_err(terr)?),
            anchor: None,
        })
    }

    fn t(&self) -> Result<&ZenohTransport, NodeError> {
        self.inner
            .as_ref()
            .ok_or_else(|| NodeError::Transport("transport closed".into()))
    }
}

impl Transport for ZenohNodeTransport {
    fn publish(&mut self, packet: &[u8]) -> Result<(), NodeError> {
        self.t()?.publish(packet).map_err(terr)
    }

    fn drain(&mut self, max: usize) -> Result<Vec<Vec<u8>>, NodeError> {
        Ok(self.t()?.drain(Some(max)))
    }

    fn wait_for_peers(&mut self, peers: &[u64], timeout: Duration) -> Result<bool, NodeError> {
        let t = self.t()?;
        let deadline = Instant::now() + timeout;
        loop {
            let live = t.peers();
            if peers.iter().all(|p| live.contains(p)) {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            // Wakes on any liveliness change (or after the slice).
            let _ = t.wait_for_peers(
                live.len() + 1,
                (deadline - now).min(Duration::from_millis(50)),
            );
        }
    }

    fn wait_for_packets(&mut self, timeout: Duration) -> Result<bool, NodeError> {
        Ok(self.t()?.wait_for_packets(timeout))
    }

    fn serve_snapshots(&mut self, incarnation: u64, fingerprint: [u8; 32], anchor: &[f32]) {
        let shared = Arc::new(Mutex::new(Arc::new(anchor.to_vec())));
        self.anchor = Some(Arc::clone(&shared));
        if let Some(t) = &self.inner {
            t.serve_snapshot(Arc::new(move || SnapshotSource {
                incarnation,
                fingerprint,
                framework: "burn".into(),
                values: shared
                    .lock()
                    .map(|g| Arc::clone(&g))
                    .unwrap_or_else(|p| Arc::clone(&p.into_inner())),
            }));
        }
    }

    fn update_anchor(&mut self, anchor: &[f32]) {
        if let Some(a) = &self.anchor {
            let fresh = Arc::new(anchor.to_vec());
            match a.lock() {
                Ok(mut g) => *g = fresh,
                Err(p) => *p.into_inner() = fresh,
            }
        }
    }

    fn stats_json(&self) -> Value {
        match &self.inner {
            Some(t) => {
                let s = t.stats();
                json!({"published": s.published, "published_bytes": s.published_bytes,
                       "received": s.received, "dropped": s.dropped, "queued": s.queued})
            }
            None => Value::Null,
        }
    }

    fn close(&mut self) {
        if let Some(t) = self.inner.take()
            && let Err(e) = t.close()
        {
            eprintln!("df-node: closing the zenoh session: {e}");
        }
    }
}

/// The transport configuration of a node run.
pub fn transport_config(o: &NodeOptions) -> TransportConfig {
    let mut c = TransportConfig::new(o.node_id);
    c.namespace = o.namespace.clone();
    c.listen = o.listen.iter().cloned().collect();
    c.connect = o.connect.clone();
    c.multicast = false;
    c.neighbours = (!o.neighbours.is_empty()).then(|| o.neighbours.clone());
    c.max_packet_size = o.sync_config.max_packet_size;
    c
}

/// Opens the Zenoh transport described by the options.
pub fn open(o: &NodeOptions) -> Result<Box<dyn Transport>, NodeError> {
    Ok(Box::new(ZenohNodeTransport::open(transport_config(o))?))
}
