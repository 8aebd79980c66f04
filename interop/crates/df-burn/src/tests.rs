//! Unit tests of the canonical mapping (compiled into the library's test binary).

use super::*;
use burn::backend::{Autodiff, NdArray};
use burn::module::AutodiffModule;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::{Distribution, Int};

type NB = NdArray<f32>;
type AB = Autodiff<NB>;

#[derive(Module, Debug)]
struct Small<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm<B>,
    fc1: Linear<B>,
}

impl<B: Backend> Small<B> {
    fn new(dev: &B::Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 2], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(dev),
            bn1: BatchNormConfig::new(2).init(dev),
            fc1: LinearConfig::new(2 * 4 * 4, 3).init(dev),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.bn1.forward(self.conv1.forward(x));
        let [n, c, h, w] = x.dims();
        self.fc1.forward(x.reshape([n, c * h * w]))
    }
}

fn dev() -> burn::tensor::Device<NB> {
    Default::default()
}

fn train_step(m: Small<AB>, seed: u64) -> Small<AB> {
    let d = dev();
    AB::seed(&d, seed);
    let x = Tensor::<AB, 4>::random([4, 1, 4, 4], Distribution::Normal(0.0, 1.0), &d);
    let y = Tensor::<AB, 1, Int>::from_data(TensorData::new(vec![0i64, 1, 2, 1], [4]), &d);
    let logits = m.forward(x);
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, y);
    let grads = GradientsParams::from_grads(loss.backward(), &m);
    let mut opt = SgdConfig::new().init::<AB, Small<AB>>();
    opt.step(0.1, m, grads)
}

// REQ: DF-MAN-6
#[test]
fn linear_weight_is_transposed_to_pytorch_layout() {
    let d = dev();
    let mut lin: Linear<NB> = LinearConfig::new(2, 3).init(&d);
    lin.weight = Param::from_data(
        TensorData::new(vec![1.0f32, 2., 3., 4., 5., 6.], [2, 3]),
        &d,
    );
    lin.bias = Some(Param::from_data(
        TensorData::new(vec![7.0f32, 8., 9.], [3]),
        &d,
    ));
    let (specs, flat) = export_canonical::<NB, _>(&lin, false).unwrap();
    assert_eq!(
        specs,
        vec![
            TensorSpec {
                name: "bias".into(),
                shape: vec![3]
            },
            TensorSpec {
                name: "weight".into(),
                shape: vec![3, 2]
            },
        ]
    );
    // bias then weight [[1,4],[2,5],[3,6]]
    assert_eq!(flat, vec![7., 8., 9., 1., 4., 2., 5., 3., 6.]);

    // And back: canonical [[10,40],[20,50],[30,60]] is Burn [[10,20,30],[40,50,60]].
    let lin =
        import_canonical::<NB, _>(lin, &[0., 0., 0., 10., 40., 20., 50., 30., 60.], false).unwrap();
    assert_eq!(lin.weight.val().dims(), [2, 3]);
    assert_eq!(
        lin.weight.val().into_data().into_vec::<f32>().unwrap(),
        vec![10., 20., 30., 40., 50., 60.]
    );
}

// REQ: DF-MAN-1
// REQ: DF-MAN-2
// REQ: DF-MAN-4
#[test]
fn names_shapes_and_order() {
    let m = Small::<NB>::new(&dev());
    let l = canonical_layout::<NB, _>(&m, true).unwrap();
    let got: Vec<(String, Vec<u64>)> = l
        .specs()
        .iter()
        .map(|s| (s.name.clone(), s.shape.clone()))
        .collect();
    let want: Vec<(String, Vec<u64>)> = vec![
        ("bn1.bias".into(), vec![2]),
        ("bn1.running_mean".into(), vec![2]),
        ("bn1.running_var".into(), vec![2]),
        ("bn1.weight".into(), vec![2]),
        ("conv1.bias".into(), vec![2]),
        ("conv1.weight".into(), vec![2, 1, 3, 3]),
        ("fc1.bias".into(), vec![3]),
        ("fc1.weight".into(), vec![3, 32]),
    ];
    assert_eq!(got, want);
    assert_eq!(l.offsets(), &[0, 2, 4, 6, 8, 10, 28, 31]);
    assert_eq!(l.num_params(), 31 + 96);

    let l2 = canonical_layout::<NB, _>(&m, false).unwrap();
    let names: Vec<&str> = l2.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "bn1.bias",
            "bn1.weight",
            "conv1.bias",
            "conv1.weight",
            "fc1.bias",
            "fc1.weight"
        ]
    );
}

