//! MUST requirements that, before per-implementation traceability, only Python tests cited
//! (`spec/uncovered-rust.txt`): what each parameter means to the engine (DF-PAR-1 to DF-PAR-10,
//! their allowed ranges are `SyncConfig` validation), what a cluster whose nodes disagree on a
//! cluster-wide parameter sees (DF-PAR-12), the bound on tracked origins (DF-SEC-2) and the
//! protocol version a sender writes (DF-VER-1). Mirrors `tests/test_requirements_engine.py`.

use df_core::config::MIN_MAX_PACKET_SIZE;
use df_core::replay::DEFAULT_MAX_ORIGINS;
use df_core::selection::num_selected;
use df_core::wire::{VERSION_MAJOR, VERSION_MINOR, decode_packet, encode_packet};
use df_core::{
    Admission, Engine, ErrorCode, Manifest, Outcome, OwnedEntry, OwnedPacket, SyncConfig,
    TensorSpec, ValueEncoding,
};

/// `fc.weight` [4, 5], `fc.bias` [4]: N = 24.
fn manifest() -> Manifest {
    Manifest::new([
        TensorSpec::new("fc.weight", &[4, 5]),
        TensorSpec::new("fc.bias", &[4]),
    ])
    .expect("manifest")
}

const N: usize = 24;

fn engine(id: u64, cfg: SyncConfig) -> Engine {
    Engine::new(manifest(), cfg, id, 1, vec![0.0; N]).expect("engine")
}

fn entry(origin: u64, inc: u64, seq: u64, hops: u8, indices: &[u32], values: &[f32]) -> OwnedEntry {
    OwnedEntry {
        origin,
        incarnation: inc,
        seq,
        hops,
        indices: indices.to_vec(),
        values: values.to_vec(),
        signature: None,
    }
}

