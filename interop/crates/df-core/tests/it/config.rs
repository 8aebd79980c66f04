//! `SyncConfig` checks (spec section 3), mirroring `tests/test_config.py` of the Python reference.

use df_core::config::{MAX_REPLAY_WINDOW, MIN_MAX_PACKET_SIZE, RelayPolicy};
use df_core::{ConfigError, Engine, EngineError, Manifest, SyncConfig, TensorSpec, ValueEncoding};
use serde_json::json;

fn ok_new(f: impl FnOnce(&mut SyncConfig)) -> Result<SyncConfig, ConfigError> {
    let mut c = SyncConfig::v1_0();
    f(&mut c);
    SyncConfig::new(
        c.alpha,
        c.ratio,
        c.sync_interval,
        c.relay_threshold,
        c.hop_limit,
        c.max_packet_size,
        c.replay_window,
        c.max_incarnations,
        c.include_buffers,
        c.encoding,
    )
}

/// A change to the default config.
type Edit = fn(&mut SyncConfig);

fn name_of(e: &ConfigError) -> &'static str {
    match e {
        ConfigError::OutOfRange { name, .. } | ConfigError::WrongType { name, .. } => name,
        ConfigError::UnknownEncoding(_) => "encoding",
        ConfigError::UnknownRelayPolicy(_) => "relay_policy",
        ConfigError::UnknownIndexEncoding(_) => "index_encoding",
        ConfigError::UnknownKeys(_) => "keys",
        ConfigError::NotAnObject => "config",
    }
}

#[test]
fn defaults_are_the_spec_table() {
    // REQ: DF-PAR-1, DF-PAR-2, DF-PAR-3, DF-PAR-4, DF-PAR-5, DF-PAR-6, DF-PAR-7, DF-PAR-8
    // REQ: DF-PAR-9, DF-PAR-10, DF-PAR-11 (the defaults of the spec's table)
    let c = SyncConfig::v1_0();
    assert_eq!(c.alpha, 1.0);
    assert_eq!(c.ratio, 0.05);
    assert_eq!(c.sync_interval, 10);
    assert_eq!(c.relay_threshold, 1e-6);
    assert_eq!(c.hop_limit, 16);
    assert_eq!(c.max_packet_size, 16_777_216);
    assert_eq!(c.replay_window, 1024);
    assert_eq!(c.max_incarnations, 4);
    assert!(!c.include_buffers);
    assert_eq!(c.encoding, ValueEncoding::F32);
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(SyncConfig::from_json(&json!({})), Ok(c.clone()));
    assert_eq!(ok_new(|_| {}), Ok(c));
}

#[test]
fn every_bound_of_the_allowed_ranges_is_accepted() {
    // REQ: DF-PAR-11 (a node MUST accept every value in the allowed range)
    let accepted: [fn(&mut SyncConfig); 14] = [
        |c| c.alpha = 1.0,
        |c| c.alpha = f64::MIN_POSITIVE,
        |c| c.ratio = 1.0,
        |c| c.ratio = 1e-12,
        |c| c.relay_threshold = 0.0,
        |c| c.relay_threshold = 1e300,
        |c| c.sync_interval = 1,
        |c| c.hop_limit = 0,
        |c| c.hop_limit = 255,
        |c| c.max_packet_size = MIN_MAX_PACKET_SIZE,
        |c| c.max_packet_size = 2_147_483_647,
        |c| c.replay_window = 1,
        |c| c.replay_window = MAX_REPLAY_WINDOW,
        |c| c.max_incarnations = 65_536,
    ];
    for (i, f) in accepted.into_iter().enumerate() {
        assert!(ok_new(f).is_ok(), "case {i} refused: {:?}", ok_new(f));
    }
    assert_eq!(
        MIN_MAX_PACKET_SIZE, 296,
        "DF-PAR-6: 296 bytes hold one entry of one value"
    );
    for enc in [ValueEncoding::F32, ValueEncoding::F16, ValueEncoding::BF16] {
        assert!(ok_new(|c| c.encoding = enc).is_ok());
    }
}

