//! The training loop of one node and its stdout line protocol (same as the Python demo node).
//!
//! Per local step: sample a batch (uniform with replacement), one SGD step (PyTorch semantics:
//! momentum with dampening 0, no Nesterov) on the model held by a [`df_burn::BurnStore`], then
//! [`df_fabric::Fabric::step`] (the library node loop: drain, engine receive, sparse apply to the
//! model, and every `sync_interval` steps generate and publish own + relay packets).
//!
//! Events (one JSON object per stdout line):
//! * with `--join`, first `{"event":"joined","index","from","num_params","incarnation","sha256",
//!   "join_s"}` once a live peer's snapshot is fetched, verified (digest, fingerprint, finite values)
//!   and loaded;
//! * `{"event":"ready","index","node","framework":"burn","num_params","fingerprint",...}`
//! * `{"event":"progress","index","step","loss","acc","accuracy","bytes_sent"}` every 10 steps and
//!   at each evaluation (`acc`/`accuracy` null between evaluations; `loss`: mean since the last line)
//! * `{"event":"finished","index","step"}`; with `--drain` the node then runs 3 sync rounds
//!   without training (DF-NUM-1's quiescent drain) and receives until every neighbour's last seq
//!   reached its own (at most `--wait-peers`, an error if not); then it keeps
//!   receiving and relaying until `stop` on stdin, stdin closes, or `--linger` seconds pass;
//! * `{"event":"done","index","accuracy","per_class","curve","stats","traffic":[[step, sent,
//!   received, relayed],...],"last_seq",
//!   "origin_progress":{origin: last seq accepted},"accepted_by_origin":{origin: entries},...}`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use df_burn::{BurnStore, CanonicalLayout};
use df_core::{Manifest, SyncConfig};
use df_fabric::{Fabric, FabricOptions, JoinOptions, Transport, WeightStore};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::data::{Dataset, IMAGE_LEN, NUM_CLASSES, Split, f32_bytes};
use crate::error::NodeError;
use crate::model::DigitsCnn;
use crate::rng::SplitMix64;
use crate::rounds::{RoundGate, RoundHandle};
use crate::{InnerBackend, TrainBackend};

/// The trained model type.
pub type Model = DigitsCnn<TrainBackend>;

/// The model as a weight store.
pub type Store = BurnStore<TrainBackend, Model>;

/// The node loop of a run.
pub type NodeFabric = Fabric<Store, Box<dyn Transport>>;

