//! Member bytes through the on-disk parsers: array superblocks and the assembly decision
//! (`ondisk`), write-intent bitmap blocks (`ondisk::bitmap`), the journal's superblocks and
//! records with its scan and replay (`journal`).
//!
//! A checksum in front of every structure would stop a mutating fuzzer at the first byte it
//! changes, so the harness recomputes each checksum the input's structures carry before the
//! parser sees them (with bit 0 of `data[0]` set it leaves them as they are, so a damaged
//! checksum is met too). That is what a disk written by a buggy or hostile writer holds: valid
//! checksums over any contents.

use std::sync::Arc;

use member::{MemMember, Member};
use ondisk::{AssemblyPlanOptions, Superblock, BITMAP_BLOCK_BYTES, SUPERBLOCK_BYTES};

/// Where the checksum of an array superblock is (its last 4 bytes, little-endian).
const SB_CRC_AT: usize = SUPERBLOCK_BYTES - 4;
/// Most superblocks one input holds (members of one array).
const SUPERBLOCKS_MAX: usize = 6;

/// `data[0]` bit 0: keep the stored checksums.
fn keep_checksums(data: &[u8]) -> bool {
    data.first().is_some_and(|f| f & 1 != 0)
}

/// A 4 KiB superblock from `bytes` (zero-padded), its checksum made valid unless `keep`.
fn superblock_bytes(bytes: &[u8], keep: bool) -> Box<[u8; SUPERBLOCK_BYTES]> {
    let mut b = Box::new([0u8; SUPERBLOCK_BYTES]);
    let n = bytes.len().min(SUPERBLOCK_BYTES);
    b[..n].copy_from_slice(&bytes[..n]);
    if !keep {
        let crc = ondisk::checksum(&b);
        b[SB_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    }
    b
}

/// `data[0]`: flags (bit 0: keep checksums; bit 1: `start_dirty_degraded`; bit 2: replaying
/// the first superblock's journal); then up to six 4 KiB superblocks, one per member. Each
/// that decodes must encode back to itself (`Superblock::encode` asserts the round trip); all
/// that decode go to the assembly decision `ondisk::plan`, whose answer must name only members
/// and roles that exist.
pub fn superblock(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let keep = flags & 1 != 0;
    let mut found: Vec<(String, Superblock)> = Vec::new();
    for (i, bytes) in rest
        .chunks(SUPERBLOCK_BYTES)
        .take(SUPERBLOCKS_MAX)
        .enumerate()
    {
        let b = superblock_bytes(bytes, keep);
        if let Ok(sb) = Superblock::decode(&b) {
            let _ = sb.encode();
            let _ = sb.role_index();
            found.push((format!("member{i}"), sb));
        }
    }
    let opts = AssemblyPlanOptions {
        start_dirty_degraded: flags & 2 != 0,
        journal_replay: (flags & 4 != 0)
            .then(|| found.first().and_then(|(_, sb)| sb.journal.map(|j| j.uuid)))
            .flatten(),
        ..AssemblyPlanOptions::default()
    };
    if let Ok(plan) = ondisk::plan(&found, &opts) {
        let members = plan.superblock.member_count as usize;
        assert_eq!(plan.roles.len(), members, "one entry per role");
        for index in plan.roles.iter().flatten().chain(&plan.spares) {
            assert!(
                *index < found.len(),
                "plan names member {index} of {}",
                found.len()
            );
        }
        if let Some((role, index, _)) = plan.replacing {
            assert!(
                role < members && index < found.len(),
                "replace target out of range"
            );
        }
        let _ = plan.superblock.encode();
    }
}

/// `data[0]`: flags (bit 0: keep checksums); `data[1..4097]`: an array superblock (its
/// checksum made valid); the rest: the member's bitmap area. With a bitmap in the superblock,
/// the area is read as the volume reads it at assembly (`ondisk::bitmap::read_image` over the
/// array's regions): the image must have one bit per region and nothing past the last.
pub fn bitmap(data: &[u8]) {
    let keep = keep_checksums(data);
    let Some(rest) = data.get(1..) else {
        return;
    };
    let (sb_bytes, area) = rest.split_at(rest.len().min(SUPERBLOCK_BYTES));
    let Ok(sb) = Superblock::decode(&superblock_bytes(sb_bytes, false)) else {
        return;
    };
    let Some(at) = sb.bitmap else {
        return;
    };
    let whole = MemMember::new("bitmap member", at.offset_bytes + at.bytes)
        .expect("a bitmap area is never empty");
    let mut area = area[..area.len().min(at.bytes as usize)].to_vec();
    if !keep {
        for block in area.chunks_exact_mut(BITMAP_BLOCK_BYTES as usize) {
            let crc = crc32c::crc32c_append(
                crc32c::crc32c(sb.array_uuid.as_bytes()),
                &block[..BITMAP_BLOCK_BYTES as usize - 4],
            );
            block[BITMAP_BLOCK_BYTES as usize - 4..].copy_from_slice(&crc.to_le_bytes());
        }
    }
    whole
        .write_at(&area, at.offset_bytes)
        .expect("write the bitmap area");
    let regions = sb.array_size_bytes.div_ceil(at.region_bytes).max(1);
    let (image, bad) = ondisk::bitmap::read_image(&whole, &sb.array_uuid, &at, regions)
        .expect("read an in-memory member");
    assert_eq!(image.len() as u64, regions.div_ceil(8));
    assert!(bad as u64 <= at.bytes / BITMAP_BLOCK_BYTES);
    for r in regions..image.len() as u64 * 8 {
        assert!(
            !ondisk::bitmap::bit(&image, r),
            "bit {r} set past {regions} regions"
        );
    }
}

/// Largest ring the journal target builds (a sparse in-memory member).
const JOURNAL_RING_MAX: u64 = 64 << 20;

/// `data[0]`: flags (bit 0: keep checksums); `data[1..8193]`: the journal's two superblock
/// copies; the rest: the ring's bytes from the tail the first copy names onwards (wrapping at
/// the ring's end). The member is as long as the ring the first copy names (at most 64 MiB;
/// more and the superblock does not fit). `journal::read_superblock`, then `scan` and `replay`
/// over the records; replay must hand over writes and zeroes only (every reference to another
/// record resolved) and walk the same records as scan.
pub fn journal(data: &[u8]) {
    let keep = keep_checksums(data);
    let Some(rest) = data.get(1..) else {
        return;
    };
    let sb_area = journal::RING_OFFSET as usize;
    let (head, ring_data) = rest.split_at(rest.len().min(sb_area));
    let mut image = vec![0u8; sb_area];
    image[..head.len()].copy_from_slice(head);
    if !keep {
        for copy in image.chunks_exact_mut(journal::SUPERBLOCK_BYTES) {
            let crc = crc32c::crc32c(&copy[..journal::SUPERBLOCK_BYTES - 4]);
            copy[journal::SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let field = |at: usize| u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes"));
    let (ring_field, tail_field) = (field(56), field(72));
    let ring_bytes = ring_field.clamp(journal::RING_BYTES_MIN, JOURNAL_RING_MAX);
    let tail = if tail_field < ring_bytes {
        tail_field
    } else {
        0
    };
    let mut ring = ring_data[..ring_data.len().min(ring_bytes as usize)].to_vec();
    if !keep {
        fix_record_checksums(&mut ring);
    }
    let member = Arc::new(
        MemMember::new("journal member", journal::RING_OFFSET + ring_bytes)
            .expect("a journal member is never empty"),
    );
    member.write_at(&image, 0).expect("write superblocks");
    // The ring's bytes from the tail on, wrapping at its end.
    let first = ring.len().min((ring_bytes - tail) as usize);
    member
        .write_at(&ring[..first], journal::RING_OFFSET + tail)
        .expect("write the ring");
    if first < ring.len() {
        member
            .write_at(&ring[first..], journal::RING_OFFSET)
            .expect("write the ring's wrapped part");
    }
    let Ok(sb) = journal::read_superblock(member.as_ref()) else {
        return;
    };
    let _ = sb.encode();
    let scanned = journal::scan(member.as_ref(), &sb, |_, _| Ok(()));
    let replayed = journal::replay(member.as_ref(), &sb, |_, ops| {
        for op in ops {
            assert!(
                !matches!(op, journal::MemberOp::FromRecord { .. }),
                "replay handed over a reference it did not resolve: {op:?}"
            );
        }
        Ok(())
    });
    if let (Ok(s), Ok(r)) = (scanned, replayed) {
        assert_eq!(
            s.records, r.records,
            "scan and replay walk the same records"
        );
        assert_eq!(s.end_offset, r.end_offset);
    }
}

/// Recomputes the checksum of each record that starts at a record boundary of `ring` and
/// whose payload lies within it, walking as replay does (record after record).
fn fix_record_checksums(ring: &mut [u8]) {
    const MAGIC: [u8; 4] = *b"RKJR";
    const HEADER: usize = journal::HEADER_BYTES;
    const CRC_AT: usize = 60;
    let mut pos = 0usize;
    while pos + HEADER <= ring.len() {
        if ring[pos..pos + 4] != MAGIC {
            break;
        }
        let payload = u32::from_le_bytes(ring[pos + 24..pos + 28].try_into().expect("4 bytes"));
        let end = pos + HEADER + payload as usize;
        if end > ring.len() {
            break;
        }
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&ring[pos..pos + CRC_AT]),
            &ring[pos + HEADER..end],
        );
        ring[pos + CRC_AT..pos + HEADER].copy_from_slice(&crc.to_le_bytes());
        pos += journal::align_up((HEADER + payload as usize) as u64) as usize;
    }
}
