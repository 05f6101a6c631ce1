//! Bad-block lists (issue 15): a rebuild that meets a range no member can provide records it
//! in the new member's list and finishes; reads of it fail, the rest of the array is intact;
//! a write over it clears the record; on a mirror the other leg serves once it reads again.

mod common;

use std::sync::Arc;

use common::*;
use member::{FaultControl, FaultRule, FaultyMember, Member};
use volume::{assemble, AssembleOptions, MemberState, SpeedLimits, Volume};

const BLOCK: u64 = 4096;

/// The array of `paths` assembled over `FaultyMember`s, and their controls.
fn assemble_faulty(paths: &[std::path::PathBuf]) -> (Volume, Vec<FaultControl>) {
    let faulty: Vec<FaultyMember> = open_all(paths).into_iter().map(FaultyMember::new).collect();
    let controls: Vec<_> = faulty.iter().map(|f| f.control()).collect();
    let members: Vec<Arc<dyn Member>> = faulty.into_iter().map(|f| Arc::new(f) as _).collect();
    let v = assemble(members, &AssembleOptions::default()).unwrap();
    v.set_speed_limits(SpeedLimits {
        min_bytes_per_sec: 1 << 30,
        max_bytes_per_sec: 1 << 30,
    });
    (v, controls)
}

/// Fails role `dead`, makes `[lost, lost + BLOCK)` of `source`'s data area unreadable, adds a
/// spare and waits for its rebuild to end. Returns the spare.
fn rebuild_over_a_bad_range(
    v: &Volume,
    controls: &[FaultControl],
    dir: &std::path::Path,
    dead: usize,
    source: usize,
    lost: u64,
    data_offset: u64,
) -> Arc<dyn Member> {
    rebuild_with_more_lost(v, controls, dir, &[dead], source, lost, data_offset)
}

/// [`rebuild_over_a_bad_range`] with every role of `dead` failed first; the spare rebuilds
/// `dead[0]`.
fn rebuild_with_more_lost(
    v: &Volume,
    controls: &[FaultControl],
    dir: &std::path::Path,
    dead: &[usize],
    source: usize,
    lost: u64,
    data_offset: u64,
) -> Arc<dyn Member> {
    for &d in dead {
        v.fail_member(d);
    }
    let dead = dead[0];
    controls[source].fail_reads(FaultRule::Range {
        offset: data_offset + lost,
        len: BLOCK,
    });
    let spare = open_all(&sized_files(dir, "spare", 1, MEMBER_BYTES)).remove(0);
    v.add(Arc::clone(&spare)).unwrap();
    let done = wait_for(60, || {
        let s = v.status();
        s.task.is_none() && s.members[dead].state == MemberState::Active
    });
    assert!(done, "the rebuild did not finish: {:?}", v.status());
    spare
}

/// Array blocks whose data `role` holds at data-area bytes `[at, at + BLOCK)`.
fn blocks_held(v: &Volume, role: usize, at: u64) -> Vec<u64> {
    let g = v.geometry();
    (0..g.size_bytes() / BLOCK)
        .map(|b| b * BLOCK)
        .filter(|&off| {
            g.locate(off)
                .iter()
                .any(|a| a.role == role && (at..at + BLOCK).contains(&a.member_offset))
        })
        .collect()
}

/// Reads the array block by block: the blocks that fail, and checks every other one against
/// `want`.
fn failing_blocks(v: &Volume, want: &[u8]) -> Vec<u64> {
    let mut failed = Vec::new();
    let mut buf = vec![0u8; BLOCK as usize];
    for off in (0..v.size_bytes()).step_by(BLOCK as usize) {
        match v.read(off, &mut buf) {
            Ok(()) => assert!(
                buf[..] == want[off as usize..][..BLOCK as usize],
                "array block at {off} differs"
            ),
            Err(_) => failed.push(off),
        }
    }
    failed
}

fn list_on(m: &dyn Member) -> Vec<(u64, u64)> {
    let sb = ondisk::read_superblock(m).unwrap();
    let list = ondisk::badblocks::read_list(m, &sb.array_uuid, &sb.bad_blocks.unwrap()).unwrap();
    list.ranges().iter().map(|r| (r.offset, r.len)).collect()
}

