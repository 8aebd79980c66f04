//! Canonical flat view of Burn modules for DeltaFabric (DF-MAN-1..6).
//!
//! DeltaFabric exchanges sparse deltas over one flat `f32` vector whose layout is defined by
//! PyTorch `state_dict` keys. This crate maps a Burn module tree onto that layout and back:
//!
//! * canonical names are the module field paths joined by `.` (`fc1.weight`, `bn1.running_mean`);
//! * `Linear.weight` is stored by Burn as `[d_input, d_output]` and exported transposed to PyTorch's
//!   `[out, in]`;
//! * `BatchNorm.gamma` / `beta` are renamed `weight` / `bias`;
//! * `BatchNorm.running_mean` / `running_var` are included only with `include_buffers`
//!   (pending running-stat updates are flushed first, the equivalent of reading `model.valid()`);
//! * `Conv1d` / `Conv2d` / `Conv3d` and `Embedding` parameters keep their names and layout (Burn's
//!   equal PyTorch's);
//! * any other parameter (a `LayerNorm`'s `gamma`, a `Param` held directly by a user struct, a
//!   parameter inside a `Vec` or tuple, ...) is refused with [`BurnMapError::Unmappable`] naming its
//!   path: the adapter cannot know the PyTorch name and shape, and does not guess (DF-MAN-12);
//! * tensors are sorted by the UTF-8 bytes of their names and flattened row-major (DF-MAN-2/3).
//!
//! Writing back ([`import_canonical`], [`apply_sparse`]) keeps each parameter's [`ParamId`] and its
//! `require_grad` flag, so a model on an `Autodiff` backend stays trainable and optimizer state
//! (keyed by `ParamId`) carries over.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

/// Typed errors of the canonical mapping. No function of this crate panics on bad input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BurnMapError {
    #[error("flat vector has {got} values, the canonical layout needs {expected}")]
    LengthMismatch { expected: usize, got: usize },
    #[error("tensor {name}: expected shape {expected:?}, got {got:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<u64>,
        got: Vec<u64>,
    },
    #[error("tensor {0} is in the manifest but not in the model")]
    MissingTensor(String),
    #[error("tensor {0} is in the model but not in the manifest")]
    UnexpectedTensor(String),
    #[error("duplicate canonical tensor name {0}")]
    DuplicateName(String),
    #[error("{indices} indices but {values} values")]
    SparseLengthMismatch { indices: usize, values: usize },
    #[error("index {index} out of range (N = {n})")]
    IndexOutOfRange { index: u64, n: usize },
    #[error("indices not strictly ascending at position {position}")]
    UnsortedIndices { position: usize },
    #[error("tensor {name}: cannot read values: {reason}")]
    Data { name: String, reason: String },
    /// A parameter whose canonical PyTorch name and shape the adapter cannot determine (DF-MAN-12):
    /// the model is refused rather than mapped by a guess.
    #[error(
        "tensor {path} (field of {container}) has no known canonical PyTorch name (DF-MAN-12); \
         supported modules: {SUPPORTED_MODULES}"
    )]
    Unmappable { path: String, container: String },
}

/// The Burn modules whose parameters the adapter maps to PyTorch names (DF-MAN-6, -8, -9, -10).
pub const SUPPORTED_MODULES: &str = "Linear, Conv1d, Conv2d, Conv3d, BatchNorm, Embedding";

/// One tensor of the canonical layout: PyTorch name and PyTorch shape (df-core's manifest entry).
pub use df_core::TensorSpec;

/// The canonical layout of a model: tensors in canonical order with their flat offsets.
#[derive(Debug, Clone, PartialEq)]
pub struct CanonicalLayout {
    specs: Vec<TensorSpec>,
    offsets: Vec<usize>,
    by_name: HashMap<String, usize>,
    total: usize,
    include_buffers: bool,
}

