//! Why a byte sequence could not be decoded.

use std::fmt;

/// A decoding failure. Decoders never panic: every malformed input maps to one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the message needs.
    Truncated {
        what: &'static str,
        needed: usize,
        got: usize,
    },
    /// More bytes than the message may have.
    TrailingBytes { what: &'static str, extra: usize },
    /// A magic number did not match.
    BadMagic {
        what: &'static str,
        expected: u64,
        found: u64,
    },
    /// A length field disagrees with the message it describes.
    BadLength { what: &'static str, length: u64 },
    /// A string is not valid UTF-8 or is longer than the spec allows.
    BadString { what: &'static str },
    /// A field holds a value the spec forbids.
    BadValue { what: &'static str, value: u64 },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { what, needed, got } => {
                write!(f, "{what}: truncated, needs {needed} bytes, got {got}")
            }
            DecodeError::TrailingBytes { what, extra } => {
                write!(f, "{what}: {extra} unexpected trailing bytes")
            }
            DecodeError::BadMagic {
                what,
                expected,
                found,
            } => {
                write!(f, "{what}: bad magic {found:#x}, expected {expected:#x}")
            }
            DecodeError::BadLength { what, length } => {
                write!(
                    f,
                    "{what}: length {length} is inconsistent with the message"
                )
            }
            DecodeError::BadString { what } => {
                write!(
                    f,
                    "{what}: not a valid NBD string (UTF-8, at most 4096 bytes)"
                )
            }
            DecodeError::BadValue { what, value } => write!(f, "{what}: invalid value {value}"),
        }
    }
}

impl std::error::Error for DecodeError {}
