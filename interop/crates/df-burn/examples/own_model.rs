//! Your own Burn model in a DeltaFabric cluster, next to PyTorch nodes.
//!
//! ```text
//! cargo run -p df-burn --example own_model -- --node-id 0a --peers 0b,0c \
//!     --listen tcp/127.0.0.1:7501 --connect tcp/127.0.0.1:7500 --out a.f32
//! ```
//!
//! The model is a small MLP regressor (`fc1: Linear(4, 16)`, ReLU, `fc2: Linear(16, 1)`), defined
//! here and nowhere in the library. Its canonical names are the PyTorch `state_dict` keys of the same
//! module (`fc1.weight [16, 4]`, ...; `df_burn::BurnStore` transposes Burn's `[in, out]` Linear
//! weights). The PyTorch peer is `interop/examples/own_model_peer.py`; both sides draw the initial
//! weights from one seed in canonical order, so every node starts from identical weights, and each
//! node trains on its own synthetic shard of `y = sin(x0) + 0.5 x1 x2 - 0.3 x3`.
//!
//! Stdout protocol (JSON lines), shared with the Python peer: after training and 3 drain rounds the
//! node prints `{"event":"finished","node":HEX,"seq":S}` (S: its last sequence number) and waits
//! for one stdin line `{"final":{HEX:S,...}}`; it then receives until it has accepted every peer's
//! entries up to S, writes its canonical weights (raw little-endian f32) to `--out` and prints
//! `{"event":"done",...}`.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use burn::backend::{Autodiff, NdArray};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor, TensorData};
use clap::Parser;
use df_burn::BurnStore;
use df_fabric::{Fabric, FabricOptions, Transport, WeightStore};
use df_zenoh::{TransportConfig, ZenohTransport};
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
    /// Node id (hex, non-zero).
    #[arg(long, value_parser = hex_id)]
    node_id: u64,
    /// Index of this node's data shard.
    #[arg(long, default_value_t = 0)]
    index: u64,
    /// Ids (hex) of the other nodes, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = hex_id)]
    peers: Vec<u64>,
    /// Zenoh listen endpoint.
    #[arg(long)]
    listen: Option<String>,
    /// Zenoh connect endpoints (repeatable).
    #[arg(long)]
    connect: Vec<String>,
    /// Zenoh namespace.
    #[arg(long, default_value = "deltafabric/own-model")]
    namespace: String,
    /// Local training steps.
    #[arg(long, default_value_t = 200)]
    steps: u64,
    /// Seed of the shared initial weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Where to write the final canonical weights (raw little-endian f32).
    #[arg(long)]
    out: PathBuf,
    /// Seconds to wait for peers and for their final entries.
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
    let store = BurnStore::<Tb, Mlp<Tb>>::new(Mlp::new(&device), false)?;
    let mut store = store;
    store.load(&initial_weights(args.seed, store.num_params()))?;

    let mut cfg = TransportConfig::new(args.node_id);
    cfg.namespace = args.namespace.clone();
    cfg.listen = args.listen.iter().cloned().collect();
    cfg.connect = args.connect.clone();
    let transport = ZenohTransport::open(cfg)?;
    let timeout = Duration::from_secs_f64(args.timeout);
    transport.wait_for_peers(args.peers.len(), &args.peers, timeout)?;

    let sync = df_core::SyncConfig {
        ratio: 0.5,
        sync_interval: 5,
        ..df_core::SyncConfig::v1_0()
    };
    // The fabric owns the store and the transport; dropping it closes the transport.
    let mut fabric = Fabric::with_options(store, transport, sync, FabricOptions::default())?;
    emit(
        json!({"event": "ready", "node": format!("{:016x}", args.node_id),
                "num_params": fabric.store().num_params()}),
    );

    let (xs, ys) = shard(args.index);
    let n = ys.len();
    let lr = 0.05 / (args.peers.len() + 1) as f64; // the learning rate divided by cluster size
    let mut optim = SgdConfig::new().init::<Tb, Mlp<Tb>>();
    let mut rng = SplitMix64(2000 + args.index);
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
    // Quiescent drain: sync rounds without local steps (spec DF-NUM-1).
    for _ in 0..3 {
        fabric.sync_now()?;
        fabric
            .transport()
            .wait_for_packets(Duration::from_millis(20))?;
        fabric.poll()?;
    }
    let seq = fabric.engine()?.next_seq() - 1;
    emit(
        json!({"event": "finished", "node": format!("{:016x}", args.node_id),
                "seq": seq, "loss": last_loss}),
    );

    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let msg: Value = serde_json::from_str(&line)?;
    let finals: Vec<(u64, u64)> = msg["final"]
        .as_object()
        .ok_or("stdin: expected {\"final\": {...}}")?
        .iter()
        .filter_map(|(k, v)| Some((hex_id(k).ok()?, v.as_u64()?)))
        .filter(|&(node, _)| node != args.node_id)
        .collect();
    let deadline = Instant::now() + timeout;
    loop {
        fabric.poll()?;
        let progress = fabric.origin_progress();
        let caught_up = finals
            .iter()
            .all(|(p, s)| progress.get(p).is_some_and(|&(_, got)| got >= *s));
        if caught_up {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("peers' final entries not received within {timeout:?}").into());
        }
        fabric
            .transport()
            .wait_for_packets(Duration::from_millis(50))?;
    }
    let w = fabric.store().gather()?;
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&args.out, bytes)?;
    emit(json!({"event": "done", "stats": fabric.stats()}));
    fabric.close()?;
    Ok(())
}