#[test]
fn a_raid5_rebuild_records_an_unreadable_range_and_a_full_stripe_write_clears_it() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "bb", "raid5", 3);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    let mut data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    let chunk = v.chunk_bytes();
    let lost = 5 * chunk + 3 * BLOCK;
    let spare = rebuild_over_a_bad_range(&v, &controls, dir.path(), 2, 0, lost, data_offset);

    let status = v.status();
    assert_eq!(status.bad_blocks.len(), 1, "{:?}", status.bad_blocks);
    let bad = &status.bad_blocks[0];
    assert_eq!((bad.role, bad.member_offset, bad.len), (2, lost, BLOCK));
    assert_eq!(bad.member, spare.name());
    assert_eq!(
        list_on(spare.as_ref()),
        [(lost, BLOCK)],
        "durable on the new member"
    );
    // Exactly the blocks of that row on the unreadable source and the lost target fail.
    let mut expected = blocks_held(&v, 0, lost);
    expected.extend(blocks_held(&v, 2, lost));
    expected.sort();
    assert_eq!(expected.len(), 1, "one of the two holds parity in that row");
    assert_eq!(bad.array_offset, blocks_held(&v, 2, lost).first().copied());
    for _ in 0..3 {
        assert_eq!(failing_blocks(&v, &data), expected, "RAIDKIT_SEED={seed}");
    }
    assert_eq!(
        v.status().members[0].state,
        MemberState::Active,
        "the source stays"
    );

    // A full-stripe write (nothing read) makes the row valid: the record is cleared.
    let unit = v.geometry().unit_bytes();
    let stripe = bad.stripe_array_offset;
    let fresh = pattern(unit as usize, seed ^ 1);
    v.write(stripe, &fresh).unwrap();
    data[stripe as usize..][..unit as usize].copy_from_slice(&fresh);
    assert!(
        v.status().bad_blocks.is_empty(),
        "{:?}",
        v.status().bad_blocks
    );
    assert!(list_on(spare.as_ref()).is_empty(), "cleared on disk");
    controls[0].heal();
    assert!(failing_blocks(&v, &data).is_empty(), "RAIDKIT_SEED={seed}");
    assert_eq!(v.check().unwrap().mismatch_count, 0, "parity right");
    v.close().unwrap();
}

/// RAID 1 with one leg left, rebuilding onto a spare, meets an unreadable range: recorded on
/// the spare. `heal_first`: the leg reads again before anyone reads the range (the other leg
/// then serves it, and the read's repair clears the record); else reads fail (the leg's range
/// is recorded too) until a write clears both.
fn mirror_with_one_leg_left(heal_first: bool) {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "bm", "raid1", 2);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    let data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    let lost = 300 * BLOCK;
    let spare = rebuild_over_a_bad_range(&v, &controls, dir.path(), 1, 0, lost, data_offset);
    assert_eq!(list_on(spare.as_ref()), [(lost, BLOCK)]);
    let shown: Vec<_> = (v.status().bad_blocks.iter())
        .map(|b| (b.role, b.member_offset, b.len, b.array_offset))
        .collect();
    assert_eq!(shown, [(1, lost, BLOCK, Some(lost))]);
    if heal_first {
        controls[0].heal();
        let mut buf = vec![0u8; BLOCK as usize];
        for _ in 0..8 {
            v.read(lost, &mut buf).unwrap();
            assert!(buf[..] == data[lost as usize..][..BLOCK as usize]);
        }
        assert!(failing_blocks(&v, &data).is_empty(), "RAIDKIT_SEED={seed}");
    } else {
        for _ in 0..3 {
            assert_eq!(failing_blocks(&v, &data), [lost], "RAIDKIT_SEED={seed}");
        }
        let on_leg: Vec<_> = v.status().bad_blocks.iter().map(|b| b.role).collect();
        assert_eq!(on_leg, [0, 1], "the unreadable leg's range is recorded too");
        v.write(lost, &data[lost as usize..][..BLOCK as usize])
            .unwrap();
        controls[0].heal();
        assert!(failing_blocks(&v, &data).is_empty(), "RAIDKIT_SEED={seed}");
    }
    let status = v.status();
    assert!(status.bad_blocks.is_empty(), "{:?}", status.bad_blocks);
    assert!(list_on(spare.as_ref()).is_empty());
    assert!(
        status
            .members
            .iter()
            .all(|m| m.state == MemberState::Active)
            && status.members[1].read_errors == 0,
        "recorded ranges are not counted as read errors: {:?}",
        status.members
    );
    v.close().unwrap();
}

#[test]
fn a_mirror_rebuild_with_one_leg_left_records_the_range_and_reads_of_it_fail() {
    mirror_with_one_leg_left(false);
}

