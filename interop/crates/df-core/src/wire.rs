//! The packet wire format (spec section 6, DF-PKT) and receive-side checks (section 7, DF-RCV-1).
//!
//! Check order of [`decode_packet`] (spec DF-RCV-20, normative: with several faults the first
//! failing step's code is reported):
//! 1. `OVERSIZE`, 2. `BAD_IDENTIFIER`, 3. `MALFORMED` when the root table, its vtable or
//!    `version_major` is not readable by the verifier rules of spec section 6.7,
//! 4. `UNSUPPORTED_VERSION`,
//! 5. `MALFORMED`: every other verifier rule of section 6.7 (bounds, alignment relative to the
//!    packet's first byte, uoffsets not 0, vtables, required fields, disjoint objects: DF-PKT-20,
//!    DF-PKT-21, DF-SEC-20), fingerprint length, non-zero sender / sender_incarnation / origin /
//!    incarnation / seq, (1.1) a present `Entry.signature` of exactly 64 bytes,
//! 6. `UNSUPPORTED_ENCODING` (value encoding, then index encoding),
//! 7. `MALFORMED`: values vectors not matching the encoding, index vectors not matching the index
//!    encoding, a Q8 scale with the sign bit set, then the faults of the packed index bytes
//!    (section 6.8, 1.1),
//! 8. `LENGTH_MISMATCH`, `EMPTY_ENTRY`, `UNSORTED_INDICES`, `DUPLICATE_INDEX`, `NON_FINITE`
//!    (a non-finite Q8 scale, then a non-finite value) (each over all entries before the next).
//!
//! [`validate_packet`] then checks `FINGERPRINT_MISMATCH`, `HOP_LIMIT`, `INDEX_OUT_OF_RANGE`.
//! This is the same order as the Python reference (`delta_fabric.wire`).

use std::borrow::Cow;
use std::fmt;

use flatbuffers::{FlatBufferBuilder, WIPOffset};
use serde_json::{Value, json};

pub use crate::compact::IndexEncoding;
use crate::compact::{check_q8_scale, encode_indices, q8_encode, unpack_indices};
/// The packet's value encoding (defined with its table in [`crate::encodings`]).
pub use crate::encodings::ValueEncoding;
use crate::encodings::{Carrier, MAX_VALUE_BYTES, by_wire, codec};
use crate::error::{DecodeError, ErrorCode};
use crate::generated::packet::deltafabric::v_1 as fb;

/// Default `max_packet_size` (16 MiB, DF-PAR).
pub const DEFAULT_MAX_PACKET_SIZE: usize = 16 * 1024 * 1024;
/// The packet file identifier (bytes 4..8).
pub const FILE_IDENTIFIER: &[u8; 4] = b"DFP1";
/// Protocol major version of this implementation.
pub const VERSION_MAJOR: u16 = 1;
/// Protocol minor version of this implementation.
pub const VERSION_MINOR: u16 = 1;
/// Bytes of a manifest fingerprint.
pub const FINGERPRINT_SIZE: usize = 32;
/// Upper bound on the bytes of a packet with no entry (same bound as the Python reference).
pub const PACKET_OVERHEAD_BOUND: usize = 160;

/// Upper bound on the bytes one entry of `n` values adds to a packet, whatever the encoding
/// (same bound as the Python reference `encoded_size_bound`): the entry table with its vtable and
/// padding (<= 96), the entries-vector slot (4), the indices and values vectors (4 + 7 each plus
/// 4 bytes per index and [`MAX_VALUE_BYTES`] per value).
pub fn entry_size_bound(n: usize) -> usize {
    128 + (4 + MAX_VALUE_BYTES) * n
}

/// Length of an Ed25519 signature (`Entry.signature`, 1.1, DF-PKT-140).
pub const SIGNATURE_SIZE: usize = 64;
/// Upper bound on the bytes a 64-byte `Entry.signature` adds to an entry (1.1, DF-RLY-141): the
/// vtable slots 7..10, the field's uoffset, the vector's length, its 64 bytes and padding (same
/// as the Python reference `SIGNATURE_SIZE_BOUND`).
pub const SIGNATURE_SIZE_BOUND: usize = 96;
/// Smallest `max_packet_size` of a signed cluster: a packet of one signed entry of one value by the
/// size bound (`160 + 128 + 96 + 8` = 392, DF-RLY-141); below it no own entry fits.
pub const MIN_SIGNED_MAX_PACKET_SIZE: usize =
    PACKET_OVERHEAD_BOUND + 128 + SIGNATURE_SIZE_BOUND + 8;

/// [`entry_size_bound`] of an entry that is signed or not (DF-RLY-141).
pub fn entry_size_bound_signed(n: usize, signed: bool) -> usize {
    entry_size_bound(n) + if signed { SIGNATURE_SIZE_BOUND } else { 0 }
}

/// Upper bound on the bytes a `Packet.heard` vector of `n` ids adds to a packet (1.1,
/// DF-RLY-61): vtable slot, offset, length, padding and 8 bytes per id (same as the Python
/// reference `heard_size_bound`).
pub fn heard_size_bound(n: usize) -> usize {
    24 + 8 * n
}

/// One decoded entry; indices and (F32) values borrow the packet buffer when it is aligned.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry<'a> {
    /// Origin node id.
    pub origin: u64,
    /// Origin incarnation.
    pub incarnation: u64,
    /// Sequence number within (origin, incarnation).
    pub seq: u64,
    /// Relays passed.
    pub hops: u8,
    /// Flat indices (ascending after decode).
    pub indices: Cow<'a, [u32]>,
    /// Decoded f32 values.
    pub values: Cow<'a, [f32]>,
    /// (1.1, DF-PKT-140) the origin's Ed25519 signature; `None` when the entry carries none.
    pub signature: Option<[u8; SIGNATURE_SIZE]>,
}

/// A decoded packet (see [`decode_packet`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Packet<'a> {
    /// Protocol major version (always 1 after decode).
    pub version_major: u16,
    /// Protocol minor version.
    pub version_minor: u16,
    /// Publishing node id.
    pub sender: u64,
    /// Publishing node incarnation.
    pub sender_incarnation: u64,
    /// Manifest fingerprint.
    pub fingerprint: [u8; 32],
    /// Value encoding of every entry.
    pub encoding: ValueEncoding,
    /// The entries, in packet order.
    pub entries: Vec<Entry<'a>>,
    /// (1.1, DF-PKT-60) the node ids the sender advertises as heard directly, ascending; `None`
    /// when the packet carries no advertisement.
    pub heard: Option<Vec<u64>>,
    /// (1.1, section 6.8) how the indices travel: `Plain` or `Packed`.
    pub index_encoding: IndexEncoding,
}

