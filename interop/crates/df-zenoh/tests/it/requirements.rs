//! DF-ZEN requirements of the Rust Zenoh binding (the mirror of tests/test_zenoh_transport.py):
//! publisher QoS (DF-ZEN-3), the info queryable (DF-ZEN-6), payload-only acceptance (DF-ZEN-10),
//! a user configuration file used as is (DF-ZEN-14), the default configuration (DF-ZEN-15), no
//! start-up barrier (DF-ZEN-16) and counted receive-queue drops (DF-ZEN-17, DF-SEC-5).
//!
//! Every session listens on tcp/127.0.0.1 (free ports) with multicast and gossip scouting off;
//! every wait is bounded.

use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use df_core::{Engine, Manifest, Outcome, SyncConfig, TensorSpec};
use df_fabric::{Fabric, VecStore};
use df_zenoh::{
    PACKET_SCHEMA, QueuePolicy, SnapshotSource, Transport, TransportConfig, ZenohTransport,
    delta_key, info_key,
};
use zenoh::Wait;
use zenoh::bytes::Encoding;
use zenoh::qos::{CongestionControl, Priority};
use zenoh::query::{ConsolidationMode, QueryTarget};
use zenoh::sample::Sample;

/// Bound on every wait (generous: the operations take milliseconds).
const WAIT: Duration = Duration::from_secs(15);

/// A port below the kernel's ephemeral range (never the source port of another connection).
fn free_port() -> u16 {
    df_zenoh::ports::free_port().expect("free port")
}

fn ep(port: u16) -> String {
    format!("tcp/127.0.0.1:{port}")
}

fn ns(test: &str) -> String {
    format!("dfreq/{}/{test}", std::process::id())
}

fn config(id: u64, ns: &str, listen: u16, connect: Option<u16>) -> TransportConfig {
    let mut c = TransportConfig::new(id);
    c.namespace = ns.to_string();
    c.listen = vec![ep(listen)];
    c.connect = connect.map(|p| vec![ep(p)]).unwrap_or_default();
    c
}

/// Two connected transports (b connects to a) that see each other's tokens.
fn pair(ns: &str, a_id: u64, b: TransportConfig) -> (ZenohTransport, ZenohTransport, u16) {
    let pa = free_port();
    let a = ZenohTransport::open(config(a_id, ns, pa, None)).expect("open a");
    let mut b = b;
    b.namespace = ns.to_string();
    b.listen = vec![ep(free_port())];
    b.connect = vec![ep(pa)];
    let b_id = b.node_id;
    let b = ZenohTransport::open(b).expect("open b");
    a.wait_for_peers(1, &[b_id], WAIT).expect("a sees b");
    b.wait_for_peers(1, &[a_id], WAIT).expect("b sees a");
    (a, b, pa)
}

/// Publishes with `publish` until `rx` has a packet queued (subscriptions propagate
/// asynchronously), then returns what is queued.
fn publish_until_received(mut publish: impl FnMut(), rx: &ZenohTransport) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    loop {
        publish();
        if rx
            .wait_for_packets(Duration::from_millis(100))
            .expect("open")
        {
            return rx.drain(usize::MAX).expect("open");
        }
        assert!(
            Instant::now() < deadline,
            "nothing received within {WAIT:?}"
        );
    }
}

/// Empties `rx`'s queue of everything `tx` published so far: publishes numbered markers until
/// the latest one arrives (one publisher's packets arrive in order), so no late copy of an
/// earlier packet remains in flight.
fn flush(tx: &ZenohTransport, rx: &ZenohTransport) {
    let deadline = Instant::now() + WAIT;
    for i in 0u32.. {
        let marker = crate::framed(format!("flush-marker-{i}").as_bytes());
        tx.publish(&marker).expect("publish");
        rx.wait_for_packets(Duration::from_millis(200))
            .expect("open");
        if rx.drain(usize::MAX).expect("open").contains(&marker) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no marker received within {WAIT:?}"
        );
    }
}

fn raw_config(listen: u16, connect: u16) -> zenoh::Config {
    let mut c = zenoh::Config::default();
    for (k, v) in [
        ("mode", "\"peer\"".to_string()),
        ("listen/endpoints", format!("[\"{}\"]", ep(listen))),
        ("connect/endpoints", format!("[\"{}\"]", ep(connect))),
        ("scouting/multicast/enabled", "false".into()),
        ("scouting/gossip/enabled", "false".into()),
    ] {
        c.insert_json5(k, &v).expect("config");
    }
    c
}

