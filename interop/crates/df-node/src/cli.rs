//! Command line of `df-node` (same options as `python -m delta_fabric.demo.node`, plus
//! `--cluster-size`, `--report`, `--dump`, `--incarnation`; a leading `train` word is accepted).
//!
//! ```text
//! df-node [train] --node-id HEX16 --data DIR --steps S [--index I] [--init FILE] [--batch 32]
//!     [--lr 0.05] [--cluster-size 1] [--momentum 0.9] [--seed 0] [--sync on|off]
//!     [--alpha 1.0] [--ratio 0.05] [--sync-interval 10] [--include-buffers]
//!     [--namespace deltafabric/demo] [--listen tcp/127.0.0.1:P] [--connect EP]...
//!     [--neighbours HEX16,HEX16,...] [--eval-every 50] [--wait-peers 30] [--linger 30]
//!     [--report FILE.json] [--dump FILE.f32] [--incarnation N] [--bn-momentum 0.1]
//!     [--max-lead 0] [--join] [--join-timeout 30]
//! ```
//!
//! The learning rate used is `lr / cluster-size`.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::NodeError;
use crate::node::NodeOptions;

/// Usage text.
pub const USAGE: &str = "df-node [train] --node-id HEX16 --data DIR --steps S [--index I] [--init FILE] \
[--batch 32] [--lr 0.05] [--cluster-size 1] [--momentum 0.9] [--seed 0] [--sync on|off] [--alpha 1.0] \
[--ratio 0.05] [--sync-interval 10] [--include-buffers] [--namespace NS] [--listen EP] [--connect EP]... \
[--neighbours HEX,HEX] [--eval-every 50] [--wait-peers SECONDS] [--linger SECONDS] [--report FILE.json] \
[--dump FILE.f32] [--incarnation N] [--bn-momentum M] [--max-lead ROUNDS] [--join] \
[--join-timeout SECONDS]";

fn parse<T: FromStr>(flag: &str, v: &str) -> Result<T, NodeError> {
    v.parse()
        .map_err(|_| NodeError::Usage(format!("{flag}: cannot parse {v:?}")))
}

/// A 64-bit node id from hex (`0x` prefix optional, at most 16 digits, non-zero).
pub fn parse_node_id(v: &str) -> Result<u64, NodeError> {
    let h = v.strip_prefix("0x").unwrap_or(v);
    if h.is_empty() || h.len() > 16 {
        return Err(NodeError::Usage(format!(
            "node id {v:?}: 1 to 16 hex digits"
        )));
    }
    let id = u64::from_str_radix(h, 16)
        .map_err(|_| NodeError::Usage(format!("node id {v:?} is not hex")))?;
    if id == 0 {
        return Err(NodeError::Usage("node id must be non-zero".into()));
    }
    Ok(id)
}

fn seconds(flag: &str, v: &str) -> Result<Duration, NodeError> {
    let s: f64 = parse(flag, v)?;
    Duration::try_from_secs_f64(s)
        .map_err(|_| NodeError::Usage(format!("{flag}: {v} is not a duration in seconds")))
}