/// An entry owned by the caller, for encoding.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OwnedEntry {
    /// Origin node id.
    pub origin: u64,
    /// Origin incarnation.
    pub incarnation: u64,
    /// Sequence number.
    pub seq: u64,
    /// Relays passed.
    pub hops: u8,
    /// Flat indices.
    pub indices: Vec<u32>,
    /// f32 values (encoded per the packet's encoding).
    pub values: Vec<f32>,
    /// (1.1) the signature, written as given (any length: tests build faulty ones); `None`: absent.
    pub signature: Option<Vec<u8>>,
}

/// A packet owned by the caller, for encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedPacket {
    /// Protocol major version.
    pub version_major: u16,
    /// Protocol minor version.
    pub version_minor: u16,
    /// Publishing node id.
    pub sender: u64,
    /// Publishing node incarnation.
    pub sender_incarnation: u64,
    /// Manifest fingerprint (any length: the encoder writes what it is given).
    pub fingerprint: Vec<u8>,
    /// Value encoding.
    pub encoding: ValueEncoding,
    /// Entries in packet order.
    pub entries: Vec<OwnedEntry>,
    /// (1.1, DF-PKT-60) advertised heard node ids (written as given), `None`: field absent.
    pub heard: Option<Vec<u64>>,
    /// (1.1, section 6.8) how the indices are written.
    pub index_encoding: IndexEncoding,
}

impl OwnedPacket {
    /// A v1.0 packet.
    pub fn new(
        sender: u64,
        sender_incarnation: u64,
        fingerprint: [u8; 32],
        encoding: ValueEncoding,
    ) -> Self {
        OwnedPacket {
            version_major: VERSION_MAJOR,
            version_minor: VERSION_MINOR,
            sender,
            sender_incarnation,
            fingerprint: fingerprint.to_vec(),
            encoding,
            entries: Vec::new(),
            heard: None,
            index_encoding: IndexEncoding::Plain,
        }
    }
}

impl Entry<'_> {
    /// An owned copy.
    pub fn to_owned_entry(&self) -> OwnedEntry {
        OwnedEntry {
            origin: self.origin,
            incarnation: self.incarnation,
            seq: self.seq,
            hops: self.hops,
            indices: self.indices.to_vec(),
            values: self.values.to_vec(),
            signature: self.signature.map(|s| s.to_vec()),
        }
    }
}

impl Packet<'_> {
    /// An owned copy.
    pub fn to_owned_packet(&self) -> OwnedPacket {
        OwnedPacket {
            version_major: self.version_major,
            version_minor: self.version_minor,
            sender: self.sender,
            sender_incarnation: self.sender_incarnation,
            fingerprint: self.fingerprint.to_vec(),
            encoding: self.encoding,
            entries: self.entries.iter().map(Entry::to_owned_entry).collect(),
            heard: self.heard.clone(),
            index_encoding: self.index_encoding,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------------

fn malformed(detail: impl Into<String>) -> DecodeError {
    DecodeError::new(ErrorCode::Malformed, detail)
}

fn rd_u16(b: &[u8], pos: usize) -> u16 {
    u16::from_le_bytes([b[pos], b[pos + 1]])
}

fn rd_u32(b: &[u8], pos: usize) -> u32 {
    u32::from_le_bytes([b[pos], b[pos + 1], b[pos + 2], b[pos + 3]])
}

fn rd_u64(b: &[u8], pos: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[pos..pos + 8]);
    u64::from_le_bytes(w)
}

/// Little-endian u32s of a vector's element bytes: borrowed when aligned in memory (fast path),
/// copied otherwise.
pub(crate) fn u32s(bytes: &[u8]) -> Cow<'_, [u32]> {
    if cfg!(target_endian = "little")
        && let Ok(s) = bytemuck::try_cast_slice::<u8, u32>(bytes)
    {
        return Cow::Borrowed(s);
    }
    Cow::Owned(u32s_copy(bytes))
}

/// Little-endian f32s of a vector's element bytes: borrowed when aligned in memory (fast path),
/// copied otherwise.
pub(crate) fn f32s(bytes: &[u8]) -> Cow<'_, [f32]> {
    if cfg!(target_endian = "little")
        && let Ok(s) = bytemuck::try_cast_slice::<u8, f32>(bytes)
    {
        return Cow::Borrowed(s);
    }
    Cow::Owned(f32s_copy(bytes))
}

