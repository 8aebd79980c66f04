//! Deterministic mutation fuzzing of the decoder: it must never panic, and whatever it accepts
//! must satisfy every context-free rule.

use df_core::snapshot::{ChunkHeader, decode_snapshot_chunk, encode_snapshot_chunk};
use df_core::{ValueEncoding, decode_packet, encode_packet, validate_packet};

use crate::{Rng, sample_packet, small_manifest};

fn mutate(rng: &mut Rng, src: &[u8]) -> Vec<u8> {
    let mut b = src.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        if b.is_empty() {
            b.push(rng.next_u64() as u8);
            continue;
        }
        let len = b.len() as u64;
        match rng.below(8) {
            0 => {
                let i = rng.below(len) as usize;
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len) as usize;
                b[i] = rng.next_u64() as u8;
            }
            2 if len >= 4 => {
                // overwrite a u32 (offsets, lengths) with a random or extreme value
                let i = (rng.below(len - 3) & !3) as usize;
                let v: u32 = match rng.below(4) {
                    0 => u32::MAX,
                    1 => 0x8000_0000,
                    2 => rng.below(len * 2) as u32,
                    _ => rng.next_u64() as u32,
                };
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            3 => b.truncate(rng.below(len) as usize),
            4 => {
                let extra = rng.below(16) as usize;
                b.extend((0..extra).map(|_| rng.next_u64() as u8));
            }
            5 if len >= 2 => {
                // overwrite a u16 (vtable entries)
                let i = (rng.below(len - 1) & !1) as usize;
                let v = rng.next_u64() as u16;
                b[i..i + 2].copy_from_slice(&v.to_le_bytes());
            }
            6 => {
                let i = rng.below(len) as usize;
                let j = rng.below(len) as usize;
                b.swap(i, j);
            }
            _ => {
                let i = rng.below(len) as usize;
                b.insert(i, rng.next_u64() as u8);
            }
        }
    }
    b
}

#[test]
fn decoder_never_panics_on_mutations() {
    // REQ: DF-RCV-1
    let m = small_manifest();
    let fp = m.fingerprint();
    let seeds: Vec<Vec<u8>> = [
        (ValueEncoding::F32, 3, 4),
        (ValueEncoding::F16, 2, 5),
        (ValueEncoding::BF16, 1, 7),
        (ValueEncoding::F32, 0, 0),
    ]
    .iter()
    .map(|&(e, k, n)| encode_packet(&sample_packet(fp, e, k, n)))
    .collect();
    let mut rng = Rng(0x5eed);
    let mut accepted = 0usize;
    let mut codes = std::collections::HashSet::new();
    for it in 0..30_000usize {
        let src = &seeds[it % seeds.len()];
        let buf = mutate(&mut rng, src);
        // odd start offsets exercise the unaligned paths too
        let mut shifted = vec![0u8; buf.len() + 1];
        shifted[1..].copy_from_slice(&buf);
        let view = if it % 2 == 0 { &buf[..] } else { &shifted[1..] };
        match decode_packet(view, 1 << 20) {
            Ok(p) => {
                accepted += 1;
                for e in &p.entries {
                    assert!(!e.indices.is_empty());
                    assert_eq!(e.indices.len(), e.values.len());
                    assert!(e.indices.windows(2).all(|w| w[0] < w[1]));
                    assert!(e.values.iter().all(|v| v.is_finite()));
                    assert!(e.origin != 0 && e.incarnation != 0 && e.seq != 0);
                }
                let _ = validate_packet(&p, &fp, 101, 16);
            }
            Err(e) => {
                codes.insert(e.code);
            }
        }
    }
    assert!(accepted > 0, "some mutations keep the packet valid");
    assert!(codes.len() >= 5, "mutations reach several codes: {codes:?}");
    // pure garbage behind a valid identifier
    for len in 8..200usize {
        for _ in 0..20 {
            let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            b[4..8].copy_from_slice(b"DFP1");
            let _ = decode_packet(&b, 1 << 20);
        }
    }
}

#[test]
fn snapshot_decoder_never_panics() {
    let h = ChunkHeader {
        node: 1,
        incarnation: 2,
        fingerprint: [3; 32],
        snapshot_id: 4,
        total: 10,
        digest: [5; 32],
    };
    let good = encode_snapshot_chunk(&h, 2, &[1.0, 2.0, 3.0]);
    let c = decode_snapshot_chunk(&good).expect("valid chunk");
    assert_eq!(
        (c.offset, c.total, &c.values[..]),
        (2, 10, &[1.0f32, 2.0, 3.0][..])
    );
    assert!(decode_snapshot_chunk(&encode_snapshot_chunk(&h, 9, &[1.0, 2.0])).is_err());
    let mut rng = Rng(77);
    for _ in 0..5_000 {
        let b = mutate(&mut rng, &good);
        let _ = decode_snapshot_chunk(&b);
    }
}
