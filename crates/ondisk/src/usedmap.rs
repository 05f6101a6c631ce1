//! The used-regions map's on-disk format: one bit per region of the array, set (durably, on
//! every member holding a role) before the first write to a region that held nothing, and
//! cleared once a trim or write-zeroes of the whole region is durable. A rebuild, a replace, an
//! initial sync and a resync skip the regions whose bit is clear: they hold nothing (they read
//! as zeroes) and their stripes are made consistent by the first write that reaches them
//! (docs/DESIGN.md "Used-regions map"; the in-memory map is `volume`'s).
//!
//! On disk (docs/FORMAT.md "Used-regions map"): the write-intent bitmap's block codec
//! ([`crate::bitmap::encode_map_block`]) with the magic `RKUM`, so a block of one map is never
//! taken for the other's. A block that fails its check counts as all set (copy more, never
//! less).

use layout::Geometry;

use crate::bitmap::{MapArea, BITMAP_BLOCK_BYTES, BITS_PER_BLOCK};

/// The magic of a used-regions map block.
pub const USED_MAGIC: [u8; 4] = *b"RKUM";
/// Default region size asked for: 4 MiB of array bytes (rounded up to whole sync units).
pub const USED_REGION_DEFAULT: u64 = 4 << 20;
/// Most regions a used map has; `create` doubles the region until the array fits, so the map
/// is at most 33 blocks (132 KiB on disk) and about 3 MiB of memory for any member size.
pub const USED_REGIONS_MAX: u64 = 1 << 20;
/// Most bytes a used map area has (a superblock naming more is invalid).
pub const USED_BYTES_MAX: u64 = USED_REGIONS_MAX.div_ceil(BITS_PER_BLOCK) * BITMAP_BLOCK_BYTES;

/// Where the used-regions map lives on every member (superblock bytes 3808..3832).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsedMapRef {
    /// From the member start; 4 KiB-aligned, past the write-intent bitmap.
    pub offset_bytes: u64,
    pub bytes: u64,
    /// Array bytes covered by one bit: a whole number of the level's sync units (stripes,
    /// mirror chunks), so a region is whole stripes on every member.
    pub region_bytes: u64,
}

impl UsedMapRef {
    /// The map's blocks on a member.
    pub fn area(&self) -> MapArea {
        MapArea {
            magic: USED_MAGIC,
            offset_bytes: self.offset_bytes,
            bytes: self.bytes,
        }
    }

    /// Regions of an array of `array_bytes`.
    pub fn regions(&self, array_bytes: u64) -> u64 {
        array_bytes.div_ceil(self.region_bytes).max(1)
    }
}

/// The region size for `geometry` with `region_bytes` asked for: the smallest unit·2^k at
/// least that large, doubled until the array has at most [`USED_REGIONS_MAX`] regions.
pub fn region_for(geometry: &Geometry, region_bytes: u64) -> u64 {
    let unit = geometry.unit_bytes().max(4096);
    let mut region = unit;
    while region < region_bytes {
        region *= 2;
    }
    while geometry.size_bytes().div_ceil(region) > USED_REGIONS_MAX {
        region *= 2;
    }
    region
}

/// Bytes of the map area for `regions` regions.
pub fn area_bytes(regions: u64) -> u64 {
    regions.max(1).div_ceil(BITS_PER_BLOCK) * BITMAP_BLOCK_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_whole_stripes_and_bounded() {
        let g = Geometry::new("raid5".parse().unwrap(), 128 << 10, &[1 << 30; 4]).unwrap();
        let region = region_for(&g, USED_REGION_DEFAULT);
        assert_eq!(region % g.unit_bytes(), 0);
        assert!((USED_REGION_DEFAULT..2 * USED_REGION_DEFAULT).contains(&region));
        let huge = Geometry::new("raid6".parse().unwrap(), 4 << 20, &[1 << 50; 17]).unwrap();
        let region = region_for(&huge, USED_REGION_DEFAULT);
        assert_eq!(region % huge.unit_bytes(), 0);
        assert!(huge.size_bytes().div_ceil(region) <= USED_REGIONS_MAX);
        assert!(area_bytes(huge.size_bytes().div_ceil(region)) <= USED_BYTES_MAX);
    }
}