/// Parses the arguments (without the program name).
pub fn parse_args<I, S>(args: I) -> Result<NodeOptions, NodeError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut args: Vec<String> = args.into_iter().map(Into::into).collect();
    if args.first().map(String::as_str) == Some("train") {
        args.remove(0);
    }
    let mut o = NodeOptions::new(1, PathBuf::new(), 0);
    o.sync = true; // as the Python node: --sync on by default
    let (mut have_id, mut have_data, mut have_steps) = (false, false, false);
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        if flag == "--include-buffers" {
            if inline.is_some() {
                return Err(NodeError::Usage("--include-buffers takes no value".into()));
            }
            o.include_buffers = true;
            continue;
        }
        if flag == "--join" {
            if inline.is_some() {
                return Err(NodeError::Usage("--join takes no value".into()));
            }
            o.join = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(NodeError::Usage(USAGE.into()));
        }
        let mut value = || -> Result<String, NodeError> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it
                    .next()
                    .ok_or_else(|| NodeError::Usage(format!("{flag} needs a value"))),
            }
        };
        match flag.as_str() {
            "--index" => o.index = parse(&flag, &value()?)?,
            "--node-id" => {
                o.node_id = parse_node_id(&value()?)?;
                have_id = true;
            }
            "--data" => {
                o.data = PathBuf::from(value()?);
                have_data = true;
            }
            "--init" => o.init = Some(PathBuf::from(value()?)),
            "--steps" => {
                o.steps = parse(&flag, &value()?)?;
                have_steps = true;
            }
            "--batch" => o.batch = parse(&flag, &value()?)?,
            "--lr" => o.lr = parse(&flag, &value()?)?,
            "--cluster-size" => o.cluster_size = parse(&flag, &value()?)?,
            "--momentum" => o.momentum = parse(&flag, &value()?)?,
            "--seed" => o.seed = parse(&flag, &value()?)?,
            "--sync" => {
                o.sync = match value()?.as_str() {
                    "on" => true,
                    "off" => false,
                    v => return Err(NodeError::Usage(format!("--sync {v}: on or off"))),
                }
            }
            "--alpha" => o.sync_config.alpha = parse(&flag, &value()?)?,
            "--ratio" => o.sync_config.ratio = parse(&flag, &value()?)?,
            "--sync-interval" => o.sync_config.sync_interval = parse(&flag, &value()?)?,
            "--namespace" => o.namespace = value()?,
            "--listen" => o.listen = Some(value()?),
            "--connect" => o.connect.push(value()?),
            "--neighbours" => {
                o.neighbours = value()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(parse_node_id)
                    .collect::<Result<_, _>>()?
            }
            "--eval-every" => o.eval_every = parse(&flag, &value()?)?,
            "--wait-peers" => o.wait_peers = seconds(&flag, &value()?)?,
            "--linger" => o.linger = seconds(&flag, &value()?)?,
            "--report" => o.report = Some(PathBuf::from(value()?)),
            "--dump" => o.dump = Some(PathBuf::from(value()?)),
            "--incarnation" => {
                let n: u64 = parse(&flag, &value()?)?;
                if n == 0 {
                    return Err(NodeError::Usage("--incarnation must be non-zero".into()));
                }
                o.incarnation = Some(n);
            }
            "--bn-momentum" => {
                let m: f64 = parse(&flag, &value()?)?;
                if !(m.is_finite() && (0.0..=1.0).contains(&m)) {
                    return Err(NodeError::Usage("--bn-momentum must be in [0, 1]".into()));
                }
                o.bn_momentum = Some(m);
            }
            "--max-lead" => o.max_lead = parse(&flag, &value()?)?,
            "--join-timeout" => o.join_timeout = seconds(&flag, &value()?)?,
            _ => {
                return Err(NodeError::Usage(format!(
                    "unknown argument {arg:?}\n{USAGE}"
                )));
            }
        }
    }
    if !(have_id && have_data && have_steps) {
        return Err(NodeError::Usage(format!(
            "--node-id, --data and --steps are required\n{USAGE}"
        )));
    }
    if o.batch == 0 {
        return Err(NodeError::Usage("--batch must be > 0".into()));
    }
    if o.cluster_size == 0 {
        return Err(NodeError::Usage("--cluster-size must be > 0".into()));
    }
    if !(o.lr.is_finite() && o.lr > 0.0) {
        return Err(NodeError::Usage("--lr must be a positive number".into()));
    }
    if !(o.momentum.is_finite() && (0.0..1.0).contains(&o.momentum)) {
        return Err(NodeError::Usage("--momentum must be in [0, 1)".into()));
    }
    if !(o.sync_config.ratio > 0.0 && o.sync_config.ratio <= 1.0) {
        return Err(NodeError::Usage("--ratio must be in (0, 1]".into()));
    }
    if !o.sync_config.alpha.is_finite() {
        return Err(NodeError::Usage("--alpha must be finite".into()));
    }
    if o.sync_config.sync_interval == 0 {
        return Err(NodeError::Usage("--sync-interval must be > 0".into()));
    }
    if o.join && !o.sync {
        return Err(NodeError::Usage("--join needs --sync on".into()));
    }
    Ok(o)
}