/// The copying path of [`u32s`].
pub(crate) fn u32s_copy(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The copying path of [`f32s`].
pub(crate) fn f32s_copy(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A located table: its position, its vtable's position and the vtable's size in bytes.
#[derive(Clone, Copy)]
pub(crate) struct Table {
    pos: usize,
    vt: usize,
    vsize: usize,
}

/// The verifier rules of spec section 6.7 (DF-PKT-20, DF-PKT-21) over one buffer, written for this
/// schema (no stock verifier: its limits are not the spec's). Positions are relative to the first
/// byte of the packet, never to its address in memory. `spans` collects the byte ranges of the
/// objects read (table heads, fields, vectors; not vtables) for the sharing rule (DF-SEC-20).
/// The snapshot decoder applies the same rules to a `SnapshotChunk` (DF-ZEN-105).
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    spans: Vec<(usize, usize)>,
}

impl<'a> Reader<'a> {
    /// A reader of `buf`, which holds at least the 4 bytes of the root uoffset.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            spans: Vec::new(),
        }
    }

    /// The root table (rule 1: the root uoffset at position 0 is not 0; rule 2).
    pub(crate) fn root(&mut self, what: &str) -> Result<Table, DecodeError> {
        self.need(0, 4, 4, "root uoffset")?;
        let root_off = rd_u32(self.buf, 0) as usize;
        if root_off == 0 {
            return Err(malformed("root uoffset 0 (points to itself)"));
        }
        self.table(root_off, what)
    }

    fn need(&self, pos: usize, size: usize, align: usize, what: &str) -> Result<(), DecodeError> {
        let n = self.buf.len();
        if pos.checked_add(size).is_none_or(|end| end > n) {
            return Err(malformed(format!(
                "{what}: {size} bytes at {pos} outside the {n}-byte buffer"
            )));
        }
        if !pos.is_multiple_of(align) {
            return Err(malformed(format!(
                "{what}: position {pos} not a multiple of {align}"
            )));
        }
        Ok(())
    }

    /// The table whose soffset is at `pos`.
    fn table(&mut self, pos: usize, what: &str) -> Result<Table, DecodeError> {
        self.need(pos, 4, 4, &format!("{what} table"))?;
        let soff = i64::from(rd_u32(self.buf, pos) as i32);
        let vt = usize::try_from(pos as i64 - soff)
            .map_err(|_| malformed(format!("{what} vtable before the buffer")))?;
        self.need(vt, 4, 2, &format!("{what} vtable"))?;
        let vsize = usize::from(rd_u16(self.buf, vt));
        if vsize < 4 || !vsize.is_multiple_of(2) {
            return Err(malformed(format!("{what} vtable size {vsize} invalid")));
        }
        if vt + vsize > self.buf.len() {
            return Err(malformed(format!("{what} vtable outside the buffer")));
        }
        self.spans.push((pos, pos + 4));
        Ok(Table { pos, vt, vsize })
    }

    /// Position of field `slot` (None when absent), checked to hold `size` bytes aligned to `size`.
    fn field(
        &mut self,
        t: Table,
        slot: usize,
        size: usize,
        what: &str,
    ) -> Result<Option<usize>, DecodeError> {
        let voff = 4 + 2 * slot;
        if voff + 2 > t.vsize {
            return Ok(None);
        }
        let off = usize::from(rd_u16(self.buf, t.vt + voff));
        if off == 0 {
            return Ok(None);
        }
        let p = t.pos + off;
        self.need(p, size, size, what)?;
        self.spans.push((p, p + size));
        Ok(Some(p))
    }

    pub(crate) fn u8(&mut self, t: Table, slot: usize, what: &str) -> Result<u8, DecodeError> {
        Ok(self.field(t, slot, 1, what)?.map_or(0, |p| self.buf[p]))
    }

    pub(crate) fn u16(&mut self, t: Table, slot: usize, what: &str) -> Result<u16, DecodeError> {
        Ok(self
            .field(t, slot, 2, what)?
            .map_or(0, |p| rd_u16(self.buf, p)))
    }

    pub(crate) fn u64(&mut self, t: Table, slot: usize, what: &str) -> Result<u64, DecodeError> {
        Ok(self
            .field(t, slot, 8, what)?
            .map_or(0, |p| rd_u64(self.buf, p)))
    }

    /// The target of the uoffset at `p` (already checked in bounds and aligned): not 0.
    fn follow(&self, p: usize, what: &str) -> Result<usize, DecodeError> {
        let uoff = rd_u32(self.buf, p) as usize;
        if uoff == 0 {
            return Err(malformed(format!("{what}: uoffset 0 (points to itself)")));
        }
        p.checked_add(uoff)
            .ok_or_else(|| malformed(format!("{what}: uoffset overflows")))
    }

    /// (start of the elements, element count) of a vector field, or None when absent.
    pub(crate) fn vector(
        &mut self,
        t: Table,
        slot: usize,
        elem: usize,
        what: &str,
    ) -> Result<Option<(usize, usize)>, DecodeError> {
        let Some(p) = self.field(t, slot, 4, what)? else {
            return Ok(None);
        };
        let target = self.follow(p, what)?;
        self.need(target, 4, 4, &format!("{what} length"))?;
        let count = rd_u32(self.buf, target) as usize;
        let start = target + 4;
        let end = count.checked_mul(elem).and_then(|b| start.checked_add(b));
        let Some(end) = end.filter(|&e| e <= self.buf.len()) else {
            return Err(malformed(format!(
                "{what} ({count} x {elem} bytes) outside the {}-byte buffer",
                self.buf.len()
            )));
        };
        self.spans.push((target, end));
        Ok(Some((start, count)))
    }

    /// DF-SEC-20: the collected objects are pairwise disjoint.
    pub(crate) fn check_disjoint(&mut self) -> Result<(), DecodeError> {
        self.spans.sort_unstable();
        for w in self.spans.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(malformed(format!(
                    "shared or overlapping objects: bytes [{}, {}) and [{}, {})",
                    w[0].0, w[0].1, w[1].0, w[1].1
                )));
            }
        }
        Ok(())
    }
}

struct RawEntry {
    origin: u64,
    incarnation: u64,
    seq: u64,
    hops: u8,
    /// (start, count) of each vector.
    indices: (usize, usize),
    values: Option<(usize, usize)>,
    values16: Option<(usize, usize)>,
    signature: Option<usize>,
    packed: Option<(usize, usize)>,
    values8: Option<(usize, usize)>,
    scale: f32,
}

// Field slots (schema order).
const P_VERSION_MAJOR: usize = 0;
const P_VERSION_MINOR: usize = 1;
const P_SENDER: usize = 2;
const P_SENDER_INC: usize = 3;
const P_FINGERPRINT: usize = 4;
const P_ENCODING: usize = 5;
const P_ENTRIES: usize = 6;
const P_HEARD: usize = 7;
const P_INDEX_ENCODING: usize = 8;
const E_ORIGIN: usize = 0;
const E_INCARNATION: usize = 1;
const E_SEQ: usize = 2;
const E_HOPS: usize = 3;
const E_INDICES: usize = 4;
const E_VALUES: usize = 5;
const E_VALUES16: usize = 6;
/// (1.1) slots 7..9 belong to the compact encodings.
const E_SIGNATURE: usize = 10;

/// The first two checks of [`decode_packet`], without parsing (DF-ZEN-154): `Oversize` or
/// `BadIdentifier` when decoding would reject `buf` with that code, else `None`. O(1).
pub fn screen(buf: &[u8], max_packet_size: usize) -> Option<ErrorCode> {
    if buf.len() > max_packet_size {
        Some(ErrorCode::Oversize)
    } else if buf.len() < 8 || &buf[4..8] != FILE_IDENTIFIER {
        Some(ErrorCode::BadIdentifier)
    } else {
        None
    }
}
const E_PACKED_INDICES: usize = 7;
const E_VALUES8: usize = 8;
const E_SCALE: usize = 9;

