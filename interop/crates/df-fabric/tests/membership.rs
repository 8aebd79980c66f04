//! Membership from liveliness, the pre-queue screen and pacing on live members
//! (DF-ZEN-150, -154, -156), over the in-memory hub (its live set is the binding's
//! liveliness). The mirror of tests/test_membership_floods.py.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use df_core::{
    Admission, DecodeError, ErrorCode, Manifest, OwnedEntry, OwnedPacket, SyncConfig, TensorSpec,
    ValueEncoding, decode_packet, encode_packet,
};
use df_fabric::{Fabric, FabricOptions, MemoryHub, MemoryTransport, Transport, VecStore};

type Node = Fabric<VecStore, MemoryTransport>;

fn manifest() -> Manifest {
    Manifest::new([TensorSpec::new("w", &[64])]).unwrap()
}

fn node(hub: &MemoryHub, id: u64, incarnation: u64, live_members: bool, grace: Duration) -> Node {
    let cfg = SyncConfig {
        ratio: 0.25,
        sync_interval: 1,
        ..SyncConfig::v1_0()
    };
    let options = FabricOptions {
        incarnation: Some(incarnation),
        live_members,
        member_grace: grace,
        ..FabricOptions::v1_0()
    };
    let store = VecStore::new(manifest(), vec![0.0; 64]).unwrap();
    Fabric::with_options(store, hub.join(id, &[]).unwrap(), cfg, options).unwrap()
}

/// One local step (every weight moves), then the fabric's step.
fn train(n: &mut Node) {
    let k = n.counters().steps as f32 + n.node_id() as f32;
    for (i, w) in n.store_mut().values_mut().iter_mut().enumerate() {
        *w += ((i as f32 + k) * 0.7).sin();
    }
    n.step().unwrap();
}

fn forged(origin: u64) -> Vec<u8> {
    let mut p = OwnedPacket::new(0xBAD, 1, manifest().fingerprint(), ValueEncoding::F32);
    p.entries = vec![OwnedEntry {
        origin,
        incarnation: 1,
        seq: 1,
        hops: 0,
        indices: vec![1],
        values: vec![0.5],
        signature: None,
    }];
    encode_packet(&p)
}

#[test]
fn live_membership_tracks_tokens_with_a_grace_and_a_returning_member() {
    // REQ: DF-ZEN-150
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 101, true, Duration::ZERO);
    let mut b = node(&hub, 2, 102, false, Duration::ZERO);
    let stranger = hub.join(0x5EED, &[]).unwrap();
    train(&mut a);
    assert_eq!(a.members().cloned(), Some(HashSet::from([2u64, 0x5EED])));
    for k in 1..50 {
        stranger.publish(&forged(0x1000 + k)).unwrap();
    }
    train(&mut b);
    train(&mut a);
    // 49 from the stranger and the same 49 relayed by b (which has no membership)
    assert_eq!(
        a.engine()
            .unwrap()
            .counters()
            .drop_count(Admission::NotMember),
        98
    );
    assert_eq!(
        a.accepted_by_origin().keys().copied().collect::<Vec<_>>(),
        vec![2]
    );
    b.close().unwrap();
    train(&mut a);
    std::thread::sleep(Duration::from_millis(10));
    train(&mut a);
    assert!(!a.members().unwrap().contains(&2));
    drop(b);
    let mut b2 = node(&hub, 2, 500, false, Duration::ZERO);
    train(&mut a);
    train(&mut b2);
    train(&mut a);
    assert!(a.members().unwrap().contains(&2));
    assert_eq!(a.origin_progress()[&2].0, 500);
    assert_eq!(
        a.engine()
            .unwrap()
            .counters()
            .drop_count(Admission::NotMember),
        98
    );
}

