//! Sync parameters (spec section 3, DF-PAR): [`SyncConfig`].
//!
//! Every parameter is checked against the spec's allowed range (DF-PAR-11) by
//! [`SyncConfig::new`], [`SyncConfig::validate`], [`SyncConfig::from_json`] and
//! [`crate::Engine::new`], with the same rules and messages as the Python reference
//! (`delta_fabric.config.SyncConfig`).

use std::fmt;

use serde_json::{Map, Value, json};

use crate::compact::IndexEncoding;
use crate::encodings::ValueEncoding;
use crate::replay::DEFAULT_MAX_ORIGINS;
use crate::wire::{PACKET_OVERHEAD_BOUND, entry_size_bound};

/// Smallest accepted `max_packet_size`: a packet with one entry of one value (DF-PAR-6, DF-RLY-3).
pub const MIN_MAX_PACKET_SIZE: usize = PACKET_OVERHEAD_BOUND + 128 + 8;
/// Largest accepted `max_packet_size` (DF-PAR-6).
pub const MAX_MAX_PACKET_SIZE: usize = 2_147_483_647;
/// Largest accepted `replay_window` (DF-PAR-7).
pub const MAX_REPLAY_WINDOW: u64 = 1 << 20;
/// Largest accepted `max_incarnations` (DF-PAR-8).
pub const MAX_MAX_INCARNATIONS: usize = 1 << 16;
/// Largest accepted `max_origins` (DF-PAR-30, the origin bound of DF-SEC-2).
pub const MAX_MAX_ORIGINS: usize = 1 << 20;
/// Largest `average_over` accepted (DF-PAR-70).
pub const MAX_AVERAGE_OVER: u64 = 1 << 16;
/// Local steps between syncs up to which [`outer_average`] gives the cluster size (an outer
/// learning rate of 1, DF-GEN-300).
pub const OUTER_INTERVAL: u32 = 40;
/// `ratio * sync_interval` above which [`outer_average`] damps by `sync_interval / OUTER_INTERVAL`.
pub const OUTER_SPAN: f64 = 1.0;

/// The `average_over` a node of `nodes` averaging nodes (itself included) uses when its
/// configuration says AUTO (`average_over: None`; DF-GEN-70, DF-GEN-300): `nodes` up to
/// [`OUTER_INTERVAL`] local steps between syncs (an outer learning rate of 1); beyond,
/// `ceil(nodes * sync_interval / OUTER_INTERVAL)` when `ratio * sync_interval` exceeds
/// [`OUTER_SPAN`], else the milder `ceil(nodes * (OUTER_INTERVAL + sync_interval) / (2 *
/// OUTER_INTERVAL))`; at most [`MAX_AVERAGE_OVER`], and 1 for a node alone (the demo's rule,
/// measured in docs/convergence-sweep.md).
pub fn outer_average(nodes: usize, sync_interval: u32, ratio: f64) -> u32 {
    if nodes <= 1 {
        return 1;
    }
    let c = nodes as u128;
    let si = u128::from(sync_interval);
    let oi = u128::from(OUTER_INTERVAL);
    let m = if sync_interval <= OUTER_INTERVAL {
        c
    } else if ratio * f64::from(sync_interval) > OUTER_SPAN {
        (c * si).div_ceil(oi)
    } else {
        (c * (oi + si)).div_ceil(2 * oi)
    };
    m.min(u128::from(MAX_AVERAGE_OVER)) as u32
}
/// Largest accepted `sync_interval` (DF-PAR-3, erratum 1.1): 2^32 - 1, the `u32` of
/// [`SyncConfig::sync_interval`], exact in every JSON parser.
pub const MAX_SYNC_INTERVAL: u32 = u32::MAX;
/// Largest accepted `max_seq_jump` (DF-PAR-50): 2^32, exact in every JSON parser.
pub const MAX_SEQ_JUMP: u64 = 1 << 32;
/// Largest accepted `max_incarnation_ahead` (DF-PAR-175): 2^40 microseconds (about 12.7 days).
pub const MAX_INCARNATION_AHEAD: u64 = 1 << 40;
/// Largest accepted `incarnation_grace` (DF-PAR-178): 2^40 microseconds.
pub const MAX_INCARNATION_GRACE: u64 = 1 << 40;

