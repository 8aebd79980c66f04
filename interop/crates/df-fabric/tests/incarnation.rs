//! The incarnation bound (spec 1.1, DF-PAR-175, DF-RCV-175..177) at the fabric level, over the
//! in-memory hub: a member forges the four incarnations `2^64 - 4 .. 2^64 - 1` of node 1
//! every round. With `max_incarnation_ahead` every real entry of node 1 is applied, before and after
//! its restart; without it node 1 is silenced. The mirror of tests/test_incarnation_bound.py.

use std::collections::HashSet;

use df_core::{
    Manifest, OwnedEntry, OwnedPacket, SyncConfig, TensorSpec, ValueEncoding, encode_packet,
};
use df_fabric::{Fabric, FabricOptions, MemoryHub, MemoryTransport, Transport, VecStore};

type Node = Fabric<VecStore, MemoryTransport>;

const MINUTE: u64 = 60_000_000;

fn manifest() -> Manifest {
    Manifest::new([TensorSpec::new("w", &[64])]).unwrap()
}

/// A member of {1, 2, 3}; its incarnation is the default, microseconds since the epoch (DF-RCV-11).
fn node(hub: &MemoryHub, id: u64, ahead: u64) -> Node {
    node_with(hub, id, ahead, 0)
}

fn node_with(hub: &MemoryHub, id: u64, ahead: u64, grace: u64) -> Node {
    let cfg = SyncConfig {
        ratio: 0.25,
        sync_interval: 1,
        max_incarnation_ahead: ahead,
        incarnation_grace: grace,
        ..SyncConfig::v1_0()
    };
    let options = FabricOptions {
        members: Some(HashSet::from([1, 2, 3])),
        ..FabricOptions::v1_0()
    };
    let store = VecStore::new(manifest(), vec![0.0; 64]).unwrap();
    Fabric::with_options(store, hub.join(id, &[]).unwrap(), cfg, options).unwrap()
}

/// Four forged entries of node 1 with incarnations `2^64 - 4 .. 2^64 - 1`, in a packet of node 3.
fn forged() -> Vec<u8> {
    let mut p = OwnedPacket::new(3, 3, manifest().fingerprint(), ValueEncoding::F32);
    p.entries = (0..4u32)
        .map(|k| OwnedEntry {
            origin: 1,
            incarnation: u64::MAX - u64::from(k),
            seq: 1,
            hops: 0,
            indices: vec![k],
            values: vec![1e-3],
            signature: None,
        })
        .collect();
    encode_packet(&p)
}

fn train(n: &mut Node, round: usize) {
    let k = round as f32 + n.node_id() as f32;
    for (i, w) in n.store_mut().values_mut().iter_mut().enumerate() {
        *w += ((i as f32 + k) * 0.7).sin();
    }
    n.step().unwrap();
}

/// 12 rounds; with `restart` node 1 restarts after round 6 (a new fabric, a new incarnation).
/// Returns the highest seq of node 1's current incarnation accepted by nodes 2 and 3, node 2's
/// `stale_incarnation` and `future_incarnation` drops, and node 1's last seq.
fn run(ahead: u64, restart: bool) -> ([u64; 2], u64, u64, u64) {
    let hub = MemoryHub::new();
    let mut nodes: Vec<Node> = (1..=3).map(|id| node(&hub, id, ahead)).collect();
    for r in 0..12 {
        if restart && r == 6 {
            let old = nodes.remove(0);
            let old_inc = old.engine().unwrap().incarnation();
            drop(old);
            let n = node(&hub, 1, ahead);
            assert!(n.engine().unwrap().incarnation() > old_inc);
            nodes.insert(0, n);
        }
        // member 3 (or anyone publishing on its key) forges node 1's incarnations
        nodes[2].transport().publish(&forged()).unwrap();
        for n in nodes.iter_mut() {
            train(n, r);
        }
    }
    for n in nodes.iter_mut() {
        n.poll().unwrap();
    }
    let inc = nodes[0].engine().unwrap().incarnation();
    let highest = [1, 2].map(|i| {
        nodes[i]
            .engine()
            .unwrap()
            .receiver_state()
            .window_of(1, inc)
            .map_or(0, |w| w.highest())
    });
    let e2 = nodes[1].engine().unwrap();
    let c = e2.counters();
    let stale = c.drop_count(df_core::Admission::StaleIncarnation);
    let future = c.drop_count(df_core::Admission::FutureIncarnation);
    drop(e2);
    let last = nodes[0].engine().unwrap().next_seq() - 1;
    (highest, stale, future, last)
}

