//! Your own Burn model in a DeltaFabric cluster, next to PyTorch nodes.
//!
//! ```text
//! cargo run -p df-burn --example own_model -- --node-id 0a --peers 0b,0c \
//!     --listen tcp/127.0.0.1:7501 --connect tcp/127.0.0.1:7500 --out a.f32
//! delta-fabric run --nodes 2 --no-python target/debug/examples/own_model --steps 200
//! ```
//!
//! The model is a small MLP regressor (`fc1: Linear(4, 16)`, ReLU, `fc2: Linear(16, 1)`), defined
//! here and nowhere in the library. Its canonical names are the PyTorch `state_dict` keys of the same
//! module (`fc1.weight [16, 4]`, ...; `df_burn::BurnStore` transposes Burn's `[in, out]` Linear
//! weights). The PyTorch peer is `interop/examples/own_model_peer.py`; both sides draw the initial
//! weights from one seed in canonical order, so every node starts from identical weights (under
//! `delta-fabric run` every rank but 0 also starts from rank 0's snapshot), and each node trains on
//! its own synthetic shard of `y = sin(x0) + 0.5 x1 x2 - 0.3 x3`.
//!
//! The node comes from `Fabric::from_env` (the `DELTA_FABRIC_*` variables `delta-fabric run` sets;
//! `--node-id`, `--listen`, `--connect` and `--namespace` replace theirs), with the recommended sync
//! settings (averaging over the cluster: the single-node learning rate) but 50 % of the weights every
//! 5 steps, and ends with `Fabric::finish`: every node returns the same shared model. Stdout (JSON
//! lines, shared with the Python peer): `{"event":"ready",...}`, then after training and `finish`
//! `{"event":"finished","node":HEX,"seq":S,"loss":L}` (S: its last sequence number) and
//! `{"event":"done","stats":{...}}`; `--out` gets the shared model's canonical weights (raw
//! little-endian f32).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use burn::backend::{Autodiff, NdArray};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor, TensorData};
use clap::Parser;
use df_burn::BurnStore;
use df_fabric::env::{CONNECT, Env, LISTEN, NAMESPACE, NODE_ID};
use df_fabric::{Fabric, FabricOptions, Transport, WeightStore};
use df_zenoh::{FabricFromEnv, ZenohTransport};
use serde_json::{Value, json};

/// The training backend (autodiff over ndarray, CPU).
type Tb = Autodiff<NdArray<f32>>;

/// The user's model: not the demo CNN.
#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Mlp {
            fc1: LinearConfig::new(4, 16).init(device),
            fc2: LinearConfig::new(16, 1).init(device),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.fc2.forward(relu(self.fc1.forward(x)))
    }
}

/// One Burn node of the own-model example.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Node id (hex, non-zero) [default: DELTA_FABRIC_NODE_ID, else random].
    #[arg(long, value_parser = hex_id)]
    node_id: Option<u64>,
    /// Index of this node's data shard [default: DELTA_FABRIC_RANK, else 0].
    #[arg(long)]
    index: Option<u64>,
    /// Ids (hex) of the other nodes, comma-separated: waited for before training (without it, the
    /// node waits for DELTA_FABRIC_NODES - 1 peers).
    #[arg(long, value_delimiter = ',', value_parser = hex_id)]
    peers: Vec<u64>,
    /// Zenoh listen endpoint [default: DELTA_FABRIC_LISTEN].
    #[arg(long)]
    listen: Option<String>,
    /// Zenoh connect endpoints (repeatable) [default: DELTA_FABRIC_CONNECT].
    #[arg(long)]
    connect: Vec<String>,
    /// Zenoh namespace [default: DELTA_FABRIC_NAMESPACE, else deltafabric/own-model].
    #[arg(long)]
    namespace: Option<String>,
    /// Local training steps.
    #[arg(long, default_value_t = 200)]
    steps: u64,
    /// Seed of the shared initial weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Where to write the final canonical weights (raw little-endian f32).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seconds to wait for peers, and for them to finish.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
}

fn hex_id(v: &str) -> Result<u64, String> {
    u64::from_str_radix(v.trim_start_matches("0x"), 16)
        .ok()
        .filter(|&x| x != 0)
        .ok_or_else(|| format!("{v:?} is not a non-zero hex node id"))
}

/// SplitMix64, the generator the Python peer uses too.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 24 bits (exact in f32).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The shared initial weights: N values uniform in [-0.5, 0.5), canonical order.
fn initial_weights(seed: u64, n: usize) -> Vec<f32> {
    let mut r = SplitMix64(seed);
    (0..n).map(|_| r.unit() - 0.5).collect()
}