impl CanonicalLayout {
    /// Builds a layout from tensor specs (any order); names must be unique.
    pub fn new(mut specs: Vec<TensorSpec>, include_buffers: bool) -> Result<Self, BurnMapError> {
        specs.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let mut offsets = Vec::with_capacity(specs.len());
        let mut by_name = HashMap::with_capacity(specs.len());
        let mut total = 0usize;
        for (i, s) in specs.iter().enumerate() {
            if by_name.insert(s.name.clone(), i).is_some() {
                return Err(BurnMapError::DuplicateName(s.name.clone()));
            }
            offsets.push(total);
            total += s.numel() as usize;
        }
        Ok(Self {
            specs,
            offsets,
            by_name,
            total,
            include_buffers,
        })
    }

    /// Tensors in canonical order.
    pub fn specs(&self) -> &[TensorSpec] {
        &self.specs
    }

    /// Flat offset of each tensor, in canonical order.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Total element count N.
    pub fn num_params(&self) -> usize {
        self.total
    }

    /// Whether BatchNorm running statistics are part of the layout.
    pub fn include_buffers(&self) -> bool {
        self.include_buffers
    }

    /// `(offset, spec)` of a tensor by canonical name.
    pub fn get(&self, name: &str) -> Option<(usize, &TensorSpec)> {
        self.by_name
            .get(name)
            .map(|&i| (self.offsets[i], &self.specs[i]))
    }

    /// Canonical tensor position holding flat index `index` (index must be < N).
    fn tensor_of(&self, index: usize) -> usize {
        // offsets is ascending; the last offset <= index owns it (zero-sized tensors are skipped
        // naturally because their successor has the same offset).
        self.offsets.partition_point(|&o| o <= index) - 1
    }

