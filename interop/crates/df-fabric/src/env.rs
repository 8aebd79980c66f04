//! Settings from `DELTA_FABRIC_*` environment variables, the way `torchrun` users expect
//! (`delta-fabric run` sets them): the same variables, rules and one-line messages as Python's
//! `delta_fabric.env` (python/src/delta_fabric/env.py has the table).
//!
//! Every variable is optional; an empty value counts as unset. A bad value is an [`EnvError`],
//! whose message names the variable and the value: `DELTA_FABRIC_RATIO='2': ratio must be in
//! (0, 1], got 2.0`. The readers take an [`Env`], the process environment ([`Env::process`]) or
//! any lookup function (tests). The Zenoh transport's variables are read by `df_zenoh`
//! (`df_zenoh::env`), which also builds a whole node from them (`Fabric::from_env`).

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use df_core::SyncConfig;
use df_core::compact::IndexEncoding;
use df_core::config::RelayPolicy;
use df_core::encodings::ValueEncoding;

use crate::fabric::{FabricOptions, JoinOptions};

/// The prefix of every variable.
pub const PREFIX: &str = "DELTA_FABRIC_";
/// This node's id: decimal or `0x` hex, in [1, 2^64) (default: 64 random bits).
pub const NODE_ID: &str = "DELTA_FABRIC_NODE_ID";
/// The cluster namespace.
pub const NAMESPACE: &str = "DELTA_FABRIC_NAMESPACE";
/// Comma list of Zenoh endpoints to listen on.
pub const LISTEN: &str = "DELTA_FABRIC_LISTEN";
/// Comma list of Zenoh endpoints to connect to.
pub const CONNECT: &str = "DELTA_FABRIC_CONNECT";
/// `peer` (default) or `client`.
pub const MODE: &str = "DELTA_FABRIC_MODE";
/// A Zenoh JSON5 configuration file.
pub const ZENOH_CONFIG: &str = "DELTA_FABRIC_ZENOH_CONFIG";
/// `auto`, `1` (required) or `0`: start from a live peer's snapshot (DF-ZEN-5).
pub const BOOTSTRAP: &str = "DELTA_FABRIC_BOOTSTRAP";
/// This node's global rank (set by the launcher).
pub const RANK: &str = "DELTA_FABRIC_RANK";
/// How many nodes the run expects in all (world size).
pub const NODES: &str = "DELTA_FABRIC_NODES";
/// This process's index among the launcher's local nodes.
pub const LOCAL_RANK: &str = "DELTA_FABRIC_LOCAL_RANK";
/// How many nodes the launcher started on this machine.
pub const LOCAL_NODES: &str = "DELTA_FABRIC_LOCAL_NODES";
/// `1`: anti-entropy by gap repair (spec section 7.9).
pub const REPAIR: &str = "DELTA_FABRIC_REPAIR";
/// Comma list of the cluster's node ids (DF-RCV-51, DF-ZEN-151).
pub const MEMBERS: &str = "DELTA_FABRIC_MEMBERS";
/// `1`: members are the nodes with a live liveliness token (DF-ZEN-150).
pub const LIVE_MEMBERS: &str = "DELTA_FABRIC_LIVE_MEMBERS";
/// Seconds a member that left stays one (default 10).
pub const MEMBER_GRACE: &str = "DELTA_FABRIC_MEMBER_GRACE";
/// Packets per second each sender may queue (DF-ZEN-153).
pub const RATE_LIMIT: &str = "DELTA_FABRIC_RATE_LIMIT";
/// Packets a sender may queue at once.
pub const RATE_BURST: &str = "DELTA_FABRIC_RATE_BURST";
/// The keys file of a signed cluster (spec section 13.1).
pub const KEYS: &str = "DELTA_FABRIC_KEYS";
/// The file of this node's Ed25519 secret seed.
pub const SECRET_KEY: &str = "DELTA_FABRIC_SECRET_KEY";

/// How long a node under the launcher (rank > 0) looks for a live peer's snapshot to start from.
pub const LAUNCH_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(120);

