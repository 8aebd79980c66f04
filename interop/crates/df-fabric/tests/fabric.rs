//! The node loop over the in-memory transport: convergence, relays and the hop histogram, late join
//! from a verified snapshot (finite values, DF-ZEN-12), lifecycle (drop closes the transport), typed
//! store errors, and the stats shape.

use std::sync::Arc;
use std::time::Duration;

use df_core::{Manifest, SyncConfig, TensorSpec};
use df_fabric::{
    Fabric, FabricError, FabricOptions, JoinOptions, MemoryHub, MemoryTransport, SnapshotSource,
    StoreError, Transport, TransportError, VecStore, WeightStore,
};

fn manifest() -> Manifest {
    Manifest::new([
        TensorSpec::new("fc.weight", &[4, 6]),
        TensorSpec::new("fc.bias", &[4]),
    ])
    .unwrap()
}

fn store(v: f32) -> VecStore {
    VecStore::new(manifest(), vec![v; 28]).unwrap()
}

fn cfg() -> SyncConfig {
    SyncConfig {
        ratio: 0.25,
        sync_interval: 2,
        ..SyncConfig::v1_0()
    }
}

type Node = Fabric<VecStore, MemoryTransport>;

fn node(hub: &MemoryHub, id: u64, neighbours: &[u64]) -> Node {
    let options = FabricOptions {
        incarnation: Some(1),
        ..FabricOptions::v1_0()
    };
    Fabric::with_options(
        store(0.0),
        hub.join(id, neighbours).unwrap(),
        cfg(),
        options,
    )
    .unwrap()
}

/// Local "training": each node pushes its own weights by a node-specific amount.
fn train(n: &mut Node, k: usize) {
    let id = n.node_id() as f32;
    for (i, w) in n.store_mut().values_mut().iter_mut().enumerate() {
        *w += 0.01 * id * ((i + k) % 5) as f32;
    }
}

/// Every node settles: quiescent drain rounds until nothing is left to send.
fn drain(nodes: &mut [Node]) {
    for _ in 0..40 {
        for n in nodes.iter_mut() {
            n.sync_now().unwrap();
        }
    }
    for n in nodes.iter_mut() {
        n.poll().unwrap();
    }
}

// REQ: DF-RCV-7
// REQ: DF-RLY-1
#[test]
fn a_line_of_three_nodes_converges_and_counts_hops_from_the_engine() {
    let hub = MemoryHub::new();
    // 1 - 2 - 3: node 1 and node 3 hear each other only through node 2's relays.
    let mut nodes = vec![
        node(&hub, 1, &[2]),
        node(&hub, 2, &[1, 3]),
        node(&hub, 3, &[2]),
    ];
    for k in 0..20 {
        for n in nodes.iter_mut() {
            train(n, k);
            n.step().unwrap();
        }
    }
    drain(&mut nodes);
    let w: Vec<Vec<f32>> = nodes.iter().map(|n| n.store().gather().unwrap()).collect();
    let scale = w.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    for a in &w[1..] {
        let d = a
            .iter()
            .zip(&w[0])
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(d <= 1e-4 * scale, "diff {d} scale {scale}");
    }
    // Node 1 accepted node 3's entries at hop 1 (relayed by node 2), node 2's at hop 0.
    let h = nodes[0].accepted_by_hops();
    assert!(
        h.get(&0).copied().unwrap_or(0) > 0 && h.get(&1).copied().unwrap_or(0) > 0,
        "{h:?}"
    );
    let p = nodes[0].origin_progress();
    assert!(p[&3].1 > 0 && p[&2].1 > 0, "{p:?}");
    // every entry of the direct neighbour accepted once: the count is its last seq; the
    // relayed origin's entries are counted too (at most its last seq)
    let a = nodes[0].accepted_by_origin();
    assert_eq!(a[&2], p[&2].1, "{a:?}");
    assert!(a[&3] > 0 && a[&3] <= p[&3].1, "{a:?}");
    let s = nodes[1].stats();
    for key in [
        "node_id",
        "incarnation",
        "num_params",
        "fingerprint",
        "bootstrapped",
        "steps",
        "syncs",
        "bytes_sent",
        "packets_sent",
        "own_entries_sent",
        "own_values_sent",
        "relay_entries_sent",
        "relay_values_sent",
        "values_received_applied",
        "accepted_by_hops",
        "snapshots_served",
        "receive",
        "transport",
    ] {
        assert!(s.get(key).is_some(), "stats lacks {key}: {s}");
    }
    assert!(s["relay_entries_sent"].as_u64().unwrap() > 0);
    assert_eq!(s["receive"]["packets_rejected"], 0);
    assert_eq!(s["transport"]["dropped_packets"], 0);
}