/// The JSON keys [`SyncConfig::from_json`] accepts: the spec's parameters (section 3), the origin
/// bound `max_origins` (DF-PAR-30), `max_seq_jump` (DF-PAR-50), the relay policy (DF-PAR-60) and
/// `average_over` (DF-PAR-70), `index_encoding` (DF-PAR-110) and `max_incarnation_ahead`
/// (DF-PAR-175) and `incarnation_grace` (DF-PAR-178), all added in 1.1.
pub const CONFIG_KEYS: [&str; 17] = [
    "alpha",
    "ratio",
    "sync_interval",
    "relay_threshold",
    "hop_limit",
    "max_packet_size",
    "replay_window",
    "max_incarnations",
    "include_buffers",
    "encoding",
    "max_origins",
    "relay_policy",
    "average_over",
    "max_seq_jump",
    "index_encoding",
    "max_incarnation_ahead",
    "incarnation_grace",
];

/// Which accepted entries a node relays (DF-PAR-60, spec section 8.6; added in 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RelayPolicy {
    /// Every relay candidate (the 1.0 behaviour, the default).
    #[default]
    All,
    /// Only candidates some neighbour may still lack (DF-RLY-60); the node advertises the senders
    /// it hears (DF-RLY-61).
    Needed,
}

impl RelayPolicy {
    /// `"ALL"` or `"NEEDED"` (the JSON and environment spelling).
    pub fn name(self) -> &'static str {
        match self {
            RelayPolicy::All => "ALL",
            RelayPolicy::Needed => "NEEDED",
        }
    }
    /// The policy of a name, case-insensitive.
    pub fn from_name(s: &str) -> Option<RelayPolicy> {
        match s.to_ascii_uppercase().as_str() {
            "ALL" => Some(RelayPolicy::All),
            "NEEDED" => Some(RelayPolicy::Needed),
            _ => None,
        }
    }
}