/// An F32 packet of `sender` for [`manifest`].
fn packet(sender: u64, entries: Vec<OwnedEntry>) -> Vec<u8> {
    let mut p = OwnedPacket::new(sender, 1, manifest().fingerprint(), ValueEncoding::F32);
    p.entries = entries;
    encode_packet(&p)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn alpha_is_applied_as_one_binary32_multiplication_by_fl32_alpha() {
    let alpha = 0.1f64; // not a binary32 number: fl32(alpha) != alpha
    let alpha32 = alpha as f32;
    let values: Vec<f32> = (1..=N).map(|i| 1.0 + i as f32 * 0.377).collect();
    // the test tells the two rules apart: for some values the binary64 product rounds differently
    let by_f64 = |v: f32| (alpha * f64::from(v)) as f32;
    assert!(values.iter().any(|&v| by_f64(v) != alpha32 * v));
    let mut e = engine(
        1,
        SyncConfig {
            alpha,
            relay_threshold: 0.0,
            ..SyncConfig::v1_0()
        },
    );
    let idx: Vec<u32> = (0..N as u32).collect();
    let res = e.receive(&[&packet(9, vec![entry(9, 1, 1, 0, &idx, &values)])]);
    assert_eq!(res.outcomes, vec![Outcome::Ok]);
    let want: Vec<f32> = values.iter().map(|&v| alpha32 * v).collect();
    // REQ: DF-PAR-1 -- u = fl32(fl32(alpha) * v), applied and relayed
    assert_eq!(bits(e.anchor()), bits(&want));
    assert_eq!(res.relay.len(), 1);
    assert_eq!(bits(&res.relay[0].values), bits(&want));
}

#[test]
fn k_is_ceil_of_the_binary64_product() {
    // REQ: DF-PAR-2 -- the examples of spec section 5.2
    for (n, ratio, k) in [
        (12, 0.25, 3),
        (17290, 0.05, 865),
        (100, 0.07, 8), // 100 * 0.07 = 7.000000000000001 in binary64
        (3, 0.1, 1),
        (1000, 0.001, 1),
    ] {
        assert_eq!(num_selected(n, ratio), k, "N = {n}, ratio = {ratio}");
    }
    // REQ: DF-PAR-2 -- a generation sends exactly k values
    let m = Manifest::new([TensorSpec::new("w", &[100])]).expect("manifest");
    let mut e = Engine::new(
        m,
        SyncConfig {
            ratio: 0.07,
            ..SyncConfig::v1_0()
        },
        1,
        1,
        vec![0.0; 100],
    )
    .expect("engine");
    let active: Vec<f32> = (0..100).map(|i| (i + 1) as f32 * 0.5).collect();
    let out = e.generate(&active, false).expect("finite");
    assert_eq!(out.iter().map(|x| x.values.len()).sum::<usize>(), 8);
}

#[test]
fn relay_threshold_is_compared_exactly_in_binary64() {
    let v = 0.3f32;
    let exact = f64::from(v);
    let just_above = f64::from_bits(exact.to_bits() + 1);
    assert_eq!(
        just_above as f32, v,
        "the two thresholds are the same binary32 number"
    );
    for (threshold, relayed) in [(exact, true), (just_above, false), (0.0, true)] {
        let mut e = engine(
            1,
            SyncConfig {
                relay_threshold: threshold,
                ..SyncConfig::v1_0()
            },
        );
        let res = e.receive(&[&packet(9, vec![entry(9, 1, 1, 0, &[2, 5], &[v, 1.0])])]);
        // REQ: DF-PAR-4 -- |u| < threshold is not relayed, |u| == threshold is
        assert_eq!(res.relay.len(), 1);
        let want: &[u32] = if relayed { &[2, 5] } else { &[5] };
        assert_eq!(res.relay[0].indices, want, "threshold {threshold:e}");
        // ... and the threshold never changes what is applied
        assert_eq!(e.anchor()[2], v);
    }
}

#[test]
fn hop_limit_bounds_sent_and_accepted_hops() {
    let cfg = SyncConfig {
        hop_limit: 3,
        relay_threshold: 0.0,
        ..SyncConfig::v1_0()
    };
    let mut e = engine(1, cfg.clone());
    let res = e.receive(&[&packet(
        9,
        vec![
            entry(9, 1, 1, 2, &[0], &[1.0]),
            entry(8, 1, 1, 3, &[1], &[1.0]),
        ],
    )]);
    // REQ: DF-PAR-5 -- hops 2 is relayed as 3 = hop_limit; hops 3 is applied but never sent as 4
    assert_eq!(res.outcomes, vec![Outcome::Ok]);
    assert_eq!(e.anchor()[..2], [1.0, 1.0]);
    assert_eq!(
        res.relay
            .iter()
            .map(|r| (r.origin, r.hops))
            .collect::<Vec<_>>(),
        vec![(9, 3)]
    );
    for p in e.pack(&[], &res.relay) {
        let d = decode_packet(&p, cfg.max_packet_size).expect("valid");
        assert!(d.entries.iter().all(|x| x.hops <= cfg.hop_limit));
    }
    // REQ: DF-PAR-5 -- a packet carrying hops > hop_limit is rejected as a whole
    let before = e.anchor().to_vec();
    let res = e.receive(&[&packet(
        9,
        vec![
            entry(9, 1, 2, 0, &[4], &[1.0]),
            entry(7, 1, 1, 4, &[3], &[1.0]),
        ],
    )]);
    assert_eq!(res.outcomes, vec![Outcome::Rejected(ErrorCode::HopLimit)]);
    assert_eq!(bits(e.anchor()), bits(&before));
}

#[test]
fn max_packet_size_bounds_sent_and_accepted_packets() {
    const BIG: usize = 200;
    let m = Manifest::new([TensorSpec::new("w", &[BIG as u64])]).expect("manifest");
    let make = |id: u64, max_packet_size: usize| {
        let cfg = SyncConfig {
            ratio: 1.0,
            max_packet_size,
            ..SyncConfig::v1_0()
        };
        Engine::new(m.clone(), cfg, id, 1, vec![0.0; BIG]).expect("engine")
    };
    let active: Vec<f32> = (0..BIG).map(|i| i as f32 * 0.25 + 1.0).collect();
    let mut sender = make(1, 1024);
    let own = sender.generate(&active, false).expect("finite");
    let wire = sender.pack(&own, &[]);
    // REQ: DF-PAR-6 -- every packet sent is at most max_packet_size bytes (so the 200 values
    // take several packets)
    assert!(wire.len() > 1);
    assert!(
        wire.iter().all(|p| p.len() <= 1024),
        "{:?}",
        wire.iter().map(Vec::len)
    );
    let mut peer = make(2, 1024);
    let refs: Vec<&[u8]> = wire.iter().map(Vec::as_slice).collect();
    let res = peer.receive(&refs);
    assert!(res.outcomes.iter().all(|o| *o == Outcome::Ok));
    assert_eq!(bits(peer.anchor()), bits(&active));
    // REQ: DF-PAR-6 -- a larger packet is rejected (OVERSIZE) and changes nothing
    let mut whole = make(3, 1 << 20);
    let own = whole.generate(&active, false).expect("finite");
    let big = whole.pack(&own, &[]);
    assert_eq!(big.len(), 1);
    assert!(big[0].len() > 1024);
    let mut strict = make(4, 1024);
    let res = strict.receive(&[&big[0]]);
    assert_eq!(res.outcomes, vec![Outcome::Rejected(ErrorCode::Oversize)]);
    assert!(strict.anchor().iter().all(|&x| x == 0.0));
}

#[test]
fn at_most_max_incarnations_are_tracked_per_origin() {
    for max_incarnations in [1, 2, 4] {
        let mut e = engine(
            1,
            SyncConfig {
                max_incarnations,
                ..SyncConfig::v1_0()
            },
        );
        for inc in 1..=10u64 {
            let mut p = OwnedPacket::new(9, inc, manifest().fingerprint(), ValueEncoding::F32);
            p.entries = vec![entry(9, inc, 1, 0, &[0], &[1.0])];
            let res = e.receive(&[&encode_packet(&p)]);
            assert_eq!(res.entry_outcomes, vec![vec![Admission::Accepted]]);
            let tracked = e.receiver_state().incarnations(9);
            // REQ: DF-PAR-8 -- never more than max_incarnations, the newest always among them
            assert!(tracked.len() <= max_incarnations, "{tracked:?}");
            assert_eq!(tracked.last(), Some(&inc));
        }
        // an incarnation older than every tracked one is dropped, not tracked
        let res = e.receive(&[&packet(9, vec![entry(9, 1, 2, 0, &[0], &[1.0])])]);
        assert_eq!(
            res.entry_outcomes,
            vec![vec![Admission::StaleIncarnation]],
            "max_incarnations {max_incarnations}"
        );
        assert_eq!(e.receiver_state().incarnations(9).len(), max_incarnations);
    }
}

#[test]
fn f32_is_sent_and_received() {
    let cfg = SyncConfig {
        ratio: 1.0,
        ..SyncConfig::v1_0()
    };
    assert_eq!(SyncConfig::v1_0().encoding, ValueEncoding::F32);
    let mut a = engine(1, cfg.clone());
    let active: Vec<f32> = (0..N).map(|i| (i as f32 - 11.5) / 3.0).collect();
    let own = a.generate(&active, false).expect("finite");
    let wire = a.pack(&own, &[]);
    // REQ: DF-PAR-10 -- an F32 node sends F32 packets, values exact
    for p in &wire {
        let d = decode_packet(p, cfg.max_packet_size).expect("valid");
        assert_eq!(d.encoding, ValueEncoding::F32);
    }
    // REQ: DF-PAR-10 -- and receives them, applying the exact values
    let mut b = engine(2, cfg);
    let refs: Vec<&[u8]> = wire.iter().map(Vec::as_slice).collect();
    let res = b.receive(&refs);
    assert!(res.outcomes.iter().all(|o| *o == Outcome::Ok));
    assert_eq!(bits(b.anchor()), bits(&active));
}

#[test]
fn cluster_nodes_disagreeing_on_max_packet_size_reject_oversize() {
    let mut big = engine(
        1,
        SyncConfig {
            ratio: 1.0,
            max_packet_size: 4096,
            ..SyncConfig::v1_0()
        },
    );
    let own = big.generate(&[1.5; N], false).expect("finite");
    let wire = big.pack(&own, &[]);
    assert_eq!(wire.len(), 1);
    let small_size = wire[0].len() - 1;
    assert!(small_size >= MIN_MAX_PACKET_SIZE);
    let mut small = engine(
        2,
        SyncConfig {
            max_packet_size: small_size,
            ..SyncConfig::v1_0()
        },
    );
    let res = small.receive(&[&wire[0]]);
    // REQ: DF-PAR-12 -- a valid packet of one node is rejected by another (OVERSIZE)
    assert_eq!(res.outcomes, vec![Outcome::Rejected(ErrorCode::Oversize)]);
    assert_eq!(small.counters().error(ErrorCode::Oversize), 1);
    assert!(small.anchor().iter().all(|&x| x == 0.0));
    // the same packet is accepted by a node that agrees on the parameter
    let mut same = engine(
        3,
        SyncConfig {
            max_packet_size: 4096,
            ..SyncConfig::v1_0()
        },
    );
    assert_eq!(same.receive(&[&wire[0]]).outcomes, vec![Outcome::Ok]);
}

#[test]
fn cluster_nodes_disagreeing_on_hop_limit_reject_hop_limit() {
    let mut relay = engine(
        1,
        SyncConfig {
            hop_limit: 8,
            relay_threshold: 0.0,
            ..SyncConfig::v1_0()
        },
    );
    let res = relay.receive(&[&packet(
        7,
        vec![entry(9, 1, 1, 3, &[0, 4, 8], &[1.0, 2.0, 3.0])],
    )]);
    assert_eq!(res.outcomes, vec![Outcome::Ok]);
    assert_eq!(res.relay.iter().map(|r| r.hops).collect::<Vec<_>>(), [4]);
    let fwd = relay.pack(&[], &res.relay);
    let mut strict = engine(
        2,
        SyncConfig {
            hop_limit: 3,
            ..SyncConfig::v1_0()
        },
    );
    let out = strict.receive(&[&fwd[0]]);
    // REQ: DF-PAR-12 -- hops 4 is valid for the relay (hop_limit 8) and rejected by hop_limit 3
    assert_eq!(out.outcomes, vec![Outcome::Rejected(ErrorCode::HopLimit)]);
    assert_eq!(strict.counters().error(ErrorCode::HopLimit), 1);
    assert!(strict.anchor().iter().all(|&x| x == 0.0));
}

#[test]
fn cluster_nodes_disagreeing_on_the_manifest_reject_fingerprint() {
    // include_buffers on one node only: one more tensor, another fingerprint
    let with_buffers = Manifest::new([
        TensorSpec::new("fc.weight", &[4, 5]),
        TensorSpec::new("fc.bias", &[4]),
        TensorSpec::new("bn.running_mean", &[2]),
    ])
    .expect("manifest");
    let n = with_buffers.num_params() as usize;
    let cfg = SyncConfig {
        ratio: 1.0,
        ..SyncConfig::v1_0()
    };
    let mut a = Engine::new(with_buffers, cfg, 1, 1, vec![0.0; n]).expect("engine");
    let own = a.generate(&vec![1.0; n], false).expect("finite");
    let wire = a.pack(&own, &[]);
    let mut b = engine(2, SyncConfig::v1_0());
    let refs: Vec<&[u8]> = wire.iter().map(Vec::as_slice).collect();
    let res = b.receive(&refs);
    // REQ: DF-PAR-12 -- FINGERPRINT_MISMATCH
    assert!(!res.outcomes.is_empty());
    assert!(
        res.outcomes
            .iter()
            .all(|o| *o == Outcome::Rejected(ErrorCode::FingerprintMismatch))
    );
    assert!(b.anchor().iter().all(|&x| x == 0.0));
}

#[test]
fn origin_and_incarnation_state_is_bounded() {
    assert_eq!(DEFAULT_MAX_ORIGINS, 4096); // the RECOMMENDED default
    assert_eq!(SyncConfig::v1_0().max_origins, DEFAULT_MAX_ORIGINS);
    let (max_origins, max_inc, window) = (8usize, 2usize, 16u64);
    let mut e = engine(
        1,
        SyncConfig {
            replay_window: window,
            max_incarnations: max_inc,
            max_origins,
            ..SyncConfig::v1_0()
        },
    );
    let origins: Vec<u64> = (100..160).collect();
    for inc in 1..=5u64 {
        let wire: Vec<Vec<u8>> = origins
            .iter()
            .map(|&o| {
                let entries = (1..4u64)
                    .map(|s| entry(o, inc, s, 0, &[(s % N as u64) as u32], &[1.0]))
                    .collect();
                packet(o, entries)
            })
            .collect();
        let refs: Vec<&[u8]> = wire.iter().map(Vec::as_slice).collect();
        e.receive(&refs);
    }
    let st = e.receiver_state();
    let tracked: Vec<u64> = origins
        .iter()
        .copied()
        .filter(|&o| !st.incarnations(o).is_empty())
        .collect();
    // REQ: DF-SEC-2 -- the number of tracked origins and incarnations stays within the bounds
    assert_eq!(tracked.len(), max_origins);
    for &o in &origins {
        assert!(st.incarnations(o).len() <= max_inc);
        for inc in st.incarnations(o) {
            let w = st.window_of(o, inc).expect("tracked");
            assert_eq!(w.width(), window);
            assert!(w.seen().len() as u64 <= window);
        }
    }
    // REQ: DF-SEC-2 -- the first origins are kept (never evicted), every further one is dropped
    assert_eq!(tracked, origins[..max_origins]);
    let dropped = e.counters().drop_count(Admission::OriginLimit);
    assert_eq!(dropped, 5 * 3 * (origins.len() - max_origins) as u64);
    assert_eq!(
        e.counters().to_json()["drops"]["origin_limit"].as_u64(),
        Some(dropped)
    );
    // a tracked origin's replayed entries are still recognised (its windows were not forgotten)
    let before = e.anchor().to_vec();
    let o = tracked[0];
    let replay = e.receive(&[&packet(o, vec![entry(o, 5, 2, 0, &[2], &[1.0])])]);
    assert_eq!(replay.entry_outcomes, vec![vec![Admission::Duplicate]]);
    assert_eq!(bits(e.anchor()), bits(&before));
    // REQ: DF-SEC-2 -- a new origin is still refused, however many entries it sends
    let late = e.receive(&[&packet(
        999,
        (1..=5).map(|s| entry(999, 1, s, 0, &[0], &[1.0])).collect(),
    )]);
    assert_eq!(late.entry_outcomes, vec![vec![Admission::OriginLimit; 5]]);
    assert!(e.receiver_state().incarnations(999).is_empty());
    assert_eq!(bits(e.anchor()), bits(&before));
}

#[test]
fn a_sender_writes_version_1_1() {
    // REQ: DF-VER-1 -- the version of this document
    assert_eq!((VERSION_MAJOR, VERSION_MINOR), (1, 1));
    let p = OwnedPacket::new(1, 1, manifest().fingerprint(), ValueEncoding::F32);
    assert_eq!((p.version_major, p.version_minor), (1, 1));
    let buf = encode_packet(&p);
    let d = decode_packet(&buf, 1 << 20).expect("valid");
    assert_eq!((d.version_major, d.version_minor), (1, 1));
    // REQ: DF-VER-1 -- every packet the engine publishes, own and relayed
    let mut e = engine(
        1,
        SyncConfig {
            ratio: 1.0,
            relay_threshold: 0.0,
            ..SyncConfig::v1_0()
        },
    );
    let own = e.generate(&[0.5; N], false).expect("finite");
    let res = e.receive(&[&packet(9, vec![entry(9, 1, 1, 0, &[3], &[1.0])])]);
    let wire = e.pack(&own, &res.relay);
    assert!(!wire.is_empty());
    for w in &wire {
        let d = decode_packet(w, 1 << 20).expect("valid");
        assert_eq!((d.version_major, d.version_minor), (1, 1));
    }
}
