//! The write-intent bitmap's on-disk format: one bit per region of the array (default 64 MiB),
//! set on every in-use member and flushed *before* the first write to a clean region, cleared
//! lazily once the region has been idle and its writes are durable. After an unclean shutdown
//! only the set regions are resynced; a member back after a short absence is rebuilt only where
//! bits are set. (The in-memory bitmap that sets and clears the bits is `volume`'s.)
//!
//! On disk (docs/FORMAT.md "Write-intent bitmap"): `bitmap_bytes / 4096` blocks from
//! `bitmap_offset_bytes`; block `i` holds the bits of regions `i * BITS_PER_BLOCK ..` in bytes
//! `[0, 4080)` (region `r` is bit `r % 8` of byte `r / 8`), then the magic `RKBM`, the block
//! index (u32), four zero bytes and a crc32c of the array UUID followed by bytes `[0, 4092)`.
//! A block that fails its check counts as all set (resync / rebuild more, never less).

use std::io;
use std::time::Duration;

use member::Member;
use uuid::Uuid;

/// Where the write-intent bitmap lives on every member (docs/FORMAT.md "Write-intent bitmap").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitmapRef {
    /// From the member start.
    pub offset_bytes: u64,
    pub bytes: u64,
    /// Array bytes covered by one bit.
    pub region_bytes: u64,
}

/// Bytes of one on-disk bitmap block.
pub const BITMAP_BLOCK_BYTES: u64 = 4096;
/// Bytes of bits in one block.
pub const BITS_BYTES_PER_BLOCK: usize = 4080;
/// Regions one block describes.
pub const BITS_PER_BLOCK: u64 = BITS_BYTES_PER_BLOCK as u64 * 8;
/// Where the bitmap starts on every member: right after the superblock.
pub const BITMAP_OFFSET: u64 = 8192;
/// Most regions a bitmap has; `create` doubles the region size until the array fits. Bounds
/// the bitmap to 33 blocks (132 KiB on disk, inside the 1 MiB before the default data offset)
/// and the memory per volume to about 13 MiB.
pub const BITMAP_REGIONS_MAX: u64 = 1 << 20;
/// Most bytes a bitmap area has (the blocks of [`BITMAP_REGIONS_MAX`] regions): a superblock
/// naming more is invalid.
pub const BITMAP_BYTES_MAX: u64 = BITMAP_REGIONS_MAX.div_ceil(BITS_PER_BLOCK) * BITMAP_BLOCK_BYTES;
/// Default region size.
pub const BITMAP_REGION_DEFAULT: u64 = 64 << 20;
/// Default idle time before a region's bit is cleared.
pub const BITMAP_IDLE_DEFAULT: Duration = Duration::from_secs(5);
/// The magic of a write-intent bitmap block.
pub const BITMAP_MAGIC: [u8; 4] = *b"RKBM";
const OFF_BLOCK_MAGIC: usize = 4080;
const OFF_BLOCK_INDEX: usize = 4084;
const OFF_BLOCK_CRC: usize = 4092;

/// The bitmap placement for an array of `array_bytes` with `region_bytes` asked for (a power of
/// two ≥ 4 KiB): the region grows until at most [`BITMAP_REGIONS_MAX`] regions remain.
pub fn layout_for(array_bytes: u64, region_bytes: u64) -> BitmapRef {
    assert!(region_bytes.is_power_of_two() && region_bytes >= 4096);
    let mut region = region_bytes;
    while array_bytes.div_ceil(region) > BITMAP_REGIONS_MAX {
        region *= 2;
    }
    let regions = array_bytes.div_ceil(region).max(1);
    BitmapRef {
        offset_bytes: BITMAP_OFFSET,
        bytes: regions.div_ceil(BITS_PER_BLOCK) * BITMAP_BLOCK_BYTES,
        region_bytes: region,
    }
}

