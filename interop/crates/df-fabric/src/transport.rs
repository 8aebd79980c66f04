//! The transport seam (the mirror of Python's `delta_fabric.transports.base.Transport`).
//!
//! A transport moves opaque packet bytes between the nodes of one cluster, tracks which peers are
//! alive, and serves / fetches anchor snapshots for late joiners (DF-ZEN-5). It never decodes delta
//! packets: the engine does. [`Transport::drain`] never blocks; only [`Transport::publish`] may,
//! under the transport's congestion control.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

/// Typed transport failures (not protocol rejections).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransportError {
    /// Bad configuration (node id, namespace, endpoints).
    #[error("transport configuration: {0}")]
    Config(String),
    /// The transport was used after [`Transport::close`].
    #[error("transport closed")]
    Closed,
    /// A wait ran out of time (peers, snapshot).
    #[error("timeout: {0}")]
    Timeout(String),
    /// A snapshot could not be served, fetched or verified (the kind says why, DF-ZEN-12).
    #[error("snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
    /// The network layer failed.
    #[error("transport: {0}")]
    Network(String),
}

pub use df_core::snapshot::{SnapshotError, SnapshotErrorKind, SnapshotSource, VerifiedSnapshot};

/// Captures the node's current anchor as a [`SnapshotSource`] (copying it); called from the
/// transport's threads when a joiner's request needs a new capture, so it must be thread-safe.
pub type SnapshotProvider = Arc<dyn Fn() -> Result<SnapshotSource, SnapshotError> + Send + Sync>;

