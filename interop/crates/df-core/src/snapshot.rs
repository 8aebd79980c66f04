//! Anchor snapshots for late joiners (spec section 9, DF-ZEN-5, -6, -11, -12), sans-IO: chunk
//! encoding, hostile-input decoding, the server's capture policy, verification and reassembly.
//! Mirrors the Python reference `delta_fabric.snapshot` (same names where the languages allow).
//!
//! - A server freezes its anchor into a [`SnapshotSource`]; a [`SnapshotServer`] decides which
//!   captured snapshot answers a request (the time is an argument, there is no clock inside) and
//!   answers `chunk=<i>&chunk_size=<n>` ([`parse_chunk_params`]) with [`encode_chunk`]: the values
//!   `[i*n, min((i+1)*n, N))` as a `SnapshotChunk` FlatBuffer (`schema/snapshot.fbs`, identifier
//!   `DFS1`). Every chunk carries the fingerprint, the snapshot id, N and the SHA-256 digest of the
//!   whole snapshot's little-endian f32 bytes.
//! - A joiner decodes each chunk with [`decode_chunk`] (never panics, whatever the bytes) and feeds
//!   it to an [`SnapshotAssembler`], which checks the fingerprint, that every chunk belongs to the same
//!   snapshot, its offset and length, that every value is finite, and at [`SnapshotAssembler::finish`] the
//!   digest (DF-ZEN-12). [`fetch_snapshot_chunks`] is the client loop with the request injected.
//!
//! Every failure is a [`SnapshotError`] whose [`SnapshotErrorKind`] has the Python spelling.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flatbuffers::FlatBufferBuilder;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::DecodeError;
use crate::generated::snapshot::deltafabric::v_1 as fb;
use crate::wire::{FINGERPRINT_SIZE, Reader, VERSION_MAJOR, VERSION_MINOR, f32s};

/// The snapshot file identifier.
pub const SNAPSHOT_IDENTIFIER: &[u8; 4] = b"DFS1";
/// Bytes of a snapshot digest (SHA-256).
pub const DIGEST_SIZE: usize = 32;
/// Default values per chunk a joiner asks for (1 MiB of f32, as the Python reference).
pub const DEFAULT_CHUNK_SIZE: usize = 262_144;
/// Default bound on the values a joiner accepts to allocate for one snapshot.
pub const DEFAULT_MAX_VALUES: u64 = 1 << 31;
/// A server answers a chunk-0 (or info) request from a capture younger than this (DF-ZEN-11).
pub const DEFAULT_REUSE: Duration = Duration::from_secs(10);
/// A server keeps a capture this long after the last request answered from it (DF-ZEN-11).
pub const DEFAULT_KEEP: Duration = Duration::from_secs(60);

/// Why a snapshot (chunk) was rejected or could not be fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SnapshotErrorKind {
    /// Fewer than 8 bytes, or bytes 4..8 are not `DFS1`.
    BadIdentifier,
    /// Structure out of bounds, required field missing, bad sizes, zero ids.
    Malformed,
    /// `version_major != 1`.
    UnsupportedVersion,
    /// Not the joiner's manifest.
    FingerprintMismatch,
    /// The chunk disagrees with earlier chunks or with what the joiner asked for (server, total,
    /// incarnation, snapshot id, digest).
    Inconsistent,
    /// Offset or length not the ones the request implies.
    BadOffset,
    /// A value is NaN or infinite.
    NonFinite,
    /// The reassembled values do not hash to the digest.
    DigestMismatch,
    /// Server side: unparsable or out-of-range chunk parameters.
    BadRequest,
    /// No live peer answered / serves a snapshot.
    NoServer,
    /// The server replied with an error.
    ServerError,
    /// The fetch did not complete in time.
    Timeout,
    /// A caller passed an invalid argument (zero id, empty snapshot, zero chunk size); the Python
    /// reference raises `ValueError` there.
    InvalidArgument,
    /// `finish` before every chunk was accepted (DF-ZEN-41, added in 1.1).
    Incomplete,
}

