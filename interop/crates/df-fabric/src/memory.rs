//! An in-process transport: every [`MemoryTransport`] joined to a [`MemoryHub`] receives the packets
//! published by its neighbours (every other member by default). For tests and single-process runs.
//! [`MemoryHub::cut`] partitions two members (neither sees the other live nor gets its packets)
//! until [`MemoryHub::heal`].
//!
//! Snapshots travel through the same chunk codec as on the network (`df_core::snapshot`), so a
//! joiner on a memory hub exercises the verification path of a real join.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use df_core::DEFAULT_MAX_PACKET_SIZE;
use df_core::snapshot::{
    SnapshotAssembler, SnapshotError, SnapshotErrorKind, encode_chunk, fetch_snapshot_chunks,
};
use serde_json::{Value, json};

use crate::transport::{
    SnapshotProvider, Transport, TransportError, TransportStats, VerifiedSnapshot, node_hex,
    peer_timeout_message, peers_satisfied,
};

/// Values per snapshot chunk on a memory hub (small, so that tests cross chunk boundaries).
pub const MEMORY_CHUNK_SIZE: usize = 4096;

#[derive(Default)]
struct Member {
    queue: VecDeque<Vec<u8>>,
    queued_bytes: u64,
    /// Whose packets it receives (`None`: everybody's).
    neighbours: Option<Vec<u64>>,
    provider: Option<SnapshotProvider>,
    /// The info object's DF-ZEN-6 members, captured from the provider at the first query.
    info_base: Option<serde_json::Map<String, Value>>,
    /// The members added by [`Transport::set_info_member`].
    info_extra: serde_json::Map<String, Value>,
    stats: TransportStats,
    snapshot_ids: u64,
}

#[derive(Default)]
struct HubState {
    members: HashMap<u64, Member>,
    /// Cut pairs, the lower id first.
    cuts: HashSet<(u64, u64)>,
}

impl HubState {
    fn cut(&self, a: u64, b: u64) -> bool {
        self.cuts.contains(&(a.min(b), a.max(b)))
    }
}

#[derive(Default)]
struct Hub {
    state: Mutex<HubState>,
    changed: Condvar,
}

/// An in-process broadcast hub (cheap to clone: clones share the hub).
#[derive(Clone, Default)]
pub struct MemoryHub {
    hub: Arc<Hub>,
}

impl std::fmt::Debug for MemoryHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryHub").finish_non_exhaustive()
    }
}

fn lock(h: &Hub) -> MutexGuard<'_, HubState> {
    h.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins node `id` (non-zero, not already a member); `neighbours`: whose packets it receives
    /// (empty: everybody's).
    pub fn join(&self, id: u64, neighbours: &[u64]) -> Result<MemoryTransport, TransportError> {
        if id == 0 {
            return Err(TransportError::Config("node id must be non-zero".into()));
        }
        let mut s = lock(&self.hub);
        if s.members.contains_key(&id) {
            return Err(TransportError::Config(format!(
                "node {} is already on this hub",
                node_hex(id)
            )));
        }
        s.members.insert(
            id,
            Member {
                neighbours: (!neighbours.is_empty()).then(|| neighbours.to_vec()),
                ..Member::default()
            },
        );
        drop(s);
        self.hub.changed.notify_all();
        Ok(MemoryTransport {
            hub: self.clone(),
            id,
            closed: false,
        })
    }

    /// Partitions `a` from `b` (both ways): each stops seeing the other live and its packets are
    /// lost, as over a cut link, until [`MemoryHub::heal`]. Ids need not be joined.
    pub fn cut(&self, a: u64, b: u64) -> Result<(), TransportError> {
        if a == b {
            return Err(TransportError::Config(
                "a node cannot be cut from itself".into(),
            ));
        }
        lock(&self.hub).cuts.insert((a.min(b), a.max(b)));
        self.hub.changed.notify_all();
        Ok(())
    }

    /// Ends the cut between `a` and `b` (nothing lost meanwhile is delivered).
    pub fn heal(&self, a: u64, b: u64) {
        lock(&self.hub).cuts.remove(&(a.min(b), a.max(b)));
        self.hub.changed.notify_all();
    }
}