    /// Checks that `expected` (e.g. a manifest received from another framework) lists exactly the
    /// tensors of this layout with the same shapes.
    pub fn check_against(&self, expected: &[TensorSpec]) -> Result<(), BurnMapError> {
        let mut seen = std::collections::HashSet::new();
        for e in expected {
            if !seen.insert(e.name.as_str()) {
                return Err(BurnMapError::DuplicateName(e.name.clone()));
            }
            match self.get(&e.name) {
                None => return Err(BurnMapError::MissingTensor(e.name.clone())),
                Some((_, s)) if s.shape != e.shape => {
                    return Err(BurnMapError::ShapeMismatch {
                        name: e.name.clone(),
                        expected: e.shape.clone(),
                        got: s.shape.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        if let Some(extra) = self.specs.iter().find(|s| !seen.contains(s.name.as_str())) {
            return Err(BurnMapError::UnexpectedTensor(extra.name.clone()));
        }
        Ok(())
    }
}

/// How a Burn leaf maps to its canonical tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Leaf {
    /// Not part of the layout (running stats without `include_buffers`).
    Skip,
    /// Canonical name; `transpose` for Linear weights (Burn `[in,out]` <-> canonical `[out,in]`).
    Tensor { name: String, transpose: bool },
}

/// Path stack shared by the visitor and the mappers.
#[derive(Debug, Default)]
struct PathStack {
    names: Vec<String>,
    containers: Vec<String>,
}

impl PathStack {
    fn enter(&mut self, name: &str, container: &str) {
        self.names.push(name.to_owned());
        self.containers.push(container.to_owned());
    }

    fn exit(&mut self) {
        self.names.pop();
        self.containers.pop();
    }

    /// Canonical mapping of the current leaf (DF-MAN-6), or [`BurnMapError::Unmappable`] for a
    /// parameter of a module this adapter does not know (DF-MAN-12).
    fn leaf(&self, include_buffers: bool) -> Result<Leaf, BurnMapError> {
        let parent = self.containers.last().map_or("", String::as_str);
        let leaf = self.names.last().map_or("", String::as_str);
        let mut transpose = false;
        let renamed = match (parent, leaf) {
            ("Struct:Linear", "weight") => {
                transpose = true;
                None
            }
            ("Struct:Linear", "bias")
            | ("Struct:Conv1d" | "Struct:Conv2d" | "Struct:Conv3d", "weight" | "bias")
            | ("Struct:Embedding", "weight") => None,
            ("Struct:BatchNorm", "gamma") => Some("weight"),
            ("Struct:BatchNorm", "beta") => Some("bias"),
            ("Struct:BatchNorm", "running_mean" | "running_var") if !include_buffers => {
                return Ok(Leaf::Skip);
            }
            ("Struct:BatchNorm", "running_mean" | "running_var") => None,
            _ => {
                return Err(BurnMapError::Unmappable {
                    path: self.names.join("."),
                    container: parent.strip_prefix("Struct:").unwrap_or(parent).to_owned(),
                });
            }
        };
        let name = match (renamed, self.names.split_last()) {
            (Some(r), Some((_, head))) => {
                let mut parts: Vec<&str> = head.iter().map(String::as_str).collect();
                parts.push(r);
                parts.join(".")
            }
            _ => self.names.join("."),
        };
        Ok(Leaf::Tensor { name, transpose })
    }
}

/// Transposes a row-major `[rows, cols]` matrix.
fn transpose2(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    for r in 0..rows {
        for c in 0..cols {
            dst[c * rows + r] = src[r * cols + c];
        }
    }
}

/// Canonical shape of a Burn tensor shape.
fn canonical_shape(burn_shape: &[usize], transpose: bool) -> Vec<u64> {
    if transpose && burn_shape.len() == 2 {
        vec![burn_shape[1] as u64, burn_shape[0] as u64]
    } else {
        burn_shape.iter().map(|&d| d as u64).collect()
    }
}

fn tensor_values<B: Backend, const D: usize>(
    t: Tensor<B, D>,
    name: &str,
) -> Result<Vec<f32>, BurnMapError> {
    t.into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .map_err(|e| BurnMapError::Data {
            name: name.to_owned(),
            reason: format!("{e:?}"),
        })
}

/// Flushes pending BatchNorm running-stat updates (what `model.valid()` does) without
/// requiring an autodiff backend: `into_record` syncs every `RunningState`, whose storage is shared
/// between clones of the module.
fn flush_running_stats<B: Backend, M: Module<B>>(model: &M) {
    drop(model.clone().into_record());
}

struct Collector {
    path: PathStack,
    include_buffers: bool,
    with_values: bool,
    specs: Vec<TensorSpec>,
    values: HashMap<String, Vec<f32>>,
    error: Option<BurnMapError>,
}

impl<B: Backend> ModuleVisitor<B> for Collector {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.error.is_some() {
            return;
        }
        let (name, transpose) = match self.path.leaf(self.include_buffers) {
            Ok(Leaf::Tensor { name, transpose }) => (name, transpose),
            Ok(Leaf::Skip) => return,
            Err(e) => {
                self.error = Some(e);
                return;
            }
        };
        let burn_shape = param.lazy_shape().to_vec();
        let transpose = transpose && burn_shape.len() == 2;
        let shape = canonical_shape(&burn_shape, transpose);
        if self.with_values {
            let raw = match tensor_values(param.val(), &name) {
                Ok(v) => v,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            };
            let vals = if transpose {
                let mut out = vec![0.0f32; raw.len()];
                transpose2(&raw, burn_shape[0], burn_shape[1], &mut out);
                out
            } else {
                raw
            };
            self.values.insert(name.clone(), vals);
        }
        self.specs.push(TensorSpec { name, shape });
    }
}

fn collect<B: Backend, M: Module<B>>(
    model: &M,
    include_buffers: bool,
    with_values: bool,
) -> Result<(CanonicalLayout, HashMap<String, Vec<f32>>), BurnMapError> {
    let mut c = Collector {
        path: PathStack::default(),
        include_buffers,
        with_values,
        specs: Vec::new(),
        values: HashMap::new(),
        error: None,
    };
    model.visit(&mut c);
    if let Some(e) = c.error {
        return Err(e);
    }
    Ok((CanonicalLayout::new(c.specs, include_buffers)?, c.values))
}

/// Canonical layout (names, shapes, offsets) of a model, without reading any value.
pub fn canonical_layout<B: Backend, M: Module<B>>(
    model: &M,
    include_buffers: bool,
) -> Result<CanonicalLayout, BurnMapError> {
    collect::<B, M>(model, include_buffers, false).map(|(l, _)| l)
}

/// Exports a model as `(canonical specs in canonical order, flat row-major f32 values)`.
///
/// Works on any backend; running statistics are flushed first, so an `Autodiff` model gives the
/// same result as its `valid()` inner model.
pub fn export_canonical<B: Backend, M: Module<B>>(
    model: &M,
    include_buffers: bool,
) -> Result<(Vec<TensorSpec>, Vec<f32>), BurnMapError> {
    let (layout, flat) = export_with_layout::<B, M>(model, include_buffers)?;
    Ok((layout.specs, flat))
}

/// Like [`export_canonical`], returning the full [`CanonicalLayout`].
pub fn export_with_layout<B: Backend, M: Module<B>>(
    model: &M,
    include_buffers: bool,
) -> Result<(CanonicalLayout, Vec<f32>), BurnMapError> {
    if include_buffers {
        flush_running_stats::<B, M>(model);
    }
    let (layout, mut values) = collect::<B, M>(model, include_buffers, true)?;
    let mut flat = Vec::with_capacity(layout.total);
    for s in &layout.specs {
        let v = values
            .remove(&s.name)
            .ok_or_else(|| BurnMapError::MissingTensor(s.name.clone()))?;
        flat.extend_from_slice(&v);
    }
    Ok((layout, flat))
}

/// What the writer does with the slice of a touched tensor.
enum Write<'a> {
    /// Replace the whole tensor by `flat[offset..offset+numel]` (canonical layout).
    Full(&'a [f32]),
    /// Add `values[j]` at canonical flat index `indices[j]`; `ranges[name]` is the sub-range of
    /// `indices` inside that tensor.
    SparseAdd {
        indices: &'a [u32],
        values: &'a [f32],
        ranges: HashMap<String, (usize, usize)>,
    },
}

struct Writer<'a> {
    path: PathStack,
    layout: &'a CanonicalLayout,
    write: Write<'a>,
    touched: usize,
}

impl<B: Backend> ModuleMapper<B> for Writer<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        // Validated before mapping (an unmappable leaf was refused by `check_model_layout`).
        let Ok(Leaf::Tensor { name, transpose }) = self.path.leaf(self.layout.include_buffers)
        else {
            return param;
        };
        // Validated before mapping: every leaf is in the layout with the matching shape.
        let Some((offset, spec)) = self.layout.get(&name) else {
            return param;
        };
        let burn_shape = param.lazy_shape().to_vec();
        let transpose = transpose && burn_shape.len() == 2;
        let numel = spec.numel() as usize;
        let canonical: Vec<f32> = match &self.write {
            Write::Full(flat) => flat[offset..offset + numel].to_vec(),
            Write::SparseAdd {
                indices,
                values,
                ranges,
            } => {
                let Some(&(lo, hi)) = ranges.get(&name) else {
                    return param; // untouched: not copied
                };
                let Ok(raw) = tensor_values(param.val(), &name) else {
                    return param; // unreachable on f32 backends; leave unchanged
                };
                let mut cur = if transpose {
                    let mut out = vec![0.0f32; raw.len()];
                    transpose2(&raw, burn_shape[0], burn_shape[1], &mut out);
                    out
                } else {
                    raw
                };
                for j in lo..hi {
                    let local = indices[j] as usize - offset;
                    cur[local] += values[j];
                }
                cur
            }
        };
        let burn_values = if transpose {
            // canonical [out, in] -> Burn [in, out]
            let mut out = vec![0.0f32; numel];
            transpose2(&canonical, burn_shape[1], burn_shape[0], &mut out);
            out
        } else {
            canonical
        };
        self.touched += 1;
        let device = param.lazy_device();
        let tensor = Tensor::<B, D>::from_data(TensorData::new(burn_values, burn_shape), &device);
        let id: ParamId = param.id;
        param.transform_for_load(tensor, id)
    }
}