impl SnapshotErrorKind {
    /// The Python spelling, e.g. `"DIGEST_MISMATCH"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotErrorKind::BadIdentifier => "BAD_IDENTIFIER",
            SnapshotErrorKind::Malformed => "MALFORMED",
            SnapshotErrorKind::UnsupportedVersion => "UNSUPPORTED_VERSION",
            SnapshotErrorKind::FingerprintMismatch => "FINGERPRINT_MISMATCH",
            SnapshotErrorKind::Inconsistent => "INCONSISTENT",
            SnapshotErrorKind::BadOffset => "BAD_OFFSET",
            SnapshotErrorKind::NonFinite => "NON_FINITE",
            SnapshotErrorKind::DigestMismatch => "DIGEST_MISMATCH",
            SnapshotErrorKind::BadRequest => "BAD_REQUEST",
            SnapshotErrorKind::NoServer => "NO_SERVER",
            SnapshotErrorKind::ServerError => "SERVER_ERROR",
            SnapshotErrorKind::Timeout => "TIMEOUT",
            SnapshotErrorKind::InvalidArgument => "INVALID_ARGUMENT",
            SnapshotErrorKind::Incomplete => "INCOMPLETE",
        }
    }
}

impl fmt::Display for SnapshotErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot chunk was rejected, or a snapshot fetch failed; `kind` says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError {
    /// Why.
    pub kind: SnapshotErrorKind,
    /// What exactly (free text, for logs).
    pub detail: String,
}

impl SnapshotError {
    /// A new error.
    pub fn new(kind: SnapshotErrorKind, detail: impl Into<String>) -> Self {
        SnapshotError {
            kind,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            f.write_str(self.kind.as_str())
        } else {
            write!(f, "{}: {}", self.kind, self.detail)
        }
    }
}

impl std::error::Error for SnapshotError {}

fn err(kind: SnapshotErrorKind, detail: impl Into<String>) -> SnapshotError {
    SnapshotError::new(kind, detail)
}

/// SHA-256 of values as little-endian f32 bytes.
pub fn snapshot_digest(values: &[f32]) -> [u8; 32] {
    let mut h = Sha256::new();
    if cfg!(target_endian = "little") {
        h.update(bytemuck::cast_slice::<f32, u8>(values));
    } else {
        for v in values {
            h.update(v.to_le_bytes());
        }
    }
    h.finalize().into()
}

/// Number of chunks of a `total`-value snapshot at `chunk_size` values per chunk (at least 1).
pub fn chunk_count(total: u64, chunk_size: usize) -> u64 {
    total.div_ceil(chunk_size.max(1) as u64).max(1)
}

/// Largest `chunk_size` a server answers (DF-ZEN-5: `4 * c + 1024 <= max_packet_size`).
pub fn max_chunk_size(max_packet_size: usize) -> usize {
    max_packet_size.saturating_sub(1024) / 4
}

/// The selector parameters of a chunk request, `chunk=<i>&chunk_size=<n>` (DF-ZEN-5's form).
pub fn format_chunk_params(chunk: u64, chunk_size: usize) -> String {
    format!("chunk={chunk}&chunk_size={chunk_size}")
}

/// `s` without the spaces (U+0020) and horizontal tabs (U+0009) at its start and end (DF-ZEN-42,
/// rule 3: no other character is removed).
pub fn trim_blanks(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// Parses the chunk request parameters (server side) into `(chunk, chunk_size)` (DF-ZEN-5), read by
/// the rules of DF-ZEN-42.
///
/// Accepts the spec's `chunk=<i>&chunk_size=<c>` and Zenoh's native `chunk=<i>;chunk_size=<c>`
/// (pieces split on `&` and `;` in any mix, empty pieces skipped, a key and value split at the
/// first `=`, spaces and tabs around them removed, unknown keys ignored, the first occurrence of a
/// key wins). Both are required decimal integers (1 to 20 ASCII digits) with `1 <= c` and
/// `4 * c + 1024 <= max_packet_size`; anything else is a [`SnapshotErrorKind::BadRequest`]. The
/// chunk index range is checked by [`encode_chunk`].
pub fn parse_chunk_params(
    params: &str,
    max_packet_size: usize,
) -> Result<(u64, usize), SnapshotError> {
    let bad = |d: String| err(SnapshotErrorKind::BadRequest, d);
    let mut chunk = None;
    let mut size = None;
    for part in params.split(['&', ';']) {
        if part.is_empty() {
            continue;
        }
        // DF-ZEN-42: split at the first `=`; only spaces and tabs around a key or value are removed
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let (k, v) = (trim_blanks(k), trim_blanks(v));
        let num = || -> Result<u64, SnapshotError> {
            if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                let shown: String = v.chars().take(40).collect();
                return Err(bad(format!(
                    "{k}={shown:?} is not a non-negative decimal integer"
                )));
            }
            v.parse::<u64>().map_err(|e| bad(format!("{k}={v}: {e}")))
        };
        match k {
            "chunk" if chunk.is_none() => chunk = Some(num()?),
            "chunk_size" if size.is_none() => size = Some(num()?),
            _ => {}
        }
    }
    let chunk = chunk.ok_or_else(|| bad("parameter chunk missing".into()))?;
    let size = size.ok_or_else(|| bad("parameter chunk_size missing".into()))?;
    let limit = max_chunk_size(max_packet_size) as u64;
    if size < 1 || size > limit {
        return Err(bad(format!("chunk_size {size} not in [1, {limit}]")));
    }
    Ok((chunk, size as usize))
}

