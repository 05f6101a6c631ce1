//! Block checksums (`create --checksum`): bytes changed in a member file behind the array's
//! back (no I/O error) are found on read and rewritten from redundancy on every redundant
//! level (RAID 1, 10, 5, 6), are a read error on linear and RAID 0, and are found by a scrub
//! in blocks nobody read; the count is in `status`. An array without checksums opens as
//! before; a torn update after an unclean shutdown rewrites the checksum, not the data.
//!
//! Seeded: `RAIDKIT_SEED=N cargo test -p volume --test checksum` replays the data patterns.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use ondisk::{create, ChecksumAlg, CreateOptions, FEATURE_INCOMPAT_CHECKSUM};
use volume::{assemble, AssembleOptions, Volume};

const WAIT: Duration = Duration::from_secs(60);
/// Array bytes written and read back by each test.
const SPAN: usize = 1 << 20;
/// The member data-area byte corrupted: the member [`victim`] names holds array byte 12288
/// there on every level.
const AT: u64 = 12288;

/// The member holding array byte `AT` at data-area byte `AT`: member 0 (linear, RAID 0 and 1
/// directly; RAID 10's first pair; RAID 5's stripe 0 has P on its last member), except RAID 6,
/// whose stripe 0 has Q on member 0 (md's left-symmetric) and data chunk 0 on member 1.
fn victim(level: &str) -> usize {
    match level {
        "raid6" => 1,
        _ => 0,
    }
}

fn new_checksummed(dir: &Path, level: &str, count: usize) -> Vec<PathBuf> {
    let paths = files(dir, level, count);
    let mut opts = CreateOptions::new(level.parse().unwrap(), level);
    opts.chunk_bytes = 64 * 1024;
    opts.checksum = Some(ChecksumAlg::Crc32c);
    create(&open_all(&paths), &opts).unwrap();
    paths
}

fn open(paths: &[PathBuf]) -> Volume {
    assemble(open_all(paths), &AssembleOptions::default()).unwrap()
}

/// Changes 3 bytes of `path`'s data area at `offset` behind the array's back; returns the
/// bytes it held.
fn corrupt(path: &Path, offset: u64) -> Vec<u8> {
    let m = open_unheld(path);
    let at = read_sb(path).data_offset_bytes + offset;
    let mut old = vec![0u8; 3];
    m.read_at(&mut old, at).unwrap();
    let new: Vec<u8> = old.iter().map(|b| !b).collect();
    m.write_at(&new, at).unwrap();
    old
}

fn member_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let m = open_unheld(path);
    let mut buf = vec![0u8; len];
    m.read_at(&mut buf, read_sb(path).data_offset_bytes + offset)
        .unwrap();
    buf
}

fn mismatches(v: &Volume) -> u64 {
    v.status().checksum.expect("checksums in status").mismatches
}

/// Writes a pattern, flushes, corrupts the victim member at `AT`; returns the volume, the
/// pattern and the bytes the member held.
fn written(paths: &[PathBuf], level: &str, seed: u64) -> (Volume, Vec<u8>, Vec<u8>) {
    let v = open(paths);
    let data = pattern(SPAN, seed);
    v.write(0, &data).unwrap();
    v.flush().unwrap();
    let old = corrupt(&paths[victim(level)], AT);
    (v, data, old)
}

