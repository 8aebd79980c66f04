//! `Fabric::finish`: one call that sends the node's last progress, waits until every live member
//! peer's last entry (its info's `finish` member, DF-ZEN-6) is applied and every live member is done,
//! and returns the shared model; a timeout names the peers still waited for.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use df_core::{Manifest, SyncConfig, TensorSpec};
use df_fabric::{
    Fabric, FabricError, FabricOptions, MemoryHub, MemoryTransport, Transport, VecStore,
};

const N: usize = 64;

type Node = Fabric<VecStore, MemoryTransport>;

fn store() -> VecStore {
    let m = Manifest::new([TensorSpec::new("w", &[N as u64])]).unwrap();
    VecStore::new(m, vec![0.0; N]).unwrap()
}

fn node(hub: &MemoryHub, id: u64, config: SyncConfig) -> Node {
    paced_node(hub, id, config, None)
}

/// A node with the recommended options but `max_lead` (`None` for the nodes one thread drives).
fn paced_node(hub: &MemoryHub, id: u64, config: SyncConfig, max_lead: Option<u64>) -> Node {
    let options = FabricOptions {
        incarnation: Some(id),
        max_lead,
        // a node that stopped early (finishing) holds the others' pacing back this long
        peer_deadline: Duration::from_millis(300),
        ..FabricOptions::default()
    };
    Fabric::with_options(store(), hub.join(id, &[]).unwrap(), config, options).unwrap()
}

/// A deterministic local "training step": every weight moves a little, differently per node.
fn train(f: &mut Node, id: u64, step: u64) {
    for (j, w) in f.store_mut().values_mut().iter_mut().enumerate() {
        let x = ((id * 7919 + step * 104_729 + j as u64 * 31) % 1000) as f32 / 1000.0 - 0.5;
        *w += 0.01 * x;
    }
}

/// DF-NUM-1: `max |a - b| <= 5e-2 * max(max |a|, max |b|)`.
fn agree(a: &[f32], b: &[f32]) -> bool {
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let scale = a.iter().chain(b).map(|x| x.abs()).fold(0.0, f32::max);
    diff <= 5e-2 * scale
}

fn three_nodes_finish(config: SyncConfig, steps: &[u64; 3]) -> Vec<(Vec<f32>, Vec<f32>, u64)> {
    let hub = MemoryHub::new();
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = (1..=3u64)
        .map(|id| {
            let hub = hub.clone();
            let barrier = Arc::clone(&barrier);
            let config = config.clone();
            let steps = steps[(id - 1) as usize];
            thread::spawn(move || {
                // one thread per node: the default pacing barrier per sync
                let mut f = paced_node(&hub, id, config, FabricOptions::default().max_lead);
                f.transport()
                    .wait_for_peers(2, &[], Duration::from_secs(10))
                    .unwrap();
                barrier.wait();
                for s in 0..steps {
                    train(&mut f, id, s);
                    f.step().unwrap();
                }
                let shared = f.finish(Duration::from_secs(20)).unwrap();
                let store = f.store().values().to_vec();
                let average = f.stats()["average_over"].as_u64().unwrap();
                // stay until every node returned: a node that finished still answers info
                barrier.wait();
                (shared, store, average)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn three_nodes_in_threads_finish_and_agree() {
    // the recommended profile (Q8, PACKED, NEEDED, AUTO averaging, residual held, repair on);
    // the nodes stop after different numbers of steps
    let out = three_nodes_finish(SyncConfig::default(), &[200, 140, 170]);
    for (shared, store, average) in &out {
        assert_eq!(shared, store, "the store holds the shared model");
        assert_eq!(*average, 3, "AUTO: averaged over the 3 live nodes");
        assert!(shared.iter().any(|&x| x != 0.0));
    }
    for i in 0..3 {
        for j in 0..i {
            assert!(agree(&out[i].0, &out[j].0), "nodes {i} and {j} disagree");
        }
    }
}

#[test]
fn finish_agrees_with_the_1_0_preset() {
    let config = SyncConfig {
        sync_interval: 7,
        ..SyncConfig::v1_0()
    };
    let out = three_nodes_finish(config, &[50, 63, 20]);
    for (shared, store, average) in &out {
        assert_eq!(shared, store);
        assert_eq!(*average, 1);
    }
    // F32 and every entry delivered: the anchors agree to rounding
    for i in 0..3 {
        for j in 0..i {
            assert!(agree(&out[i].0, &out[j].0), "nodes {i} and {j} disagree");
        }
    }
}

#[test]
fn a_peer_still_training_makes_finish_time_out_naming_it() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, SyncConfig::default());
    let mut b = node(&hub, 2, SyncConfig::default());
    for s in 0..40 {
        train(&mut a, 1, s);
        a.step().unwrap();
        train(&mut b, 2, s);
        b.step().unwrap();
    }
    let t0 = Instant::now();
    let err = a.finish(Duration::from_millis(400)).unwrap_err();
    assert!(t0.elapsed() >= Duration::from_millis(400));
    match &err {
        FabricError::FinishTimeout { timeout, missing } => {
            assert_eq!(*timeout, Duration::from_millis(400));
            assert_eq!(
                missing,
                &vec![(2, "still training (not finishing)".to_owned())]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "finish: not done within 0.4s, waiting for 0000000000000002: still training (not finishing)"
    );
    // b finishes now: it has a's last entry, and a is done waiting for nobody but b
    b.poll().unwrap();
    let hb = thread::spawn(move || {
        let r = b.finish(Duration::from_secs(10));
        (r, b)
    });
    let ra = a.finish(Duration::from_secs(10)).unwrap();
    let (rb, _b) = hb.join().unwrap();
    assert!(agree(&ra, &rb.unwrap()));
}

#[test]
fn a_peer_that_went_away_is_not_waited_for() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, SyncConfig::default());
    let mut b = node(&hub, 2, SyncConfig::default());
    for s in 0..30 {
        train(&mut a, 1, s);
        a.step().unwrap();
        train(&mut b, 2, s);
        b.step().unwrap();
    }
    b.close().unwrap();
    let t0 = Instant::now();
    let shared = a.finish(Duration::from_secs(5)).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(shared, a.store().values());
    assert_eq!(shared, a.engine().unwrap().anchor());
}

#[test]
fn finish_alone_returns_the_anchor_at_once() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, SyncConfig::default());
    for s in 0..25 {
        train(&mut a, 1, s);
        a.step().unwrap();
    }
    let shared = a.finish(Duration::from_secs(1)).unwrap();
    assert_eq!(shared, a.store().values());
    assert_eq!(a.residual(), vec![0.0; N]);
    // the info object carries the finish member, done
    let hub_peer = hub.join(9, &[]).unwrap();

    let info = hub_peer.query_info(1, Duration::from_secs(1)).unwrap();
    assert_eq!(info["node"], "0000000000000001");
    assert_eq!(info["finish"]["done"], true);
    assert_eq!(info["finish"]["incarnation"], "0000000000000001");
    assert!(info["finish"]["seq"].as_u64().unwrap() >= 1);
}
