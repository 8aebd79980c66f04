//! Relay policy NEEDED (spec section 8.6, added in 1.1): delivery on symmetric links, no relay in a
//! full mesh, the advertisement rules, interoperation with policy ALL. A lock-step simulation of
//! engines behind a router (the model of the Python tests/test_relay_policy.py and
//! bench/bench_relay.py): deterministic, no threads, no timing.

use std::collections::BTreeSet;

use df_core::config::RelayPolicy;
use df_core::wire::{OwnedEntry, OwnedPacket, decode_packet, encode_packet};
use df_core::{Admission, Engine, ErrorCode, Manifest, SyncConfig, TensorSpec, ValueEncoding};

use crate::Rng;

const N: usize = 64;

fn manifest() -> Manifest {
    Manifest::new([TensorSpec::new("w", &[N as u64])]).expect("manifest")
}

fn hears(topology: &str, n: usize) -> Vec<BTreeSet<usize>> {
    (0..n)
        .map(|i| {
            let mut s = BTreeSet::new();
            match topology {
                "mesh" => s.extend((0..n).filter(|&j| j != i)),
                "ring" => {
                    s.insert((i + n - 1) % n);
                    s.insert((i + 1) % n);
                    s.remove(&i);
                }
                "line" => {
                    if i > 0 {
                        s.insert(i - 1);
                    }
                    if i + 1 < n {
                        s.insert(i + 1);
                    }
                }
                "one_way_ring" => {
                    s.insert((i + n - 1) % n);
                }
                _ => panic!("topology {topology}"),
            }
            s
        })
        .collect()
}

struct Sim {
    ids: Vec<u64>,
    engines: Vec<Engine>,
    hears: Vec<BTreeSet<usize>>,
    actives: Vec<Vec<f32>>,
    out: Vec<Vec<Vec<u8>>>,
    generated: BTreeSet<(u64, u64)>,
    received: Vec<BTreeSet<(u64, u64)>>,
    relayed_per_round: Vec<usize>,
    rng: Rng,
}

impl Sim {
    fn new(topology: &str, policies: &[RelayPolicy], startup_advert: bool) -> Sim {
        let n = policies.len();
        let ids: Vec<u64> = (0..n as u64).map(|i| 0x100 + i).collect();
        let engines: Vec<Engine> = policies
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let cfg = SyncConfig {
                    ratio: 0.1,
                    relay_policy: p,
                    ..SyncConfig::v1_0()
                };
                Engine::new(manifest(), cfg, ids[i], 1, vec![0.0; N]).expect("engine")
            })
            .collect();
        // DF-RLY-63: a NEEDED node publishes an empty advertisement when it starts
        let out = engines
            .iter()
            .map(|e| match e.advertisement() {
                Some(a) if startup_advert => vec![a],
                _ => Vec::new(),
            })
            .collect();
        Sim {
            ids,
            engines,
            hears: hears(topology, n),
            actives: vec![vec![0.0; N]; n],
            out,
            generated: BTreeSet::new(),
            received: vec![BTreeSet::new(); n],
            relayed_per_round: Vec::new(),
            rng: Rng(3),
        }
    }

    fn round(&mut self, generate: bool) {
        let n = self.engines.len();
        let inboxes: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|i| {
                self.hears[i]
                    .iter()
                    .flat_map(|&j| self.out[j].iter().cloned())
                    .collect()
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        let mut relayed = 0;
        for (i, inbox) in inboxes.iter().enumerate() {
            let refs: Vec<&[u8]> = inbox.iter().map(Vec::as_slice).collect();
            let e = &mut self.engines[i];
            let res = e.receive(&refs);
            assert!(res.outcomes.iter().all(|o| *o == df_core::Outcome::Ok));
            res.apply_to(&mut self.actives[i]);
            self.received[i].extend(res.accepted.iter().map(|a| (a.origin, a.seq)));
            let mut own = Vec::new();
            if generate {
                for a in self.actives[i].iter_mut() {
                    *a += self.rng.f32();
                }
                own = e.generate(&self.actives[i], false).expect("generate");
                self.generated
                    .extend(own.iter().map(|x: &OwnedEntry| (x.origin, x.seq)));
            }
            relayed += res.relay.len();
            let mut pk = e.pack(&own, &res.relay);
            if generate && pk.is_empty() {
                pk.extend(e.advertisement());
            }
            out.push(pk);
        }
        self.out = out;
        self.relayed_per_round.push(relayed);
    }

    fn run(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.round(true);
        }
        for _ in 0..=self.engines.len() {
            self.round(false);
        }
    }

    fn all_delivered(&self) -> bool {
        (0..self.engines.len()).all(|i| {
            let want: BTreeSet<(u64, u64)> = self
                .generated
                .iter()
                .filter(|g| g.0 != self.ids[i])
                .copied()
                .collect();
            self.received[i] == want
        })
    }

    fn duplicate_ratio(&self) -> f64 {
        let drops: u64 = self
            .engines
            .iter()
            .map(|e| {
                e.counters().drop_count(Admission::OwnOrigin)
                    + e.counters().drop_count(Admission::Duplicate)
            })
            .sum();
        let accepted: u64 = self
            .engines
            .iter()
            .map(|e| e.counters().entries_accepted)
            .sum();
        drops as f64 / accepted as f64
    }
}