#[test]
fn a_recorded_range_on_one_mirror_leg_is_served_by_the_other() {
    mirror_with_one_leg_left(true);
}

#[test]
fn without_a_list_the_rebuild_fails_on_the_range_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let level = "raid1".parse().unwrap();
    let paths = sized_files(dir.path(), "nl", 2, MEMBER_BYTES);
    let members = open_all(&paths);
    let mut opts = ondisk::CreateOptions::new(level, "nl");
    opts.bad_blocks = false;
    ondisk::create(&members, &opts).unwrap();
    drop(members);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    v.write(0, &pattern(v.size_bytes() as usize, 7)).unwrap();
    v.fail_member(1);
    controls[0].fail_reads(FaultRule::Range {
        offset: data_offset + 40 * BLOCK,
        len: BLOCK,
    });
    let spare = open_all(&sized_files(dir.path(), "spare", 1, MEMBER_BYTES)).remove(0);
    v.add(spare).unwrap();
    let stopped = wait_for(60, || v.status().task.is_none());
    assert!(stopped);
    let s = v.status();
    assert_ne!(s.members[1].state, MemberState::Active, "{s:?}");
    assert!(s.bad_blocks.is_empty());
    assert!(ondisk::read_superblock(open_all(&paths[..1])[0].as_ref())
        .unwrap()
        .bad_blocks
        .is_none());
}

/// A replace of a member whose list records a range that the others cannot provide either
/// (the RAID 5 rebuild above left role 2 with a recorded range whose row is unreadable on role
/// 0): the copy records the range on the new member and finishes (before, every step over it
/// failed and the replace never ended); the record goes with the role, and exactly the same
/// blocks fail afterwards.
#[test]
fn a_replace_carries_an_unprovidable_range_to_the_new_member() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "br", "raid5", 3);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    let data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    let lost = 5 * v.chunk_bytes() + 3 * BLOCK;
    let spare = rebuild_over_a_bad_range(&v, &controls, dir.path(), 2, 0, lost, data_offset);
    assert_eq!(list_on(spare.as_ref()), [(lost, BLOCK)]);
    let mut expected = blocks_held(&v, 0, lost);
    expected.extend(blocks_held(&v, 2, lost));
    expected.sort();
    assert_eq!(failing_blocks(&v, &data), expected, "RAIDKIT_SEED={seed}");

    let new = open_all(&sized_files(dir.path(), "new", 1, MEMBER_BYTES)).remove(0);
    v.replace(spare.name(), Arc::clone(&new)).unwrap();
    let done = wait_for(60, || {
        let s = v.status();
        s.task.is_none() && s.members[2].name == new.name()
    });
    assert!(done, "the replace did not finish: {:?}", v.status());
    assert_eq!(
        list_on(new.as_ref()),
        [(lost, BLOCK)],
        "recorded on the new member, durably"
    );
    let on_new: Vec<_> = (v.status().bad_blocks.iter())
        .filter(|b| b.role == 2)
        .map(|b| (b.member.clone(), b.member_offset, b.len))
        .collect();
    assert_eq!(on_new, [(new.name().to_string(), lost, BLOCK)]);
    assert_eq!(failing_blocks(&v, &data), expected, "RAIDKIT_SEED={seed}");
    controls[0].heal();
    v.close().unwrap();
}

/// RAID 6 with two members lost and one spare: the rebuild meets a range a third member
/// cannot read, records it on the spare and finishes; exactly the blocks of that row held by
/// the unreadable, the lost and the still missing role fail; a full-stripe write clears it.
#[test]
fn a_raid6_rebuild_with_two_lost_records_an_unreadable_range() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "b6", "raid6", 4);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    let mut data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    let lost = 7 * v.chunk_bytes() + 2 * BLOCK;
    let spare = rebuild_with_more_lost(&v, &controls, dir.path(), &[2, 3], 0, lost, data_offset);
    assert_eq!(
        list_on(spare.as_ref()),
        [(lost, BLOCK)],
        "RAIDKIT_SEED={seed}"
    );
    let bad = v.status().bad_blocks;
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!((bad[0].role, bad[0].member_offset), (2, lost));
    let mut expected: Vec<u64> = [0, 2, 3]
        .iter()
        .flat_map(|&r| blocks_held(&v, r, lost))
        .collect();
    expected.sort();
    assert!(
        !expected.is_empty(),
        "two of the four hold P and Q in that row"
    );
    assert_eq!(failing_blocks(&v, &data), expected, "RAIDKIT_SEED={seed}");
    let unit = v.geometry().unit_bytes();
    let stripe = bad[0].stripe_array_offset;
    let fresh = pattern(unit as usize, seed ^ 1);
    v.write(stripe, &fresh).unwrap();
    data[stripe as usize..][..unit as usize].copy_from_slice(&fresh);
    assert!(list_on(spare.as_ref()).is_empty(), "cleared on disk");
    controls[0].heal();
    assert!(failing_blocks(&v, &data).is_empty(), "RAIDKIT_SEED={seed}");
    v.close().unwrap();
}