#[test]
fn create_records_the_area_and_the_feature_bit() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_checksummed(dir.path(), "raid5", 3);
    let sb = read_sb(&paths[0]);
    let at = sb.checksum.expect("a checksum area");
    assert_ne!(sb.feature_incompat & FEATURE_INCOMPAT_CHECKSUM, 0);
    assert_eq!(at.alg, ChecksumAlg::Crc32c);
    // 4 MiB members: 1024 blocks need 4096 bytes; the last metadata area (after the bitmap,
    // the used-regions map and the bad-block list, in metadata_layout's order).
    assert_eq!(at.bytes, 4096);
    let bitmap = sb.bitmap.unwrap();
    let used = sb.used_map.unwrap();
    let bad = sb.bad_blocks.unwrap();
    assert_eq!(used.offset_bytes, bitmap.offset_bytes + bitmap.bytes);
    assert_eq!(bad.offset_bytes, used.offset_bytes + used.bytes);
    assert_eq!(at.offset_bytes, bad.offset_bytes + bad.bytes);
    assert!(at.offset_bytes + at.bytes <= sb.data_offset_bytes);
    // Without --checksum: no area, the bit clear, the bytes zero (old arrays open as before).
    let plain = new_array(dir.path(), "plain", "raid5", 3);
    let sb = read_sb(&plain[0]);
    assert_eq!(sb.checksum, None);
    assert_eq!(sb.feature_incompat & FEATURE_INCOMPAT_CHECKSUM, 0);
    assert_eq!(open(&plain).status().checksum, None);
}

#[test]
fn a_large_member_grows_the_data_offset_to_hold_its_checksums() {
    let dir = tempfile::tempdir().unwrap();
    // 2 GiB sparse members: 2 MiB of checksums each, past the default 1 MiB data offset.
    let paths = sized_files(dir.path(), "big", 2, 2 << 30);
    let mut opts = CreateOptions::new("raid1".parse().unwrap(), "big");
    opts.checksum = Some(ChecksumAlg::Crc32c);
    create(&open_all(&paths), &opts).unwrap();
    let sb = read_sb(&paths[0]);
    let at = sb.checksum.unwrap();
    assert!(at.bytes >= 2 << 20, "{at:?}");
    assert_eq!(sb.data_offset_bytes % (1 << 20), 0);
    assert!(sb.data_offset_bytes >= at.offset_bytes + at.bytes);
    assert!(sb.data_offset_bytes > ondisk::DATA_OFFSET_DEFAULT);
    // A data offset chosen too small is refused, naming the area.
    let paths = sized_files(dir.path(), "small", 2, 2 << 30);
    opts.data_offset_bytes = 2 << 20;
    let e = create(&open_all(&paths), &opts).unwrap_err().to_string();
    assert!(e.contains("checksum") && e.contains("data offset"), "{e}");
}

/// RAID 5 and 6 read a healthy stripe's data chunks only: member 0's corrupt block is read,
/// found, rebuilt from parity and written back; the client gets the right bytes.
#[test]
fn a_read_heals_a_corrupt_block_from_parity() {
    let seed = seed();
    for (level, count) in [("raid5", 3), ("raid6", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let (v, data, old) = written(&paths, level, seed);
        let mut got = vec![0u8; SPAN];
        v.read(0, &mut got).unwrap();
        assert!(got == data, "{level} (seed {seed}): wrong bytes read");
        assert_eq!(mismatches(&v), 1, "{level}");
        v.flush().unwrap();
        assert_eq!(
            member_bytes(&paths[victim(level)], AT, 3),
            old,
            "{level}: member not healed"
        );
        // Read again: nothing left to find.
        v.read(0, &mut got).unwrap();
        assert_eq!(mismatches(&v), 1, "{level}");
        v.close().unwrap();
    }
}

/// Every redundant level: whether a read met the corrupt copy or not, a scrub finds and heals
/// it; the member file holds the right bytes again and one mismatch was counted.
#[test]
fn a_scrub_finds_and_heals_corruption_nobody_read() {
    let seed = seed();
    for (level, count) in [("raid1", 2), ("raid10", 4), ("raid5", 3), ("raid6", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let (v, data, old) = written(&paths, level, seed);
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT), "{level}");
        assert_eq!(mismatches(&v), 1, "{level} (seed {seed})");
        v.flush().unwrap();
        assert_eq!(
            member_bytes(&paths[victim(level)], AT, 3),
            old,
            "{level}: member not healed"
        );
        let mut got = vec![0u8; SPAN];
        v.read(0, &mut got).unwrap();
        assert!(got == data, "{level} (seed {seed}): wrong bytes read");
        // A second scrub finds nothing more.
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT), "{level}");
        assert_eq!(mismatches(&v), 1, "{level}");
        v.close().unwrap();
    }
}

