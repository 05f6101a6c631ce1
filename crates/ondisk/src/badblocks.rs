//! The bad-block list of one member (md's badblocks): ranges of the member's data area whose
//! content is lost (a rebuild met an unreadable range where no redundancy was left). Reads of a
//! recorded range fail; a write over it makes it valid again and clears it.
//!
//! On disk (docs/FORMAT.md "Bad-block list"): `BAD_BLOCKS_AREA_BYTES` (8 KiB) at the offset the
//! superblock names, two 4 KiB copies written alternately (copy `generation % 2`), so a torn
//! write leaves the other, older copy valid. A copy holds the magic `RKBB`, the number of
//! entries (u32), the generation (u64), the array UUID, then up to [`BAD_BLOCKS_MAX`] entries of
//! 16 bytes (`offset` u64 and `len` u64, bytes of the data area, 512-aligned), sorted, not
//! touching each other; the last four bytes are a crc32c of bytes `[0, 4092)`. Every member keeps
//! its own list (not a copy of the others'): it describes that member's content.

use std::fmt;
use std::io;

use member::Member;
use uuid::Uuid;

/// Where the bad-block list lives on a member (superblock bytes 3744..3760).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadBlocksRef {
    /// From the member start, 4 KiB-aligned.
    pub offset_bytes: u64,
    /// Always [`BAD_BLOCKS_AREA_BYTES`].
    pub bytes: u64,
}

/// Bytes of the list area: two copies of 4 KiB.
pub const BAD_BLOCKS_AREA_BYTES: u64 = 8192;
/// Bytes of one copy.
pub const BAD_BLOCKS_COPY_BYTES: usize = 4096;
/// Unit of the ranges (a sector, as md's).
pub const BAD_BLOCK_SECTOR: u64 = 512;
const OFF_MAGIC: usize = 0;
const OFF_COUNT: usize = 4;
const OFF_GENERATION: usize = 8;
const OFF_UUID: usize = 16;
const OFF_ENTRIES: usize = 32;
const ENTRY_BYTES: usize = 16;
const OFF_CRC: usize = BAD_BLOCKS_COPY_BYTES - 4;
const MAGIC: [u8; 4] = *b"RKBB";
/// Most ranges a list holds (what fits one copy). A rebuild that would need more fails the
/// member it rebuilds instead, as md fails a member whose list is full.
pub const BAD_BLOCKS_MAX: usize = (OFF_CRC - OFF_ENTRIES) / ENTRY_BYTES;

/// One lost range of a member's data area: `[offset, offset + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRange {
    pub offset: u64,
    pub len: u64,
}

impl BadRange {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A list that has no room for another range.
#[derive(Debug, PartialEq, Eq)]
pub struct ListFull;

impl fmt::Display for ListFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the bad-block list is full ({BAD_BLOCKS_MAX} ranges)")
    }
}

/// A member's bad-block list: sorted ranges that neither overlap nor touch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BadBlockList {
    /// Bumped by every write of the list; the copy with the higher one is current.
    pub generation: u64,
    ranges: Vec<BadRange>,
}

impl BadBlockList {
    pub fn ranges(&self) -> &[BadRange] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The recorded ranges overlapping `[offset, offset + len)`.
    pub fn overlapping(&self, offset: u64, len: u64) -> impl Iterator<Item = &BadRange> {
        let end = offset + len;
        self.ranges
            .iter()
            .filter(move |r| r.offset < end && offset < r.end())
    }