/// Decodes and checks a packet without context (check order in the module doc, spec DF-RCV-20).
/// Never panics, whatever `buf` holds; the buffer's address need not be aligned (DF-PKT-6).
/// REQ: DF-RCV-1.
pub fn decode_packet(buf: &[u8], max_packet_size: usize) -> Result<Packet<'_>, DecodeError> {
    if buf.len() > max_packet_size {
        return Err(DecodeError::new(
            ErrorCode::Oversize,
            format!("{} bytes > max_packet_size {}", buf.len(), max_packet_size),
        ));
    }
    if buf.len() < 8 || &buf[4..8] != FILE_IDENTIFIER {
        return Err(DecodeError::new(
            ErrorCode::BadIdentifier,
            "missing file identifier DFP1",
        ));
    }
    let mut r = Reader::new(buf);
    // step 3: the root table, its vtable and version_major readable
    let root = r.root("Packet")?;
    let version_major = r.u16(root, P_VERSION_MAJOR, "Packet.version_major")?;
    if version_major != VERSION_MAJOR {
        return Err(DecodeError::new(
            ErrorCode::UnsupportedVersion,
            format!("version_major {version_major}"),
        ));
    }
    // step 5: every other rule of section 6.7 and DF-PKT-2, DF-PKT-8
    let version_minor = r.u16(root, P_VERSION_MINOR, "Packet.version_minor")?;
    let sender = r.u64(root, P_SENDER, "Packet.sender")?;
    let sender_incarnation = r.u64(root, P_SENDER_INC, "Packet.sender_incarnation")?;
    let fp = r.vector(root, P_FINGERPRINT, 1, "Packet.fingerprint")?;
    let enc_raw = r.u8(root, P_ENCODING, "Packet.encoding")?;
    let entries_vec = r.vector(root, P_ENTRIES, 4, "Packet.entries")?;
    let ienc_raw = r.u8(root, P_INDEX_ENCODING, "Packet.index_encoding")?;
    let Some((fp_start, fp_len)) = fp else {
        return Err(malformed("Packet.fingerprint (required) missing"));
    };
    if fp_len != FINGERPRINT_SIZE {
        return Err(malformed(format!(
            "fingerprint has {fp_len} bytes, expected {FINGERPRINT_SIZE}"
        )));
    }
    let Some((ent_start, ent_count)) = entries_vec else {
        return Err(malformed("Packet.entries (required) missing"));
    };
    if sender == 0 {
        return Err(malformed("sender is 0"));
    }
    if sender_incarnation == 0 {
        return Err(malformed("sender_incarnation is 0"));
    }
    // (1.1, DF-PKT-60) Packet.heard: non-zero, strictly ascending
    let heard = match r.vector(root, P_HEARD, 8, "Packet.heard")? {
        None => None,
        Some((start, count)) => {
            let ids: Vec<u64> = (0..count).map(|i| rd_u64(buf, start + 8 * i)).collect();
            if ids.contains(&0) {
                return Err(malformed("Packet.heard holds node id 0"));
            }
            if ids.windows(2).any(|w| w[1] <= w[0]) {
                return Err(malformed("Packet.heard is not strictly ascending"));
            }
            Some(ids)
        }
    };
    let mut raw = Vec::with_capacity(ent_count);
    for j in 0..ent_count {
        let what = |f: &str| format!("entries[{j}].{f}");
        let table = r.follow(ent_start + 4 * j, &what("table"))?;
        let t = r.table(table, &format!("entries[{j}]"))?;
        let origin = r.u64(t, E_ORIGIN, &what("origin"))?;
        let incarnation = r.u64(t, E_INCARNATION, &what("incarnation"))?;
        let seq = r.u64(t, E_SEQ, &what("seq"))?;
        let hops = r.u8(t, E_HOPS, &what("hops"))?;
        let indices = r.vector(t, E_INDICES, 4, &what("indices"))?;
        let values = r.vector(t, E_VALUES, 4, &what("values"))?;
        let values16 = r.vector(t, E_VALUES16, 2, &what("values16"))?;
        let signature = r.vector(t, E_SIGNATURE, 1, &what("signature"))?;
        let packed = r.vector(t, E_PACKED_INDICES, 1, &what("packed_indices"))?;
        let values8 = r.vector(t, E_VALUES8, 1, &what("values8"))?;
        let scale = f32::from_bits(
            r.field(t, E_SCALE, 4, &what("scale"))?
                .map_or(0, |p| rd_u32(buf, p)),
        );
        let Some(indices) = indices else {
            return Err(malformed(what("indices (required) missing")));
        };
        if origin == 0 {
            return Err(malformed(format!("entries[{j}].origin is 0")));
        }
        if incarnation == 0 {
            return Err(malformed(format!("entries[{j}].incarnation is 0")));
        }
        if seq == 0 {
            return Err(malformed(format!("entries[{j}].seq is 0")));
        }
        // (1.1, DF-PKT-140) a signature is exactly 64 bytes
        let signature = match signature {
            None => None,
            Some((start, SIGNATURE_SIZE)) => Some(start),
            Some((_, n)) => {
                return Err(malformed(format!(
                    "entries[{j}].signature has {n} bytes, expected {SIGNATURE_SIZE}"
                )));
            }
        };
        raw.push(RawEntry {
            origin,
            incarnation,
            seq,
            hops,
            indices,
            values,
            values16,
            signature,
            packed,
            values8,
            scale,
        });
    }
    r.check_disjoint()?;
    // step 6
    let vc = by_wire(enc_raw).ok_or_else(|| {
        DecodeError::new(
            ErrorCode::UnsupportedEncoding,
            format!("encoding {enc_raw}"),
        )
    })?;
    let index_encoding = IndexEncoding::from_u8(ienc_raw).ok_or_else(|| {
        DecodeError::new(
            ErrorCode::UnsupportedEncoding,
            format!("index_encoding {ienc_raw}"),
        )
    })?;
    let encoding = vc.encoding;
    let field = match vc.carrier {
        Carrier::Values32 => "values",
        Carrier::Values16 { .. } => "values16",
        Carrier::Values8 => "values8",
    };
    let value_vec = |e: &RawEntry| -> Option<(usize, usize)> {
        match vc.carrier {
            Carrier::Values32 => e.values,
            Carrier::Values16 { .. } => e.values16,
            Carrier::Values8 => e.values8,
        }
    };
    // step 7
    for (j, e) in raw.iter().enumerate() {
        let present = usize::from(e.values.is_some())
            + usize::from(e.values16.is_some())
            + usize::from(e.values8.is_some());
        if value_vec(e).is_none() || present != 1 {
            return Err(malformed(format!(
                "entries[{j}]: {} packet needs {field} and no other values vector",
                vc.name
            )));
        }
    }
    let packed = index_encoding == IndexEncoding::Packed;
    for (j, e) in raw.iter().enumerate() {
        if packed && (e.packed.is_none() || e.indices.1 != 0) {
            return Err(malformed(format!(
                "entries[{j}]: PACKED entry needs packed_indices, empty indices"
            )));
        }
        if !packed && e.packed.is_some() {
            return Err(malformed(format!(
                "entries[{j}]: PLAIN entry with packed_indices"
            )));
        }
    }
    let q8 = matches!(vc.carrier, Carrier::Values8);
    if q8 {
        for (j, e) in raw.iter().enumerate() {
            if e.scale.is_finite() && e.scale.is_sign_negative() {
                return Err(malformed(format!("entries[{j}]: Q8 scale is negative")));
            }
        }
    }
    let mut unpacked: Vec<Vec<u32>> = Vec::new();
    if packed {
        for (j, e) in raw.iter().enumerate() {
            let (ps, pn) = e.packed.unwrap_or((0, 0));
            let mut out = Vec::new();
            unpack_indices(&buf[ps..ps + pn], &mut out).map_err(|err| {
                DecodeError::new(err.code, format!("entries[{j}]: {}", err.detail))
            })?;
            unpacked.push(out);
        }
    }
    let index_count = |j: usize, e: &RawEntry| -> usize {
        if packed {
            unpacked[j].len()
        } else {
            e.indices.1
        }
    };
    // step 8
    for (j, e) in raw.iter().enumerate() {
        let n = value_vec(e).map_or(0, |v| v.1);
        let k = index_count(j, e);
        if n != k {
            return Err(DecodeError::new(
                ErrorCode::LengthMismatch,
                format!("entries[{j}]: {n} values for {k} indices"),
            ));
        }
    }
    for (j, e) in raw.iter().enumerate() {
        if index_count(j, e) == 0 {
            return Err(DecodeError::new(
                ErrorCode::EmptyEntry,
                format!("entries[{j}] has no index"),
            ));
        }
    }
    let mut entries = Vec::with_capacity(raw.len());
    let mut unpacked = unpacked.into_iter();
    for e in &raw {
        let (vs, vn) = value_vec(e).unwrap_or((0, 0));
        let values: Cow<'_, [f32]> = match vc.carrier {
            Carrier::Values32 => f32s(&buf[vs..vs + 4 * vn]),
            Carrier::Values16 { decode, .. } => Cow::Owned(
                buf[vs..vs + 2 * vn]
                    .chunks_exact(2)
                    .map(|c| decode(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
            ),
            Carrier::Values8 => Cow::Owned(
                buf[vs..vs + vn]
                    .iter()
                    .map(|&q| f32::from(q as i8) * e.scale)
                    .collect(),
            ),
        };
        let indices: Cow<'_, [u32]> = if packed {
            Cow::Owned(unpacked.next().unwrap_or_default())
        } else {
            let (is, inn) = e.indices;
            u32s(&buf[is..is + 4 * inn])
        };
        entries.push(Entry {
            origin: e.origin,
            incarnation: e.incarnation,
            seq: e.seq,
            hops: e.hops,
            indices,
            values,
            signature: e.signature.map(|s| {
                let mut sig = [0u8; SIGNATURE_SIZE];
                sig.copy_from_slice(&buf[s..s + SIGNATURE_SIZE]);
                sig
            }),
        });
    }
    let mut unsorted_at = None;
    let mut duplicate_at = None;
    for (j, e) in entries.iter().enumerate() {
        let mut strictly = true;
        for w in e.indices.windows(2) {
            if w[1] <= w[0] {
                strictly = false;
                break;
            }
        }
        if strictly {
            continue;
        }
        if unsorted_at.is_none() && e.indices.windows(2).any(|w| w[1] < w[0]) {
            unsorted_at = Some(j);
        }
        if duplicate_at.is_none() && e.indices.windows(2).any(|w| w[1] == w[0]) {
            duplicate_at = Some(j);
        }
    }
    if let Some(j) = unsorted_at {
        return Err(DecodeError::new(
            ErrorCode::UnsortedIndices,
            format!("entries[{j}]: indices not ascending"),
        ));
    }
    if let Some(j) = duplicate_at {
        return Err(DecodeError::new(
            ErrorCode::DuplicateIndex,
            format!("entries[{j}]: duplicate index"),
        ));
    }
    if q8 {
        for (j, e) in raw.iter().enumerate() {
            check_q8_scale(e.scale).map_err(|err| {
                DecodeError::new(err.code, format!("entries[{j}]: {}", err.detail))
            })?;
        }
    }
    for (j, e) in entries.iter().enumerate() {
        if !e.values.iter().all(|v| v.is_finite()) {
            return Err(DecodeError::new(
                ErrorCode::NonFinite,
                format!("entries[{j}]: NaN or infinite value"),
            ));
        }
    }
    let mut fingerprint = [0u8; 32];
    fingerprint.copy_from_slice(&buf[fp_start..fp_start + FINGERPRINT_SIZE]);
    Ok(Packet {
        version_major,
        version_minor,
        sender,
        sender_incarnation,
        fingerprint,
        encoding,
        entries,
        heard,
        index_encoding,
    })
}

