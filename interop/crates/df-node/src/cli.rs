//! Command line of `df-node`, parsed by `clap` (same options as `python -m delta_fabric.demo.node`,
//! plus `--cluster-size`, `--report`, `--dump`, `--incarnation`; a leading `train` word is accepted).
//! The learning rate used is `lr / cluster-size`.
//!
//! The cluster options also read the `DELTA_FABRIC_*` environment variables that
//! `delta-fabric run` sets and `Fabric.from_env` reads (python/README.md, "Running a cluster"):
//! an option given on the command line wins, then the variable, then the default. An empty
//! variable counts as unset; a bad one is a usage error naming the variable and the value.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use df_core::ValueEncoding;
use df_core::compact::IndexEncoding;
use df_core::config::RelayPolicy;
use df_zenoh::Mode;

use crate::error::NodeError;
use crate::node::NodeOptions;

/// One Burn training node of the DeltaFabric digits demo (the digits CNN), speaking the demo's
/// stdio protocol: JSON events on stdout, `stop` (or EOF) on stdin.
#[derive(Debug, Parser)]
#[command(
    name = "df-node",
    version,
    about,
    max_term_width = 100,
    allow_negative_numbers = true,
    after_help = ENV_HELP
)]
pub struct Args {
    /// Node id: 1 to 16 hex digits (`0x` optional), non-zero [env: DELTA_FABRIC_NODE_ID, decimal
    /// or 0x hex]. Required, by option or variable.
    #[arg(long, value_parser = parse_node_id)]
    pub node_id: Option<u64>,
    /// Directory of the data files (train/test images and labels).
    #[arg(long)]
    pub data: PathBuf,
    /// Local training steps.
    #[arg(long)]
    pub steps: u64,
    /// Index of this node in the run (reported in every event).
    #[arg(long, default_value_t = 0)]
    pub index: u32,
    /// Initial canonical weights (raw little-endian f32); default: Burn's init seeded by --seed.
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Batch size.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Learning rate (divided by --cluster-size before use).
    #[arg(long, default_value_t = 0.05, value_parser = positive)]
    pub lr: f64,
    /// Number of nodes in the cluster (the learning rate is divided by it).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub cluster_size: u32,
    /// SGD momentum (PyTorch semantics), in [0, 1).
    #[arg(long, default_value_t = 0.9, value_parser = momentum)]
    pub momentum: f64,
    /// Seed of the initialisation and of the batch sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Synchronise with peers (`on`) or train alone (`off`).
    #[arg(long, default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    pub sync: bool,
    /// Protocol 1.0's settings, for a cluster with 1.0 nodes: the spec's table (ratio 0.05 every
    /// 10 steps, F32 values, PLAIN indices, relay ALL, deltas summed) with the residual not held
    /// and no repair. Without it the defaults are the recommended profile (ratio 0.10 every 20
    /// steps, Q8 + PACKED, relay NEEDED, average_over auto, residual held, repair on). Options and
    /// variables given still win.
    #[arg(long = "v1-0")]
    pub v1_0: bool,
    /// Damping per hop in [0, 1] (DF-RCV-5; default 1) [env: DELTA_FABRIC_ALPHA].
    #[arg(long)]
    pub alpha: Option<f64>,
    /// Selection ratio r in (0, 1] (DF-GEN-2; default 0.10, --v1-0: 0.05) [env:
    /// DELTA_FABRIC_RATIO].
    #[arg(long)]
    pub ratio: Option<f64>,
    /// Local steps between two syncs (default 20, --v1-0: 10) [env: DELTA_FABRIC_SYNC_INTERVAL].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub sync_interval: Option<u32>,
    /// Also synchronise the BatchNorm running statistics [env: DELTA_FABRIC_INCLUDE_BUFFERS].
    #[arg(long)]
    pub include_buffers: bool,
    /// Zenoh key namespace of the cluster [env: DELTA_FABRIC_NAMESPACE].
    #[arg(long, default_value = "deltafabric/demo")]
    pub namespace: String,
    /// Zenoh listen endpoints, e.g. tcp/127.0.0.1:7447 (repeatable or comma list; default: none)
    /// [env: DELTA_FABRIC_LISTEN].
    #[arg(long, value_delimiter = ',', value_parser = endpoint)]
    pub listen: Vec<String>,
    /// Zenoh connect endpoints (repeatable or comma list) [env: DELTA_FABRIC_CONNECT].
    #[arg(long, value_delimiter = ',', value_parser = endpoint)]
    pub connect: Vec<String>,
    /// Zenoh session mode: peer or client [env: DELTA_FABRIC_MODE].
    #[arg(long, default_value = "peer", value_parser = parse_mode)]
    pub mode: Mode,
    /// A Zenoh JSON5 config file, used as is (endpoints and mode then come from the file)
    /// [env: DELTA_FABRIC_ZENOH_CONFIG].
    #[arg(long)]
    pub zenoh_config: Option<PathBuf>,
    /// Comma-separated hex ids of the neighbours to subscribe to (default: everybody).
    #[arg(long, value_delimiter = ',', value_parser = parse_node_id)]
    pub neighbours: Vec<u64>,
    /// Evaluate on the test split every this many steps.
    #[arg(long, default_value_t = 50)]
    pub eval_every: u64,
    /// Seconds to wait for the neighbours before training.
    #[arg(long, default_value = "30", value_parser = seconds)]
    pub wait_peers: Duration,
    /// Seconds to keep receiving and relaying after training (until `stop` on stdin).
    #[arg(long, default_value = "30", value_parser = seconds)]
    pub linger: Duration,
    /// Write the final report (JSON) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the final canonical weights here (default: <report>.weights.f32 with --report).
    #[arg(long)]
    pub dump: Option<PathBuf>,
    /// Incarnation, non-zero (default: microseconds since the Unix epoch).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub incarnation: Option<u64>,
    /// BatchNorm running-statistics momentum in [0, 1] (default: 0.1 as PyTorch).
    #[arg(long, value_parser = unit)]
    pub bn_momentum: Option<f64>,
    /// Sync rounds this node may run ahead of the slowest peer (0: no pacing).
    #[arg(long, default_value_t = 0)]
    pub max_lead: u64,
    /// Apply every peer's round r at this node's own round r (waits for it, at most --wait-peers
    /// per round; full mesh only): the demo's lockstep rounds; replaces --max-lead pacing.
    #[arg(long)]
    pub lockstep: bool,
    /// `average_over` C (DF-PAR-70, DF-GEN-70): C > 1 averages the progress of C nodes, 1 sums
    /// it as in 1.0, `auto` (the default; --v1-0: 1) averages over the live cluster (DF-GEN-300)
    /// [env: DELTA_FABRIC_AVERAGE_OVER].
    #[arg(long, value_parser = parse_average_over)]
    pub average_over: Option<AverageOver>,
    /// Relay policy (DF-PAR-60): ALL relays every entry (1.0), NEEDED only where a neighbour may
    /// lack it; NEEDED requires symmetric links (DF-RLY-64) [env: DELTA_FABRIC_RELAY_POLICY].
    #[arg(long, value_parser = parse_relay_policy)]
    pub relay_policy: Option<RelayPolicy>,
    /// Value encoding of the packets this node sends: F32, F16, BF16 or Q8 (DF-PAR-10; Q8 added
    /// in 1.1, every node of the cluster must support it) [env: DELTA_FABRIC_ENCODING].
    #[arg(long, value_parser = parse_encoding)]
    pub encoding: Option<ValueEncoding>,
    /// Start from a live peer's verified anchor snapshot (DF-ZEN-5) instead of --init/--seed.
    #[arg(long)]
    pub join: bool,
    /// After the last step, 3 sync rounds without training (DF-NUM-1), then receive until every
    /// neighbour's last seq reached this node's (every node makes as many entries when all run
    /// the same --steps and --sync-interval); at most --wait-peers seconds, exit 1 if not. Needs
    /// --neighbours.
    #[arg(long)]
    pub drain: bool,
    /// Write the canonical weights at every evaluation (DIR/stepSSSSSS.f32) and at the end
    /// (DIR/final.f32), raw little-endian f32.
    #[arg(long)]
    pub weights_dir: Option<PathBuf>,
    /// Seconds --join may look for and fetch a snapshot.
    #[arg(long, default_value = "30", value_parser = seconds)]
    pub join_timeout: Duration,
    /// Anti-entropy by gap repair (spec section 7.9): ask origins again for lost entries, publish
    /// own entries again when asked (the default; --v1-0: off) [env: DELTA_FABRIC_REPAIR].
    #[arg(long, conflicts_with = "no_repair")]
    pub repair: bool,
    /// No gap repair.
    #[arg(long)]
    pub no_repair: bool,
    /// Comma-separated hex ids of the cluster's members: only they are origins (DF-RCV-51) and
    /// samples on other nodes' keys are refused (DF-ZEN-151) [env: DELTA_FABRIC_MEMBERS, decimal
    /// or 0x hex].
    #[arg(long, value_delimiter = ',', value_parser = parse_node_id)]
    pub members: Vec<u64>,
    /// Members are the nodes with a live liveliness token (and in --members when given;
    /// DF-ZEN-150) [env: DELTA_FABRIC_LIVE_MEMBERS].
    #[arg(long)]
    pub live_members: bool,
    /// Hold the unsent residual aside so the working weights restart from the shared model after
    /// every sync (DF-GEN-240, node-local; the default; --v1-0: off).
    #[arg(long, conflicts_with = "no_hold_residual")]
    pub hold_residual: bool,
    /// Keep the unsent residual in the working weights (1.0's behaviour).
    #[arg(long)]
    pub no_hold_residual: bool,
    /// Seconds a member that left stays one (DF-ZEN-150) [env: DELTA_FABRIC_MEMBER_GRACE].
    #[arg(long, default_value = "10", value_parser = seconds)]
    pub member_grace: Duration,
    /// Largest seq step above the highest accepted seq of a tracked incarnation (DF-PAR-50;
    /// 0: no bound; default: the profile's, 2^20, or 0 with --v1-0) [env: DELTA_FABRIC_MAX_SEQ_JUMP].
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=4_294_967_296))]
    pub max_seq_jump: Option<u64>,
    /// Microseconds an incarnation not yet tracked may lie ahead of this node's clock (DF-PAR-175;
    /// 0: no bound; only when every node uses time-derived incarnations, DF-RCV-176; default: the
    /// profile's, one minute, or 0 with --v1-0) [env: DELTA_FABRIC_MAX_INCARNATION_AHEAD].
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1_099_511_627_776))]
    pub max_incarnation_ahead: Option<u64>,
    /// Microseconds an incarnation that accepted an entry cannot be evicted by a new one
    /// (DF-PAR-178; 0: off) [env: DELTA_FABRIC_INCARNATION_GRACE].
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_099_511_627_776))]
    pub incarnation_grace: u64,
    /// Keys file of a signed cluster (spec section 13.1, DF-SEC-145): JSON
    /// `{"version": 1, "keys": {"<node id, hex16>": "<Ed25519 public key, 64 hex>"}}`; needs
    /// --secret-key [env: DELTA_FABRIC_KEYS].
    #[arg(long, value_name = "FILE")]
    pub keys: Option<PathBuf>,
    /// File holding this node's Ed25519 secret seed, 64 hex digits (signed cluster; needs --keys)
    /// [env: DELTA_FABRIC_SECRET_KEY].
    #[arg(long, value_name = "FILE")]
    pub secret_key: Option<PathBuf>,
    /// Packets per second each sender may queue (DF-ZEN-153; 0: no limit)
    /// [env: DELTA_FABRIC_RATE_LIMIT].
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub rate_limit: f64,
    /// Packets a sender may queue at once (0: the rate) [env: DELTA_FABRIC_RATE_BURST].
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub rate_burst: f64,
    /// Seconds without progress after which a live peer no longer holds pacing back (DF-ZEN-156).
    #[arg(long, default_value = "5", value_parser = seconds)]
    pub peer_deadline: Duration,
    /// Index encoding sent: PLAIN or PACKED (DF-PAR-110, added in 1.1; every node of the cluster
    /// must support PACKED) [env: DELTA_FABRIC_INDEX_ENCODING].
    #[arg(long, value_parser = parse_index_encoding)]
    pub index_encoding: Option<IndexEncoding>,
}

