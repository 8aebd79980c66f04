//! Anti-entropy by gap repair (spec section 7.9): the vectors of `conformance/vectors/repair`
//! against `df_core::repair`.

use std::path::{Path, PathBuf};

use df_core::OwnedEntry;
use df_core::repair::{
    GapParams, GapTracker, RepairRequest, ResendBuffer, ResendParams, decode_request,
    encode_request,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn load(name: &str) -> Value {
    let dir: PathBuf = match std::env::var_os("DF_CONFORMANCE_VECTORS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../conformance/vectors"),
    };
    let text = std::fs::read_to_string(dir.join("repair").join(name)).expect("vector file");
    serde_json::from_str(&text).expect("vector json")
}

fn u(v: &Value) -> u64 {
    v.as_u64().expect("u64")
}

fn fp() -> [u8; 32] {
    Sha256::digest(b"repair-vectors").into()
}

#[test]
fn request_vectors() {
    // REQ: DF-RCV-160, DF-RCV-161
    let data = load("requests.json");
    for v in data["valid"].as_array().expect("valid") {
        let w = &v["request"];
        let mut f = [0u8; 32];
        f.copy_from_slice(&hex::decode(w["fingerprint"].as_str().expect("fp")).expect("hex"));
        let req = RepairRequest {
            sender: u(&w["sender"]),
            sender_incarnation: u(&w["sender_incarnation"]),
            fingerprint: f,
            origin: u(&w["origin"]),
            incarnation: u(&w["incarnation"]),
            seqs: w["seqs"].as_array().expect("seqs").iter().map(u).collect(),
            version_minor: u16::try_from(u(&w["version_minor"])).expect("u16"),
        };
        let buf = hex::decode(v["hex"].as_str().expect("hex")).expect("hex");
        assert_eq!(decode_request(&buf).as_ref(), Ok(&req), "{}", v["id"]);
        // FlatBuffers builders lay tables out differently per language: the bytes may differ, the
        // request read back may not.
        let ours = encode_request(&req).expect("encode");
        assert_eq!(decode_request(&ours).as_ref(), Ok(&req), "{}", v["id"]);
    }
    let invalid = data["invalid"].as_array().expect("invalid");
    assert!(invalid.len() >= 7);
    for v in invalid {
        let buf = hex::decode(v["hex"].as_str().expect("hex")).expect("hex");
        let e = decode_request(&buf).expect_err("must be refused");
        assert_eq!(
            e.kind.as_str(),
            v["expect"].as_str().expect("expect"),
            "{}",
            v["id"]
        );
    }
}

#[test]
fn gap_vectors() {
    // REQ: DF-RCV-162, DF-RCV-163, DF-RCV-230
    for case in load("gaps.json")["cases"].as_array().expect("cases") {
        let p = &case["params"];
        let mut g = GapTracker::new(GapParams {
            window: u(&p["window"]),
            delay: u(&p["delay"]),
            retry: u(&p["retry"]),
            attempts: u(&p["attempts"]),
            max_requests: usize::try_from(u(&p["max_requests"])).expect("usize"),
        })
        .expect("params");
        for (i, rnd) in case["rounds"]
            .as_array()
            .expect("rounds")
            .iter()
            .enumerate()
        {
            for a in rnd["accepted"].as_array().expect("accepted") {
                g.observe(u(&a[0]), u(&a[1]), u(&a[2]));
            }
            let want: Vec<(u64, u64, Vec<u64>)> = rnd["requests"]
                .as_array()
                .expect("requests")
                .iter()
                .map(|r| {
                    let seqs = r[2].as_array().expect("seqs").iter().map(u).collect();
                    (u(&r[0]), u(&r[1]), seqs)
                })
                .collect();
            let live: Option<std::collections::BTreeSet<u64>> = rnd
                .get("reachable")
                .map(|r| r.as_array().expect("reachable").iter().map(u).collect());
            assert_eq!(
                g.round_reachable(live.as_ref()),
                want,
                "{} round {i}",
                case["id"]
            );
        }
        assert_eq!(
            g.counters.seqs_given_up,
            u(&case["seqs_given_up"]),
            "{}",
            case["id"]
        );
    }
}

#[test]
fn resend_vectors() {
    // REQ: DF-RCV-164
    for case in load("resend.json")["cases"].as_array().expect("cases") {
        let (node, inc) = (u(&case["node"]), u(&case["incarnation"]));
        let p = &case["params"];
        let us = |k: &str| usize::try_from(u(&p[k])).expect("usize");
        let mut buf = ResendBuffer::new(
            node,
            inc,
            fp(),
            ResendParams {
                max_entries: us("max_entries"),
                max_values: us("max_values"),
                max_values_per_round: us("max_values_per_round"),
                max_pending: us("max_pending"),
            },
        )
        .expect("params");
        for op in case["ops"].as_array().expect("ops") {
            if let Some(add) = op.get("add") {
                let entries: Vec<OwnedEntry> = add
                    .as_array()
                    .expect("add")
                    .iter()
                    .map(|x| {
                        let n = u32::try_from(u(&x[1])).expect("u32");
                        OwnedEntry {
                            origin: node,
                            incarnation: inc,
                            seq: u(&x[0]),
                            hops: 0,
                            indices: (0..n).collect(),
                            values: vec![1.0; n as usize],
                            signature: None,
                        }
                    })
                    .collect();
                buf.add(&entries);
                assert_eq!(buf.held() as u64, u(&op["held"]), "{}", case["id"]);
            } else if let Some(r) = op.get("request") {
                let req = RepairRequest {
                    sender: 0x0B,
                    sender_incarnation: 7,
                    fingerprint: if r.get("fingerprint_ok") == Some(&Value::Bool(false)) {
                        [0u8; 32]
                    } else {
                        fp()
                    },
                    origin: r.get("origin").map_or(node, u),
                    incarnation: r.get("incarnation").map_or(inc, u),
                    seqs: r["seqs"].as_array().expect("seqs").iter().map(u).collect(),
                    version_minor: 1,
                };
                assert_eq!(
                    buf.request(&req),
                    op["queued"].as_bool().expect("queued"),
                    "{}",
                    case["id"]
                );
                assert_eq!(buf.pending() as u64, u(&op["pending"]), "{}", case["id"]);
            } else {
                let took = buf.take();
                let seqs: Vec<u64> = took.iter().map(|e| e.seq).collect();
                let want: Vec<u64> = op["take"].as_array().expect("take").iter().map(u).collect();
                assert_eq!(seqs, want, "{}", case["id"]);
                assert!(took.iter().all(|e| e.hops == 0 && e.origin == node));
            }
        }
        for (name, v) in buf.counters.pairs() {
            assert_eq!(v, u(&case["counters"][name]), "{} {name}", case["id"]);
        }
    }
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
