//! Hostile inputs on a live cluster, over the in-memory transport: deterministic, no
//! timing. Three nodes train; a stranger on the same medium publishes a packet of two 3e38 entries
//! at one index (their sum overflows) every round, or one packet of 4,096 forged origins. Each
//! attacked run is compared with the clean run.

use std::collections::HashSet;

use df_core::{
    Admission, ErrorCode, Manifest, OwnedEntry, OwnedPacket, SyncConfig, TensorSpec, ValueEncoding,
    encode_packet,
};
use df_fabric::{Fabric, FabricOptions, MemoryHub, MemoryTransport, Transport, VecStore};

const STRANGER: u64 = 0x5EED_0000_0000_0000;
const NODES: [u64; 3] = [1, 2, 3];

type Node = Fabric<VecStore, MemoryTransport>;

fn manifest() -> Manifest {
    Manifest::new([TensorSpec::new("w", &[64])]).unwrap()
}

fn entry(origin: u64, seq: u64, idx: &[u32], vals: &[f32]) -> OwnedEntry {
    OwnedEntry {
        origin,
        incarnation: 1,
        seq,
        hops: 0,
        indices: idx.to_vec(),
        values: vals.to_vec(),
        signature: None,
    }
}

fn packet(entries: Vec<OwnedEntry>) -> Vec<u8> {
    let mut p = OwnedPacket::new(STRANGER, 1, manifest().fingerprint(), ValueEncoding::F32);
    p.entries = entries;
    encode_packet(&p)
}

/// `rounds` of: the stranger publishes `attack(round)`, then every node trains and steps.
fn run(
    rounds: u64,
    attack: &dyn Fn(u64) -> Vec<Vec<u8>>,
    members: Option<&[u64]>,
) -> (Vec<Vec<f32>>, Vec<Node>) {
    run_with(rounds, attack, members, &|_| {})
}