/// Options of one node run (see [`crate::cli`] for the command line).
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub index: u32,
    pub node_id: u64,
    pub data: PathBuf,
    /// Initial canonical weights (raw little-endian f32, canonical order, with running statistics
    /// when `include_buffers`); `None`: Burn's own initialisation seeded with `seed`.
    pub init: Option<PathBuf>,
    pub steps: u64,
    pub batch: usize,
    /// Learning rate as given on the command line (divided by `cluster_size` before use).
    pub lr: f64,
    pub cluster_size: u32,
    pub momentum: f64,
    pub seed: u64,
    pub sync: bool,
    pub sync_config: SyncConfig,
    pub include_buffers: bool,
    pub namespace: String,
    pub listen: Vec<String>,
    pub connect: Vec<String>,
    /// Zenoh session mode.
    pub mode: df_zenoh::Mode,
    /// A Zenoh config file used as is (DF-ZEN-14).
    pub zenoh_config: Option<PathBuf>,
    pub neighbours: Vec<u64>,
    pub eval_every: u64,
    pub wait_peers: Duration,
    pub linger: Duration,
    pub report: Option<PathBuf>,
    /// Where the final canonical weights go (default: `<report>.weights.f32` when `report` is set).
    pub dump: Option<PathBuf>,
    /// Incarnation (default: microseconds since the Unix epoch, DF-RCV-4).
    pub incarnation: Option<u64>,
    /// BatchNorm running-statistics momentum (default: 0.1 as PyTorch).
    pub bn_momentum: Option<f64>,
    /// Bounded staleness: sync rounds this node may run ahead of the slowest peer it hears
    /// (0: no pacing). Same rule as the Python demo node.
    pub max_lead: u64,
    /// Lockstep rounds (the demo's `--lockstep`, see [`crate::rounds`]): every peer's round r is
    /// applied at this node's own round r; replaces `max_lead` pacing.
    pub lockstep: bool,
    /// Late join (DF-ZEN-5): before training, start from a verified anchor snapshot fetched from
    /// a live peer (the live `neighbours` first) instead of `init`/`seed`.
    pub join: bool,
    /// How long `join` may look for and fetch a snapshot.
    pub join_timeout: Duration,
    /// After training, receive until every neighbour's last seq reached this node's own (at most
    /// `wait_peers`; an error if not).
    pub drain: bool,
    /// Anti-entropy by gap repair (spec section 7.9).
    pub repair: bool,
    /// Write the canonical weights at every evaluation (`step{S:06}.f32`) and at the end
    /// (`final.f32`) into this directory (the demo's weight-agreement panel).
    pub weights_dir: Option<PathBuf>,
    /// DF-RCV-51: the node ids accepted as origins (`None`: every origin).
    pub members: Option<Vec<u64>>,
    /// DF-ZEN-150: the membership follows the liveliness tokens.
    pub live_members: bool,
    /// DF-GEN-240: the unsent residual held aside (`FabricOptions::hold_residual`).
    pub hold_residual: bool,
    /// DF-ZEN-150: how long a member that left stays one.
    pub member_grace: Duration,
    /// How many nodes the run has in all: an AUTO `average_over` averages over at least this
    /// many (`FabricOptions::world_size`).
    pub world_size: Option<usize>,
    /// DF-ZEN-153: packets per second each sender may queue (0: no limit), and the burst.
    pub rate_limit: f64,
    pub rate_burst: f64,
    /// DF-ZEN-156: a live peer without progress for this long no longer holds pacing back.
    pub peer_deadline: Duration,
    /// Signed entries (spec section 13.1): the pinned keys and this node's secret seed
    /// (`--keys`, `--secret-key`); `None`: not a signed cluster.
    pub signing: Option<df_core::signing::Signing>,
}

impl NodeOptions {
    /// Defaults of the demo node for `node_id` on the data in `data` (no sync), with protocol
    /// 1.0's settings (`SyncConfig::v1_0()`, residual not held, no repair; the command line's
    /// defaults are the recommended profile unless `--v1-0`).
    pub fn new(node_id: u64, data: PathBuf, steps: u64) -> Self {
        NodeOptions {
            index: 0,
            node_id,
            data,
            init: None,
            steps,
            batch: 32,
            lr: 0.05,
            cluster_size: 1,
            momentum: 0.9,
            seed: 0,
            sync: false,
            sync_config: SyncConfig::v1_0(),
            include_buffers: false,
            namespace: "deltafabric/demo".into(),
            listen: Vec::new(),
            connect: Vec::new(),
            mode: df_zenoh::Mode::Peer,
            zenoh_config: None,
            neighbours: Vec::new(),
            eval_every: 50,
            wait_peers: Duration::from_secs(30),
            linger: Duration::from_secs(30),
            report: None,
            dump: None,
            incarnation: None,
            bn_momentum: None,
            max_lead: 0,
            lockstep: false,
            join: false,
            join_timeout: Duration::from_secs(30),
            drain: false,
            repair: false,
            weights_dir: None,
            members: None,
            live_members: false,
            hold_residual: false,
            member_grace: df_fabric::fabric::DEFAULT_MEMBER_GRACE,
            world_size: None,
            rate_limit: 0.0,
            rate_burst: 0.0,
            peer_deadline: df_fabric::fabric::DEFAULT_PEER_DEADLINE,
            signing: None,
        }
    }

    /// The learning rate used: `lr / cluster_size`.
    pub fn effective_lr(&self) -> f64 {
        self.lr / f64::from(self.cluster_size.max(1))
    }

    fn dump_path(&self) -> Option<PathBuf> {
        self.dump.clone().or_else(|| {
            self.report.as_ref().map(|r| {
                let mut s = r.clone().into_os_string();
                s.push(".weights.f32");
                PathBuf::from(s)
            })
        })
    }
}

/// Where events go and where the stop signal comes from.
pub trait Channel {
    /// Emits one event.
    fn emit(&mut self, event: Value);
    /// Waits up to `timeout` for the stop signal; true once it came.
    fn stop_requested(&mut self, timeout: Duration) -> bool;
}

