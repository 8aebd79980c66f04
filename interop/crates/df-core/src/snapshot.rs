//! Snapshot chunks (`schema/snapshot.fbs`, identifier `DFS1`, spec DF-ZEN-5): encode, decode, digest.

use std::borrow::Cow;

use flatbuffers::{FlatBufferBuilder, VerifierOptions};
use sha2::{Digest, Sha256};

use crate::generated::snapshot::deltafabric::v_1 as fb;
use crate::wire::{FINGERPRINT_SIZE, VERSION_MAJOR, VERSION_MINOR, f32s};

/// The snapshot file identifier.
pub const SNAPSHOT_IDENTIFIER: &[u8; 4] = b"DFS1";

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
}

/// Header fields of a chunk to encode.
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

/// Serialises one chunk starting at `offset`.
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

/// Verifies and decodes one chunk (identifier, structure, version 1, 32-byte fingerprint and
/// digest, `offset + len <= total`). Never panics.
pub fn decode_snapshot_chunk(buf: &[u8]) -> Result<SnapshotChunk<'_>, String> {
    if buf.len() < 8 || &buf[4..8] != SNAPSHOT_IDENTIFIER {
        return Err("missing file identifier DFS1".into());
    }
    let opts = VerifierOptions {
        max_depth: 4,
        max_tables: 4,
        max_apparent_size: buf.len().saturating_mul(2).saturating_add(1024),
        ignore_missing_null_terminator: false,
    };
    let c = fb::root_as_snapshot_chunk_with_opts(&opts, buf).map_err(|e| e.to_string())?;
    if c.version_major() != VERSION_MAJOR {
        return Err(format!("unsupported version {}", c.version_major()));
    }
    let (fp, dg) = (c.fingerprint(), c.digest());
    if fp.len() != FINGERPRINT_SIZE || dg.len() != 32 {
        return Err("fingerprint and digest must have 32 bytes".into());
    }
    let values = f32s(c.values());
    let end = c
        .offset()
        .checked_add(values.len() as u64)
        .ok_or("offset overflow")?;
    if end > c.total() {
        return Err(format!(
            "chunk [{}, {end}) beyond total {}",
            c.offset(),
            c.total()
        ));
    }
    let mut fingerprint = [0u8; 32];
    fingerprint.copy_from_slice(fp.bytes());
    let mut digest = [0u8; 32];
    digest.copy_from_slice(dg.bytes());
    Ok(SnapshotChunk {
        node: c.node(),
        incarnation: c.incarnation(),
        fingerprint,
        snapshot_id: c.snapshot_id(),
        total: c.total(),
        offset: c.offset(),
        digest,
        values,
    })
}