/// [`run`] with `setup` applied to the nodes before the first round.
fn run_with(
    rounds: u64,
    attack: &dyn Fn(u64) -> Vec<Vec<u8>>,
    members: Option<&[u64]>,
    setup: &dyn Fn(&[Node]),
) -> (Vec<Vec<f32>>, Vec<Node>) {
    let hub = MemoryHub::new();
    let cfg = SyncConfig {
        ratio: 0.25,
        sync_interval: 1,
        ..SyncConfig::v1_0()
    };
    let mut nodes: Vec<Node> = NODES
        .iter()
        .map(|&id| {
            let options = FabricOptions {
                incarnation: Some(100 + id),
                ..FabricOptions::v1_0()
            };
            let store = VecStore::new(manifest(), vec![0.0; 64]).unwrap();
            let f = Fabric::with_options(store, hub.join(id, &[]).unwrap(), cfg.clone(), options)
                .unwrap();
            let mut f = f;
            f.set_members(members.map(|m| m.iter().copied().collect::<HashSet<u64>>()))
                .unwrap();
            f
        })
        .collect();
    setup(&nodes);
    let stranger = hub.join(STRANGER, &[]).unwrap();
    for r in 0..rounds {
        for p in attack(r) {
            stranger.publish(&p).unwrap();
        }
        for n in nodes.iter_mut() {
            let id = n.node_id() as f32;
            for (i, w) in n.store_mut().values_mut().iter_mut().enumerate() {
                *w -= 0.1 * (*w - id * ((i % 7) as f32 - 3.0)); // towards the node's own target
            }
            n.step().unwrap();
        }
    }
    for n in nodes.iter_mut() {
        n.poll().unwrap();
    }
    let w = nodes.iter().map(|n| n.store().values().to_vec()).collect();
    (w, nodes)
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

// REQ: DF-RCV-50
// REQ: DF-ERR-50
#[test]
fn the_3e38_packet_of_issue_12_changes_nothing() {
    let (clean, _) = run(30, &|_| Vec::new(), None);
    let attack = |r: u64| {
        vec![packet(vec![
            entry(STRANGER, r + 1, &[7], &[3e38]),
            entry(STRANGER + 1, r + 1, &[7], &[3e38]),
        ])]
    };
    let (got, nodes) = run(30, &attack, None);
    assert!(got.iter().flatten().all(|x| x.is_finite()));
    let d = max_diff(&clean, &got);
    println!("3e38 packet, 30 rounds: max |attacked - clean| = {d}");
    assert_eq!(
        d, 0.0,
        "a refused packet changes nothing: the run equals the clean one"
    );
    for n in &nodes {
        let e = n.engine().unwrap();
        assert_eq!(e.counters().error(ErrorCode::NonFiniteResult), 30);
        assert_eq!(
            e.receiver_state()
                .history()
                .iter()
                .filter(|h| h.0 >= STRANGER)
                .count(),
            0
        );
    }
}

// REQ: DF-RCV-51
// REQ: DF-SEC-2
#[test]
fn forged_origin_flood_cannot_lock_out_members() {
    let flood = packet(
        (1..=4096)
            .map(|i| entry(STRANGER + i, 1, &[3], &[1e-30]))
            .collect(),
    );
    let attack = |r: u64| {
        if r == 0 {
            vec![flood.clone()]
        } else {
            Vec::new()
        }
    };
    let (clean, _) = run(10, &|_| Vec::new(), None);
    let (got, nodes) = run(10, &attack, None);
    let locked = max_diff(&clean, &got);
    println!("origin flood, no membership: max |attacked - clean| = {locked}");
    assert!(
        locked > 0.1,
        "without a membership the flood locks the members out"
    );
    for n in &nodes {
        assert!(
            n.engine()
                .unwrap()
                .counters()
                .drop_count(Admission::OriginLimit)
                > 0
        );
    }
    let (got, nodes) = run(10, &attack, Some(&NODES));
    let d = max_diff(&clean, &got);
    println!("origin flood, membership: max |attacked - clean| = {d}");
    assert_eq!(d, 0.0);
    for n in &nodes {
        let e = n.engine().unwrap();
        assert_eq!(e.counters().drop_count(Admission::NotMember), 4096);
        assert_eq!(e.counters().drop_count(Admission::OriginLimit), 0);
    }
}

/// Signed entries (1.1, spec section 13.1) on the in-memory transport: a signed cluster trains as an
/// unsigned one, and a member's entries forged by another member (a forged incarnation of node 1,
/// signed by node 3) are refused by every node and change nothing.
#[test]
fn signed_cluster_refuses_a_members_forgeries() {
    // REQ: DF-SEC-140, DF-SEC-142, DF-SEC-146
    use df_core::signing::{Signing, public_key_of};
    let seed = |n: u64| [n as u8; 32];
    let keys: Vec<(u64, [u8; 32])> = NODES
        .iter()
        .map(|&n| (n, public_key_of(&seed(n))))
        .collect();
    let fp = manifest().fingerprint();
    let s3 = Signing::new(&[], Some(seed(3)), Some(3)).unwrap();
    let forged = |r: u64| {
        let inc = u64::MAX - r;
        let mut e = entry(1, 1, &[5], &[1e6]);
        e.incarnation = inc;
        e.signature = Some(
            s3.sign(&fp, ValueEncoding::F32, 1, inc, 1, &[5], &[1e6])
                .unwrap()
                .to_vec(),
        );
        vec![packet(vec![e])]
    };
    let no_attack = |_: u64| Vec::new();
    let sign = |nodes: &[Node]| {
        for n in nodes {
            let id = n.node_id();
            n.set_signing(Some(Signing::new(&keys, Some(seed(id)), Some(id)).unwrap()))
                .unwrap();
        }
    };
    let (unsigned, _) = run(20, &no_attack, None);
    let (clean, _) = run_with(20, &no_attack, None, &sign);
    let (attacked, nodes) = run_with(20, &forged, None, &sign);
    assert_eq!(max_diff(&clean, &unsigned), 0.0);
    assert_eq!(max_diff(&clean, &attacked), 0.0);
    for n in &nodes {
        assert_eq!(
            n.engine()
                .unwrap()
                .counters()
                .error(ErrorCode::BadSignature),
            20
        );
    }
    // a node without its secret key cannot be put in a signed cluster
    assert!(
        nodes[0]
            .set_signing(Some(Signing::new(&keys, None, None).unwrap()))
            .is_err()
    );
}