/// A channel that records events in memory and stops at once (tests, library use).
#[derive(Debug, Default)]
pub struct RecordingChannel {
    pub events: Vec<Value>,
}

impl Channel for RecordingChannel {
    fn emit(&mut self, event: Value) {
        self.events.push(event);
    }
    fn stop_requested(&mut self, _timeout: Duration) -> bool {
        true
    }
}

/// The canonical layout and the manifest of the model (DF-MAN).
pub fn model_manifest(
    model: &Model,
    include_buffers: bool,
) -> Result<(CanonicalLayout, Manifest), NodeError> {
    let layout = df_burn::canonical_layout::<TrainBackend, _>(model, include_buffers)?;
    let manifest = df_burn::layout_manifest(&layout)?;
    Ok((layout, manifest))
}

fn hex_lower(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub use df_fabric::fabric::default_incarnation;

/// A batch of `idx` images as tensors.
pub fn batch_tensors<B: Backend>(
    split: &Split,
    idx: &[usize],
    device: &B::Device,
) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
    let mut x = Vec::with_capacity(idx.len() * IMAGE_LEN);
    let mut y = Vec::with_capacity(idx.len());
    for &i in idx {
        x.extend_from_slice(split.image(i));
        y.push(i64::from(split.y[i]));
    }
    let n = idx.len();
    (
        Tensor::from_data(TensorData::new(x, [n, 1, 8, 8]), device),
        Tensor::from_data(TensorData::new(y, [n]), device),
    )
}

/// One SGD step on a batch; returns the model and the batch loss.
pub fn train_step<O: Optimizer<Model, TrainBackend>>(
    model: Model,
    optim: &mut O,
    x: Tensor<TrainBackend, 4>,
    y: Tensor<TrainBackend, 1, Int>,
    lr: f64,
) -> (Model, f32) {
    let (model, loss, _) = train_step_logits(model, optim, x, y, lr);
    (model, loss)
}

/// [`train_step`] that also returns the training-mode logits `[n, 10]` of the batch (the
/// conformance `forward` check compares them with the reference).
pub fn train_step_logits<O: Optimizer<Model, TrainBackend>>(
    model: Model,
    optim: &mut O,
    x: Tensor<TrainBackend, 4>,
    y: Tensor<TrainBackend, 1, Int>,
    lr: f64,
) -> (Model, f32, Vec<f32>) {
    let logits = model.forward(x);
    let seen: Vec<f32> = logits
        .clone()
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_default();
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, y);
    let value = loss.clone().into_scalar().elem::<f32>();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    (optim.step(lr, model, grads), value, seen)
}

/// What [`forward_check`] computes (conformance driver protocol, section 5.9).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardOutput {
    /// Logits `[n, 10]` (row-major) in inference mode: BatchNorm running statistics.
    pub logits_eval: Vec<f32>,
    /// Logits `[n, 10]` in training mode (batch statistics), the ones the loss uses.
    pub logits_train: Vec<f32>,
    /// Mean cross-entropy of the batch.
    pub loss: f32,
    /// Canonical flat weights after one plain SGD step (and the running statistics' update).
    pub weights: Vec<f32>,
}

/// The `forward` check: the digits CNN built from canonical `weights` (with the running statistics
/// when `include_buffers`), the logits of `x` (`[n, 64]` pixels / 16) in inference mode, then one plain
/// SGD step on `(x, y)` with `lr` exactly as [`train_step`] runs it; the weights read back through the
/// canonical mapping.
pub fn forward_check(
    weights: &[f32],
    include_buffers: bool,
    x: &[f32],
    y: &[i64],
    lr: f64,
) -> Result<ForwardOutput, NodeError> {
    let n = y.len();
    if x.len() != n * IMAGE_LEN {
        return Err(NodeError::Data(format!(
            "{} pixels for {n} labels (expected {})",
            x.len(),
            n * IMAGE_LEN
        )));
    }
    let model = initial_model(Some(weights), include_buffers, 0)?;
    let device = Default::default();
    let xs =
        || Tensor::<TrainBackend, 4>::from_data(TensorData::new(x.to_vec(), [n, 1, 8, 8]), &device);
    let inner: DigitsCnn<InnerBackend> = model.valid();
    let logits_eval = inner
        .forward(xs().inner())
        .into_data()
        .convert::<f32>()
        .to_vec()
        .map_err(|e| NodeError::Data(format!("logits: {e:?}")))?;
    let mut optim = sgd_config(0.0).init::<TrainBackend, Model>();
    let labels =
        Tensor::<TrainBackend, 1, Int>::from_data(TensorData::new(y.to_vec(), [n]), &device);
    let (model, loss, logits_train) = train_step_logits(model, &mut optim, xs(), labels, lr);
    let (_, weights) = df_burn::export_with_layout::<TrainBackend, _>(&model, include_buffers)?;
    Ok(ForwardOutput {
        logits_eval,
        logits_train,
        loss,
        weights,
    })
}