/// An `average_over`: an integer in [1, 65536] or `auto` (DF-PAR-70, DF-GEN-300).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AverageOver(pub Option<u32>);

fn parse_average_over(v: &str) -> Result<AverageOver, String> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(AverageOver(None));
    }
    v.trim()
        .parse::<u32>()
        .ok()
        .filter(|c| (1..=65536).contains(c))
        .map(|c| AverageOver(Some(c)))
        .ok_or_else(|| "must be an integer in [1, 65536] or auto".to_string())
}

/// A value encoding name (case-insensitive), as `delta_fabric.env` reads it.
fn parse_encoding(v: &str) -> Result<ValueEncoding, String> {
    ValueEncoding::from_name(&v.trim().to_uppercase())
        .ok_or_else(|| format!("must be one of {}", df_core::encodings::names()))
}

/// An index encoding name (case-insensitive).
fn parse_index_encoding(v: &str) -> Result<IndexEncoding, String> {
    IndexEncoding::from_name(v).ok_or_else(|| "must be one of PLAIN, PACKED".to_string())
}

/// A 64-bit node id from hex (`0x` prefix optional, at most 16 digits, non-zero).
pub fn parse_node_id(v: &str) -> Result<u64, String> {
    let h = v.strip_prefix("0x").unwrap_or(v);
    if h.is_empty() || h.len() > 16 {
        return Err(format!("node id {v:?}: 1 to 16 hex digits"));
    }
    let id = u64::from_str_radix(h, 16).map_err(|_| format!("node id {v:?} is not hex"))?;
    if id == 0 {
        return Err("node id must be non-zero".into());
    }
    Ok(id)
}