/// RAID 10 (two pairs): the rebuild of a leg whose partner cannot read a range records it on
/// the spare; only that block fails; the other pair is untouched; a write clears it.
#[test]
fn a_raid10_rebuild_records_the_range_its_partner_cannot_read() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "b10", "raid10", 4);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    let data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    let lost = 9 * v.chunk_bytes() + BLOCK;
    let spare = rebuild_over_a_bad_range(&v, &controls, dir.path(), 1, 0, lost, data_offset);
    assert_eq!(
        list_on(spare.as_ref()),
        [(lost, BLOCK)],
        "RAIDKIT_SEED={seed}"
    );
    let expected = blocks_held(&v, 1, lost);
    assert_eq!(
        expected,
        blocks_held(&v, 0, lost),
        "partners hold the same rows"
    );
    assert_eq!(expected.len(), 1);
    assert_eq!(failing_blocks(&v, &data), expected, "RAIDKIT_SEED={seed}");
    let at = expected[0] as usize;
    v.write(expected[0], &data[at..at + BLOCK as usize])
        .unwrap();
    assert!(list_on(spare.as_ref()).is_empty(), "cleared on disk");
    controls[0].heal();
    assert!(failing_blocks(&v, &data).is_empty(), "RAIDKIT_SEED={seed}");
    v.close().unwrap();
}

/// RAID 5 with five members (a small write is a read-modify-write there): a rebuild records a
/// lost data block on the spare (its row's parity unreadable on the source). A 4 KiB write of
/// exactly that block is then planned again as a reconstruct-write (the old data is gone; it
/// failed with EIO before, as a read of it), succeeds, clears the record, and reads back.
#[test]
fn a_small_raid5_write_over_a_lost_block_clears_it() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "bw", "raid5", 5);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    let mut data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    let chunk = v.chunk_bytes();
    // A row where role 4 holds data and another role its parity (the unreadable source).
    let (lost, parity_role) = (1..16)
        .map(|row| row * chunk + 2 * BLOCK)
        .find_map(|lost| {
            let p = (0..4).find(|&r| blocks_held(&v, r, lost).is_empty())?;
            Some((lost, p))
        })
        .expect("a row with its parity off role 4");
    let spare =
        rebuild_over_a_bad_range(&v, &controls, dir.path(), 4, parity_role, lost, data_offset);
    assert_eq!(
        list_on(spare.as_ref()),
        [(lost, BLOCK)],
        "RAIDKIT_SEED={seed}"
    );
    let at = blocks_held(&v, 4, lost)[0];
    assert_eq!(failing_blocks(&v, &data), [at], "RAIDKIT_SEED={seed}");
    let fresh = pattern(BLOCK as usize, seed ^ 7);
    v.write(at, &fresh).unwrap();
    data[at as usize..][..BLOCK as usize].copy_from_slice(&fresh);
    assert!(list_on(spare.as_ref()).is_empty(), "cleared on disk");
    assert!(
        v.status().bad_blocks.is_empty(),
        "{:?}",
        v.status().bad_blocks
    );
    assert!(failing_blocks(&v, &data).is_empty(), "RAIDKIT_SEED={seed}");
    controls[parity_role].heal();
    assert_eq!(v.check().unwrap().mismatch_count, 0, "parity right");
    v.close().unwrap();
}