#[test]
fn every_parameter_outside_its_range_is_refused_with_its_name() {
    // REQ: DF-PAR-11 (MUST refuse to start, reporting a configuration error)
    let refused: [(&str, Edit, &str); 17] = [
        (
            "alpha",
            |c| c.alpha = 0.0,
            "alpha must be in (0, 1], got 0.0",
        ),
        (
            "alpha",
            |c| c.alpha = 1.5,
            "alpha must be in (0, 1], got 1.5",
        ),
        (
            "alpha",
            |c| c.alpha = f64::NAN,
            "alpha must be finite, got NaN",
        ),
        (
            "ratio",
            |c| c.ratio = -0.1,
            "ratio must be in (0, 1], got -0.1",
        ),
        (
            "ratio",
            |c| c.ratio = f64::INFINITY,
            "ratio must be finite, got inf",
        ),
        (
            "relay_threshold",
            |c| c.relay_threshold = -1e-9,
            "relay_threshold must be >= 0, got -1e-9",
        ),
        (
            "relay_threshold",
            |c| c.relay_threshold = f64::NAN,
            "relay_threshold must be finite, got NaN",
        ),
        (
            "sync_interval",
            |c| c.sync_interval = 0,
            "sync_interval must be [1, 4294967295], got 0",
        ),
        (
            "max_packet_size",
            |c| c.max_packet_size = 295,
            "max_packet_size must be [296, 2147483647], got 295",
        ),
        (
            "max_packet_size",
            |c| c.max_packet_size = 2_147_483_648,
            "max_packet_size must be [296, 2147483647], got 2147483648",
        ),
        (
            "replay_window",
            |c| c.replay_window = 0,
            "replay_window must be [1, 1048576], got 0",
        ),
        (
            "replay_window",
            |c| c.replay_window = (1 << 20) + 1,
            "replay_window must be [1, 1048576], got 1048577",
        ),
        (
            "max_incarnations",
            |c| c.max_incarnations = 0,
            "max_incarnations must be [1, 65536], got 0",
        ),
        (
            "max_incarnations",
            |c| c.max_incarnations = 65_537,
            "max_incarnations must be [1, 65536], got 65537",
        ),
        (
            "max_origins",
            |c| c.max_origins = 0,
            "max_origins must be [1, 1048576], got 0",
        ),
        (
            "max_origins",
            |c| c.max_origins = 1_048_577,
            "max_origins must be [1, 1048576], got 1048577",
        ),
        (
            "alpha",
            |c| {
                c.alpha = -1.0;
                c.ratio = 2.0
            },
            "alpha must be in (0, 1], got -1.0",
        ),
    ];
    let m = Manifest::new([TensorSpec::new("w", &[4])]).expect("manifest");
    for (name, f, msg) in refused {
        let mut c = SyncConfig::v1_0();
        f(&mut c);
        let e = c.validate().expect_err(name);
        assert_eq!(name_of(&e), name);
        assert_eq!(e.to_string(), msg);
        // the engine refuses to start with it
        let got = Engine::new(m.clone(), c.clone(), 1, 1, vec![0.0; 4]).expect_err(name);
        assert_eq!(got, EngineError::Config(e.clone()));
        // and the checked constructor (max_origins is not one of its arguments)
        if name != "max_origins" {
            assert_eq!(ok_new(f), Err(e));
        }
    }
}