/// The environment variables `df-node` reads, shown at the end of `--help`.
const ENV_HELP: &str = "\
Environment (the same variables as `delta-fabric run` and Fabric.from_env; an option given on the
command line wins, then the variable, then the default; an empty variable counts as unset):
  DELTA_FABRIC_NODE_ID       node id, decimal or 0x hex, in [1, 2^64)
  DELTA_FABRIC_NAMESPACE     --namespace
  DELTA_FABRIC_LISTEN        --listen, comma list of Zenoh endpoints
  DELTA_FABRIC_CONNECT       --connect, comma list of Zenoh endpoints
  DELTA_FABRIC_MODE          --mode, peer or client
  DELTA_FABRIC_ZENOH_CONFIG  --zenoh-config, a Zenoh JSON5 file
  DELTA_FABRIC_RATIO, _ALPHA, _SYNC_INTERVAL, _INCLUDE_BUFFERS (1/0), _RELAY_THRESHOLD,
  _HOP_LIMIT, _MAX_PACKET_SIZE, _REPLAY_WINDOW, _MAX_INCARNATIONS, _ENCODING (F32/F16/BF16/Q8),
  _INDEX_ENCODING (PLAIN/PACKED), _AVERAGE_OVER (an integer or auto), _RELAY_POLICY (ALL/NEEDED)
                             the sync parameter of the same name
  DELTA_FABRIC_NODES         how many nodes the run has in all (averaged over with auto)
  DELTA_FABRIC_REPAIR        --repair (1/0)
  DELTA_FABRIC_MAX_SEQ_JUMP  --max-seq-jump
  DELTA_FABRIC_MAX_INCARNATION_AHEAD
                             --max-incarnation-ahead
  DELTA_FABRIC_INCARNATION_GRACE
                             --incarnation-grace
  DELTA_FABRIC_KEYS          --keys, the keys file of a signed cluster
  DELTA_FABRIC_SECRET_KEY    --secret-key, the file of this node's secret seed
  DELTA_FABRIC_MEMBERS       --members, comma list of node ids (decimal or 0x hex)
  DELTA_FABRIC_LIVE_MEMBERS  --live-members (1/0)
  DELTA_FABRIC_MEMBER_GRACE  --member-grace
  DELTA_FABRIC_RATE_LIMIT, _RATE_BURST
                             --rate-limit, --rate-burst";

