use df_core::encodings::Carrier;
use df_core::generated::packet::deltafabric::v_1 as fb;
use df_core::wire::{packet_from_json, packet_to_json};
use df_core::{
    DEFAULT_MAX_PACKET_SIZE, ErrorCode, OwnedEntry, ValueEncoding, decode_packet, encode_packet,
    validate_packet,
};

use crate::{sample_packet, small_manifest};

fn code(buf: &[u8]) -> Option<ErrorCode> {
    decode_packet(buf, DEFAULT_MAX_PACKET_SIZE)
        .err()
        .map(|e| e.code)
}

#[test]
fn roundtrip_all_encodings() {
    // REQ: DF-PKT-1
    let fp = small_manifest().fingerprint();
    for enc in [ValueEncoding::F32, ValueEncoding::F16, ValueEncoding::BF16] {
        let p = sample_packet(fp, enc, 3, 4);
        let buf = encode_packet(&p);
        assert_eq!(&buf[4..8], b"DFP1");
        let d = decode_packet(&buf, DEFAULT_MAX_PACKET_SIZE).expect("decodes");
        validate_packet(&d, &fp, 101, 16).expect("valid");
        let o = d.to_owned_packet();
        assert_eq!(o.sender, p.sender);
        assert_eq!(o.encoding, enc);
        for (a, b) in o.entries.iter().zip(&p.entries) {
            assert_eq!(a.indices, b.indices);
            let q: Vec<u32> = b
                .values
                .iter()
                .map(|&v| enc.quantize(v).to_bits())
                .collect();
            let got: Vec<u32> = a.values.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, q);
        }
        // JSON round trip
        let j = packet_to_json(&d);
        let back = packet_from_json(&j).expect("parses");
        assert_eq!(back.entries.len(), 3);
        assert_eq!(j["encoding"], enc.name());
    }
}

#[test]
fn unaligned_buffer_decodes_the_same() {
    // REQ: DF-PKT-6
    let fp = small_manifest().fingerprint();
    let buf = encode_packet(&sample_packet(fp, ValueEncoding::F32, 2, 5));
    let mut shifted = vec![0u8; buf.len() + 1];
    shifted[1..].copy_from_slice(&buf);
    let a = decode_packet(&buf, DEFAULT_MAX_PACKET_SIZE).expect("aligned");
    let b = decode_packet(&shifted[1..], DEFAULT_MAX_PACKET_SIZE).expect("unaligned");
    assert_eq!(a, b);
    // the fast path borrows
    let ok = fb::root_as_packet(&buf).expect("verifies");
    assert!(ok.entries().get(0).values().is_some());
    if buf.as_ptr().align_offset(4) == 0 {
        assert!(matches!(a.entries[0].values, std::borrow::Cow::Borrowed(_)));
    }
}

/// f32 -> 16-bit pattern and back.
type Bits16 = (fn(f32) -> u16, fn(u16) -> f32);

/// The 16-bit conversions of an encoding's row of the table.
fn bits16(enc: ValueEncoding) -> Bits16 {
    match enc.codec().carrier {
        Carrier::Values16 { encode, decode } => (encode, decode),
        Carrier::Values32 | Carrier::Values8 => {
            panic!("{} is not a 16-bit encoding", enc.name())
        }
    }
}

#[test]
fn encodings_round_and_clamp() {
    // REQ: DF-GEN-4
    let (f32_to_f16_bits, f16_bits_to_f32) = bits16(ValueEncoding::F16);
    let (f32_to_bf16_bits, bf16_bits_to_f32) = bits16(ValueEncoding::BF16);
    assert_eq!(f16_bits_to_f32(f32_to_f16_bits(1.0e9)), 65504.0);
    assert_eq!(f16_bits_to_f32(f32_to_f16_bits(-1.0e9)), -65504.0);
    assert_eq!(f16_bits_to_f32(f32_to_f16_bits(f32::INFINITY)), 65504.0);
    assert!(f16_bits_to_f32(f32_to_f16_bits(f32::NAN)).is_nan());
    assert_eq!(
        bf16_bits_to_f32(f32_to_bf16_bits(f32::MAX)),
        f32::from_bits(0x7F7F_0000)
    );
    assert_eq!(f32_to_bf16_bits(f32::NEG_INFINITY), 0xFF7F);
    assert_eq!(f32_to_bf16_bits(f32::NAN) & 0x7FC0, 0x7FC0);
    // ties to even: 1 + 2^-8 is halfway between two bf16 values -> even (1.0)
    assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3F80_8000)), 0x3F80);
    assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3F81_8000)), 0x3F82);
    // f16 ties to even: 1 + 2^-11 -> 1.0
    assert_eq!(f32_to_f16_bits(1.0 + 2f32.powi(-11)), 0x3C00);
    for x in [0.1f32, -3.3, 1e-7, 6.0e-8] {
        let q = ValueEncoding::F16.quantize(x);
        assert_eq!(ValueEncoding::F16.quantize(q), q);
    }
}