/// RAID 1 and 10: a read that lands on the corrupt copy returns the other copy's bytes and
/// heals it; reads go on until one has (the balance picks the copy).
#[test]
fn mirrors_serve_the_good_copy_and_heal_the_bad_one() {
    let seed = seed();
    for (level, count) in [("raid1", 2), ("raid10", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let (v, data, old) = written(&paths, level, seed);
        let mut got = vec![0u8; 4096];
        for _ in 0..200 {
            v.read(AT, &mut got).unwrap();
            assert!(
                got[..] == data[AT as usize..AT as usize + 4096],
                "{level} (seed {seed})"
            );
            if mismatches(&v) > 0 {
                break;
            }
        }
        if mismatches(&v) == 0 {
            // The balance never chose member 0: the scrub must then find it.
            v.scrub(false).unwrap();
            assert!(v.wait_idle(WAIT));
        }
        assert_eq!(mismatches(&v), 1, "{level}");
        v.flush().unwrap();
        assert_eq!(
            member_bytes(&paths[victim(level)], AT, 3),
            old,
            "{level}: member not healed"
        );
        v.close().unwrap();
    }
}

/// Linear and RAID 0 keep one copy: the corruption is found, the read fails (EIO for a
/// client) rather than returning wrong bytes, and the member keeps what it holds.
#[test]
fn without_redundancy_a_corrupt_block_is_a_read_error() {
    let seed = seed();
    for (level, count) in [("linear", 2), ("raid0", 2)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let (v, data, _) = written(&paths, level, seed);
        let mut got = vec![0u8; 8192];
        let e = v.read(AT - 4096, &mut got).unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{level}: {e}");
        assert!(mismatches(&v) >= 1, "{level}");
        // The blocks around it read fine.
        v.read(0, &mut got).unwrap();
        assert!(got[..] == data[..8192], "{level}");
        // Rewriting the block makes it readable again.
        v.write(AT, &data[AT as usize..AT as usize + 4096]).unwrap();
        v.read(AT - 4096, &mut got).unwrap();
        v.close().unwrap();
    }
}

/// Data written and its checksums flushed survive a close and reopen: every block verifies.
#[test]
fn checksums_persist_across_close_and_reopen() {
    let seed = seed();
    for (level, count) in [("raid0", 2), ("raid5", 3)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let v = open(&paths);
        let data = pattern(SPAN, seed);
        v.write(0, &data).unwrap();
        v.write(5000, &data[..300]).unwrap(); // a partial block
        v.close().unwrap();
        drop(v);
        let v = open(&paths);
        let mut got = vec![0u8; SPAN];
        v.read(0, &mut got).unwrap();
        assert_eq!(&got[5000..5300], &data[..300], "{level}");
        assert_eq!(&got[..5000], &data[..5000], "{level}");
        assert_eq!(&got[5300..], &data[5300..], "{level}");
        assert_eq!(mismatches(&v), 0, "{level}");
        if level == "raid5" {
            // Parity blocks too.
            v.scrub(false).unwrap();
            assert!(v.wait_idle(WAIT));
            assert_eq!(mismatches(&v), 0, "{level}");
        }
        v.close().unwrap();
    }
}

/// A client write smaller than a 4 KiB block into a block changed behind the array's back:
/// the bytes around the write are not taken in under a fresh checksum. A mirror still finds
/// the bad copy (a scrub heals it from the other copy, with the new bytes); linear keeps
/// failing the block's read instead of returning the corrupt bytes (it returned them before).
#[test]
fn a_sub_block_write_does_not_launder_a_corrupt_block() {
    let seed = seed();
    keeps_a_corrupt_block_failing(seed, |v, data| {
        let new = pattern(512, seed + 1);
        v.write(AT + 2048, &new).unwrap();
        data[AT as usize + 2048..][..512].copy_from_slice(&new);
        true
    });
}

/// A trim smaller than a 4 KiB block, inside a block changed behind the array's back: the
/// bytes the trim leaves are not taken in under a fresh checksum. Linear keeps failing the
/// block's read (it returned the corrupt bytes before); a mirror's scrub heals the bad copy.
#[test]
fn a_sub_block_trim_does_not_launder_a_corrupt_block() {
    keeps_a_corrupt_block_failing(seed(), |v, _| {
        v.trim(AT + 2048, 512).unwrap();
        false
    });
}

/// The two tests above: `update` changes part of the block at `AT` (corrupt on the victim
/// member) and the expected array content with it; it returns whether the client's reads of
/// that content are to be checked after the heal.
fn keeps_a_corrupt_block_failing(seed: u64, update: impl Fn(&Volume, &mut [u8]) -> bool) {
    for (level, count) in [("raid1", 2), ("linear", 2)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let (v, mut data, old) = written(&paths, level, seed);
        let check_reads = update(&v, &mut data);
        v.flush().unwrap();
        assert!(
            mismatches(&v) >= 1,
            "{level}: the corrupt block was not noticed"
        );
        let mut got = vec![0u8; 4096];
        if level == "linear" {
            let e = v.read(AT, &mut got).unwrap_err();
            assert!(e.to_string().contains("checksum mismatch"), "{level}: {e}");
            v.close().unwrap();
            continue;
        }
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT));
        v.flush().unwrap();
        assert_eq!(
            member_bytes(&paths[victim(level)], AT, 3),
            old,
            "{level}: member not healed"
        );
        let reads = if check_reads { 20 } else { 0 };
        for _ in 0..reads {
            v.read(AT, &mut got).unwrap();
            assert!(
                got[..] == data[AT as usize..][..4096],
                "{level} (seed {seed})"
            );
        }
        v.close().unwrap();
    }
}

