//! The demo's digits CNN, identical to `delta_fabric.demo.model.DigitsCNN`:
//! `conv1 = Conv2d(1,16,3,padding=1)`; `bn1 = BatchNorm2d(16)`; relu; max-pool 2x2 (8x8 -> 4x4);
//! flatten (256); `fc1 = Linear(256,64)`; relu; `fc2 = Linear(64,10)`.
//!
//! Canonical names (PyTorch `state_dict` keys, DF-MAN-6): `bn1.bias [16]`, `bn1.running_mean [16]`,
//! `bn1.running_var [16]`, `bn1.weight [16]`, `conv1.bias [16]`, `conv1.weight [16,1,3,3]`,
//! `fc1.bias [64]`, `fc1.weight [64,256]`, `fc2.bias [10]`, `fc2.weight [10,64]` (running statistics
//! only with `include_buffers`).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// The digits CNN.
#[derive(Module, Debug)]
pub struct DigitsCnn<B: Backend> {
    pub conv1: Conv2d<B>,
    pub bn1: BatchNorm<B>,
    pub pool: MaxPool2d,
    pub act: Relu,
    pub fc1: Linear<B>,
    pub fc2: Linear<B>,
}

impl<B: Backend> DigitsCnn<B> {
    /// A freshly initialised model (Burn's default initialisers: Kaiming-uniform like PyTorch;
    /// BatchNorm momentum 0.1, eps 1e-5 like PyTorch).
    pub fn new(device: &B::Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 16], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device),
            bn1: BatchNormConfig::new(16).init(device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            act: Relu::new(),
            fc1: LinearConfig::new(16 * 4 * 4, 64).init(device),
            fc2: LinearConfig::new(64, 10).init(device),
        }
    }

    /// Logits `[n, 10]` of images `[n, 1, 8, 8]`.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self
            .pool
            .forward(self.act.forward(self.bn1.forward(self.conv1.forward(x))));
        let [n, c, h, w] = x.dims();
        let x = self
            .act
            .forward(self.fc1.forward(x.reshape([n, c * h * w])));
        self.fc2.forward(x)
    }
}