/// A Zenoh endpoint `proto/address` (the check of `delta_fabric.env.endpoints`).
fn endpoint(v: &str) -> Result<String, String> {
    let e = v.trim();
    match e.split_once('/') {
        Some((p, a)) if !p.is_empty() && !a.is_empty() && !e.contains(char::is_whitespace) => {
            Ok(e.to_string())
        }
        _ => Err(format!(
            "'{e}' is not a Zenoh endpoint such as tcp/127.0.0.1:7447"
        )),
    }
}

fn parse_relay_policy(v: &str) -> Result<RelayPolicy, String> {
    RelayPolicy::from_name(&v.to_uppercase()).ok_or_else(|| format!("{v:?}: ALL or NEEDED"))
}

fn parse_mode(v: &str) -> Result<Mode, String> {
    match v {
        "peer" => Ok(Mode::Peer),
        "client" => Ok(Mode::Client),
        _ => Err("must be 'peer' or 'client'".into()),
    }
}

fn number(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("{v:?} is not a finite number"))
}

fn positive(v: &str) -> Result<f64, String> {
    Some(number(v)?)
        .filter(|&x| x > 0.0)
        .ok_or_else(|| format!("{v} must be > 0"))
}

fn non_negative(v: &str) -> Result<f64, String> {
    Some(number(v)?)
        .filter(|&x| x >= 0.0)
        .ok_or_else(|| format!("{v} must be >= 0"))
}

