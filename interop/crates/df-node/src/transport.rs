//! The transport seen by the training loop, and an in-process implementation.
//!
//! The loop only needs four operations; [`crate::node`] never waits on the network except in
//! [`Transport::wait_for_peers`] before training starts.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::NodeError;

/// What the node loop needs from a transport.
pub trait Transport {
    /// Publishes one packet (own and relayed entries) to the neighbours.
    fn publish(&mut self, packet: &[u8]) -> Result<(), NodeError>;
    /// Up to `max` received packets, in arrival order, without waiting.
    fn drain(&mut self, max: usize) -> Result<Vec<Vec<u8>>, NodeError>;
    /// Waits until the given peers are seen alive (or `timeout`); true when all were seen.
    fn wait_for_peers(&mut self, peers: &[u64], timeout: Duration) -> Result<bool, NodeError>;
    /// Waits up to `timeout` until a packet is queued; true when one is.
    fn wait_for_packets(&mut self, timeout: Duration) -> Result<bool, NodeError> {
        std::thread::sleep(timeout.min(Duration::from_millis(5)));
        Ok(false)
    }
    /// Starts serving anchor snapshots (DF-ZEN-5) for this incarnation and manifest; the anchor
    /// is then kept current through [`Transport::update_anchor`]. Default: not served.
    fn serve_snapshots(&mut self, _incarnation: u64, _fingerprint: [u8; 32], _anchor: &[f32]) {}
    /// The anchor changed (called between two steps, only after a change).
    fn update_anchor(&mut self, _anchor: &[f32]) {}
    /// Late join (DF-ZEN-5): fetches a verified anchor snapshot of manifest `fingerprint` from a
    /// live peer, trying the live `preferred` peers first, within `timeout`. Returns the serving
    /// node and the values. Default: [`NodeError::Join`] (this transport fetches no snapshots).
    fn fetch_snapshot(
        &mut self,
        _preferred: &[u64],
        _fingerprint: &[u8; 32],
        _timeout: Duration,
    ) -> Result<(u64, Vec<f32>), NodeError> {
        Err(NodeError::Join(
            "this transport cannot fetch snapshots".into(),
        ))
    }
    /// Transport counters for the report.
    fn stats_json(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Releases the transport.
    fn close(&mut self) {}
}

#[derive(Debug, Default)]
struct HubState {
    /// Inbound queue per node id.
    queues: HashMap<u64, VecDeque<Vec<u8>>>,
    /// Who receives a node's packets (absent: every other node).
    neighbours: HashMap<u64, Vec<u64>>,
}

/// An in-process broadcast hub: each [`MemoryTransport`] joined to it receives the packets
/// published by its neighbours (every other member by default). For tests and single-process runs.
#[derive(Debug, Clone, Default)]
pub struct MemoryHub {
    state: Arc<Mutex<HubState>>,
}

impl MemoryHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins node `id`; `neighbours`: whose packets it receives (empty: everybody's).
    pub fn join(&self, id: u64, neighbours: &[u64]) -> MemoryTransport {
        if let Ok(mut s) = self.state.lock() {
            s.queues.entry(id).or_default();
            if !neighbours.is_empty() {
                s.neighbours.insert(id, neighbours.to_vec());
            }
        }
        MemoryTransport {
            hub: self.clone(),
            id,
        }
    }
}

/// One member of a [`MemoryHub`].
#[derive(Debug)]
pub struct MemoryTransport {
    hub: MemoryHub,
    id: u64,
}

fn poisoned() -> NodeError {
    NodeError::Transport("memory hub lock poisoned".into())
}

impl Transport for MemoryTransport {
    fn publish(&mut self, packet: &[u8]) -> Result<(), NodeError> {
        let mut s = self.hub.state.lock().map_err(|_| poisoned())?;
        let HubState { queues, neighbours } = &mut *s;
        for (&dst, q) in queues.iter_mut() {
            if dst == self.id {
                continue;
            }
            let listens = neighbours.get(&dst).is_none_or(|n| n.contains(&self.id));
            if listens {
                q.push_back(packet.to_vec());
            }
        }
        Ok(())
    }

    fn drain(&mut self, max: usize) -> Result<Vec<Vec<u8>>, NodeError> {
        let mut s = self.hub.state.lock().map_err(|_| poisoned())?;
        let q = s.queues.entry(self.id).or_default();
        let n = q.len().min(max);
        Ok(q.drain(..n).collect())
    }

    fn wait_for_peers(&mut self, peers: &[u64], timeout: Duration) -> Result<bool, NodeError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            {
                let s = self.hub.state.lock().map_err(|_| poisoned())?;
                if peers.iter().all(|p| s.queues.contains_key(p)) {
                    return Ok(true);
                }
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