/// A frozen anchor a node serves: its incarnation, manifest fingerprint, flat f32 values (shared,
/// never changed after construction) and their digest. `framework` is reported by the info
/// queryable (DF-ZEN-6).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotSource {
    incarnation: u64,
    fingerprint: [u8; 32],
    values: Arc<[f32]>,
    framework: String,
    digest: [u8; 32],
    non_finite_at: Option<u64>,
}

impl SnapshotSource {
    /// A snapshot of `values` (at least one); `incarnation` non-zero. Computes the digest once.
    pub fn new(
        incarnation: u64,
        fingerprint: [u8; 32],
        values: impl Into<Arc<[f32]>>,
        framework: impl Into<String>,
    ) -> Result<SnapshotSource, SnapshotError> {
        if incarnation == 0 {
            return Err(err(
                SnapshotErrorKind::InvalidArgument,
                "incarnation must be non-zero",
            ));
        }
        let values: Arc<[f32]> = values.into();
        if values.is_empty() {
            return Err(err(
                SnapshotErrorKind::InvalidArgument,
                "a snapshot holds at least one value",
            ));
        }
        let digest = snapshot_digest(&values);
        let non_finite_at = values.iter().position(|v| !v.is_finite()).map(|p| p as u64);
        Ok(SnapshotSource {
            incarnation,
            fingerprint,
            values,
            framework: framework.into(),
            digest,
            non_finite_at,
        })
    }
    /// The serving node's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
    /// The manifest fingerprint.
    pub fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }
    /// The values (flat canonical order).
    pub fn values(&self) -> &[f32] {
        &self.values
    }
    /// The framework name of the info queryable.
    pub fn framework(&self) -> &str {
        &self.framework
    }
    /// N.
    pub fn total(&self) -> u64 {
        self.values.len() as u64
    }
    /// SHA-256 of the whole snapshot's little-endian f32 bytes.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
    /// The flat index of the first NaN or infinity, `None` when every value is finite: such a
    /// snapshot is never served (DF-ZEN-43).
    pub fn non_finite_at(&self) -> Option<u64> {
        self.non_finite_at
    }
}

/// One decoded chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotChunk<'a> {
    /// Serving node id.
    pub node: u64,
    /// Serving node incarnation.
    pub incarnation: u64,
    /// Manifest fingerprint.
    pub fingerprint: [u8; 32],
    /// Same for every chunk of one snapshot.
    pub snapshot_id: u64,
    /// N.
    pub total: u64,
    /// Flat index of `values[0]`.
    pub offset: u64,
    /// SHA-256 of the whole snapshot.
    pub digest: [u8; 32],
    /// The chunk's values.
    pub values: Cow<'a, [f32]>,
    /// The sender's minor version (any is accepted; `version_major` is always 1 here).
    pub version_minor: u16,
}

/// Header fields of a chunk to encode with [`encode_snapshot_chunk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Serving node id.
    pub node: u64,
    /// Serving node incarnation.
    pub incarnation: u64,
    /// Manifest fingerprint.
    pub fingerprint: [u8; 32],
    /// Snapshot id.
    pub snapshot_id: u64,
    /// N.
    pub total: u64,
    /// SHA-256 of the whole snapshot.
    pub digest: [u8; 32],
}

/// Serialises one chunk starting at `offset`, writing what it is given (no checks: tests use it
/// to build faulty chunks). Servers use [`encode_chunk`].
pub fn encode_snapshot_chunk(h: &ChunkHeader, offset: u64, values: &[f32]) -> Vec<u8> {
    let mut b = FlatBufferBuilder::with_capacity(4 * values.len() + 256);
    let vals = b.create_vector(values);
    let dig = b.create_vector(&h.digest[..]);
    let fp = b.create_vector(&h.fingerprint[..]);
    let root = fb::SnapshotChunk::create(
        &mut b,
        &fb::SnapshotChunkArgs {
            version_major: VERSION_MAJOR,
            version_minor: VERSION_MINOR,
            node: h.node,
            incarnation: h.incarnation,
            fingerprint: Some(fp),
            snapshot_id: h.snapshot_id,
            total: h.total,
            offset,
            digest: Some(dig),
            values: Some(vals),
        },
    );
    fb::finish_snapshot_chunk_buffer(&mut b, root);
    b.finished_data().to_vec()
}

