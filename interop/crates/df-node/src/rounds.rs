//! Lockstep rounds for the demo node (`--lockstep`): the result of a run no longer depends on
//! scheduling. The same gate as the Python demo's `delta_fabric_demo.rounds.RoundGate`, so that a
//! Burn node can join a lockstep demo cluster of PyTorch nodes with the same semantics.
//!
//! A demo node generates once every `sync_interval` steps, so its `r`-th generation is its entry
//! with seq `r` (one entry per generation: the demo's model fits one packet). [`RoundGate`] wraps
//! the node's transport and hands the fabric only the packets whose entries all belong to rounds the
//! node has released, in a fixed order (round, then sender, then arrival); [`RoundHandle::has_round`]
//! says when every expected origin's round `r` is held. The node releases round `r` right after its
//! own `r`-th generation, once every peer's round `r` is there: every node then applies the same
//! entries at the same local step, whatever the machine load. The gate is the demo's; the protocol
//! itself stays asynchronous. It needs every origin's entries to arrive directly (a full mesh).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use df_core::wire::decode_packet;
use df_fabric::Transport;
use df_fabric::transport::{SnapshotProvider, TransportError, TransportStats, VerifiedSnapshot};

/// `(round, sender, arrival, packet)`: a packet held by the gate.
type Held = (u64, u64, u64, Vec<u8>);

#[derive(Debug, Default)]
struct GateState {
    released: u64,
    held: Vec<Held>,
    arrivals: u64,
    /// origin -> highest seq held or handed out
    seen: BTreeMap<u64, u64>,
}

