//! Manifests, canonical order and fingerprint (spec section 4, DF-MAN).

use std::fmt;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Why a manifest was refused (DF-MAN-1, DF-MAN-7) or could not be read from JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestError {
    /// A tensor name is empty (DF-MAN-1).
    EmptyName,
    /// A tensor name holds a control character (DF-MAN-1).
    ControlCharacter(String),
    /// Two tensors have the same name (DF-MAN-1).
    DuplicateName(String),
    /// More than 2**32 values (DF-MAN-7), or the count overflows u64 (`None`).
    TooLarge(Option<u64>),
    /// The JSON form is not a manifest (missing or mistyped member, dtype other than f32).
    Json(String),
    /// The JSON's `fingerprint` does not match its tensors.
    FingerprintMismatch,
    /// The JSON's `num_params` does not match its tensors.
    NumParamsMismatch,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::EmptyName => f.write_str("empty tensor name"),
            ManifestError::ControlCharacter(n) => {
                write!(f, "tensor name {n:?} has a control character")
            }
            ManifestError::DuplicateName(n) => write!(f, "duplicate tensor name {n:?}"),
            ManifestError::TooLarge(Some(n)) => {
                write!(f, "manifest has {n} values, more than 2**32")
            }
            ManifestError::TooLarge(None) => f.write_str("manifest size overflows u64"),
            ManifestError::Json(s) => write!(f, "manifest: {s}"),
            ManifestError::FingerprintMismatch => {
                f.write_str("manifest fingerprint does not match its tensors")
            }
            ManifestError::NumParamsMismatch => {
                f.write_str("manifest num_params does not match its tensors")
            }
        }
    }
}

impl std::error::Error for ManifestError {}

/// The message, for callers that report errors as strings.
impl From<ManifestError> for String {
    fn from(e: ManifestError) -> String {
        e.to_string()
    }
}

/// Header line of the fingerprinted text (DF-MAN-5).
pub const MANIFEST_HEADER: &str = "deltafabric-manifest/1\n";

/// One tensor of a manifest: canonical name and shape (dtype is always f32 in v1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    /// Canonical (PyTorch `state_dict`) name.
    pub name: String,
    /// Shape, row-major; empty for a scalar.
    pub shape: Vec<u64>,
}

impl TensorSpec {
    /// A new spec.
    pub fn new(name: impl Into<String>, shape: &[u64]) -> Self {
        TensorSpec {
            name: name.into(),
            shape: shape.to_vec(),
        }
    }
    /// Element count (1 for a scalar); saturates at `u64::MAX` (see [`TensorSpec::checked_numel`]).
    pub fn numel(&self) -> u64 {
        self.checked_numel().unwrap_or(u64::MAX)
    }
    /// Element count, `None` when it does not fit a u64. A shape with a zero dimension has 0
    /// elements whatever its other dimensions (as the exact product of DF-MAN-7: `[2^40, 2^40, 0]`
    /// has 0).
    pub fn checked_numel(&self) -> Option<u64> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }
    /// The line of this tensor in the fingerprinted text (DF-MAN-5).
    pub fn line(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(u64::to_string).collect();
        format!("{}\tf32\t{}\n", self.name, dims.join(","))
    }
}

/// A validated manifest in canonical order with its flat layout and fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    tensors: Vec<TensorSpec>,
    offsets: Vec<u64>,
    fingerprint: [u8; 32],
}

