//! The data files handed over by the Python demo (`delta_fabric.demo.data.write_partition`).
//!
//! A data directory holds (all little-endian, no header):
//!
//! | file | content |
//! |---|---|
//! | `train_x.f32` | f32 `[n_train, 1, 8, 8]`, row-major, pixel / 16 (values in `[0, 1]`) |
//! | `train_y.u8` | u8 `[n_train]`, labels `0..=9` |
//! | `test_x.f32` | f32 `[n_test, 1, 8, 8]` |
//! | `test_y.u8` | u8 `[n_test]` |
//! | `meta.json` | `{"n_train": int, "n_test": int, "classes": [labels present in the training part], ...}` (other keys ignored) |
//!
//! [`read_dataset`] checks every size against `meta.json`, labels `< 10` and finite pixels.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::error::NodeError;

/// Pixels per image (`1 x 8 x 8`).
pub const IMAGE_LEN: usize = 64;
/// Number of classes.
pub const NUM_CLASSES: usize = 10;

/// Images and labels of one split.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// `[n, 1, 8, 8]` row-major.
    pub x: Vec<f32>,
    /// `[n]`.
    pub y: Vec<u8>,
}

impl Split {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// True when the split has no sample.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// Image `i` (64 values).
    pub fn image(&self, i: usize) -> &[f32] {
        &self.x[i * IMAGE_LEN..(i + 1) * IMAGE_LEN]
    }
}

/// One node's data directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub train: Split,
    pub test: Split,
    /// `meta.json` `classes`.
    pub classes: Vec<u8>,
}

fn read(path: &Path) -> Result<Vec<u8>, NodeError> {
    fs::read(path).map_err(|e| NodeError::io(path, e))
}

fn count(meta: &Value, key: &str) -> Result<usize, NodeError> {
    meta.get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| NodeError::Data(format!("meta.json: {key} missing or not an integer")))
}

fn read_split(dir: &Path, stem: &str, n: usize) -> Result<Split, NodeError> {
    let xp = dir.join(format!("{stem}_x.f32"));
    let yp = dir.join(format!("{stem}_y.u8"));
    let xb = read(&xp)?;
    let want = n
        .checked_mul(IMAGE_LEN * 4)
        .ok_or_else(|| NodeError::Data(format!("{stem}: n = {n} too large")))?;
    if xb.len() != want {
        return Err(NodeError::Data(format!(
            "{}: {} bytes, expected {want} ({n} images of 1x8x8 f32)",
            xp.display(),
            xb.len()
        )));
    }
    let x: Vec<f32> = xb
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(NodeError::Data(format!(
            "{}: non-finite pixel at {i}",
            xp.display()
        )));
    }
    let y = read(&yp)?;
    if y.len() != n {
        return Err(NodeError::Data(format!(
            "{}: {} labels, expected {n}",
            yp.display(),
            y.len()
        )));
    }
    if let Some(i) = y.iter().position(|&l| usize::from(l) >= NUM_CLASSES) {
        return Err(NodeError::Data(format!(
            "{}: label {} at {i} is not in 0..{NUM_CLASSES}",
            yp.display(),
            y[i]
        )));
    }
    Ok(Split { x, y })
}

/// Reads and checks a data directory (see the module documentation).
pub fn read_dataset(dir: &Path) -> Result<Dataset, NodeError> {
    let mp = dir.join("meta.json");
    let meta: Value = serde_json::from_slice(&read(&mp)?)
        .map_err(|e| NodeError::Data(format!("{}: {e}", mp.display())))?;
    let n_train = count(&meta, "n_train")?;
    let n_test = count(&meta, "n_test")?;
    if n_train == 0 {
        return Err(NodeError::Data("n_train is 0".into()));
    }
    let classes = match meta.get("classes") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|c| {
                c.as_u64()
                    .and_then(|c| u8::try_from(c).ok())
                    .filter(|&c| usize::from(c) < NUM_CLASSES)
                    .ok_or_else(|| NodeError::Data(format!("meta.json: bad class {c}")))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(NodeError::Data("meta.json: classes is not a list".into())),
    };
    Ok(Dataset {
        train: read_split(dir, "train", n_train)?,
        test: read_split(dir, "test", n_test)?,
        classes,
    })
}

/// Writes a data directory in the same format (test fixtures; the demo writes it from Python).
pub fn write_dataset(dir: &Path, d: &Dataset) -> Result<(), NodeError> {
    fs::create_dir_all(dir).map_err(|e| NodeError::io(dir, e))?;
    for (stem, s) in [("train", &d.train), ("test", &d.test)] {
        let xp = dir.join(format!("{stem}_x.f32"));
        let bytes: Vec<u8> = s.x.iter().flat_map(|v| v.to_le_bytes()).collect();
        fs::write(&xp, bytes).map_err(|e| NodeError::io(&xp, e))?;
        let yp = dir.join(format!("{stem}_y.u8"));
        fs::write(&yp, &s.y).map_err(|e| NodeError::io(&yp, e))?;
    }
    let meta = json!({"n_train": d.train.len(), "n_test": d.test.len(), "classes": d.classes,
                      "shape": [1, 8, 8], "scale": "pixel/16"});
    let mp = dir.join("meta.json");
    fs::write(&mp, format!("{meta}\n")).map_err(|e| NodeError::io(&mp, e))
}

/// Reads a raw little-endian f32 file (canonical weights, `--init`).
pub fn read_f32_file(path: &Path) -> Result<Vec<f32>, NodeError> {
    let b = read(path)?;
    if b.len() % 4 != 0 {
        return Err(NodeError::Data(format!(
            "{}: {} bytes is not a whole number of f32",
            path.display(),
            b.len()
        )));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Little-endian bytes of an f32 slice.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
