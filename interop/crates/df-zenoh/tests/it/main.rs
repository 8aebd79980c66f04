//! Two Zenoh sessions on tcp/127.0.0.1 (random free ports, no scouting): a packet exchange, a
//! liveliness appearance and disappearance, info and a chunked snapshot fetch, all bounded in time.

mod from_env;
mod requirements;
mod tls;

use std::sync::Arc;
use std::time::{Duration, Instant};

use zenoh::Wait;

use df_core::{OwnedEntry, OwnedPacket, ValueEncoding, decode_packet, encode_packet};
use df_zenoh::{
    SnapshotSource, Transport, TransportConfig, TransportError, ZenohTransport, parse_chunk_params,
    parse_node,
};

/// `body` behind the packet identifier at bytes 4..8, so that the pre-queue screen (DF-ZEN-154)
/// lets it through to the queue (these tests move opaque payloads).
pub(crate) fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = b"\0\0\0\0DFP1".to_vec();
    v.extend_from_slice(body);
    v
}

/// A port below the kernel's ephemeral range (never the source port of another connection).
fn free_port() -> u16 {
    df_zenoh::ports::free_port().expect("free port")
}

fn node(id: u64, ns: &str, listen: u16, connect: Option<u16>) -> ZenohTransport {
    let mut c = TransportConfig::new(id);
    c.queue_capacity = 4;
    c.namespace = ns.to_string();
    c.listen = vec![format!("tcp/127.0.0.1:{listen}")];
    c.connect = connect
        .map(|p| vec![format!("tcp/127.0.0.1:{p}")])
        .unwrap_or_default();
    ZenohTransport::open(c).expect("open")
}

#[test]
fn params_and_keys() {
    assert_eq!(
        parse_chunk_params("chunk=2&chunk_size=10", 1 << 20),
        Ok((2, 10))
    );
    assert_eq!(
        parse_chunk_params("chunk_size=10;chunk=0;x=1", 1 << 20),
        Ok((0, 10))
    );
    assert!(parse_chunk_params("chunk=1", 1 << 20).is_err());
    assert!(parse_chunk_params("chunk=1&chunk_size=0", 1 << 20).is_err());
    assert!(parse_chunk_params("chunk=-1&chunk_size=3", 1 << 20).is_err());
    assert!(parse_chunk_params("chunk=1&chunk_size=1000", 2048).is_err());
    assert_eq!(
        parse_node("ns/v1/alive/0a0a000000000001"),
        Some(0x0a0a_0000_0000_0001)
    );
    assert_eq!(parse_node("ns/v1/alive/0A0A000000000001"), None);
    assert_eq!(parse_node("ns/v1/alive/0000000000000000"), None);
    let mut c = TransportConfig::new(0);
    c.listen = vec!["tcp/127.0.0.1:1".into()];
    assert!(matches!(
        ZenohTransport::open(c),
        Err(TransportError::Config(_))
    ));
}

