//! The value encodings (spec section 6.4, DF-PKT; DF-GEN-4; DF-PAR-10) as one table: for each
//! [`ValueEncoding`], its wire value and name, which `Entry` vector carries the values, the bytes
//! one value adds to the size bound, and how values are encoded, decoded and quantized.
//! The Python reference has the same table (`delta_fabric.encodings`: `ValueCodec`, `CODECS`).
//!
//! Every other module goes through this table ([`codec`], [`by_wire`], [`by_name`]): the packet
//! encoder and decoder ([`crate::wire`]), the config ([`crate::config`]) and the engine's
//! quantization ([`crate::engine`]). **Adding an encoding** therefore means: one variant of
//! [`ValueEncoding`] (and of the schema enum), one row of [`CODECS`] here and of `CODECS` in the
//! Python reference, its conformance vectors, and its spec text (section 6.4). The packet size
//! bound covers every row ([`MAX_VALUE_BYTES`]), so a wider encoding raises it for all.

use half::f16;

/// How the values of every entry of one packet are encoded (schema enum `ValueEncoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ValueEncoding {
    /// IEEE binary32 in `Entry.values`.
    #[default]
    F32,
    /// IEEE binary16 bit patterns in `Entry.values16`.
    F16,
    /// bfloat16 bit patterns in `Entry.values16`.
    BF16,
    /// (1.1, OPTIONAL) one signed byte per value in `Entry.values8`, times the per-entry
    /// `Entry.scale` (spec section 6.8).
    Q8,
}

/// The `Entry` vector that carries the values, with the conversions of 16-bit encodings.
#[derive(Debug, Clone, Copy)]
pub enum Carrier {
    /// `Entry.values: [float]`, the f32 values as they are.
    Values32,
    /// `Entry.values16: [ushort]`, one 16-bit pattern per value.
    Values16 {
        /// f32 -> bits: round to nearest even, clamped to the finite range; NaN stays NaN.
        encode: fn(f32) -> u16,
        /// bits -> the f32 a receiver decodes (exact).
        decode: fn(u16) -> f32,
    },
    /// `Entry.values8: [byte]` with `Entry.scale` (1.1): see [`crate::compact::q8_encode`]. The
    /// scale is per entry, so quantization is per entry ([`ValueCodec::quantize_slice`]).
    Values8,
}

/// One row of the table: everything the protocol needs to know about one value encoding.
#[derive(Debug, Clone, Copy)]
pub struct ValueCodec {
    /// The encoding.
    pub encoding: ValueEncoding,
    /// The wire value (schema enum).
    pub wire: u8,
    /// The JSON / config spelling (`"F32"`...).
    pub name: &'static str,
    /// Which vector carries the values and how.
    pub carrier: Carrier,
    /// Bytes one value takes on the wire (what the size bound counts).
    pub value_bytes: usize,
}

impl ValueCodec {
    /// The f32 a receiver decodes after `v` is sent with this encoding (DF-GEN-4: round to
    /// nearest even, clamped to the finite range; NaN stays NaN). Q8: `v` as the only value of
    /// its entry (the scale is per entry: use [`ValueCodec::quantize_slice`] for an entry).
    pub fn quantize(&self, v: f32) -> f32 {
        let mut one = [v];
        self.quantize_slice(&mut one);
        one[0]
    }

    /// The values a receiver decodes after the values of one entry are sent with this encoding,
    /// in place. Idempotent for every row. Q8 leaves an entry with a non-finite value unchanged
    /// (the encoder refuses it; generation never sends one, DF-GEN-9).
    pub fn quantize_slice(&self, values: &mut [f32]) {
        match self.carrier {
            Carrier::Values32 => {}
            Carrier::Values16 { encode, decode } => {
                for v in values {
                    *v = decode(encode(*v));
                }
            }
            Carrier::Values8 => {
                if let Some(q) = crate::compact::q8_quantize(values) {
                    values.copy_from_slice(&q);
                }
            }
        }
    }

    /// Whether the values travel in `Entry.values` (else in `Entry.values16`).
    pub fn is_wide(&self) -> bool {
        matches!(self.carrier, Carrier::Values32)
    }
}

/// The table, in wire-value order.
pub static CODECS: [ValueCodec; 4] = ROWS;

const ROWS: [ValueCodec; 4] = [
    ValueCodec {
        encoding: ValueEncoding::F32,
        wire: 0,
        name: "F32",
        carrier: Carrier::Values32,
        value_bytes: 4,
    },
    ValueCodec {
        encoding: ValueEncoding::F16,
        wire: 1,
        name: "F16",
        carrier: Carrier::Values16 {
            encode: f32_to_f16_bits,
            decode: f16_bits_to_f32,
        },
        value_bytes: 2,
    },
    ValueCodec {
        encoding: ValueEncoding::BF16,
        wire: 2,
        name: "BF16",
        carrier: Carrier::Values16 {
            encode: f32_to_bf16_bits,
            decode: bf16_bits_to_f32,
        },
        value_bytes: 2,
    },
    ValueCodec {
        encoding: ValueEncoding::Q8,
        wire: 3,
        name: "Q8",
        carrier: Carrier::Values8,
        value_bytes: 1,
    },
];