#[test]
fn needed_delivers_every_entry_on_symmetric_links() {
    // REQ: DF-RLY-60, DF-RLY-64
    for topology in ["mesh", "ring", "line"] {
        for n in [3, 5, 8] {
            let mut sim = Sim::new(topology, &vec![RelayPolicy::Needed; n], true);
            sim.run(6);
            assert_eq!(sim.generated.len(), 6 * n);
            assert!(sim.all_delivered(), "{topology} {n}");
            let mut base = Sim::new(topology, &vec![RelayPolicy::All; n], true);
            base.run(6);
            assert!(sim.duplicate_ratio() <= base.duplicate_ratio());
        }
    }
}

#[test]
fn needed_full_mesh_never_relays() {
    // REQ: DF-RLY-60, DF-RLY-61, DF-RLY-62, DF-RLY-63
    let mut sim = Sim::new("mesh", &[RelayPolicy::Needed; 8], true);
    sim.run(10);
    assert!(sim.all_delivered());
    assert_eq!(sim.relayed_per_round.iter().sum::<usize>(), 0);
    assert_eq!(sim.duplicate_ratio(), 0.0);
    let suppressed: u64 = sim
        .engines
        .iter()
        .map(|e| e.counters().relay_suppressed)
        .sum();
    assert_eq!(suppressed, 7 * 8 * 10);
    // without the start-up advertisement, round 2 relays everything once, then nothing
    let mut late = Sim::new("mesh", &[RelayPolicy::Needed; 8], false);
    late.run(10);
    assert!(late.all_delivered());
    assert_eq!(late.relayed_per_round[1], 8 * 7);
    assert_eq!(late.relayed_per_round[2..].iter().sum::<usize>(), 0);
}

#[test]
fn one_way_ring_needs_policy_all() {
    // REQ: DF-RLY-64 (on one-way links NEEDED loses entries; ALL does not)
    let mut sim = Sim::new("one_way_ring", &[RelayPolicy::Needed; 4], true);
    sim.run(4);
    assert!(!sim.all_delivered());
    let mut base = Sim::new("one_way_ring", &[RelayPolicy::All; 4], true);
    base.run(4);
    assert!(base.all_delivered());
}

#[test]
fn mixed_cluster_with_policy_all_nodes_delivers() {
    // REQ: DF-RLY-62, DF-PAR-60
    use RelayPolicy::{All, Needed};
    for topology in ["mesh", "ring", "line"] {
        let mut sim = Sim::new(topology, &[Needed, All, Needed, Needed, All], true);
        sim.run(6);
        assert!(sim.all_delivered(), "{topology}");
    }
}

fn needed_engine(id: u64, max_packet_size: usize) -> Engine {
    let cfg = SyncConfig {
        relay_policy: RelayPolicy::Needed,
        max_packet_size,
        ..SyncConfig::v1_0()
    };
    Engine::new(manifest(), cfg, id, 1, vec![0.0; N]).expect("engine")
}

fn pkt(sender: u64, entries: Vec<OwnedEntry>, heard: Option<Vec<u64>>) -> Vec<u8> {
    let mut p = OwnedPacket::new(sender, 1, manifest().fingerprint(), ValueEncoding::F32);
    p.entries = entries;
    p.heard = heard;
    encode_packet(&p)
}

