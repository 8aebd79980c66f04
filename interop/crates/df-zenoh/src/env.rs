//! A node on a Zenoh transport from `DELTA_FABRIC_*` environment variables (what `delta-fabric
//! run` sets; the table is in python/src/delta_fabric/env.py): [`FabricFromEnv::from_env`], the
//! Rust `Fabric.from_env`.
//!
//! ```no_run
//! use df_fabric::{Fabric, VecStore};
//! use df_zenoh::FabricFromEnv;
//! # fn store() -> VecStore { unimplemented!() }
//! let mut fabric = Fabric::from_env(store())?;
//! // ... training: fabric.step()? after every optimizer step ...
//! let shared = fabric.finish(std::time::Duration::from_secs(60))?;
//! # Ok::<(), df_fabric::FabricError>(())
//! ```

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

use df_core::SyncConfig;
use df_fabric::env::{
    CONNECT, Env, EnvError, KEYS, LISTEN, MODE, NAMESPACE, SECRET_KEY, ZENOH_CONFIG,
};
use df_fabric::{Fabric, FabricError, FabricOptions, WeightStore};

use crate::{DEFAULT_NAMESPACE, Mode, TransportConfig, ZenohTransport};

/// 64 random bits (the process's hash keys, seeded by the OS), never 0: a fresh node id
/// (DF-ZEN-7's recommendation) when `DELTA_FABRIC_NODE_ID` is unset.
pub fn random_node_id() -> u64 {
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let n = h.finish();
        if n != 0 {
            return n;
        }
    }
}

/// The transport configuration from `DELTA_FABRIC_NODE_ID` (default: [`random_node_id`]),
/// `_NAMESPACE` (default [`DEFAULT_NAMESPACE`]), `_LISTEN`, `_CONNECT`, `_MODE` (`peer` or
/// `client`), `_ZENOH_CONFIG` (a Zenoh JSON5 file, used as is but for the endpoints `_LISTEN` /
/// `_CONNECT` give), `_RATE_LIMIT` and `_RATE_BURST`; `max_packet_size` is the node's
/// (DF-PAR-6).
pub fn transport_config(
    env: &Env<'_>,
    max_packet_size: usize,
) -> Result<TransportConfig, EnvError> {
    let mut t = TransportConfig::new(env.node_id()?.unwrap_or_else(random_node_id));
    t.namespace = env
        .get(NAMESPACE)
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    t.listen = env.endpoints(LISTEN)?;
    t.connect = env.endpoints(CONNECT)?;
    if let Some(raw) = env.get(MODE) {
        t.mode = match raw.as_str() {
            "peer" => Mode::Peer,
            "client" => Mode::Client,
            _ => return Err(EnvError::new(MODE, &raw, "must be 'peer' or 'client'")),
        };
    }
    if let Some(raw) = env.get(ZENOH_CONFIG) {
        let p = PathBuf::from(&raw);
        if !p.is_file() {
            return Err(EnvError::new(
                ZENOH_CONFIG,
                &raw,
                "no such file (a Zenoh JSON5 configuration file)",
            ));
        }
        t.config_file = Some(p);
        t.endpoints_over_file = true;
    }
    let (rate, burst) = env.rate_limit()?;
    t.rate_limit = rate.unwrap_or(0.0);
    t.rate_burst = burst.unwrap_or(0.0);
    t.max_packet_size = max_packet_size;
    Ok(t)
}

/// The signed-cluster keys (spec section 13.1) from `DELTA_FABRIC_KEYS` (the keys file) and
/// `DELTA_FABRIC_SECRET_KEY` (the file of this node's secret seed); `None` when neither is set.
pub fn signing(env: &Env<'_>, node_id: u64) -> Result<Option<df_core::signing::Signing>, EnvError> {
    match (env.get(KEYS), env.get(SECRET_KEY)) {
        (None, None) => Ok(None),
        (Some(k), None) => Err(EnvError::new(
            KEYS,
            &k,
            format!("needs {SECRET_KEY}: a node of a signed cluster signs"),
        )),
        (None, Some(s)) => Err(EnvError::new(SECRET_KEY, &s, format!("needs {KEYS}"))),
        (Some(k), Some(s)) => {
            df_core::signing::Signing::load(k.as_ref(), Some(s.as_ref()), Some(node_id))
                .map(Some)
                .map_err(|e| {
                    let msg = e.to_string();
                    if msg.contains("secret") {
                        EnvError::new(SECRET_KEY, &s, msg)
                    } else {
                        EnvError::new(KEYS, &k, msg)
                    }
                })
        }
    }
}

/// `Fabric::from_env`: a node on a [`ZenohTransport`] configured from the `DELTA_FABRIC_*`
/// variables (bring the trait into scope: `use df_zenoh::FabricFromEnv;`).
pub trait FabricFromEnv<W: WeightStore>: Sized {
    /// [`FabricFromEnv::from_env_with`] with the recommended profile ([`SyncConfig::default`],
    /// [`FabricOptions::default`]) as the program's defaults and the process environment.
    fn from_env(store: W) -> Result<Self, FabricError> {
        Self::from_env_with(
            store,
            SyncConfig::default(),
            FabricOptions::default(),
            Env::process(),
        )
    }

    /// A node whose transport comes from [`transport_config`], whose sync parameters are
    /// `config` with every set `DELTA_FABRIC_<FIELD>` applied ([`Env::sync_config`]), whose
    /// options are `options` with `DELTA_FABRIC_REPAIR`, `_MEMBERS`, `_LIVE_MEMBERS`,
    /// `_MEMBER_GRACE`, `_NODES` (the world-size hint of an AUTO `average_over`) and
    /// `_BOOTSTRAP` applied ([`Env::fabric_options`]: under the launcher every rank but 0 starts
    /// from a live peer's snapshot), and which signs with `_KEYS` / `_SECRET_KEY` when set. A bad
    /// variable is [`FabricError::Env`], whose message is one line naming it. Does not wait for
    /// peers (DF-ZEN-16).
    fn from_env_with(
        store: W,
        config: SyncConfig,
        options: FabricOptions,
        env: Env<'_>,
    ) -> Result<Self, FabricError>;
}

impl<W: WeightStore> FabricFromEnv<W> for Fabric<W, ZenohTransport> {
    fn from_env_with(
        store: W,
        config: SyncConfig,
        options: FabricOptions,
        env: Env<'_>,
    ) -> Result<Self, FabricError> {
        let config = env.sync_config(config)?;
        let options = env.fabric_options(options)?;
        let tc = transport_config(&env, config.max_packet_size)?;
        let signing = signing(&env, tc.node_id)?;
        let node_id = tc.node_id;
        let transport = ZenohTransport::open(tc)?;
        let fabric = Fabric::with_options(store, transport, config, options)?;
        if signing.is_some() {
            fabric.set_signing(signing)?;
        } else {
            df_fabric::logging::say_unsigned(node_id);
        }
        Ok(fabric)
    }
}