/// The optimizer of the demo: SGD with PyTorch's momentum semantics (dampening 0, no Nesterov;
/// Burn's `MomentumConfig` defaults to dampening 0.1).
pub fn sgd_config(momentum: f64) -> SgdConfig {
    let cfg = SgdConfig::new();
    if momentum > 0.0 {
        cfg.with_momentum(Some(
            MomentumConfig::new()
                .with_momentum(momentum)
                .with_dampening(0.0)
                .with_nesterov(false),
        ))
    } else {
        cfg
    }
}

/// Test accuracy and per-class accuracy (`None` for a class absent from the test set), in eval
/// mode (BatchNorm running statistics).
pub fn evaluate(model: &Model, test: &Split) -> (f64, Vec<Option<f64>>) {
    let inner: DigitsCnn<InnerBackend> = model.valid();
    let device = Default::default();
    let mut correct = [0usize; NUM_CLASSES];
    let mut total = [0usize; NUM_CLASSES];
    let all: Vec<usize> = (0..test.len()).collect();
    for chunk in all.chunks(512) {
        let (x, _) = batch_tensors::<InnerBackend>(test, chunk, &device);
        let pred = inner.forward(x).argmax(1).into_data();
        let pred: Vec<i64> = pred.convert::<i64>().into_vec::<i64>().unwrap_or_default();
        for (&i, &p) in chunk.iter().zip(&pred) {
            let c = usize::from(test.y[i]);
            total[c] += 1;
            if p == c as i64 {
                correct[c] += 1;
            }
        }
    }
    let n: usize = total.iter().sum();
    let acc = if n == 0 {
        0.0
    } else {
        correct.iter().sum::<usize>() as f64 / n as f64
    };
    let per_class = (0..NUM_CLASSES)
        .map(|c| (total[c] > 0).then(|| correct[c] as f64 / total[c] as f64))
        .collect();
    (acc, per_class)
}

/// The model every node starts from: `init` weights when given, else Burn's initialisation
/// seeded with `seed`.
pub fn initial_model(
    init: Option<&[f32]>,
    include_buffers: bool,
    seed: u64,
) -> Result<Model, NodeError> {
    let device = Default::default();
    TrainBackend::seed(&device, seed);
    let model = Model::new(&device);
    match init {
        Some(flat) => Ok(df_burn::import_canonical::<TrainBackend, _>(
            model,
            flat,
            include_buffers,
        )?),
        None => Ok(model),
    }
}

/// What a finished run produced.
#[derive(Debug, Clone)]
pub struct NodeOutcome {
    pub accuracy: f64,
    pub per_class: Vec<Option<f64>>,
    /// `(step, accuracy)` including step 0.
    pub curve: Vec<(u64, f64)>,
    pub stats: Value,
    /// Final canonical weights (DF-MAN-3 layout).
    pub weights: Vec<f32>,
    /// SHA-256 of the little-endian bytes of `weights`.
    pub weights_sha256: String,
    /// Where `weights` were written, if anywhere.
    pub weights_path: Option<PathBuf>,
    /// The full report (also written to `--report`).
    pub report: Value,
}

/// The model alone (no sync) or inside the node loop.
enum Holder {
    Alone(Box<Store>),
    Synced(Box<NodeFabric>),
}

impl Holder {
    fn store(&self) -> &Store {
        match self {
            Holder::Alone(s) => s,
            Holder::Synced(f) => f.store(),
        }
    }

    fn store_mut(&mut self) -> &mut Store {
        match self {
            Holder::Alone(s) => s,
            Holder::Synced(f) => f.store_mut(),
        }
    }

    fn fabric(&mut self) -> Option<&mut NodeFabric> {
        match self {
            Holder::Alone(_) => None,
            Holder::Synced(f) => Some(f),
        }
    }
}