/// An environment variable holds a value DeltaFabric cannot use: `variable` and `value` say
/// which, `expected` what is expected. Its message is one line:
/// `DELTA_FABRIC_MODE='router': must be 'peer' or 'client'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// The variable, e.g. `DELTA_FABRIC_RATIO`.
    pub variable: String,
    /// Its value (trimmed).
    pub value: String,
    /// What is expected.
    pub expected: String,
}

impl EnvError {
    /// The error of `variable` holding `value`.
    pub fn new(variable: &str, value: &str, expected: impl Into<String>) -> EnvError {
        EnvError {
            variable: variable.to_owned(),
            value: value.to_owned(),
            expected: expected.into(),
        }
    }
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}='{}': {}", self.variable, self.value, self.expected)
    }
}

impl std::error::Error for EnvError {}

/// Where the variables come from: the process environment or a lookup function.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl fmt::Debug for Env<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Env").finish_non_exhaustive()
    }
}

fn process_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Whether to start from a live peer's snapshot (`DELTA_FABRIC_BOOTSTRAP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// Start from the store's weights (`0`, the default).
    Off,
    /// Start from a live peer's snapshot, or from the store's weights when none is found (`auto`).
    Auto,
    /// Start from a live peer's snapshot; none is an error (`1`).
    Required,
}