/// One member of a [`MemoryHub`]; leaves the hub on [`Transport::close`] or drop.
#[derive(Debug)]
pub struct MemoryTransport {
    hub: MemoryHub,
    id: u64,
    closed: bool,
}

impl MemoryTransport {
    fn state(&self) -> Result<MutexGuard<'_, HubState>, TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        Ok(lock(&self.hub.hub))
    }

    fn live(s: &HubState, me: u64) -> BTreeSet<u64> {
        s.members
            .keys()
            .copied()
            .filter(|&p| p != me && !s.cut(p, me))
            .collect()
    }
}

impl Transport for MemoryTransport {
    fn node_id(&self) -> u64 {
        self.id
    }

    fn publish(&self, packet: &[u8]) -> Result<(), TransportError> {
        let mut s = self.state()?;
        let me = self.id;
        let st = &mut *s;
        for (&dst, m) in st.members.iter_mut() {
            if dst == me
                || !m.neighbours.as_ref().is_none_or(|n| n.contains(&me))
                || st.cuts.contains(&(dst.min(me), dst.max(me)))
            {
                continue;
            }
            m.queue.push_back(packet.to_vec());
            m.queued_bytes += packet.len() as u64;
            m.stats.received_packets += 1;
            m.stats.received_bytes += packet.len() as u64;
        }
        if let Some(m) = st.members.get_mut(&me) {
            m.stats.published_packets += 1;
            m.stats.published_bytes += packet.len() as u64;
        }
        drop(s);
        self.hub.hub.changed.notify_all();
        Ok(())
    }

    fn drain(&self, max: usize) -> Result<Vec<Vec<u8>>, TransportError> {
        let mut s = self.state()?;
        let Some(m) = s.members.get_mut(&self.id) else {
            return Err(TransportError::Closed);
        };
        let n = m.queue.len().min(max);
        let out: Vec<Vec<u8>> = m.queue.drain(..n).collect();
        m.queued_bytes -= out.iter().map(|p| p.len() as u64).sum::<u64>();
        Ok(out)
    }

    /// The hub queues everything it delivers (no pre-queue screen): always none.
    fn take_screened(&self) -> Vec<(df_core::ErrorCode, u64)> {
        Vec::new()
    }

    /// Ignored: the hub has no pre-queue checks; the engine still applies DF-RCV-51.
    fn set_members(&self, _members: Option<std::collections::HashSet<u64>>, _live: bool) {}

    fn wait_for_packets(&self, timeout: Duration) -> Result<bool, TransportError> {
        let s = self.state()?;
        let me = self.id;
        let (s, _) = self
            .hub
            .hub
            .changed
            .wait_timeout_while(s, timeout, |s| {
                s.members.get(&me).is_some_and(|m| m.queue.is_empty())
            })
            .unwrap_or_else(|p| p.into_inner());
        Ok(s.members.get(&me).is_some_and(|m| !m.queue.is_empty()))
    }

    fn peers(&self) -> Result<BTreeSet<u64>, TransportError> {
        Ok(Self::live(&*self.state()?, self.id))
    }

    fn wait_for_peers(
        &self,
        n: usize,
        expected: &[u64],
        timeout: Duration,
    ) -> Result<BTreeSet<u64>, TransportError> {
        let s = self.state()?;
        let me = self.id;
        let (s, _) = self
            .hub
            .hub
            .changed
            .wait_timeout_while(s, timeout, |s| {
                !peers_satisfied(n, expected, &Self::live(s, me))
            })
            .unwrap_or_else(|p| p.into_inner());
        let live = Self::live(&s, me);
        if peers_satisfied(n, expected, &live) {
            Ok(live)
        } else {
            Err(TransportError::Timeout(peer_timeout_message(
                n, expected, &live, timeout,
            )))
        }
    }

    fn serve_snapshot(&self, provider: SnapshotProvider) -> Result<(), TransportError> {
        let mut s = self.state()?;
        if let Some(m) = s.members.get_mut(&self.id) {
            m.provider = Some(provider);
            m.info_base = None;
        }
        Ok(())
    }

