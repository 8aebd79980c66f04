//! Node-loop requirements of the Rust runtime (the mirror of tests/test_requirements_adapters.py):
//! generation cadence and its ordering against the receive step (DF-GEN-10), and that every
//! generated entry is published or the failure surfaces (DF-SEC-5).
//!
//! The store and the transport are wrapped to record, in one shared log, what the fabric does to
//! them: `gather` (the generation reads the active weights; nothing else gathers after start-up),
//! `apply` (a receive step adds the aggregate), `drain` (packets taken) and `publish`.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashSet};
use std::rc::Rc;
use std::time::Duration;

use df_core::config::MIN_MAX_PACKET_SIZE;
use df_core::{Manifest, SyncConfig, TensorSpec, decode_packet};
use df_fabric::{
    Fabric, FabricError, FabricOptions, MemoryHub, MemoryTransport, SnapshotProvider, StoreError,
    Transport, TransportError, TransportStats, VecStore, VerifiedSnapshot, WeightStore,
};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Drain(usize),
    Apply(Vec<u32>),
    Gather,
    Publish,
}

type Log = Rc<RefCell<Vec<Ev>>>;

struct LoggedStore {
    inner: VecStore,
    log: Log,
}

impl WeightStore for LoggedStore {
    fn manifest(&self) -> &Manifest {
        self.inner.manifest()
    }
    fn framework(&self) -> &str {
        "logged"
    }
    fn gather(&self) -> Result<Vec<f32>, StoreError> {
        self.log.borrow_mut().push(Ev::Gather);
        self.inner.gather()
    }
    fn apply(&mut self, indices: &[u32], values: &[f32]) -> Result<(), StoreError> {
        self.log.borrow_mut().push(Ev::Apply(indices.to_vec()));
        self.inner.apply(indices, values)
    }
    fn load(&mut self, flat: &[f32]) -> Result<(), StoreError> {
        self.inner.load(flat)
    }
}

struct LoggedTransport {
    inner: MemoryTransport,
    log: Log,
    fail_publish: Cell<bool>,
}

