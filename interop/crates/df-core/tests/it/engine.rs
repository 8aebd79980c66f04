use df_core::wire::{decode_packet, encode_packet};
use df_core::{
    Admission, Engine, ErrorCode, Manifest, Outcome, SyncConfig, TensorSpec, ValueEncoding,
};

fn manifest() -> Manifest {
    Manifest::new([
        TensorSpec::new("fc.weight", &[4, 5]),
        TensorSpec::new("fc.bias", &[4]),
    ])
    .expect("ok")
}

fn engine(id: u64, cfg: SyncConfig) -> Engine {
    Engine::new(manifest(), cfg, id, 100, vec![0.0; 24]).expect("engine")
}

#[test]
fn generate_selects_feeds_back_and_numbers() {
    // REQ: DF-GEN-5
    let mut e = engine(
        1,
        SyncConfig {
            ratio: 0.1,
            ..SyncConfig::v1_0()
        },
    );
    let mut active = vec![0.0f32; 24];
    active[3] = 0.5;
    active[7] = -2.0;
    active[9] = 0.25;
    let out = e.generate(&active, false).expect("gen");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].indices, vec![3, 7, 9]);
    assert_eq!(out[0].seq, 1);
    assert_eq!(e.anchor()[7], -2.0);
    // REQ: DF-GEN-8
    assert!(e.generate(&active, false).expect("gen").is_empty());
    assert_eq!(e.next_seq(), 2);
    // REQ: DF-GEN-4 (f16 error feedback uses the decoded value)
    let mut e = engine(
        1,
        SyncConfig {
            ratio: 1.0,
            encoding: ValueEncoding::F16,
            ..SyncConfig::v1_0()
        },
    );
    let mut a = vec![0.0f32; 24];
    a[0] = 0.1;
    let out = e.generate(&a, false).expect("gen");
    assert_eq!(out[0].values[0], ValueEncoding::F16.quantize(0.1));
    assert_eq!(e.anchor()[0], ValueEncoding::F16.quantize(0.1));
    // non-finite delta: refused, no state change
    let mut a = vec![0.0f32; 24];
    a[5] = f32::INFINITY;
    let mut e = engine(1, SyncConfig::v1_0());
    assert!(e.generate(&a, false).is_err());
    assert_eq!(e.next_seq(), 1);
    assert!(e.anchor().iter().all(|&x| x == 0.0));
}

#[test]
fn generate_splits_large_entries() {
    // REQ: DF-GEN-6
    let cfg = SyncConfig {
        ratio: 1.0,
        max_packet_size: 320,
        ..SyncConfig::v1_0()
    };
    let mut e = engine(1, cfg);
    let a: Vec<f32> = (0..24).map(|i| i as f32 + 1.0).collect();
    let out = e.generate(&a, false).expect("gen");
    assert!(out.len() > 1);
    let all: Vec<u32> = out.iter().flat_map(|x| x.indices.clone()).collect();
    assert_eq!(all, (0..24).collect::<Vec<u32>>());
    for (j, x) in out.iter().enumerate() {
        assert_eq!(x.seq, 1 + j as u64);
    }
    for p in e.pack(&out, &[]) {
        assert!(p.len() <= 320);
        decode_packet(&p, 320).expect("each packet decodes");
    }
}

#[test]
fn two_nodes_exchange_relay_and_dedupe() {
    // REQ: DF-RCV-6, DF-RCV-7, DF-RLY-1, DF-RLY-4
    let cfg = SyncConfig {
        ratio: 0.25,
        alpha: 0.5,
        hop_limit: 1,
        ..SyncConfig::v1_0()
    };
    let mut a = engine(1, cfg.clone());
    let mut b = engine(2, cfg.clone());
    let mut c = engine(3, cfg);
    let act: Vec<f32> = (0..24).map(|i| (i as f32 - 12.0) * 0.5).collect();
    let own = a.generate(&act, false).expect("gen");
    let pkts = a.pack(&own, &[]);
    assert_eq!(pkts.len(), 1);
    let views: Vec<&[u8]> = vec![&pkts[0], &pkts[0]];
    let r = b.receive(&views);
    assert_eq!(r.outcomes, vec![Outcome::Ok, Outcome::Ok]);
    assert_eq!(r.entry_outcomes[1], vec![Admission::Duplicate]);
    assert_eq!(r.indices, own[0].indices);
    let want: Vec<f32> = own[0].values.iter().map(|v| 0.5 * v).collect();
    assert_eq!(r.values, want);
    assert_eq!(b.anchor()[0], want[0]);
    let mut b_active = vec![0.0f32; 24];
    r.apply_to(&mut b_active);
    assert_eq!(b_active[0], want[0]);
    assert_eq!(r.relay.len(), 1);
    assert_eq!(r.relay[0].hops, 1);
    let relay = b.pack(&[], &r.relay);
    let rp = decode_packet(&relay[0], 1 << 24).expect("relay decodes");
    assert_eq!(rp.sender, 2);
    // C receives the relay (hops 1 = hop_limit: accepted, not relayed again)
    let r2 = c.receive(&[&relay[0][..]]);
    assert_eq!(r2.outcomes, vec![Outcome::Ok]);
    assert!(r2.relay.is_empty());
    // A drops its own origin
    let r3 = a.receive(&[&relay[0][..]]);
    assert_eq!(r3.entry_outcomes[0], vec![Admission::OwnOrigin]);
    assert!(r3.indices.is_empty());
    // a rejected packet changes nothing
    let mut bad = relay[0].clone();
    bad[5] = b'X';
    let before = c.anchor().to_vec();
    let r4 = c.receive(&[&bad[..]]);
    assert_eq!(
        r4.outcomes,
        vec![Outcome::Rejected(ErrorCode::BadIdentifier)]
    );
    assert_eq!(c.anchor(), &before[..]);
    assert_eq!(c.counters().error(ErrorCode::BadIdentifier), 1);
    assert_eq!(c.counters().packets_received, 2);
}