    /// Ignored: every fetch captures anew (no capture is reused).
    fn set_snapshot_version(&self, _version: Option<crate::transport::SnapshotVersion>) {}

    fn set_info_member(&self, name: &str, value: Option<Value>) {
        let mut s = lock(&self.hub.hub);
        if let Some(m) = s.members.get_mut(&self.id) {
            match value {
                Some(v) => m.info_extra.insert(name.to_owned(), v),
                None => m.info_extra.remove(name),
            };
        }
    }

    /// `peer`'s info object as its info queryable would answer it: the DF-ZEN-6 members from its
    /// snapshot provider (captured once) and the members it set.
    fn query_info(&self, peer: u64, _timeout: Duration) -> Result<Value, TransportError> {
        let (provider, base, extra) = {
            let s = self.state()?;
            let m = s
                .members
                .get(&peer)
                .filter(|_| !s.cut(self.id, peer))
                .ok_or_else(|| {
                    TransportError::Timeout(format!("no info from {}", node_hex(peer)))
                })?;
            let provider = m.provider.clone().ok_or_else(|| {
                TransportError::Network(format!("node {} serves no info", node_hex(peer)))
            })?;
            (provider, m.info_base.clone(), m.info_extra.clone())
        };
        let mut info = match base {
            Some(b) => b,
            None => {
                // outside the hub's lock: the provider takes the peer's engine lock
                let src = provider()?;
                let Value::Object(b) = json!({
                    "node": node_hex(peer),
                    "incarnation": node_hex(src.incarnation()),
                    "fingerprint": hex_lower(src.fingerprint()),
                    "framework": src.framework(),
                    "N": src.total(),
                    "supports": df_core::encodings::supports(),
                }) else {
                    unreachable!("a JSON object literal")
                };
                if let Some(m) = lock(&self.hub.hub).members.get_mut(&peer) {
                    m.info_base = Some(b.clone());
                }
                b
            }
        };
        info.extend(extra);
        Ok(Value::Object(info))
    }

    fn fetch_snapshot(
        &self,
        peer: u64,
        fingerprint: &[u8; 32],
        timeout: Duration,
    ) -> Result<VerifiedSnapshot, TransportError> {
        let deadline = Instant::now() + timeout;
        // Capture on the server (as a queryable would), then move it chunk by chunk through the
        // codec and the joiner's assembler.
        let (provider, id) = {
            let mut s = self.state()?;
            let cut = s.cut(self.id, peer);
            let m = s.members.get_mut(&peer).filter(|_| !cut).ok_or_else(|| {
                SnapshotError::new(
                    SnapshotErrorKind::NoServer,
                    format!("node {} is not on the hub", node_hex(peer)),
                )
            })?;
            let p = m.provider.clone().ok_or_else(|| {
                SnapshotError::new(
                    SnapshotErrorKind::ServerError,
                    format!("node {} serves no snapshot", node_hex(peer)),
                )
            })?;
            m.snapshot_ids += 1;
            (p, m.snapshot_ids)
        };
        let src = provider()?;
        let asm = SnapshotAssembler::new(*fingerprint, MEMORY_CHUNK_SIZE)?.expect_node(peer);
        let request = |chunk: u64, size: usize, _left: Duration| {
            encode_chunk(&src, peer, id, chunk, size, DEFAULT_MAX_PACKET_SIZE)
        };
        Ok(fetch_snapshot_chunks(
            request,
            &asm,
            deadline,
            0,
            Instant::now,
        )?)
    }

    fn stats(&self) -> TransportStats {
        let s = lock(&self.hub.hub);
        s.members
            .get(&self.id)
            .map_or_else(TransportStats::default, |m| {
                let mut st = m.stats;
                st.queued_packets = m.queue.len() as u64;
                st.queued_bytes = m.queued_bytes;
                st
            })
    }

    fn close(&mut self) -> Result<(), TransportError> {
        if !self.closed {
            self.closed = true;
            lock(&self.hub.hub).members.remove(&self.id);
            self.hub.hub.changed.notify_all();
        }
        Ok(())
    }
}

impl Drop for MemoryTransport {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn hex_lower(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
