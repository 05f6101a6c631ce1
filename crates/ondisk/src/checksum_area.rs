//! Block checksums (`feature_incompat` bit 4, superblock bytes 3776..3808): where a member's
//! checksum area lies and what it holds (docs/FORMAT.md "Block checksums"). The running side
//! (verify on read, update on write, the bounded cache) is `member::Checksummed`.

/// `feature_incompat` bit 4: every member carries a checksum area (superblock bytes
/// 3776..3808 say where). A reader that ignored it would write data without updating the
/// checksums, and a later reader would then take every block so written for corruption.
pub const FEATURE_INCOMPAT_CHECKSUM: u64 = 1 << 4;

/// Data bytes one checksum covers.
pub const CHECKSUM_BLOCK_BYTES: u64 = 4096;

/// Superblock bytes of the checksum reference: 3776..3808.
pub(crate) const OFF_CHECKSUM_REF: usize = 3776;
const REF_BYTES: usize = 32;

/// The checksum algorithms a member's area may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumAlg {
    /// crc32c (Castagnoli), 4 bytes per block: chosen by measurement (docs/PERFORMANCE.md
    /// "Block checksums").
    Crc32c,
}

impl ChecksumAlg {
    /// Its code in the superblock.
    pub fn code(self) -> u32 {
        match self {
            ChecksumAlg::Crc32c => 1,
        }
    }

    fn from_code(code: u32) -> Option<ChecksumAlg> {
        match code {
            1 => Some(ChecksumAlg::Crc32c),
            _ => None,
        }
    }

    /// Bytes one block's checksum takes in the area.
    pub fn entry_bytes(self) -> u64 {
        match self {
            ChecksumAlg::Crc32c => 4,
        }
    }

    /// The name `create --checksum` takes and `examine` prints.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlg::Crc32c => "crc32c",
        }
    }
}

impl std::str::FromStr for ChecksumAlg {
    type Err = String;
    fn from_str(s: &str) -> Result<ChecksumAlg, String> {
        match s {
            "crc32c" => Ok(ChecksumAlg::Crc32c),
            other => Err(format!(
                "unknown checksum algorithm {other:?}: the one raidkit knows is crc32c"
            )),
        }
    }
}

impl std::fmt::Display for ChecksumAlg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a member's checksum area is and how it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChecksumRef {
    /// Member byte where the area starts (4 KiB-aligned, past the superblock).
    pub offset_bytes: u64,
    /// Its length: a multiple of 4096 holding one entry per 4 KiB block of the data area.
    pub bytes: u64,
    pub alg: ChecksumAlg,
}

impl ChecksumRef {
    /// The area `alg` needs for `data_bytes` of data, rounded up to 4 KiB.
    pub fn area_bytes(alg: ChecksumAlg, data_bytes: u64) -> u64 {
        let entries = data_bytes.div_ceil(CHECKSUM_BLOCK_BYTES);
        (entries * alg.entry_bytes()).next_multiple_of(4096)
    }

    /// Writes the reference into the superblock's `bytes`.
    pub(crate) fn encode(&self, bytes: &mut [u8]) {
        let at = OFF_CHECKSUM_REF;
        bytes[at..at + 8].copy_from_slice(&self.offset_bytes.to_le_bytes());
        bytes[at + 8..at + 16].copy_from_slice(&self.bytes.to_le_bytes());
        bytes[at + 16..at + 20].copy_from_slice(&self.alg.code().to_le_bytes());
        bytes[at + 20..at + 24].copy_from_slice(&(CHECKSUM_BLOCK_BYTES as u32).to_le_bytes());
    }

    /// The reference in the superblock's `bytes`, when `feature_incompat` has bit 4; without
    /// it the range must be zero (non-zero bytes there are damage, or the bit lost: refused).
    /// An error is the reason, for the superblock's `checksum` field.
    pub(crate) fn decode(
        bytes: &[u8],
        feature_incompat: u64,
    ) -> Result<Option<ChecksumRef>, String> {
        let raw = &bytes[OFF_CHECKSUM_REF..OFF_CHECKSUM_REF + REF_BYTES];
        if feature_incompat & FEATURE_INCOMPAT_CHECKSUM == 0 {
            return match raw.iter().all(|&b| b == 0) {
                true => Ok(None),
                false => Err(err("checksum bytes present without feature_incompat bit 4")),
            };
        }
        let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
        let alg = ChecksumAlg::from_code(u32_at(16))
            .ok_or_else(|| err(format!("unknown checksum algorithm {}", u32_at(16))))?;
        if u32_at(20) as u64 != CHECKSUM_BLOCK_BYTES {
            return Err(err(format!(
                "checksum block of {} bytes (only 4096 is known)",
                u32_at(20)
            )));
        }
        if raw[24..].iter().any(|&b| b != 0) {
            return Err(err("reserved checksum bytes are not zero"));
        }
        Ok(Some(ChecksumRef {
            offset_bytes: u64_at(0),
            bytes: u64_at(8),
            alg,
        }))
    }

    /// The area lies 4 KiB-aligned past the superblock (which ends at `sb_end`), before the
    /// data, overlapping none of `others` (name, offset, bytes: the other metadata areas), and
    /// holds an entry per block of `data_bytes`. An error is the reason.
    pub(crate) fn validate(
        &self,
        sb_end: u64,
        others: &[(&str, u64, u64)],
        data_offset: u64,
        data_bytes: u64,
    ) -> Result<(), String> {
        let end = self.offset_bytes.checked_add(self.bytes);
        if !self.offset_bytes.is_multiple_of(4096)
            || !self.bytes.is_multiple_of(4096)
            || self.bytes == 0
            || self.offset_bytes < sb_end
            || end.is_none_or(|e| e > data_offset)
        {
            return Err(err(format!(
                "area of {} bytes at {} is not 4 KiB-aligned between the superblock and the \
                 data area at {data_offset}",
                self.bytes, self.offset_bytes
            )));
        }
        for &(name, offset, bytes) in others {
            if self.offset_bytes < offset + bytes && offset < self.offset_bytes + self.bytes {
                return Err(err(format!(
                    "the area at {} ({} bytes) overlaps the {name} at {offset} ({bytes} bytes)",
                    self.offset_bytes, self.bytes
                )));
            }
        }
        let need = ChecksumRef::area_bytes(self.alg, data_bytes);
        if self.bytes < need {
            return Err(err(format!(
                "area of {} bytes; the data area of {data_bytes} bytes needs {need}",
                self.bytes
            )));
        }
        Ok(())
    }
}

fn err(reason: impl Into<String>) -> String {
    reason.into()
}
