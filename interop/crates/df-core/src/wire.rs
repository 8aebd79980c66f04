//! The packet wire format (spec section 6, DF-PKT) and receive-side checks (section 7, DF-RCV-1).
//!
//! Check order of [`decode_packet`] (context-free; with several faults the first found is reported):
//! 1. `OVERSIZE`, 2. `BAD_IDENTIFIER`, 3. `MALFORMED` when the root table is not readable,
//! 4. `UNSUPPORTED_VERSION` (read by hand as soon as the root table is readable),
//! 5. `MALFORMED`: the generated FlatBuffers verifier with tight [`flatbuffers::VerifierOptions`],
//!    then fingerprint length, non-zero sender / sender_incarnation / origin / incarnation / seq,
//! 6. `UNSUPPORTED_ENCODING`, 7. `MALFORMED` for a values vector not matching the encoding,
//! 8. `LENGTH_MISMATCH`, `EMPTY_ENTRY`, `UNSORTED_INDICES`, `DUPLICATE_INDEX`, `NON_FINITE`
//!    (each over all entries before the next).
//!
//! [`validate_packet`] then checks `FINGERPRINT_MISMATCH`, `HOP_LIMIT`, `INDEX_OUT_OF_RANGE`.
//! This is the same order as the Python reference (`delta_fabric.wire`).

use std::borrow::Cow;
use std::fmt;

use flatbuffers::{FlatBufferBuilder, VerifierOptions, WIPOffset};
use serde_json::{Value, json};

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
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------------

fn malformed(detail: impl Into<String>) -> DecodeError {
    DecodeError::new(ErrorCode::Malformed, detail)
}

fn rd_u16(b: &[u8], pos: usize) -> Option<u16> {
    let s = b.get(pos..pos.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

fn rd_u32(b: &[u8], pos: usize) -> Option<u32> {
    let s = b.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// `Some(version_major)` when the root table and its vtable are in bounds (absent field: 0).
fn read_version_major(buf: &[u8]) -> Option<u16> {
    let pos = rd_u32(buf, 0)? as usize;
    let soff = rd_u32(buf, pos)? as i32 as i64;
    let vt = usize::try_from(pos as i64 - soff).ok()?;
    let vsize = rd_u16(buf, vt)? as usize;
    if vsize < 4 || !vsize.is_multiple_of(2) || vt.checked_add(vsize)? > buf.len() {
        return None;
    }
    if vsize < 6 {
        return Some(0);
    }
    let off = rd_u16(buf, vt + 4)? as usize;
    if off == 0 {
        return Some(0);
    }
    rd_u16(buf, pos.checked_add(off)?)
}

/// Little-endian u32s of a vector: borrowed when aligned (fast path), copied otherwise.
pub(crate) fn u32s<'a>(v: flatbuffers::Vector<'a, u32>) -> Cow<'a, [u32]> {
    if cfg!(target_endian = "little")
        && let Ok(s) = bytemuck::try_cast_slice::<u8, u32>(v.bytes())
    {
        return Cow::Borrowed(s);
    }
    Cow::Owned(u32s_copy(v.bytes()))
}

/// Little-endian f32s of a vector: borrowed when aligned (fast path), copied otherwise.
pub(crate) fn f32s<'a>(v: flatbuffers::Vector<'a, f32>) -> Cow<'a, [f32]> {
    if cfg!(target_endian = "little")
        && let Ok(s) = bytemuck::try_cast_slice::<u8, f32>(v.bytes())
    {
        return Cow::Borrowed(s);
    }
    Cow::Owned(f32s_copy(v.bytes()))
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

/// Verifier options sized to the buffer: no deeper than the schema, at most one table per 4 bytes,
/// and an apparent size of a few times the buffer (bounds the work on overlapping vectors).
fn verifier_options(len: usize) -> VerifierOptions {
    VerifierOptions {
        max_depth: 8,
        max_tables: len / 4 + 2,
        max_apparent_size: len.saturating_mul(4).saturating_add(1024),
        ignore_missing_null_terminator: false,
    }
}

struct RawEntry<'a> {
    origin: u64,
    incarnation: u64,
    seq: u64,
    hops: u8,
    indices: flatbuffers::Vector<'a, u32>,
    values: Option<flatbuffers::Vector<'a, f32>>,
    values16: Option<flatbuffers::Vector<'a, u16>>,
}