#[test]
fn publications_use_block_congestion_control_priority_data_and_arrive_whole() {
    let ns = ns("qos");
    let (a, b, pa) = pair(&ns, 1, TransportConfig::new(2));
    // A plain Zenoh session watches a's publications as they are on the wire.
    let seen: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let raw = zenoh::open(raw_config(free_port(), pa))
        .wait()
        .expect("raw");
    let s2 = seen.clone();
    let sub = raw
        .declare_subscriber(format!("{ns}/v1/delta/*"))
        .callback(move |s| s2.lock().expect("lock").push(s))
        .wait()
        .expect("subscriber");
    let deadline = Instant::now() + WAIT;
    while seen.lock().expect("lock").is_empty() {
        a.publish(b"probe").expect("publish");
        std::thread::sleep(Duration::from_millis(50));
        assert!(Instant::now() < deadline, "raw subscriber got nothing");
    }
    let s = seen.lock().expect("lock")[0].clone();
    assert_eq!(s.key_expr().as_str(), delta_key(&ns, 1));
    // REQ: DF-ZEN-3 -- congestion control BLOCK (not Zenoh's default DROP), priority DATA
    assert_eq!(s.congestion_control(), CongestionControl::Block);
    assert_eq!(s.priority(), Priority::Data);
    assert_eq!(
        s.encoding(),
        &Encoding::APPLICATION_OCTET_STREAM.with_schema(PACKET_SCHEMA)
    );
    assert_eq!(s.payload().to_bytes().as_ref(), b"probe");
    sub.undeclare().wait().expect("undeclare");
    raw.close().wait().expect("close raw");

    // Reliable and blocking: three 4 MiB packets (fragmented by Zenoh) all arrive, intact, in
    // order, although the receiver drains only after all three were published.
    flush(&a, &b);
    let mut x = 7u64;
    let big: Vec<u8> = (0..4 << 20)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    for i in 0..3u8 {
        let mut p = crate::framed(&big);
        p[0] = i;
        a.publish(&p).expect("publish");
    }
    let deadline = Instant::now() + WAIT;
    while b.stats().queued_packets < 3 {
        assert!(Instant::now() < deadline, "{:?}", b.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = b.drain(usize::MAX).expect("open");
    // REQ: DF-ZEN-3 -- reliable: every large packet arrives whole, none dropped
    assert_eq!(got.len(), 3);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g[0], i as u8);
        assert_eq!(g[8..], big[..]);
    }
    assert_eq!(b.stats().dropped_packets, 0);
}

#[test]
fn info_queryable_replies_with_the_json_members() {
    let ns = ns("info");
    let (server, joiner, _) = pair(&ns, 10, TransportConfig::new(2));
    let fp: [u8; 32] = std::array::from_fn(|i| (i * 7 + 1) as u8);
    let values: Arc<[f32]> = vec![0.0f32; 12].into();
    server
        .serve_snapshot(Arc::new(move || {
            SnapshotSource::new(0x0006_6169_085c_7000, fp, Arc::clone(&values), "burn")
        }))
        .expect("serve");
    let info = joiner.info(10, WAIT).expect("info");
    let obj = info.as_object().expect("a JSON object");
    // REQ: DF-ZEN-6 -- node and incarnation as 16 lowercase hex digits, fingerprint as 64, the
    // framework name and N
    assert_eq!(obj["node"], "000000000000000a");
    assert_eq!(obj["incarnation"], "00066169085c7000");
    assert_eq!(obj["fingerprint"], hex::encode(fp));
    assert_eq!(obj["framework"], "burn");
    assert_eq!(obj["N"], 12);
    // REQ: DF-ZEN-6 -- one UTF-8 JSON reply with encoding application/json on NS/v1/info/<hex16>
    let replies = joiner
        .session()
        .get(info_key(&ns, 10))
        .target(QueryTarget::BestMatching)
        .consolidation(ConsolidationMode::None)
        .timeout(WAIT)
        .wait()
        .expect("get");
    let mut ok = Vec::new();
    while let Ok(r) = replies.recv() {
        ok.push(r.result().expect("not an error reply").clone());
    }
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].encoding(), &Encoding::APPLICATION_JSON);
    assert_eq!(ok[0].key_expr().as_str(), info_key(&ns, 10));
    let text = String::from_utf8(ok[0].payload().to_bytes().into_owned()).expect("UTF-8");
    let parsed: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(parsed, info);
}