impl Transport for LoggedTransport {
    fn node_id(&self) -> u64 {
        self.inner.node_id()
    }
    fn publish(&self, packet: &[u8]) -> Result<(), TransportError> {
        if self.fail_publish.get() {
            return Err(TransportError::Timeout("publish timed out".into()));
        }
        self.log.borrow_mut().push(Ev::Publish);
        self.inner.publish(packet)
    }
    fn drain(&self, max: usize) -> Result<Vec<Vec<u8>>, TransportError> {
        let out = self.inner.drain(max)?;
        if !out.is_empty() {
            self.log.borrow_mut().push(Ev::Drain(out.len()));
        }
        Ok(out)
    }
    fn take_screened(&self) -> Vec<(df_core::ErrorCode, u64)> {
        self.inner.take_screened()
    }
    fn set_members(&self, members: Option<std::collections::HashSet<u64>>, live: bool) {
        self.inner.set_members(members, live)
    }
    fn wait_for_packets(&self, timeout: Duration) -> Result<bool, TransportError> {
        self.inner.wait_for_packets(timeout)
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

type Node = Fabric<LoggedStore, LoggedTransport>;

fn logged_node(
    hub: &MemoryHub,
    id: u64,
    neighbours: &[u64],
    n: usize,
    cfg: SyncConfig,
) -> (Node, Log) {
    let log: Log = Rc::default();
    let manifest = Manifest::new([TensorSpec::new("w", &[n as u64])]).unwrap();
    let store = LoggedStore {
        inner: VecStore::new(manifest, vec![0.0; n]).unwrap(),
        log: log.clone(),
    };
    let transport = LoggedTransport {
        inner: hub.join(id, neighbours).unwrap(),
        log: log.clone(),
        fail_publish: Cell::new(false),
    };
    // the store and transport calls of the 1.0 node loop: no residual held aside, no repair
    let options = FabricOptions {
        incarnation: Some(1),
        hold_residual: false,
        repair: false,
        ..FabricOptions::v1_0()
    };
    let fabric = Fabric::with_options(store, transport, cfg, options).unwrap();
    log.borrow_mut().clear(); // the start-up gather (the initial anchor)
    (fabric, log)
}

fn own_seqs(packets: &[Vec<u8>], origin: u64, max: usize) -> Vec<u64> {
    packets
        .iter()
        .flat_map(|p| decode_packet(p, max).unwrap().entries)
        .filter(|e| e.origin == origin)
        .map(|e| e.seq)
        .collect()
}

#[test]
fn generation_runs_once_after_every_sync_interval_th_step_and_at_no_other() {
    for interval in 1..=5u32 {
        let hub = MemoryHub::new();
        let observer = hub.join(9, &[]).unwrap();
        let cfg = SyncConfig {
            sync_interval: interval,
            ratio: 0.5,
            ..SyncConfig::v1_0()
        };
        let (mut a, log) = logged_node(&hub, 1, &[], 10, cfg);
        let mut generated_at = Vec::new();
        let mut published_at = Vec::new();
        for s in 1..=13u64 {
            // one local optimizer update, then the fabric step
            a.store_mut().inner.values_mut()[(s % 10) as usize] += s as f32;
            a.step().unwrap();
            if log.borrow().contains(&Ev::Gather) {
                generated_at.push(s);
            }
            log.borrow_mut().clear();
            // what a peer has received by now (before this node's next step)
            if !own_seqs(&observer.drain(usize::MAX).unwrap(), 1, 1 << 24).is_empty() {
                published_at.push(s);
            }
        }
        let want: Vec<u64> = (1..=13u64)
            .filter(|s| s % u64::from(interval) == 0)
            .collect();
        // REQ: DF-GEN-10 -- the generation (the only gather of the active weights after start-up)
        // runs exactly once after every sync_interval-th step, and at no other step
        assert_eq!(generated_at, want, "sync_interval {interval}");
        // REQ: DF-GEN-10 -- its entries are published within that same step
        assert_eq!(published_at, want, "sync_interval {interval}");
        assert_eq!(a.counters().syncs, want.len() as u64);
        assert_eq!(a.engine().unwrap().next_seq(), want.len() as u64 + 1);
    }
}

#[test]
fn generation_follows_the_receive_step_and_is_published_before_the_next_one() {
    let hub = MemoryHub::new();
    let cfg = SyncConfig {
        sync_interval: 2,
        ratio: 1.0,
        ..SyncConfig::v1_0()
    };
    let (mut a, log) = logged_node(&hub, 1, &[], 16, cfg.clone());
    // b hears nobody (no relays of a's entries back to a)
    let (mut b, _) = logged_node(&hub, 2, &[0x77], 16, cfg);
    let observer = hub.join(9, &[]).unwrap();
    for s in 1..=6usize {
        // b changes the even indices, a the odd ones; b generates on even steps, so its packets
        // are queued at a before a's step
        b.store_mut().inner.values_mut()[2 * s] += 1.0;
        b.step().unwrap();
        a.store_mut().inner.values_mut()[2 * s + 1] += 2.0;
        log.borrow_mut().clear();
        a.step().unwrap();
        let events = log.borrow().clone();
        if s % 2 == 0 {
            let b_indices: Vec<u32> = (1..=s as u32).map(|j| 2 * j).collect();
            let apply = Ev::Apply(b_indices[b_indices.len() - 2..].to_vec());
            // REQ: DF-GEN-10 -- one receive step (drain, the active weights read at the packet's
            // indices for DF-RCV-50, then the aggregate applied), then the generation on the
            // buffers it left, then the publication: never interleaved
            assert_eq!(
                events,
                vec![Ev::Drain(1), Ev::Gather, apply, Ev::Gather, Ev::Publish]
            );
            let got: Vec<Vec<u8>> = observer
                .drain(usize::MAX)
                .unwrap()
                .into_iter()
                .filter(|p| decode_packet(p, 1 << 24).unwrap().sender == 1)
                .collect();
            let own: Vec<_> = got
                .iter()
                .flat_map(|p| decode_packet(p, 1 << 24).unwrap().entries)
                .filter(|e| e.origin == 1)
                .collect();
            assert_eq!(own.len(), 1);
            // REQ: DF-GEN-10 -- the own entry is a's local change only: the received aggregate
            // was applied to the active weights and the anchor alike before the generation
            assert_eq!(own[0].seq, (s / 2) as u64);
            assert_eq!(
                own[0].indices.to_vec(),
                vec![2 * s as u32 - 1, 2 * s as u32 + 1]
            );
            assert_eq!(own[0].values.to_vec(), vec![2.0, 2.0]);
        } else {
            // odd steps: nothing queued, no generation, nothing published
            assert_eq!(events, Vec::<Ev>::new());
            observer.drain(usize::MAX).unwrap();
        }
    }
}

#[test]
fn every_generated_entry_is_published_or_the_error_surfaces() {
    let hub = MemoryHub::new();
    let peer = hub.join(2, &[]).unwrap();
    let max = MIN_MAX_PACKET_SIZE + 400;
    let cfg = SyncConfig {
        sync_interval: 1,
        ratio: 0.5,
        max_packet_size: max,
        ..SyncConfig::v1_0()
    };
    let (mut a, _) = logged_node(&hub, 1, &[], 300, cfg);
    let mut x = 0x2545_f491u32;
    for _ in 0..5 {
        for w in a.store_mut().inner.values_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *w += (x % 2001) as f32 / 1000.0 - 1.0;
        }
        a.step().unwrap();
    }
    let generated = a.engine().unwrap().next_seq() - 1;
    assert!(generated > 5, "entries were split over several packets");
    let packets = peer.drain(usize::MAX).unwrap();
    let published: Vec<u64> = own_seqs(&packets, 1, max);
    let unique: HashSet<u64> = published.iter().copied().collect();
    // REQ: DF-SEC-5 -- no generated entry is silently dropped (DF-GEN-12): every seq the engine
    // handed out arrived at the peer, exactly once
    assert_eq!(published.len(), unique.len());
    assert_eq!(unique, (1..=generated).collect::<HashSet<u64>>());
    assert_eq!(a.counters().own_entries_sent, generated);

    a.transport().fail_publish.set(true);
    for w in a.store_mut().inner.values_mut() {
        *w += 1.0;
    }
    // REQ: DF-SEC-5 -- a publish that cannot complete is reported to the caller, not swallowed
    match a.step() {
        Err(FabricError::Transport(TransportError::Timeout(m))) => {
            assert!(m.contains("publish"), "{m}")
        }
        other => panic!("expected the publish error, got {other:?}"),
    }
}