#[test]
fn context_checks() {
    // REQ: DF-ERR-6
    let m = small_manifest();
    let fp = m.fingerprint();
    let mut p = sample_packet(fp, ValueEncoding::F32, 1, 3);
    let buf = encode_packet(&p);
    let d = decode_packet(&buf, DEFAULT_MAX_PACKET_SIZE).expect("ok");
    let other = [7u8; 32];
    assert_eq!(
        validate_packet(&d, &other, 101, 16).map_err(|e| e.code),
        Err(ErrorCode::FingerprintMismatch)
    );
    // REQ: DF-ERR-10
    assert_eq!(
        validate_packet(&d, &fp, 6, 16).map_err(|e| e.code),
        Err(ErrorCode::IndexOutOfRange)
    );
    // REQ: DF-ERR-7
    p.entries[0].hops = 17;
    let buf = encode_packet(&p);
    let d = decode_packet(&buf, DEFAULT_MAX_PACKET_SIZE).expect("ok");
    assert_eq!(
        validate_packet(&d, &fp, 101, 16).map_err(|e| e.code),
        Err(ErrorCode::HopLimit)
    );
}

#[test]
fn semantic_faults() {
    let fp = small_manifest().fingerprint();
    let base = sample_packet(fp, ValueEncoding::F32, 1, 3);
    let with = |f: &dyn Fn(&mut df_core::OwnedPacket)| {
        let mut p = base.clone();
        f(&mut p);
        code(&encode_packet(&p))
    };
    assert_eq!(with(&|_| {}), None);
    // REQ: DF-ERR-1
    assert_eq!(
        decode_packet(&encode_packet(&base), 10)
            .map_err(|e| e.code)
            .err(),
        Some(ErrorCode::Oversize)
    );
    // REQ: DF-ERR-2
    assert_eq!(code(b"1234"), Some(ErrorCode::BadIdentifier));
    assert_eq!(code(b"\0\0\0\0DFP2xxxx"), Some(ErrorCode::BadIdentifier));
    // REQ: DF-ERR-3
    assert_eq!(with(&|p| p.sender = 0), Some(ErrorCode::Malformed));
    assert_eq!(with(&|p| p.entries[0].seq = 0), Some(ErrorCode::Malformed));
    assert_eq!(
        with(&|p| p.entries[0].origin = 0),
        Some(ErrorCode::Malformed)
    );
    assert_eq!(
        with(&|p| p.entries[0].incarnation = 0),
        Some(ErrorCode::Malformed)
    );
    assert_eq!(
        with(&|p| p.fingerprint.pop().map(|_| ()).unwrap_or(())),
        Some(ErrorCode::Malformed)
    );
    assert_eq!(code(b"\0\0\0\0DFP1"), Some(ErrorCode::Malformed));
    // REQ: DF-ERR-4
    assert_eq!(
        with(&|p| p.version_major = 2),
        Some(ErrorCode::UnsupportedVersion)
    );
    assert_eq!(
        with(&|p| p.version_major = 0),
        Some(ErrorCode::UnsupportedVersion)
    );
    // REQ: DF-ERR-8
    assert_eq!(
        with(&|p| {
            p.entries[0].values.pop();
        }),
        Some(ErrorCode::LengthMismatch)
    );
    // REQ: DF-ERR-9
    assert_eq!(
        with(&|p| {
            p.entries[0].values.clear();
            p.entries[0].indices.clear();
        }),
        Some(ErrorCode::EmptyEntry)
    );
    // REQ: DF-ERR-11
    assert_eq!(
        with(&|p| p.entries[0].indices = vec![5, 2, 9]),
        Some(ErrorCode::UnsortedIndices)
    );
    // REQ: DF-ERR-12
    assert_eq!(
        with(&|p| p.entries[0].indices = vec![2, 2, 9]),
        Some(ErrorCode::DuplicateIndex)
    );
    // REQ: DF-ERR-13
    assert_eq!(
        with(&|p| p.entries[0].values[1] = f32::NAN),
        Some(ErrorCode::NonFinite)
    );
    assert_eq!(
        with(&|p| p.entries[0].values[1] = f32::NEG_INFINITY),
        Some(ErrorCode::NonFinite)
    );
    // zero entries: valid no-op (DF-PKT)
    assert_eq!(with(&|p| p.entries.clear()), None);
}