#[test]
fn samples_are_accepted_on_their_payload_only() {
    let ns = ns("payload");
    let manifest = Manifest::new([TensorSpec::new("w", &[8])]).expect("manifest");
    let cfg = SyncConfig {
        ratio: 1.0,
        sync_interval: 1,
        ..SyncConfig::v1_0()
    };
    // A packet of node 0x77 ...
    let mut sender =
        Engine::new(manifest.clone(), cfg.clone(), 0x77, 1, vec![0.0; 8]).expect("engine");
    let mut active = vec![0.0f32; 8];
    active[5] = 2.5;
    let own = sender.generate(&active, false).expect("generate");
    let packet = sender.pack(&own, &[]).remove(0);
    let (a, b, _) = pair(&ns, 1, TransportConfig::new(2));
    // ... published by another session on a third node's key, without DeltaFabric's encoding,
    // with an attachment and congestion control DROP
    let publisher = a
        .session()
        .declare_publisher(delta_key(&ns, 0x1234))
        .encoding(Encoding::TEXT_PLAIN)
        .congestion_control(CongestionControl::Drop)
        .wait()
        .expect("publisher");
    let got = publish_until_received(
        || {
            publisher
                .put(packet.clone())
                .attachment(b"ignored".to_vec())
                .wait()
                .expect("put");
        },
        &b,
    );
    // REQ: DF-ZEN-10 -- the sample is handed over as a packet regardless of key, encoding and
    // attachment: exactly its payload bytes
    assert!(!got.is_empty() && got.iter().all(|p| *p == packet));
    let mut receiver = Engine::new(manifest, cfg, 2, 1, vec![0.0; 8]).expect("engine");
    let res = receiver.receive(&[got[0].as_slice()]);
    // REQ: DF-ZEN-10 -- and validated on its content: the sender (0x77) need not match the key
    assert_eq!(res.outcomes, vec![Outcome::Ok]);
    assert_eq!(res.indices, vec![5]);
    assert_eq!(res.accepted.len(), 1);
    assert_eq!(res.accepted[0].origin, 0x77);
}

#[test]
fn a_user_configuration_file_is_used_as_is() {
    let ns = ns("config-file");
    let file_port = free_port();
    // The ignored port stays reserved for the whole test: bound (so no other test or process can
    // take it, which made "nothing listens there" fail by chance) but never listening (so a
    // connection to it is refused; a session that tried to listen there too fails to open).
    let hold =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    hold.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    let ignored_port = hold
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("inet")
        .port();
    let path =
        std::env::temp_dir().join(format!("df-zenoh-{}-{file_port}.json5", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "// DeltaFabric test node: JSON5 with comments and trailing commas\n\
             {{\n  mode: \"peer\",\n  listen: {{ endpoints: [\"{}\"], }},\n\
             connect: {{ endpoints: [] }},\n\
             scouting: {{ multicast: {{ enabled: false }}, gossip: {{ enabled: false }} }},\n\
             queries_default_timeout: 12345,\n}}\n",
            ep(file_port)
        ),
    )
    .expect("write config");
    let mut c = config(1, &ns, ignored_port, None);
    c.config_file = Some(path.clone());
    let z = c.zenoh_config().expect("the file parses");
    // REQ: DF-ZEN-14 -- the file's settings, unchanged (not the listen option of the transport)
    assert_eq!(
        z.get_json("listen/endpoints").expect("key"),
        format!("[\"{}\"]", ep(file_port))
    );
    assert_eq!(z.get_json("queries_default_timeout").expect("key"), "12345");
    assert_eq!(z.get_json("mode").expect("key"), "\"peer\"");
    let a = ZenohTransport::open(c).expect("open with the file");
    std::fs::remove_file(&path).expect("remove config");
    // REQ: DF-ZEN-14 -- the session listens where the file says, and only there
    assert!(TcpStream::connect(("127.0.0.1", file_port)).is_ok());
    assert!(TcpStream::connect(("127.0.0.1", ignored_port)).is_err());
    let b = ZenohTransport::open(config(2, &ns, free_port(), Some(file_port))).expect("open b");
    a.wait_for_peers(1, &[2], WAIT).expect("b reaches a");
    let got = publish_until_received(
        || {
            b.publish(&crate::framed(b"through the file's listener"))
                .expect("publish")
        },
        &a,
    );
    assert!(
        got.iter()
            .all(|p| *p == crate::framed(b"through the file's listener"))
    );
    // A broken file is a typed configuration error, not a default session.
    let mut bad = TransportConfig::new(3);
    bad.config_file = Some(std::env::temp_dir().join("df-zenoh-no-such-file.json5"));
    assert!(matches!(
        ZenohTransport::open(bad),
        Err(df_zenoh::TransportError::Config(_))
    ));
}