fn momentum(v: &str) -> Result<f64, String> {
    Some(number(v)?)
        .filter(|x| (0.0..1.0).contains(x))
        .ok_or_else(|| format!("{v} must be in [0, 1)"))
}

fn unit(v: &str) -> Result<f64, String> {
    Some(number(v)?)
        .filter(|x| (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("{v} must be in [0, 1]"))
}

fn seconds(v: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(number(v)?).map_err(|_| format!("{v} is not a duration in seconds"))
}

fn on_off(v: &str) -> Result<bool, String> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{v:?}: on or off")),
    }
}

/// Reads one environment variable (`None`: unset). Tests pass a map; `main` passes the process's.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

const PREFIX: &str = "DELTA_FABRIC_";

/// `DELTA_FABRIC_*` variables read with the rules and wording of `delta_fabric.env`.
struct Env<'a> {
    lookup: EnvLookup<'a>,
}

impl Env<'_> {
    fn get(&self, field: &str) -> Option<(String, String)> {
        let name = format!("{PREFIX}{field}");
        let raw = (self.lookup)(&name)?;
        let raw = raw.trim();
        (!raw.is_empty()).then(|| (name, raw.to_string()))
    }

    fn bad(name: &str, raw: &str, expected: &str) -> NodeError {
        NodeError::Usage(format!("{name}='{raw}': {expected}"))
    }

    /// An integer, decimal or `0x` hex (`int(raw, 0)` for the forms the launcher writes).
    fn int(raw: &str) -> Option<u128> {
        let (digits, radix) = match raw.strip_prefix("0x").or_else(|| raw.strip_prefix("0X")) {
            Some(h) => (h, 16),
            None => (raw, 10),
        };
        let digits = digits.replace('_', "");
        if digits.is_empty() || digits.starts_with(['+', '-']) {
            return None;
        }
        u128::from_str_radix(&digits, radix).ok()
    }

    fn uint<T: TryFrom<u128>>(
        &self,
        field: &str,
        lo: u128,
        hi: u128,
    ) -> Result<Option<T>, NodeError> {
        let Some((name, raw)) = self.get(field) else {
            return Ok(None);
        };
        Self::int(&raw)
            .filter(|v| (lo..=hi).contains(v))
            .and_then(|v| T::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| Self::bad(&name, &raw, &format!("must be an integer in [{lo}, {hi}]")))
    }

    fn float(&self, field: &str) -> Result<Option<f64>, NodeError> {
        let Some((name, raw)) = self.get(field) else {
            return Ok(None);
        };
        let v: f64 = raw
            .parse()
            .map_err(|_| Self::bad(&name, &raw, "must be a number"))?;
        if !v.is_finite() {
            return Err(Self::bad(&name, &raw, "must be a finite number"));
        }
        Ok(Some(v))
    }

    fn boolean(&self, field: &str) -> Result<Option<bool>, NodeError> {
        let Some((name, raw)) = self.get(field) else {
            return Ok(None);
        };
        match raw.to_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Some(true)),
            "0" | "false" | "no" | "off" => Ok(Some(false)),
            _ => Err(Self::bad(
                &name,
                &raw,
                "must be 1/0, true/false, yes/no or on/off",
            )),
        }
    }

    fn endpoints(&self, field: &str) -> Result<Option<Vec<String>>, NodeError> {
        let Some((name, raw)) = self.get(field) else {
            return Ok(None);
        };
        let out = raw
            .split(',')
            .filter(|e| !e.trim().is_empty())
            .map(|e| endpoint(e).map_err(|m| Self::bad(&name, &raw, &m)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(out))
    }
}

/// Whether the option `id` was given on the command line (else the variable may set it).
fn given(m: Option<&ArgMatches>, id: &str) -> bool {
    m.is_some_and(|m| m.value_source(id) == Some(ValueSource::CommandLine))
}

impl Args {
    /// The node options, with the checks that involve several options; no environment variables.
    pub fn into_options(self) -> Result<NodeOptions, NodeError> {
        self.into_options_env(None, &|_| None)
    }

