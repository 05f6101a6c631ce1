//! A bounds-checked big-endian cursor over a byte slice, used by every decoder.

use super::consts::MAX_STRING_BYTES;
use super::error::DecodeError;

/// Reads big-endian fields from a slice; every read is checked and fails with `Truncated`.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Cursor {
            bytes,
            position: 0,
            what,
        }
    }

    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    #[inline]
    pub(crate) fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        if count > self.remaining() {
            return Err(DecodeError::Truncated {
                what: self.what,
                needed: self.position.saturating_add(count),
                got: self.bytes.len(),
            });
        }
        let slice = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(slice)
    }

    #[inline]
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    #[inline]
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A string of `len` bytes: valid UTF-8, at most 4096 bytes.
    pub(crate) fn string(&mut self, len: usize) -> Result<String, DecodeError> {
        if len > MAX_STRING_BYTES {
            return Err(DecodeError::BadString { what: self.what });
        }
        let b = self.take(len)?;
        let s = std::str::from_utf8(b).map_err(|_| DecodeError::BadString { what: self.what })?;
        if s.contains('\0') {
            return Err(DecodeError::BadString { what: self.what });
        }
        Ok(s.to_owned())
    }

    /// The whole rest of the input as a string.
    pub(crate) fn rest_string(&mut self) -> Result<String, DecodeError> {
        self.string(self.remaining())
    }

    /// The whole rest of the input as text for people (an error message, a description):
    /// invalid UTF-8 is replaced and text over a string's 4096 bytes cut (at a character
    /// boundary), not refused, so a sloppy server's message still shows; what it returns is
    /// always a valid string, which encodes again.
    pub(crate) fn rest_text(&mut self) -> String {
        let rest = &self.bytes[self.position..];
        self.position = self.bytes.len();
        let mut text =
            String::from_utf8_lossy(&rest[..rest.len().min(MAX_STRING_BYTES)]).into_owned();
        let mut end = text.len().min(MAX_STRING_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text
    }

    /// Fails unless every byte was consumed.
    #[inline]
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes {
                what: self.what,
                extra,
            }),
        }
    }
}

/// Appends a length-checked `u32`-prefixed string. Strings come from our own code; the spec
/// bound is an invariant.
pub(crate) fn put_str32(out: &mut Vec<u8>, s: &str) {
    assert!(
        s.len() <= MAX_STRING_BYTES,
        "NBD string longer than 4096 bytes"
    );
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}
