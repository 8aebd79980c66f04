//! Requirement tests mirroring `tests/test_requirements_engine.py`: non-finite deltas (DF-GEN-9),
//! manifest size bounds (DF-MAN-7) and packing (DF-PKT-11, DF-RLY-6).

use std::collections::HashMap;

use df_core::wire::{PACKET_OVERHEAD_BOUND, decode_packet, encode_packet, entry_size_bound};
use df_core::{
    Engine, EngineError, Manifest, OwnedEntry, OwnedPacket, SyncConfig, TensorSpec, ValueEncoding,
};

use crate::Rng;

const N: usize = 64;
const ENCODINGS: [ValueEncoding; 3] = [ValueEncoding::F32, ValueEncoding::F16, ValueEncoding::BF16];

fn engine(id: u64, cfg: SyncConfig) -> Engine {
    let m = Manifest::new([TensorSpec::new("w", &[N as u64])]).expect("manifest");
    Engine::new(m, cfg, id, 1, vec![0.0; N]).expect("engine")
}

#[test]
fn infinite_delta_fails_the_whole_generation() {
    let mut rng = Rng(9);
    for enc in ENCODINGS {
        for fast in [false, true] {
            for round in 0..20 {
                let cfg = SyncConfig {
                    ratio: [0.02, 0.25, 1.0][round % 3],
                    encoding: enc,
                    ..SyncConfig::v1_0()
                };
                let mut e = engine(1, cfg);
                let first: Vec<f32> = (0..N).map(|_| rng.f32()).collect();
                assert!(!e.generate(&first, fast).expect("finite").is_empty());
                let anchor = e.anchor().to_vec();
                let seq = e.next_seq();
                let mut active: Vec<f32> = first.iter().map(|&x| x + rng.f32() * 100.0).collect();
                let at = rng.below(N as u64) as usize;
                active[at] = if round % 2 == 0 {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                };
                // REQ: DF-GEN-9 -- refused whatever the encoding (F16/BF16 would clamp it)
                let err = e.generate(&active, fast).expect_err("infinite delta");
                assert!(
                    matches!(err, EngineError::NonFinite { .. }),
                    "{enc:?} {err}"
                );
                // REQ: DF-GEN-9 -- no seq consumed, anchor unchanged bit for bit
                assert_eq!(e.next_seq(), seq);
                assert!(
                    e.anchor()
                        .iter()
                        .zip(&anchor)
                        .all(|(a, b)| a.to_bits() == b.to_bits())
                );
            }
        }
    }
}

#[test]
fn nan_delta_is_never_a_candidate() {
    let mut rng = Rng(17);
    for enc in ENCODINGS {
        for round in 0..30 {
            let cfg = SyncConfig {
                ratio: [0.05, 0.5, 1.0][round % 3],
                encoding: enc,
                ..SyncConfig::v1_0()
            };
            let mut e = engine(1, cfg);
            let active: Vec<f32> = (0..N)
                .map(|_| match rng.below(4) {
                    0 => f32::NAN,
                    1 => 0.0,
                    _ => rng.f32(),
                })
                .collect();
            let out = e.generate(&active, false).expect("no infinity");
            for entry in &out {
                for (&i, &v) in entry.indices.iter().zip(&entry.values) {
                    // REQ: DF-GEN-9 -- NaN is not a candidate; no value is non-finite
                    assert!(!active[i as usize].is_nan());
                    assert!(v.is_finite());
                }
            }
            let selected: usize = out.iter().map(|x| x.indices.len()).sum();
            let candidates = active.iter().filter(|x| !x.is_nan() && **x != 0.0).count();
            let k = ((N as f64) * e.config().ratio).ceil().max(1.0) as usize;
            assert_eq!(selected, k.min(N).min(candidates));
        }
    }
}