    /// Records `[offset, offset + len)`, widened to whole sectors and merged with the ranges it
    /// touches. True when the list changed; [`ListFull`] (list unchanged) when it has no room.
    pub fn add(&mut self, offset: u64, len: u64) -> Result<bool, ListFull> {
        assert!(len > 0);
        let mut start = offset / BAD_BLOCK_SECTOR * BAD_BLOCK_SECTOR;
        let mut end = (offset + len).div_ceil(BAD_BLOCK_SECTOR) * BAD_BLOCK_SECTOR;
        if self
            .ranges
            .iter()
            .any(|r| r.offset <= start && end <= r.end())
        {
            return Ok(false);
        }
        let (touching, mut kept): (Vec<BadRange>, Vec<BadRange>) = self
            .ranges
            .iter()
            .partition(|r| r.offset <= end && start <= r.end());
        if touching.is_empty() && kept.len() >= BAD_BLOCKS_MAX {
            return Err(ListFull);
        }
        for r in touching {
            start = start.min(r.offset);
            end = end.max(r.end());
        }
        kept.push(BadRange {
            offset: start,
            len: end - start,
        });
        kept.sort_by_key(|r| r.offset);
        self.ranges = kept;
        Ok(true)
    }

    /// Clears the whole sectors inside `[offset, offset + len)` (written again, so valid). A
    /// range split in two needs one more entry: with a full list the part is kept recorded
    /// (reads of it keep failing; conservative). True when the list changed.
    pub fn clear(&mut self, offset: u64, len: u64) -> bool {
        let start = offset.div_ceil(BAD_BLOCK_SECTOR) * BAD_BLOCK_SECTOR;
        let end = (offset + len) / BAD_BLOCK_SECTOR * BAD_BLOCK_SECTOR;
        if end <= start {
            return false;
        }
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        let mut changed = false;
        for (i, r) in self.ranges.iter().enumerate() {
            if r.end() <= start || end <= r.offset {
                out.push(*r);
                continue;
            }
            let before = (r.offset < start).then(|| BadRange {
                offset: r.offset,
                len: start - r.offset,
            });
            let after = (end < r.end()).then(|| BadRange {
                offset: end,
                len: r.end() - end,
            });
            let left = self.ranges.len() - i - 1;
            if before.is_some() && after.is_some() && out.len() + 2 + left > BAD_BLOCKS_MAX {
                // No room to split: the range stays recorded whole (reads of it keep failing).
                out.push(*r);
                continue;
            }
            changed = true;
            out.extend(before.into_iter().chain(after));
        }
        self.ranges = out;
        changed
    }

    /// The copy's bytes for `array_uuid`.
    pub fn encode(&self, array_uuid: &Uuid) -> Vec<u8> {
        assert!(self.ranges.len() <= BAD_BLOCKS_MAX);
        let mut copy = vec![0u8; BAD_BLOCKS_COPY_BYTES];
        copy[OFF_MAGIC..OFF_MAGIC + 4].copy_from_slice(&MAGIC);
        copy[OFF_COUNT..OFF_COUNT + 4].copy_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        copy[OFF_GENERATION..OFF_GENERATION + 8].copy_from_slice(&self.generation.to_le_bytes());
        copy[OFF_UUID..OFF_UUID + 16].copy_from_slice(array_uuid.as_bytes());
        for (i, r) in self.ranges.iter().enumerate() {
            let at = OFF_ENTRIES + i * ENTRY_BYTES;
            copy[at..at + 8].copy_from_slice(&r.offset.to_le_bytes());
            copy[at + 8..at + 16].copy_from_slice(&r.len.to_le_bytes());
        }
        let crc = crc32c::crc32c(&copy[..OFF_CRC]);
        copy[OFF_CRC..].copy_from_slice(&crc.to_le_bytes());
        copy
    }