/// Chunk `chunk` of `source` at `chunk_size` values per chunk, as a `SnapshotChunk` buffer
/// (DF-ZEN-5, DF-ZEN-11). [`SnapshotErrorKind::BadRequest`] when the chunk index or size is out of
/// range, [`SnapshotErrorKind::InvalidArgument`] for a zero node or snapshot id.
pub fn encode_chunk(
    source: &SnapshotSource,
    node: u64,
    snapshot_id: u64,
    chunk: u64,
    chunk_size: usize,
    max_packet_size: usize,
) -> Result<Vec<u8>, SnapshotError> {
    if node == 0 || snapshot_id == 0 {
        return Err(err(
            SnapshotErrorKind::InvalidArgument,
            "node and snapshot_id must be non-zero",
        ));
    }
    let limit = max_chunk_size(max_packet_size);
    if chunk_size < 1 || chunk_size > limit {
        return Err(err(
            SnapshotErrorKind::BadRequest,
            format!("chunk_size {chunk_size} not in [1, {limit}]"),
        ));
    }
    let n_chunks = chunk_count(source.total(), chunk_size);
    if chunk >= n_chunks {
        return Err(err(
            SnapshotErrorKind::BadRequest,
            format!(
                "chunk {chunk} not in [0, {n_chunks}) for {} values",
                source.total()
            ),
        ));
    }
    // DF-ZEN-43: a capture holding a NaN or an infinity is never served, whichever chunk
    if let Some(at) = source.non_finite_at() {
        return Err(err(
            SnapshotErrorKind::NonFinite,
            format!("the snapshot is not served: value {at} is not finite"),
        ));
    }
    // chunk < n_chunks, so the start is below N, which fits in usize
    let start = (chunk as usize) * chunk_size;
    let end = (start + chunk_size).min(source.values.len());
    let header = ChunkHeader {
        node,
        incarnation: source.incarnation,
        fingerprint: source.fingerprint,
        snapshot_id,
        total: source.total(),
        digest: source.digest,
    };
    Ok(encode_snapshot_chunk(
        &header,
        start as u64,
        &source.values[start..end],
    ))
}

// Field slots of `SnapshotChunk` (schema/snapshot.fbs, declaration order).
const S_VERSION_MAJOR: usize = 0;
const S_VERSION_MINOR: usize = 1;
const S_NODE: usize = 2;
const S_INCARNATION: usize = 3;
const S_FINGERPRINT: usize = 4;
const S_SNAPSHOT_ID: usize = 5;
const S_TOTAL: usize = 6;
const S_OFFSET: usize = 7;
const S_DIGEST: usize = 8;
const S_VALUES: usize = 9;