#[test]
fn fake_ids_dead_and_restarted_peers_do_not_hold_pacing() {
    // REQ: DF-ZEN-156
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 101, false, Duration::ZERO);
    let mut b = node(&hub, 2, 102, false, Duration::ZERO);
    let long = Duration::from_secs(60);
    let short = Duration::from_millis(200);
    for _ in 0..20 {
        train(&mut a);
    }
    b.poll().unwrap();
    // b is live, silent and 20 rounds behind: a waits for it (up to the call's timeout)
    assert!(a.pace(2, long, short).unwrap() >= short);
    // ... but only until b's deadline, counted from b's last progress, not per call
    std::thread::sleep(Duration::from_millis(20));
    assert!(a.pace(2, Duration::from_millis(5), long).unwrap() < long);
    // the 176-byte packet's forged origin holds no token: it never holds a back
    let stranger = hub.join(0x5EED, &[]).unwrap();
    stranger.publish(&forged(0xFA4E)).unwrap();
    drop(stranger);
    for _ in 0..20 {
        train(&mut b);
    }
    a.poll().unwrap();
    assert!(a.origin_progress().contains_key(&0xFA4E));
    assert!(a.pace(2, long, long).unwrap() < long); // b caught up; 0xfa4e is ignored
    for _ in 0..25 {
        train(&mut a);
    }
    assert!(a.pace(2, long, short).unwrap() >= short); // b is 25 rounds behind and moving
    // b restarts (a new incarnation, seq 1): its lag counts from its rejoin
    b.close().unwrap();
    drop(b);
    assert!(a.pace(2, long, long).unwrap() < long); // a dead peer is not waited for
    let mut b2 = node(&hub, 2, 999, false, Duration::ZERO);
    train(&mut b2);
    a.poll().unwrap();
    assert_eq!(a.origin_progress()[&2], (999, 1));
    assert!(a.pace(2, long, long).unwrap() < long);
    for _ in 0..5 {
        train(&mut a);
    }
    assert!(a.pace(2, long, short).unwrap() >= short); // 5 rounds ahead since its rejoin
}

#[test]
fn screen_agrees_with_the_decoder() {
    // REQ: DF-ZEN-154
    let good = encode_packet(&OwnedPacket::new(
        1,
        1,
        manifest().fingerprint(),
        ValueEncoding::F32,
    ));
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        b"DFP1".to_vec(),
        good[..7].to_vec(),
        good.clone(),
        vec![0; 5000],
    ];
    let mut x: u64 = 5;
    for i in 0..300usize {
        let len = i % 64;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) as u8
            })
            .collect();
        let mut framed = good[..4].to_vec();
        framed.extend_from_slice(b"DFP1");
        framed.extend_from_slice(&bytes);
        cases.push(bytes);
        cases.push(framed);
    }
    for buf in &cases {
        let decoded: Option<ErrorCode> =
            decode_packet(buf, 4096).err().map(|e: DecodeError| e.code);
        match df_core::wire::screen(buf, 4096) {
            Some(code) => assert_eq!(decoded, Some(code)),
            None => assert!(!matches!(
                decoded,
                Some(ErrorCode::Oversize | ErrorCode::BadIdentifier)
            )),
        }
    }
}

#[test]
fn a_peer_back_from_a_partition_is_behind_by_its_lag_not_by_its_stale_progress() {
    // REQ: DF-ZEN-156
    // The lag counts from the round at which the peer's current incarnation was first heard; a
    // partition does not change that (the mirror of the Python test of the same name).
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 101, false, Duration::ZERO);
    let mut b = node(&hub, 2, 102, false, Duration::ZERO);
    let long = Duration::from_secs(60);
    let short = Duration::from_millis(200);
    for _ in 0..10 {
        train(&mut a);
        train(&mut b);
    }
    a.poll().unwrap();
    assert!(a.pace(2, long, long).unwrap() < long);
    hub.cut(1, 2).unwrap();
    assert!(hub.cut(1, 1).is_err());
    for _ in 0..30 {
        train(&mut a);
        train(&mut b);
        assert!(a.pace(2, long, long).unwrap() < long); // b is not live: a paces on nobody
    }
    assert!(!a.transport().peers().unwrap().contains(&2));
    hub.heal(1, 2);
    // b is live again and a has not heard it since round 10: a waits for b's news
    assert_eq!(a.origin_progress()[&2], (102, 10));
    assert_eq!(a.pace_blockers(2, long).unwrap(), BTreeSet::from([2]));
    assert!(a.pace(2, long, short).unwrap() >= short);
    train(&mut b); // round 41 of b
    a.poll().unwrap();
    assert_eq!(a.origin_progress()[&2], (102, 41));
    assert!(a.pace(2, long, long).unwrap() < long);
    for _ in 0..3 {
        train(&mut a);
    }
    assert!(a.pace(2, long, long).unwrap() < long); // 2 rounds ahead: the lead allowed
    train(&mut a);
    assert!(a.pace(2, long, short).unwrap() >= short); // 3 rounds ahead: b holds a back
}