/// The round state shared by a [`RoundGate`] and its [`RoundHandle`]s.
#[derive(Debug, Clone, Default)]
struct Shared(Arc<Mutex<GateState>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A [`Transport`] that holds the packets of rounds not yet released (see the module docs).
pub struct RoundGate {
    inner: Box<dyn Transport>,
    max_packet_size: usize,
    state: Shared,
}

/// Releases rounds of a [`RoundGate`] that was moved into a fabric.
#[derive(Debug, Clone)]
pub struct RoundHandle {
    state: Shared,
}

impl RoundGate {
    /// Wraps `inner`; `max_packet_size` is the cluster's (DF-PAR), used to read each packet's
    /// rounds. Returns the gate and a handle to release its rounds.
    pub fn new(inner: Box<dyn Transport>, max_packet_size: usize) -> (Self, RoundHandle) {
        let state = Shared::default();
        let handle = RoundHandle {
            state: state.clone(),
        };
        (
            RoundGate {
                inner,
                max_packet_size,
                state,
            },
            handle,
        )
    }

    /// Moves every queued packet of the inner transport into the gate.
    fn pull(&self) -> Result<(), TransportError> {
        let bufs = self.inner.drain(usize::MAX)?;
        if bufs.is_empty() {
            return Ok(());
        }
        let mut st = self.state.lock();
        for buf in bufs {
            st.arrivals += 1;
            let arrival = st.arrivals;
            let Ok(pkt) = decode_packet(&buf, self.max_packet_size) else {
                // the engine rejects and counts it: hand it out at once
                st.held.push((0, 0, arrival, buf));
                continue;
            };
            let mut top = 0;
            for e in &pkt.entries {
                top = top.max(e.seq);
                let seen = st.seen.entry(e.origin).or_insert(0);
                *seen = (*seen).max(e.seq);
            }
            let sender = pkt.sender;
            drop(pkt);
            st.held.push((top, sender, arrival, buf));
        }
        Ok(())
    }
}

impl RoundHandle {
    /// Whether round `r` of every origin in `origins` has arrived (as far as the gate has pulled:
    /// the gate pulls in `drain` and `wait_for_packets`).
    pub fn has_round(&self, origins: &BTreeSet<u64>, r: u64) -> bool {
        let st = self.state.lock();
        origins
            .iter()
            .all(|o| st.seen.get(o).copied().unwrap_or(0) >= r)
    }

    /// Packets whose entries all belong to rounds `<= r` may be drained from now on.
    pub fn release(&self, r: u64) {
        let mut st = self.state.lock();
        st.released = st.released.max(r);
    }

    /// Every held packet may be drained from now on (the end of the run).
    pub fn release_all(&self) {
        self.state.lock().released = u64::MAX;
    }

    /// Blocks until [`RoundHandle::has_round`] (true) or `timeout` passes (false), pulling through
    /// `transport` (the gate, or the fabric's transport that is the gate).
    pub fn wait_round(
        &self,
        transport: &dyn Transport,
        origins: &BTreeSet<u64>,
        r: u64,
        timeout: Duration,
    ) -> Result<bool, TransportError> {
        let deadline = Instant::now() + timeout;
        loop {
            transport.wait_for_packets(Duration::ZERO)?;
            if self.has_round(origins, r) {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            transport.wait_for_packets(left.min(Duration::from_millis(50)))?;
        }
    }
}

impl Transport for RoundGate {
    fn node_id(&self) -> u64 {
        self.inner.node_id()
    }

    fn take_screened(&self) -> Vec<(df_core::ErrorCode, u64)> {
        self.inner.take_screened() // DF-ZEN-154: counted by the node as the engine counts them
    }

    fn set_members(&self, members: Option<std::collections::HashSet<u64>>, live: bool) {
        self.inner.set_members(members, live)
    }

    fn publish(&self, packet: &[u8]) -> Result<(), TransportError> {
        self.inner.publish(packet)
    }

    fn drain(&self, max: usize) -> Result<Vec<Vec<u8>>, TransportError> {
        self.pull()?;
        let mut st = self.state.lock();
        let released = st.released;
        let mut ready: Vec<Held> = Vec::new();
        let mut keep: Vec<Held> = Vec::new();
        for h in std::mem::take(&mut st.held) {
            if h.0 <= released {
                ready.push(h);
            } else {
                keep.push(h);
            }
        }
        ready.sort();
        if ready.len() > max {
            keep.extend(ready.split_off(max));
        }
        st.held = keep;
        Ok(ready.into_iter().map(|h| h.3).collect())
    }

    /// Pulls what the inner transport holds, waits on it for new packets (their rounds may complete
    /// a wait), and pulls them; true when new packets arrived or a held packet is ready to be
    /// drained. It always waits on the inner transport, so a packet that is held, or ready but not
    /// yet drained, never turns a caller's wait loop into a busy loop.
    fn wait_for_packets(&self, timeout: Duration) -> Result<bool, TransportError> {
        self.pull()?;
        let arrived = self.inner.wait_for_packets(timeout)?;
        self.pull()?;
        let st = self.state.lock();
        Ok(arrived || st.held.iter().any(|h| h.0 <= st.released))
    }

    fn peers(&self) -> Result<BTreeSet<u64>, TransportError> {
        self.inner.peers()
    }

    fn wait_for_peers(
        &self,
        n: usize,
        expected: &[u64],
        timeout: Duration,
    ) -> Result<BTreeSet<u64>, TransportError> {
        self.inner.wait_for_peers(n, expected, timeout)
    }

    fn serve_snapshot(&self, provider: SnapshotProvider) -> Result<(), TransportError> {
        self.inner.serve_snapshot(provider)
    }
    fn set_snapshot_version(&self, version: Option<df_fabric::SnapshotVersion>) {
        self.inner.set_snapshot_version(version)
    }

    fn fetch_snapshot(
        &self,
        peer: u64,
        fingerprint: &[u8; 32],
        timeout: Duration,
    ) -> Result<VerifiedSnapshot, TransportError> {
        self.inner.fetch_snapshot(peer, fingerprint, timeout)
    }

    fn set_info_member(&self, name: &str, value: Option<serde_json::Value>) {
        self.inner.set_info_member(name, value)
    }
    fn query_info(
        &self,
        peer: u64,
        timeout: std::time::Duration,
    ) -> Result<serde_json::Value, TransportError> {
        self.inner.query_info(peer, timeout)
    }
    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close()
    }
}
