//! Compact index and value encodings (spec section 6.8, added in 1.1, OPTIONAL): `PACKED` indices
//! and `Q8` values, used by [`crate::wire`] and the encodings table. Same codecs, bytes and errors
//! as the Python `delta_fabric.compact`.
//!
//! Indices (ascending, duplicate-free u32) travel as one byte string whose first byte names its form:
//! [`FORM_DELTA`] (LEB128 varints: the first index, then every gap) or [`FORM_BITMAP`] (a varint base,
//! then bitmap bytes, least significant bit first). Values: `Q8`, one signed byte per value and one
//! f32 scale per entry (a power of two), decoded as `fl32(q * scale)`.

use crate::error::{DecodeError, ErrorCode};

/// How the indices of every entry of one packet are encoded (schema enum `IndexEncoding`, 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IndexEncoding {
    /// uint32 in `Entry.indices` (1.0).
    #[default]
    Plain,
    /// `Entry.packed_indices`: delta + varint or bitmap; `Entry.indices` empty (OPTIONAL).
    Packed,
}

impl IndexEncoding {
    /// Both encodings, in wire-value order.
    pub const ALL: [IndexEncoding; 2] = [IndexEncoding::Plain, IndexEncoding::Packed];
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        self as u8
    }
    /// From the wire value; `None` for an unknown one (`UNSUPPORTED_ENCODING`).
    pub fn from_u8(v: u8) -> Option<IndexEncoding> {
        Self::ALL.get(usize::from(v)).copied()
    }
    /// `"PLAIN"` or `"PACKED"` (the JSON and config spelling).
    pub fn name(self) -> &'static str {
        match self {
            IndexEncoding::Plain => "PLAIN",
            IndexEncoding::Packed => "PACKED",
        }
    }
    /// Inverse of [`IndexEncoding::name`] (case-insensitive, as the config reads it).
    pub fn from_name(s: &str) -> Option<IndexEncoding> {
        Self::ALL
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// First byte of delta + varint packed indices.
pub const FORM_DELTA: u8 = 0;
/// First byte of bitmap packed indices.
pub const FORM_BITMAP: u8 = 1;

const MAX_VARINT: usize = 5;

fn push_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u32) -> usize {
    let mut n = 1;
    let mut x = v >> 7;
    while x > 0 {
        n += 1;
        x >>= 7;
    }
    n
}

fn malformed(detail: &str) -> DecodeError {
    DecodeError::new(ErrorCode::Malformed, format!("packed indices: {detail}"))
}

/// Reads one varint at `pos`; returns the value and the position after it.
fn read_varint(data: &[u8], pos: usize) -> Result<(u64, usize), DecodeError> {
    let mut v: u64 = 0;
    for k in 0..MAX_VARINT {
        let Some(&b) = data.get(pos + k) else {
            return Err(malformed("truncated varint"));
        };
        v |= u64::from(b & 0x7F) << (7 * k);
        if b & 0x80 == 0 {
            if k > 0 && b == 0 {
                return Err(malformed("overlong varint"));
            }
            if v >= 1 << 32 {
                return Err(malformed("varint value >= 2**32"));
            }
            return Ok((v, pos + k + 1));
        }
    }
    Err(malformed("varint longer than 5 bytes"))
}

fn check_sorted(indices: &[u32]) -> Result<(), &'static str> {
    if indices.is_empty() {
        return Err("indices must not be empty");
    }
    if indices.windows(2).any(|w| w[1] <= w[0]) {
        return Err("indices must be strictly increasing");
    }
    Ok(())
}

/// [`FORM_DELTA`]: the first index and the gaps as varints. An error for an empty or unsorted list.
pub fn encode_delta(indices: &[u32]) -> Result<Vec<u8>, &'static str> {
    check_sorted(indices)?;
    let mut out = Vec::with_capacity(1 + indices.len() * 2);
    out.push(FORM_DELTA);
    push_varint(&mut out, indices[0]);
    for w in indices.windows(2) {
        push_varint(&mut out, w[1] - w[0]);
    }
    Ok(out)
}

