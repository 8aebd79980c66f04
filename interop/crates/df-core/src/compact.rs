//! Compact index and value encodings: the reference codecs of the proposal
//! `spec/proposals/compact-encodings.md` (not yet part of the protocol: no packet carries them).
//! Same codecs, bytes and errors as the Python `delta_fabric.compact`.
//!
//! Indices (ascending, duplicate-free u32) travel as one byte string whose first byte names its form:
//! [`FORM_DELTA`] (LEB128 varints: the first index, then every gap) or [`FORM_BITMAP`] (a varint base,
//! then bitmap bytes, least significant bit first). Values: `Q8`, one signed byte per value and one
//! f32 scale per entry, decoded as `fl32(q * scale)`.

use crate::error::{DecodeError, ErrorCode};

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

/// The indices of a packed byte string: `EMPTY_ENTRY` (no index), `DUPLICATE_INDEX` (a gap of 0),
/// `MALFORMED` (anything else that is not one of the forms).
pub fn decode_indices(packed: &[u8]) -> Result<Vec<u32>, DecodeError> {
    let Some((&form, body)) = packed.split_first() else {
        return Err(malformed("no form byte"));
    };
    match form {
        FORM_DELTA => {
            let mut out: Vec<u32> = Vec::new();
            let mut pos = 0;
            let mut sum: u64 = 0;
            while pos < body.len() {
                let (v, next) = read_varint(body, pos)?;
                if !out.is_empty() && v == 0 {
                    return Err(DecodeError::new(
                        ErrorCode::DuplicateIndex,
                        "packed indices: a gap of 0",
                    ));
                }
                sum += v;
                if sum >= 1 << 32 {
                    return Err(malformed("an index >= 2**32"));
                }
                out.push(sum as u32);
                pos = next;
            }
            if out.is_empty() {
                return Err(DecodeError::new(
                    ErrorCode::EmptyEntry,
                    "packed indices: no index",
                ));
            }
            Ok(out)
        }
        FORM_BITMAP => {
            let (base, next) = read_varint(body, 0)?;
            let bitmap = &body[next..];
            match bitmap.last() {
                None => {
                    return Err(DecodeError::new(
                        ErrorCode::EmptyEntry,
                        "packed indices: empty bitmap",
                    ));
                }
                Some(0) if bitmap.iter().all(|&b| b == 0) => {
                    return Err(DecodeError::new(
                        ErrorCode::EmptyEntry,
                        "packed indices: empty bitmap",
                    ));
                }
                Some(0) => return Err(malformed("bitmap ends with a 0 byte")),
                Some(_) => {}
            }
            let high_bit = 7 - u64::from(bitmap[bitmap.len() - 1].leading_zeros());
            let top = base + (bitmap.len() as u64 - 1) * 8 + high_bit;
            if top >= 1 << 32 {
                return Err(malformed("an index >= 2**32"));
            }
            let mut out = Vec::new();
            for (j, &byte) in bitmap.iter().enumerate() {
                for b in 0..8 {
                    if byte & (1 << b) != 0 {
                        out.push((base + (j * 8 + b) as u64) as u32);
                    }
                }
            }
            Ok(out)
        }
        other => Err(malformed(&format!("unknown form {other}"))),
    }
}

/// `(scale, q)` of finite f32 values: `scale = fl32(max|v| / 127)`; `q[i]` is `fl32(v[i] / scale)`
/// rounded to nearest even and clamped to [-127, 127] (all 0 when the scale is 0). `None` when a
/// value is not finite.
pub fn q8_encode(values: &[f32]) -> Option<(f32, Vec<i8>)> {
    if values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = max / 127.0;
    if scale == 0.0 {
        return Some((scale, vec![0; values.len()]));
    }
    let q = values
        .iter()
        .map(|&v| (v / scale).round_ties_even().clamp(-127.0, 127.0) as i8)
        .collect();
    Some((scale, q))
}

/// `fl32(q * scale)`: `NON_FINITE` for a NaN or infinite scale, `MALFORMED` for a negative one.
pub fn q8_decode(scale: f32, q: &[i8]) -> Result<Vec<f32>, DecodeError> {
    if !scale.is_finite() {
        return Err(DecodeError::new(
            ErrorCode::NonFinite,
            "Q8 scale is not finite",
        ));
    }
    if scale < 0.0 {
        return Err(DecodeError::new(
            ErrorCode::Malformed,
            "Q8 scale is negative",
        ));
    }
    Ok(q.iter().map(|&x| f32::from(x) * scale).collect())
}

/// What a receiver decodes after `values` are sent as Q8: the value error feedback adds to the
/// anchor (DF-GEN-5). `None` when a value is not finite.
pub fn q8_quantize(values: &[f32]) -> Option<Vec<f32>> {
    let (scale, q) = q8_encode(values)?;
    q8_decode(scale, &q).ok()
}
