//! The weight-store seam: what a framework binding provides so that one [`crate::Fabric`] can drive
//! its weights (the mirror of Python's `delta_fabric.store.WeightStore`).
//!
//! Every operation works on the manifest's canonical flat view (DF-MAN-3: tensors in canonical order,
//! each flattened row-major, `f32`). A store translates between that view and the framework's own
//! storage (names, shapes, transposes).

use df_core::Manifest;

/// Typed errors of a store. A failing operation leaves the weights unchanged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// A flat vector of the wrong length.
    #[error("flat vector has {got} values, the manifest needs {expected}")]
    LengthMismatch { expected: usize, got: usize },
    /// `indices` and `values` differ in length.
    #[error("{indices} indices but {values} values")]
    SparseLengthMismatch { indices: usize, values: usize },
    /// An index `>= N`.
    #[error("index {index} out of range (N = {n})")]
    IndexOutOfRange { index: u64, n: usize },
    /// Indices not strictly ascending.
    #[error("indices not strictly ascending at position {position}")]
    UnsortedIndices { position: usize },
    /// A value that must be finite is not (DF-ZEN-12 for loaded snapshots).
    #[error("value at flat index {index} is not finite")]
    NonFinite { index: usize },
    /// The framework refused the operation.
    #[error("{0}")]
    Backend(String),
}

/// Checks a sparse update against `n`: equal lengths, strictly ascending indices, all `< n`.
pub fn check_sparse(indices: &[u32], values: &[f32], n: usize) -> Result<(), StoreError> {
    if indices.len() != values.len() {
        return Err(StoreError::SparseLengthMismatch {
            indices: indices.len(),
            values: values.len(),
        });
    }
    if let Some(p) = indices.windows(2).position(|w| w[1] <= w[0]) {
        return Err(StoreError::UnsortedIndices { position: p + 1 });
    }
    match indices.last() {
        Some(&last) if last as usize >= n => Err(StoreError::IndexOutOfRange {
            index: u64::from(last),
            n,
        }),
        _ => Ok(()),
    }
}

/// Checks that `flat` has `n` values, all finite.
pub fn check_full(flat: &[f32], n: usize) -> Result<(), StoreError> {
    if flat.len() != n {
        return Err(StoreError::LengthMismatch {
            expected: n,
            got: flat.len(),
        });
    }
    match flat.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(StoreError::NonFinite { index }),
        None => Ok(()),
    }
}

/// The weights of one node, seen through the canonical flat view.
///
/// * [`WeightStore::gather`] is called on sync steps (O(N));
/// * [`WeightStore::apply`] on every step that received something (O(k) for a good store);
/// * [`WeightStore::load`] once, to bootstrap from a peer's snapshot.
pub trait WeightStore {
    /// The manifest (names, shapes, fingerprint) of the synchronised tensors.
    fn manifest(&self) -> &Manifest;

    /// Framework name reported to peers (`"burn"`, `"vec"`, ...).
    fn framework(&self) -> &str;

    /// The whole canonical flat vector (N values).
    fn gather(&self) -> Result<Vec<f32>, StoreError>;

    /// The values at `indices` (strictly ascending, `< N`). The default reads the whole vector.
    fn gather_indices(&self, indices: &[u32]) -> Result<Vec<f32>, StoreError> {
        let n = self.num_params();
        check_sparse(indices, &vec![0.0; indices.len()], n)?;
        let all = self.gather()?;
        Ok(indices.iter().map(|&i| all[i as usize]).collect())
    }

    /// `active[i] = fl32(active[i] + values[j])` for `i = indices[j]` (DF-RCV-7); indices strictly
    /// ascending and `< N`, else a typed error and no change.
    fn apply(&mut self, indices: &[u32], values: &[f32]) -> Result<(), StoreError>;

    /// Overwrites every synchronised weight with `flat` (N values, canonical order).
    fn load(&mut self, flat: &[f32]) -> Result<(), StoreError>;

    /// The canonical names of the synchronised tensors that are running statistics (updated by
    /// the forward pass, not by the optimizer: BatchNorm running mean and variance). A node that
    /// holds its residual aside exempts them (DF-GEN-244, 1.1). The default: none.
    fn running_stats(&self) -> Vec<String> {
        Vec::new()
    }

    /// N.
    fn num_params(&self) -> usize {
        usize::try_from(self.manifest().num_params()).unwrap_or(usize::MAX)
    }
}

/// The simplest store: the canonical flat vector itself (the mirror of Python's `NumpyStore`).
#[derive(Debug, Clone, PartialEq)]
pub struct VecStore {
    manifest: Manifest,
    values: Vec<f32>,
}

impl VecStore {
    /// A store of `manifest` holding `values` (N finite values).
    pub fn new(manifest: Manifest, values: Vec<f32>) -> Result<Self, StoreError> {
        let n = usize::try_from(manifest.num_params()).unwrap_or(usize::MAX);
        check_full(&values, n)?;
        Ok(VecStore { manifest, values })
    }

    /// The values.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The values, writable (a training step).
    pub fn values_mut(&mut self) -> &mut [f32] {
        &mut self.values
    }
}

impl WeightStore for VecStore {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn framework(&self) -> &str {
        "vec"
    }

    fn gather(&self) -> Result<Vec<f32>, StoreError> {
        Ok(self.values.clone())
    }

    fn gather_indices(&self, indices: &[u32]) -> Result<Vec<f32>, StoreError> {
        check_sparse(indices, &vec![0.0; indices.len()], self.values.len())?;
        Ok(indices.iter().map(|&i| self.values[i as usize]).collect())
    }

    fn apply(&mut self, indices: &[u32], values: &[f32]) -> Result<(), StoreError> {
        check_sparse(indices, values, self.values.len())?;
        for (&i, &v) in indices.iter().zip(values) {
            self.values[i as usize] += v;
        }
        Ok(())
    }

    fn load(&mut self, flat: &[f32]) -> Result<(), StoreError> {
        check_full(flat, self.values.len())?;
        self.values.copy_from_slice(flat);
        Ok(())
    }
}
