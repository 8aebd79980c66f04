//! [`BurnStore`]: the [`df_fabric::WeightStore`] of any Burn [`Module`], so that
//! `df_fabric::Fabric<BurnStore<B, M>, T>` synchronises a user's own model.
//!
//! Burn modules are values (an optimizer step consumes the module and returns the next one), so the
//! store owns the module and hands it out by reference for the forward pass; a training step goes
//! through [`BurnStore::update`]:
//!
//! ```ignore
//! let model = fabric.store().model();
//! let loss = loss_of(model.forward(x), y);
//! let grads = GradientsParams::from_grads(loss.backward(), model);
//! fabric.store_mut().update(|m| optim.step(lr, m, grads));
//! fabric.step()?;
//! ```

use std::marker::PhantomData;

use burn::module::Module;
use burn::tensor::backend::Backend;
use df_core::Manifest;
use df_fabric::store::{StoreError, WeightStore, check_full, check_sparse};

use crate::{
    BurnMapError, CanonicalLayout, apply_sparse, canonical_layout, export_with_layout,
    import_with_layout,
};

impl From<BurnMapError> for StoreError {
    fn from(e: BurnMapError) -> Self {
        match e {
            BurnMapError::LengthMismatch { expected, got } => {
                StoreError::LengthMismatch { expected, got }
            }
            BurnMapError::SparseLengthMismatch { indices, values } => {
                StoreError::SparseLengthMismatch { indices, values }
            }
            BurnMapError::IndexOutOfRange { index, n } => StoreError::IndexOutOfRange { index, n },
            BurnMapError::UnsortedIndices { position } => StoreError::UnsortedIndices { position },
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// The manifest of a canonical layout (DF-MAN).
pub fn layout_manifest(layout: &CanonicalLayout) -> Result<Manifest, BurnMapError> {
    Manifest::new(layout.specs().iter().cloned()).map_err(|e| BurnMapError::Data {
        name: "manifest".into(),
        reason: e.to_string(),
    })
}

/// A Burn module seen as a DeltaFabric weight store (canonical PyTorch `state_dict` layout, see the
/// crate documentation for the mapping rules).
#[derive(Debug)]
pub struct BurnStore<B: Backend, M: Module<B>> {
    model: M,
    layout: CanonicalLayout,
    manifest: Manifest,
    tensors_rebuilt: u64,
    /// Flat `[start, end)` ranges of the BatchNorm running variances clamped at >= 0 after
    /// `apply` (DF-RCV-245; empty when off).
    var_ranges: Vec<(usize, usize)>,
    _backend: PhantomData<B>,
}

impl<B: Backend, M: Module<B>> BurnStore<B, M> {
    /// Wraps `model`; `include_buffers`: BatchNorm running statistics are synchronised too.
    pub fn new(model: M, include_buffers: bool) -> Result<Self, BurnMapError> {
        let layout = canonical_layout::<B, M>(&model, include_buffers)?;
        let manifest = layout_manifest(&layout)?;
        let mut store = BurnStore {
            model,
            layout,
            manifest,
            tensors_rebuilt: 0,
            var_ranges: Vec::new(),
            _backend: PhantomData,
        };
        store.set_clamp_running_var(true);
        Ok(store)
    }

    /// Whether `apply` clamps the BatchNorm running variances at >= 0 (DF-RCV-245, default on):
    /// a framework step after DF-RCV-7's sum, as `TorchStore(clamp_running_var=True)` in Python.
    /// `load` writes values as they are.
    pub fn set_clamp_running_var(&mut self, on: bool) {
        self.var_ranges = if on {
            self.layout
                .specs()
                .iter()
                .zip(self.layout.offsets())
                .filter(|(s, _)| s.name.rsplit('.').next() == Some("running_var"))
                .map(|(s, &o)| (o, o + s.numel() as usize))
                .collect()
        } else {
            Vec::new()
        };
    }

    /// The module (forward passes, evaluation).
    pub fn model(&self) -> &M {
        &self.model
    }

    /// Replaces the module by `f(module)` (an optimizer step). `f` gets a clone (Burn modules
    /// share their tensors, so this is cheap); if `f` panics the store keeps the old module.
    pub fn update(&mut self, f: impl FnOnce(M) -> M) {
        self.model = f(self.model.clone());
    }

    /// Replaces the module by another one with the same canonical layout.
    pub fn set_model(&mut self, model: M) -> Result<(), BurnMapError> {
        let own = canonical_layout::<B, M>(&model, self.layout.include_buffers())?;
        self.layout.check_against(own.specs())?;
        self.model = model;
        Ok(())
    }

    /// The module, consuming the store.
    pub fn into_model(self) -> M {
        self.model
    }

    /// The canonical layout (names, shapes, offsets).
    pub fn layout(&self) -> &CanonicalLayout {
        &self.layout
    }

    /// Tensors rebuilt by sparse applies so far (only touched tensors are rebuilt).
    pub fn tensors_rebuilt(&self) -> u64 {
        self.tensors_rebuilt
    }
}

impl<B: Backend, M: Module<B>> WeightStore for BurnStore<B, M> {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn framework(&self) -> &str {
        "burn"
    }

    fn gather(&self) -> Result<Vec<f32>, StoreError> {
        let (_, flat) = export_with_layout::<B, M>(&self.model, self.layout.include_buffers())?;
        Ok(flat)
    }

    fn apply(&mut self, indices: &[u32], values: &[f32]) -> Result<(), StoreError> {
        check_sparse(indices, values, self.layout.num_params())?;
        let (m, touched) = apply_sparse::<B, M>(self.model.clone(), &self.layout, indices, values)?;
        self.model = m;
        self.tensors_rebuilt += touched as u64;
        if self.var_ranges.is_empty() {
            return Ok(());
        }
        // DF-RCV-245: a running variance below zero becomes +0 (v + (-v) is exactly +0)
        let in_var: Vec<u32> = indices
            .iter()
            .copied()
            .filter(|&i| {
                let i = i as usize;
                self.var_ranges.iter().any(|&(a, b)| a <= i && i < b)
            })
            .collect();
        if in_var.is_empty() {
            return Ok(());
        }
        let now = self.gather_indices(&in_var)?;
        let (idx, neg): (Vec<u32>, Vec<f32>) = in_var
            .iter()
            .zip(&now)
            .filter(|&(_, &v)| v < 0.0)
            .map(|(&i, &v)| (i, -v))
            .unzip();
        if !idx.is_empty() {
            let (m, touched) = apply_sparse::<B, M>(self.model.clone(), &self.layout, &idx, &neg)?;
            self.model = m;
            self.tensors_rebuilt += touched as u64;
        }
        Ok(())
    }

    fn load(&mut self, flat: &[f32]) -> Result<(), StoreError> {
        check_full(flat, self.layout.num_params())?;
        self.model = import_with_layout::<B, M>(self.model.clone(), &self.layout, flat)?;
        Ok(())
    }

    /// The BatchNorm running statistics of the layout (with `include_buffers`): the mapper only
    /// maps `running_mean` / `running_var` leaves of a `BatchNorm`, so the last path segment
    /// names them (DF-GEN-244).
    fn running_stats(&self) -> Vec<String> {
        self.layout
            .specs()
            .iter()
            .filter(|s| {
                let last = s.name.rsplit('.').next().unwrap_or("");
                last == "running_mean" || last == "running_var"
            })
            .map(|s| s.name.clone())
            .collect()
    }
}