#[test]
fn unknown_encoding_and_mismatched_vectors() {
    // REQ: DF-ERR-5
    let fp = small_manifest().fingerprint();
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let fpv = b.create_vector(&fp[..]);
    let entries = b.create_vector::<flatbuffers::WIPOffset<fb::Entry<'_>>>(&[]);
    let root = fb::Packet::create(
        &mut b,
        &fb::PacketArgs {
            version_major: 1,
            version_minor: 0,
            sender: 1,
            sender_incarnation: 1,
            fingerprint: Some(fpv),
            encoding: fb::ValueEncoding(9),
            entries: Some(entries),
            heard: None,
            ..Default::default()
        },
    );
    fb::finish_packet_buffer(&mut b, root);
    assert_eq!(
        code(b.finished_data()),
        Some(ErrorCode::UnsupportedEncoding)
    );

    // values16 in an F32 packet -> MALFORMED
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let idx = b.create_vector(&[1u32][..]);
    let v16 = b.create_vector(&[0x3C00u16][..]);
    let e = fb::Entry::create(
        &mut b,
        &fb::EntryArgs {
            origin: 2,
            incarnation: 2,
            seq: 1,
            hops: 0,
            indices: Some(idx),
            values: None,
            values16: Some(v16),
            ..Default::default()
        },
    );
    let entries = b.create_vector(&[e][..]);
    let fpv = b.create_vector(&fp[..]);
    let root = fb::Packet::create(
        &mut b,
        &fb::PacketArgs {
            version_major: 1,
            version_minor: 0,
            sender: 1,
            sender_incarnation: 1,
            fingerprint: Some(fpv),
            encoding: fb::ValueEncoding::F32,
            entries: Some(entries),
            heard: None,
            ..Default::default()
        },
    );
    fb::finish_packet_buffer(&mut b, root);
    assert_eq!(code(b.finished_data()), Some(ErrorCode::Malformed));
}

#[test]
fn error_code_strings() {
    for c in ErrorCode::ALL {
        assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
    }
    assert_eq!(ErrorCode::Malformed.as_str(), "MALFORMED");
    assert_eq!(ErrorCode::NonFinite.to_string(), "NON_FINITE");
}

#[test]
fn manifest_fingerprint_text() {
    // REQ: DF-MAN-5
    let m = small_manifest();
    assert_eq!(
        m.canonical_text(),
        "deltafabric-manifest/1\nlayer.bias\tf32\t10\nlayer.weight\tf32\t10,9\nscale\tf32\t\n"
    );
    // REQ: DF-MAN-2
    let names: Vec<&str> = m.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["layer.bias", "layer.weight", "scale"]);
    assert_eq!(m.num_params(), 101);
    assert_eq!(m.offsets(), &[0, 10, 100, 101]);
    // REQ: DF-MAN-1
    assert!(df_core::Manifest::new([df_core::TensorSpec::new("a\tb", &[1])]).is_err());
    assert!(df_core::Manifest::new([df_core::TensorSpec::new("", &[1])]).is_err());
    assert!(
        df_core::Manifest::new([
            df_core::TensorSpec::new("a", &[1]),
            df_core::TensorSpec::new("a", &[2])
        ])
        .is_err()
    );
    let j = m.to_json();
    assert_eq!(df_core::Manifest::from_json(&j).expect("parses"), m);
}

#[test]
fn own_entry_encode_sizes_within_bound() {
    // REQ: DF-GEN-6
    let fp = small_manifest().fingerprint();
    for n in [1u32, 7, 100, 1000] {
        for enc in [ValueEncoding::F32, ValueEncoding::F16] {
            let mut p = df_core::OwnedPacket::new(1, 1, fp, enc);
            p.entries.push(OwnedEntry {
                origin: u64::MAX,
                incarnation: u64::MAX,
                seq: u64::MAX,
                hops: 255,
                indices: (0..n).collect(),
                values: vec![1.0; n as usize],
                signature: None,
            });
            let len = encode_packet(&p).len();
            assert!(
                len <= df_core::wire::PACKET_OVERHEAD_BOUND
                    + df_core::wire::entry_size_bound(n as usize)
            );
        }
    }
}

#[test]
fn value_encoding_wire_values_and_names_round_trip() {
    // the API's lookups by wire value and by name (the config reader takes names only, DF-PAR-261)
    for enc in [
        ValueEncoding::F32,
        ValueEncoding::F16,
        ValueEncoding::BF16,
        ValueEncoding::Q8,
    ] {
        assert_eq!(ValueEncoding::from_u8(enc.to_u8()), Some(enc));
        assert_eq!(ValueEncoding::from_name(enc.name()), Some(enc));
    }
    assert_eq!(ValueEncoding::from_u8(1), Some(ValueEncoding::F16));
    assert_eq!(ValueEncoding::from_u8(4), None);
    assert_eq!(ValueEncoding::from_name("f16"), None);
}
