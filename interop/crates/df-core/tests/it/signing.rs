//! Signed entries (spec 1.1 section 13.1): message, key binding, the engine's signing, verification,
//! per-hop damping and relay of the origin's signature. The vectors (`vectors.rs`) check the same
//! bytes as the Python reference.

use df_core::signing::{SIGNATURE_DOMAIN, Signing, public_key_of, signed_message};
use df_core::{
    ConfigError, Engine, EngineError, ErrorCode, Manifest, Outcome, SyncConfig, TensorSpec,
    ValueEncoding, decode_packet, encode_packet,
};

fn manifest() -> Manifest {
    Manifest::new([TensorSpec::new("w", &[64])]).expect("manifest")
}

fn seed(n: u64) -> [u8; 32] {
    [n as u8; 32]
}

fn keys() -> Vec<(u64, [u8; 32])> {
    (1..=3).map(|n| (n, public_key_of(&seed(n)))).collect()
}

fn engine(n: u64, alpha: f64, signed: bool) -> Engine {
    let cfg = SyncConfig {
        ratio: 0.25,
        alpha,
        ..SyncConfig::v1_0()
    };
    let mut e = Engine::new(manifest(), cfg, n, 100 + n, vec![0.0; 64]).expect("engine");
    if signed {
        e.set_signing(Some(
            Signing::new(&keys(), Some(seed(n)), Some(n)).expect("keys"),
        ))
        .expect("signed cluster");
    }
    e
}

#[test]
fn message_layout() {
    // REQ: DF-SEC-141
    let fp = [7u8; 32];
    let m = signed_message(&fp, ValueEncoding::F16, 2, 7, 1, &[3, 9], &[0.5, -2.0]);
    let mut want = SIGNATURE_DOMAIN.to_vec();
    want.extend_from_slice(&fp);
    for x in [2u64, 7, 1] {
        want.extend_from_slice(&x.to_le_bytes());
    }
    want.push(1);
    want.extend_from_slice(&2u32.to_le_bytes());
    for i in [3u32, 9] {
        want.extend_from_slice(&i.to_le_bytes());
    }
    for b in [0x3800u16, 0xc000] {
        want.extend_from_slice(&b.to_le_bytes());
    }
    assert_eq!(m, want);
    assert_eq!(SIGNATURE_DOMAIN.len(), 31);
}

#[test]
fn key_binding_errors() {
    // REQ: DF-SEC-145
    assert!(Signing::new(&keys(), Some(seed(3)), Some(2)).is_err());
    assert!(Signing::new(&[(0, public_key_of(&seed(1)))], None, None).is_err());
    let s = Signing::new(&[], Some(seed(2)), Some(2)).expect("own key derived");
    assert!(s.can_sign());
    assert!(
        Signing::from_json(&serde_json::json!({"zz": "00"}), None, None).is_err(),
        "bad keys object"
    );
}

/// Node 1 generates; node 2 relays to node 3 (a line), for 4 rounds; the active weights.
fn line(signed: bool) -> Vec<Vec<f32>> {
    let mut eng: Vec<Engine> = (1..=3).map(|n| engine(n, 0.5, signed)).collect();
    let mut act = vec![vec![0.0f32; 64]; 3];
    let mut x = 0x1234_5678u64;
    for _ in 0..4 {
        for v in act[0].iter_mut() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *v += ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
        }
        let own = eng[0].generate(&act[0], false).expect("generate");
        let out1 = eng[0].pack(&own, &[]);
        let r2 = eng[1].receive(&out1.iter().map(Vec::as_slice).collect::<Vec<_>>());
        r2.apply_to(&mut act[1]);
        let out2 = eng[1].pack(&[], &r2.relay);
        let r3 = eng[2].receive(&out2.iter().map(Vec::as_slice).collect::<Vec<_>>());
        r3.apply_to(&mut act[2]);
        assert_eq!(r3.accepted.len(), own.len());
        if signed {
            let sent = decode_packet(&out1[0], 1 << 24).expect("decodes");
            let relayed = decode_packet(&out2[0], 1 << 24).expect("decodes");
            // REQ: DF-RLY-140
            assert_eq!(relayed.entries[0].signature, sent.entries[0].signature);
            assert_eq!(relayed.entries[0].values, sent.entries[0].values);
            assert_eq!(relayed.entries[0].hops, 1);
        }
    }
    act
}

#[test]
fn signed_cluster_applies_what_an_unsigned_one_applies() {
    // REQ: DF-RCV-140, DF-RLY-140, DF-SEC-140
    let a = line(true);
    let b = line(false);
    for (x, y) in a.iter().zip(&b) {
        let bx: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
        let by: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
        assert_eq!(bx, by);
    }
}

