//! `Fabric::from_env` (the `DELTA_FABRIC_*` variables of `delta-fabric run`) and `Fabric::finish`
//! over Zenoh: two nodes on tcp/127.0.0.1 (scouting off), the second bootstraps from the first as
//! the launcher's rank 1, both train, finish and agree; a bad variable is one line naming it.

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use df_core::{Manifest, SyncConfig, TensorSpec};
use df_fabric::env::Env;
use df_fabric::{Fabric, FabricError, FabricOptions, VecStore};

use df_zenoh::{FabricFromEnv, ZenohTransport};

const N: usize = 32;

fn store(start: f32) -> VecStore {
    let m = Manifest::new([TensorSpec::new("w", &[N as u64])]).unwrap();
    VecStore::new(m, vec![start; N]).unwrap()
}

fn from_map(
    store: VecStore,
    vars: &HashMap<String, String>,
) -> Result<Fabric<VecStore, ZenohTransport>, FabricError> {
    let f = |k: &str| vars.get(k).cloned();
    Fabric::from_env_with(
        store,
        SyncConfig::default(),
        FabricOptions::default(),
        Env::from_fn(&f),
    )
}

fn vars(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

#[test]
fn two_nodes_from_the_launchers_variables_bootstrap_train_finish_and_agree() {
    let ports = df_zenoh::ports::free_ports(2).unwrap();
    let ns = format!("dftest/from-env-{}", std::process::id());
    let base = |rank: usize| {
        let mut v = vec![
            ("DELTA_FABRIC_NODE_ID", format!("{}", rank + 1)),
            ("DELTA_FABRIC_NAMESPACE", ns.clone()),
            (
                "DELTA_FABRIC_LISTEN",
                format!("tcp/127.0.0.1:{}", ports[rank]),
            ),
            ("DELTA_FABRIC_RANK", rank.to_string()),
            ("DELTA_FABRIC_NODES", "2".to_owned()),
            ("DELTA_FABRIC_SYNC_INTERVAL", "5".to_owned()),
        ];
        if rank == 1 {
            v.push((
                "DELTA_FABRIC_CONNECT",
                format!("tcp/127.0.0.1:{}", ports[0]),
            ));
        }
        vars(&v)
    };
    // rank 0 starts from its own weights (0.25); rank 1 from rank 0's snapshot, not its 9.0
    let mut a = from_map(store(0.25), &base(0)).unwrap();
    let b_vars = base(1);
    // b joins while the cluster is quiescent (DF-ZEN-13's note: deltas in flight during the
    // capture may be applied twice): a trains once b has started from its snapshot
    let (joined, wait_joined) = std::sync::mpsc::channel();
    let hb = thread::spawn(move || {
        let mut b = from_map(store(9.0), &b_vars).unwrap();
        joined.send(()).unwrap();
        assert_eq!(b.joined_from(), Some(1));
        // rank 0's weights, not this node's 9.0
        assert_eq!(b.store().values(), vec![0.25; N]);
        assert_eq!(b.stats()["average_over"], 1); // not generated yet
        for s in 0..40u32 {
            for (j, w) in b.store_mut().values_mut().iter_mut().enumerate() {
                *w -= 0.001 * ((s as usize + j) % 7) as f32;
            }
            b.step().unwrap();
        }
        let shared = b.finish(Duration::from_secs(20)).unwrap();
        assert_eq!(b.stats()["average_over"], 2);
        // stay up until the other node is done too (it may still query this node's info)
        thread::sleep(Duration::from_millis(500));
        shared
    });
    wait_joined.recv_timeout(Duration::from_secs(90)).unwrap();
    for s in 0..40u32 {
        for (j, w) in a.store_mut().values_mut().iter_mut().enumerate() {
            *w += 0.001 * ((s as usize * 3 + j) % 5) as f32;
        }
        a.step().unwrap();
    }
    let sa = a.finish(Duration::from_secs(20)).unwrap();
    let sb = hb.join().unwrap();
    let diff = sa
        .iter()
        .zip(&sb)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let scale = sa.iter().chain(&sb).map(|x| x.abs()).fold(0.0, f32::max);
    assert!(diff <= 5e-2 * scale, "DF-NUM-1: {diff} vs {scale}");
    assert_eq!(a.stats()["average_over"], 2);
}

#[test]
fn a_bad_variable_is_one_line_naming_it() {
    for (pairs, msg) in [
        (
            vec![("DELTA_FABRIC_MODE", "router".to_owned())],
            "DELTA_FABRIC_MODE='router': must be 'peer' or 'client'",
        ),
        (
            vec![("DELTA_FABRIC_NODE_ID", "0".to_owned())],
            "DELTA_FABRIC_NODE_ID='0': must be an integer in [1, 18446744073709551615]",
        ),
        (
            vec![("DELTA_FABRIC_LISTEN", "localhost".to_owned())],
            "DELTA_FABRIC_LISTEN='localhost': 'localhost' is not a Zenoh endpoint such as \
             tcp/127.0.0.1:7447",
        ),
        (
            vec![(
                "DELTA_FABRIC_ZENOH_CONFIG",
                "/no/such/file.json5".to_owned(),
            )],
            "DELTA_FABRIC_ZENOH_CONFIG='/no/such/file.json5': no such file (a Zenoh JSON5 \
             configuration file)",
        ),
        (
            vec![("DELTA_FABRIC_RATIO", "1.5".to_owned())],
            "DELTA_FABRIC_RATIO='1.5': ratio must be in (0, 1], got 1.5",
        ),
        (
            vec![("DELTA_FABRIC_KEYS", "/no/keys.json".to_owned())],
            "DELTA_FABRIC_KEYS='/no/keys.json': needs DELTA_FABRIC_SECRET_KEY: a node of a \
             signed cluster signs",
        ),
    ] {
        let e = from_map(store(0.0), &vars(&pairs)).unwrap_err();
        assert!(matches!(e, FabricError::Env(_)), "{e:?}");
        assert_eq!(e.to_string(), msg);
    }
}