/// Decodes and checks one chunk on its own (context-free): identifier; structure by the verifier
/// rules packets follow (spec section 6.7, DF-PKT-20, DF-PKT-21, and the sharing rule DF-SEC-20,
/// applied to `SnapshotChunk` as DF-ZEN-105 says; the hand-written reader of [`crate::wire`], not a
/// stock verifier, whose limits are not the spec's); version 1; 32-byte fingerprint and digest;
/// non-zero node / incarnation / snapshot id / total; at least one value;
/// `offset + len(values) <= total`. Never panics; every failure is a [`SnapshotError`]. Finiteness
/// and the digest are checked by the [`SnapshotAssembler`].
pub fn decode_chunk(buf: &[u8]) -> Result<SnapshotChunk<'_>, SnapshotError> {
    use SnapshotErrorKind::{BadIdentifier, Malformed, UnsupportedVersion};
    if buf.len() < 8 || &buf[4..8] != SNAPSHOT_IDENTIFIER {
        return Err(err(BadIdentifier, "missing file identifier DFS1"));
    }
    let bad = |e: DecodeError| err(Malformed, e.detail);
    let mut r = Reader::new(buf);
    let t = r.root("SnapshotChunk").map_err(bad)?;
    let version_major = r.u16(t, S_VERSION_MAJOR, "version_major").map_err(bad)?;
    if version_major != VERSION_MAJOR {
        return Err(err(
            UnsupportedVersion,
            format!("version_major {version_major}"),
        ));
    }
    let version_minor = r.u16(t, S_VERSION_MINOR, "version_minor").map_err(bad)?;
    let node = r.u64(t, S_NODE, "node").map_err(bad)?;
    let incarnation = r.u64(t, S_INCARNATION, "incarnation").map_err(bad)?;
    let fp = r.vector(t, S_FINGERPRINT, 1, "fingerprint").map_err(bad)?;
    let snapshot_id = r.u64(t, S_SNAPSHOT_ID, "snapshot_id").map_err(bad)?;
    let total = r.u64(t, S_TOTAL, "total").map_err(bad)?;
    let offset = r.u64(t, S_OFFSET, "offset").map_err(bad)?;
    let dg = r.vector(t, S_DIGEST, 1, "digest").map_err(bad)?;
    let vals = r.vector(t, S_VALUES, 4, "values").map_err(bad)?;
    let (Some((fp_start, fp_len)), Some((dg_start, dg_len)), Some((v_start, v_len))) =
        (fp, dg, vals)
    else {
        let name = if fp.is_none() {
            "fingerprint"
        } else if dg.is_none() {
            "digest"
        } else {
            "values"
        };
        return Err(err(Malformed, format!("{name} (required) missing")));
    };
    r.check_disjoint().map_err(bad)?;
    if fp_len != FINGERPRINT_SIZE {
        return Err(err(
            Malformed,
            format!("fingerprint has {fp_len} bytes, expected {FINGERPRINT_SIZE}"),
        ));
    }
    if dg_len != DIGEST_SIZE {
        return Err(err(
            Malformed,
            format!("digest has {dg_len} bytes, expected {DIGEST_SIZE}"),
        ));
    }
    for (name, v) in [
        ("node", node),
        ("incarnation", incarnation),
        ("snapshot_id", snapshot_id),
        ("total", total),
    ] {
        if v == 0 {
            return Err(err(Malformed, format!("{name} is 0")));
        }
    }
    if v_len == 0 {
        return Err(err(Malformed, "chunk holds no value"));
    }
    let len = v_len as u64;
    if offset >= total || len > total - offset {
        return Err(err(
            Malformed,
            format!(
                "values [{offset}, {}) outside the snapshot of {total} values",
                offset.saturating_add(len)
            ),
        ));
    }
    let mut fingerprint = [0u8; 32];
    fingerprint.copy_from_slice(&buf[fp_start..fp_start + fp_len]);
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&buf[dg_start..dg_start + dg_len]);
    Ok(SnapshotChunk {
        version_minor,
        node,
        incarnation,
        fingerprint,
        snapshot_id,
        total,
        offset,
        digest,
        values: f32s(&buf[v_start..v_start + 4 * v_len]),
    })
}

/// [`decode_chunk`] under its former name (df-zenoh uses it until it moves to [`SnapshotAssembler`]).
pub fn decode_snapshot_chunk(buf: &[u8]) -> Result<SnapshotChunk<'_>, SnapshotError> {
    decode_chunk(buf)
}

// ------------------------------------------------------------------------------------------------
// Reassembly and verification (joiner side, DF-ZEN-12)
// ------------------------------------------------------------------------------------------------

/// The header every chunk of one snapshot shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Serving node id.
    pub node: u64,
    /// Serving node incarnation.
    pub incarnation: u64,
    /// Snapshot id.
    pub snapshot_id: u64,
    /// N.
    pub total: u64,
    /// SHA-256 of the whole snapshot.
    pub digest: [u8; 32],
}

/// A reassembled snapshot that passed every check of DF-ZEN-12.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedSnapshot {
    /// The values (N, all finite, hashing to `header.digest`).
    pub values: Vec<f32>,
    /// The header shared by its chunks.
    pub header: SnapshotHeader,
}

/// Reassembles the chunks of one snapshot requested at `chunk_size` values per chunk and verifies
/// it (DF-ZEN-12).
///
/// [`SnapshotAssembler::add`] checks chunk `i` against the joiner's fingerprint, the expected node and
/// total (when set), the first chunk (node, incarnation, snapshot id, total, digest), its offset
/// (`i * chunk_size`) and length (`chunk_size` except the last), and that every value is finite.
/// `max_values` bounds the total a hostile server can make the joiner allocate.
/// [`SnapshotAssembler::finish`] checks completeness and the digest. A chunk that fails a check changes
/// nothing; the caller discards the whole snapshot (DF-ZEN-12), or restarts from chunk 0 on
/// [`SnapshotErrorKind::Inconsistent`] (the server switched snapshots).
#[derive(Debug, Clone)]
pub struct SnapshotAssembler {
    fingerprint: [u8; 32],
    chunk_size: usize,
    expected_total: Option<u64>,
    expected_node: Option<u64>,
    max_values: u64,
    first: Option<SnapshotHeader>,
    buf: Vec<f32>,
    have: Vec<bool>,
    missing: u64,
}