impl<'a> Env<'a> {
    /// The process environment.
    pub fn process() -> Env<'static> {
        Env {
            lookup: &process_lookup,
        }
    }

    /// The variables `lookup` returns (`None`: unset).
    pub fn from_fn(lookup: &'a dyn Fn(&str) -> Option<String>) -> Env<'a> {
        Env { lookup }
    }

    /// The trimmed value of `name`; `None` when unset or blank.
    pub fn get(&self, name: &str) -> Option<String> {
        let raw = (self.lookup)(name)?;
        let raw = raw.trim();
        (!raw.is_empty()).then(|| raw.to_owned())
    }

    /// An integer, decimal or `0x` / `0o` / `0b` (Python's `int(raw, 0)`; `_` separators), in
    /// `[lo, hi]`.
    pub fn int(&self, name: &str, lo: i128, hi: i128) -> Result<Option<i128>, EnvError> {
        let Some(raw) = self.get(name) else {
            return Ok(None);
        };
        parse_int(&raw)
            .filter(|v| (lo..=hi).contains(v))
            .map(Some)
            .ok_or_else(|| EnvError::new(name, &raw, format!("must be an integer in [{lo}, {hi}]")))
    }

    /// An integer `>= lo` (at most 2^64 - 1), as [`Env::int`].
    pub fn int_min(&self, name: &str, lo: i128) -> Result<Option<u64>, EnvError> {
        let Some(raw) = self.get(name) else {
            return Ok(None);
        };
        parse_int(&raw)
            .filter(|v| *v >= lo)
            .and_then(|v| u64::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| EnvError::new(name, &raw, format!("must be an integer >= {lo}")))
    }

    /// A finite number.
    pub fn float(&self, name: &str) -> Result<Option<f64>, EnvError> {
        let Some(raw) = self.get(name) else {
            return Ok(None);
        };
        let v: f64 =
            parse_float(&raw).ok_or_else(|| EnvError::new(name, &raw, "must be a number"))?;
        if !v.is_finite() {
            return Err(EnvError::new(name, &raw, "must be a finite number"));
        }
        Ok(Some(v))
    }

    /// `1/0`, `true/false`, `yes/no` or `on/off` (any case).
    pub fn boolean(&self, name: &str) -> Result<Option<bool>, EnvError> {
        let Some(raw) = self.get(name) else {
            return Ok(None);
        };
        match raw.to_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Some(true)),
            "0" | "false" | "no" | "off" => Ok(Some(false)),
            _ => Err(EnvError::new(
                name,
                &raw,
                "must be 1/0, true/false, yes/no or on/off",
            )),
        }
    }

    /// A comma list of Zenoh endpoints (`proto/address`); empty when unset.
    pub fn endpoints(&self, name: &str) -> Result<Vec<String>, EnvError> {
        let Some(raw) = self.get(name) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for e in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match e.split_once('/') {
                Some((p, a))
                    if !p.is_empty() && !a.is_empty() && !e.contains(char::is_whitespace) =>
                {
                    out.push(e.to_owned());
                }
                _ => {
                    return Err(EnvError::new(
                        name,
                        &raw,
                        format!("'{e}' is not a Zenoh endpoint such as tcp/127.0.0.1:7447"),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// `DELTA_FABRIC_NODE_ID` (decimal or `0x` hex, in [1, 2^64)); `None` when unset.
    pub fn node_id(&self) -> Result<Option<u64>, EnvError> {
        Ok(self
            .int(NODE_ID, 1, i128::from(u64::MAX))?
            .map(|v| v as u64))
    }

    /// `DELTA_FABRIC_BOOTSTRAP`: `auto`, `1` (required) or `0` (the default); under the launcher
    /// (`DELTA_FABRIC_RANK` set) and with the variable unset, [`Bootstrap::Required`] for every
    /// rank but 0, so that every node starts from rank 0's weights.
    pub fn bootstrap(&self) -> Result<Bootstrap, EnvError> {
        if let Some(raw) = self.get(BOOTSTRAP) {
            if raw.eq_ignore_ascii_case("auto") {
                return Ok(Bootstrap::Auto);
            }
            return match self.boolean(BOOTSTRAP) {
                Ok(Some(true)) => Ok(Bootstrap::Required),
                Ok(_) => Ok(Bootstrap::Off),
                Err(_) => Err(EnvError::new(
                    BOOTSTRAP,
                    &raw,
                    "must be auto, 1/0, true/false, yes/no or on/off",
                )),
            };
        }
        Ok(match self.rank()? {
            Some(r) if r > 0 => Bootstrap::Required,
            _ => Bootstrap::Off,
        })
    }

    /// `DELTA_FABRIC_RANK`: this node's global rank (`None` when unset).
    pub fn rank(&self) -> Result<Option<u64>, EnvError> {
        self.int_min(RANK, 0)
    }

    /// `DELTA_FABRIC_NODES`: how many nodes the run expects in all (`None` when unset).
    pub fn nodes(&self) -> Result<Option<usize>, EnvError> {
        Ok(self
            .int_min(NODES, 1)?
            .map(|v| usize::try_from(v).unwrap_or(usize::MAX)))
    }

    /// `DELTA_FABRIC_LOCAL_RANK` (`None` when unset).
    pub fn local_rank(&self) -> Result<Option<u64>, EnvError> {
        self.int_min(LOCAL_RANK, 0)
    }

    /// `DELTA_FABRIC_LOCAL_NODES` (`None` when unset).
    pub fn local_nodes(&self) -> Result<Option<u64>, EnvError> {
        self.int_min(LOCAL_NODES, 1)
    }

    /// `(members, live_members, member_grace)` from `DELTA_FABRIC_MEMBERS` (comma list of node
    /// ids, decimal or `0x` hex), `_LIVE_MEMBERS` (default off) and `_MEMBER_GRACE` (seconds >= 0,
    /// default 10).
    pub fn membership(&self) -> Result<(Option<HashSet<u64>>, bool, Duration), EnvError> {
        let members = match self.get(MEMBERS) {
            None => None,
            Some(raw) => {
                let mut ids = HashSet::new();
                for part in raw.split(',').map(str::trim) {
                    let id = parse_int(part)
                        .filter(|v| (1..=i128::from(u64::MAX)).contains(v))
                        .ok_or_else(|| {
                            EnvError::new(
                                MEMBERS,
                                &raw,
                                format!(
                                    "'{part}' is not a node id in [1, 2**64) (decimal or 0x hex)"
                                ),
                            )
                        })?;
                    ids.insert(id as u64);
                }
                Some(ids)
            }
        };
        let live = self.boolean(LIVE_MEMBERS)?.unwrap_or(false);
        let grace = match self.float(MEMBER_GRACE)? {
            None => crate::fabric::DEFAULT_MEMBER_GRACE,
            Some(g) => Duration::try_from_secs_f64(g).map_err(|_| {
                EnvError::new(
                    MEMBER_GRACE,
                    &self.get(MEMBER_GRACE).unwrap_or_default(),
                    "must be >= 0 seconds",
                )
            })?,
        };
        Ok((members, live, grace))
    }

    /// `(rate, burst)` from `DELTA_FABRIC_RATE_LIMIT` / `_RATE_BURST` (numbers >= 0; unset:
    /// `None`).
    pub fn rate_limit(&self) -> Result<(Option<f64>, Option<f64>), EnvError> {
        let mut out = [None, None];
        for (i, name) in [RATE_LIMIT, RATE_BURST].into_iter().enumerate() {
            if let Some(v) = self.float(name)? {
                if v < 0.0 {
                    return Err(EnvError::new(
                        name,
                        &self.get(name).unwrap_or_default(),
                        "must be a number >= 0",
                    ));
                }
                out[i] = Some(v);
            }
        }
        Ok((out[0], out[1]))
    }

    /// The sync parameters: `defaults` (the program's own values) with every field whose
    /// `DELTA_FABRIC_<FIELD>` variable is set replaced (`RATIO`, `ALPHA`, `SYNC_INTERVAL`,
    /// `RELAY_THRESHOLD`, `HOP_LIMIT`, `MAX_PACKET_SIZE`, `REPLAY_WINDOW`, `MAX_INCARNATIONS`,
    /// `ENCODING`, `INCLUDE_BUFFERS`, `MAX_ORIGINS`, `RELAY_POLICY`, `AVERAGE_OVER` (an integer or
    /// `auto`), `MAX_SEQ_JUMP`, `INDEX_ENCODING`, `MAX_INCARNATION_AHEAD`, `INCARNATION_GRACE`).
    /// A value outside its range is an [`EnvError`] with the range check's message.
    pub fn sync_config(&self, defaults: SyncConfig) -> Result<SyncConfig, EnvError> {
        let mut c = defaults;
        for key in df_core::config::CONFIG_KEYS {
            let name = format!("{PREFIX}{}", key.to_ascii_uppercase());
            let Some(raw) = self.get(&name) else {
                continue;
            };
            let bad = |expected: &str| EnvError::new(&name, &raw, expected);
            let int = || parse_int(&raw).ok_or_else(|| bad("must be an integer"));
            match key {
                "alpha" | "ratio" | "relay_threshold" => {
                    let v = self.float(&name)?.unwrap_or_default();
                    // the field alone in an otherwise valid config: the range check names it
                    let mut one = SyncConfig::v1_0();
                    match key {
                        "alpha" => (c.alpha, one.alpha) = (v, v),
                        "ratio" => (c.ratio, one.ratio) = (v, v),
                        _ => (c.relay_threshold, one.relay_threshold) = (v, v),
                    }
                    one.validate().map_err(|e| bad(&e.to_string()))?;
                }
                "include_buffers" => {
                    c.include_buffers = self.boolean(&name)?.unwrap_or_default();
                }
                "encoding" => {
                    c.encoding =
                        ValueEncoding::from_name(&raw.to_ascii_uppercase()).ok_or_else(|| {
                            bad(&format!("must be one of {}", df_core::encodings::names()))
                        })?;
                }
                "index_encoding" => {
                    c.index_encoding = IndexEncoding::from_name(&raw.to_ascii_uppercase())
                        .ok_or_else(|| {
                            bad(&format!(
                                "index_encoding must be one of PLAIN, PACKED, got '{raw}'"
                            ))
                        })?;
                }
                "relay_policy" => {
                    c.relay_policy = RelayPolicy::from_name(&raw).ok_or_else(|| {
                        bad(&format!(
                            "relay_policy must be one of ALL, NEEDED, got '{raw}'"
                        ))
                    })?;
                }
                "average_over" if raw.eq_ignore_ascii_case("auto") => c.average_over = None,
                _ => {
                    let v = if key == "average_over" {
                        parse_int(&raw).ok_or_else(|| bad("must be an integer or \"auto\""))?
                    } else {
                        int()?
                    };
                    let (lo, hi) = int_range(key);
                    if !(lo..=hi).contains(&v) {
                        return Err(bad(&format!("{key} must be [{lo}, {hi}], got {v}")));
                    }
                    match key {
                        "sync_interval" => c.sync_interval = v as u32,
                        "hop_limit" => c.hop_limit = v as u8,
                        "max_packet_size" => c.max_packet_size = v as usize,
                        "replay_window" => c.replay_window = v as u64,
                        "max_incarnations" => c.max_incarnations = v as usize,
                        "max_origins" => c.max_origins = v as usize,
                        "average_over" => c.average_over = Some(v as u32),
                        "max_seq_jump" => c.max_seq_jump = v as u64,
                        "max_incarnation_ahead" => c.max_incarnation_ahead = v as u64,
                        "incarnation_grace" => c.incarnation_grace = v as u64,
                        _ => {}
                    }
                }
            }
        }
        Ok(c)
    }

    /// The node options: `defaults` with `DELTA_FABRIC_REPAIR`, `_MEMBERS`, `_LIVE_MEMBERS`,
    /// `_MEMBER_GRACE`, `_NODES` (the world-size hint of an AUTO `average_over`) and
    /// `_BOOTSTRAP` (with the launcher's rank rule, [`Env::bootstrap`]) applied when set.
    pub fn fabric_options(&self, defaults: FabricOptions) -> Result<FabricOptions, EnvError> {
        let mut o = defaults;
        if let Some(r) = self.boolean(REPAIR)? {
            o.repair = r;
        }
        let (members, live, grace) = self.membership()?;
        if members.is_some() {
            o.members = members;
        }
        if live {
            o.live_members = true;
        }
        o.member_grace = grace;
        if let Some(n) = self.nodes()? {
            o.world_size = Some(n);
        }
        let launched = self.rank()?.is_some_and(|r| r > 0);
        match self.bootstrap()? {
            Bootstrap::Off => {}
            b => {
                let j = o.join.get_or_insert_with(JoinOptions::default);
                j.required = b == Bootstrap::Required;
                if launched {
                    // rank 0 may still be starting: wait for it longer
                    j.timeout = j.timeout.max(LAUNCH_BOOTSTRAP_TIMEOUT);
                }
            }
        }
        Ok(o)
    }
}

/// The allowed range of an integer parameter (DF-PAR-11), as [`SyncConfig::validate`] checks it.
fn int_range(key: &str) -> (i128, i128) {
    use df_core::config as k;
    let (lo, hi): (u64, u64) = match key {
        "sync_interval" => (1, u64::from(k::MAX_SYNC_INTERVAL)),
        "hop_limit" => (0, 255),
        "max_packet_size" => (k::MIN_MAX_PACKET_SIZE as u64, k::MAX_MAX_PACKET_SIZE as u64),
        "replay_window" => (1, k::MAX_REPLAY_WINDOW),
        "max_incarnations" => (1, k::MAX_MAX_INCARNATIONS as u64),
        "max_origins" => (1, k::MAX_MAX_ORIGINS as u64),
        "average_over" => (1, k::MAX_AVERAGE_OVER),
        "max_seq_jump" => (0, k::MAX_SEQ_JUMP),
        "max_incarnation_ahead" => (0, k::MAX_INCARNATION_AHEAD),
        "incarnation_grace" => (0, k::MAX_INCARNATION_GRACE),
        _ => (0, 0),
    };
    (i128::from(lo), i128::from(hi))
}

/// Python's `int(raw, 0)` for the forms a user writes: an optional sign, decimal or a `0x` /
/// `0o` / `0b` prefix, `_` between digits.
pub fn parse_int(raw: &str) -> Option<i128> {
    let s = raw.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let lower = s.to_ascii_lowercase();
    let (digits, radix) = if let Some(h) = lower.strip_prefix("0x") {
        (h, 16)
    } else if let Some(o) = lower.strip_prefix("0o") {
        (o, 8)
    } else if let Some(b) = lower.strip_prefix("0b") {
        (b, 2)
    } else {
        (lower.as_str(), 10)
    };
    // Python allows one `_` right after a radix prefix (`0x_ff`), never before decimal digits
    let digits = if radix == 10 {
        digits
    } else {
        digits.strip_prefix('_').unwrap_or(digits)
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || digits.starts_with(['+', '-'])
    {
        return None;
    }
    let v = i128::from_str_radix(&digits.replace('_', ""), radix).ok()?;
    Some(if neg { -v } else { v })
}

/// Python's `float(raw)` for the forms a user writes (`1e-3`, `.5`, `inf`, `nan`).
fn parse_float(raw: &str) -> Option<f64> {
    let s = raw.trim().replace('_', "");
    match s.to_ascii_lowercase().trim_start_matches(['+', '-']) {
        "inf" | "infinity" | "nan" => return Some(f64::INFINITY),
        _ => {}
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn sync_config_reads_every_field_and_names_a_bad_one() {
        let m = env_of(&[
            ("DELTA_FABRIC_RATIO", "0.2"),
            ("DELTA_FABRIC_SYNC_INTERVAL", "0x10"),
            ("DELTA_FABRIC_ENCODING", "f16"),
            ("DELTA_FABRIC_INDEX_ENCODING", "plain"),
            ("DELTA_FABRIC_RELAY_POLICY", "all"),
            ("DELTA_FABRIC_AVERAGE_OVER", "4"),
            ("DELTA_FABRIC_INCLUDE_BUFFERS", "yes"),
            ("DELTA_FABRIC_HOP_LIMIT", " 3 "),
            ("DELTA_FABRIC_ALPHA", ""),
        ]);
        let f = |k: &str| m.get(k).cloned();
        let c = Env::from_fn(&f).sync_config(SyncConfig::default()).unwrap();
        assert_eq!(c.ratio, 0.2);
        assert_eq!(c.sync_interval, 16);
        assert_eq!(c.encoding, ValueEncoding::F16);
        assert_eq!(c.index_encoding, IndexEncoding::Plain);
        assert_eq!(c.relay_policy, RelayPolicy::All);
        assert_eq!(c.average_over, Some(4));
        assert!(c.include_buffers);
        assert_eq!(c.hop_limit, 3);
        assert_eq!(c.alpha, 1.0);
        let auto = env_of(&[("DELTA_FABRIC_AVERAGE_OVER", "AUTO")]);
        let f = |k: &str| auto.get(k).cloned();
        let c = Env::from_fn(&f).sync_config(SyncConfig::v1_0()).unwrap();
        assert_eq!(c.average_over, None);
        for (var, value, msg) in [
            (
                "DELTA_FABRIC_RATIO",
                "2",
                "DELTA_FABRIC_RATIO='2': ratio must be in (0, 1], got 2.0",
            ),
            (
                "DELTA_FABRIC_RATIO",
                "x",
                "DELTA_FABRIC_RATIO='x': must be a number",
            ),
            (
                "DELTA_FABRIC_SYNC_INTERVAL",
                "0",
                "DELTA_FABRIC_SYNC_INTERVAL='0': sync_interval must be [1, 4294967295], got 0",
            ),
            (
                "DELTA_FABRIC_SYNC_INTERVAL",
                "ten",
                "DELTA_FABRIC_SYNC_INTERVAL='ten': must be an integer",
            ),
            (
                "DELTA_FABRIC_AVERAGE_OVER",
                "many",
                "DELTA_FABRIC_AVERAGE_OVER='many': must be an integer or \"auto\"",
            ),
            (
                "DELTA_FABRIC_AVERAGE_OVER",
                "0",
                "DELTA_FABRIC_AVERAGE_OVER='0': average_over must be [1, 65536], got 0",
            ),
            (
                "DELTA_FABRIC_ENCODING",
                "F8",
                "DELTA_FABRIC_ENCODING='F8': must be one of F32, F16, BF16, Q8",
            ),
            (
                "DELTA_FABRIC_INCLUDE_BUFFERS",
                "maybe",
                "DELTA_FABRIC_INCLUDE_BUFFERS='maybe': must be 1/0, true/false, yes/no or on/off",
            ),
        ] {
            let m = env_of(&[(var, value)]);
            let f = |k: &str| m.get(k).cloned();
            let e = Env::from_fn(&f)
                .sync_config(SyncConfig::default())
                .unwrap_err();
            assert_eq!(e.to_string(), msg);
            assert_eq!(e.variable, var);
            assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn fabric_options_read_membership_world_size_and_the_launchers_bootstrap() {
        let m = env_of(&[
            ("DELTA_FABRIC_REPAIR", "0"),
            ("DELTA_FABRIC_MEMBERS", "1, 0x2"),
            ("DELTA_FABRIC_LIVE_MEMBERS", "1"),
            ("DELTA_FABRIC_MEMBER_GRACE", "2.5"),
            ("DELTA_FABRIC_NODES", "4"),
            ("DELTA_FABRIC_RANK", "1"),
        ]);
        let f = |k: &str| m.get(k).cloned();
        let o = Env::from_fn(&f)
            .fabric_options(FabricOptions::default())
            .unwrap();
        assert!(!o.repair);
        assert!(o.hold_residual);
        assert_eq!(o.members, Some([1u64, 2].into_iter().collect()));
        assert!(o.live_members);
        assert_eq!(o.member_grace, Duration::from_millis(2500));
        assert_eq!(o.world_size, Some(4));
        let j = o.join.expect("rank 1 bootstraps");
        assert!(j.required);
        assert_eq!(j.timeout, LAUNCH_BOOTSTRAP_TIMEOUT);
        // rank 0 starts from its own weights; BOOTSTRAP wins over the rank rule
        for (pairs, join) in [
            (vec![("DELTA_FABRIC_RANK", "0")], None),
            (vec![], None),
            (
                vec![
                    ("DELTA_FABRIC_RANK", "0"),
                    ("DELTA_FABRIC_BOOTSTRAP", "auto"),
                ],
                Some(false),
            ),
            (
                vec![("DELTA_FABRIC_RANK", "3"), ("DELTA_FABRIC_BOOTSTRAP", "0")],
                None,
            ),
            (vec![("DELTA_FABRIC_BOOTSTRAP", "yes")], Some(true)),
        ] {
            let m = env_of(&pairs);
            let f = |k: &str| m.get(k).cloned();
            let o = Env::from_fn(&f)
                .fabric_options(FabricOptions::default())
                .unwrap();
            assert_eq!(o.join.map(|j| j.required), join, "{pairs:?}");
        }
        for (var, value, msg) in [
            (
                "DELTA_FABRIC_MEMBERS",
                "1,x",
                "DELTA_FABRIC_MEMBERS='1,x': 'x' is not a node id in [1, 2**64) (decimal or 0x hex)",
            ),
            (
                "DELTA_FABRIC_NODES",
                "0",
                "DELTA_FABRIC_NODES='0': must be an integer >= 1",
            ),
            (
                "DELTA_FABRIC_BOOTSTRAP",
                "sometimes",
                "DELTA_FABRIC_BOOTSTRAP='sometimes': must be auto, 1/0, true/false, yes/no or on/off",
            ),
            (
                "DELTA_FABRIC_MEMBER_GRACE",
                "-1",
                "DELTA_FABRIC_MEMBER_GRACE='-1': must be >= 0 seconds",
            ),
        ] {
            let m = env_of(&[(var, value)]);
            let f = |k: &str| m.get(k).cloned();
            let e = Env::from_fn(&f)
                .fabric_options(FabricOptions::default())
                .unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
    }

    #[test]
    fn integers_read_as_python_reads_them() {
        assert_eq!(parse_int("42"), Some(42));
        assert_eq!(parse_int("0x2A"), Some(42));
        assert_eq!(parse_int("1_000"), Some(1000));
        assert_eq!(parse_int("-3"), Some(-3));
        assert_eq!(parse_int("0b101"), Some(5));
        for bad in ["", "x", "1__0", "_1", "1_", "0x", "--1", "1.0"] {
            assert_eq!(parse_int(bad), None, "{bad}");
        }
    }
}