    /// The node options: each cluster option given in `m` (the command line) wins, then its
    /// `DELTA_FABRIC_*` variable in `env`, then its default (`m: None`: nothing was given).
    pub fn into_options_env(
        self,
        m: Option<&ArgMatches>,
        env: EnvLookup<'_>,
    ) -> Result<NodeOptions, NodeError> {
        let env = Env { lookup: env };
        let node_id = match self.node_id {
            Some(id) => id,
            None => env
                .uint::<u64>("NODE_ID", 1, u128::from(u64::MAX))?
                .ok_or_else(|| {
                    NodeError::Usage("--node-id or DELTA_FABRIC_NODE_ID is required".into())
                })?,
        };
        let mut o = NodeOptions::new(node_id, self.data, self.steps);
        if !self.v1_0 {
            // the recommended profile (SyncConfig::default, FabricOptions::default)
            o.sync_config = df_core::SyncConfig::default();
            o.repair = true;
            o.hold_residual = true;
        }
        o.index = self.index;
        o.init = self.init;
        o.batch = usize::try_from(self.batch)
            .map_err(|_| NodeError::Usage("--batch is too large".into()))?;
        o.lr = self.lr;
        o.cluster_size = self.cluster_size;
        o.momentum = self.momentum;
        o.seed = self.seed;
        o.sync = self.sync;
        if let Some(v) = self.alpha {
            o.sync_config.alpha = v;
        }
        if let Some(v) = self.ratio {
            o.sync_config.ratio = v;
        }
        if let Some(v) = self.sync_interval {
            o.sync_config.sync_interval = v;
        }
        o.include_buffers = self.include_buffers;
        o.namespace = self.namespace;
        o.listen = self.listen;
        o.connect = self.connect;
        o.mode = self.mode;
        o.zenoh_config = self.zenoh_config;
        o.neighbours = self.neighbours;
        o.eval_every = self.eval_every;
        o.wait_peers = self.wait_peers;
        o.linger = self.linger;
        o.report = self.report;
        o.dump = self.dump;
        o.incarnation = self.incarnation;
        o.bn_momentum = self.bn_momentum;
        o.max_lead = self.max_lead;
        o.lockstep = self.lockstep;
        o.join = self.join;
        o.join_timeout = self.join_timeout;
        o.drain = self.drain;
        if self.repair || self.no_repair {
            o.repair = self.repair;
        }
        o.weights_dir = self.weights_dir;
        o.members = (!self.members.is_empty()).then_some(self.members);
        o.live_members = self.live_members;
        if self.hold_residual || self.no_hold_residual {
            o.hold_residual = self.hold_residual;
        }
        o.member_grace = self.member_grace;
        if let Some(v) = self.max_seq_jump {
            o.sync_config.max_seq_jump = v;
        }
        if let Some(v) = self.max_incarnation_ahead {
            o.sync_config.max_incarnation_ahead = v;
        }
        o.sync_config.incarnation_grace = self.incarnation_grace;
        o.rate_limit = self.rate_limit;
        o.rate_burst = self.rate_burst;
        o.peer_deadline = self.peer_deadline;
        if !given(m, "members")
            && let Some((name, raw)) = env.get("MEMBERS")
        {
            let ids = raw
                .split(',')
                .map(|p| {
                    Env::int(p.trim())
                        .filter(|v| (1..=u128::from(u64::MAX)).contains(v))
                        .and_then(|v| u64::try_from(v).ok())
                        .ok_or_else(|| {
                            Env::bad(
                                &name,
                                &raw,
                                &format!(
                                    "{:?} is not a node id in [1, 2**64) (decimal or 0x hex)",
                                    p.trim()
                                ),
                            )
                        })
                })
                .collect::<Result<Vec<u64>, _>>()?;
            o.members = Some(ids);
        }
        if !given(m, "live_members")
            && let Some(v) = env.boolean("LIVE_MEMBERS")?
        {
            o.live_members = v;
        }
        if !given(m, "member_grace")
            && let Some(v) = env.float("MEMBER_GRACE")?
        {
            o.member_grace = Duration::try_from_secs_f64(v).map_err(|_| {
                Env::bad(
                    "DELTA_FABRIC_MEMBER_GRACE",
                    &v.to_string(),
                    "must be >= 0 seconds",
                )
            })?;
        }
        if !given(m, "max_seq_jump")
            && let Some(v) = env.uint("MAX_SEQ_JUMP", 0, 4_294_967_296)?
        {
            o.sync_config.max_seq_jump = v;
        }
        if !given(m, "max_incarnation_ahead")
            && let Some(v) = env.uint("MAX_INCARNATION_AHEAD", 0, 1_099_511_627_776)?
        {
            o.sync_config.max_incarnation_ahead = v;
        }
        if !given(m, "incarnation_grace")
            && let Some(v) = env.uint("INCARNATION_GRACE", 0, 1_099_511_627_776)?
        {
            o.sync_config.incarnation_grace = v;
        }
        // signed entries (spec section 13.1): the keys file and this node's secret seed
        let keys = self
            .keys
            .clone()
            .map(|p| ("--keys".to_string(), p))
            .or_else(|| env.get("KEYS").map(|(n, v)| (n, PathBuf::from(v))));
        let secret = self
            .secret_key
            .clone()
            .map(|p| ("--secret-key".to_string(), p))
            .or_else(|| env.get("SECRET_KEY").map(|(n, v)| (n, PathBuf::from(v))));
        o.signing = match (keys, secret) {
            (None, None) => None,
            (Some((k, _)), None) => {
                return Err(NodeError::Usage(format!(
                    "{k} needs --secret-key (or DELTA_FABRIC_SECRET_KEY): a node of a signed \
                     cluster signs its entries"
                )));
            }
            (None, Some((s, _))) => {
                return Err(NodeError::Usage(format!(
                    "{s} needs --keys (or DELTA_FABRIC_KEYS)"
                )));
            }
            (Some((k, kp)), Some((_, sp))) => Some(
                df_core::signing::Signing::load(&kp, Some(&sp), Some(node_id))
                    .map_err(|e| NodeError::Usage(format!("{k}: {e}")))?,
            ),
        };
        for (field, id) in [("RATE_LIMIT", "rate_limit"), ("RATE_BURST", "rate_burst")] {
            if !given(m, id)
                && let Some(v) = env.float(field)?
            {
                if v < 0.0 {
                    return Err(Env::bad(
                        &format!("{PREFIX}{field}"),
                        &v.to_string(),
                        "must be a number >= 0",
                    ));
                }
                if field == "RATE_LIMIT" {
                    o.rate_limit = v;
                } else {
                    o.rate_burst = v;
                }
            }
        }
        if !given(m, "alpha")
            && let Some(v) = env.float("ALPHA")?
        {
            o.sync_config.alpha = v;
        }
        if !given(m, "ratio")
            && let Some(v) = env.float("RATIO")?
        {
            o.sync_config.ratio = v;
        }
        if !given(m, "sync_interval")
            && let Some(v) = env.uint("SYNC_INTERVAL", 1, u128::from(u32::MAX))?
        {
            o.sync_config.sync_interval = v;
        }
        if !given(m, "repair")
            && !given(m, "no_repair")
            && let Some(v) = env.boolean("REPAIR")?
        {
            o.repair = v;
        }
        if !given(m, "include_buffers")
            && let Some(v) = env.boolean("INCLUDE_BUFFERS")?
        {
            o.include_buffers = v;
        }
        if !given(m, "namespace")
            && let Some((_, v)) = env.get("NAMESPACE")
        {
            o.namespace = v;
        }
        if !given(m, "listen")
            && let Some(v) = env.endpoints("LISTEN")?
        {
            o.listen = v;
        }
        if !given(m, "connect")
            && let Some(v) = env.endpoints("CONNECT")?
        {
            o.connect = v;
        }
        let mode_set = given(m, "mode") || env.get("MODE").is_some();
        if !given(m, "mode")
            && let Some((name, raw)) = env.get("MODE")
        {
            o.mode = parse_mode(&raw).map_err(|e| Env::bad(&name, &raw, &e))?;
        }
        if o.zenoh_config.is_none()
            && let Some((name, raw)) = env.get("ZENOH_CONFIG")
        {
            o.zenoh_config = Some(PathBuf::from(&raw));
            if !Path::new(&raw).is_file() {
                return Err(Env::bad(
                    &name,
                    &raw,
                    "no such file (a Zenoh JSON5 configuration file)",
                ));
            }
        }
        match self.average_over {
            Some(AverageOver(v)) => o.sync_config.average_over = v,
            None => {
                if let Some((name, raw)) = env.get("AVERAGE_OVER") {
                    o.sync_config.average_over = parse_average_over(&raw)
                        .map_err(|e| Env::bad(&name, &raw, &e))?
                        .0;
                }
            }
        }
        if let Some(n) = env.uint::<usize>("NODES", 1, u128::from(u32::MAX))? {
            o.world_size = Some(n); // the world-size hint of an AUTO average_over
        }
        match self.relay_policy {
            Some(v) => o.sync_config.relay_policy = v,
            None => {
                if let Some((name, raw)) = env.get("RELAY_POLICY") {
                    o.sync_config.relay_policy = parse_relay_policy(&raw)
                        .map_err(|_| Env::bad(&name, &raw, "must be one of ALL, NEEDED"))?;
                }
            }
        }
        // The sync parameters df-node has no option for (and --encoding, which wins).
        let c = &mut o.sync_config;
        if let Some(v) = env.float("RELAY_THRESHOLD")? {
            c.relay_threshold = v;
        }
        if let Some(v) = env.uint("HOP_LIMIT", 0, u128::from(u8::MAX))? {
            c.hop_limit = v;
        }
        if let Some(v) = env.uint("MAX_PACKET_SIZE", 0, usize::MAX as u128)? {
            c.max_packet_size = v;
        }
        if let Some(v) = env.uint("REPLAY_WINDOW", 0, u128::from(u64::MAX))? {
            c.replay_window = v;
        }
        if let Some(v) = env.uint("MAX_INCARNATIONS", 0, usize::MAX as u128)? {
            c.max_incarnations = v;
        }
        if let Some(v) = self.encoding {
            c.encoding = v;
        } else if let Some((name, raw)) = env.get("ENCODING") {
            c.encoding = parse_encoding(&raw).map_err(|e| Env::bad(&name, &raw, &e))?;
        }
        if let Some(v) = self.index_encoding {
            c.index_encoding = v;
        } else if let Some((name, raw)) = env.get("INDEX_ENCODING") {
            c.index_encoding = parse_index_encoding(&raw).map_err(|e| Env::bad(&name, &raw, &e))?;
        }
        if let Some(p) = &o.zenoh_config {
            if !p.is_file() {
                return Err(NodeError::Usage(format!(
                    "--zenoh-config {}: no such file (a Zenoh JSON5 configuration file)",
                    p.display()
                )));
            }
            // The file is used as is (DF-ZEN-14): endpoints and mode come from it.
            if !o.listen.is_empty() || !o.connect.is_empty() || mode_set {
                return Err(NodeError::Usage(
                    "--zenoh-config is used as is: put the endpoints and the mode in the file, \
                     not in --listen/--connect/--mode (or their variables)"
                        .into(),
                ));
            }
        }
        o.sync_config.include_buffers = o.include_buffers;
        // Every sync parameter in its allowed range (DF-PAR-11).
        o.sync_config
            .validate()
            .map_err(|e| NodeError::Usage(e.to_string()))?;
        if o.join && !o.sync {
            return Err(NodeError::Usage("--join needs --sync on".into()));
        }
        if o.lockstep && (!o.sync || o.join) {
            return Err(NodeError::Usage(
                "--lockstep needs --sync on and no --join (every node starts at round 0)".into(),
            ));
        }
        Ok(o)
    }
}