impl SnapshotAssembler {
    /// An assembler for the joiner's manifest `fingerprint` at `chunk_size` (>= 1) values per chunk.
    pub fn new(
        fingerprint: [u8; 32],
        chunk_size: usize,
    ) -> Result<SnapshotAssembler, SnapshotError> {
        if chunk_size < 1 {
            return Err(err(
                SnapshotErrorKind::InvalidArgument,
                "chunk_size must be >= 1",
            ));
        }
        Ok(SnapshotAssembler {
            fingerprint,
            chunk_size,
            expected_total: None,
            expected_node: None,
            max_values: DEFAULT_MAX_VALUES,
            first: None,
            buf: Vec::new(),
            have: Vec::new(),
            missing: 0,
        })
    }
    /// Requires `total = N` (the joiner's own N, DF-ZEN-12).
    pub fn expect_total(mut self, total: u64) -> Self {
        self.expected_total = Some(total);
        self
    }
    /// Requires the chunks to come from `node` (the one asked).
    pub fn expect_node(mut self, node: u64) -> Self {
        self.expected_node = Some(node);
        self
    }
    /// Refuses snapshots of more than `max_values` values (default [`DEFAULT_MAX_VALUES`]).
    pub fn max_values(mut self, max_values: u64) -> Self {
        self.max_values = max_values;
        self
    }
    /// Values per chunk.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }
    /// The header of the first accepted chunk.
    pub fn header(&self) -> Option<&SnapshotHeader> {
        self.first.as_ref()
    }
    /// Number of chunks, known after the first accepted chunk.
    pub fn num_chunks(&self) -> Option<u64> {
        self.first.map(|h| chunk_count(h.total, self.chunk_size))
    }
    /// The lowest chunk index not received yet (`Some(0)` before the first chunk, `None` when
    /// complete).
    pub fn next_missing(&self) -> Option<u64> {
        if self.first.is_none() {
            return Some(0);
        }
        self.have.iter().position(|h| !h).map(|i| i as u64)
    }
    /// Every chunk received.
    pub fn is_complete(&self) -> bool {
        self.first.is_some() && self.missing == 0
    }

    /// Checks chunk `index` (see the type's doc) and stores its values. On error nothing changes.
    pub fn add(&mut self, index: u64, chunk: &SnapshotChunk<'_>) -> Result<(), SnapshotError> {
        use SnapshotErrorKind::{
            BadOffset, FingerprintMismatch, Inconsistent, Malformed, NonFinite,
        };
        if chunk.fingerprint != self.fingerprint {
            return Err(err(
                FingerprintMismatch,
                format!(
                    "chunk fingerprint {} != local {}",
                    hex::encode(chunk.fingerprint),
                    hex::encode(self.fingerprint)
                ),
            ));
        }
        let head = SnapshotHeader {
            node: chunk.node,
            incarnation: chunk.incarnation,
            snapshot_id: chunk.snapshot_id,
            total: chunk.total,
            digest: chunk.digest,
        };
        match &self.first {
            None => {
                if let Some(n) = self.expected_node
                    && chunk.node != n
                {
                    return Err(err(
                        Inconsistent,
                        format!("chunk from node {:016x}, asked {n:016x}", chunk.node),
                    ));
                }
                if let Some(t) = self.expected_total
                    && chunk.total != t
                {
                    return Err(err(
                        Inconsistent,
                        format!("total {} != expected {t}", chunk.total),
                    ));
                }
                if chunk.total > self.max_values || usize::try_from(chunk.total).is_err() {
                    return Err(err(
                        Malformed,
                        format!("total {} > limit {}", chunk.total, self.max_values),
                    ));
                }
            }
            Some(f) => {
                for (name, same) in [
                    ("node", f.node == head.node),
                    ("incarnation", f.incarnation == head.incarnation),
                    ("snapshot_id", f.snapshot_id == head.snapshot_id),
                    ("total", f.total == head.total),
                    ("digest", f.digest == head.digest),
                ] {
                    if !same {
                        return Err(err(Inconsistent, format!("{name} changed between chunks")));
                    }
                }
            }
        }
        let n_chunks = chunk_count(chunk.total, self.chunk_size);
        if index >= n_chunks {
            return Err(err(
                BadOffset,
                format!("chunk index {index} not in [0, {n_chunks})"),
            ));
        }
        let cs = self.chunk_size as u64;
        let want_off = index * cs;
        let want_len = cs.min(chunk.total - want_off);
        let got_len = chunk.values.len() as u64;
        if chunk.offset != want_off || got_len != want_len {
            return Err(err(
                BadOffset,
                format!(
                    "chunk {index}: values [{}, {}), expected [{want_off}, {})",
                    chunk.offset,
                    chunk.offset.saturating_add(got_len),
                    want_off + want_len
                ),
            ));
        }
        if let Some(p) = chunk.values.iter().position(|v| !v.is_finite()) {
            return Err(err(
                NonFinite,
                format!("chunk {index}: value {} is not finite", want_off + p as u64),
            ));
        }
        if self.first.is_none() {
            // total <= max_values and fits in usize (checked above)
            self.buf = vec![0.0; chunk.total as usize];
            self.have = vec![false; n_chunks as usize];
            self.missing = n_chunks;
            self.first = Some(head);
        }
        let (start, i) = (want_off as usize, index as usize);
        self.buf[start..start + chunk.values.len()].copy_from_slice(&chunk.values);
        if !self.have[i] {
            self.have[i] = true;
            self.missing -= 1;
        }
        Ok(())
    }