/// Releases this node's latest round once every origin's same round is here (see
/// [`crate::rounds`]) and applies it; an origin silent for `wait_peers` no longer holds it back.
/// Returns the time spent waiting.
fn lockstep(
    f: &mut NodeFabric,
    gate: &RoundHandle,
    origins: &BTreeSet<u64>,
    opts: &NodeOptions,
) -> Result<Duration, NodeError> {
    let t0 = Instant::now();
    let r = f.engine()?.next_seq().saturating_sub(1);
    if !gate.wait_round(f.transport(), origins, r, opts.wait_peers)? {
        eprintln!(
            "node {}: round {r} incomplete after {:?}",
            opts.index, opts.wait_peers
        );
    }
    gate.release(r);
    f.poll()?; // every peer's round r now, at the step of this node's own round r
    Ok(t0.elapsed())
}

/// [`FabricError::Stopped`] once a stop signal arrived (after `df_fabric::lifecycle::install`;
/// also without a fabric, when the node trains alone).
fn stop_if_signalled() -> Result<(), NodeError> {
    match df_fabric::lifecycle::stop_signal() {
        Some(sig) => Err(df_fabric::FabricError::Stopped(sig).into()),
        None => Ok(()),
    }
}

/// Runs one node: training, sync (when `transport` is given and `opts.sync`), linger, report.
/// The transport is closed when this returns (also on error).
pub fn run_node(
    opts: &NodeOptions,
    data: &Dataset,
    transport: Option<Box<dyn Transport>>,
    channel: &mut dyn Channel,
) -> Result<NodeOutcome, NodeError> {
    let t_entry = Instant::now();
    if opts.batch == 0 {
        return Err(NodeError::Usage("--batch must be > 0".into()));
    }
    if opts.node_id == 0 {
        return Err(NodeError::Usage("--node-id must be non-zero".into()));
    }
    if opts.drain && (opts.neighbours.is_empty() || !opts.sync) {
        return Err(NodeError::Usage(
            "--drain needs --neighbours (the nodes to wait for) and --sync on".into(),
        ));
    }
    let init = match &opts.init {
        Some(p) => Some(crate::data::read_f32_file(p)?),
        None => None,
    };
    let mut model = initial_model(init.as_deref(), opts.include_buffers, opts.seed)?;
    if let Some(m) = opts.bn_momentum {
        model.bn1.momentum = m;
    }
    let store = Store::new(model, opts.include_buffers)?;
    let manifest = store.manifest().clone();
    let incarnation = opts.incarnation.unwrap_or_else(default_incarnation);
    let mut gate: Option<RoundHandle> = None;
    let mut wait_peers_s = 0.0;
    let mut node = match (opts.sync, transport) {
        (true, Some(t)) => {
            // Wait for the peers before the fabric starts: with relay policy NEEDED its start-up
            // advertisement (DF-RLY-63) then reaches them, and a --join finds them live.
            let t_wait = Instant::now();
            if !opts.neighbours.is_empty()
                && let Err(e) =
                    t.wait_for_peers(opts.neighbours.len(), &opts.neighbours, opts.wait_peers)
            {
                eprintln!("node {}: {e}; starting anyway", opts.index);
            }
            wait_peers_s = t_wait.elapsed().as_secs_f64();
            let t: Box<dyn Transport> = if opts.lockstep {
                let (g, handle) = RoundGate::new(t, opts.sync_config.max_packet_size);
                gate = Some(handle);
                Box::new(g)
            } else {
                t
            };
            let t_join = Instant::now();
            let options = FabricOptions {
                incarnation: Some(incarnation),
                join: opts.join.then(|| JoinOptions {
                    timeout: opts.join_timeout,
                    preferred: opts.neighbours.clone(),
                    required: true,
                }),
                repair: opts.repair,
                members: opts.members.as_ref().map(|m| m.iter().copied().collect()),
                live_members: opts.live_members,
                member_grace: opts.member_grace,
                hold_residual: opts.hold_residual,
                world_size: opts.world_size,
                max_lead: None, // the node paces itself (--max-lead, --lockstep)
                ..FabricOptions::default()
            };
            let f = Fabric::with_options(store, t, opts.sync_config.clone(), options)?;
            f.set_signing(opts.signing.clone())?; // DF-SEC-140, DF-SEC-142
            if let Some(from) = f.joined_from() {
                let anchor = f.engine()?.anchor().to_vec();
                channel.emit(json!({
                    "event": "joined",
                    "index": opts.index,
                    "from": format!("{from:016x}"),
                    "num_params": anchor.len(),
                    "incarnation": incarnation,
                    "sha256": hex_lower(&Sha256::digest(f32_bytes(&anchor))),
                    "join_s": round3(t_join.elapsed().as_secs_f64()),
                }));
            }
            Holder::Synced(Box::new(f))
        }
        (true, None) => {
            return Err(NodeError::Usage(
                "sync is on but no transport was given".into(),
            ));
        }
        (false, _) if opts.join => {
            return Err(NodeError::Usage("--join needs --sync on".into()));
        }
        (false, _) => Holder::Alone(Box::new(store)),
    };
    // The origins whose rounds a lockstep node waits for: its neighbours, else the live peers.
    let origins: BTreeSet<u64> = match node.fabric() {
        Some(f) if opts.neighbours.is_empty() => f.transport().peers()?,
        _ => opts.neighbours.iter().copied().collect(),
    };
    channel.emit(json!({
        "event": "ready",
        "index": opts.index,
        "node": format!("{:016x}", opts.node_id),
        "framework": "burn",
        "num_params": manifest.num_params(),
        "fingerprint": hex_lower(&manifest.fingerprint()),
        "startup_s": round3(t_entry.elapsed().as_secs_f64()),
        "wait_peers_s": round3(wait_peers_s),
    }));
    let t_ready = Instant::now();

    let device = Default::default();
    let mut optim = sgd_config(opts.momentum).init::<TrainBackend, Model>();
    let lr = opts.effective_lr();
    let mut rng = SplitMix64::new(
        opts.seed
            .wrapping_mul(1000)
            .wrapping_add(u64::from(opts.index)),
    );
    if let Some(d) = &opts.weights_dir {
        std::fs::create_dir_all(d).map_err(|e| NodeError::io(d, e))?;
    }
    let mut traffic: Vec<[u64; 4]> = vec![traffic_row(&node, 0)];
    save_weights(&node, opts, "step000000")?;
    let mut curve: Vec<(u64, f64)> = vec![(0, evaluate(node.store().model(), &data.test).0)];
    let mut loss_curve: Vec<(u64, f64)> = Vec::new();
    let (mut loss_sum, mut loss_n) = (0.0f64, 0u32);
    let n_train = data.train.len();
    if n_train == 0 {
        return Err(NodeError::Data("no training sample".into()));
    }
    let eval_every = opts.eval_every.max(1);
    let t0 = Instant::now();
    let mut idx = vec![0usize; opts.batch];
    let mut paced = Duration::ZERO;
    for step in 1..=opts.steps {
        stop_if_signalled()?;
        for i in idx.iter_mut() {
            *i = rng.below(n_train);
        }
        let (x, y) = batch_tensors::<TrainBackend>(&data.train, &idx, &device);
        let mut loss = 0.0f32;
        node.store_mut().update(|m| {
            let (m, l) = train_step(m, &mut optim, x, y, lr);
            loss = l;
            m
        });
        if !loss.is_finite() {
            return Err(NodeError::Data(format!("loss is {loss} at step {step}")));
        }
        loss_sum += f64::from(loss);
        loss_n += 1;
        if let Some(f) = node.fabric() {
            f.step()?;
            let sync_step = step % u64::from(opts.sync_config.sync_interval.max(1)) == 0;
            if let Some(g) = &gate {
                if sync_step {
                    paced += lockstep(f, g, &origins, opts)?;
                }
            } else if opts.max_lead > 0 && sync_step {
                paced += f.pace(opts.max_lead, opts.peer_deadline, opts.wait_peers)?;
            }
        }
        let mut acc = None;
        if step % eval_every == 0 || step == opts.steps {
            let a = evaluate(node.store().model(), &data.test).0;
            curve.push((step, a));
            acc = Some(a);
            save_weights(&node, opts, &format!("step{step:06}"))?;
            traffic.push(traffic_row(&node, step));
        }
        if acc.is_some() || step % 10 == 0 {
            let mean_loss = loss_sum / f64::from(loss_n.max(1));
            loss_curve.push((step, mean_loss));
            let bytes_sent = match &node {
                Holder::Synced(f) => f.counters().bytes_sent,
                Holder::Alone(_) => 0,
            };
            channel.emit(json!({
                "event": "progress",
                "index": opts.index,
                "step": step,
                "loss": mean_loss,
                "acc": acc,
                "accuracy": acc,
                "bytes_sent": bytes_sent,
            }));
            loss_sum = 0.0;
            loss_n = 0;
        }
    }
    let train_s = t0.elapsed().as_secs_f64();
    if let Some(f) = node.fabric() {
        f.sync_now()?; // the last residual goes out too
        if let Some(g) = &gate {
            // everyone's last round, then everything
            paced += lockstep(f, g, &origins, opts)?;
            g.release_all();
            f.poll()?;
        }
    }
    channel.emit(json!({"event": "finished", "index": opts.index, "step": opts.steps}));
    let mut last_seq = 0;
    if let Some(f) = node.fabric() {
        if opts.drain {
            for _ in 0..3 {
                // the quiescent drain of DF-NUM-1: sync rounds without training
                f.sync_now()?;
                f.poll()?;
            }
        }
        last_seq = f.engine()?.next_seq() - 1;
        if opts.drain {
            drain(f, &opts.neighbours, last_seq, opts.wait_peers)?;
        }
    }
    let deadline = Instant::now() + opts.linger;
    loop {
        stop_if_signalled()?;
        if let Some(f) = node.fabric() {
            f.poll()?;
        }
        let now = Instant::now();
        if now >= deadline || channel.stop_requested(Duration::from_millis(10).min(deadline - now))
        {
            break;
        }
    }
    if let Some(f) = node.fabric() {
        f.poll()?;
    }
    save_weights(&node, opts, "final")?;
    let model = node.store().model();
    let (accuracy, per_class) = evaluate(model, &data.test);
    let (_, weights) = df_burn::export_canonical::<TrainBackend, _>(model, opts.include_buffers)?;
    let bytes = f32_bytes(&weights);
    let weights_sha256 = hex_lower(&Sha256::digest(&bytes));
    let weights_path = opts.dump_path();
    if let Some(p) = &weights_path {
        std::fs::write(p, &bytes).map_err(|e| NodeError::io(p, e))?;
    }
    let mut stats = match &node {
        Holder::Synced(f) => {
            let mut s = f.stats();
            s["tensors_rebuilt"] = json!(f.store().tensors_rebuilt());
            s
        }
        Holder::Alone(_) => json!({"bytes_sent": 0, "steps": opts.steps, "syncs": 0}),
    };
    let step_ms = if opts.steps > 0 {
        1000.0 * train_s / opts.steps as f64
    } else {
        0.0
    };
    stats["train_s"] = json!(round3(train_s));
    stats["step_ms"] = json!(round3(step_ms));
    stats["startup_s"] = json!(round3((t_ready - t_entry).as_secs_f64()));
    stats["wait_peers_s"] = json!(round3(wait_peers_s));
    stats["paced_s"] = json!(round3(paced.as_secs_f64()));
    let curve_json: Vec<Value> = curve.iter().map(|&(s, a)| json!([s, a])).collect();
    let (origin_progress, accepted_by_origin) = match &node {
        Holder::Synced(f) => (
            hex_map(f.origin_progress().iter().map(|(&q, &(_, seq))| (q, seq))),
            hex_map(f.accepted_by_origin().iter().map(|(&q, &n)| (q, n))),
        ),
        Holder::Alone(_) => (json!({}), json!({})),
    };
    channel.emit(json!({
        "event": "done",
        "index": opts.index,
        "accuracy": accuracy,
        "per_class": per_class,
        "curve": curve_json,
        "stats": stats,
        "weights_sha256": weights_sha256,
        "traffic": traffic,
        "last_seq": last_seq,
        "origin_progress": origin_progress,
        "accepted_by_origin": accepted_by_origin,
    }));
    let report = json!({
        "index": opts.index,
        "node": format!("{:016x}", opts.node_id),
        "framework": "burn",
        "incarnation": incarnation,
        "steps": opts.steps,
        "lr": lr,
        "include_buffers": opts.include_buffers,
        "num_params": manifest.num_params(),
        "fingerprint": hex_lower(&manifest.fingerprint()),
        "accuracy": accuracy,
        "per_class": per_class,
        "accuracy_history": curve_json,
        "loss_history": loss_curve.iter().map(|&(s, l)| json!([s, l])).collect::<Vec<_>>(),
        "bytes_sent": stats["bytes_sent"],
        "stats": stats,
        "final_weights": {
            "sha256": weights_sha256,
            "path": weights_path.as_ref().map(|p| p.display().to_string()),
            "num_values": weights.len(),
        },
    });
    if let Some(p) = &opts.report {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| NodeError::Data(format!("report: {e}")))?;
        std::fs::write(p, text + "\n").map_err(|e| NodeError::io(p, e))?;
    }
    if let Some(f) = node.fabric() {
        f.close()?;
    }
    Ok(NodeOutcome {
        accuracy,
        per_class,
        curve,
        stats: report["stats"].clone(),
        weights,
        weights_sha256,
        weights_path,
        report,
    })
}

