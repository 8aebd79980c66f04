//! Anti-entropy by gap repair (spec section 7.9). The vectors of `conformance/vectors/repair/`
//! (kind `repair`) run in `vectors.rs` through `df_core::repair_io`, as `df-driver` answers them;
//! here: the encoder's refusals called directly, and the trusted-snapshot quorum.

use df_core::repair::{RepairRequest, decode_request, encode_request};

fn request(seqs: Vec<u64>) -> RepairRequest {
    RepairRequest {
        sender: 1,
        sender_incarnation: 1,
        fingerprint: [7; 32],
        origin: 2,
        incarnation: 3,
        seqs,
        version_minor: 1,
    }
}

#[test]
fn encoder_refuses_what_would_not_decode() {
    // REQ: DF-RCV-161
    for bad in [vec![], (1..=257).collect(), vec![2, 1], vec![0, 1]] {
        assert!(encode_request(&request(bad)).is_err());
    }
    let mut zero = request(vec![1]);
    zero.sender_incarnation = 0;
    assert!(encode_request(&zero).is_err());
    let ok = request((1..=256).collect());
    let buf = encode_request(&ok).expect("256 seqs encode");
    assert_eq!(decode_request(&buf), Ok(ok));
}

#[test]
fn confirm_snapshot_rules() {
    use df_core::repair::{DEFAULT_AGREEMENT, anchors_agree, confirm_snapshot};
    use std::collections::BTreeMap;
    let a = vec![1.0f32; 8];
    let scaled = |k: f32| a.iter().map(|x| x * k).collect::<Vec<f32>>();
    assert!(anchors_agree(&a, &scaled(1.04), DEFAULT_AGREEMENT));
    assert!(!anchors_agree(&a, &scaled(1.06), DEFAULT_AGREEMENT));
    assert!(!anchors_agree(&a, &[f32::NAN; 8], DEFAULT_AGREEMENT));
    let anchors = BTreeMap::from([(5, scaled(100.0)), (6, a.clone()), (7, scaled(1.01))]);
    let v = confirm_snapshot(&anchors, 2, DEFAULT_AGREEMENT);
    assert_eq!(v.chosen, Some(6));
    assert_eq!(v.outliers, vec![5]);
    assert_eq!(v.confirmations, BTreeMap::from([(5, 1), (6, 2), (7, 2)]));
    let two = BTreeMap::from([(5, a.clone()), (6, scaled(2.0))]);
    assert_eq!(confirm_snapshot(&two, 2, DEFAULT_AGREEMENT).chosen, None);
}