/// A configuration value outside its allowed range, of the wrong type, or an unknown key
/// (DF-PAR-11: a node refuses to start with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A value outside its allowed range, e.g. `alpha must be in (0, 1], got 0`.
    OutOfRange {
        /// The parameter.
        name: &'static str,
        /// The allowed range as the message writes it (`in (0, 1]`, `[1, 1048576]`, `>= 0`,
        /// `finite`).
        allowed: String,
        /// The rejected value, printed.
        got: String,
    },
    /// A JSON value of the wrong type, e.g. `hop_limit must be an int, got str`.
    WrongType {
        /// The parameter.
        name: &'static str,
        /// `int`, `float` or `bool`.
        expected: &'static str,
        /// The JSON type that was given.
        got: &'static str,
    },
    /// An encoding that is not `F32`, `F16`, `BF16` or `Q8` (DF-PAR-10).
    UnknownEncoding(String),
    /// An index encoding that is not `PLAIN` or `PACKED` (DF-PAR-110).
    UnknownIndexEncoding(String),
    /// A relay policy that is not `ALL` or `NEEDED` (DF-PAR-60).
    UnknownRelayPolicy(String),
    /// Keys that are not configuration parameters (sorted).
    UnknownKeys(Vec<String>),
    /// The configuration is not a JSON object.
    NotAnObject,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::OutOfRange { name, allowed, got } => {
                write!(f, "{name} must be {allowed}, got {got}")
            }
            ConfigError::WrongType {
                name,
                expected,
                got,
            } => write!(
                f,
                "{name} must be {} {expected}, got {got}",
                article(expected)
            ),
            ConfigError::UnknownEncoding(s) => write!(f, "unknown encoding {s}"),
            ConfigError::UnknownIndexEncoding(s) => {
                write!(f, "index_encoding must be one of PLAIN, PACKED, got {s}")
            }
            ConfigError::UnknownRelayPolicy(s) => {
                write!(f, "relay_policy must be one of ALL, NEEDED, got {s}")
            }
            ConfigError::UnknownKeys(keys) => {
                let quoted: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
                write!(f, "unknown config keys: [{}]", quoted.join(", "))
            }
            ConfigError::NotAnObject => f.write_str("config must be a JSON object"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The message, for callers that report errors as strings.
impl From<ConfigError> for String {
    fn from(e: ConfigError) -> String {
        e.to_string()
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn out_of_range(
    name: &'static str,
    allowed: impl Into<String>,
    got: impl fmt::Display,
) -> ConfigError {
    ConfigError::OutOfRange {
        name,
        allowed: allowed.into(),
        got: got.to_string(),
    }
}

/// Protocol parameters (spec section 3, DF-PAR) plus the send encoding.
///
/// The fields are public for reading and struct-update syntax; a value built that way is checked
/// by [`SyncConfig::validate`] (which [`crate::Engine::new`] calls), or build one checked with
/// [`SyncConfig::new`] / [`SyncConfig::validated`].
#[derive(Debug, Clone, PartialEq)]
pub struct SyncConfig {
    /// DF-PAR-1: damping per hop (DF-RCV-5), used as `alpha as f32`; `0 < alpha <= 1`.
    pub alpha: f64,
    /// DF-PAR-2: selection ratio r (DF-GEN-2); `0 < ratio <= 1`.
    pub ratio: f64,
    /// DF-PAR-3: local steps between two generations (used by the node, not the engine), in
    /// `1..=`[`MAX_SYNC_INTERVAL`] (the upper bound is an erratum of 1.1).
    pub sync_interval: u32,
    /// DF-PAR-4: damped values with `|u| < threshold` are not relayed (compared as real numbers:
    /// f64); finite, `>= 0`.
    pub relay_threshold: f64,
    /// DF-PAR-5: maximum `Entry.hops` (any u8 is allowed).
    pub hop_limit: u8,
    /// DF-PAR-6: maximum packet size in bytes, in
    /// [`MIN_MAX_PACKET_SIZE`]`..=`[`MAX_MAX_PACKET_SIZE`].
    pub max_packet_size: usize,
    /// DF-PAR-7: replay window width W, in `1..=`[`MAX_REPLAY_WINDOW`].
    pub replay_window: u64,
    /// DF-PAR-8: incarnations tracked per origin, in `1..=`[`MAX_MAX_INCARNATIONS`].
    pub max_incarnations: usize,
    /// DF-PAR-9: floating-point buffers are part of the manifest (used by the framework layer).
    pub include_buffers: bool,
    /// DF-PAR-10: send encoding of own and relayed entries.
    pub encoding: ValueEncoding,
    /// Origins tracked (receiver bound, not fixed by the spec's table; spec DF-SEC-2); `>= 1`.
    pub max_origins: usize,
    /// DF-PAR-60 (1.1): which accepted entries are relayed.
    pub relay_policy: RelayPolicy,
    /// DF-PAR-70: `Some(C)` with `C > 1` sends `fl32(1/C)` of each selected delta and moves the
    /// node's own weights by what it sent only (DF-GEN-70), so that C nodes move by the mean of
    /// their progress; `Some(1)` keeps protocol 1.0's sums; `1..=65536`. `None` is AUTO (JSON
    /// `"auto"`, the recommended profile): the node derives C from its cluster at every generation
    /// ([`outer_average`], node-local: DF-GEN-70 lets nodes differ); an engine alone counts it as 1
    /// ([`SyncConfig::average_count`]) until its node resolves it.
    pub average_over: Option<u32>,
    /// DF-PAR-50 (1.1): largest accepted step of a tracked incarnation's highest seq, in
    /// `0..=`[`MAX_SEQ_JUMP`] (0: no bound).
    pub max_seq_jump: u64,
    /// DF-PAR-110 (1.1): send index encoding of own and relayed entries (`Packed`: section 6.8,
    /// OPTIONAL; set only when every node of the cluster supports it, DF-VER-3).
    pub index_encoding: IndexEncoding,
    /// DF-PAR-175 (1.1): how far (microseconds) an incarnation not yet tracked may lie ahead of
    /// the receiver's clock `now_us` (DF-RCV-175), in `0..=`[`MAX_INCARNATION_AHEAD`] (0: no bound).
    pub max_incarnation_ahead: u64,
    /// DF-PAR-178 (1.1): how long (microseconds) an incarnation that accepted an entry cannot be
    /// evicted by a new one (DF-RCV-178), in `0..=`[`MAX_INCARNATION_GRACE`] (0: off).
    pub incarnation_grace: u64,
}

/// `max_seq_jump` of the recommended profile (DF-PAR-50): 2^20 entries. An origin that generates
/// 10 entries a second needs more than a day of partition to exceed it.
pub const RECOMMENDED_MAX_SEQ_JUMP: u64 = 1 << 20;
/// `max_incarnation_ahead` of the recommended profile (DF-PAR-175): one minute, in microseconds.
pub const RECOMMENDED_MAX_INCARNATION_AHEAD: u64 = 60_000_000;

impl Default for SyncConfig {
    /// The recommended profile: what the project's measurements recommend for training
    /// (docs/convergence-sweep.md): 10 % of the weights every 20 local steps, Q8 values with PACKED
    /// indices (section 6.8), relay policy NEEDED (section 8.6) and progress averaged over the
    /// cluster (`average_over` AUTO), so that a single node's learning rate is the right one.
    /// Every node of the cluster must receive Q8 and PACKED (DF-PAR-110, DF-VER-3): a cluster
    /// with 1.0 nodes uses [`SyncConfig::v1_0`]. It also bounds forged claims:
    /// `max_seq_jump` 2^20 (DF-RCV-52) and `max_incarnation_ahead` one minute (DF-RCV-175);
    /// `incarnation_grace` stays off, because a member restarted within the grace would be
    /// refused until it ends.
    fn default() -> Self {
        SyncConfig {
            ratio: 0.10,
            sync_interval: 20,
            encoding: ValueEncoding::Q8,
            relay_policy: RelayPolicy::Needed,
            average_over: None,
            index_encoding: IndexEncoding::Packed,
            max_seq_jump: RECOMMENDED_MAX_SEQ_JUMP,
            max_incarnation_ahead: RECOMMENDED_MAX_INCARNATION_AHEAD,
            ..SyncConfig::v1_0()
        }
    }
}

impl SyncConfig {
    /// The spec's table of defaults (section 3, DF-PAR-11), the behaviour of protocol 1.0: 5 %
    /// every 10 steps, F32 values, PLAIN indices, relay policy ALL, deltas summed
    /// (`average_over` 1). The preset for a cluster with 1.0 nodes, and what every absent key of
    /// a JSON configuration takes ([`SyncConfig::from_json`]).
    pub fn v1_0() -> SyncConfig {
        SyncConfig {
            alpha: 1.0,
            ratio: 0.05,
            sync_interval: 10,
            relay_threshold: 1e-6,
            hop_limit: 16,
            max_packet_size: crate::wire::DEFAULT_MAX_PACKET_SIZE,
            replay_window: 1024,
            max_incarnations: 4,
            include_buffers: false,
            encoding: ValueEncoding::F32,
            max_origins: DEFAULT_MAX_ORIGINS,
            relay_policy: RelayPolicy::All,
            average_over: Some(1),
            max_seq_jump: 0,
            index_encoding: IndexEncoding::Plain,
            max_incarnation_ahead: 0,
            incarnation_grace: 0,
        }
    }

    /// `average_over`, with AUTO counted as 1 (a node alone) until the node resolves it
    /// ([`SyncConfig::resolve_average`]).
    pub fn average_count(&self) -> u32 {
        self.average_over.unwrap_or(1)
    }

    /// This configuration with an AUTO `average_over` set to [`outer_average`] of `nodes` (the
    /// node's cluster size, itself included); a set `average_over` is kept.
    pub fn resolve_average(&self, nodes: usize) -> SyncConfig {
        let mut c = self.clone();
        if c.average_over.is_none() {
            c.average_over = Some(outer_average(nodes, c.sync_interval, c.ratio));
        }
        c
    }

    /// A checked configuration with the spec's parameters in the order of its table (DF-PAR-1..10)
    /// and the [`SyncConfig::v1_0`] values of the others. Every value outside its allowed range is a [`ConfigError`]
    /// (DF-PAR-11), with the Python reference's message.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        alpha: f64,
        ratio: f64,
        sync_interval: u32,
        relay_threshold: f64,
        hop_limit: u8,
        max_packet_size: usize,
        replay_window: u64,
        max_incarnations: usize,
        include_buffers: bool,
        encoding: ValueEncoding,
    ) -> Result<SyncConfig, ConfigError> {
        SyncConfig {
            alpha,
            ratio,
            sync_interval,
            relay_threshold,
            hop_limit,
            max_packet_size,
            replay_window,
            max_incarnations,
            include_buffers,
            encoding,
            max_origins: DEFAULT_MAX_ORIGINS,
            ..SyncConfig::v1_0()
        }
        .validated()
    }

    /// `self` when every parameter is in its allowed range (see [`SyncConfig::validate`]).
    pub fn validated(self) -> Result<SyncConfig, ConfigError> {
        self.validate()?;
        Ok(self)
    }

    /// Checks every parameter against the spec's allowed range (DF-PAR-11), in the order of the
    /// Python reference, and reports the first one outside it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_unit("alpha", self.alpha)?;
        check_unit("ratio", self.ratio)?;
        if !self.relay_threshold.is_finite() {
            return Err(out_of_range(
                "relay_threshold",
                "finite",
                format!("{:?}", self.relay_threshold),
            ));
        }
        if self.relay_threshold < 0.0 {
            return Err(out_of_range(
                "relay_threshold",
                ">= 0",
                format!("{:?}", self.relay_threshold),
            ));
        }
        check_range(
            "sync_interval",
            u64::from(self.sync_interval),
            1,
            u64::from(MAX_SYNC_INTERVAL),
        )?;
        // hop_limit: every u8 is in [0, 255]
        check_range(
            "max_packet_size",
            self.max_packet_size as u64,
            MIN_MAX_PACKET_SIZE as u64,
            MAX_MAX_PACKET_SIZE as u64,
        )?;
        check_range("replay_window", self.replay_window, 1, MAX_REPLAY_WINDOW)?;
        check_range(
            "max_incarnations",
            self.max_incarnations as u64,
            1,
            MAX_MAX_INCARNATIONS as u64,
        )?;
        check_range(
            "max_origins",
            self.max_origins as u64,
            1,
            MAX_MAX_ORIGINS as u64,
        )?;
        if let Some(m) = self.average_over {
            check_range("average_over", u64::from(m), 1, MAX_AVERAGE_OVER)?;
        }
        check_range("max_seq_jump", self.max_seq_jump, 0, MAX_SEQ_JUMP)?;
        check_range(
            "max_incarnation_ahead",
            self.max_incarnation_ahead,
            0,
            MAX_INCARNATION_AHEAD,
        )?;
        check_range(
            "incarnation_grace",
            self.incarnation_grace,
            0,
            MAX_INCARNATION_GRACE,
        )?;
        Ok(())
    }

    /// Reads a JSON object of the Python `SyncConfig.to_json` shape (every key optional; absent
    /// keys take the spec's defaults, [`SyncConfig::v1_0`], not the recommended profile's;
    /// `average_over` may be `"auto"`) and checks it like the Python `SyncConfig.from_json`: unknown
    /// keys (see [`CONFIG_KEYS`]), wrong types (a bool is not a number, an integer parameter must
    /// be a JSON integer) and values outside the allowed ranges are [`ConfigError`]s.
    /// `encoding` is a name (`"F16"`) or the wire value (`1`).
    pub fn from_json(v: &Value) -> Result<SyncConfig, ConfigError> {
        let obj = v.as_object().ok_or(ConfigError::NotAnObject)?;
        let mut unknown: Vec<String> = obj
            .keys()
            .filter(|k| !CONFIG_KEYS.contains(&k.as_str()))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            unknown.sort();
            return Err(ConfigError::UnknownKeys(unknown));
        }
        let mut c = SyncConfig::v1_0();
        if let Some(x) = obj.get("alpha") {
            c.alpha = json_float("alpha", x)?;
        }
        if let Some(x) = obj.get("ratio") {
            c.ratio = json_float("ratio", x)?;
        }
        if let Some(x) = obj.get("relay_threshold") {
            c.relay_threshold = json_float("relay_threshold", x)?;
        }
        if let Some(x) = obj.get("sync_interval") {
            c.sync_interval = json_int("sync_interval", x, 1, u64::from(MAX_SYNC_INTERVAL))? as u32;
        }
        if let Some(x) = obj.get("hop_limit") {
            c.hop_limit = json_int("hop_limit", x, 0, 255)? as u8;
        }
        if let Some(x) = obj.get("max_packet_size") {
            c.max_packet_size = json_int(
                "max_packet_size",
                x,
                MIN_MAX_PACKET_SIZE as u64,
                MAX_MAX_PACKET_SIZE as u64,
            )? as usize;
        }
        if let Some(x) = obj.get("replay_window") {
            c.replay_window = json_int("replay_window", x, 1, MAX_REPLAY_WINDOW)?;
        }
        if let Some(x) = obj.get("max_incarnations") {
            c.max_incarnations =
                json_int("max_incarnations", x, 1, MAX_MAX_INCARNATIONS as u64)? as usize;
        }
        if let Some(x) = obj.get("max_seq_jump") {
            c.max_seq_jump = json_int("max_seq_jump", x, 0, MAX_SEQ_JUMP)?;
        }
        if let Some(x) = obj.get("max_incarnation_ahead") {
            c.max_incarnation_ahead =
                json_int("max_incarnation_ahead", x, 0, MAX_INCARNATION_AHEAD)?;
        }
        if let Some(x) = obj.get("incarnation_grace") {
            c.incarnation_grace = json_int("incarnation_grace", x, 0, MAX_INCARNATION_GRACE)?;
        }
        if let Some(x) = obj.get("max_origins") {
            c.max_origins = json_int("max_origins", x, 1, MAX_MAX_ORIGINS as u64)? as usize;
        }
        if let Some(x) = obj.get("include_buffers") {
            c.include_buffers = x.as_bool().ok_or(ConfigError::WrongType {
                name: "include_buffers",
                expected: "bool",
                got: json_type(x),
            })?;
        }
        if let Some(x) = obj.get("encoding") {
            c.encoding = encoding_from_json(x)?;
        }
        if let Some(x) = obj.get("relay_policy") {
            // the JSON form is the name exactly (DF-PAR-261); `from_name` also serves CLIs
            c.relay_policy = x
                .as_str()
                .and_then(RelayPolicy::from_name)
                .filter(|p| x.as_str() == Some(p.name()))
                .ok_or_else(|| {
                    ConfigError::UnknownRelayPolicy(match x {
                        Value::String(s) => format!("'{s}'"),
                        other => other.to_string(),
                    })
                })?;
        }
        if let Some(x) = obj.get("average_over") {
            c.average_over = if x.as_str() == Some("auto") {
                None
            } else if x.is_null() {
                // null is not AUTO: the JSON form of AUTO is the string "auto"
                return Err(ConfigError::WrongType {
                    name: "average_over",
                    expected: "int or \"auto\"",
                    got: "null",
                });
            } else {
                Some(json_int("average_over", x, 1, MAX_AVERAGE_OVER)? as u32)
            };
        }
        if let Some(x) = obj.get("index_encoding") {
            c.index_encoding = x
                .as_str()
                .and_then(IndexEncoding::from_name)
                .filter(|e| x.as_str() == Some(e.name()))
                .ok_or_else(|| {
                    ConfigError::UnknownIndexEncoding(match x {
                        Value::String(s) => format!("'{s}'"),
                        other => other.to_string(),
                    })
                })?;
        }
        c.validated()
    }

    /// The JSON object of the Python `SyncConfig.to_json` (DF-PAR-261): the spec's ten parameters
    /// and the relay policy, plus each other 1.1 key only when it differs from its
    /// [`SyncConfig::v1_0`] value (so that a 1.0 reader reads a 1.0 configuration); an AUTO
    /// `average_over` is `"auto"`. Inverse of [`SyncConfig::from_json`].
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("alpha".into(), json!(self.alpha));
        m.insert("ratio".into(), json!(self.ratio));
        m.insert("sync_interval".into(), json!(self.sync_interval));
        m.insert("relay_threshold".into(), json!(self.relay_threshold));
        m.insert("hop_limit".into(), json!(self.hop_limit));
        m.insert("max_packet_size".into(), json!(self.max_packet_size));
        m.insert("replay_window".into(), json!(self.replay_window));
        m.insert("max_incarnations".into(), json!(self.max_incarnations));
        m.insert("include_buffers".into(), json!(self.include_buffers));
        m.insert("encoding".into(), json!(self.encoding.name()));
        m.insert("relay_policy".into(), json!(self.relay_policy.name()));
        if self.max_seq_jump != 0 {
            m.insert("max_seq_jump".into(), json!(self.max_seq_jump));
        }
        if self.max_incarnation_ahead != 0 {
            m.insert(
                "max_incarnation_ahead".into(),
                json!(self.max_incarnation_ahead),
            );
        }
        if self.incarnation_grace != 0 {
            m.insert("incarnation_grace".into(), json!(self.incarnation_grace));
        }
        if self.index_encoding != IndexEncoding::Plain {
            m.insert("index_encoding".into(), json!(self.index_encoding.name()));
        }
        if self.max_origins != DEFAULT_MAX_ORIGINS {
            m.insert("max_origins".into(), json!(self.max_origins));
        }
        match self.average_over {
            Some(1) => {}
            Some(c) => {
                m.insert("average_over".into(), json!(c));
            }
            None => {
                m.insert("average_over".into(), json!("auto"));
            }
        }
        Value::Object(m)
    }

    /// `fl32(1 / average_over)`, the factor of DF-GEN-70 (DF-PAR-70), with AUTO counted as 1
    /// ([`SyncConfig::average_count`]).
    pub fn send_weight_f32(&self) -> f32 {
        (1.0f64 / f64::from(self.average_count())) as f32
    }

    /// `alpha` rounded to binary32, the factor of DF-RCV-5 (DF-PAR-1).
    pub fn alpha_f32(&self) -> f32 {
        self.alpha as f32
    }

    /// Largest number of values one generated entry may carry so that a packet holding it alone
    /// stays within `max_packet_size` (by the size bounds of [`crate::wire`]).
    pub fn max_values_per_entry(&self) -> usize {
        let room = self
            .max_packet_size
            .saturating_sub(PACKET_OVERHEAD_BOUND + entry_size_bound(0));
        (room / 8).max(1)
    }
}