#[test]
fn forged_max_incarnations_no_longer_silence_a_member() {
    // REQ: DF-RCV-175, DF-RCV-177
    for restart in [false, true] {
        let (highest, stale, future, last) = run(MINUTE, restart);
        assert!(last >= 6);
        // every real entry of node 1's current incarnation reached nodes 2 and 3
        assert_eq!(highest, [last, last], "restart {restart}");
        assert_eq!(stale, 0);
        assert_eq!(future, 4 * 12); // every forgery, every round, created nothing
        // without the bound (1.0) the same forgeries silence node 1, before and after a restart
        let (highest, stale, future, last) = run(0, restart);
        assert!(last >= 6);
        assert_eq!(highest, [0, 0], "restart {restart}");
        assert!(stale >= last);
        assert_eq!(future, 0);
    }
}

/// Four fresh forged incarnations of node 1, 1 to 4 s ahead of the clock (inside a one-minute bound).
fn forged_inside_bound() -> Vec<u8> {
    let now = df_fabric::fabric::now_us();
    let mut p = OwnedPacket::new(3, 3, manifest().fingerprint(), ValueEncoding::F32);
    p.entries = (1..=4u32)
        .map(|k| OwnedEntry {
            origin: 1,
            incarnation: now + u64::from(k) * 1_000_000,
            seq: 1,
            hops: 0,
            indices: vec![k],
            values: vec![1e-3],
            signature: None,
        })
        .collect();
    encode_packet(&p)
}

/// From round 2 on, member 3 forges four fresh incarnations of node 1 inside the clock bound every
/// round; returns what `run` returns, with node 2's `live_incarnation` drops instead of `future`.
fn run_live(grace: u64) -> ([u64; 2], u64, u64, u64) {
    let hub = MemoryHub::new();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|id| node_with(&hub, id, MINUTE, grace))
        .collect();
    for r in 0..12 {
        if r >= 2 {
            nodes[2]
                .transport()
                .publish(&forged_inside_bound())
                .unwrap();
        }
        for n in nodes.iter_mut() {
            train(n, r);
        }
    }
    for n in nodes.iter_mut() {
        n.poll().unwrap();
    }
    let inc = nodes[0].engine().unwrap().incarnation();
    let highest = [1, 2].map(|i| {
        nodes[i]
            .engine()
            .unwrap()
            .receiver_state()
            .window_of(1, inc)
            .map_or(0, |w| w.highest())
    });
    let e2 = nodes[1].engine().unwrap();
    let stale = e2
        .counters()
        .drop_count(df_core::Admission::StaleIncarnation);
    let live = e2
        .counters()
        .drop_count(df_core::Admission::LiveIncarnation);
    drop(e2);
    let last = nodes[0].engine().unwrap().next_seq() - 1;
    (highest, stale, live, last)
}

#[test]
fn forgeries_inside_the_bound_do_not_evict_a_live_member() {
    // REQ: DF-RCV-178
    // a grace of one minute, far above the round time: node 1's incarnation stays live
    let (highest, stale, live, last) = run_live(MINUTE);
    assert!(last >= 6);
    assert_eq!(highest, [last, last]);
    assert_eq!(stale, 0);
    assert!(live >= 10 * 4 - 3, "{live}");
    // the clock bound alone admits these forgeries, and they silence node 1
    let (highest, stale, live, last) = run_live(0);
    assert!(highest[0] < last);
    assert!(stale > 0);
    assert_eq!(live, 0);
}
