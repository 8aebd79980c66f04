//! Command line of `df-node`, parsed by `clap` (same options as `python -m delta_fabric.demo.node`,
//! plus `--cluster-size`, `--report`, `--dump`, `--incarnation`; a leading `train` word is accepted).
//! The learning rate used is `lr / cluster-size`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

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
    allow_negative_numbers = true
)]
pub struct Args {
    /// Node id: 1 to 16 hex digits (`0x` optional), non-zero.
    #[arg(long, value_parser = parse_node_id)]
    pub node_id: u64,
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
    /// Damping per hop in [0, 1] (DF-RCV-5).
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f64,
    /// Selection ratio r in (0, 1] (DF-GEN-2).
    #[arg(long, default_value_t = 0.05)]
    pub ratio: f64,
    /// Local steps between two syncs.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub sync_interval: u32,
    /// Also synchronise the BatchNorm running statistics.
    #[arg(long)]
    pub include_buffers: bool,
    /// Zenoh key namespace of the cluster.
    #[arg(long, default_value = "deltafabric/demo")]
    pub namespace: String,
    /// Zenoh listen endpoint, e.g. tcp/127.0.0.1:7447 (default: none).
    #[arg(long)]
    pub listen: Option<String>,
    /// Zenoh connect endpoint (repeatable).
    #[arg(long)]
    pub connect: Vec<String>,
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
    /// Start from a live peer's verified anchor snapshot (DF-ZEN-5) instead of --init/--seed.
    #[arg(long)]
    pub join: bool,
    /// Seconds --join may look for and fetch a snapshot.
    #[arg(long, default_value = "30", value_parser = seconds)]
    pub join_timeout: Duration,
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

impl Args {
    /// The node options, with the checks that involve several options.
    pub fn into_options(self) -> Result<NodeOptions, NodeError> {
        let mut o = NodeOptions::new(self.node_id, self.data, self.steps);
        o.index = self.index;
        o.init = self.init;
        o.batch = usize::try_from(self.batch)
            .map_err(|_| NodeError::Usage("--batch is too large".into()))?;
        o.lr = self.lr;
        o.cluster_size = self.cluster_size;
        o.momentum = self.momentum;
        o.seed = self.seed;
        o.sync = self.sync;
        o.sync_config.alpha = self.alpha;
        o.sync_config.ratio = self.ratio;
        o.sync_config.sync_interval = self.sync_interval;
        o.include_buffers = self.include_buffers;
        o.namespace = self.namespace;
        o.listen = self.listen;
        o.connect = self.connect;
        o.neighbours = self.neighbours;
        o.eval_every = self.eval_every;
        o.wait_peers = self.wait_peers;
        o.linger = self.linger;
        o.report = self.report;
        o.dump = self.dump;
        o.incarnation = self.incarnation;
        o.bn_momentum = self.bn_momentum;
        o.max_lead = self.max_lead;
        o.join = self.join;
        o.join_timeout = self.join_timeout;
        o.sync_config.include_buffers = o.include_buffers;
        // Every sync parameter in its allowed range (DF-PAR-11).
        o.sync_config
            .validate()
            .map_err(|e| NodeError::Usage(e.to_string()))?;
        if o.join && !o.sync {
            return Err(NodeError::Usage("--join needs --sync on".into()));
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
    Args::try_parse_from(argv(args))
        .map_err(|e| NodeError::Usage(e.to_string()))?
        .into_options()
}

/// What `main` does with the command line: the options, or the process exit (help and version on
/// stdout with status 0; a bad option as one line on stderr with status 2).
pub fn parse_or_exit<I, S>(args: I) -> NodeOptions
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    match Args::try_parse_from(argv(args)) {
        Ok(a) => match a.into_options() {
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