/// The arguments without the program name (a leading `train` word is dropped) as clap sees them.
fn argv<I, S>(args: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut v: Vec<String> = args.into_iter().map(Into::into).collect();
    if v.first().map(String::as_str) == Some("train") {
        v.remove(0);
    }
    v.insert(0, "df-node".into());
    v
}

/// Parses the arguments (without the program name). Help and version requests and bad options are
/// [`NodeError::Usage`] with clap's message.
pub fn parse_args<I, S>(args: I) -> Result<NodeOptions, NodeError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    parse_args_env(args, &process_env)
}

/// [`parse_args`] with the `DELTA_FABRIC_*` variables read through `env`.
pub fn parse_args_env<I, S>(args: I, env: EnvLookup<'_>) -> Result<NodeOptions, NodeError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let (a, m) = matches(args).map_err(|e| NodeError::Usage(e.to_string()))?;
    a.into_options_env(Some(&m), env)
}

fn matches<I, S>(args: I) -> Result<(Args, ArgMatches), clap::Error>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let m = Args::command().try_get_matches_from(argv(args))?;
    Ok((Args::from_arg_matches(&m)?, m))
}

/// What `main` does with the command line: the options, or the process exit (help and version on
/// stdout with status 0; a bad option as one line on stderr with status 2).
pub fn parse_or_exit<I, S>(args: I) -> NodeOptions
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    match matches(args) {
        Ok((a, m)) => match a.into_options_env(Some(&m), &process_env) {
            Ok(o) => o,
            Err(e) => usage_exit(&e.to_string()),
        },
        Err(e) if !e.use_stderr() => {
            // --help / --version
            print!("{e}");
            std::process::exit(0);
        }
        Err(e) => usage_exit(&e.to_string()),
    }
}

fn usage_exit(msg: &str) -> ! {
    let line = msg
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("bad arguments");
    let line = line.strip_prefix("error: ").unwrap_or(line);
    let line = line.strip_prefix("usage: ").unwrap_or(line);
    eprintln!("df-node: usage: {line} (see --help)");
    std::process::exit(2);
}