/// Writes a full canonical flat vector into `model` (DF-MAN-3 layout).
///
/// Keeps every `ParamId` and `require_grad` flag, so an `Autodiff` model stays trainable and its
/// optimizer state stays attached. Running statistics are written only with `include_buffers`.
pub fn import_canonical<B: Backend, M: Module<B>>(
    model: M,
    flat: &[f32],
    include_buffers: bool,
) -> Result<M, BurnMapError> {
    let layout = canonical_layout::<B, M>(&model, include_buffers)?;
    import_with_layout(model, &layout, flat)
}

/// [`import_canonical`] with a layout computed earlier by [`canonical_layout`] for this model
/// structure (saves one tree walk).
pub fn import_with_layout<B: Backend, M: Module<B>>(
    model: M,
    layout: &CanonicalLayout,
    flat: &[f32],
) -> Result<M, BurnMapError> {
    check_model_layout::<B, M>(&model, layout)?;
    if flat.len() != layout.total {
        return Err(BurnMapError::LengthMismatch {
            expected: layout.total,
            got: flat.len(),
        });
    }
    if layout.include_buffers {
        // Pending updates would otherwise overwrite the imported statistics on the next forward.
        flush_running_stats::<B, M>(&model);
    }
    let mut w = Writer {
        path: PathStack::default(),
        layout,
        write: Write::Full(flat),
        touched: 0,
    };
    Ok(model.map(&mut w))
}

