//! Size parsing: `4096`, `64K`, `1M`, `2G`, `1T` (powers of 1024; `KiB`, `MiB`… also accepted).

use std::fmt;

/// Why a size did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// Nothing was given.
    Empty,
    /// The text does not have the form NUMBER[K|M|G|T].
    Malformed(String),
    /// The size does not fit in 64 bits.
    TooLarge(String),
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::Empty => write!(f, "empty size"),
            SizeError::Malformed(s) => write!(
                f,
                "size {s:?} is not a number with an optional K, M, G or T suffix"
            ),
            SizeError::TooLarge(s) => write!(f, "size {s:?} does not fit in 64 bits"),
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses a byte count with an optional binary suffix: `K`, `M`, `G`, `T` (case-insensitive,
/// optionally followed by `iB` or `B`), each a power of 1024.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SizeError::Empty);
    }
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(SizeError::Malformed(text.to_string()));
    }
    let shift = suffix_shift(suffix).ok_or_else(|| SizeError::Malformed(text.to_string()))?;
    let number: u64 = digits
        .parse()
        .map_err(|_| SizeError::TooLarge(text.to_string()))?;
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::TooLarge(text.to_string()))
}

fn suffix_shift(suffix: &str) -> Option<u32> {
    let lower = suffix.to_ascii_lowercase();
    let unit = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    match unit {
        "" if lower.is_empty() || lower == "b" => Some(0),
        "k" => Some(10),
        "m" => Some(20),
        "g" => Some(30),
        "t" => Some(40),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("3T"), Ok(3 << 40));
        assert_eq!(parse_size(" 5m "), Ok(5 << 20));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        for bad in ["K", "1X", "1.5G", "-1", "1 G", "1iB", "0x10", "1KB2"] {
            assert!(
                matches!(parse_size(bad), Err(SizeError::Malformed(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_size("99999999999999999999"),
            Err(SizeError::TooLarge(_))
        ));
        assert!(matches!(
            parse_size("17179869184T"),
            Err(SizeError::TooLarge(_))
        ));
    }
}
