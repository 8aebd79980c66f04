//! `Fabric::finish`: one call that sends the node's last progress, waits until every live member
//! peer's last entry (its info's `finish` member, DF-ZEN-6) is applied and every live member is done,
//! and returns the shared model; a timeout names the peers still waited for.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use df_core::{Manifest, SyncConfig, TensorSpec};
use df_fabric::{
    Fabric, FabricError, FabricOptions, JoinOptions, MemoryHub, MemoryTransport, Transport,
    VecStore,
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
        FabricError::FinishTimeout {
            timeout,
            missing,
            absent,
        } => {
            assert_eq!(*timeout, Duration::from_millis(400));
            assert_eq!(*absent, 0);
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

#[test]
fn the_info_object_carries_seq_and_the_finish_member_lists_have() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, SyncConfig::default());
    let mut b = node(&hub, 2, SyncConfig::default());
    let mut probe = hub.join(9, &[]).unwrap();
    // seq is served from the start, 0 before any entry
    assert_eq!(
        probe.query_info(1, Duration::from_secs(1)).unwrap()["seq"],
        0
    );
    for s in 0..40 {
        train(&mut a, 1, s);
        a.step().unwrap();
        train(&mut b, 2, s);
        b.step().unwrap();
    }
    let info = probe.query_info(1, Duration::from_secs(1)).unwrap();
    let sent = a.engine().unwrap().next_seq() - 1;
    assert!(sent >= 1);
    assert_eq!(
        info["seq"], sent,
        "the highest own seq sent, while training"
    );
    assert!(info.get("finish").is_none());
    probe.close().unwrap(); // a live peer that serves no info would be waited for
    b.poll().unwrap();
    let hb = thread::spawn(move || {
        let r = b.finish(Duration::from_secs(10)).unwrap();
        (r, b)
    });
    let ra = a.finish(Duration::from_secs(10)).unwrap();
    let (rb, b) = hb.join().unwrap();
    assert!(agree(&ra, &rb));
    let probe = hub.join(9, &[]).unwrap();
    for (id, other) in [(1u64, "0000000000000002"), (2, "0000000000000001")] {
        let info = probe.query_info(id, Duration::from_secs(1)).unwrap();
        let fin = &info["finish"];
        assert_eq!(fin["done"], true);
        assert_eq!(fin["have"], serde_json::json!([other]), "node {id}: {info}");
        assert_eq!(info["seq"], fin["seq"], "node {id}: {info}");
    }
    drop(b);
}

