//! The Zenoh transport of the node: DF-ZEN over [`df_zenoh::ZenohTransport`] (loopback endpoints,
//! multicast scouting and gossip off, delta keys of the neighbours or `NS/v1/delta/*`, liveliness
//! token, snapshot and info queryables serving the anchor, snapshot fetch for `--join`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use df_zenoh::{SnapshotSource, TransportConfig, ZenohTransport};
use serde_json::{Value, json};

use crate::error::NodeError;
use crate::node::NodeOptions;
use crate::transport::Transport;

/// Longest time one `--join` fetch attempt may take before the next live peer is tried.
const JOIN_PER_PEER: Duration = Duration::from_secs(10);

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

    fn fetch_snapshot(
        &mut self,
        preferred: &[u64],
        fingerprint: &[u8; 32],
        timeout: Duration,
    ) -> Result<(u64, Vec<f32>), NodeError> {
        let t = self.t()?;
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let mut last: Option<String> = None;
        loop {
            let live = t.peers();
            // Live neighbours first (in the configured order), then any other live peer.
            let mut order: Vec<u64> = preferred
                .iter()
                .copied()
                .filter(|p| live.contains(p))
                .collect();
            order.extend(live.iter().copied().filter(|p| !preferred.contains(p)));
            for peer in order {
                if left().is_zero() {
                    break;
                }
                // fetch_snapshot checks the fingerprint of every chunk and the whole digest.
                match t.fetch_snapshot(peer, fingerprint, left().min(JOIN_PER_PEER)) {
                    Ok(s) => return Ok((s.node, s.values)),
                    Err(e) => last = Some(e.to_string().replace('\n', " ")),
                }
            }
            if left().is_zero() {
                break;
            }
            // Wakes on a liveliness change, else retries after a short pause.
            let _ = t.wait_for_peers(live.len() + 1, left().min(Duration::from_millis(100)));
        }
        Err(NodeError::Join(match last {
            Some(e) => format!("no snapshot within {timeout:?} (last error: {e})"),
            None => format!("no live peer within {timeout:?}"),
        }))
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
