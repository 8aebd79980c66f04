//! The compact codecs (spec section 6.8, 1.1; REQ: DF-PKT-110, DF-PKT-111): the same bytes, values
//! and error codes as the Python `delta_fabric.compact` (tests/test_compact.py).

use df_core::ErrorCode;
use df_core::compact::{
    FORM_BITMAP, FORM_DELTA, decode_indices, encode_bitmap, encode_delta, encode_indices,
    q8_decode, q8_encode, q8_quantize, q8_scale,
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
    // Q8: scale = the smallest power of two with 127 * scale >= 1.27 (2^-6), q = v / scale
    // rounded to even, decoded fl32(q * scale) (exact)
    let (scale, q) = q8_encode(&[0.5, -1.27, 0.005]).unwrap();
    assert_eq!(scale, 2f32.powi(-6));
    assert_eq!(q, [32, -81, 0]);
    assert_eq!(q8_decode(scale, &q).unwrap(), [0.5, -1.265625, 0.0]);
    assert_eq!(
        q8_quantize(&[0.5, -1.27, 0.005]).unwrap(),
        q8_decode(scale, &q).unwrap()
    );
    // idempotent: the decoded values encode to the same scale and bytes
    let again = q8_encode(&q8_decode(scale, &q).unwrap()).unwrap();
    assert_eq!(again, (scale, q));
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
    let (scale, q) = q8_encode(&[1e-45, -1e-45]).unwrap(); // the smallest subnormal
    assert_eq!((scale.to_bits(), q), (1, vec![1, -1]));
    assert_eq!(q8_encode(&[0.0, -0.0]).unwrap(), (0.0, vec![0, 0]));
    // the largest finite values: q clamped so that q * scale stays finite
    let big = q8_quantize(&[f32::MAX, -f32::MAX]).unwrap();
    assert!(big.iter().all(|v| v.is_finite()));
    assert!(q8_encode(&[f32::INFINITY]).is_none());
    for (s, code) in [
        (f32::NAN, ErrorCode::NonFinite),
        (f32::INFINITY, ErrorCode::NonFinite),
        (f32::NEG_INFINITY, ErrorCode::NonFinite),
        (-1.0, ErrorCode::Malformed),
        (-0.0, ErrorCode::Malformed),
    ] {
        assert_eq!(q8_decode(s, &[1]).map_err(|e| e.code), Err(code), "{s}");
    }
    assert_eq!(q8_decode(0.5, &[-128]).unwrap(), [-64.0]);
    // error feedback with the decoded value: the residual is at most half a step
    let v = [0.5f32, -1.27, 0.005, 0.00499, 1e-3];
    let (scale, _) = q8_encode(&v).unwrap();
    for (x, y) in v.iter().zip(q8_quantize(&v).unwrap()) {
        assert!((x - y).abs() <= scale / 2.0);
    }
}

#[test]
fn q8_scale_is_the_smallest_power_of_two() {
    let mut rng = Rng(11);
    for _ in 0..2000 {
        let m = f32::from_bits(rng.below(0x7F80_0000) as u32); // every finite positive pattern
        if m == 0.0 {
            continue;
        }
        let s = f64::from(q8_scale(&[m]));
        assert!(127.0 * s >= f64::from(m), "{m}");
        assert!(
            127.0 * s / 2.0 < f64::from(m) || s == 2f64.powi(-149),
            "{m}"
        );
        assert_eq!(s.log2().fract(), 0.0, "{m}");
    }
}