#[test]
fn manifest_size_bounds() {
    // REQ: DF-MAN-7 -- 1 <= N <= 2^32
    let max = Manifest::new([TensorSpec::new("w", &[65536, 65536])]).expect("2^32 fits");
    assert_eq!(max.num_params(), 1 << 32);
    assert!(
        Manifest::new([
            TensorSpec::new("w", &[65536, 65536]),
            TensorSpec::new("x", &[])
        ])
        .is_err()
    );
    assert!(Manifest::new([TensorSpec::new("w", &[1 << 33])]).is_err());
    let scalar = Manifest::new([TensorSpec::new("s", &[])]).expect("scalar");
    assert_eq!(scalar.num_params(), 1);
    // REQ: DF-MAN-7 -- a node refuses to start with N = 0
    let empty = Manifest::new([TensorSpec::new("z", &[0, 3])]).expect("manifest");
    assert!(Engine::new(empty, SyncConfig::v1_0(), 1, 1, Vec::new()).is_err());
}

#[test]
fn pack_keys_unique_and_relay_entries_whole() {
    let mut rng = Rng(23);
    for round in 0..200 {
        let enc = ENCODINGS[round % 3];
        let limit = PACKET_OVERHEAD_BOUND + entry_size_bound(1) + rng.below(500) as usize;
        let cfg = SyncConfig {
            ratio: 0.1 + 0.9 * (rng.below(10) as f64) / 10.0,
            max_packet_size: limit,
            encoding: enc,
            ..SyncConfig::v1_0()
        };
        let mut e = engine(1, cfg);
        let active: Vec<f32> = (0..N).map(|_| rng.f32()).collect();
        let own = e.generate(&active, false).expect("gen");
        let relay: Vec<OwnedEntry> = (0..rng.below(8) + 1)
            .map(|j| {
                let n = (rng.below(N as u64) + 1) as u32;
                OwnedEntry {
                    origin: 2 + rng.below(3),
                    incarnation: 1 + rng.below(2),
                    seq: 100 + j,
                    hops: 1 + rng.below(3) as u8,
                    indices: (0..n).collect(),
                    values: (0..n).map(|_| rng.f32()).collect(),
                    signature: None,
                }
            })
            .collect();
        let dropped_before = e.relay_dropped_oversize();
        let packets = e.pack(&own, &relay);
        let mut seen: HashMap<(u64, u64, u64), Vec<OwnedEntry>> = HashMap::new();
        for buf in &packets {
            assert!(buf.len() <= limit);
            let p = decode_packet(buf, limit).expect("valid").to_owned_packet();
            let mut keys: Vec<_> = p
                .entries
                .iter()
                .map(|x| (x.origin, x.incarnation, x.seq))
                .collect();
            let total = keys.len();
            keys.sort_unstable();
            keys.dedup();
            // REQ: DF-PKT-11 -- no (origin, incarnation, seq) twice in one packet
            assert_eq!(keys.len(), total);
            for x in p.entries {
                // REQ: DF-PKT-11 -- own entries only with hops 0
                assert!(x.origin != 1 || x.hops == 0);
                seen.entry((x.origin, x.incarnation, x.seq))
                    .or_default()
                    .push(x);
            }
        }
        for x in &own {
            assert_eq!(seen[&(x.origin, x.incarnation, x.seq)].len(), 1);
        }
        let mut dropped = 0;
        for x in &relay {
            match seen.get(&(x.origin, x.incarnation, x.seq)) {
                None => {
                    let mut alone = OwnedPacket::new(1, 1, e.manifest().fingerprint(), enc);
                    alone.entries.push(x.clone());
                    // REQ: DF-RLY-6 -- dropped only when it cannot travel alone, and counted
                    assert!(encode_packet(&alone).len() > limit);
                    dropped += 1;
                }
                Some(got) => {
                    // REQ: DF-RLY-6 -- never split: one whole piece
                    assert_eq!(got.len(), 1);
                    assert_eq!(got[0].indices, x.indices);
                    assert_eq!(got[0].hops, x.hops);
                    let want: Vec<u32> = x
                        .values
                        .iter()
                        .map(|&v| enc.quantize(v).to_bits())
                        .collect();
                    let have: Vec<u32> = got[0].values.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(have, want);
                }
            }
        }
        assert_eq!(e.relay_dropped_oversize() - dropped_before, dropped);
    }
}
