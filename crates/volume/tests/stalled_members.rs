//! Members stuck inside a call (`member::Detached` over a member that does not answer) cost a
//! client request its own deadline — members stuck in one batch time out together — plus at
//! most the quarter-timeout grace of a stuck member first called after that deadline; never a
//! fresh timeout for work the request hands to other threads (the superblock writes recording
//! a fault, the write-intent bitmap's blocks). Issue 10 item 4.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sized_files;
use member::{Detached, FaultControl, FaultyMember, Member, OpenOptions};
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions, MemberState, Volume, VolumeError};

const MEMBER_BYTES: u64 = 8 << 20;
const TIMEOUT: Duration = Duration::from_millis(800);
/// Longer than any test here runs: a stuck call returns only after the test has judged it.
const STALL: Duration = Duration::from_secs(30);

/// A RAID 10 of four file members, each behind a fault injector and `Detached` with
/// [`TIMEOUT`]; the volume's request deadline is [`TIMEOUT`] too.
fn raid10(dir: &std::path::Path, bitmap: bool) -> (Volume, Vec<FaultControl>) {
    four_members(dir, "raid10", bitmap, TIMEOUT)
}

/// An array of `level` over four members as [`raid10`] builds them, with `timeout`.
fn four_members(
    dir: &std::path::Path,
    level: &str,
    bitmap: bool,
    timeout: Duration,
) -> (Volume, Vec<FaultControl>) {
    let opts = OpenOptions {
        exclusive: false,
        ..OpenOptions::default()
    };
    let files: Vec<Arc<dyn Member>> = sized_files(dir, "m", 4, MEMBER_BYTES)
        .iter()
        .map(|path| member::open(path.to_str().unwrap(), &opts).unwrap())
        .collect();
    let mut create_opts = CreateOptions::new(level.parse().unwrap(), "stalled");
    create_opts.chunk_bytes = 64 * 1024;
    if !bitmap {
        create_opts.bitmap_region_bytes = None;
    }
    create(&files, &create_opts).unwrap();
    let mut controls = Vec::new();
    let members: Vec<Arc<dyn Member>> = files
        .into_iter()
        .map(|file| {
            let faulty = FaultyMember::new(file);
            controls.push(faulty.control());
            Arc::new(Detached::new(Arc::new(faulty), timeout)) as Arc<dyn Member>
        })
        .collect();
    let volume = assemble(members, &AssembleOptions::default()).unwrap();
    volume.set_fault_policy(engine::FaultPolicy {
        io_timeout: timeout,
        ..engine::FaultPolicy::default()
    });
    (volume, controls)
}

/// Stalls the members of `roles`, then writes `data` at `offset`: the result and how long the
/// write took.
fn write_with_stalled(
    volume: &Volume,
    controls: &[FaultControl],
    roles: &[usize],
    offset: u64,
    data: &[u8],
) -> (Result<(), VolumeError>, Duration) {
    for &role in roles {
        controls[role].set_delay(STALL);
    }
    let started = Instant::now();
    let result = volume.write(offset, data);
    (result, started.elapsed())
}

/// The members of `roles` were failed.
fn assert_faulty(volume: &Volume, roles: &[usize]) {
    let status = volume.status();
    for &role in roles {
        assert_eq!(
            status.members[role].state,
            MemberState::Faulty,
            "{status:?}"
        );
    }
}

/// `data` reads back at `offset`.
fn assert_reads_back(volume: &Volume, offset: u64, data: &[u8]) {
    let mut back = vec![0u8; data.len()];
    volume.read(offset, &mut back).unwrap();
    assert!(back == data, "the data read back at {offset} differs");
}

/// One stuck member in the write itself (role 0, its copy on role 1 answers), another stuck
/// member (role 2, in the other mirror pair) met only by the superblock write that records the
/// first one's fault: the request costs one deadline and one grace, not two timeouts. (Before
/// the superblock writes carried the request's deadline, role 2's superblock write had a
/// timeout of its own: 2 × TIMEOUT.)
#[test]
fn a_member_stuck_at_the_superblock_write_costs_the_request_no_second_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, controls) = raid10(dir.path(), true);
    let data = vec![0xa5u8; 4096];
    // Healthy first write: the superblocks say dirty and the region's bit is durable, so the
    // write below touches no superblock or bitmap before its data.
    volume.write(0, &data).unwrap();

    let (result, waited) = write_with_stalled(&volume, &controls, &[0, 2], 0, &data);
    result.expect("served by role 0's copy on role 1");

    assert_faulty(&volume, &[0, 2]);
    assert!(
        waited < TIMEOUT + TIMEOUT / 4 + TIMEOUT / 4,
        "the write waited {waited:?}: more than one timeout ({TIMEOUT:?}) and one grace"
    );
    assert_reads_back(&volume, 0, &data);
}

/// Both stuck members met by the write-intent bitmap's block write (a new region's first
/// write): the bitmap writes run on threads of their own, which carry the request's deadline,
/// and the data write that follows meets members already known not to answer (a wedged
/// `Detached` refuses at once) instead of waiting again.
#[test]
fn members_stuck_at_the_bitmap_write_cost_the_request_one_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, controls) = raid10(dir.path(), true);
    let data = vec![0x5au8; 4096];
    volume.write(0, &data).unwrap();

    // A region far from the first one: its bit is not set yet.
    let far = volume.size_bytes() - 4096;
    let (result, waited) = write_with_stalled(&volume, &controls, &[0, 2], far, &data);

    assert!(
        waited < TIMEOUT + TIMEOUT / 4 + TIMEOUT / 4,
        "the write waited {waited:?} ({result:?}): more than one timeout ({TIMEOUT:?}) and one \
         grace"
    );
    assert_faulty(&volume, &[0, 2]);
}

/// Two stuck members in one batch: a full-stripe write of a RAID 6 of four reaches every member
/// at once. The batch's calls are all handed out before any is waited for (`Member::start`), so
/// the two stuck ones time out together at the request's deadline: one timeout. (When the
/// batch's calls were made one after the other, the second stuck member's call started at the
/// deadline and took its quarter-timeout grace: 1.25 timeouts.) A longer timeout than the
/// other tests' leaves the superblock writes after the deadline room on a loaded machine.
#[test]
fn two_members_stuck_in_one_batch_cost_the_request_one_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let (volume, controls) = four_members(dir.path(), "raid6", true, TIMEOUT);
    // One full stripe: two data chunks of 64 KiB, P and Q.
    let data: Vec<u8> = (0..128 * 1024).map(|i| (i % 251) as u8).collect();
    volume.write(0, &data).unwrap();

    let (result, waited) = write_with_stalled(&volume, &controls, &[1, 2], 0, &data);
    result.expect("RAID 6 serves with two members stuck");

    assert_faulty(&volume, &[1, 2]);
    assert!(
        waited < TIMEOUT + TIMEOUT / 8,
        "the write waited {waited:?}: more than one timeout ({TIMEOUT:?})"
    );
    assert_reads_back(&volume, 0, &data);
}