#[test]
fn finish_waits_for_the_world_size_and_names_the_absent_nodes() {
    let hub = MemoryHub::new();
    let options = |id| FabricOptions {
        incarnation: Some(id),
        max_lead: None,
        world_size: Some(3),
        ..FabricOptions::default()
    };
    let mk = |id| {
        Fabric::with_options(
            store(),
            hub.join(id, &[]).unwrap(),
            SyncConfig::default(),
            options(id),
        )
        .unwrap()
    };
    let mut a = mk(1);
    let mut b = mk(2);
    for s in 0..3 {
        train(&mut a, 1, s);
        a.sync_now().unwrap();
        train(&mut b, 2, s);
        b.sync_now().unwrap();
    }
    b.poll().unwrap();
    let hb = thread::spawn(move || {
        let r = b.finish(Duration::from_millis(600));
        (r, b)
    });
    let err = a.finish(Duration::from_millis(600)).unwrap_err();
    let (rb, b) = hb.join().unwrap();
    match &err {
        FabricError::FinishTimeout {
            missing, absent, ..
        } => {
            assert!(missing.is_empty(), "{missing:?}");
            assert_eq!(*absent, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "finish: not done within 0.6s, waiting for 1 more node(s) of the run's world size, not \
         live"
    );
    assert!(matches!(
        rb,
        Err(FabricError::FinishTimeout { absent: 1, .. })
    ));
    // the third node of the run arrives (it sent nothing): all three finish
    let c = mk(3);
    let handles: Vec<_> = [a, b, c]
        .into_iter()
        .map(|mut f| thread::spawn(move || (f.finish(Duration::from_secs(10)), f)))
        .collect();
    let out: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (r, _) in &out {
        assert!(r.is_ok(), "{r:?}");
    }
}

#[test]
fn a_node_that_joined_counts_the_entries_its_snapshot_holds_as_applied() {
    let hub = MemoryHub::new();
    let options = |id| FabricOptions {
        incarnation: Some(id),
        max_lead: None,
        world_size: Some(2),
        ..FabricOptions::default()
    };
    let mut a = Fabric::with_options(
        store(),
        hub.join(1, &[]).unwrap(),
        SyncConfig::default(),
        options(1),
    )
    .unwrap();
    for s in 0..60 {
        train(&mut a, 1, s);
        a.sync_now().unwrap();
    }
    // a finishes first: its last entry goes out to nobody, and it waits for the run's other node
    let ha = thread::spawn(move || (a.finish(Duration::from_secs(10)), a));
    let probe = hub.join(9, &[]).unwrap();
    let t0 = Instant::now();
    let last = loop {
        let info = probe.query_info(1, Duration::from_secs(1)).unwrap();
        if let Some(seq) = info["finish"]["seq"].as_u64() {
            break seq;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "a does not finish");
        thread::sleep(Duration::from_millis(10));
    };
    drop(probe);
    // b joins from a's snapshot: a's entries up to its last one reached it inside the anchor,
    // and no packet will bring them
    let join = FabricOptions {
        join: Some(JoinOptions::default()),
        ..options(2)
    };
    let mut b = Fabric::with_options(
        store(),
        hub.join(2, &[]).unwrap(),
        SyncConfig::default(),
        join,
    )
    .unwrap();
    assert_eq!(b.joined_from(), Some(1));
    assert_eq!(b.snapshot_floor().get(&1), Some(&(1, last)));
    assert_eq!(
        b.origin_progress().get(&1),
        None,
        "no packet of a reached b"
    );
    let rb = b.finish(Duration::from_secs(10)).unwrap();
    let (ra, _a) = ha.join().unwrap();
    let ra = ra.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(8));
    assert!(agree(&ra, &rb));
}

#[test]
fn the_first_sync_waits_for_the_runs_other_nodes_to_start() {
    let hub = MemoryHub::new();
    let options = |id| FabricOptions {
        incarnation: Some(id),
        max_lead: None,
        world_size: Some(2),
        ..FabricOptions::default()
    };
    let config = SyncConfig {
        sync_interval: 1,
        ..SyncConfig::default()
    };
    let mut a = Fabric::with_options(
        store(),
        hub.join(1, &[]).unwrap(),
        config.clone(),
        options(1),
    )
    .unwrap();
    let hub2 = hub.clone();
    let late = thread::spawn(move || {
        thread::sleep(Duration::from_millis(500));
        Fabric::with_options(store(), hub2.join(2, &[]).unwrap(), config, options(2)).unwrap()
    });
    let t0 = Instant::now();
    train(&mut a, 1, 0);
    a.step().unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "the first sync went out before the other node started"
    );
    assert_eq!(a.counters().syncs, 1);
    let b = late.join().unwrap();
    // later syncs do not wait
    let t1 = Instant::now();
    train(&mut a, 1, 1);
    a.step().unwrap();
    assert!(t1.elapsed() < Duration::from_millis(400));
    drop(b);
}

#[test]
fn a_node_restarted_from_a_live_peer_finishes_with_it() {
    // a run of 2 (the launcher's world size): node 2 crashes after 10 steps; node 1 trains on,
    // finishes and waits for the run's other node; node 2 comes back as a new incarnation from
    // node 1's snapshot (which holds node 1's last entry), trains and finishes: one shared model
    let hub = MemoryHub::new();
    let options = |inc| FabricOptions {
        incarnation: Some(inc),
        world_size: Some(2),
        peer_deadline: Duration::from_millis(300),
        ..FabricOptions::default()
    };
    let config = SyncConfig {
        sync_interval: 2,
        ..SyncConfig::default()
    };
    let mut first = Fabric::with_options(
        store(),
        hub.join(2, &[]).unwrap(),
        config.clone(),
        options(2),
    )
    .unwrap();
    let (hub1, config1) = (hub.clone(), config.clone());
    let a = thread::spawn(move || {
        let mut f =
            Fabric::with_options(store(), hub1.join(1, &[]).unwrap(), config1, options(1)).unwrap();
        for s in 0..40 {
            train(&mut f, 1, s);
            f.step().unwrap();
        }
        f.finish(Duration::from_secs(20)).unwrap()
    });
    for s in 0..10 {
        train(&mut first, 2, s);
        first.step().unwrap();
    }
    drop(first); // a crash: its transport goes, no finish
    let probe = hub.join(9, &[]).unwrap();
    let t0 = Instant::now();
    while probe
        .query_info(1, Duration::from_secs(1))
        .map_or(true, |i| i.get("finish").is_none())
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "node 1 does not finish"
        );
        thread::sleep(Duration::from_millis(10));
    }
    drop(probe);
    let restarted = FabricOptions {
        join: Some(JoinOptions::default()),
        ..options(3)
    };
    let mut b =
        Fabric::with_options(store(), hub.join(2, &[]).unwrap(), config, restarted).unwrap();
    assert_eq!(b.joined_from(), Some(1));
    assert!(b.snapshot_floor().contains_key(&1));
    for s in 10..40 {
        train(&mut b, 2, s);
        b.step().unwrap();
    }
    let rb = b.finish(Duration::from_secs(20)).unwrap();
    let ra = a.join().unwrap();
    assert!(agree(&ra, &rb));
}