/// Decodes and checks a packet without context (check order in the module doc). Never panics,
/// whatever `buf` holds; the buffer need not be aligned. REQ: DF-RCV-1.
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
    let version_major =
        read_version_major(buf).ok_or_else(|| malformed("root table or vtable out of bounds"))?;
    if version_major != VERSION_MAJOR {
        return Err(DecodeError::new(
            ErrorCode::UnsupportedVersion,
            format!("version_major {version_major}"),
        ));
    }
    let opts = verifier_options(buf.len());
    let p = fb::root_as_packet_with_opts(&opts, buf).map_err(|e| malformed(e.to_string()))?;
    let fp = p.fingerprint();
    if fp.len() != FINGERPRINT_SIZE {
        return Err(malformed(format!(
            "fingerprint has {} bytes, expected {FINGERPRINT_SIZE}",
            fp.len()
        )));
    }
    if p.sender() == 0 {
        return Err(malformed("sender is 0"));
    }
    if p.sender_incarnation() == 0 {
        return Err(malformed("sender_incarnation is 0"));
    }
    let fbe = p.entries();
    let mut raw = Vec::with_capacity(fbe.len());
    for (j, e) in fbe.iter().enumerate() {
        if e.origin() == 0 {
            return Err(malformed(format!("entries[{j}].origin is 0")));
        }
        if e.incarnation() == 0 {
            return Err(malformed(format!("entries[{j}].incarnation is 0")));
        }
        if e.seq() == 0 {
            return Err(malformed(format!("entries[{j}].seq is 0")));
        }
        raw.push(RawEntry {
            origin: e.origin(),
            incarnation: e.incarnation(),
            seq: e.seq(),
            hops: e.hops(),
            indices: e.indices(),
            values: e.values(),
            values16: e.values16(),
        });
    }
    let enc_raw = p.encoding().0;
    let vc = by_wire(enc_raw).ok_or_else(|| {
        DecodeError::new(
            ErrorCode::UnsupportedEncoding,
            format!("encoding {enc_raw}"),
        )
    })?;
    let encoding = vc.encoding;
    let wide = vc.is_wide();
    for (j, e) in raw.iter().enumerate() {
        let ok = if wide {
            e.values.is_some() && e.values16.is_none()
        } else {
            e.values16.is_some() && e.values.is_none()
        };
        if !ok {
            let (want, other) = if wide {
                ("values", "values16")
            } else {
                ("values16", "values")
            };
            return Err(malformed(format!(
                "entries[{j}]: {} packet needs {want} and no {other}",
                vc.name
            )));
        }
    }
    let value_len = |e: &RawEntry<'_>| -> usize {
        match (e.values, e.values16) {
            (Some(v), _) if wide => v.len(),
            (_, Some(v)) if !wide => v.len(),
            _ => 0,
        }
    };
    for (j, e) in raw.iter().enumerate() {
        let n = value_len(e);
        if n != e.indices.len() {
            return Err(DecodeError::new(
                ErrorCode::LengthMismatch,
                format!("entries[{j}]: {n} values for {} indices", e.indices.len()),
            ));
        }
    }
    for (j, e) in raw.iter().enumerate() {
        if e.indices.is_empty() {
            return Err(DecodeError::new(
                ErrorCode::EmptyEntry,
                format!("entries[{j}] has no index"),
            ));
        }
    }
    let mut entries = Vec::with_capacity(raw.len());
    for e in &raw {
        let values: Cow<'_, [f32]> = match vc.carrier {
            Carrier::Values32 => match e.values {
                Some(v) => f32s(v),
                None => Cow::Owned(Vec::new()),
            },
            Carrier::Values16 { decode, .. } => {
                let bits = e.values16.map(|v| v.bytes()).unwrap_or(&[]);
                Cow::Owned(
                    bits.chunks_exact(2)
                        .map(|c| decode(u16::from_le_bytes([c[0], c[1]])))
                        .collect(),
                )
            }
        };
        entries.push(Entry {
            origin: e.origin,
            incarnation: e.incarnation,
            seq: e.seq,
            hops: e.hops,
            indices: u32s(e.indices),
            values,
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
    for (j, e) in entries.iter().enumerate() {
        if !e.values.iter().all(|v| v.is_finite()) {
            return Err(DecodeError::new(
                ErrorCode::NonFinite,
                format!("entries[{j}]: NaN or infinite value"),
            ));
        }
    }
    let mut fingerprint = [0u8; 32];
    fingerprint.copy_from_slice(fp.bytes());
    Ok(Packet {
        version_major,
        version_minor: p.version_minor(),
        sender: p.sender(),
        sender_incarnation: p.sender_incarnation(),
        fingerprint,
        encoding,
        entries,
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
/// (F16/BF16: round to nearest even, clamped to the finite range). The encoder writes what it is
/// given (no protocol checks), so tests can build faulty packets; [`decode_packet`] checks.
pub fn encode_packet(packet: &OwnedPacket) -> Vec<u8> {
    let bound = PACKET_OVERHEAD_BOUND
        + packet.fingerprint.len()
        + packet
            .entries
            .iter()
            .map(|e| entry_size_bound(e.indices.len().max(e.values.len())))
            .sum::<usize>();
    let mut b = FlatBufferBuilder::with_capacity(bound.min(1 << 31));
    let mut offs: Vec<WIPOffset<fb::Entry<'_>>> = Vec::with_capacity(packet.entries.len());
    let mut bits16: Vec<u16> = Vec::new();
    for e in &packet.entries {
        let idx = b.create_vector(&e.indices[..]);
        let (vals, vals16) = match codec(packet.encoding).carrier {
            Carrier::Values32 => (Some(b.create_vector(&e.values[..])), None),
            Carrier::Values16 { encode, .. } => {
                bits16.clear();
                bits16.extend(e.values.iter().map(|&v| encode(v)));
                (None, Some(b.create_vector(&bits16[..])))
            }
        };
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
            },
        ));
    }
    let entries = b.create_vector(&offs[..]);
    let fp = b.create_vector(&packet.fingerprint[..]);
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
) -> Value {
    json!({
        "origin": hex16(origin),
        "incarnation": hex16(incarnation),
        "seq": seq,
        "hops": hops,
        "indices": indices,
        "values": values.iter().map(|&v| f32_to_json(v)).collect::<Vec<_>>(),
    })
}

/// The JSON object of spec Appendix B.2 (also `inspect` output).
pub fn packet_to_json(p: &Packet<'_>) -> Value {
    json!({
        "version_major": p.version_major,
        "version_minor": p.version_minor,
        "sender": hex16(p.sender),
        "sender_incarnation": hex16(p.sender_incarnation),
        "fingerprint": hex::encode(p.fingerprint),
        "encoding": p.encoding.name(),
        "entries": p.entries.iter().map(|e| entry_json(e.origin, e.incarnation, e.seq, e.hops, &e.indices, &e.values)).collect::<Vec<_>>(),
    })
}

/// The JSON of an owned packet, values as a receiver decodes them (quantized per the encoding).
pub fn owned_packet_to_json(p: &OwnedPacket) -> Value {
    json!({
        "version_major": p.version_major,
        "version_minor": p.version_minor,
        "sender": hex16(p.sender),
        "sender_incarnation": hex16(p.sender_incarnation),
        "fingerprint": hex::encode(&p.fingerprint),
        "encoding": p.encoding.name(),
        "entries": p.entries.iter().map(|e| {
            let q: Vec<f32> = e.values.iter().map(|&v| p.encoding.quantize(v)).collect();
            entry_json(e.origin, e.incarnation, e.seq, e.hops, &e.indices, &q)
        }).collect::<Vec<_>>(),
    })
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
        });
        let buf = encode_packet(&p);
        let e = fb::root_as_packet(&buf).expect("verifies").entries().get(0);
        let v = e.values().expect("values");
        assert_eq!(&f32s(v)[..], &f32s_copy(v.bytes())[..]);
        assert_eq!(&f32s(v)[..], &[0.5, -1.5, 3.25]);
        assert_eq!(&u32s(e.indices())[..], &u32s_copy(e.indices().bytes())[..]);
        assert_eq!(u32s_copy(&[1, 0, 0, 0, 2, 0, 0, 0]), vec![1, 2]);
    }
}