fn random_flat(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

// REQ: DF-MAN-3
#[test]
fn round_trip_is_identity() {
    for include_buffers in [false, true] {
        let m = Small::<AB>::new(&dev());
        let (_, a) = export_canonical::<AB, _>(&m, include_buffers).unwrap();
        let m = import_canonical::<AB, _>(m, &a, include_buffers).unwrap();
        let (_, b) = export_canonical::<AB, _>(&m, include_buffers).unwrap();
        assert_eq!(a, b);

        let r = random_flat(a.len(), 7);
        let m = import_canonical::<AB, _>(m, &r, include_buffers).unwrap();
        let (_, c) = export_canonical::<AB, _>(&m, include_buffers).unwrap();
        assert_eq!(
            r.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        // The inner (valid) model exports the same values.
        let (_, d) = export_canonical::<NB, _>(&m.valid(), include_buffers).unwrap();
        assert_eq!(c, d);
    }
}

#[test]
fn import_keeps_param_ids_and_trainability() {
    let m = Small::<AB>::new(&dev());
    let ids_before = (m.fc1.weight.id, m.conv1.weight.id, m.bn1.gamma.id);
    let (_, flat) = export_canonical::<AB, _>(&m, true).unwrap();
    let r = random_flat(flat.len(), 3);
    let m = import_canonical::<AB, _>(m, &r, true).unwrap();
    assert_eq!(
        ids_before,
        (m.fc1.weight.id, m.conv1.weight.id, m.bn1.gamma.id)
    );
    assert!(m.fc1.weight.val().is_require_grad());
    assert!(m.conv1.weight.val().is_require_grad());
    assert!(m.bn1.gamma.val().is_require_grad());

    // One training step changes every trainable tensor.
    let layout = canonical_layout::<AB, _>(&m, false).unwrap();
    let (_, before) = export_canonical::<AB, _>(&m, false).unwrap();
    let m = train_step(m, 1);
    let (_, after) = export_canonical::<AB, _>(&m, false).unwrap();
    for (s, &off) in layout.specs().iter().zip(layout.offsets()) {
        let n = s.numel() as usize;
        assert_ne!(
            before[off..off + n],
            after[off..off + n],
            "{} did not change",
            s.name
        );
    }
}

#[test]
fn pending_running_stats_are_flushed_on_export_and_import() {
    let m = Small::<AB>::new(&dev());
    let m = train_step(m, 2); // leaves a pending running-stat update
    let (l, a) = export_with_layout::<AB, _>(&m, true).unwrap();
    let (off, _) = l.get("bn1.running_mean").unwrap();
    assert_ne!(&a[off..off + 2], &[0.0, 0.0], "stats were not flushed");
    let (_, v) = export_canonical::<NB, _>(&m.valid(), true).unwrap();
    assert_eq!(a, v);

    // An import after a pending update must not be overwritten by it.
    let m = train_step(m, 3);
    let target = random_flat(a.len(), 11);
    let m = import_canonical::<AB, _>(m, &target, true).unwrap();
    let (_, b) = export_canonical::<NB, _>(&m.valid(), true).unwrap();
    assert_eq!(b, target);
}

// REQ: DF-RCV-7
#[test]
fn apply_sparse_matches_dense_add_and_touches_only_affected_tensors() {
    let m = Small::<AB>::new(&dev());
    let (layout, base) = export_with_layout::<AB, _>(&m, true).unwrap();
    let (fc_w, _) = layout.get("fc1.weight").unwrap();
    let (rm, _) = layout.get("bn1.running_mean").unwrap();
    let indices: Vec<u32> = vec![rm as u32, (fc_w + 1) as u32, (fc_w + 40) as u32];
    let values = vec![0.5f32, -0.25, 3.0];
    let conv_w_before = m.conv1.weight.val();
    let (m, touched) = apply_sparse::<AB, _>(m, &layout, &indices, &values).unwrap();
    assert_eq!(touched, 2);
    let mut want = base.clone();
    for (&i, &v) in indices.iter().zip(&values) {
        want[i as usize] += v;
    }
    let (_, got) = export_canonical::<AB, _>(&m, true).unwrap();
    assert_eq!(got, want);
    // Untouched tensors are the very same tensors (no copy).
    assert!(
        m.conv1
            .weight
            .val()
            .equal(conv_w_before)
            .all()
            .into_scalar()
    );
    assert!(m.fc1.weight.val().is_require_grad());

    // Empty delta is a no-op.
    let (m, touched) = apply_sparse::<AB, _>(m, &layout, &[], &[]).unwrap();
    assert_eq!(touched, 0);
    let _ = m;
}

#[test]
fn typed_errors_on_bad_input() {
    let m = Small::<NB>::new(&dev());
    let layout = canonical_layout::<NB, _>(&m, false).unwrap();
    let n = layout.num_params();
    let err = import_canonical::<NB, _>(m.clone(), &vec![0.0; n - 1], false).unwrap_err();
    assert_eq!(
        err,
        BurnMapError::LengthMismatch {
            expected: n,
            got: n - 1
        }
    );
    let e = apply_sparse::<NB, _>(m.clone(), &layout, &[n as u32], &[1.0]).unwrap_err();
    assert!(matches!(e, BurnMapError::IndexOutOfRange { .. }));
    let e = apply_sparse::<NB, _>(m.clone(), &layout, &[3, 3], &[1.0, 1.0]).unwrap_err();
    assert_eq!(e, BurnMapError::UnsortedIndices { position: 1 });
    let e = apply_sparse::<NB, _>(m.clone(), &layout, &[1], &[]).unwrap_err();
    assert!(matches!(e, BurnMapError::SparseLengthMismatch { .. }));

    // A layout of another model is refused.
    let with_buffers = canonical_layout::<NB, _>(&m, true).unwrap();
    let e = layout.check_against(with_buffers.specs()).unwrap_err();
    assert_eq!(e, BurnMapError::MissingTensor("bn1.running_mean".into()));
    let mut wrong: Vec<TensorSpec> = layout.specs().to_vec();
    wrong[5].shape = vec![32, 3];
    let e = layout.check_against(&wrong).unwrap_err();
    assert!(matches!(e, BurnMapError::ShapeMismatch { .. }));
    let e = layout.check_against(&wrong[..4]).unwrap_err();
    assert!(matches!(e, BurnMapError::UnexpectedTensor(_)));
    let other = CanonicalLayout::new(wrong, false).unwrap();
    let e = import_with_layout::<NB, _>(m, &other, &vec![0.0; n]).unwrap_err();
    assert!(matches!(e, BurnMapError::ShapeMismatch { .. }));
}

#[derive(Module, Debug)]
struct WithLayerNorm<B: Backend> {
    fc: Linear<B>,
    norm: burn::nn::LayerNorm<B>,
}

#[derive(Module, Debug)]
struct WithOwnParam<B: Backend> {
    blocks: Vec<Linear<B>>,
    scale: Param<Tensor<B, 1>>,
}

#[derive(Module, Debug)]
struct Supported<B: Backend> {
    emb: burn::nn::Embedding<B>,
    conv: burn::nn::conv::Conv1d<B>,
    blocks: Vec<Linear<B>>,
    head: Option<Linear<B>>,
}

// REQ: DF-MAN-12
#[test]
fn modules_without_a_known_pytorch_mapping_are_refused_not_guessed() {
    let d = dev();
    // A LayerNorm holds gamma / beta: mapping them by their Burn names would guess.
    let m = WithLayerNorm::<NB> {
        fc: LinearConfig::new(3, 4).init(&d),
        norm: burn::nn::LayerNormConfig::new(4).init(&d),
    };
    let expected = BurnMapError::Unmappable {
        path: "norm.gamma".into(),
        container: "LayerNorm".into(),
    };
    // REQ: DF-MAN-12 -- a typed configuration error naming the tensor, for every entry point
    assert_eq!(canonical_layout::<NB, _>(&m, false).unwrap_err(), expected);
    assert_eq!(export_canonical::<NB, _>(&m, true).unwrap_err(), expected);
    assert_eq!(
        import_canonical::<NB, _>(m.clone(), &[0.0; 32], false).unwrap_err(),
        expected
    );
    let e = BurnStore::<NB, _>::new(m, false).unwrap_err();
    assert_eq!(e, expected);
    assert!(e.to_string().contains("norm.gamma"), "{e}");

    // A Param held directly by the user's struct: its PyTorch counterpart is unknown.
    let m = WithOwnParam::<NB> {
        blocks: vec![LinearConfig::new(2, 2).init(&d)],
        scale: Param::from_tensor(Tensor::ones([2], &d)),
    };
    // REQ: DF-MAN-12
    assert_eq!(
        canonical_layout::<NB, _>(&m, false).unwrap_err(),
        BurnMapError::Unmappable {
            path: "scale".into(),
            container: "WithOwnParam".into(),
        }
    );

    // Known modules still map, also inside a Vec (PyTorch ModuleList names) and an Option.
    let m = Supported::<NB> {
        emb: burn::nn::EmbeddingConfig::new(5, 3).init(&d),
        conv: burn::nn::conv::Conv1dConfig::new(3, 2, 2).init(&d),
        blocks: vec![
            LinearConfig::new(2, 4).init(&d),
            LinearConfig::new(4, 2).init(&d),
        ],
        head: Some(LinearConfig::new(2, 1).with_bias(false).init(&d)),
    };
    let layout = canonical_layout::<NB, _>(&m, true).unwrap();
    let got: Vec<(String, Vec<u64>)> = layout
        .specs()
        .iter()
        .map(|s| (s.name.clone(), s.shape.clone()))
        .collect();
    let want: Vec<(String, Vec<u64>)> = [
        ("blocks.0.bias", vec![4]),
        ("blocks.0.weight", vec![4, 2]),
        ("blocks.1.bias", vec![2]),
        ("blocks.1.weight", vec![2, 4]),
        ("conv.bias", vec![2]),
        ("conv.weight", vec![2, 3, 2]),
        ("emb.weight", vec![5, 3]),
        ("head.weight", vec![1, 2]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_owned(), s))
    .collect();
    assert_eq!(got, want);
    let (_, flat) = export_canonical::<NB, _>(&m, false).unwrap();
    let back = import_canonical::<NB, _>(m, &flat, false).unwrap();
    assert_eq!(export_canonical::<NB, _>(&back, false).unwrap().1, flat);
}

// REQ: DF-GEN-244
// REQ: DF-RCV-245
#[test]
fn store_names_its_running_statistics_and_clamps_a_running_variance_after_apply() {
    use df_fabric::store::WeightStore;
    let mut store = BurnStore::<NB, _>::new(Small::<NB>::new(&dev()), true).unwrap();
    assert_eq!(
        store.running_stats(),
        vec!["bn1.running_mean".to_owned(), "bn1.running_var".to_owned()]
    );
    let m = store.manifest().clone();
    let mean = m.offset_of("bn1.running_mean").unwrap() as u32;
    let var = m.offset_of("bn1.running_var").unwrap() as u32;
    let before = store.gather().unwrap();
    let (idx, vals) = ([mean, mean + 1, var, var + 1], [-5.0f32, 2.0, -5.0, 0.5]);
    store.apply(&idx, &vals).unwrap();
    let got = store.gather().unwrap();
    assert_eq!(got[mean as usize], before[mean as usize] - 5.0); // a mean may be negative
    assert_eq!(got[var as usize], 0.0); // 1 - 5 would be a negative variance
    assert_eq!(got[var as usize + 1], before[var as usize + 1] + 0.5);
    for (i, (&g, &b)) in got.iter().zip(&before).enumerate() {
        if !idx.contains(&(i as u32)) {
            assert_eq!(g.to_bits(), b.to_bits(), "index {i} changed");
        }
    }
    // off: DF-RCV-7 exactly
    let mut raw = BurnStore::<NB, _>::new(Small::<NB>::new(&dev()), true).unwrap();
    raw.set_clamp_running_var(false);
    raw.apply(&idx, &vals).unwrap();
    assert_eq!(raw.gather().unwrap()[var as usize], 1.0 - 5.0);
    // without include_buffers there are no running statistics
    let plain = BurnStore::<NB, _>::new(Small::<NB>::new(&dev()), false).unwrap();
    assert!(plain.running_stats().is_empty());
}