#[test]
fn the_default_configuration_scouts_nothing_and_listens_nowhere() {
    let c = TransportConfig::new(1);
    assert!(c.listen.is_empty() && c.connect.is_empty() && !c.multicast);
    let z = c.zenoh_config().expect("config");
    // REQ: DF-ZEN-15 -- multicast and gossip scouting off, no endpoint to listen on or connect to
    assert_eq!(
        z.get_json("scouting/multicast/enabled").expect("key"),
        "false"
    );
    assert_eq!(z.get_json("scouting/gossip/enabled").expect("key"), "false");
    assert_eq!(z.get_json("listen/endpoints").expect("key"), "[]");
    assert_eq!(z.get_json("connect/endpoints").expect("key"), "[]");
    // multicast discovery only on an explicit choice
    let mut lan = TransportConfig::new(1);
    lan.multicast = true;
    let z = lan.zenoh_config().expect("config");
    assert_eq!(
        z.get_json("scouting/multicast/enabled").expect("key"),
        "true"
    );
    // REQ: DF-ZEN-15 -- a default node opens with no listener and no connection at all
    let t = ZenohTransport::open(TransportConfig::new(1)).expect("open");
    let info = t.session().info();
    assert!(info.peers_zid().wait().next().is_none());
    assert!(info.routers_zid().wait().next().is_none());
}

#[test]
fn a_node_trains_and_publishes_with_no_peer_reachable() {
    let ns = ns("alone");
    let (port_a, port_b) = (free_port(), free_port());
    let t0 = Instant::now();
    // a connects to port_b, where nobody listens yet
    let a = ZenohTransport::open(config(1, &ns, port_a, Some(port_b))).expect("open alone");
    let opened = t0.elapsed();
    let manifest = Manifest::new([TensorSpec::new("w", &[64])]).expect("manifest");
    let store = VecStore::new(manifest, vec![0.0; 64]).expect("store");
    let cfg = SyncConfig {
        sync_interval: 1,
        ..SyncConfig::v1_0()
    };
    let mut fabric =
        Fabric::with_options(store, a, cfg, df_fabric::FabricOptions::v1_0()).expect("fabric");
    let t1 = Instant::now();
    for s in 0..10 {
        fabric.store_mut().values_mut()[s] += 1.0;
        fabric.step().expect("step");
    }
    let stepped = t1.elapsed();
    eprintln!(
        "no peer: open {:.3} s, 10 steps {:.3} s",
        opened.as_secs_f64(),
        stepped.as_secs_f64()
    );
    // REQ: DF-ZEN-16 -- no start-up barrier: it opened, trained and published alone
    assert!(opened < WAIT && stepped < WAIT);
    assert_eq!(fabric.counters().syncs, 10);
    assert_eq!(fabric.transport().stats().published_packets, 10);
    assert!(fabric.transport().peers().expect("open").is_empty());
    // the peer that comes up later is reached by Zenoh's connect retry
    let b = ZenohTransport::open(config(2, &ns, port_b, None)).expect("open b");
    fabric
        .transport()
        .wait_for_peers(1, &[2], WAIT)
        .expect("a reaches the late peer");
    let mut k = 10;
    let got = publish_until_received(
        || {
            fabric.store_mut().values_mut()[k % 64] += 1.0;
            k += 1;
            fabric.step().expect("step");
        },
        &b,
    );
    assert!(!got.is_empty());
}