impl Manifest {
    /// Validates names (DF-MAN-1: non-empty, unique, no control characters), sorts by the UTF-8
    /// bytes of the name (DF-MAN-2), lays out (DF-MAN-3) and fingerprints (DF-MAN-5).
    pub fn new(tensors: impl IntoIterator<Item = TensorSpec>) -> Result<Manifest, ManifestError> {
        let mut tensors: Vec<TensorSpec> = tensors.into_iter().collect();
        for t in &tensors {
            if t.name.is_empty() {
                return Err(ManifestError::EmptyName);
            }
            if t.name
                .chars()
                .any(|c| (c as u32) < 0x20 || c as u32 == 0x7f)
            {
                return Err(ManifestError::ControlCharacter(t.name.clone()));
            }
        }
        tensors.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        if let Some(w) = tensors.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(ManifestError::DuplicateName(w[0].name.clone()));
        }
        let mut offsets = Vec::with_capacity(tensors.len() + 1);
        let mut acc: u64 = 0;
        offsets.push(0);
        for t in &tensors {
            acc = t
                .checked_numel()
                .and_then(|n| acc.checked_add(n))
                .ok_or(ManifestError::TooLarge(None))?;
            offsets.push(acc);
        }
        if acc > 1 << 32 {
            return Err(ManifestError::TooLarge(Some(acc)));
        }
        let mut text = String::from(MANIFEST_HEADER);
        for t in &tensors {
            text.push_str(&t.line());
        }
        let fingerprint: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        Ok(Manifest {
            tensors,
            offsets,
            fingerprint,
        })
    }

    /// Tensors in canonical order.
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }
    /// Start offset of each tensor, followed by N.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }
    /// N, the total element count.
    pub fn num_params(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }
    /// The 32-byte fingerprint.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }
    /// The text hashed into the fingerprint.
    pub fn canonical_text(&self) -> String {
        let mut text = String::from(MANIFEST_HEADER);
        for t in &self.tensors {
            text.push_str(&t.line());
        }
        text
    }
    /// Offset of a tensor by name.
    pub fn offset_of(&self, name: &str) -> Option<u64> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(|i| self.offsets[i])
    }

    /// The manifest JSON (`{"version":1,"tensors":[{name,dtype,shape}],"num_params","fingerprint"}`).
    pub fn to_json(&self) -> Value {
        json!({
            "version": 1,
            "tensors": self.tensors.iter().map(|t| json!({"name": t.name, "dtype": "f32", "shape": t.shape})).collect::<Vec<_>>(),
            "num_params": self.num_params(),
            "fingerprint": hex::encode(self.fingerprint),
        })
    }

    /// Parses [`Manifest::to_json`] output, checking `version` (the integer 1), `fingerprint` (64
    /// hex digits) and `num_params` (an integer) when present, as the Python `Manifest.from_json`.
    pub fn from_json(v: &Value) -> Result<Manifest, ManifestError> {
        let bad = |s: &str| ManifestError::Json(s.to_string());
        if let Some(ver) = v.get("version")
            && ver.as_u64() != Some(1)
        {
            return Err(ManifestError::Json(format!(
                "unsupported manifest version {ver}"
            )));
        }
        let ts = v
            .get("tensors")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("tensors missing"))?;
        let mut specs = Vec::with_capacity(ts.len());
        for t in ts {
            let name = t
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tensor name missing"))?;
            if let Some(d) = t.get("dtype")
                && d.as_str() != Some("f32")
            {
                return Err(ManifestError::Json(format!("{name}: dtype must be f32")));
            }
            let shape = t
                .get("shape")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("shape missing"))?
                .iter()
                .map(|d| d.as_u64().ok_or_else(|| bad("bad dim")))
                .collect::<Result<Vec<u64>, _>>()?;
            specs.push(TensorSpec::new(name, &shape));
        }
        let m = Manifest::new(specs)?;
        // a present member of another type (a number for the fingerprint, a string or a float for
        // num_params) does not match either
        if let Some(fp) = v.get("fingerprint")
            && fp.as_str() != Some(hex::encode(m.fingerprint).as_str())
        {
            return Err(ManifestError::FingerprintMismatch);
        }
        if let Some(n) = v.get("num_params")
            && n.as_u64() != Some(m.num_params())
        {
            return Err(ManifestError::NumParamsMismatch);
        }
        Ok(m)
    }
}