/// A member data-area byte of row 5 (another sync unit than `AT`'s on every level).
const SECOND: u64 = 5 * 64 * 1024 + 4096;

/// The members holding `AT`'s row whose corruption leaves nothing to rebuild it from: both
/// copies (RAID 1, RAID 10's first pair), two of RAID 5's three, three of RAID 6's four.
fn beyond_redundancy(level: &str) -> Vec<usize> {
    match level {
        "raid5" => vec![0, 1],
        "raid6" => vec![1, 2, 3],
        _ => vec![0, 1],
    }
}

/// Every redundant level: a scrub that meets a block every copy (or too many of a stripe's
/// blocks) holds corrupt records it in the bad-block list of each member that holds it wrong,
/// reports where (status `last_scrub.lost`, `bad_blocks`), fails no member, and goes on: a
/// corrupt block in a later unit is still healed and the scrub finishes. Reads of the lost
/// block fail (EIO), every other byte reads back; a write over it clears the records. Before,
/// the repair's retries counted the errors until a member was failed and the scrub stopped.
#[test]
fn a_scrub_records_what_no_copy_can_heal_and_goes_on() {
    let seed = seed();
    for (level, count) in [("raid1", 2), ("raid10", 4), ("raid5", 3), ("raid6", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let v = open(&paths);
        let data = pattern(SPAN, seed);
        v.write(0, &data).unwrap();
        v.flush().unwrap();
        let lost = beyond_redundancy(level);
        for &m in &lost {
            corrupt(&paths[m], AT);
        }
        let old = corrupt(&paths[victim(level)], SECOND);
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT), "{level}");
        let s = v.status();
        let report = s.last_scrub.clone().expect("a scrub report");
        assert!(report.finished, "{level} (seed {seed}): {report:?}");
        assert_eq!(report.units_lost, 1, "{level}: {report:?}");
        assert_eq!(s.health, volume::ArrayHealth::Active, "{level}: {s:?}");
        assert!(
            s.members
                .iter()
                .all(|m| m.state == volume::MemberState::Active),
            "{level}: a member was failed: {:?}",
            s.members
        );
        let mut recorded: Vec<(usize, u64, u64)> = s
            .bad_blocks
            .iter()
            .map(|b| (b.role, b.member_offset, b.len))
            .collect();
        recorded.sort();
        let want: Vec<(usize, u64, u64)> = lost.iter().map(|&r| (r, AT, 4096)).collect();
        assert_eq!(recorded, want, "{level}: recorded ranges");
        let mut listed: Vec<(usize, u64)> = report
            .lost
            .iter()
            .map(|b| (b.role, b.member_offset))
            .collect();
        listed.sort();
        assert_eq!(
            listed,
            lost.iter().map(|&r| (r, AT)).collect::<Vec<_>>(),
            "{level}: the report's locations"
        );
        assert!(
            report.lost.iter().all(|b| b.stripe_array_offset == 0),
            "{level}"
        );
        // The later unit's corruption was found and healed after the lost one.
        v.flush().unwrap();
        assert_eq!(
            member_bytes(&paths[victim(level)], SECOND, 3),
            old,
            "{level}: the scrub did not go on past the lost unit"
        );
        // Reads: exactly the lost array blocks fail, everything else is the data.
        let lost_blocks: Vec<u64> = match level {
            "raid5" | "raid6" => vec![AT, 64 * 1024 + AT],
            _ => vec![AT],
        };
        let mut buf = vec![0u8; 4096];
        for off in (0..SPAN as u64).step_by(4096) {
            match v.read(off, &mut buf) {
                Ok(()) => assert!(
                    buf[..] == data[off as usize..][..4096],
                    "{level} (seed {seed}): block at {off} differs"
                ),
                Err(_) => assert!(lost_blocks.contains(&off), "{level}: block {off} fails"),
            }
        }
        for &off in &lost_blocks {
            assert!(
                v.read(off, &mut buf).is_err(),
                "{level}: lost block {off} read"
            );
        }
        // A write over the stripe makes it valid again.
        v.write(0, &data[..128 * 1024]).unwrap();
        v.flush().unwrap();
        assert_eq!(v.status().bad_blocks, vec![], "{level}: records kept");
        let mut got = vec![0u8; SPAN];
        v.read(0, &mut got).unwrap();
        assert!(
            got == data,
            "{level} (seed {seed}): wrong bytes after the write"
        );
        // A second scrub finds nothing lost.
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT), "{level}");
        let again = v.status().last_scrub.unwrap();
        assert!(
            again.finished && again.units_lost == 0,
            "{level}: {again:?}"
        );
        v.close().unwrap();
    }
}