/// Shard `index`: 256 samples of the teacher function.
fn shard(index: u64) -> (Vec<f32>, Vec<f32>) {
    let mut r = SplitMix64(1000 + index);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for _ in 0..256 {
        let v: Vec<f32> = (0..4).map(|_| 2.0 * r.unit() - 1.0).collect();
        y.push(v[0].sin() + 0.5 * v[1] * v[2] - 0.3 * v[3]);
        x.extend(v);
    }
    (x, y)
}

fn emit(v: Value) {
    println!("{v}");
}

fn main() {
    df_fabric::logging::init_from_env();
    df_zenoh::init_log_from_env();
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("own_model: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let mut store = BurnStore::<Tb, Mlp<Tb>>::new(Mlp::new(&device), false)?;
    store.load(&initial_weights(args.seed, store.num_params()))?;

    // The command line's settings replace the launcher's variables.
    let mut given: HashMap<&str, String> = HashMap::new();
    if let Some(id) = args.node_id {
        given.insert(NODE_ID, format!("0x{id:x}"));
    }
    if let Some(l) = &args.listen {
        given.insert(LISTEN, l.clone());
    }
    if !args.connect.is_empty() {
        given.insert(CONNECT, args.connect.join(","));
    }
    let namespace = args
        .namespace
        .clone()
        .or_else(|| {
            std::env::var(NAMESPACE)
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| "deltafabric/own-model".to_owned());
    given.insert(NAMESPACE, namespace);
    let lookup = |k: &str| given.get(k).cloned().or_else(|| std::env::var(k).ok());
    let env = Env::from_fn(&lookup);
    let index = match args.index {
        Some(i) => i,
        None => env.rank()?.unwrap_or(0),
    };

    // The recommended profile (Q8, PACKED, relay NEEDED, averaged over the cluster), with more of
    // this small model's weights sent more often.
    let sync = df_core::SyncConfig {
        ratio: 0.5,
        sync_interval: 5,
        ..df_core::SyncConfig::default()
    };
    // The fabric owns the store and the transport; dropping it closes the transport.
    let mut fabric: Fabric<_, ZenohTransport> =
        Fabric::from_env_with(store, sync, FabricOptions::default(), env)?;
    let timeout = Duration::from_secs_f64(args.timeout);
    let others = if args.peers.is_empty() {
        env.nodes()?.unwrap_or(1).saturating_sub(1)
    } else {
        args.peers.len()
    };
    let live = fabric
        .transport()
        .wait_for_peers(others, &args.peers, timeout)?;
    // A peer answers info queries once its node has started (after its bootstrap): training
    // starts when every peer has, so that no delta is in flight while a snapshot is captured.
    let deadline = std::time::Instant::now() + timeout;
    for p in live {
        while fabric
            .transport()
            .query_info(p, Duration::from_millis(500))
            .is_err()
        {
            if std::time::Instant::now() > deadline {
                return Err(format!("peer {p:016x} did not start within {timeout:?}").into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let node = format!("{:016x}", fabric.node_id());
    emit(json!({"event": "ready", "node": node, "num_params": fabric.store().num_params()}));

    let (xs, ys) = shard(index);
    let n = ys.len();
    let lr = 0.05; // the single-node learning rate: the node averages over the cluster
    let mut optim = SgdConfig::new().init::<Tb, Mlp<Tb>>();
    let mut rng = SplitMix64(2000 + index);
    let mut last_loss = 0.0f32;
    for _ in 0..args.steps {
        let idx: Vec<usize> = (0..16)
            .map(|_| (rng.next_u64() % n as u64) as usize)
            .collect();
        let bx: Vec<f32> = idx
            .iter()
            .flat_map(|&i| xs[4 * i..4 * i + 4].to_vec())
            .collect();
        let by: Vec<f32> = idx.iter().map(|&i| ys[i]).collect();
        let x = Tensor::<Tb, 2>::from_data(TensorData::new(bx, [16, 4]), &device);
        let y = Tensor::<Tb, 2>::from_data(TensorData::new(by, [16, 1]), &device);
        let model = fabric.store().model();
        let loss = (model.forward(x) - y).powi_scalar(2).mean();
        last_loss = loss.clone().into_scalar().elem::<f32>();
        let grads = GradientsParams::from_grads(loss.backward(), model);
        fabric.store_mut().update(|m| optim.step(lr, m, grads));
        fabric.step()?;
    }
    // One call to finish: the last progress goes out, every live peer's last entry is applied,
    // and the store holds the shared model (the same on every node, DF-NUM-1).
    let shared = fabric.finish(timeout)?;
    let seq = fabric.engine()?.next_seq() - 1;
    emit(json!({"event": "finished", "node": node, "seq": seq, "loss": last_loss}));
    if let Some(out) = &args.out {
        let bytes: Vec<u8> = shared.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(out, bytes)?;
    }
    emit(json!({"event": "done", "stats": fabric.stats()}));
    fabric.close()?;
    Ok(())
}
