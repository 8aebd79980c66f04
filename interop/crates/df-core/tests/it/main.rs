//! The df-core integration tests (one binary): unit tests from the spec, a deterministic
//! mutation fuzz of the decoder, and every conformance vector of `conformance/vectors`.

mod compact;
mod config;
mod engine;
mod fuzz;
mod relay;
mod repair;
mod replay;
mod requirements;
mod requirements_per_impl;
mod selection;
mod signing;
mod snapshot;
mod vectors;
mod wire;

use df_core::{Manifest, OwnedEntry, OwnedPacket, TensorSpec, ValueEncoding};

/// A small deterministic PRNG (SplitMix64) for tests.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform f32 in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// The vector manifest: `layer.bias` [10], `layer.weight` [10, 9], `scale` [] (N = 101).
pub fn small_manifest() -> Manifest {
    Manifest::new([
        TensorSpec::new("layer.weight", &[10, 9]),
        TensorSpec::new("scale", &[]),
        TensorSpec::new("layer.bias", &[10]),
    ])
    .expect("valid manifest")
}

/// A valid packet with `entries` entries of `n` values each.
pub fn sample_packet(fp: [u8; 32], enc: ValueEncoding, entries: usize, n: u32) -> OwnedPacket {
    let mut p = OwnedPacket::new(0x0a0a_0000_0000_0001, 7, fp, enc);
    for j in 0..entries as u64 {
        p.entries.push(OwnedEntry {
            origin: 0x0b0b_0000_0000_0000 + j,
            incarnation: 3,
            seq: j + 1,
            hops: (j % 3) as u8,
            indices: (0..n).map(|i| i * 3 + j as u32).collect(),
            values: (0..n).map(|i| (i as f32 - 1.5) * 0.25).collect(),
            signature: None,
        });
    }
    p
}
