//! Zenoh's TLS transport in the Rust binding (DF-ZEN-14): two transports over mutual TLS on
//! `tls/127.0.0.1`, with a CA and certificates made at run time by the openssl CLI, exchange a
//! packet; a stranger without a client certificate is refused by the listener.
//!
//! Every session has multicast and gossip scouting off; every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use df_zenoh::{Transport, TransportConfig, ZenohTransport};

const WAIT: Duration = Duration::from_secs(15);
/// How long the stranger is given to join (it never can: the listener refuses its handshake).
const STRANGER_WAIT: Duration = Duration::from_secs(3);

/// A port below the kernel's ephemeral range (never the source port of another connection).
fn free_port() -> u16 {
    df_zenoh::ports::free_port().expect("free port")
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and certificates signed by it for `names` (each with the subjectAltName given).
fn make_certificates(dir: &Path, names: &[(&str, &str)]) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-days",
        "2",
        "-subj",
        "/CN=df-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(dir, &ca);
    for (name, san) in names {
        let (key, csr, ext, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}.pem"),
        );
        std::fs::write(
            dir.join(&ext),
            format!("basicConstraints=CA:FALSE\nsubjectAltName={san}\n"),
        )
        .expect("write ext");
        let subj = format!("/CN={name}");
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-subj", &subj, "-keyout", &key, "-out", &csr]);
        openssl(dir, &req);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &pem,
            ],
        );
    }
}

fn write(dir: &Path, name: &str, text: String) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write config");
    p
}

fn transport(id: u64, ns: &str, file: PathBuf) -> ZenohTransport {
    let mut c = TransportConfig::new(id);
    c.namespace = ns.to_string();
    c.config_file = Some(file);
    ZenohTransport::open(c).expect("open over TLS")
}

#[test]
fn two_transports_talk_over_mutual_tls_and_a_stranger_is_refused() {
    let dir = std::env::temp_dir().join(format!("df-zenoh-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    make_certificates(
        &dir,
        &[("listener", "IP:127.0.0.1"), ("member", "DNS:member")],
    );
    let d = dir.display();
    let port = free_port();
    let scouting = "scouting: { multicast: { enabled: false }, gossip: { enabled: false } }";
    // The listener requires a client certificate signed by the test CA (enable_mtls).
    let listener = write(
        &dir,
        "listener.json5",
        format!(
            "{{ mode: \"peer\", listen: {{ endpoints: [\"tls/127.0.0.1:{port}\"] }}, {scouting},\n\
             transport: {{ link: {{ tls: {{ root_ca_certificate: \"{d}/ca.pem\",\n\
             listen_certificate: \"{d}/listener.pem\", listen_private_key: \"{d}/listener.key\",\n\
             enable_mtls: true }} }} }} }}\n"
        ),
    );
    let member = write(
        &dir,
        "member.json5",
        format!(
            "{{ mode: \"peer\", connect: {{ endpoints: [\"tls/127.0.0.1:{port}\"] }}, {scouting},\n\
             transport: {{ link: {{ tls: {{ root_ca_certificate: \"{d}/ca.pem\",\n\
             connect_certificate: \"{d}/member.pem\", connect_private_key: \"{d}/member.key\",\n\
             enable_mtls: true }} }} }} }}\n"
        ),
    );
    // Trusts the listener's CA but shows no certificate of its own.
    let stranger = write(
        &dir,
        "stranger.json5",
        format!(
            "{{ mode: \"peer\", connect: {{ endpoints: [\"tls/127.0.0.1:{port}\"] }}, {scouting},\n\
             transport: {{ link: {{ tls: {{ root_ca_certificate: \"{d}/ca.pem\" }} }} }} }}\n"
        ),
    );
    let ns = format!("dftls/{}", std::process::id());
    let a = transport(1, &ns, listener);
    let b = transport(2, &ns, member);
    // REQ: DF-ZEN-14 -- a Burn-side transport uses Zenoh's TLS with mutual authentication
    a.wait_for_peers(1, &[2], WAIT).expect("a sees b over mTLS");
    b.wait_for_peers(1, &[1], WAIT).expect("b sees a over mTLS");
    let deadline = Instant::now() + WAIT;
    let got = loop {
        b.publish(&crate::framed(b"over mutual TLS"))
            .expect("publish");
        if a.wait_for_packets(Duration::from_millis(100))
            .expect("open")
        {
            break a.drain(usize::MAX).expect("open");
        }
        assert!(
            Instant::now() < deadline,
            "nothing received within {WAIT:?}"
        );
    };
    assert!(!got.is_empty() && got.iter().all(|p| *p == crate::framed(b"over mutual TLS")));

    // REQ: DF-ZEN-14 -- a stranger without a client certificate is refused (peer mode: its
    // session opens, but it never joins; the members never see it).
    let mut c = TransportConfig::new(3);
    c.namespace = ns.clone();
    c.config_file = Some(stranger);
    if let Ok(s) = ZenohTransport::open(c) {
        assert!(s.wait_for_peers(1, &[1], STRANGER_WAIT).is_err());
        assert!(
            a.wait_for_peers(2, &[3], Duration::from_millis(10))
                .is_err()
        );
        drop(s);
    }
    drop(b);
    drop(a);
    std::fs::remove_dir_all(&dir).expect("remove scratch dir");
}