/// RAID 6 rebuilds two corrupt blocks of one stripe from P and Q (a read error on the second
/// member while the first is rebuilt is not a reason to give up, nor to fail either member).
/// Before, the repair retried the same reconstruction until the errors failed a member.
#[test]
fn raid6_heals_two_corrupt_blocks_of_a_stripe() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_checksummed(dir.path(), "raid6", 4);
    let v = open(&paths);
    let data = pattern(SPAN, seed);
    v.write(0, &data).unwrap();
    v.flush().unwrap();
    let old: Vec<Vec<u8>> = [1, 2].iter().map(|&m| corrupt(&paths[m], AT)).collect();
    let mut got = vec![0u8; SPAN];
    v.read(0, &mut got).unwrap();
    assert!(got == data, "seed {seed}: wrong bytes read");
    let s = v.status();
    assert!(
        s.members
            .iter()
            .all(|m| m.state == volume::MemberState::Active),
        "{:?}",
        s.members
    );
    assert_eq!(s.bad_blocks, vec![]);
    v.flush().unwrap();
    for (i, &m) in [1, 2].iter().enumerate() {
        assert_eq!(
            member_bytes(&paths[m], AT, 3),
            old[i],
            "member {m} not healed"
        );
    }
    v.scrub(false).unwrap();
    assert!(v.wait_idle(WAIT));
    let report = v.status().last_scrub.unwrap();
    assert!(
        report.finished && report.mismatches == 0 && report.units_lost == 0,
        "{report:?}"
    );
    v.close().unwrap();
}

