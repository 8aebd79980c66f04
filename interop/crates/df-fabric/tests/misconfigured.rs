//! A peer whose packets are rejected for a reason that means misconfiguration (another model,
//! protocol version, encoding, keys) is reported once per peer and code at WARNING, naming the peer
//! and what differs, and listed in `stats()["misconfigured_peers"]`.

use std::sync::Mutex;

use df_core::{ErrorCode, Manifest, OwnedPacket, SyncConfig, TensorSpec, encode_packet};
use df_fabric::{Fabric, FabricOptions, MemoryHub, MemoryTransport, Transport, VecStore};

static RECORDS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.target() == df_fabric::LOG_TARGET {
            RECORDS
                .lock()
                .unwrap()
                .push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

fn warnings() -> Vec<String> {
    RECORDS
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, _)| *l == log::Level::Warn)
        .map(|(_, m)| m.clone())
        .collect()
}

fn node(hub: &MemoryHub, id: u64, n: u64) -> Fabric<VecStore, MemoryTransport> {
    let m = Manifest::new([TensorSpec::new("w", &[n])]).unwrap();
    let store = VecStore::new(m, vec![0.5; n as usize]).unwrap();
    let options = FabricOptions {
        incarnation: Some(1),
        max_lead: None, // one thread drives both nodes
        ..FabricOptions::default()
    };
    let config = SyncConfig {
        sync_interval: 1,
        ..SyncConfig::default()
    };
    Fabric::with_options(store, hub.join(id, &[]).unwrap(), config, options).unwrap()
}

#[test]
fn another_model_another_version_and_another_encoding_are_reported_once() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 8);
    let mut b = node(&hub, 2, 9);
    for _ in 0..5 {
        for (i, w) in a.store_mut().values_mut().iter_mut().enumerate() {
            *w += i as f32 * 0.01;
        }
        a.step().unwrap();
        for (i, w) in b.store_mut().values_mut().iter_mut().enumerate() {
            *w -= i as f32 * 0.01;
        }
        b.step().unwrap();
    }
    a.poll().unwrap();
    let rejected = a
        .engine()
        .unwrap()
        .counters()
        .error(ErrorCode::FingerprintMismatch);
    assert!(rejected >= 2, "{rejected}");
    let stats = a.stats();
    assert_eq!(
        stats["misconfigured_peers"],
        serde_json::json!({"0000000000000002": "FINGERPRINT_MISMATCH"})
    );
    assert_eq!(
        b.stats()["misconfigured_peers"],
        serde_json::json!({"0000000000000001": "FINGERPRINT_MISMATCH"})
    );
    let fa = stats["fingerprint"].as_str().unwrap()[..16].to_owned();
    let fb = b.stats()["fingerprint"].as_str().unwrap()[..16].to_owned();
    let w = warnings();
    let about_b: Vec<&String> = w
        .iter()
        .filter(|m| m.starts_with("node 0000000000000002 "))
        .collect();
    assert_eq!(about_b.len(), 1, "{w:?}");
    assert_eq!(
        about_b[0],
        &format!(
            "node 0000000000000002 has another model: fingerprint {fb}... against this node's \
             {fa}... (N=8; check the model, include_buffers and the framework mapping): its \
             packets are rejected (FINGERPRINT_MISMATCH)"
        )
    );
    assert_eq!(
        w.iter()
            .filter(|m| m.starts_with("node 0000000000000001 "))
            .count(),
        1
    );
    // a peer of another model is out of this node's cluster: not averaged over, not waited for
    a.step().unwrap();
    assert_eq!(a.cluster_size().unwrap(), 1);
    assert_eq!(a.stats()["average_over"], 1);
    a.finish(std::time::Duration::from_secs(2)).unwrap();

    // another protocol version and an encoding this node does not receive, from a third sender
    let spy = hub.join(3, &[]).unwrap();
    let fp = a.engine().unwrap().manifest().fingerprint();
    let mut p = OwnedPacket::new(3, 1, fp, df_core::ValueEncoding::F32);
    p.version_major = 2;
    spy.publish(&encode_packet(&p)).unwrap();
    spy.publish(&encode_packet(&p)).unwrap();
    a.poll().unwrap();
    let w = warnings();
    let about_c: Vec<&String> = w
        .iter()
        .filter(|m| m.starts_with("node 0000000000000003 "))
        .collect();
    assert_eq!(about_c.len(), 1, "{w:?}");
    assert_eq!(
        about_c[0],
        "node 0000000000000003 speaks protocol 2.1, this node 1.x: its packets are rejected \
         (UNSUPPORTED_VERSION)"
    );
    assert_eq!(
        a.stats()["misconfigured_peers"]["0000000000000003"],
        "UNSUPPORTED_VERSION"
    );
}
