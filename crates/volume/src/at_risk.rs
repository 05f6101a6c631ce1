//! The array ranges at risk after a forced start of a dirty and degraded RAID 5/6 array
//! ([`AtRisk`], `AssembleOptions::start_dirty_degraded`): stripes that were being written at
//! the crash may hold parity that disagrees with their data, and a missing member's chunks of
//! those stripes are reconstructed from that parity — they may read back wrong (the write hole).
//!
//! Which stripes: the write-intent bitmap marks every region with writes in flight before they
//! start (docs/DESIGN.md, durability contract), so its dirty regions — plus everything past an
//! unfinished sync's offset — are the suspects; without a bitmap, the whole array. Reported in
//! the start warning, the log and `status` until every member is in sync again: the rebuild of
//! the missing members then recomputes those stripes (consistent again, holding what was
//! reconstructed, which may still be wrong).

use serde::{Deserialize, Serialize};

/// Most ranges listed (all are counted): a bitmap of 2^20 regions could give 2^19 ranges.
pub const AT_RISK_RANGES_LISTED_MAX: usize = 1024;

/// A range of array bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayRange {
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// What a forced dirty and degraded start put at risk (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtRisk {
    /// The first [`AT_RISK_RANGES_LISTED_MAX`] ranges, in order, merged (no two touch).
    pub ranges: Vec<ArrayRange>,
    pub ranges_count: u64,
    /// Bytes in all ranges.
    pub bytes: u64,
    /// No write-intent bitmap narrowed it: the whole array is at risk.
    pub whole_array: bool,
}

impl AtRisk {
    /// From the bitmap's dirty `regions` (indexes, ascending) of `region_bytes`, and the offset
    /// `full_from` from which everything is unsynced; `None` as `bitmap`: the whole array.
    pub fn new(bitmap: Option<(&[u64], u64)>, full_from: u64, size_bytes: u64) -> AtRisk {
        let Some((regions, region_bytes)) = bitmap else {
            return AtRisk::from_ranges(vec![(0, size_bytes)], true);
        };
        assert!(region_bytes > 0);
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let spans = regions
            .iter()
            .map(|r| (r * region_bytes, ((r + 1) * region_bytes).min(full_from)))
            .chain(std::iter::once((full_from, size_bytes)));
        for (start, end) in spans.filter(|(s, e)| s < e) {
            match ranges.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => ranges.push((start, end)),
            }
        }
        AtRisk::from_ranges(ranges, false)
    }

    fn from_ranges(ranges: Vec<(u64, u64)>, whole_array: bool) -> AtRisk {
        assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0), "sorted, merged");
        AtRisk {
            ranges_count: ranges.len() as u64,
            bytes: ranges.iter().map(|(s, e)| e - s).sum(),
            ranges: ranges
                .iter()
                .take(AT_RISK_RANGES_LISTED_MAX)
                .map(|&(s, e)| ArrayRange {
                    offset_bytes: s,
                    len_bytes: e - s,
                })
                .collect(),
            whole_array,
        }
    }

    /// "bytes 0-67108864 (64.0 MiB), ..." for the first `listed` ranges, and how many more.
    pub fn describe(&self, listed: usize) -> String {
        if self.whole_array {
            return format!(
                "the whole array, {} bytes (no write-intent bitmap to narrow it)",
                self.bytes
            );
        }
        let mut text: Vec<String> = self
            .ranges
            .iter()
            .take(listed)
            .map(|r| {
                format!(
                    "bytes {}-{} ({})",
                    r.offset_bytes,
                    r.offset_bytes + r.len_bytes,
                    human(r.len_bytes)
                )
            })
            .collect();
        let more = self.ranges_count.saturating_sub(listed as u64);
        if more > 0 {
            text.push(format!("and {more} more"));
        }
        format!(
            "{} ({} ranges, {} bytes in all)",
            text.join(", "),
            self.ranges_count,
            self.bytes
        )
    }
}

/// 4096 → "4.0 KiB", 67108864 → "64.0 MiB".
fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    match UNITS.iter().find(|(_, size)| bytes >= *size) {
        Some((unit, size)) => format!("{:.1} {unit}", bytes as f64 / *size as f64),
        None => format!("{bytes} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn dirty_regions_merge_and_stop_at_the_full_resync_offset() {
        // Regions of 4 MiB: 0, 1, 3 dirty; everything from 20 MiB unsynced; array of 24 MiB.
        let r = AtRisk::new(Some((&[0, 1, 3], 4 * MIB)), 20 * MIB, 24 * MIB);
        let got: Vec<(u64, u64)> = r
            .ranges
            .iter()
            .map(|r| (r.offset_bytes, r.len_bytes))
            .collect();
        assert_eq!(
            got,
            vec![(0, 8 * MIB), (12 * MIB, 4 * MIB), (20 * MIB, 4 * MIB)]
        );
        assert_eq!(
            (r.ranges_count, r.bytes, r.whole_array),
            (3, 16 * MIB, false)
        );
        // A last region past the end of the array is cut at the end; one region touching the
        // unsynced tail merges with it.
        let r = AtRisk::new(Some((&[4, 5], 4 * MIB)), 20 * MIB, 22 * MIB);
        assert_eq!(r.ranges.len(), 1);
        assert_eq!((r.ranges[0].offset_bytes, r.bytes), (16 * MIB, 6 * MIB));
        // Nothing dirty, nothing unsynced: nothing at risk.
        let r = AtRisk::new(Some((&[], 4 * MIB)), 24 * MIB, 24 * MIB);
        assert_eq!((r.ranges_count, r.bytes), (0, 0));
    }

    #[test]
    fn without_a_bitmap_the_whole_array() {
        let r = AtRisk::new(None, 0, 24 * MIB);
        assert!(r.whole_array);
        assert_eq!(r.bytes, 24 * MIB);
        assert!(r.describe(4).contains("whole array"), "{}", r.describe(4));
    }

    #[test]
    fn lists_are_bounded_and_say_how_many_more() {
        let regions: Vec<u64> = (0..3000).map(|i| i * 2).collect();
        let r = AtRisk::new(Some((&regions, 4096)), 6000 * 4096, 6000 * 4096);
        assert_eq!(r.ranges_count, 3000);
        assert_eq!(r.ranges.len(), AT_RISK_RANGES_LISTED_MAX);
        let text = r.describe(2);
        assert!(
            text.starts_with("bytes 0-4096 (4.0 KiB), bytes 8192-12288 (4.0 KiB), and 2998 more"),
            "{text}"
        );
    }
}