/// The largest `value_bytes` of the table (the size bound of every encoding).
pub const MAX_VALUE_BYTES: usize = {
    let mut m = 0;
    let mut i = 0;
    while i < ROWS.len() {
        if ROWS[i].value_bytes > m {
            m = ROWS[i].value_bytes;
        }
        i += 1;
    }
    m
};

/// The row of `enc`.
pub fn codec(enc: ValueEncoding) -> &'static ValueCodec {
    // rows are in discriminant (= wire value) order; checked by the table's test
    &CODECS[enc as usize]
}

/// The row of a wire value; `None` for an unknown encoding (`UNSUPPORTED_ENCODING`).
pub fn by_wire(wire: u8) -> Option<&'static ValueCodec> {
    CODECS.iter().find(|c| c.wire == wire)
}

/// The row of a name (`"F32"`, `"F16"`, `"BF16"`).
pub fn by_name(name: &str) -> Option<&'static ValueCodec> {
    CODECS.iter().find(|c| c.name == name)
}

/// The names of the table, e.g. for messages: `"F32, F16, BF16"`.
pub fn names() -> String {
    CODECS.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
}

impl ValueEncoding {
    /// Every encoding, in wire-value order.
    pub const ALL: [ValueEncoding; 4] = [
        ValueEncoding::F32,
        ValueEncoding::F16,
        ValueEncoding::BF16,
        ValueEncoding::Q8,
    ];

    /// The row of the table.
    pub fn codec(self) -> &'static ValueCodec {
        codec(self)
    }
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        codec(self).wire
    }
    /// From the wire value; `None` for an unknown encoding.
    pub fn from_u8(v: u8) -> Option<ValueEncoding> {
        by_wire(v).map(|c| c.encoding)
    }
    /// `"F32"`, `"F16"`, `"BF16"` or `"Q8"` (the JSON spelling).
    pub fn name(self) -> &'static str {
        codec(self).name
    }
    /// Inverse of [`ValueEncoding::name`].
    pub fn from_name(s: &str) -> Option<ValueEncoding> {
        by_name(s).map(|c| c.encoding)
    }
    /// [`ValueCodec::quantize`] of this encoding.
    pub fn quantize(self, v: f32) -> f32 {
        codec(self).quantize(v)
    }
}

const F16_MAX: f32 = 65504.0;

/// binary16 bits of `v`: round to nearest even, clamped to +-65504 (NaN stays NaN).
fn f32_to_f16_bits(v: f32) -> u16 {
    let c = if v.is_nan() {
        v
    } else {
        v.clamp(-F16_MAX, F16_MAX)
    };
    f16::from_f32(c).to_bits()
}

/// The f32 value of binary16 bits.
fn f16_bits_to_f32(b: u16) -> f32 {
    f16::from_bits(b).to_f32()
}

/// bfloat16 bits of `v`: round to nearest even on the upper 16 bits, clamped to the finite range
/// (largest finite 0x7F7F); NaN becomes the quiet NaN with the same sign.
fn f32_to_bf16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        return ((bits >> 16) as u16 & 0x8000) | 0x7FC0;
    }
    let rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
    let hi = rounded as u16;
    let sign = hi & 0x8000;
    let mut mag = hi & 0x7FFF;
    if mag >= 0x7F80 {
        mag = 0x7F7F;
    }
    sign | mag
}

/// The f32 value of bfloat16 bits.
fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// The info queryable's `supports` member (DF-ZEN-231): the value and index encodings this
/// implementation receives, in wire-value order.
pub fn supports() -> serde_json::Value {
    serde_json::json!({
        "encodings": ValueEncoding::ALL.iter().map(|e| e.codec().name).collect::<Vec<_>>(),
        "index_encodings": crate::compact::IndexEncoding::ALL
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_consistent() {
        for (i, c) in CODECS.iter().enumerate() {
            assert_eq!(c.wire as usize, i, "rows in wire-value order");
            assert_eq!(ValueEncoding::ALL[i], c.encoding);
            assert!(std::ptr::eq(codec(c.encoding), c));
            assert!(by_wire(c.wire).is_some_and(|r| std::ptr::eq(r, c)));
            assert!(by_name(c.name).is_some_and(|r| std::ptr::eq(r, c)));
            assert!(c.value_bytes <= MAX_VALUE_BYTES);
            assert_eq!(c.is_wide(), c.value_bytes == 4);
        }
        assert!(by_wire(4).is_none());
        assert!(by_name("f32").is_none());
        assert_eq!(names(), "F32, F16, BF16, Q8");
        assert_eq!(MAX_VALUE_BYTES, 4);
    }
}