// REQ: DF-ZEN-5
#[test]
fn a_late_joiner_starts_from_a_live_peers_anchor() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, &[]);
    for k in 0..6 {
        train(&mut a, k);
        a.step().unwrap();
    }
    let anchor = a.engine().unwrap().anchor().to_vec();
    let options = FabricOptions {
        incarnation: Some(9),
        join: Some(JoinOptions {
            timeout: Duration::from_secs(5),
            preferred: vec![1],
            required: true,
        }),
        ..FabricOptions::v1_0()
    };
    let b = Fabric::with_options(store(3.0), hub.join(2, &[]).unwrap(), cfg(), options).unwrap();
    assert_eq!(b.joined_from(), Some(1));
    assert_eq!(b.store().values(), &anchor[..], "active = snapshot");
    assert_eq!(
        b.engine().unwrap().anchor(),
        &anchor[..],
        "anchor = snapshot"
    );
    assert_eq!(b.stats()["bootstrapped"], true);
    // the snapshot, and the info object the joiner reads right after it (its members come from a
    // capture too)
    assert_eq!(a.snapshots_served(), 2);
}

// REQ: DF-ZEN-12
#[test]
fn a_snapshot_with_a_non_finite_value_is_refused() {
    let hub = MemoryHub::new();
    let liar = hub.join(1, &[]).unwrap();
    let fp = manifest().fingerprint();
    let mut values = vec![0.5f32; 28];
    values[7] = f32::NAN;
    liar.serve_snapshot(Arc::new(move || {
        SnapshotSource::new(1, fp, values.clone(), "vec")
    }))
    .unwrap();
    let options = FabricOptions {
        join: Some(JoinOptions {
            timeout: Duration::from_millis(300),
            preferred: vec![],
            required: true,
        }),
        ..FabricOptions::v1_0()
    };
    let e =
        Fabric::with_options(store(0.0), hub.join(2, &[]).unwrap(), cfg(), options).unwrap_err();
    match e {
        FabricError::Join(msg) => assert!(msg.contains("NON_FINITE"), "{msg}"),
        other => panic!("expected a join error, got {other:?}"),
    }
    // The failed start closed (dropped) the joiner's transport: it left the hub.
    assert!(liar.peers().unwrap().is_empty());
}