/// The header fields of a packet as far as they read, whatever else fails to decode: the sender,
/// its incarnation, the protocol version, the fingerprint and the two encodings (raw wire values).
/// What a node names a misconfigured peer by when its packets are rejected for
/// `UNSUPPORTED_VERSION`, `UNSUPPORTED_ENCODING`, `FINGERPRINT_MISMATCH` or `BAD_SIGNATURE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeader {
    /// `Packet.version_major`.
    pub version_major: u16,
    /// `Packet.version_minor`.
    pub version_minor: u16,
    /// `Packet.sender` (0 when absent).
    pub sender: u64,
    /// `Packet.sender_incarnation` (0 when absent).
    pub sender_incarnation: u64,
    /// `Packet.fingerprint` when it has 32 bytes.
    pub fingerprint: Option<[u8; FINGERPRINT_SIZE]>,
    /// `Packet.encoding` as on the wire.
    pub encoding: u8,
    /// `Packet.index_encoding` as on the wire.
    pub index_encoding: u8,
}

/// [`PacketHeader`] of `buf`: `None` unless the file identifier, the root table and every header
/// field read in bounds (nothing else is checked).
pub fn peek_header(buf: &[u8]) -> Option<PacketHeader> {
    if buf.len() < 8 || &buf[4..8] != FILE_IDENTIFIER {
        return None;
    }
    let mut r = Reader::new(buf);
    let root = r.root("Packet").ok()?;
    let version_major = r.u16(root, P_VERSION_MAJOR, "Packet.version_major").ok()?;
    let version_minor = r.u16(root, P_VERSION_MINOR, "Packet.version_minor").ok()?;
    let sender = r.u64(root, P_SENDER, "Packet.sender").ok()?;
    let sender_incarnation = r
        .u64(root, P_SENDER_INC, "Packet.sender_incarnation")
        .ok()?;
    let encoding = r.u8(root, P_ENCODING, "Packet.encoding").ok()?;
    let index_encoding = r.u8(root, P_INDEX_ENCODING, "Packet.index_encoding").ok()?;
    let fingerprint = match r.vector(root, P_FINGERPRINT, 1, "Packet.fingerprint") {
        Ok(Some((start, FINGERPRINT_SIZE))) => buf
            .get(start..start + FINGERPRINT_SIZE)
            .and_then(|b| b.try_into().ok()),
        _ => None,
    };
    Some(PacketHeader {
        version_major,
        version_minor,
        sender,
        sender_incarnation,
        fingerprint,
        encoding,
        index_encoding,
    })
}