/// After an unclean shutdown, a block corrupted in a unit the resync awaits: the redundancy
/// decides (its version matches the checksum, the member's bytes do not), so the corrupt
/// bytes are replaced, not taken in under a fresh checksum and copied to the other copies or
/// into parity by the resync (which is what happened before: the read returned the corrupt
/// bytes on every redundant level). A block written and not flushed before the cut reads back
/// old or new, never an error.
#[test]
fn after_a_crash_the_redundancy_decides_torn_from_corrupt() {
    let seed = seed();
    for (level, count) in [("raid1", 2), ("raid10", 4), ("raid5", 3), ("raid6", 4)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let old = pattern(SPAN, seed);
        let v = open(&paths);
        v.write(0, &old).unwrap();
        v.close().unwrap();
        // A session that writes (its units dirty in the bitmap) and ends without a close.
        let fresh = pattern(4096, seed ^ 7);
        let unflushed = pattern(4096, seed ^ 9);
        let torn_at = 3 * 64 * 1024 + 8192;
        {
            let v = open(&paths);
            v.write(AT, &fresh).unwrap();
            v.flush().unwrap();
            v.write(torn_at, &unflushed).unwrap();
            drop(v);
        }
        corrupt(&paths[victim(level)], AT);
        let v = open(&paths);
        assert!(v.wait_idle(WAIT), "{level}");
        let mut got = vec![0u8; 4096];
        v.read(AT, &mut got).unwrap();
        assert!(
            got == fresh,
            "{level} (seed {seed}): the corrupt block was kept"
        );
        v.read(torn_at, &mut got).unwrap();
        assert!(
            got == unflushed || got[..] == old[torn_at as usize..][..4096],
            "{level} (seed {seed}): the unflushed block reads neither version"
        );
        let sums = v.status().checksum.unwrap();
        assert!(sums.settled >= 1, "{level}: {sums:?}");
        let mut all = vec![0u8; SPAN];
        v.read(0, &mut all).unwrap();
        assert!(
            all[..AT as usize] == old[..AT as usize],
            "{level} (seed {seed})"
        );
        assert!(v.check().unwrap().is_consistent(), "{level}");
        v.scrub(false).unwrap();
        assert!(v.wait_idle(WAIT), "{level}");
        let report = v.status().last_scrub.unwrap();
        assert!(
            report.finished && report.mismatches == 0,
            "{level}: {report:?}"
        );
        v.close().unwrap();
    }
}