#[test]
fn forged_and_tampered_packets_are_bad_signature_and_change_nothing() {
    // REQ: DF-SEC-142, DF-SEC-146, DF-ERR-140, DF-RCV-1, DF-RCV-141
    let mut origin = engine(2, 1.0, true);
    let active: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let own = origin.generate(&active, false).expect("generate");
    let good = origin.pack_packets(&own, &[]).remove(0);
    let mut rx = engine(3, 1.0, true);
    let anchor = rx.anchor().to_vec();
    let mut forged = Vec::new();
    for k in 0..5 {
        let mut p = good.clone();
        match k {
            0 => p.entries[0].incarnation += 1, // replay under incarnation + 1
            1 => p.entries[0].seq = u64::MAX,
            2 => p.entries[0].signature = None,
            3 => p.entries[0].values[0] *= 2.0,
            _ => p.encoding = ValueEncoding::F16,
        }
        forged.push(encode_packet(&p));
    }
    let r = rx.receive(&forged.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert!(
        r.outcomes
            .iter()
            .all(|o| *o == Outcome::Rejected(ErrorCode::BadSignature))
    );
    assert_eq!(r.counters.error(ErrorCode::BadSignature), 5);
    assert!(r.relay.is_empty() && r.indices.is_empty());
    assert_eq!(rx.anchor(), &anchor[..]);
    let ok = encode_packet(&good);
    assert_eq!(rx.receive(&[&ok]).outcomes, vec![Outcome::Ok]);
    // hops are not signed: a raised hops count still verifies (DF-SEC-144)
    let mut hopped = good.clone();
    hopped.entries[0].hops = 3;
    let mut rx2 = engine(3, 1.0, true);
    assert_eq!(
        rx2.receive(&[&encode_packet(&hopped)]).outcomes,
        vec![Outcome::Ok]
    );
}

#[test]
fn signature_length_is_checked_by_every_decoder() {
    // REQ: DF-PKT-140
    let mut origin = engine(2, 1.0, true);
    let active: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let own = origin.generate(&active, false).expect("generate");
    let mut p = origin.pack_packets(&own, &[]).remove(0);
    for n in [0usize, 63, 65] {
        p.entries[0].signature = Some(vec![1; n]);
        let err = decode_packet(&encode_packet(&p), 1 << 24).expect_err("malformed");
        assert_eq!(err.code, ErrorCode::Malformed);
    }
    // an unsigned receiver ignores the signature and relays without one
    p.entries[0].signature = own[0].signature.clone();
    let mut plain = engine(3, 0.5, false);
    let r = plain.receive(&[&encode_packet(&p)]);
    assert_eq!(r.outcomes, vec![Outcome::Ok]);
    assert!(r.relay.iter().all(|e| e.signature.is_none()));
}

#[test]
fn signed_size_estimate_is_an_upper_bound() {
    // REQ: DF-RLY-141
    for enc in [ValueEncoding::F32, ValueEncoding::F16, ValueEncoding::BF16] {
        for n in [1usize, 2, 3, 7, 64, 65, 300] {
            for k in [1usize, 2, 5] {
                let mut p = df_core::OwnedPacket::new(1, 1, [0; 32], enc);
                for j in 0..k {
                    p.entries.push(df_core::OwnedEntry {
                        origin: 1,
                        incarnation: 1,
                        seq: j as u64 + 1,
                        hops: 0,
                        indices: (0..n as u32).collect(),
                        values: vec![1.0; n],
                        signature: Some(vec![7; 64]),
                    });
                }
                let size = encode_packet(&p).len();
                assert!(
                    size <= df_core::wire::PACKET_OVERHEAD_BOUND
                        + k * df_core::wire::entry_size_bound_signed(n, true)
                );
            }
        }
    }
    assert_eq!(df_core::wire::entry_size_bound_signed(10, true), 304);
}

#[test]
fn a_node_without_its_secret_key_cannot_generate() {
    // REQ: DF-SEC-140
    let mut e = engine(1, 1.0, false);
    e.set_signing(Some(Signing::new(&keys(), None, None).expect("keys")))
        .expect("signed cluster");
    let anchor = e.anchor().to_vec();
    assert!(e.generate(&[1.0; 64], false).is_err());
    assert_eq!(e.anchor(), &anchor[..]);
    assert_eq!(e.next_seq(), 1);
}

#[test]
fn a_signed_cluster_needs_room_for_one_signed_value() {
    // REQ: DF-RLY-141
    // 160 + 128 + 96 + 8 = 392 bytes hold one signed entry of one value; below that no own entry
    // fits, so the engine refuses to sign and stays as it was
    let make = |mps: usize| {
        let cfg = SyncConfig {
            max_packet_size: mps,
            ..SyncConfig::v1_0()
        };
        Engine::new(manifest(), cfg, 1, 101, vec![0.0; 64]).expect("engine")
    };
    let signing = || Signing::new(&keys(), Some(seed(1)), Some(1)).expect("keys");
    let mut e = make(391);
    assert!(matches!(
        e.set_signing(Some(signing())),
        Err(EngineError::Config(ConfigError::OutOfRange {
            name: "max_packet_size",
            ..
        }))
    ));
    assert!(e.signing().is_none());
    assert!(e.set_signing(None).is_ok());
    let mut e = make(392);
    e.set_signing(Some(signing()))
        .expect("392 holds one signed value");
    assert_eq!(e.max_values_per_entry(), 1);
    let mut d = vec![0.0f32; 64];
    d[3] = 1.0;
    d[9] = -2.0;
    let own = e.generate(&d, false).expect("generate");
    let packets = e.pack_packets(&own, &[]);
    assert!(!packets.is_empty());
    for p in &packets {
        let bytes = encode_packet(p);
        assert!(bytes.len() <= 392, "{} bytes", bytes.len());
    }
}