fn entry(origin: u64, seq: u64) -> OwnedEntry {
    OwnedEntry {
        origin,
        incarnation: 1,
        seq,
        hops: 0,
        indices: vec![seq as u32],
        values: vec![1.0],
        signature: None,
    }
}

#[test]
fn advertisements_expire_after_two_sync_rounds() {
    // REQ: DF-RLY-61, DF-RLY-62
    let (x, b, c) = (0x10, 0x0B, 0x0C);
    let mut e = needed_engine(x, 16 << 20);
    let active = vec![0.0f32; N];
    let p1 = pkt(c, vec![], Some(vec![b, x]));
    let p2 = pkt(b, vec![entry(b, 1)], Some(vec![x]));
    let res = e.receive(&[&p1, &p2]);
    assert!(res.relay.is_empty());
    assert_eq!(e.counters().relay_suppressed, 1);
    assert_eq!(e.heard(), vec![b, c]);
    e.generate(&active, false).expect("gen");
    let p3 = pkt(b, vec![entry(b, 2)], Some(vec![x]));
    assert!(e.receive(&[&p3]).relay.is_empty());
    assert_eq!(e.heard(), vec![b, c]);
    e.generate(&active, false).expect("gen");
    assert_eq!(e.heard(), vec![b]);
    let p4 = pkt(c, vec![], None);
    let p5 = pkt(b, vec![entry(b, 3)], Some(vec![x]));
    let res = e.receive(&[&p4, &p5]);
    assert_eq!(res.relay.iter().map(|r| r.origin).collect::<Vec<_>>(), [b]);
    assert_eq!(e.counters().entries_relayed, 1);
}

#[test]
fn packets_without_heard_keep_the_stored_advertisement() {
    // REQ: DF-RLY-62
    let (x, b, c) = (0x10, 0x0B, 0x0C);
    let mut e = needed_engine(x, 16 << 20);
    e.receive(&[&pkt(c, vec![], Some(vec![b]))]);
    let res = e.receive(&[
        &pkt(c, vec![], None),
        &pkt(b, vec![entry(b, 1)], Some(vec![])),
    ]);
    assert!(res.relay.is_empty());
}

#[test]
fn advertisement_only_with_needed_and_left_out_when_it_does_not_fit() {
    // REQ: DF-RLY-61, DF-RLY-63, DF-PKT-60
    let all = Engine::new(manifest(), SyncConfig::v1_0(), 0x10, 1, vec![0.0; N]).expect("e");
    assert!(all.advertisement().is_none());
    let mut e = needed_engine(0x10, 296);
    let adv = e.advertisement().expect("advert");
    let p = decode_packet(&adv, 296).expect("decode");
    assert!(p.entries.is_empty());
    assert_eq!(p.heard, Some(vec![]));
    let senders: Vec<u64> = (0x20..0x2C).collect();
    let bufs: Vec<Vec<u8>> = senders
        .iter()
        .map(|&s| pkt(s, vec![], Some(vec![])))
        .collect();
    let refs: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
    e.receive(&refs);
    assert_eq!(e.heard(), senders);
    let own = vec![OwnedEntry {
        origin: 0x10,
        incarnation: 1,
        seq: 1,
        hops: 0,
        indices: vec![3],
        values: vec![0.5],
        signature: None,
    }];
    let out = e.pack(&own, &[]);
    assert_eq!(out.len(), 1);
    assert!(out[0].len() <= 296);
    assert_eq!(decode_packet(&out[0], 296).expect("d").heard, None);
    let adv = e.advertisement().expect("advert");
    assert_eq!(decode_packet(&adv, 296).expect("d").heard, Some(senders));
}

#[test]
fn heard_must_be_nonzero_and_ascending() {
    // REQ: DF-PKT-60
    for bad in [vec![0u64], vec![5, 5], vec![7, 3]] {
        let buf = pkt(1, vec![], Some(bad));
        assert_eq!(
            decode_packet(&buf, 1 << 20).map(|_| ()).map_err(|e| e.code),
            Err(ErrorCode::Malformed)
        );
    }
    let buf = pkt(1, vec![], None);
    assert_eq!(decode_packet(&buf, 1 << 20).expect("ok").heard, None);
}