/// Where a map of one bit per region lives on every member, and which magic its blocks carry:
/// the write-intent bitmap ([`BITMAP_MAGIC`]) and the used-regions map
/// (`usedmap::USED_MAGIC`) share this block codec (docs/FORMAT.md "Write-intent bitmap").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapArea {
    pub magic: [u8; 4],
    /// From the member start.
    pub offset_bytes: u64,
    pub bytes: u64,
}

impl BitmapRef {
    /// The bitmap's blocks on a member.
    pub fn area(&self) -> MapArea {
        MapArea {
            magic: BITMAP_MAGIC,
            offset_bytes: self.offset_bytes,
            bytes: self.bytes,
        }
    }
}

/// Encodes block `index` of `image` (the whole bitmap's bits).
pub fn encode_block(array_uuid: &Uuid, image: &[u8], index: usize) -> Vec<u8> {
    encode_map_block(BITMAP_MAGIC, array_uuid, image, index)
}

/// Encodes block `index` of `image` (a whole map's bits) with `magic`.
pub fn encode_map_block(magic: [u8; 4], array_uuid: &Uuid, image: &[u8], index: usize) -> Vec<u8> {
    let mut block = vec![0u8; BITMAP_BLOCK_BYTES as usize];
    let start = index * BITS_BYTES_PER_BLOCK;
    let end = (start + BITS_BYTES_PER_BLOCK).min(image.len());
    assert!(start < image.len(), "bitmap block {index} past the image");
    block[..end - start].copy_from_slice(&image[start..end]);
    block[OFF_BLOCK_MAGIC..OFF_BLOCK_MAGIC + 4].copy_from_slice(&magic);
    block[OFF_BLOCK_INDEX..OFF_BLOCK_INDEX + 4].copy_from_slice(&(index as u32).to_le_bytes());
    let crc = block_crc(array_uuid, &block);
    block[OFF_BLOCK_CRC..].copy_from_slice(&crc.to_le_bytes());
    block
}

fn block_crc(array_uuid: &Uuid, block: &[u8]) -> u32 {
    crc32c::crc32c_append(
        crc32c::crc32c(array_uuid.as_bytes()),
        &block[..OFF_BLOCK_CRC],
    )
}

/// Decodes block `index`: its bit bytes, or `None` when it fails a check (torn, never written,
/// another array's, misplaced).
pub fn decode_block<'a>(array_uuid: &Uuid, block: &'a [u8], index: usize) -> Option<&'a [u8]> {
    decode_map_block(BITMAP_MAGIC, array_uuid, block, index)
}

/// Decodes block `index` of a map whose blocks carry `magic` (see [`decode_block`]).
pub fn decode_map_block<'a>(
    magic: [u8; 4],
    array_uuid: &Uuid,
    block: &'a [u8],
    index: usize,
) -> Option<&'a [u8]> {
    assert_eq!(block.len() as u64, BITMAP_BLOCK_BYTES);
    let stored = u32::from_le_bytes(block[OFF_BLOCK_CRC..].try_into().ok()?);
    let found_index =
        u32::from_le_bytes(block[OFF_BLOCK_INDEX..OFF_BLOCK_CRC - 4].try_into().ok()?);
    let ok = block[OFF_BLOCK_MAGIC..OFF_BLOCK_MAGIC + 4] == magic
        && found_index as usize == index
        && stored == block_crc(array_uuid, block);
    ok.then(|| &block[..BITS_BYTES_PER_BLOCK])
}

/// Reads a member's bitmap as a bit image of `regions` bits; blocks that fail their check
/// read as all set. Returns the image and the number of bad blocks.
pub fn read_image(
    whole: &dyn Member,
    array_uuid: &Uuid,
    at: &BitmapRef,
    regions: u64,
) -> io::Result<(Vec<u8>, usize)> {
    read_map_image(whole, array_uuid, &at.area(), regions)
}