#[test]
fn two_sessions_exchange_liveliness_and_snapshot() {
    // REQ: DF-ZEN-1
    let ns = format!("dftest/{}", std::process::id());
    let (pa, pb) = (free_port(), free_port());
    let a_id = 0x0a0a_0000_0000_0001;
    let b_id = 0x0b0b_0000_0000_0002;
    let a = node(a_id, &ns, pa, None);
    let b = node(b_id, &ns, pb, Some(pa));

    // REQ: DF-ZEN-4 (appearance)
    assert_eq!(
        a.wait_for_peers(1, &[], Duration::from_secs(10))
            .expect("A sees B"),
        [b_id].into()
    );
    assert_eq!(
        b.wait_for_peers(1, &[], Duration::from_secs(10))
            .expect("B sees A"),
        [a_id].into()
    );

    // a packet from A reaches B (publish until the subscription has propagated)
    let fp = [7u8; 32];
    let mut p = OwnedPacket::new(a_id, 9, fp, ValueEncoding::F32);
    p.entries.push(OwnedEntry {
        origin: a_id,
        incarnation: 9,
        seq: 1,
        hops: 0,
        indices: vec![1, 5],
        values: vec![0.5, -1.0],
        signature: None,
    });
    let buf = encode_packet(&p);
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        a.publish(&buf).expect("publish");
        if b.wait_for_packets(Duration::from_millis(200))
            .expect("open")
        {
            break b.drain(usize::MAX).expect("open");
        }
        assert!(Instant::now() < deadline, "no packet within 10 s");
    };
    let d = decode_packet(&got[0], 1 << 24).expect("decodes");
    assert_eq!(d.sender, a_id);
    assert_eq!(&d.entries[0].values[..], &[0.5f32, -1.0][..]);
    assert!(
        a.drain(usize::MAX).expect("open").is_empty(),
        "A ignores its own key"
    );
    assert!(b.stats().received_packets >= 1);

    // a full queue drops its oldest packets and counts them
    std::thread::sleep(Duration::from_millis(100)); // late copies of the first exchange
    b.drain(usize::MAX).expect("open");
    let before = b.stats();
    for seq in 2..12u64 {
        p.entries[0].seq = seq;
        a.publish(&encode_packet(&p)).expect("publish");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.stats().received_packets < before.received_packets + 10 {
        assert!(
            Instant::now() < deadline,
            "10 packets not received within 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = b.stats();
    assert_eq!(st.queued_packets, 4);
    assert_eq!(st.dropped_packets, before.dropped_packets + 6);
    let seqs: Vec<u64> = b
        .drain(usize::MAX)
        .expect("open")
        .iter()
        .map(|x| decode_packet(x, 1 << 24).expect("decodes").entries[0].seq)
        .collect();
    assert_eq!(
        seqs,
        vec![8, 9, 10, 11],
        "the newest packets are kept, in order"
    );

    // REQ: DF-ZEN-5 (chunked snapshot)
    let values: Arc<[f32]> = (0..1000).map(|i| i as f32 * 0.5 - 3.0).collect();
    let v2 = values.clone();
    a.serve_snapshot(Arc::new(move || {
        SnapshotSource::new(9, fp, Arc::clone(&v2), "burn")
    }))
    .expect("serve");
    let snap = b
        .fetch_snapshot_chunked(a_id, &fp, 300, Duration::from_secs(10))
        .expect("snapshot");
    assert_eq!(&snap.values[..], &values[..]);
    assert_eq!((snap.header.node, snap.header.incarnation), (a_id, 9));
    let wrong = b.fetch_snapshot_chunked(a_id, &[1u8; 32], 300, Duration::from_secs(10));
    assert!(
        matches!(wrong, Err(TransportError::Snapshot(_))),
        "{wrong:?}"
    );
    // B serves nothing: an error reply, not a hang
    assert!(
        a.fetch_snapshot_chunked(b_id, &fp, 300, Duration::from_secs(5))
            .is_err()
    );
    let info = b.info(a_id, Duration::from_secs(5)).expect("info");
    assert_eq!(info["N"], 1000);
    assert_eq!(info["framework"], "burn");
    assert_eq!(info["node"], "0a0a000000000001");

    // REQ: DF-ZEN-4 (disappearance)
    let mut b = b;
    b.close().expect("close");
    b.close().expect("close is idempotent");
    assert_eq!(b.drain(1), Err(TransportError::Closed));
    assert!(
        a.wait_for_peer_gone(b_id, Duration::from_secs(10)),
        "B's token went away"
    );
    assert!(a.peers().expect("open").is_empty());
    drop(a); // Drop closes the session
}

#[test]
fn a_young_capture_is_reused_only_while_the_anchor_version_is_unchanged() {
    // REQ: DF-ZEN-11 (a joiner never installs a capture older than the anchor, also within 10 s)
    let ns = format!("dftest/version{}", std::process::id());
    let (pa, pb) = (free_port(), free_port());
    let a = node(1, &ns, pa, None);
    let b = node(2, &ns, pb, Some(pa));
    a.wait_for_peers(1, &[2], Duration::from_secs(10))
        .expect("A sees B");
    let fp = [7u8; 32];
    let state = Arc::new(std::sync::Mutex::new(vec![1.0f32; 50]));
    let version = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let st = Arc::clone(&state);
    let captures = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let n = Arc::clone(&captures);
    a.serve_snapshot(Arc::new(move || {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        SnapshotSource::new(5, fp, st.lock().unwrap().clone(), "test")
    }))
    .expect("serve");
    let v = Arc::clone(&version);
    a.set_snapshot_version(Some(Arc::new(move || {
        v.load(std::sync::atomic::Ordering::SeqCst)
    })));
    let fetch = || {
        b.fetch_snapshot(1, &fp, Duration::from_secs(10))
            .expect("fetch")
            .values
    };
    assert_eq!(fetch(), vec![1.0; 50]);
    // the anchor moves and its version with it: the next joiner gets the new anchor at once
    *state.lock().unwrap() = vec![2.0; 50];
    version.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(fetch(), vec![2.0; 50]);
    // the version unchanged (within 10 s): the capture is shared
    *state.lock().unwrap() = vec![3.0; 50];
    assert_eq!(fetch(), vec![2.0; 50]);
    // info queries (finishing peers ask a few times a second) do not capture after every move
    let before = captures.load(std::sync::atomic::Ordering::SeqCst);
    version.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    for _ in 0..3 {
        let info = b.info(1, Duration::from_secs(5)).expect("info");
        assert_eq!(info["N"], 50);
    }
    assert_eq!(captures.load(std::sync::atomic::Ordering::SeqCst), before);
    // no version: reuse by age only, as before
    a.set_snapshot_version(None);
    assert_eq!(fetch(), vec![2.0; 50]);
}

#[test]
fn snapshot_answers_only_members() {
    // REQ: DF-ZEN-155
    let ns = format!("dftest/members{}", std::process::id());
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    let a = node(1, &ns, pa, None);
    let b = node(2, &ns, pb, Some(pa));
    let c = node(3, &ns, pc, Some(pa));
    a.wait_for_peers(2, &[2, 3], Duration::from_secs(10))
        .expect("A sees B and C");
    let fp = [7u8; 32];
    let values: Vec<f32> = (0..100).map(|i| i as f32).collect();
    let src = SnapshotSource::new(5, fp, values.clone(), "test").expect("source");
    a.serve_snapshot(Arc::new(move || Ok(src.clone())))
        .expect("serve");
    a.set_members(Some([1u64, 2].into_iter().collect()), false);
    // a member (its queries carry from=<its id>) gets the snapshot
    let got = b
        .fetch_snapshot(1, &fp, Duration::from_secs(10))
        .expect("member fetch");
    assert_eq!(got.values, values);
    // a non-member, and a query without `from`, get a short error, never a chunk
    assert!(c.fetch_snapshot(1, &fp, Duration::from_secs(5)).is_err());
    let replies = c
        .session()
        .get(format!(
            "{ns}/v1/snapshot/0000000000000001?chunk=0&chunk_size=16"
        ))
        .timeout(Duration::from_secs(5))
        .wait()
        .expect("query");
    let mut errors = 0;
    while let Ok(r) = replies.recv() {
        let e = r.result().expect_err("no chunk for a query without from");
        assert!(e.payload().to_bytes().len() <= 64);
        errors += 1;
    }
    assert_eq!(errors, 1);
    assert!(a.stats().snapshot_refused >= 2);
    assert_eq!(
        df_zenoh::query_from("chunk=0&from=0000000000000002"),
        Some(2)
    );
    assert_eq!(df_zenoh::query_from("chunk=0;from=2"), None);
    // REQ: DF-ZEN-42 -- the first `from` counts; only spaces and tabs around it are removed
    assert_eq!(
        df_zenoh::query_from("from=0000000000000002&from=0000000000000003"),
        Some(2)
    );
    assert_eq!(
        df_zenoh::query_from("chunk=0&from=x;from=0000000000000002"),
        None
    );
    assert_eq!(
        df_zenoh::query_from(" from \t= 0000000000000002\t"),
        Some(2)
    );
    assert_eq!(df_zenoh::query_from("from=\u{a0}0000000000000002"), None);
}