#[test]
fn join_with_nobody_to_join_is_a_typed_error_within_the_timeout() {
    let hub = MemoryHub::new();
    let options = FabricOptions {
        join: Some(JoinOptions {
            timeout: Duration::from_millis(200),
            preferred: vec![],
            required: true,
        }),
        ..FabricOptions::v1_0()
    };
    let t0 = std::time::Instant::now();
    let e =
        Fabric::with_options(store(0.0), hub.join(2, &[]).unwrap(), cfg(), options).unwrap_err();
    assert!(matches!(e, FabricError::Join(_)), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn dropping_or_closing_a_fabric_closes_its_transport() {
    let hub = MemoryHub::new();
    let watcher = hub.join(9, &[]).unwrap();
    let a = node(&hub, 1, &[]);
    let mut b = node(&hub, 2, &[]);
    assert_eq!(watcher.peers().unwrap(), [1, 2].into());
    drop(a);
    assert_eq!(watcher.peers().unwrap(), [2].into());
    b.close().unwrap();
    b.close().unwrap(); // idempotent
    assert!(watcher.peers().unwrap().is_empty());
    assert!(matches!(b.step(), Err(FabricError::Closed)));
    assert_eq!(b.transport().drain(1), Err(TransportError::Closed));
}

// REQ: DF-RCV-7
#[test]
fn stores_refuse_bad_updates_and_change_nothing() {
    let mut s = store(1.0);
    let before = s.values().to_vec();
    assert_eq!(
        s.apply(&[3, 3], &[1.0, 1.0]),
        Err(StoreError::UnsortedIndices { position: 1 })
    );
    assert_eq!(
        s.apply(&[28], &[1.0]),
        Err(StoreError::IndexOutOfRange { index: 28, n: 28 })
    );
    assert_eq!(
        s.apply(&[1], &[]),
        Err(StoreError::SparseLengthMismatch {
            indices: 1,
            values: 0
        })
    );
    assert_eq!(
        s.load(&[0.0; 3]),
        Err(StoreError::LengthMismatch {
            expected: 28,
            got: 3
        })
    );
    let mut inf = vec![0.0; 28];
    inf[4] = f32::INFINITY;
    assert_eq!(s.load(&inf), Err(StoreError::NonFinite { index: 4 }));
    assert_eq!(s.values(), &before[..]);
    s.apply(&[0, 27], &[0.5, -1.0]).unwrap();
    assert_eq!((s.values()[0], s.values()[27]), (1.5, 0.0));
    assert_eq!(s.gather_indices(&[0, 27]).unwrap(), vec![1.5, 0.0]);
}

#[test]
fn memory_hub_waits_and_reports_who_is_missing() {
    let hub = MemoryHub::new();
    let a = hub.join(1, &[]).unwrap();
    assert!(hub.join(1, &[]).is_err(), "ids are unique on a hub");
    let e = a
        .wait_for_peers(1, &[0x2b], Duration::from_millis(50))
        .unwrap_err();
    match e {
        TransportError::Timeout(m) => assert!(m.contains("000000000000002b"), "{m}"),
        other => panic!("{other:?}"),
    }
    let _b = hub.join(0x2b, &[]).unwrap();
    assert_eq!(
        a.wait_for_peers(1, &[0x2b], Duration::from_secs(1))
            .unwrap(),
        [0x2b].into()
    );
}

#[test]
fn log_levels_parse_like_rust_log() {
    use df_fabric::logging::parse_level;
    use log::LevelFilter;
    assert_eq!(parse_level("debug"), Some(LevelFilter::Debug));
    assert_eq!(
        parse_level("warn,delta_fabric=trace"),
        Some(LevelFilter::Trace)
    );
    assert_eq!(parse_level("zenoh=info"), None);
    assert_eq!(parse_level("nonsense"), None);
}

// REQ: DF-RLY-63, DF-RLY-60
#[test]
fn relay_policy_needed_advertises_at_start_and_delivers_on_a_line() {
    use df_core::config::RelayPolicy;
    use df_core::wire::decode_packet;
    let hub = MemoryHub::new();
    let spy = hub.join(99, &[1]).unwrap(); // hears node 1, publishes nothing
    let needed = SyncConfig {
        relay_policy: RelayPolicy::Needed,
        ..cfg()
    };
    let mk = |id: u64, nb: &[u64]| -> Node {
        let options = FabricOptions {
            incarnation: Some(1),
            ..FabricOptions::v1_0()
        };
        Fabric::with_options(
            store(0.0),
            hub.join(id, nb).unwrap(),
            needed.clone(),
            options,
        )
        .unwrap()
    };
    let mut nodes = vec![mk(1, &[2]), mk(2, &[1, 3]), mk(3, &[2])];
    // the start-up advertisement: no entry, an empty heard set
    let probe = spy.drain(10).unwrap();
    assert_eq!(probe.len(), 1);
    let p = decode_packet(&probe[0], 1 << 20).unwrap();
    assert_eq!((p.sender, p.entries.len(), p.heard), (1, 0, Some(vec![])));
    for k in 0..20 {
        for n in nodes.iter_mut() {
            train(n, k);
            n.step().unwrap();
        }
    }
    drain(&mut nodes);
    let w: Vec<Vec<f32>> = nodes.iter().map(|n| n.store().gather().unwrap()).collect();
    let scale = w.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    for a in &w[1..] {
        let d = a
            .iter()
            .zip(&w[0])
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(d <= 1e-4 * scale, "diff {d} scale {scale}");
    }
    // the ends relay nothing (their only neighbour sent them every entry); the middle relays
    assert_eq!(nodes[0].counters().relay_entries_sent, 0);
    assert_eq!(nodes[2].counters().relay_entries_sent, 0);
    assert!(nodes[1].counters().relay_entries_sent > 0);
    assert_eq!(
        nodes[0]
            .engine()
            .unwrap()
            .counters()
            .drop_count(df_core::Admission::Duplicate),
        0
    );
}

#[test]
fn the_default_options_pace_every_sync_step() {
    // max_lead 0 (the default): a sync step waits while a live peer is a round behind, until the
    // peer has not moved for peer_deadline; max_lead None never waits
    use std::time::Instant;
    let hub = MemoryHub::new();
    let _silent = hub.join(2, &[]).unwrap(); // live, never sends
    let mk = |id: u64, max_lead: Option<u64>| {
        let options = FabricOptions {
            incarnation: Some(1),
            max_lead,
            peer_deadline: Duration::from_millis(300),
            ..FabricOptions::default()
        };
        let config = SyncConfig {
            sync_interval: 1,
            ..SyncConfig::default()
        };
        Fabric::with_options(store(0.0), hub.join(id, &[]).unwrap(), config, options).unwrap()
    };
    assert_eq!(FabricOptions::default().max_lead, Some(0));
    assert_eq!(FabricOptions::v1_0().max_lead, None);
    let mut paced = mk(1, Some(0));
    paced.store_mut().values_mut()[0] = 1.0;
    let t0 = Instant::now();
    paced.step().unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
    drop(paced);
    let mut free = mk(3, None);
    free.store_mut().values_mut()[0] = 1.0;
    let t0 = Instant::now();
    free.step().unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
}
