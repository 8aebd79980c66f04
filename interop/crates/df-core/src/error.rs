//! Rejection codes (spec section 7.2, DF-ERR).

use std::fmt;

/// Why a packet was rejected. Exactly the codes of the spec's table (section 7.2), in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    /// `len(bytes) > max_packet_size`.
    Oversize,
    /// Fewer than 8 bytes, or bytes 4..8 are not `DFP1`.
    BadIdentifier,
    /// Structure out of bounds, required field missing, zero id, wrong values vector, ...
    Malformed,
    /// `version_major != 1`.
    UnsupportedVersion,
    /// Encoding not in {F32, F16, BF16}.
    UnsupportedEncoding,
    /// Fingerprint differs from the local manifest's.
    FingerprintMismatch,
    /// An entry with `hops > hop_limit`.
    HopLimit,
    /// An entry whose values count differs from its indices count.
    LengthMismatch,
    /// An entry with no index.
    EmptyEntry,
    /// An index `>= N`.
    IndexOutOfRange,
    /// Indices not ascending.
    UnsortedIndices,
    /// Two equal consecutive indices.
    DuplicateIndex,
    /// A decoded value is NaN or infinite.
    NonFinite,
    /// The packet's accepted entries would make the step's aggregate, or the anchor or active
    /// weights after the apply, non-finite (DF-RCV-50, added in 1.1).
    NonFiniteResult,
    /// In a signed cluster, an entry is unsigned, not signed by its origin's pinned key, or the
    /// packet's encoding is not the cluster's (DF-SEC-142, added in 1.1).
    BadSignature,
}

impl ErrorCode {
    /// Every code, in the spec's table (section 7.2) order.
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::Oversize,
        ErrorCode::BadIdentifier,
        ErrorCode::Malformed,
        ErrorCode::UnsupportedVersion,
        ErrorCode::UnsupportedEncoding,
        ErrorCode::FingerprintMismatch,
        ErrorCode::HopLimit,
        ErrorCode::LengthMismatch,
        ErrorCode::EmptyEntry,
        ErrorCode::IndexOutOfRange,
        ErrorCode::UnsortedIndices,
        ErrorCode::DuplicateIndex,
        ErrorCode::NonFinite,
        ErrorCode::NonFiniteResult,
        ErrorCode::BadSignature,
    ];

    /// The code as written in the spec, e.g. `"MALFORMED"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Oversize => "OVERSIZE",
            ErrorCode::BadIdentifier => "BAD_IDENTIFIER",
            ErrorCode::Malformed => "MALFORMED",
            ErrorCode::UnsupportedVersion => "UNSUPPORTED_VERSION",
            ErrorCode::UnsupportedEncoding => "UNSUPPORTED_ENCODING",
            ErrorCode::FingerprintMismatch => "FINGERPRINT_MISMATCH",
            ErrorCode::HopLimit => "HOP_LIMIT",
            ErrorCode::LengthMismatch => "LENGTH_MISMATCH",
            ErrorCode::EmptyEntry => "EMPTY_ENTRY",
            ErrorCode::IndexOutOfRange => "INDEX_OUT_OF_RANGE",
            ErrorCode::UnsortedIndices => "UNSORTED_INDICES",
            ErrorCode::DuplicateIndex => "DUPLICATE_INDEX",
            ErrorCode::NonFinite => "NON_FINITE",
            ErrorCode::NonFiniteResult => "NON_FINITE_RESULT",
            ErrorCode::BadSignature => "BAD_SIGNATURE",
        }
    }

    /// Parses the spec's spelling (inverse of [`ErrorCode::as_str`]).
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejected packet: the code and a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The spec's code.
    pub code: ErrorCode,
    /// What exactly was wrong (free text, for logs).
    pub detail: String,
}

impl DecodeError {
    /// A new error.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        DecodeError {
            code,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            f.write_str(self.code.as_str())
        } else {
            write!(f, "{}: {}", self.code, self.detail)
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    use super::{DecodeError, ErrorCode};

    #[test]
    fn display_names_the_code_and_the_detail() {
        assert_eq!(ErrorCode::NonFinite.to_string(), "NON_FINITE");
        assert_eq!(
            DecodeError::new(ErrorCode::Malformed, "vtable out of bounds").to_string(),
            "MALFORMED: vtable out of bounds"
        );
        assert_eq!(
            DecodeError::new(ErrorCode::Oversize, "").to_string(),
            "OVERSIZE"
        );
    }
}