    /// The verified snapshot: every chunk present and the digest of the values matches.
    pub fn finish(self) -> Result<VerifiedSnapshot, SnapshotError> {
        use SnapshotErrorKind::{DigestMismatch, Incomplete};
        let Some(header) = self.first else {
            return Err(err(Incomplete, "no chunk received"));
        };
        if self.missing > 0 {
            let first_missing: Vec<usize> = self
                .have
                .iter()
                .enumerate()
                .filter(|(_, h)| !**h)
                .map(|(i, _)| i)
                .take(8)
                .collect();
            return Err(err(
                Incomplete,
                format!("{} chunks missing, first {first_missing:?}", self.missing),
            ));
        }
        let got = snapshot_digest(&self.buf);
        if got != header.digest {
            return Err(err(
                DigestMismatch,
                format!(
                    "values hash to {}, chunks announce {}",
                    hex::encode(got),
                    hex::encode(header.digest)
                ),
            ));
        }
        Ok(VerifiedSnapshot {
            values: self.buf,
            header,
        })
    }
}

/// Fetches, verifies (DF-ZEN-12) and reassembles one snapshot, chunk by chunk, before `deadline`.
///
/// `request(chunk, chunk_size, time_left)` performs one chunk query (the I/O) and returns the
/// reply bytes, or a [`SnapshotError`] (`Timeout`, `ServerError`, `NoServer`...). Restarts from
/// chunk 0 (at most `max_restarts` times) when the server switches snapshots mid-way
/// ([`SnapshotErrorKind::Inconsistent`] after the first chunk); every other fault is returned.
/// `now` reads the clock (pass `Instant::now`; tests pass a fake one).
pub fn fetch_snapshot_chunks(
    mut request: impl FnMut(u64, usize, Duration) -> Result<Vec<u8>, SnapshotError>,
    assembler: &SnapshotAssembler,
    deadline: Instant,
    max_restarts: u32,
    now: impl Fn() -> Instant,
) -> Result<VerifiedSnapshot, SnapshotError> {
    let mut restarts = 0;
    loop {
        let mut asm = assembler.clone();
        let attempt = (|| {
            while let Some(i) = asm.next_missing() {
                let left = deadline.saturating_duration_since(now());
                if left.is_zero() {
                    return Err(err(
                        SnapshotErrorKind::Timeout,
                        format!("snapshot not complete at the deadline (chunk {i} missing)"),
                    ));
                }
                let buf = request(i, asm.chunk_size(), left)?;
                asm.add(i, &decode_chunk(&buf)?)?;
            }
            Ok(())
        })();
        match attempt {
            Ok(()) => return asm.finish(),
            Err(e)
                if e.kind == SnapshotErrorKind::Inconsistent
                    && asm.header().is_some()
                    && restarts < max_restarts =>
            {
                restarts += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Server-side policy (sans-IO): which captured snapshot answers which request
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Captured {
    id: u64,
    /// The state version at the capture ([`SnapshotServer::set_version`]).
    version: Option<u64>,
    captured_at: Instant,
    last_query: Instant,
    source: SnapshotSource,
}

/// Answers the chunk and info requests of one node from captured snapshots (DF-ZEN-5, -6, -11).
///
/// A request for chunk 0 (or info) is answered from the latest capture when it is younger than
/// `reuse` (10 s: concurrent joiners share one snapshot) and, when the caller tells the state's
/// version ([`SnapshotServer::set_version`]), captured at the version it has now, otherwise from a
/// new capture with a new snapshot id (a joiner never gets a capture older than the state, also
/// within `reuse`: a node restarted seconds after its first join would install that join's
/// capture); requests for later chunks are answered from the latest capture, which is kept while
/// it is queried (released after `keep` = 60 s without a query). The caller passes the time of
/// each request and a `capture` closure that copies the node's state (called only when a new
/// capture is needed); wrap the server in a mutex to share it between threads.
#[derive(Debug, Clone)]
pub struct SnapshotServer {
    node: u64,
    reuse: Duration,
    keep: Duration,
    max_packet_size: usize,
    latest: Option<Captured>,
    next_id: u64,
    version: Option<u64>,
}

impl SnapshotServer {
    /// The server of `node` (non-zero) with the default reuse and keep times and
    /// `max_packet_size` (which bounds the chunk size it answers).
    pub fn new(node: u64, max_packet_size: usize) -> Result<SnapshotServer, SnapshotError> {
        if node == 0 {
            return Err(err(
                SnapshotErrorKind::InvalidArgument,
                "node must be non-zero",
            ));
        }
        Ok(SnapshotServer {
            node,
            reuse: DEFAULT_REUSE,
            keep: DEFAULT_KEEP,
            max_packet_size,
            latest: None,
            next_id: 1,
            version: None,
        })
    }
    /// Other reuse and keep times.
    pub fn with_times(mut self, reuse: Duration, keep: Duration) -> Self {
        self.reuse = reuse;
        self.keep = keep;
        self
    }
    /// The version of the node's state now (a number that changes whenever the state a capture
    /// would hold changes; `None`: unknown, captures are reused by age only). Set it before each
    /// request, read before the capture: a chunk-0 or info request reuses the latest capture only
    /// while it was taken at this version.
    pub fn set_version(&mut self, version: Option<u64>) {
        self.version = version;
    }
    /// The serving node.
    pub fn node(&self) -> u64 {
        self.node
    }

    /// Whether a request at `now` needs a new capture (`fresh`: a chunk-0 or info request).
    pub fn needs_capture(&self, fresh: bool, now: Instant) -> bool {
        match &self.latest {
            None => true,
            Some(c) => {
                now.saturating_duration_since(c.last_query) > self.keep
                    || (fresh
                        && (now.saturating_duration_since(c.captured_at) >= self.reuse
                            || (self.version.is_some() && c.version != self.version)))
            }
        }
    }

    /// The snapshot id and source answering a request at `now` (`fresh`: chunk 0 or info);
    /// calls `capture` when a new capture is needed.
    pub fn current(
        &mut self,
        fresh: bool,
        now: Instant,
        capture: impl FnOnce() -> SnapshotSource,
    ) -> (u64, &SnapshotSource) {
        if self.needs_capture(fresh, now) {
            self.latest = None;
        }
        let next_id = &mut self.next_id;
        let version = self.version;
        let c = self.latest.get_or_insert_with(|| {
            let id = *next_id;
            *next_id += 1;
            Captured {
                id,
                version,
                captured_at: now,
                last_query: now,
                source: capture(),
            }
        });
        c.last_query = now;
        (c.id, &c.source)
    }

    /// The chunk buffer answering selector parameters `chunk=<i>&chunk_size=<c>` at `now`;
    /// [`SnapshotErrorKind::BadRequest`] for bad parameters or a chunk index out of range (the
    /// message of the error reply, DF-ZEN-5).
    pub fn answer(
        &mut self,
        params: &str,
        now: Instant,
        capture: impl FnOnce() -> SnapshotSource,
    ) -> Result<Vec<u8>, SnapshotError> {
        let (chunk, chunk_size) = parse_chunk_params(params, self.max_packet_size)?;
        let (node, mps) = (self.node, self.max_packet_size);
        let (id, src) = self.current(chunk == 0, now, capture);
        encode_chunk(src, node, id, chunk, chunk_size, mps)
    }

    /// The info queryable's JSON object (DF-ZEN-6): `node` and `incarnation` as 16 lowercase hex
    /// digits, `fingerprint` as 64, `framework`, `N`.
    pub fn info(&mut self, now: Instant, capture: impl FnOnce() -> SnapshotSource) -> Value {
        let node = self.node;
        let (_, src) = self.current(true, now, capture);
        json!({
            "node": format!("{node:016x}"),
            "incarnation": format!("{:016x}", src.incarnation()),
            "fingerprint": hex::encode(src.fingerprint()),
            "framework": src.framework(),
            "N": src.total(),
            "supports": crate::encodings::supports(),
        })
    }
}