fn check_unit(name: &'static str, x: f64) -> Result<(), ConfigError> {
    if !x.is_finite() {
        return Err(out_of_range(name, "finite", format!("{x:?}")));
    }
    if !(x > 0.0 && x <= 1.0) {
        return Err(out_of_range(name, "in (0, 1]", format!("{x:?}")));
    }
    Ok(())
}

fn check_range(name: &'static str, x: u64, lo: u64, hi: u64) -> Result<(), ConfigError> {
    if x < lo || x > hi {
        return Err(out_of_range(name, format!("[{lo}, {hi}]"), x));
    }
    Ok(())
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

fn json_float(name: &'static str, v: &Value) -> Result<f64, ConfigError> {
    match v {
        Value::Number(n) => n.as_f64().ok_or(ConfigError::WrongType {
            name,
            expected: "float",
            got: "int",
        }),
        other => Err(ConfigError::WrongType {
            name,
            expected: "float",
            got: json_type(other),
        }),
    }
}

fn json_int(name: &'static str, v: &Value, lo: u64, hi: u64) -> Result<u64, ConfigError> {
    let Value::Number(n) = v else {
        return Err(ConfigError::WrongType {
            name,
            expected: "int",
            got: json_type(v),
        });
    };
    if n.is_f64() {
        return Err(ConfigError::WrongType {
            name,
            expected: "int",
            got: "float",
        });
    }
    match n.as_u64() {
        Some(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(out_of_range(name, format!("[{lo}, {hi}]"), n)),
    }
}

fn encoding_from_json(v: &Value) -> Result<ValueEncoding, ConfigError> {
    // the JSON form is the name, exactly as DF-PAR-10 spells it (DF-PAR-261): neither the wire value
    // nor another case
    let found = match v {
        Value::String(s) => ValueEncoding::from_name(s),
        _ => None,
    };
    found.ok_or_else(|| {
        ConfigError::UnknownEncoding(match v {
            Value::String(s) => format!("'{s}'"),
            other => other.to_string(),
        })
    })
}