/// `[step, bytes sent, bytes received, bytes relayed]`; the relayed bytes are the share of the sent
/// bytes that carried relayed values (own and relayed entries share packets), as the Python node.
fn traffic_row(node: &Holder, step: u64) -> [u64; 4] {
    match node {
        Holder::Alone(_) => [step, 0, 0, 0],
        Holder::Synced(f) => {
            let c = f.counters();
            let values = c.own_values_sent + c.relay_values_sent;
            let relayed = if values == 0 {
                0
            } else {
                u64::try_from(
                    u128::from(c.bytes_sent) * u128::from(c.relay_values_sent) / u128::from(values),
                )
                .unwrap_or(u64::MAX)
            };
            let received = f.transport().stats().received_bytes;
            [step, c.bytes_sent, received, relayed]
        }
    }
}

/// `--weights-dir`: the canonical weights as `DIR/<name>.f32` (raw little-endian f32).
fn save_weights(node: &Holder, opts: &NodeOptions, name: &str) -> Result<(), NodeError> {
    let Some(dir) = &opts.weights_dir else {
        return Ok(());
    };
    let (_, w) =
        df_burn::export_canonical::<TrainBackend, _>(node.store().model(), opts.include_buffers)?;
    let path = dir.join(format!("{name}.f32"));
    std::fs::write(&path, f32_bytes(&w)).map_err(|e| NodeError::io(&path, e))
}