#[test]
fn pack_greedy() {
    // REQ: DF-RLY-3
    let cfg = SyncConfig {
        max_packet_size: 600,
        ..SyncConfig::v1_0()
    };
    let e = engine(9, cfg);
    let mk = |seq: u64, n: u32| df_core::OwnedEntry {
        origin: 5,
        incarnation: 1,
        seq,
        hops: 1,
        indices: (0..n).collect(),
        values: vec![1.0; n as usize],
        signature: None,
    };
    let entries = vec![mk(1, 10), mk(2, 10), mk(3, 10), mk(4, 20)];
    let packets = e.pack_packets(&[], &entries);
    // bounds: 160 + 208 + 208 = 576 <= 600; + 208 > 600; then 160 + 208 + 288 > 600
    let sizes: Vec<usize> = packets.iter().map(|p| p.entries.len()).collect();
    assert_eq!(sizes, vec![2, 1, 1]);
    for p in &packets {
        assert!(encode_packet(p).len() <= 600);
    }
    // an entry too large for any packet is dropped and counted; one whose bound is too large but
    // whose exact size fits travels alone
    let big = vec![mk(5, 100)];
    assert!(e.pack(&[], &big).is_empty());
    assert_eq!(e.relay_dropped_oversize(), 1);
    let e2 = engine(
        9,
        SyncConfig {
            max_packet_size: 160 + 128 + 8 * 10 - 1,
            ..SyncConfig::v1_0()
        },
    );
    let packets = e2.pack_packets(&[], &[mk(1, 2), mk(2, 10), mk(3, 2)]);
    let sizes: Vec<usize> = packets.iter().map(|p| p.entries.len()).collect();
    assert_eq!(sizes, vec![1, 1, 1]);
    assert_eq!(e2.relay_dropped_oversize(), 0);
}

#[test]
fn receive_reports_the_accepted_entry_headers() {
    // REQ: DF-RCV-3, DF-RCV-4 (only entries the replay window accepts are reported)
    let mut b = engine(2, SyncConfig::v1_0());
    let fp = b.manifest().fingerprint();
    let entry = |origin: u64, inc: u64, seq: u64, hops: u8| df_core::OwnedEntry {
        origin,
        incarnation: inc,
        seq,
        hops,
        indices: vec![1, 5],
        values: vec![0.25, -1.0],
        signature: None,
    };
    let mut p0 = df_core::OwnedPacket::new(7, 1, fp, ValueEncoding::F32);
    p0.entries = vec![entry(7, 1, 1, 0), entry(8, 3, 4, 2), entry(7, 1, 1, 0)];
    let mut p2 = df_core::OwnedPacket::new(9, 1, fp, ValueEncoding::F16);
    p2.entries = vec![entry(2, 1, 1, 0), entry(9, 5, 1, 1)];
    let bad = {
        let mut p = p0.clone();
        p.fingerprint = vec![0; 32];
        encode_packet(&p)
    };
    let bufs = [encode_packet(&p0), bad, encode_packet(&p2)];
    let views: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
    let r = b.receive(&views);
    assert_eq!(
        r.outcomes,
        vec![
            Outcome::Ok,
            Outcome::Rejected(ErrorCode::FingerprintMismatch),
            Outcome::Ok
        ]
    );
    let got: Vec<(u64, u64, u64, u8, usize, usize)> = r
        .accepted
        .iter()
        .map(|a| (a.origin, a.incarnation, a.seq, a.hops, a.packet, a.entry))
        .collect();
    // the duplicate (packet 0, entry 2), the rejected packet 1 and the own origin (packet 2,
    // entry 0) are not reported
    assert_eq!(
        got,
        vec![(7, 1, 1, 0, 0, 0), (8, 3, 4, 2, 0, 1), (9, 5, 1, 1, 2, 1)]
    );
    let accepted_in_outcomes = r
        .entry_outcomes
        .iter()
        .flatten()
        .filter(|a| **a == Admission::Accepted)
        .count();
    assert_eq!(r.accepted.len(), accepted_in_outcomes);
    assert_eq!(r.counters.entries_accepted, 3);
    // a replay of the same packets is accepted nowhere
    assert!(b.receive(&views).accepted.is_empty());
}