/// The version of the state a [`SnapshotProvider`] captures: a number that changes whenever a
/// capture would hold something else (the node's anchor moved). Read from the transport's threads.
pub type SnapshotVersion = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Counters of one transport (Python `TransportStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub published_packets: u64,
    pub published_bytes: u64,
    pub received_packets: u64,
    pub received_bytes: u64,
    /// Received packets discarded unprocessed because the queue was full (DF-ZEN-17).
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
    pub queued_packets: u64,
    pub queued_bytes: u64,
    /// Refused before the queue: on the delta key of a non-member (DF-ZEN-151).
    pub rejected_not_member: u64,
    /// Refused before the queue: over the sender's rate limit (DF-ZEN-153).
    pub rate_limited: u64,
    /// Snapshot queries answered with an error because they named no member (DF-ZEN-155).
    pub snapshot_refused: u64,
}

impl TransportStats {
    /// The counters as a JSON object (same keys as Python's `dataclasses.asdict(TransportStats)`).
    pub fn to_json(&self) -> Value {
        json!({
            "published_packets": self.published_packets,
            "published_bytes": self.published_bytes,
            "received_packets": self.received_packets,
            "received_bytes": self.received_bytes,
            "dropped_packets": self.dropped_packets,
            "dropped_bytes": self.dropped_bytes,
            "queued_packets": self.queued_packets,
            "queued_bytes": self.queued_bytes,
            "rejected_not_member": self.rejected_not_member,
            "rate_limited": self.rate_limited,
            "snapshot_refused": self.snapshot_refused,
        })
    }
}

/// What the node loop needs from a network binding (in-memory hub, Zenoh, ...).
pub trait Transport {
    /// This node's id (non-zero).
    fn node_id(&self) -> u64;

    /// Sends one encoded packet to the node's subscribers (reliable; may block under congestion).
    fn publish(&self, packet: &[u8]) -> Result<(), TransportError>;

    /// Up to `max` queued packets in arrival order, without waiting.
    fn drain(&self, max: usize) -> Result<Vec<Vec<u8>>, TransportError>;

    /// Payloads rejected before the receive queue since the last call, per code (DF-ZEN-154); the
    /// node adds them to its rejection counters ([`df_core::Engine::count_rejected`]). A transport
    /// that queues everything returns none; a wrapper must pass its inner transport's counts
    /// through (no default body, so that a wrapper cannot lose them silently).
    fn take_screened(&self) -> Vec<(df_core::ErrorCode, u64)>;

    /// The node's configured membership (DF-RCV-51) as the transport applies it: samples on the
    /// delta key of a non-member are refused before the queue (DF-ZEN-151) and a snapshot query
    /// is answered only when its `from` names a member (DF-ZEN-155) that, with `live`, also holds
    /// a live token (DF-ZEN-150). `None` and `live` false: every sender, as 1.0. A transport without
    /// pre-queue checks ignores it; a wrapper must pass it through (no default body).
    fn set_members(&self, members: Option<std::collections::HashSet<u64>>, live: bool);

    /// Waits up to `timeout` until a packet is queued; true when one is.
    fn wait_for_packets(&self, timeout: Duration) -> Result<bool, TransportError>;

    /// Ids of the live peers (this node excluded). The node also reads this set as reachability:
    /// it sends gap repair requests only to origins in it (DF-RCV-230), so a transport whose
    /// `peers()` stays empty never gets a lost entry repaired.
    fn peers(&self) -> Result<BTreeSet<u64>, TransportError>;

    /// Waits until at least `n` peers are live and every id of `expected` is among them; returns
    /// the live set, or [`TransportError::Timeout`] naming what is missing.
    fn wait_for_peers(
        &self,
        n: usize,
        expected: &[u64],
        timeout: Duration,
    ) -> Result<BTreeSet<u64>, TransportError>;

    /// Answers snapshot (and info) queries of joiners with what `provider` returns (replaces any
    /// previous provider).
    fn serve_snapshot(&self, provider: SnapshotProvider) -> Result<(), TransportError>;

    /// The version of what the snapshot provider captures (`None`: unknown). A transport that
    /// reuses a young capture for a new joiner (DF-ZEN-11) reuses it only while the version is the
    /// one it was captured at, so that a joiner never installs a capture older than the anchor; a
    /// transport that captures for every joiner ignores it. A wrapper must pass it through (no
    /// default body).
    fn set_snapshot_version(&self, version: Option<SnapshotVersion>);

    /// Fetches `peer`'s anchor snapshot of manifest `fingerprint` within `timeout`, verified by a
    /// [`df_core::snapshot::SnapshotAssembler`] (fingerprint, consistency, offsets, finite values, digest:
    /// DF-ZEN-12).
    fn fetch_snapshot(
        &self,
        peer: u64,
        fingerprint: &[u8; 32],
        timeout: Duration,
    ) -> Result<VerifiedSnapshot, TransportError>;

    /// Adds (`Some`) or removes (`None`) the member `name` of this node's info object (DF-ZEN-6:
    /// readers ignore members they do not know), e.g. `finish` ([`crate::Fabric::finish`]). The
    /// info object is served once [`Transport::serve_snapshot`] gave a provider. A transport
    /// without info queries ignores it; a wrapper must pass it through (no default body).
    fn set_info_member(&self, name: &str, value: Option<Value>);

    /// `peer`'s info object (DF-ZEN-6, with the members it added by
    /// [`Transport::set_info_member`]) within `timeout`. A transport without info queries answers
    /// [`TransportError::Network`]; a wrapper must pass it through (no default body).
    fn query_info(&self, peer: u64, timeout: Duration) -> Result<Value, TransportError>;

    /// A copy of the counters.
    fn stats(&self) -> TransportStats;

    /// Releases everything; idempotent. Peers see this node disappear. Every other operation
    /// then fails with [`TransportError::Closed`].
    fn close(&mut self) -> Result<(), TransportError>;
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn node_id(&self) -> u64 {
        (**self).node_id()
    }
    fn publish(&self, packet: &[u8]) -> Result<(), TransportError> {
        (**self).publish(packet)
    }
    fn drain(&self, max: usize) -> Result<Vec<Vec<u8>>, TransportError> {
        (**self).drain(max)
    }
    fn wait_for_packets(&self, timeout: Duration) -> Result<bool, TransportError> {
        (**self).wait_for_packets(timeout)
    }
    fn peers(&self) -> Result<BTreeSet<u64>, TransportError> {
        (**self).peers()
    }
    fn wait_for_peers(
        &self,
        n: usize,
        expected: &[u64],
        timeout: Duration,
    ) -> Result<BTreeSet<u64>, TransportError> {
        (**self).wait_for_peers(n, expected, timeout)
    }
    fn serve_snapshot(&self, provider: SnapshotProvider) -> Result<(), TransportError> {
        (**self).serve_snapshot(provider)
    }
    fn set_snapshot_version(&self, version: Option<SnapshotVersion>) {
        (**self).set_snapshot_version(version)
    }
    fn fetch_snapshot(
        &self,
        peer: u64,
        fingerprint: &[u8; 32],
        timeout: Duration,
    ) -> Result<VerifiedSnapshot, TransportError> {
        (**self).fetch_snapshot(peer, fingerprint, timeout)
    }
    fn stats(&self) -> TransportStats {
        (**self).stats()
    }
    fn set_info_member(&self, name: &str, value: Option<Value>) {
        (**self).set_info_member(name, value)
    }
    fn query_info(&self, peer: u64, timeout: Duration) -> Result<Value, TransportError> {
        (**self).query_info(peer, timeout)
    }
    fn take_screened(&self) -> Vec<(df_core::ErrorCode, u64)> {
        (**self).take_screened()
    }
    fn set_members(&self, members: Option<std::collections::HashSet<u64>>, live: bool) {
        (**self).set_members(members, live)
    }
    fn close(&mut self) -> Result<(), TransportError> {
        (**self).close()
    }
}

/// A node id as 16 lowercase hex digits (as in the key expressions, DF-ZEN).
pub fn node_hex(node: u64) -> String {
    format!("{node:016x}")
}

/// The message of a peer-wait timeout: who is present and who is missing.
pub fn peer_timeout_message(
    n: usize,
    expected: &[u64],
    live: &BTreeSet<u64>,
    timeout: Duration,
) -> String {
    let have: Vec<String> = live.iter().map(|&p| node_hex(p)).collect();
    let missing: Vec<String> = expected
        .iter()
        .filter(|p| !live.contains(p))
        .map(|&p| node_hex(p))
        .collect();
    format!(
        "waited {timeout:?} for {n} peer(s), {} present ({}); missing: {}",
        live.len(),
        if have.is_empty() {
            "none".into()
        } else {
            have.join(", ")
        },
        if missing.is_empty() {
            "unknown ids".into()
        } else {
            missing.join(", ")
        }
    )
}

/// True when `live` satisfies a [`Transport::wait_for_peers`] request.
pub fn peers_satisfied(n: usize, expected: &[u64], live: &BTreeSet<u64>) -> bool {
    live.len() >= n && expected.iter().all(|p| live.contains(p))
}
