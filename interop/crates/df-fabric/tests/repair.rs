//! Anti-entropy by gap repair (spec section 7.9) between two real nodes over the in-memory
//! transport: a partition that heals, judged in sync rounds and exact state (no clock).

use df_core::{Manifest, SyncConfig, TensorSpec};
use df_fabric::{Fabric, FabricOptions, MemoryHub, MemoryTransport, Transport, VecStore};

const N: usize = 400;
const INTERVAL: u64 = 5;

type Node = Fabric<VecStore, MemoryTransport>;

/// A deterministic noise source (SplitMix64 to a value in [-0.01, 0.01)).
fn noise(state: &mut u64) -> f32 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02
}

fn spread(nodes: &[Node]) -> f32 {
    let a = nodes[0].engine().unwrap().anchor().to_vec();
    let b = nodes[1].engine().unwrap().anchor().to_vec();
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Two nodes; every packet between them is lost in the steps `cut.0 <= step < cut.1`. Returns the
/// anchor spread after each step, and the nodes.
fn run(cut: (u64, u64), repair: bool, steps: u64) -> (Vec<f32>, Vec<Node>) {
    let hub = MemoryHub::new();
    let manifest = Manifest::new([TensorSpec::new("w", &[N as u64])]).unwrap();
    let cfg = SyncConfig {
        ratio: 0.05,
        sync_interval: INTERVAL as u32,
        ..SyncConfig::v1_0()
    };
    let mut init = 7u64;
    let start: Vec<f32> = (0..N).map(|_| 100.0 * noise(&mut init)).collect();
    let mut nodes: Vec<Node> = (1..=2u64)
        .map(|id| {
            let options = FabricOptions {
                incarnation: Some(1),
                repair,
                ..FabricOptions::v1_0()
            };
            let store = VecStore::new(manifest.clone(), start.clone()).unwrap();
            Fabric::with_options(store, hub.join(id, &[]).unwrap(), cfg.clone(), options).unwrap()
        })
        .collect();
    let mut rng = [1u64, 2u64];
    let mut out = Vec::new();
    for step in 1..=steps {
        let cut_now = cut.0 <= step && step < cut.1;
        for (i, n) in nodes.iter_mut().enumerate() {
            if cut_now {
                n.transport().drain(usize::MAX).unwrap(); // lost on the cut link
            }
            for w in n.store_mut().values_mut() {
                *w += noise(&mut rng[i]);
            }
            n.step().unwrap();
        }
        for _ in 0..3 {
            if cut_now {
                for n in &nodes {
                    n.transport().drain(usize::MAX).unwrap();
                }
            }
            let sent: usize = nodes.iter_mut().map(|n| n.poll().unwrap()).sum();
            if sent == 0 {
                break;
            }
        }
        out.push(spread(&nodes));
    }
    (out, nodes)
}

#[test]
fn partition_heals_with_repair() {
    // REQ: DF-RCV-162, DF-RCV-164, DF-RCV-165
    let heal = 100;
    let judge = (heal + 20 * INTERVAL - 1) as usize; // 20 sync intervals after the heal
    let steps = heal + 20 * INTERVAL + 10;
    let (clean, _) = run((0, 0), true, steps);
    let (broken, _) = run((40, heal), false, steps);
    let (repaired, nodes) = run((40, heal), true, steps);
    let mag = nodes
        .iter()
        .flat_map(|n| n.engine().unwrap().anchor().to_vec())
        .fold(0.0f32, |m, x| m.max(x.abs()));
    // the clean run's spread, or the rounding of the same sum applied in another order
    let bound = (2.0 * clean.iter().copied().fold(0.0, f32::max)).max(8.0 * f32::EPSILON * mag);
    assert!(
        broken[judge] > 1000.0 * bound,
        "{} vs {bound}",
        broken[judge]
    );
    assert!(
        repaired[judge..].iter().all(|&s| s <= bound),
        "{:?} vs {bound}",
        &repaired[judge..]
    );
    let c: Vec<_> = nodes.iter().map(Node::repair_counters).collect();
    assert!(c.iter().map(|x| x.requests_sent).sum::<u64>() > 0);
    assert!(c.iter().map(|x| x.entries_resent).sum::<u64>() > 0);
    assert_eq!(
        c.iter()
            .map(|x| x.seqs_unavailable + x.seqs_given_up + x.requests_refused)
            .sum::<u64>(),
        0
    );
    let stats = nodes[0].stats();
    assert!(stats["repair"]["requests_sent"].as_u64().is_some());
}

/// Trusted snapshots (proposal): the stranger with the lowest node id is refused and counted; the
/// anchor installed is the lowest member's that a quorum confirms.
#[test]
fn quorum_join_refuses_the_lowest_stranger() {
    use df_fabric::{JoinOptions, SnapshotSource};
    use std::sync::Arc;
    use std::time::Duration;
    let hub = MemoryHub::new();
    let manifest = Manifest::new([TensorSpec::new("w", &[16])]).unwrap();
    let fp = manifest.fingerprint();
    let mut seed = 3u64;
    let base: Vec<f32> = (0..16).map(|_| 100.0 * noise(&mut seed)).collect();
    let mut servers = Vec::new();
    for (id, drift) in [(0x10u64, 0.0f32), (0x11, 1e-3), (0x12, -1e-3)] {
        let t = hub.join(id, &[]).unwrap();
        let values: Vec<f32> = base.iter().map(|x| x + drift).collect();
        let src = SnapshotSource::new(7, fp, values, "vec").unwrap();
        t.serve_snapshot(Arc::new(move || Ok(src.clone()))).unwrap();
        servers.push(t);
    }
    let stranger = hub.join(0x1, &[]).unwrap();
    let poison = SnapshotSource::new(7, fp, vec![1e3; 16], "vec").unwrap();
    stranger
        .serve_snapshot(Arc::new(move || Ok(poison.clone())))
        .unwrap();
    let join = |quorum: usize| {
        let options = FabricOptions {
            incarnation: Some(1),
            join: Some(JoinOptions {
                timeout: Duration::from_secs(5),
                preferred: vec![],
                required: true,
            }),
            snapshot_quorum: quorum,
            snapshot_members: Some(vec![0x10, 0x11, 0x12, 0x20]),
            ..FabricOptions::v1_0()
        };
        let store = VecStore::new(manifest.clone(), vec![0.0; 16]).unwrap();
        Fabric::with_options(
            store,
            hub.join(0x20, &[]).unwrap(),
            SyncConfig::v1_0(),
            options,
        )
        .unwrap()
    };
    // the control: without the quorum the first live peer, the stranger, is installed
    let mut plain = join(0);
    assert_eq!(plain.store().values()[0], 1e3);
    plain.close().unwrap();
    drop(plain);
    let f = join(2);
    let want: Vec<f32> = base.clone();
    assert_eq!(f.store().values(), &want[..]);
    let trust = &f.stats()["snapshot_trust"];
    assert_eq!(trust["sources_refused"], 1);
    assert_eq!(trust["sources_queried"], 3);
    assert_eq!(trust["outliers"], 0);
}

/// A [`MemoryTransport`] whose live peers can be hidden (the origin's liveliness gone while its
/// entries still arrive, as over a relay).
struct Masked {
    inner: MemoryTransport,
    live: std::rc::Rc<std::cell::Cell<bool>>,
}

impl Transport for Masked {
    fn node_id(&self) -> u64 {
        self.inner.node_id()
    }
    fn publish(&self, packet: &[u8]) -> Result<(), df_fabric::TransportError> {
        self.inner.publish(packet)
    }
    fn drain(&self, max: usize) -> Result<Vec<Vec<u8>>, df_fabric::TransportError> {
        self.inner.drain(max)
    }
    fn take_screened(&self) -> Vec<(df_core::ErrorCode, u64)> {
        self.inner.take_screened()
    }
    fn set_members(&self, members: Option<std::collections::HashSet<u64>>, live: bool) {
        self.inner.set_members(members, live);
    }
    fn wait_for_packets(
        &self,
        timeout: std::time::Duration,
    ) -> Result<bool, df_fabric::TransportError> {
        self.inner.wait_for_packets(timeout)
    }
    fn peers(&self) -> Result<std::collections::BTreeSet<u64>, df_fabric::TransportError> {
        if self.live.get() {
            self.inner.peers()
        } else {
            Ok(std::collections::BTreeSet::new())
        }
    }
    fn wait_for_peers(
        &self,
        n: usize,
        expected: &[u64],
        timeout: std::time::Duration,
    ) -> Result<std::collections::BTreeSet<u64>, df_fabric::TransportError> {
        self.inner.wait_for_peers(n, expected, timeout)
    }
    fn set_snapshot_version(&self, version: Option<df_fabric::SnapshotVersion>) {
        self.inner.set_snapshot_version(version)
    }
    fn serve_snapshot(
        &self,
        provider: df_fabric::SnapshotProvider,
    ) -> Result<(), df_fabric::TransportError> {
        self.inner.serve_snapshot(provider)
    }
    fn fetch_snapshot(
        &self,
        peer: u64,
        fingerprint: &[u8; 32],
        timeout: std::time::Duration,
    ) -> Result<df_fabric::VerifiedSnapshot, df_fabric::TransportError> {
        self.inner.fetch_snapshot(peer, fingerprint, timeout)
    }
    fn set_info_member(&self, name: &str, value: Option<serde_json::Value>) {
        self.inner.set_info_member(name, value)
    }
    fn query_info(
        &self,
        peer: u64,
        timeout: std::time::Duration,
    ) -> Result<serde_json::Value, df_fabric::TransportError> {
        self.inner.query_info(peer, timeout)
    }
    fn stats(&self) -> df_fabric::TransportStats {
        self.inner.stats()
    }
    fn close(&mut self) -> Result<(), df_fabric::TransportError> {
        self.inner.close()
    }
}

#[test]
fn no_request_to_an_origin_that_is_not_live() {
    // REQ: DF-RCV-230
    // Node A loses 5 of B's entries, then B is not live for A for 40 rounds while its entries
    // still arrive: A sends no request and gives nothing up; once B is live again A asks, and
    // every entry of B is accepted exactly once.
    let hub = MemoryHub::new();
    let manifest = Manifest::new([TensorSpec::new("w", &[100])]).unwrap();
    let cfg = SyncConfig {
        ratio: 0.05,
        sync_interval: 1,
        ..SyncConfig::v1_0()
    };
    let options = || FabricOptions {
        incarnation: Some(1),
        repair: true,
        ..FabricOptions::v1_0()
    };
    let live = std::rc::Rc::new(std::cell::Cell::new(true));
    let store = || VecStore::new(manifest.clone(), vec![0.0; 100]).unwrap();
    let masked = Masked {
        inner: hub.join(0x301, &[]).unwrap(),
        live: live.clone(),
    };
    let mut a = Fabric::with_options(store(), masked, cfg.clone(), options()).unwrap();
    let mut b =
        Fabric::with_options(store(), hub.join(0x302, &[]).unwrap(), cfg, options()).unwrap();
    let mut rng = 5u64;
    for step in 1..=80u64 {
        live.set(!(10..50).contains(&step));
        for w in a.store_mut().values_mut() {
            *w += noise(&mut rng);
        }
        a.step().unwrap();
        if (5..10).contains(&step) {
            a.transport().drain(usize::MAX).unwrap(); // B's entries of these steps are lost
        }
        for w in b.store_mut().values_mut() {
            *w += noise(&mut rng);
        }
        b.step().unwrap();
        for _ in 0..3 {
            if (5..10).contains(&step) {
                a.transport().drain(usize::MAX).unwrap();
            }
            if a.poll().unwrap() + b.poll().unwrap() == 0 {
                break;
            }
        }
        if step == 49 {
            let c = a.repair_counters();
            assert_eq!((c.requests_sent, c.seqs_given_up), (0, 0));
            let last = b.engine().unwrap().next_seq() - 1;
            assert_eq!(a.accepted_by_origin()[&0x302], last - 5);
        }
    }
    let c = a.repair_counters();
    assert!(c.requests_sent > 0);
    assert_eq!(c.seqs_given_up, 0);
    let last = b.engine().unwrap().next_seq() - 1;
    assert_eq!(a.accepted_by_origin()[&0x302], last);
}