/// `{origin (16 hex digits): value}`, in origin order.
fn hex_map(pairs: impl Iterator<Item = (u64, u64)>) -> Value {
    let sorted: std::collections::BTreeMap<u64, u64> = pairs.collect();
    Value::Object(
        sorted
            .into_iter()
            .map(|(q, v)| (format!("{q:016x}"), json!(v)))
            .collect(),
    )
}

/// `--drain`: receive until every neighbour's last accepted seq reached `last_seq`.
fn drain(
    f: &mut NodeFabric,
    neighbours: &[u64],
    last_seq: u64,
    patience: Duration,
) -> Result<(), NodeError> {
    let end = Instant::now() + patience;
    loop {
        stop_if_signalled()?;
        let progress = f.origin_progress();
        let behind: Vec<String> = neighbours
            .iter()
            .filter_map(|q| {
                let seq = progress.get(q).map_or(0, |&(_, s)| s);
                (seq < last_seq).then(|| format!("{q:016x} at {seq}"))
            })
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() >= end {
            // what tells a lost packet from a refused one or a seq never sent
            let mut counters = Vec::new();
            let stats = f.stats();
            for section in ["receive", "repair", "transport"] {
                nonzero_counters(section, &stats[section], &mut counters);
            }
            return Err(NodeError::Data(format!(
                "--drain: after {:?} these neighbours had not reached seq {last_seq}: {}; \
                 counters {}",
                patience,
                behind.join(", "),
                counters.join(", ")
            )));
        }
        f.transport().wait_for_packets(Duration::from_millis(50))?;
        f.poll()?;
    }
}

/// The nonzero integer counters under `value`, as `prefix.name=count`.
fn nonzero_counters(prefix: &str, value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                nonzero_counters(&format!("{prefix}.{k}"), v, out);
            }
        }
        Value::Number(n) if n.as_u64().is_some_and(|c| c > 0) => out.push(format!("{prefix}={n}")),
        _ => {}
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