#[test]
fn from_json_reads_every_key_and_round_trips() {
    // REQ: DF-PAR-11
    let v = json!({"alpha": 0.5, "ratio": 1, "sync_interval": 3, "relay_threshold": 0,
        "hop_limit": 255, "max_packet_size": 296, "replay_window": 1048576,
        "max_incarnations": 1, "include_buffers": true, "encoding": "BF16", "max_origins": 7,
        "relay_policy": "NEEDED"});
    let c = SyncConfig::from_json(&v).expect("valid");
    assert_eq!(c.alpha, 0.5);
    assert_eq!(c.ratio, 1.0);
    assert_eq!(c.sync_interval, 3);
    assert_eq!(c.relay_threshold, 0.0);
    assert_eq!(c.hop_limit, 255);
    assert_eq!(c.max_packet_size, 296);
    assert_eq!(c.replay_window, 1 << 20);
    assert_eq!(c.max_incarnations, 1);
    assert!(c.include_buffers);
    assert_eq!(c.encoding, ValueEncoding::BF16);
    assert_eq!(c.max_origins, 7);
    // REQ: DF-PAR-60
    assert_eq!(c.relay_policy, RelayPolicy::Needed);
    assert_eq!(SyncConfig::from_json(&c.to_json()), Ok(c));
    assert_eq!(
        SyncConfig::from_json(&json!({"relay_policy": "SOME"})),
        Err(ConfigError::UnknownRelayPolicy("'SOME'".into()))
    );
    assert_eq!(SyncConfig::v1_0().relay_policy, RelayPolicy::All);
    // the default-bounded config has exactly the keys of the Python reference's to_json
    let keys: Vec<String> = SyncConfig::v1_0()
        .to_json()
        .as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect();
    let mut python = vec![
        "alpha",
        "ratio",
        "sync_interval",
        "relay_threshold",
        "hop_limit",
        "max_packet_size",
        "replay_window",
        "max_incarnations",
        "encoding",
        "include_buffers",
        "relay_policy",
    ];
    python.sort_unstable();
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, python);
    // REQ: DF-PAR-261, DF-PAR-260
    // the JSON form of an encoding is its name exactly (DF-PAR-261): neither the wire value nor
    // another case
    let f16 = SyncConfig::from_json(&json!({"encoding": "F16"})).expect("valid");
    assert_eq!(f16.encoding, ValueEncoding::F16);
    for bad in [json!(1), json!("f16"), json!(" F16"), json!(1.0)] {
        assert!(matches!(
            SyncConfig::from_json(&json!({"encoding": bad})),
            Err(ConfigError::UnknownEncoding(_))
        ));
    }
    for (key, bad) in [("relay_policy", "all"), ("index_encoding", "packed")] {
        assert!(
            SyncConfig::from_json(&json!({key: bad})).is_err(),
            "{key} {bad}"
        );
    }
    // a number past binary64 is refused at the JSON reader (DF-PAR-260), never read as infinity
    assert!(df_core::json::from_str(r#"{"alpha": 1e400}"#).is_err());
}

#[test]
fn from_json_refuses_unknown_keys_types_and_values() {
    // REQ: DF-PAR-11
    let cases = [
        (
            json!({"alpah": 1.0, "zeta": 1}),
            "unknown config keys: ['alpah', 'zeta']",
        ),
        (json!({"alpha": "1"}), "alpha must be a float, got str"),
        (json!({"alpha": true}), "alpha must be a float, got bool"),
        (json!({"ratio": null}), "ratio must be a float, got null"),
        (
            json!({"hop_limit": 256}),
            "hop_limit must be [0, 255], got 256",
        ),
        (
            json!({"hop_limit": -1}),
            "hop_limit must be [0, 255], got -1",
        ),
        (
            json!({"hop_limit": 16.0}),
            "hop_limit must be an int, got float",
        ),
        (
            json!({"sync_interval": 0}),
            "sync_interval must be [1, 4294967295], got 0",
        ),
        (
            json!({"sync_interval": 4_294_967_296u64}),
            "sync_interval must be [1, 4294967295], got 4294967296",
        ),
        (
            json!({"max_packet_size": 100}),
            "max_packet_size must be [296, 2147483647], got 100",
        ),
        (
            json!({"replay_window": 0}),
            "replay_window must be [1, 1048576], got 0",
        ),
        (
            json!({"max_incarnations": false}),
            "max_incarnations must be an int, got bool",
        ),
        (
            json!({"include_buffers": 1}),
            "include_buffers must be a bool, got int",
        ),
        (json!({"encoding": "F8"}), "unknown encoding 'F8'"),
        (json!({"encoding": 4}), "unknown encoding 4"),
        (
            json!({"index_encoding": "ZIP"}),
            "index_encoding must be one of PLAIN, PACKED, got 'ZIP'",
        ),
        (json!({"alpha": 0.0}), "alpha must be in (0, 1], got 0.0"),
        (json!([1, 2]), "config must be a JSON object"),
    ];
    for (v, msg) in cases {
        let e = SyncConfig::from_json(&v).expect_err(msg);
        assert_eq!(e.to_string(), msg, "for {v}");
    }
}

#[test]
fn max_origins_is_a_parameter_with_a_range() {
    // REQ: DF-PAR-30
    // REQ: DF-SEC-30
    // the origin bound of DF-SEC-2: default 4096, both ends of [1, 2^20] accepted, outside refused
    assert_eq!(SyncConfig::v1_0().max_origins, 4096);
    for n in [1u64, 1 << 20] {
        let c = SyncConfig::from_json(&json!({ "max_origins": n })).expect("in range");
        assert_eq!(c.max_origins as u64, n);
    }
    for n in [0u64, (1 << 20) + 1] {
        assert!(SyncConfig::from_json(&json!({ "max_origins": n })).is_err());
    }
}

#[test]
fn default_is_the_recommended_profile() {
    use df_core::compact::IndexEncoding;
    let c = SyncConfig::default();
    assert_eq!(c.alpha, 1.0);
    assert_eq!(c.ratio, 0.10);
    assert_eq!(c.sync_interval, 20);
    assert_eq!(c.relay_threshold, 1e-6);
    assert_eq!(c.hop_limit, 16);
    assert_eq!(c.max_packet_size, 16_777_216);
    assert_eq!(c.replay_window, 1024);
    assert_eq!(c.max_incarnations, 4);
    assert!(!c.include_buffers);
    assert_eq!(c.encoding, ValueEncoding::Q8);
    assert_eq!(c.max_origins, 4096);
    assert_eq!(c.relay_policy, RelayPolicy::Needed);
    assert_eq!(c.average_over, None);
    // the bounds of forged claims (DF-RCV-52, DF-RCV-175); the grace stays off
    assert_eq!(c.max_seq_jump, 1 << 20);
    assert_eq!(c.index_encoding, IndexEncoding::Packed);
    assert_eq!(c.max_incarnation_ahead, 60_000_000);
    assert_eq!(c.incarnation_grace, 0);
    assert_eq!(c.validate(), Ok(()));
    let v = SyncConfig::v1_0();
    assert_eq!((v.max_seq_jump, v.max_incarnation_ahead), (0, 0));
    // AUTO counts as 1 until a node resolves it
    assert_eq!(c.average_count(), 1);
    assert_eq!(c.send_weight_f32(), 1.0);
    assert_eq!(c.resolve_average(3).average_over, Some(3));
    assert_eq!(SyncConfig::v1_0().resolve_average(3).average_over, Some(1));
    // the JSON form writes AUTO as "auto" and every key that differs from the 1.0 table
    let j = c.to_json();
    assert_eq!(j["average_over"], json!("auto"));
    assert_eq!(j["encoding"], json!("Q8"));
    assert_eq!(j["index_encoding"], json!("PACKED"));
    assert_eq!(j["relay_policy"], json!("NEEDED"));
    assert_eq!(SyncConfig::from_json(&j), Ok(c));
    // absent keys take the 1.0 table's values, not the recommended profile's
    assert_eq!(SyncConfig::from_json(&json!({})), Ok(SyncConfig::v1_0()));
    let auto = SyncConfig::from_json(&json!({"average_over": "auto"})).expect("auto");
    assert_eq!(
        auto,
        SyncConfig {
            average_over: None,
            ..SyncConfig::v1_0()
        }
    );
    for (bad, msg) in [
        (json!("AUTO"), "average_over must be an int, got str"),
        (
            json!(null),
            "average_over must be an int or \"auto\", got null",
        ),
        (json!(0), "average_over must be [1, 65536], got 0"),
    ] {
        let e = SyncConfig::from_json(&json!({ "average_over": bad })).expect_err(msg);
        assert_eq!(e.to_string(), msg);
    }
    let e = SyncConfig {
        average_over: Some(0),
        ..SyncConfig::default()
    }
    .validate()
    .expect_err("0");
    assert_eq!(e.to_string(), "average_over must be [1, 65536], got 0");
}

#[test]
fn outer_average_is_the_rule_of_df_gen_300() {
    use df_core::config::outer_average;
    // REQ: DF-GEN-300 (the demo's rule; the spec's example: 5 nodes every 80 steps)
    assert_eq!(outer_average(5, 80, 0.10), 10);
    assert_eq!(outer_average(5, 80, 0.01), 8);
    for (nodes, si, ratio, m) in [
        (0, 10, 0.05, 1),
        (1, 10, 0.05, 1),
        (1, 400, 0.5, 1),
        (2, 1, 1.0, 2),
        (3, 20, 0.10, 3),
        (3, 40, 0.10, 3),
        (3, 41, 0.10, 4),   // ceil(3 * 41 / 40)
        (3, 41, 0.02, 4),   // ratio * si = 0.82: ceil(3 * 81 / 80)
        (4, 100, 0.01, 7),  // ratio * si = 1 is not above OUTER_SPAN: ceil(4 * 140 / 80)
        (4, 100, 0.02, 10), // ceil(4 * 100 / 40)
        (70_000, 10, 0.05, 65_536),
        (1 << 20, u32::MAX, 1.0, 65_536),
    ] {
        assert_eq!(outer_average(nodes, si, ratio), m, "{nodes} {si} {ratio}");
    }
}

#[test]
fn an_engine_counts_auto_as_one_until_resolved() {
    // REQ: DF-GEN-70 (average_over MAY differ between nodes: the node resolves AUTO itself)
    let m = Manifest::new([TensorSpec::new("w", &[4])]).expect("manifest");
    let auto = SyncConfig {
        ratio: 1.0,
        average_over: None,
        ..SyncConfig::v1_0()
    };
    let mut e = Engine::new(m.clone(), auto.clone(), 1, 1, vec![0.0; 4]).expect("engine");
    assert_eq!(e.average_over(), 1);
    let active = [1.0f32, -2.0, 0.5, 4.0];
    let sent = e.generate(&active, false).expect("generate");
    assert_eq!(sent[0].values, vec![1.0, -2.0, 0.5, 4.0]); // summed, as average_over 1
    assert!(e.last_correction().0.is_empty());
    assert_eq!(e.resolve_average(4), 4);
    assert_eq!(e.average_over(), 4);
    let next = [2.0f32, -4.0, 1.0, 8.0];
    let sent = e.generate(&next, false).expect("generate");
    assert_eq!(sent[0].values, vec![0.25, -0.5, 0.125, 1.0]);
    assert_eq!(e.last_correction().0, &[0, 1, 2, 3]);
    assert_eq!(e.config().average_over, None);
    // a configured average_over is kept
    let mut fixed = Engine::new(
        m,
        SyncConfig {
            average_over: Some(2),
            ..auto
        },
        1,
        1,
        vec![0.0; 4],
    )
    .expect("engine");
    assert_eq!(fixed.resolve_average(9), 2);
}