/// The record is durable before the rebuild can pass it: on the spare, the bad-block list's
/// write is flushed (or written durably) before the rebuild writes on and before any later
/// superblock write (the rebuild's checkpoint of its recovery offset, its end), so no crash can leave a superblock saying the
/// range was rebuilt while the list does not name it. Checked on the spare's calls in order.
#[test]
fn the_record_is_durable_before_the_rebuild_goes_past_it() {
    use member::{Call, Hooked, Op};
    use std::sync::Mutex;
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "bo", "raid1", 2);
    let data_offset = read_sb(&paths[0]).data_offset_bytes;
    let (v, controls) = assemble_faulty(&paths);
    let data = pattern(v.size_bytes() as usize, seed);
    v.write(0, &data).unwrap();
    let lost = 200 * BLOCK;
    v.fail_member(1);
    controls[0].fail_reads(member::FaultRule::Range {
        offset: data_offset + lost,
        len: BLOCK,
    });
    let calls: Arc<Mutex<Vec<(Op, u64)>>> = Arc::default();
    let log = Arc::clone(&calls);
    let file = open_all(&sized_files(dir.path(), "spare", 1, MEMBER_BYTES)).remove(0);
    let spare: Arc<dyn Member> = Arc::new(Hooked::new(file, move |c: &Call| {
        log.lock().unwrap().push((c.op, c.offset));
        Ok(())
    }));
    v.add(Arc::clone(&spare)).unwrap();
    let done = wait_for(60, || {
        let s = v.status();
        s.task.is_none() && s.members[1].state == MemberState::Active
    });
    assert!(done, "the rebuild did not finish: {:?}", v.status());
    assert_eq!(list_on(spare.as_ref()), [(lost, BLOCK)]);
    let area = ondisk::read_superblock(spare.as_ref())
        .unwrap()
        .bad_blocks
        .unwrap();
    let calls = calls.lock().unwrap().clone();
    let in_list = |at: u64| (area.offset_bytes..area.offset_bytes + area.bytes).contains(&at);
    let superblock = |at: u64| at < ondisk::DATA_OFFSET_DEFAULT && !in_list(at) && at < 8192;
    // The list write that recorded the range: the last list write before its content held it
    // is not observable here, so every list write after the spare's first data write counts.
    let first_data = (calls.iter())
        .position(|&(op, at)| op == Op::Write && at >= data_offset)
        .expect("the rebuild wrote data");
    let record = (calls.iter().enumerate().skip(first_data))
        .find(|(_, &(op, at))| matches!(op, Op::Write | Op::WriteDurable) && in_list(at))
        .map(|(i, &(op, _))| (i, op))
        .expect("the list was written during the rebuild");
    let durable_at = match record.1 {
        Op::WriteDurable => record.0,
        _ => (calls.iter().enumerate().skip(record.0))
            .find(|(_, &(op, _))| op == Op::Flush)
            .map(|(i, _)| i)
            .expect("the list write was flushed"),
    };
    let next_superblock = (calls.iter().enumerate().skip(record.0))
        .find(|(_, &(op, at))| matches!(op, Op::Write | Op::WriteDurable) && superblock(at))
        .map(|(i, _)| i)
        .expect("the rebuild's end wrote the superblock");
    // The step goes on (its next piece is written) only once the record is durable.
    let next_data = (calls.iter().enumerate().skip(record.0))
        .find(|(_, &(op, at))| op == Op::Write && at >= data_offset)
        .map_or(usize::MAX, |(i, _)| i);
    assert!(
        durable_at < next_data,
        "list written at call {}, durable at {durable_at}, the rebuild wrote on at {next_data}",
        record.0
    );
    assert!(
        durable_at < next_superblock,
        "list written at call {}, durable at {durable_at}, superblock written at \
         {next_superblock}: {:?}",
        record.0,
        &calls[record.0..=next_superblock.max(durable_at)]
    );
    controls[0].heal();
    v.close().unwrap();
}