    /// Decodes one copy; `None` when it fails a check (torn, never written, another array's,
    /// entries unsorted, overlapping or not whole sectors).
    pub fn decode(array_uuid: &Uuid, copy: &[u8]) -> Option<BadBlockList> {
        if copy.len() != BAD_BLOCKS_COPY_BYTES || copy[OFF_MAGIC..OFF_MAGIC + 4] != MAGIC {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(copy[at..at + 8].try_into().unwrap());
        let stored = u32::from_le_bytes(copy[OFF_CRC..].try_into().unwrap());
        if stored != crc32c::crc32c(&copy[..OFF_CRC])
            || copy[OFF_UUID..OFF_UUID + 16] != array_uuid.as_bytes()[..]
        {
            return None;
        }
        let count = u32::from_le_bytes(copy[OFF_COUNT..OFF_COUNT + 4].try_into().unwrap());
        if count as usize > BAD_BLOCKS_MAX {
            return None;
        }
        let mut ranges = Vec::with_capacity(count as usize);
        for i in 0..count as usize {
            let at = OFF_ENTRIES + i * ENTRY_BYTES;
            let r = BadRange {
                offset: u64_at(at),
                len: u64_at(at + 8),
            };
            let whole = r.offset.is_multiple_of(BAD_BLOCK_SECTOR)
                && r.len.is_multiple_of(BAD_BLOCK_SECTOR)
                && r.len > 0
                && r.offset.checked_add(r.len).is_some();
            let after_previous = ranges.last().is_none_or(|p: &BadRange| p.end() < r.offset);
            if !whole || !after_previous {
                return None;
            }
            ranges.push(r);
        }
        let tail = &copy[OFF_ENTRIES + count as usize * ENTRY_BYTES..OFF_CRC];
        tail.iter().all(|&b| b == 0).then_some(BadBlockList {
            generation: u64_at(OFF_GENERATION),
            ranges,
        })
    }
}

/// Why a member's list cannot be read.
#[derive(Debug)]
pub enum ReadListError {
    Io(io::Error),
    /// Neither copy passes its checks: what the member lost is unknown.
    Damaged,
}

impl fmt::Display for ReadListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadListError::Io(e) => write!(f, "cannot read the bad-block list: {e}"),
            ReadListError::Damaged => {
                f.write_str("both copies of the bad-block list fail their checks")
            }
        }
    }
}

/// Reads a member's list (`whole`: the whole member): the valid copy with the higher generation.
pub fn read_list(
    whole: &dyn Member,
    array_uuid: &Uuid,
    at: &BadBlocksRef,
) -> Result<BadBlockList, ReadListError> {
    let mut area = vec![0u8; BAD_BLOCKS_AREA_BYTES as usize];
    whole
        .read_at(&mut area, at.offset_bytes)
        .map_err(ReadListError::Io)?;
    let (a, b) = area.split_at(BAD_BLOCKS_COPY_BYTES);
    let copies = [
        BadBlockList::decode(array_uuid, a),
        BadBlockList::decode(array_uuid, b),
    ];
    copies
        .into_iter()
        .flatten()
        .max_by_key(|l| l.generation)
        .ok_or(ReadListError::Damaged)
}

/// Writes `list` with its generation bumped into the copy the new generation names, and
/// flushes the member: once this returns, the list survives a crash (the other copy, older,
/// stays valid while this one is written).
pub fn write_list(
    whole: &dyn Member,
    array_uuid: &Uuid,
    at: &BadBlocksRef,
    list: &mut BadBlockList,
) -> io::Result<()> {
    list.generation += 1;
    let copy = list.generation % 2;
    whole.write_at(
        &list.encode(array_uuid),
        at.offset_bytes + copy * BAD_BLOCKS_COPY_BYTES as u64,
    )?;
    whole.flush()
}