/// Linear and RAID 0 after an unclean shutdown, as DESIGN "Block checksums" states it: the
/// whole next session detects no corruption (a block corrupted before it and read in it
/// returns the corrupt bytes and gets a checksum over them for good, counted as rehashed, not
/// as a mismatch), while a corrupt block not read in that session keeps its checksum and is
/// detected in a later session after a clean close.
#[test]
fn single_copy_levels_detect_nothing_in_the_session_after_a_crash() {
    let seed = seed();
    for (level, count) in [("linear", 2), ("raid0", 2)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let data = pattern(SPAN, seed);
        let v = open(&paths);
        v.write(0, &data).unwrap();
        v.close().unwrap();
        {
            let v = open(&paths);
            v.write(SPAN as u64 / 2, &data[SPAN / 2..][..4096]).unwrap();
            drop(v); // no close: unclean
        }
        // Two blocks of member 0 changed behind the array's back: AT (read in the unclean
        // session) and AT + 8192 (not read there).
        corrupt(&paths[0], AT);
        corrupt(&paths[0], AT + 8192);
        let v = open(&paths);
        let mut got = vec![0u8; 4096];
        v.read(AT, &mut got).unwrap();
        assert!(
            got[..] != data[AT as usize..][..4096],
            "{level}: corrupt bytes expected"
        );
        let sums = v.status().checksum.unwrap();
        assert_eq!(
            (sums.mismatches, sums.rehashed),
            (0, 1),
            "{level}: {sums:?}"
        );
        v.close().unwrap();
        // A later session, after a clean close: the block read while unclean stays accepted;
        // the one not read is detected.
        let v = open(&paths);
        v.read(AT, &mut got).unwrap();
        assert!(got[..] != data[AT as usize..][..4096], "{level}");
        let e = v.read(AT + 8192, &mut got).unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{level}: {e}");
        assert_eq!(v.status().checksum.unwrap().mismatches, 1, "{level}");
        v.close().unwrap();
    }
}

/// A sub-4 KiB write into a block that a crash left unsettled (its unit awaits the resync) and
/// whose kept bytes were corrupted meanwhile: the write must not launder the corruption. Its
/// mismatch is carried (uncounted), so the block's next read asks the redundancy, which
/// received the write too, and the copy or parity that matches wins. Before, the merged
/// content's checksum was stored unchecked and the read returned the corrupt bytes. RAID 1 and
/// RAID 5 of 3 (victim member 0, a block of the fourth unit, which a resync held to 4 KiB/s
/// has not reached).
#[test]
fn a_sub_block_write_into_an_unsettled_block_does_not_launder_it() {
    let seed = seed();
    let chunk = 64 * 1024;
    // (level, count, array offset of member 0's data byte 3 chunks + 8192)
    for (level, count, array_at) in [
        ("raid1", 2, 3 * chunk + 8192),
        ("raid5", 3, 6 * chunk + 8192),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_checksummed(dir.path(), level, count);
        let old = pattern(SPAN, seed);
        let v = open(&paths);
        v.write(0, &old).unwrap();
        v.close().unwrap();
        {
            let v = open(&paths);
            v.write(0, &old[..4096]).unwrap(); // the array dirty, its bitmap region set
            drop(v); // no close: unclean
        }
        let member_at = 3 * chunk + 8192;
        let before = corrupt(&paths[0], member_at + 3000);
        assert_ne!(member_bytes(&paths[0], member_at + 3000, 3), before);
        let slow = AssembleOptions {
            speed_limits: volume::SpeedLimits {
                min_bytes_per_sec: 4096,
                max_bytes_per_sec: 4096,
            },
            ..AssembleOptions::default()
        };
        let v = assemble(open_all(&paths), &slow).unwrap();
        // 512 bytes at the block's start: the corrupt bytes at +3000 are kept by the write.
        let new = pattern(512, seed ^ 11);
        v.write(array_at, &new).unwrap();
        let mut expected = old[array_at as usize..][..4096].to_vec();
        expected[..512].copy_from_slice(&new);
        let mut got = vec![0u8; 4096];
        v.read(array_at, &mut got).unwrap();
        assert!(
            got == expected,
            "{level} (seed {seed}): the corrupt bytes were kept (laundered by the write)"
        );
        v.set_speed_limits(volume::SpeedLimits::default());
        assert!(v.wait_idle(WAIT), "{level}");
        v.read(array_at, &mut got).unwrap();
        assert!(got == expected, "{level} (seed {seed}) after the resync");
        assert!(v.check().unwrap().is_consistent(), "{level}");
        v.close().unwrap();
        assert_eq!(
            member_bytes(&paths[0], member_at + 3000, 3),
            before,
            "{level}: healed"
        );
    }
}