fn check_model_layout<B: Backend, M: Module<B>>(
    model: &M,
    layout: &CanonicalLayout,
) -> Result<(), BurnMapError> {
    let own = canonical_layout::<B, M>(model, layout.include_buffers)?;
    layout.check_against(&own.specs)
}

/// Adds a sparse canonical delta to `model`: `active[i] = fl32(active[i] + values[j])` for
/// `i = indices[j]` (DF-RCV-7 applied to a Burn model).
///
/// `indices` must be strictly ascending and `< N`. Only the tensors holding at least one index are
/// rebuilt; every other tensor is left untouched (not read, not copied). Returns the model and the
/// number of tensors rewritten.
pub fn apply_sparse<B: Backend, M: Module<B>>(
    model: M,
    layout: &CanonicalLayout,
    indices: &[u32],
    values: &[f32],
) -> Result<(M, usize), BurnMapError> {
    if indices.len() != values.len() {
        return Err(BurnMapError::SparseLengthMismatch {
            indices: indices.len(),
            values: values.len(),
        });
    }
    for (j, w) in indices.windows(2).enumerate() {
        if w[1] <= w[0] {
            return Err(BurnMapError::UnsortedIndices { position: j + 1 });
        }
    }
    if let Some(&last) = indices.last()
        && last as usize >= layout.total
    {
        return Err(BurnMapError::IndexOutOfRange {
            index: u64::from(last),
            n: layout.total,
        });
    }
    if indices.is_empty() {
        return Ok((model, 0));
    }
    check_model_layout::<B, M>(&model, layout)?;
    // Group the ascending indices by tensor.
    let mut ranges: HashMap<String, (usize, usize)> = HashMap::new();
    let mut j = 0;
    while j < indices.len() {
        let t = layout.tensor_of(indices[j] as usize);
        let end = layout.offsets[t] + layout.specs[t].numel() as usize;
        let hi = j + indices[j..].partition_point(|&i| (i as usize) < end);
        ranges.insert(layout.specs[t].name.clone(), (j, hi));
        j = hi;
    }
    if layout.include_buffers
        && ranges
            .keys()
            .any(|n| n.ends_with(".running_mean") || n.ends_with(".running_var"))
    {
        flush_running_stats::<B, M>(&model);
    }
    let mut w = Writer {
        path: PathStack::default(),
        layout,
        write: Write::SparseAdd {
            indices,
            values,
            ranges,
        },
        touched: 0,
    };
    let model = model.map(&mut w);
    Ok((model, w.touched))
}

mod store;
pub use store::{BurnStore, layout_manifest};

#[cfg(test)]
mod tests;