/// Writes a new, empty list (both copies, generations 0 and 1 empty).
pub fn write_blank(whole: &dyn Member, array_uuid: &Uuid, at: &BadBlocksRef) -> io::Result<()> {
    let mut area = BadBlockList::default().encode(array_uuid);
    let second = BadBlockList {
        generation: 1,
        ranges: Vec::new(),
    };
    area.extend_from_slice(&second.encode(array_uuid));
    whole.write_at(&area, at.offset_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ranges: &[(u64, u64)]) -> BadBlockList {
        let mut l = BadBlockList::default();
        for &(o, n) in ranges {
            l.add(o, n).unwrap();
        }
        l
    }

    fn pairs(l: &BadBlockList) -> Vec<(u64, u64)> {
        l.ranges().iter().map(|r| (r.offset, r.len)).collect()
    }

    #[test]
    fn add_widens_to_sectors_and_merges_touching_ranges() {
        let mut l = list(&[(4096, 4096), (16384, 512)]);
        assert_eq!(pairs(&l), [(4096, 4096), (16384, 512)]);
        assert_eq!(
            l.add(8192, 1),
            Ok(true),
            "touches the first, widened to a sector"
        );
        assert_eq!(pairs(&l), [(4096, 4608), (16384, 512)]);
        assert_eq!(l.add(5000, 100), Ok(false), "inside: unchanged");
        assert_eq!(l.add(8000, 9000), Ok(true));
        assert_eq!(pairs(&l), [(4096, 13312)]);
    }

    #[test]
    fn clear_removes_whole_sectors_and_splits() {
        let mut l = list(&[(0, 65536)]);
        assert!(!l.clear(100, 300), "no whole sector inside");
        assert!(l.clear(4096, 8192));
        assert_eq!(pairs(&l), [(0, 4096), (12288, 53248)]);
        assert!(l.clear(0, 1 << 20));
        assert!(l.is_empty());
        assert_eq!(l.overlapping(0, 1 << 30).count(), 0);
    }

    #[test]
    fn a_full_list_refuses_a_new_range_and_keeps_a_split_it_cannot_hold() {
        let mut l = BadBlockList::default();
        for i in 0..BAD_BLOCKS_MAX as u64 {
            assert_eq!(l.add(i * 8192, 4096), Ok(true));
        }
        assert_eq!(l.add(1 << 40, 512), Err(ListFull));
        assert_eq!(l.ranges().len(), BAD_BLOCKS_MAX);
        assert_eq!(l.add(4096, 512), Ok(true), "merging needs no entry");
        let before = l.clone();
        assert!(!l.clear(512, 1024), "a split needs an entry the list lacks");
        assert_eq!(l, before);
        assert!(l.clear(0, 512), "trimming an end needs none");
    }

    #[test]
    fn copies_roundtrip_and_detect_damage() {
        let uuid = Uuid::new_v4();
        let mut l = list(&[(512, 1024), (1 << 30, 4096)]);
        l.generation = 7;
        let copy = l.encode(&uuid);
        assert_eq!(BadBlockList::decode(&uuid, &copy), Some(l.clone()));
        assert_eq!(
            BadBlockList::decode(&Uuid::new_v4(), &copy),
            None,
            "foreign"
        );
        for at in [0, 5, 9, 20, 40, 60, 4000, 4093] {
            let mut bad = copy.clone();
            bad[at] ^= 1;
            assert_eq!(BadBlockList::decode(&uuid, &bad), None, "flip at {at}");
        }
        assert_eq!(BadBlockList::decode(&uuid, &[0u8; 4096]), None, "zeroes");
    }

    #[test]
    fn the_newer_valid_copy_wins_and_a_torn_one_leaves_the_older() {
        let m = member::open("mem:64K", &member::OpenOptions::default()).unwrap();
        let uuid = Uuid::new_v4();
        let at = BadBlocksRef {
            offset_bytes: 16384,
            bytes: BAD_BLOCKS_AREA_BYTES,
        };
        assert!(matches!(
            read_list(m.as_ref(), &uuid, &at),
            Err(ReadListError::Damaged)
        ));
        write_blank(m.as_ref(), &uuid, &at).unwrap();
        let mut l = read_list(m.as_ref(), &uuid, &at).unwrap();
        assert!(l.is_empty());
        l.add(4096, 512).unwrap();
        write_list(m.as_ref(), &uuid, &at, &mut l).unwrap();
        assert_eq!(read_list(m.as_ref(), &uuid, &at).unwrap(), l);
        let older = l.clone();
        l.add(1 << 20, 512).unwrap();
        write_list(m.as_ref(), &uuid, &at, &mut l).unwrap();
        assert_eq!(read_list(m.as_ref(), &uuid, &at).unwrap(), l);
        // Tear the newest copy: the one before it is read.
        let torn = at.offset_bytes + (l.generation % 2) * BAD_BLOCKS_COPY_BYTES as u64;
        m.write_at(&[0xAB; 512], torn + 1024).unwrap();
        assert_eq!(read_list(m.as_ref(), &uuid, &at).unwrap(), older);
    }
}