/// Context checks of a decoded packet, in this order, each over all entries:
/// `FINGERPRINT_MISMATCH`, `HOP_LIMIT`, `INDEX_OUT_OF_RANGE`. REQ: DF-RCV-1.
pub fn validate_packet(
    packet: &Packet<'_>,
    fingerprint: &[u8; 32],
    num_params: u64,
    hop_limit: u8,
) -> Result<(), DecodeError> {
    if &packet.fingerprint != fingerprint {
        return Err(DecodeError::new(
            ErrorCode::FingerprintMismatch,
            format!(
                "packet {} != local {}",
                hex::encode(packet.fingerprint),
                hex::encode(fingerprint)
            ),
        ));
    }
    for (j, e) in packet.entries.iter().enumerate() {
        if e.hops > hop_limit {
            return Err(DecodeError::new(
                ErrorCode::HopLimit,
                format!("entries[{j}]: hops {} > hop_limit {hop_limit}", e.hops),
            ));
        }
    }
    for (j, e) in packet.entries.iter().enumerate() {
        // indices are ascending after decode: the last one is the largest
        if let Some(&last) = e.indices.iter().max()
            && u64::from(last) >= num_params
        {
            return Err(DecodeError::new(
                ErrorCode::IndexOutOfRange,
                format!("entries[{j}]: index {last} >= num_params {num_params}"),
            ));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Encoding
// ------------------------------------------------------------------------------------------------

/// Serialises `packet` with the generated builder. Values are encoded per `packet.encoding`
/// (F16/BF16: round to nearest even, clamped to the finite range; Q8: one scale per entry) and
/// indices per `packet.index_encoding`. The encoder writes what it is given (no protocol checks),
/// so tests can build faulty packets; [`decode_packet`] checks.
///
/// # Panics
/// When a form of 1.1 cannot represent an entry: `PACKED` with indices that are not strictly
/// increasing, `Q8` with a non-finite value (a node never sends either: DF-GEN-3, DF-GEN-9).
pub fn encode_packet(packet: &OwnedPacket) -> Vec<u8> {
    let bound = PACKET_OVERHEAD_BOUND
        + packet.fingerprint.len()
        + packet
            .entries
            .iter()
            .map(|e| {
                entry_size_bound(e.indices.len().max(e.values.len()))
                    + e.signature
                        .as_ref()
                        .map_or(0, |s| SIGNATURE_SIZE_BOUND + s.len())
            })
            .sum::<usize>()
        + packet
            .heard
            .as_ref()
            .map_or(0, |h| heard_size_bound(h.len()));
    let mut b = FlatBufferBuilder::with_capacity(bound.min(1 << 31));
    let mut offs: Vec<WIPOffset<fb::Entry<'_>>> = Vec::with_capacity(packet.entries.len());
    let mut bits16: Vec<u16> = Vec::new();
    let packed = packet.index_encoding == IndexEncoding::Packed;
    for e in &packet.entries {
        let (idx, packed_indices) = if packed {
            // an entry without index has no packed form: written as the empty delta form, which
            // a receiver rejects as EMPTY_ENTRY (the encoder writes what it is given)
            let bytes = if e.indices.is_empty() {
                vec![crate::compact::FORM_DELTA]
            } else {
                encode_indices(&e.indices)
                    .expect("PACKED encoding needs strictly increasing indices")
            };
            (
                b.create_vector::<u32>(&[]),
                Some(b.create_vector(&bytes[..])),
            )
        } else {
            (b.create_vector(&e.indices[..]), None)
        };
        let (mut vals, mut vals16, mut vals8, mut scale) = (None, None, None, 0.0f32);
        match codec(packet.encoding).carrier {
            Carrier::Values32 => vals = Some(b.create_vector(&e.values[..])),
            Carrier::Values16 { encode, .. } => {
                bits16.clear();
                bits16.extend(e.values.iter().map(|&v| encode(v)));
                vals16 = Some(b.create_vector(&bits16[..]));
            }
            Carrier::Values8 => {
                let (s, q) =
                    q8_encode(&e.values).expect("Q8 encoding needs finite values (DF-GEN-9)");
                scale = s;
                vals8 = Some(b.create_vector(&q[..]));
            }
        }
        let signature = e.signature.as_ref().map(|s| b.create_vector(&s[..]));
        offs.push(fb::Entry::create(
            &mut b,
            &fb::EntryArgs {
                origin: e.origin,
                incarnation: e.incarnation,
                seq: e.seq,
                hops: e.hops,
                indices: Some(idx),
                values: vals,
                values16: vals16,
                signature,
                packed_indices,
                values8: vals8,
                scale,
            },
        ));
    }
    let entries = b.create_vector(&offs[..]);
    let fp = b.create_vector(&packet.fingerprint[..]);
    let heard = packet.heard.as_ref().map(|h| b.create_vector(&h[..]));
    let root = fb::Packet::create(
        &mut b,
        &fb::PacketArgs {
            version_major: packet.version_major,
            version_minor: packet.version_minor,
            sender: packet.sender,
            sender_incarnation: packet.sender_incarnation,
            fingerprint: Some(fp),
            encoding: fb::ValueEncoding(packet.encoding.to_u8()),
            entries: Some(entries),
            heard,
            index_encoding: fb::IndexEncoding(packet.index_encoding.to_u8()),
        },
    );
    fb::finish_packet_buffer(&mut b, root);
    b.finished_data().to_vec()
}

// ------------------------------------------------------------------------------------------------
// JSON (spec/protocol.md Appendix B.2)
// ------------------------------------------------------------------------------------------------

/// A JSON value that is not the packet (or entry, id, value) it should be (spec Appendix B.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError(pub String);

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JsonError {}

impl From<String> for JsonError {
    fn from(s: String) -> Self {
        JsonError(s)
    }
}

impl From<&str> for JsonError {
    fn from(s: &str) -> Self {
        JsonError(s.to_string())
    }
}

/// The message, for callers that report errors as strings.
impl From<JsonError> for String {
    fn from(e: JsonError) -> String {
        e.0
    }
}

/// A u64 as 16 lowercase hex digits.
pub fn hex16(x: u64) -> String {
    format!("{x:016x}")
}

/// An f32 as a JSON value: a number (the f64 of the f32, printed shortest) or `"nan"`/`"inf"`/`"-inf"`.
pub fn f32_to_json(v: f32) -> Value {
    if v.is_nan() {
        Value::from("nan")
    } else if v.is_infinite() {
        Value::from(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(f64::from(v))
    }
}

/// Inverse of [`f32_to_json`] (a number is rounded to the nearest f32).
pub fn f32_from_json(v: &Value) -> Result<f32, JsonError> {
    match v {
        Value::String(s) => match s.as_str() {
            "nan" => Ok(f32::NAN),
            "inf" => Ok(f32::INFINITY),
            "-inf" => Ok(f32::NEG_INFINITY),
            _ => Err(JsonError(format!("bad value {s:?}"))),
        },
        Value::Number(n) => n
            .as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| JsonError(format!("bad value {n}"))),
        other => Err(JsonError(format!("bad value {other}"))),
    }
}

fn entry_json(
    origin: u64,
    incarnation: u64,
    seq: u64,
    hops: u8,
    indices: &[u32],
    values: &[f32],
    signature: Option<&[u8]>,
) -> Value {
    let mut v = json!({
        "origin": hex16(origin),
        "incarnation": hex16(incarnation),
        "seq": seq,
        "hops": hops,
        "indices": indices,
        "values": values.iter().map(|&v| f32_to_json(v)).collect::<Vec<_>>(),
    });
    if let (Some(s), Some(obj)) = (signature, v.as_object_mut()) {
        obj.insert("signature".into(), Value::String(hex::encode(s))); // 1.1, DF-PKT-140
    }
    v
}

/// The JSON object of spec Appendix B.2 (also `inspect` output).
pub fn packet_to_json(p: &Packet<'_>) -> Value {
    let mut v = json!({
        "version_major": p.version_major,
        "version_minor": p.version_minor,
        "sender": hex16(p.sender),
        "sender_incarnation": hex16(p.sender_incarnation),
        "fingerprint": hex::encode(p.fingerprint),
        "encoding": p.encoding.name(),
        "entries": p.entries.iter().map(|e| entry_json(e.origin, e.incarnation, e.seq, e.hops, &e.indices, &e.values, e.signature.as_ref().map(|s| &s[..]))).collect::<Vec<_>>(),
    });
    add_heard_json(&mut v, p.heard.as_deref());
    add_index_encoding_json(&mut v, p.index_encoding);
    v
}

/// The optional `index_encoding` member (1.1): present only when not `PLAIN`.
fn add_index_encoding_json(v: &mut Value, ie: IndexEncoding) {
    if let (IndexEncoding::Packed, Some(obj)) = (ie, v.as_object_mut()) {
        obj.insert("index_encoding".into(), Value::from(ie.name()));
    }
}

/// The optional `heard` member (1.1): present only when the packet carries the field.
fn add_heard_json(v: &mut Value, heard: Option<&[u64]>) {
    if let (Some(h), Some(obj)) = (heard, v.as_object_mut()) {
        obj.insert(
            "heard".into(),
            Value::Array(h.iter().map(|&x| Value::String(hex16(x))).collect()),
        );
    }
}

/// The JSON of an owned packet, values as a receiver decodes them (quantized per the encoding).
pub fn owned_packet_to_json(p: &OwnedPacket) -> Value {
    let mut v = json!({
        "version_major": p.version_major,
        "version_minor": p.version_minor,
        "sender": hex16(p.sender),
        "sender_incarnation": hex16(p.sender_incarnation),
        "fingerprint": hex::encode(&p.fingerprint),
        "encoding": p.encoding.name(),
        "entries": p.entries.iter().map(|e| {
            let mut q = e.values.clone();
            p.encoding.codec().quantize_slice(&mut q); // per entry (Q8: one scale per entry)
            entry_json(e.origin, e.incarnation, e.seq, e.hops, &e.indices, &q, e.signature.as_deref())
        }).collect::<Vec<_>>(),
    });
    add_heard_json(&mut v, p.heard.as_deref());
    add_index_encoding_json(&mut v, p.index_encoding);
    v
}

/// Parses a 16-hex-digit id (or a JSON integer).
pub fn u64_from_json(v: &Value, what: &str) -> Result<u64, JsonError> {
    match v {
        Value::String(s) => {
            u64::from_str_radix(s, 16).map_err(|e| JsonError(format!("{what}: {e}")))
        }
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| JsonError(format!("{what}: not a u64"))),
        _ => Err(JsonError(format!("{what}: expected a hex string"))),
    }
}

fn get<'v>(v: &'v Value, key: &str) -> Result<&'v Value, String> {
    v.get(key).ok_or_else(|| format!("missing key {key:?}"))
}

