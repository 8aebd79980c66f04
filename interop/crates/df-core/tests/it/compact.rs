//! The compact-encodings proposal's reference codecs (spec/proposals/compact-encodings.md): the
//! same bytes, values and error codes as the Python `delta_fabric.compact` (tests/test_compact.py).

use df_core::ErrorCode;
use df_core::compact::{
    FORM_BITMAP, FORM_DELTA, decode_indices, encode_bitmap, encode_delta, encode_indices,
    q8_decode, q8_encode, q8_quantize,
};

use crate::Rng;

#[test]
fn examples_match_the_python_reference() {
    assert_eq!(
        encode_delta(&[3, 7, 307]).unwrap(),
        [FORM_DELTA, 0x03, 0x04, 0xAC, 0x02]
    );
    assert_eq!(
        encode_bitmap(&[8, 9, 11, 16]).unwrap(),
        [FORM_BITMAP, 8, 0b0000_1011, 0b0000_0001]
    );
    let big = [3, 7, 307, u32::MAX];
    let b = encode_delta(&big).unwrap();
    assert_eq!(b.len(), 10);
    assert_eq!(decode_indices(&b).unwrap(), big);
    // Q8: scale = fl32(fl32(1.27) / 127), q rounded to even, decoded fl32(q * scale)
    let (scale, q) = q8_encode(&[0.5, -1.27, 0.005]).unwrap();
    assert_eq!(scale.to_bits(), 0x3c23_d70a); // 0.009999999776482582

    assert_eq!(q, [50, -127, 0]);
    let dec: Vec<u32> = q8_decode(scale, &q)
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(dec, [0x3f00_0000, 0xbfa2_8f5c, 0]); // 0.5, -1.2699999809265137, +0
    assert_eq!(
        q8_quantize(&[0.5, -1.27, 0.005]).unwrap(),
        q8_decode(scale, &q).unwrap()
    );
}

#[test]
fn roundtrip_and_shorter_form() {
    let mut rng = Rng(5);
    for density in [0.01, 0.05, 0.2, 0.6, 1.0] {
        let idx: Vec<u32> = (0..20_000u32)
            .filter(|_| (rng.below(1_000_000) as f64) < density * 1e6)
            .collect();
        let b = encode_indices(&idx).unwrap();
        let d = encode_delta(&idx).unwrap().len();
        let m = encode_bitmap(&idx).unwrap().len();
        assert_eq!(b.len(), d.min(m));
        assert_eq!(decode_indices(&b).unwrap(), idx);
    }
    assert!(encode_delta(&[]).is_err());
    assert!(encode_delta(&[3, 3]).is_err());
}

#[test]
fn invalid_packed_indices() {
    use ErrorCode::{DuplicateIndex, EmptyEntry, Malformed};
    let cases: [(&[u8], ErrorCode); 14] = [
        (&[], Malformed),
        (&[7, 1], Malformed),
        (&[FORM_DELTA], EmptyEntry),
        (&[FORM_DELTA, 0x83], Malformed),
        (&[FORM_DELTA, 0x80, 0x00], Malformed),
        (&[FORM_DELTA, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], Malformed),
        (&[FORM_DELTA, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F], Malformed),
        (&[FORM_DELTA, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01], Malformed),
        (&[FORM_DELTA, 0x05, 0x00], DuplicateIndex),
        (&[FORM_BITMAP, 0x05], EmptyEntry),
        (&[FORM_BITMAP, 0x05, 0x00], EmptyEntry),
        (&[FORM_BITMAP, 0x05, 0x01, 0x00], Malformed),
        (&[FORM_BITMAP, 0x85], Malformed),
        (
            &[FORM_BITMAP, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x02],
            Malformed,
        ),
    ];
    for (data, code) in cases {
        assert_eq!(
            decode_indices(data).map_err(|e| e.code),
            Err(code),
            "{data:02x?}"
        );
    }
}

#[test]
fn q8_edge_cases() {
    let (scale, q) = q8_encode(&[1e-45, -1e-45]).unwrap();
    assert_eq!((scale, q), (0.0, vec![0, 0]));
    assert!(q8_encode(&[f32::INFINITY]).is_none());
    assert_eq!(
        q8_decode(f32::NAN, &[1]).map_err(|e| e.code),
        Err(ErrorCode::NonFinite)
    );
    assert_eq!(
        q8_decode(-1.0, &[1]).map_err(|e| e.code),
        Err(ErrorCode::Malformed)
    );
    assert_eq!(q8_decode(0.5, &[-128]).unwrap(), [-64.0]);
    // error feedback with the decoded value: the residual is at most half a step
    let v = [0.5f32, -1.27, 0.005, 0.00499, 1e-3];
    let (scale, _) = q8_encode(&v).unwrap();
    for (x, y) in v.iter().zip(q8_quantize(&v).unwrap()) {
        assert!((x - y).abs() <= scale / 2.0 * (1.0 + 1e-6));
    }
}