/// Reads a map of `regions` bits from `at` (see [`read_image`]).
pub fn read_map_image(
    whole: &dyn Member,
    array_uuid: &Uuid,
    at: &MapArea,
    regions: u64,
) -> io::Result<(Vec<u8>, usize)> {
    let mut image = vec![0u8; regions.div_ceil(8) as usize];
    let mut area = vec![0u8; at.bytes as usize];
    whole.read_at(&mut area, at.offset_bytes)?;
    let mut bad = 0;
    for (index, piece) in image.chunks_mut(BITS_BYTES_PER_BLOCK).enumerate() {
        let block = &area[index * BITMAP_BLOCK_BYTES as usize..][..BITMAP_BLOCK_BYTES as usize];
        match decode_map_block(at.magic, array_uuid, block, index) {
            Some(bits) => piece.copy_from_slice(&bits[..piece.len()]),
            None => {
                bad += 1;
                piece.fill(0xFF);
            }
        }
    }
    clear_tail(&mut image, regions);
    Ok((image, bad))
}

/// Writes the whole (all clear) bitmap of a new array.
pub fn write_blank(whole: &dyn Member, array_uuid: &Uuid, at: &MapArea) -> io::Result<()> {
    whole.write_at(&encode_area(array_uuid, at, &[]), at.offset_bytes)
}

/// Every block of the map at `at` holding `image` (bits past its end are clear).
pub fn encode_area(array_uuid: &Uuid, at: &MapArea, image: &[u8]) -> Vec<u8> {
    let blocks = (at.bytes / BITMAP_BLOCK_BYTES) as usize;
    let mut padded = image.to_vec();
    padded.resize(blocks * BITS_BYTES_PER_BLOCK, 0);
    let mut area = Vec::with_capacity(at.bytes as usize);
    for index in 0..blocks {
        area.extend_from_slice(&encode_map_block(at.magic, array_uuid, &padded, index));
    }
    area
}

/// Bits past the last region are kept clear.
fn clear_tail(image: &mut [u8], regions: u64) {
    for r in regions..image.len() as u64 * 8 {
        image[(r / 8) as usize] &= !(1 << (r % 8));
    }
}

/// Bit `r` of a bit image.
pub fn bit(image: &[u8], r: u64) -> bool {
    image[(r / 8) as usize] & (1 << (r % 8)) != 0
}

/// Sets bit `r` of a bit image to `value`.
pub fn put_bit(image: &mut [u8], r: u64, value: bool) {
    let byte = &mut image[(r / 8) as usize];
    if value {
        *byte |= 1 << (r % 8);
    } else {
        *byte &= !(1 << (r % 8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_grows_the_region_until_the_array_fits() {
        let at = layout_for(1 << 30, 64 << 20);
        assert_eq!((at.region_bytes, at.bytes), (64 << 20, 4096));
        let huge = layout_for(u64::MAX / 2, 4096);
        assert!(huge.region_bytes >= (u64::MAX / 2) / BITMAP_REGIONS_MAX);
        assert!(huge.bytes <= 33 * 4096);
        assert!(BITMAP_OFFSET + huge.bytes <= crate::DATA_OFFSET_DEFAULT);
    }

    #[test]
    fn blocks_roundtrip_and_detect_damage() {
        let uuid = Uuid::new_v4();
        let mut image = vec![0u8; 5000];
        put_bit(&mut image, 3, true);
        put_bit(&mut image, BITS_PER_BLOCK + 7, true);
        for index in 0..2 {
            let block = encode_block(&uuid, &image, index);
            let bits = decode_block(&uuid, &block, index).expect("valid block");
            let start = index * BITS_BYTES_PER_BLOCK;
            let n = (image.len() - start).min(BITS_BYTES_PER_BLOCK);
            assert_eq!(&bits[..n], &image[start..start + n]);
            assert!(
                decode_block(&uuid, &block, index + 1).is_none(),
                "misplaced"
            );
            assert!(
                decode_block(&Uuid::new_v4(), &block, index).is_none(),
                "foreign"
            );
            for at in [0, 100, 4081, 4090, 4095] {
                let mut bad = block.clone();
                bad[at] ^= 0x10;
                assert!(decode_block(&uuid, &bad, index).is_none(), "flip at {at}");
            }
        }
        assert!(decode_block(&uuid, &[0u8; 4096], 0).is_none(), "zeroes");
    }
}