/// A scrub that meets rows no member can read (the same range unreadable on both RAID 1 legs,
/// on two of RAID 5's three members) records the range in each of those members' lists,
/// reports it (`last_scrub.lost`: role, member, member offset, array offset), fails no member
/// and finishes; exactly those blocks fail to read, the rest of the array reads back; once the
/// members read again, a write over the stripe clears the records. Before, the repair retried
/// until the counted read errors failed a member, and the scrub stopped without a report.
#[test]
fn a_scrub_records_rows_no_member_can_read_and_finishes() {
    let seed = seed();
    for (level, count) in [("raid1", 2), ("raid5", 3)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_array(dir.path(), "sc", level, count);
        let data_offset = read_sb(&paths[0]).data_offset_bytes;
        let (v, controls) = assemble_faulty(&paths);
        let data = pattern(v.size_bytes() as usize, seed);
        v.write(0, &data).unwrap();
        v.flush().unwrap();
        let lost = 5 * v.chunk_bytes() + 3 * BLOCK;
        for c in &controls[..2] {
            c.fail_reads(FaultRule::Range {
                offset: data_offset + lost,
                len: BLOCK,
            });
        }
        v.scrub(false).unwrap();
        assert!(v.wait_idle(std::time::Duration::from_secs(60)), "{level}");
        let s = v.status();
        let report = s.last_scrub.clone().expect("a scrub report");
        assert!(report.finished, "{level} (seed {seed}): {report:?}");
        assert_eq!(report.units_lost, 1, "{level}: {report:?}");
        assert!(
            s.members.iter().all(|m| m.state == MemberState::Active),
            "{level}: {:?}",
            s.members
        );
        let mut listed: Vec<_> = (report.lost.iter())
            .map(|b| (b.role, b.member_offset, b.len))
            .collect();
        listed.sort();
        assert_eq!(listed, [(0, lost, BLOCK), (1, lost, BLOCK)], "{level}");
        for b in &report.lost {
            assert_eq!(
                b.array_offset,
                blocks_held(&v, b.role, lost).first().copied()
            );
            assert_eq!(b.member, s.members[b.role].name);
        }
        assert_eq!(
            list_on(open_unheld(&paths[0]).as_ref()),
            [(lost, BLOCK)],
            "durable"
        );
        assert_eq!(
            list_on(open_unheld(&paths[1]).as_ref()),
            [(lost, BLOCK)],
            "durable"
        );
        let mut expected = blocks_held(&v, 0, lost);
        expected.extend(blocks_held(&v, 1, lost));
        expected.sort();
        expected.dedup();
        assert_eq!(
            failing_blocks(&v, &data),
            expected,
            "{level} RAIDKIT_SEED={seed}"
        );
        // The members read again; a write over the unit clears the records.
        for c in &controls {
            c.heal();
        }
        let unit = v.geometry().unit_bytes();
        let stripe = report.lost[0].stripe_array_offset;
        v.write(stripe, &data[stripe as usize..][..unit as usize])
            .unwrap();
        v.flush().unwrap();
        assert!(
            v.status().bad_blocks.is_empty(),
            "{level}: {:?}",
            v.status().bad_blocks
        );
        assert!(
            failing_blocks(&v, &data).is_empty(),
            "{level} RAIDKIT_SEED={seed}"
        );
        assert_eq!(v.check().unwrap().mismatch_count, 0, "{level}");
        v.close().unwrap();
    }
}

/// The repair's recording (`heal_or_record`) meets a member whose bad-block list cannot be
/// written: that member is failed, as a rebuild's recording fails its new member, and the
/// other member that cannot read the rows records them. Before, the list write's error was
/// ignored: the member stayed active, its reads of the range kept failing and counting, and
/// nothing was reported for it.
#[test]
fn a_list_that_cannot_be_written_fails_the_member_the_repair_records_on() {
    let seed = seed();
    for (level, count) in [("raid1", 2), ("raid5", 3)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = new_array(dir.path(), "lw", level, count);
        let sb = read_sb(&paths[0]);
        let list = sb.bad_blocks.expect("a bad-block list");
        let (v, controls) = assemble_faulty(&paths);
        let data = pattern(v.size_bytes() as usize, seed);
        v.write(0, &data).unwrap();
        v.flush().unwrap();
        let lost = 5 * v.chunk_bytes() + 3 * BLOCK;
        for c in &controls[..2] {
            c.fail_reads(FaultRule::Range {
                offset: sb.data_offset_bytes + lost,
                len: BLOCK,
            });
        }
        controls[0].fail_writes(FaultRule::Range {
            offset: list.offset_bytes,
            len: list.bytes,
        });
        v.scrub(false).unwrap();
        assert!(v.wait_idle(std::time::Duration::from_secs(60)), "{level}");
        let s = v.status();
        assert_eq!(
            s.members[0].state,
            MemberState::Faulty,
            "{level} (seed {seed}): the member whose list cannot be written: {:?}",
            s.members
        );
        assert_eq!(s.members[1].state, MemberState::Active, "{level}");
        assert_eq!(
            list_on(open_unheld(&paths[1]).as_ref()),
            [(lost, BLOCK)],
            "{level}: the other member records the rows"
        );
        let mut expected = blocks_held(&v, 1, lost);
        expected.sort();
        assert_eq!(
            failing_blocks(&v, &data),
            expected,
            "{level} RAIDKIT_SEED={seed}"
        );
        v.close().unwrap();
    }
}