/// [`FORM_BITMAP`]: a varint base (the first index) and the bitmap from it.
pub fn encode_bitmap(indices: &[u32]) -> Result<Vec<u8>, &'static str> {
    check_sorted(indices)?;
    let base = indices[0];
    let span = (indices[indices.len() - 1] - base) as usize + 1;
    let mut out = Vec::with_capacity(6 + span.div_ceil(8));
    out.push(FORM_BITMAP);
    push_varint(&mut out, base);
    let start = out.len();
    out.resize(start + span.div_ceil(8), 0);
    for &i in indices {
        let r = (i - base) as usize;
        out[start + r / 8] |= 1 << (r % 8);
    }
    Ok(out)
}

/// The shorter of the two forms (delta on a tie).
pub fn encode_indices(indices: &[u32]) -> Result<Vec<u8>, &'static str> {
    let delta = encode_delta(indices)?;
    let span = (indices[indices.len() - 1] - indices[0]) as usize + 1;
    if 1 + varint_len(indices[0]) + span.div_ceil(8) < delta.len() {
        return encode_bitmap(indices);
    }
    Ok(delta)
}

/// The indices of a packed byte string as written, with only its `MALFORMED` faults reported (no
/// form byte, unknown form, truncated, overlong or too long varint, an index >= 2**32, a bitmap
/// ending with a 0 byte after a set bit). The result may be empty (a delta form without varint, a
/// bitmap without a set bit) or hold equal neighbours (a gap of 0): the packet decoder reports
/// those as `EMPTY_ENTRY` and `DUPLICATE_INDEX` at their place in the check order (DF-RCV-20).
pub fn unpack_indices(packed: &[u8], out: &mut Vec<u32>) -> Result<(), DecodeError> {
    out.clear();
    let Some((&form, body)) = packed.split_first() else {
        return Err(malformed("no form byte"));
    };
    match form {
        FORM_DELTA => {
            out.reserve(body.len());
            let mut pos = 0;
            let mut sum: u64 = 0;
            while pos < body.len() {
                let b = body[pos];
                let (v, next) = if b < 0x80 {
                    (u64::from(b), pos + 1) // the common one-byte gap
                } else {
                    read_varint(body, pos)?
                };
                sum += v;
                if sum >= 1 << 32 {
                    return Err(malformed("an index >= 2**32"));
                }
                out.push(sum as u32);
                pos = next;
            }
            Ok(())
        }
        FORM_BITMAP => {
            let (base, next) = read_varint(body, 0)?;
            let bitmap = &body[next..];
            if bitmap.iter().all(|&b| b == 0) {
                return Ok(());
            }
            let last = bitmap[bitmap.len() - 1];
            if last == 0 {
                return Err(malformed("bitmap ends with a 0 byte"));
            }
            let high_bit = 7 - u64::from(last.leading_zeros());
            let top = base + (bitmap.len() as u64 - 1) * 8 + high_bit;
            if top >= 1 << 32 {
                return Err(malformed("an index >= 2**32"));
            }
            for (j, &byte) in bitmap.iter().enumerate() {
                let mut m = byte;
                while m != 0 {
                    let b = m.trailing_zeros() as u64;
                    out.push((base + j as u64 * 8 + b) as u32);
                    m &= m - 1;
                }
            }
            Ok(())
        }
        other => Err(malformed(&format!("unknown form {other}"))),
    }
}

/// The indices of a packed byte string: `MALFORMED` (see [`unpack_indices`]), then `EMPTY_ENTRY`
/// (no index), then `DUPLICATE_INDEX` (a gap of 0).
pub fn decode_indices(packed: &[u8]) -> Result<Vec<u32>, DecodeError> {
    let mut out = Vec::new();
    unpack_indices(packed, &mut out)?;
    if out.is_empty() {
        return Err(DecodeError::new(
            ErrorCode::EmptyEntry,
            "packed indices: no index",
        ));
    }
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(DecodeError::new(
            ErrorCode::DuplicateIndex,
            "packed indices: a gap of 0",
        ));
    }
    Ok(out)
}