#[test]
fn receive_queue_drops_are_counted_and_never_block_delivery() {
    let ns = ns("drops");
    let mut bc = TransportConfig::new(2);
    bc.queue_capacity = 4;
    bc.queue_policy = QueuePolicy::DropOldest;
    let (a, b, _) = pair(&ns, 1, bc);
    publish_until_received(|| a.publish(&crate::framed(&[0xff])).expect("publish"), &b);
    flush(&a, &b);
    let before = b.stats();
    // b's training loop does not drain while 20 packets arrive
    for i in 0..20u8 {
        a.publish(&crate::framed(&[i])).expect("publish");
    }
    let deadline = Instant::now() + WAIT;
    while b.stats().received_packets < before.received_packets + 20 {
        assert!(Instant::now() < deadline, "{:?}", b.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = b.stats();
    // REQ: DF-ZEN-17 -- every packet discarded unprocessed is counted (packets and bytes)
    assert_eq!(st.dropped_packets, before.dropped_packets + 16);
    assert_eq!(st.dropped_bytes, before.dropped_bytes + 16 * 9);
    assert_eq!(st.queued_packets, 4);
    // REQ: DF-SEC-5 -- the receive callback never blocked on the full queue: all 20 were
    // delivered to it, the newest kept, the drops reported in the stats
    let kept = b.drain(usize::MAX).expect("open");
    assert_eq!(
        kept,
        (16..20u8).map(|i| crate::framed(&[i])).collect::<Vec<_>>()
    );
    assert_eq!(b.stats().to_json()["dropped_packets"], st.dropped_packets);
}

// REQ: DF-SEC-50
#[test]
fn an_oversize_message_is_dropped_by_zenoh_before_the_node() {
    // The node caps Zenoh's reassembly at max_packet_size + margin: a 2 MiB put from a stranger
    // never reaches its queue (with Zenoh's default 1 GiB cap it does), and the link still carries
    // the next small put (sent after it on the same link: its arrival proves the big one dropped).
    let ns = ns("oversize");
    let pa = free_port();
    let mut c = config(1, &ns, pa, None);
    c.max_packet_size = 4096;
    assert_eq!(c.max_message_size(), 4096 + df_zenoh::ZENOH_MESSAGE_MARGIN);
    let cap = c
        .zenoh_config()
        .expect("config")
        .get_json("transport/link/rx/max_message_size")
        .expect("key");
    assert_eq!(cap, (4096 + df_zenoh::ZENOH_MESSAGE_MARGIN).to_string());
    let a = ZenohTransport::open(c).expect("open a");
    let session = zenoh::open(raw_config(free_port(), pa))
        .wait()
        .expect("session");
    let key = delta_key(&ns, 0x77);
    let got = publish_until_received(
        || session.put(&key, crate::framed(b"probe")).wait().unwrap(),
        &a,
    );
    assert!(got.iter().all(|p| *p == crate::framed(b"probe")));
    session.put(&key, vec![b'x'; 2 << 20]).wait().unwrap();
    session.put(&key, crate::framed(b"after")).wait().unwrap();
    let deadline = Instant::now() + WAIT;
    let mut got: Vec<Vec<u8>> = Vec::new();
    while !got.iter().any(|p| *p == crate::framed(b"after")) {
        assert!(Instant::now() < deadline, "the small put never arrived");
        a.wait_for_packets(Duration::from_millis(200))
            .expect("open");
        got.extend(a.drain(usize::MAX).expect("open"));
    }
    assert!(
        got.iter()
            .all(|p| p.len() <= 4096 + df_zenoh::ZENOH_MESSAGE_MARGIN),
        "an oversize message reached the node"
    );
    session.close().wait().unwrap();
}

#[test]
fn receive_queue_is_bounded_in_bytes_too() {
    // 20 packets of 108 bytes into a queue of 1,000 packets but 450 bytes: the 4 newest are kept
    // (the byte bound of the Python transport's queue_bytes), the 16 oldest dropped and counted.
    let ns = ns("qbytes");
    let mut bc = TransportConfig::new(2);
    bc.queue_capacity = 1000;
    bc.queue_bytes = 450;
    let (a, b, _) = pair(&ns, 1, bc);
    publish_until_received(|| a.publish(&crate::framed(&[0xff])).expect("publish"), &b);
    flush(&a, &b);
    let before = b.stats();
    for i in 0..20u8 {
        a.publish(&crate::framed(&[i; 100])).expect("publish");
    }
    let deadline = Instant::now() + WAIT;
    while b.stats().received_packets < before.received_packets + 20 {
        assert!(Instant::now() < deadline, "{:?}", b.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = b.stats();
    // REQ: DF-ZEN-17
    assert_eq!(st.dropped_packets, before.dropped_packets + 16);
    assert_eq!(st.dropped_bytes, before.dropped_bytes + 16 * 108);
    assert_eq!((st.queued_packets, st.queued_bytes), (4, 4 * 108));
    let kept = b.drain(usize::MAX).expect("open");
    assert_eq!(
        kept,
        (16..20u8)
            .map(|i| crate::framed(&[i; 100]))
            .collect::<Vec<_>>()
    );
    assert_eq!(b.stats().queued_bytes, 0);
}