fn as_u64(v: &Value, what: &str) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("{what}: not an unsigned integer"))
}

/// An entry from its JSON object.
pub fn entry_from_json(e: &Value) -> Result<OwnedEntry, JsonError> {
    let indices = get(e, "indices")?
        .as_array()
        .ok_or("indices: not a list")?
        .iter()
        .map(|x| {
            as_u64(x, "index").and_then(|i| u32::try_from(i).map_err(|_| "index > u32".to_string()))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    let values = get(e, "values")?
        .as_array()
        .ok_or("values: not a list")?
        .iter()
        .map(f32_from_json)
        .collect::<Result<Vec<f32>, JsonError>>()?;
    let hops = as_u64(get(e, "hops")?, "hops")?;
    Ok(OwnedEntry {
        origin: u64_from_json(get(e, "origin")?, "origin")?,
        incarnation: u64_from_json(get(e, "incarnation")?, "incarnation")?,
        seq: as_u64(get(e, "seq")?, "seq")?,
        hops: u8::try_from(hops).map_err(|_| "hops > 255".to_string())?,
        indices,
        values,
        signature: match e.get("signature") {
            None | Some(Value::Null) => None,
            Some(s) => Some(
                hex::decode(s.as_str().ok_or("signature: not a hex string")?)
                    .map_err(|e| JsonError(format!("signature: {e}")))?,
            ),
        },
    })
}

/// Inverse of [`packet_to_json`].
pub fn packet_from_json(v: &Value) -> Result<OwnedPacket, JsonError> {
    let entries = get(v, "entries")?
        .as_array()
        .ok_or("entries: not a list")?
        .iter()
        .map(entry_from_json)
        .collect::<Result<Vec<_>, _>>()?;
    let enc = match v.get("encoding") {
        None => ValueEncoding::F32,
        Some(e) => e
            .as_str()
            .and_then(ValueEncoding::from_name)
            .ok_or("bad encoding")?,
    };
    let ver = |k: &str, d: u16| -> Result<u16, String> {
        match v.get(k) {
            None => Ok(d),
            Some(x) => u16::try_from(as_u64(x, k)?).map_err(|_| format!("{k} > u16")),
        }
    };
    Ok(OwnedPacket {
        version_major: ver("version_major", VERSION_MAJOR)?,
        version_minor: ver("version_minor", VERSION_MINOR)?,
        sender: u64_from_json(get(v, "sender")?, "sender")?,
        sender_incarnation: u64_from_json(get(v, "sender_incarnation")?, "sender_incarnation")?,
        fingerprint: hex::decode(
            get(v, "fingerprint")?
                .as_str()
                .ok_or("fingerprint: not a string")?,
        )
        .map_err(|e| format!("fingerprint: {e}"))?,
        encoding: enc,
        entries,
        index_encoding: match v.get("index_encoding") {
            None => IndexEncoding::Plain,
            Some(e) => e
                .as_str()
                .and_then(IndexEncoding::from_name)
                .ok_or("bad index_encoding")?,
        },
        heard: match v.get("heard") {
            None | Some(Value::Null) => None,
            Some(h) => Some(
                h.as_array()
                    .ok_or("heard: not a list")?
                    .iter()
                    .map(|x| u64_from_json(x, "heard"))
                    .collect::<Result<Vec<u64>, JsonError>>()?,
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_and_copying_paths_agree() {
        let mut p = OwnedPacket::new(1, 1, [0; 32], ValueEncoding::F32);
        p.entries.push(OwnedEntry {
            origin: 1,
            incarnation: 1,
            seq: 1,
            hops: 0,
            indices: vec![1, 2, 3],
            values: vec![0.5, -1.5, 3.25],
            signature: None,
        });
        let buf = encode_packet(&p);
        let e = fb::root_as_packet(&buf).expect("verifies").entries().get(0);
        let v = e.values().expect("values");
        assert_eq!(&f32s(v.bytes())[..], &f32s_copy(v.bytes())[..]);
        assert_eq!(&f32s(v.bytes())[..], &[0.5, -1.5, 3.25]);
        assert_eq!(
            &u32s(e.indices().bytes())[..],
            &u32s_copy(e.indices().bytes())[..]
        );
        assert_eq!(u32s_copy(&[1, 0, 0, 0, 2, 0, 0, 0]), vec![1, 2]);
    }

    #[test]
    fn f32_json_form_shows_floats_and_names_non_finite_values() {
        // REQ: DF-CNF-20
        let text = |x: f32| serde_json::to_string(&f32_to_json(x)).expect("json");
        assert_eq!(text(-0.0), "-0.0");
        assert_eq!(text(1.0), "1.0");
        // an integral value far from 1 still shows it is a float (an exponent)
        let big = text(2f32.powi(60));
        assert!(big.contains('e') && !big.contains(' '), "{big}");
        assert_eq!(text(f32::INFINITY), "\"inf\"");
        assert_eq!(text(f32::NEG_INFINITY), "\"-inf\"");
        assert_eq!(text(f32::NAN), "\"nan\"");
        // a reader takes the integer form -0 as -0.0
        let v: Value = serde_json::from_str("-0").expect("json");
        assert_eq!(f32_from_json(&v).expect("f32").to_bits(), 0x8000_0000);
        let v: Value = serde_json::from_str("\"inf\"").expect("json");
        assert_eq!(f32_from_json(&v).expect("f32"), f32::INFINITY);
    }

    #[test]
    fn misaligned_positions_are_malformed_but_addresses_do_not_matter() {
        // REQ: DF-PKT-21
        let mut p = OwnedPacket::new(1, 1, [7; 32], ValueEncoding::F32);
        p.entries.push(OwnedEntry {
            origin: 1,
            incarnation: 1,
            seq: 1,
            hops: 0,
            indices: vec![1, 2, 3],
            values: vec![0.5, -1.5, 3.25],
            signature: None,
        });
        let buf = encode_packet(&p);
        // at an odd address: accepted
        let mut shifted = vec![0u8; buf.len() + 1];
        shifted[1..].copy_from_slice(&buf);
        assert!(decode_packet(&shifted[1..], DEFAULT_MAX_PACKET_SIZE).is_ok());
        // every object moved by k bytes after the identifier (root offset fixed): misaligned
        // unless k is a multiple of 8
        for k in 1..=8usize {
            let root = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize + k;
            let mut moved = Vec::with_capacity(buf.len() + k);
            moved.extend_from_slice(&(root as u32).to_le_bytes());
            moved.extend_from_slice(&buf[4..8]);
            moved.extend(std::iter::repeat_n(0u8, k));
            moved.extend_from_slice(&buf[8..]);
            let r = decode_packet(&moved, DEFAULT_MAX_PACKET_SIZE);
            if k == 8 {
                assert!(r.is_ok(), "k = 8: {r:?}");
            } else {
                assert_eq!(
                    r.expect_err("misaligned").code,
                    ErrorCode::Malformed,
                    "k = {k}"
                );
            }
        }
    }
}