/// 2**-149, the smallest positive binary32: the smallest Q8 scale.
const MIN_SCALE_EXP: i32 = -149;

/// The Q8 scale of an entry's values: 0 when every value is 0, else the smallest power of two
/// `2**e` (`e >= -149`) with `127 * 2**e >= max|v|`. A power of two makes `q * scale` exact and the
/// encoding idempotent (re-encoding decoded values gives the same bytes), which error feedback and
/// relays rely on. Non-finite values are ignored (the encoder refuses them).
pub fn q8_scale(values: &[f32]) -> f32 {
    let m = f64::from(
        values
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0f32, |m, v| m.max(v.abs())),
    );
    if m == 0.0 {
        return 0.0;
    }
    // m < 2**e0 with m = f * 2**e0, f in [0.5, 1) (frexp)
    let (_, e0) = frexp(m);
    let e = if 127.0 * pow2(e0 - 7) >= m {
        e0 - 7
    } else {
        e0 - 6
    };
    pow2(e.max(MIN_SCALE_EXP)) as f32
}

fn pow2(e: i32) -> f64 {
    // exact for -1074 <= e <= 1023 (the range used: -149..=128)
    2f64.powi(e)
}

fn frexp(m: f64) -> (f64, i32) {
    // m finite and > 0; m is an f32 value, so normal as f64
    let bits = m.to_bits();
    let exp = ((bits >> 52) & 0x7FF) as i32 - 1022;
    (f64::from_bits((bits & !(0x7FF << 52)) | (1022 << 52)), exp)
}

/// `(scale, q)` of finite f32 values: `scale` from [`q8_scale`]; `q[i] = v[i] / scale` (exact)
/// rounded to nearest even, clamped to [-127, 127] and to `|q * scale| <= FLT_MAX` (all 0 when the
/// scale is 0). `None` when a value is not finite.
pub fn q8_encode(values: &[f32]) -> Option<(f32, Vec<i8>)> {
    if values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let scale = q8_scale(values);
    if scale == 0.0 {
        return Some((scale, vec![0; values.len()]));
    }
    let s = f64::from(scale);
    let top = (f64::from(f32::MAX) / s).floor().min(127.0);
    let q = values
        .iter()
        .map(|&v| (f64::from(v) / s).round_ties_even().clamp(-top, top) as i8)
        .collect();
    Some((scale, q))
}

/// Checks a Q8 scale: `MALFORMED` for a finite scale with the sign bit set (-0.0 included),
/// `NON_FINITE` for a NaN or infinite one.
pub fn check_q8_scale(scale: f32) -> Result<(), DecodeError> {
    if scale.is_finite() && scale.is_sign_negative() {
        return Err(DecodeError::new(
            ErrorCode::Malformed,
            "Q8 scale is negative",
        ));
    }
    if !scale.is_finite() {
        return Err(DecodeError::new(
            ErrorCode::NonFinite,
            "Q8 scale is not finite",
        ));
    }
    Ok(())
}

/// `fl32(q * scale)` after [`check_q8_scale`].
pub fn q8_decode(scale: f32, q: &[i8]) -> Result<Vec<f32>, DecodeError> {
    check_q8_scale(scale)?;
    Ok(q.iter().map(|&x| f32::from(x) * scale).collect())
}

/// What a receiver decodes after `values` are sent as Q8: the value error feedback adds to the
/// anchor (DF-GEN-5). `None` when a value is not finite.
pub fn q8_quantize(values: &[f32]) -> Option<Vec<f32>> {
    let (scale, q) = q8_encode(values)?;
    q8_decode(scale, &q).ok()
}
